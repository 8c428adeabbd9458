package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

func filledView(t *testing.T, d *Device, r *rand.Rand, shape ...int) (device.View, []float32) {
	t.Helper()
	n := 1
	for _, s := range shape {
		n *= s
	}
	buf, err := d.Alloc(dtype.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	v := device.View{Buf: buf, DType: dtype.Float32, Shape: shape, Strides: device.ContiguousStrides(shape)}
	s := elems[float32](buf)[:n]
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return v, s
}

// TestReduceSum covers every path of the float32 sum (rows, columns, all,
// mixed, strided) against a float64 reference, with a bound relative to
// Σ|x| that a 64-term float32 sum meets.
func TestReduceSum(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(5, 6))
	cases := []struct {
		shape, keep []int // keep: dst extents (1 where reduced)
		transpose   bool  // reduce a transposed view of the input
	}{
		{[]int{7, 300}, []int{7, 1}, false},
		{[]int{300, 7}, []int{1, 7}, false},
		{[]int{5000, 33}, []int{1, 33}, false},
		{[]int{3, 1000, 2}, []int{3, 1, 2}, false},
		{[]int{4, 5, 6}, []int{1, 5, 1}, false},
		{[]int{70000}, []int{1}, false},
		{[]int{2, 3, 4}, []int{1, 1, 1}, false},
		{[]int{130, 9}, []int{9, 1}, true}, // a [9, 130] view with strides [1, 9]
		{[]int{9, 130}, []int{1, 9}, true}, // a [130, 9] view with strides [1, 130]
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.shape, c.keep, c.transpose), func(t *testing.T) {
			src, data := filledView(t, d, r, c.shape...)
			if c.transpose {
				src.Shape = []int{c.shape[1], c.shape[0]}
				src.Strides = []int{1, c.shape[1]}
			}
			dst, _ := filledView(t, d, r, c.keep...)
			if err := d.Reduce(device.Sum, dst, src); err != nil {
				t.Fatal(err)
			}
			got := elems[float32](dst.Buf)
			// Reference: walk every element with its coordinates.
			want := make([]float64, len(got))
			abs := make([]float64, len(got))
			shape := src.Shape
			idx := make([]int, len(shape))
			for n := 0; n < len(data); n++ {
				off, out, stride := 0, 0, 1
				for k := len(shape) - 1; k >= 0; k-- {
					off += idx[k] * src.Strides[k]
					if c.keep[k] != 1 {
						out += idx[k] * stride
						stride *= c.keep[k]
					}
				}
				want[out] += float64(data[off])
				abs[out] += math.Abs(float64(data[off]))
				for k := len(shape) - 1; k >= 0; k-- {
					if idx[k]++; idx[k] < shape[k] {
						break
					}
					idx[k] = 0
				}
			}
			for i := range want {
				if math.Abs(float64(got[i])-want[i]) > 64*0x1p-24*abs[i]+1e-6 {
					t.Fatalf("[%d] = %v, want %v (Σ|x| %v)", i, got[i], want[i], abs[i])
				}
			}
		})
	}
}
