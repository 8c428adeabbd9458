package cpu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// TestFillRow: every element gets v's exact bits, at every width, for
// lengths around fillRow's block, whether v is zero bits (cleared) or not
// (a block copied over the row); the elements past the row keep theirs.
func TestFillRow(t *testing.T) {
	lengths := []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 2048, 3*2048 + 5}
	t.Run("uint8", func(t *testing.T) { checkFillRow(t, lengths, []uint8{0, 1, 0x80, 0xff}) })
	t.Run("uint16", func(t *testing.T) { checkFillRow(t, lengths, []uint16{0, 1, 0x8000, 0x3f80}) })
	t.Run("uint32", func(t *testing.T) {
		checkFillRow(t, lengths, []uint32{0, 1, math.Float32bits(float32(math.Copysign(0, -1))), math.Float32bits(float32(math.NaN())), 0xdeadbeef})
	})
	t.Run("uint64", func(t *testing.T) {
		checkFillRow(t, lengths, []uint64{0, 1, math.Float64bits(math.Copysign(0, -1)), 0x0123456789abcdef})
	})
}

func checkFillRow[T elemBits](t *testing.T, lengths []int, values []T) {
	for _, n := range lengths {
		for _, v := range values {
			const guard = 3
			buf := make([]T, n+guard)
			for i := range buf {
				buf[i] = ^v // neither v nor, for v == 0, zero
			}
			fillRow(buf[:n], v)
			for i, got := range buf {
				want := v
				if i >= n {
					want = ^v
				}
				if got != want {
					t.Fatalf("n=%d v=%#x: element %d is %#x, want %#x", n, v, i, got, want)
				}
			}
		}
	}
}

// TestFillKeepsBits: Device.Fill writes the value's bits in the dtype,
// -0 as -0 (not the zero bits clear writes), into contiguous, strided and
// offset views, and nothing outside them.
func TestFillKeepsBits(t *testing.T) {
	d := New(Options{})
	negZero := math.Copysign(0, -1)
	cases := []struct {
		dt      dtype.DType
		value   float64
		shape   []int
		strides []int
		offset  int
	}{
		{dtype.Float32, 0, []int{1000}, []int{1}, 3},
		{dtype.Float32, negZero, []int{1000}, []int{1}, 3},
		{dtype.Float32, 2.5, []int{64, 513}, []int{513, 1}, 0},
		{dtype.Float32, negZero, []int{40, 30}, []int{1, 40}, 0}, // transposed
		{dtype.Float32, 7, []int{300}, []int{2}, 1},              // every other element
		{dtype.BFloat16, negZero, []int{5000}, []int{1}, 1},
		{dtype.Float64, negZero, []int{777}, []int{1}, 0},
		{dtype.Int64, -3, []int{700}, []int{1}, 0},
		{dtype.Uint8, 0, []int{4097}, []int{1}, 2},
		{dtype.Bool, 1, []int{100}, []int{1}, 0},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v_%v_%v_%v", c.dt, c.value, c.shape, c.strides), func(t *testing.T) {
			span := c.offset + 1
			for i, e := range c.shape {
				span += (e - 1) * c.strides[i]
			}
			span += 2 // elements past the view
			buf, err := d.Alloc(c.dt, span)
			if err != nil {
				t.Fatal(err)
			}
			whole := device.View{Buf: buf, DType: c.dt, Shape: []int{span}, Strides: []int{1}}
			poison(t, d, whole)
			before := rawBits(t, d, whole)
			v := device.View{Buf: buf, DType: c.dt, Offset: c.offset, Shape: c.shape, Strides: c.strides}
			if err := d.Fill(v, c.value); err != nil {
				t.Fatal(err)
			}
			after := rawBits(t, d, whole)
			es := c.dt.Size()
			want := elementBits(c.dt, c.value)
			inView := make([]bool, span)
			forEach(c.shape, func(pos []int, _ int) {
				o := c.offset
				for i, p := range pos {
					o += p * c.strides[i]
				}
				inView[o] = true
			})
			for i := range span {
				got := after[i*es : (i+1)*es]
				exp := before[i*es : (i+1)*es]
				if inView[i] {
					exp = want
				}
				if !bytes.Equal(got, exp) {
					t.Fatalf("element %d: bits %x, want %x (in the view: %v)", i, got, exp, inView[i])
				}
			}
		})
	}
}

// elementBits is x's little-endian bytes in dt, as a kernel stores them.
func elementBits(dt dtype.DType, x float64) []byte {
	b := make([]byte, 8)
	switch dt {
	case dtype.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(x)))
	case dtype.BFloat16:
		binary.LittleEndian.PutUint16(b, uint16(math.Float32bits(float32(x))>>16))
	case dtype.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(x))
	case dtype.Int64:
		binary.LittleEndian.PutUint64(b, uint64(int64(x)))
	case dtype.Uint8, dtype.Bool:
		b[0] = uint8(x)
	default:
		panic(fmt.Sprint("elementBits: ", dt))
	}
	return b[:dt.Size()]
}

// TestCopyBFloat16 converts float32 to bfloat16 and back on the vector
// route (contiguous) and the strided loop, at lengths around the kernels'
// 16-element vectors, with NaNs, infinities, zeros and ties, and expects
// dtype's conversions bit for bit.
func TestCopyBFloat16(t *testing.T) {
	d := New(Options{})
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1.00390625, 1.01171875, 0x1p-130}
	for _, n := range []int{1, 15, 16, 17, 100, grain + 3} {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(float32(math.Sin(float64(i)) * 100))
			if i%5 == 0 {
				x[i] = specials[i%len(specials)]
			}
		}
		for _, l := range []layout{contiguous, strided} {
			src := newOperand(t, d, dtype.Float32, []int{n}, x, l)
			bf := emptyOperand(t, d, dtype.BFloat16, []int{n}, l)
			if err := d.Copy(bf, src); err != nil {
				t.Fatal(err)
			}
			back := emptyOperand(t, d, dtype.Float32, []int{n}, l)
			if err := d.Copy(back, bf); err != nil {
				t.Fatal(err)
			}
			got := values(t, d, back)
			for i, v := range x {
				want := dtype.BF16FromFloat32(float32(v)).Float32()
				if math.Float32bits(float32(got[i])) != math.Float32bits(want) && !(math.IsNaN(got[i]) && want != want) {
					t.Fatalf("n=%d %v [%d] %g: %g, want %g", n, l, i, v, got[i], want)
				}
			}
			raw := rawBits(t, d, contiguousCopy(t, d, bf))
			for i, v := range x {
				want := uint16(dtype.BF16FromFloat32(float32(v)))
				if g := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8; g != want {
					t.Fatalf("n=%d %v [%d] %g: bits %#04x, want %#04x", n, l, i, v, g, want)
				}
			}
		}
	}
}
