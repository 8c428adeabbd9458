package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// TestDivByScalarIsTrueDivision: a float32 tensor divided by a broadcast
// scalar (DDP's bucket.div_(world_size), x / 255) is a true division on
// every route, the small in-line loop, the vectorised one with its tails
// and the strided walk: each element is the correctly rounded quotient,
// never the product with a reciprocal (x/3 and x·(1/3) differ in about a
// third of the elements).
func TestDivByScalarIsTrueDivision(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 8, 9, 31, 33, 1000, grain + 5, 3*grain + 17} {
		for _, l := range []layout{contiguous, strided} {
			for _, s := range []float64{3, 2, -0.7, 255} {
				t.Run(fmt.Sprintf("n=%d/%v/s=%g", n, l, s), func(t *testing.T) {
					xs := randn(r, n, 10, dtype.Float32)
					x := newOperand(t, d, dtype.Float32, []int{n}, xs, l)
					sv := newOperand(t, d, dtype.Float32, []int{1}, []float64{s}, contiguous)
					sv.Shape, sv.Strides = []int{n}, []int{0}
					y := emptyOperand(t, d, dtype.Float32, []int{n}, l)
					if err := d.Binary(device.Div, y, x, sv); err != nil {
						t.Fatal(err)
					}
					got := values(t, d, y)
					for i, v := range xs {
						if want := float32(v) / float32(s); math.Float32bits(float32(got[i])) != math.Float32bits(want) {
							t.Fatalf("[%d] = %g / %g: got %g, want %g", i, v, s, got[i], want)
						}
					}
				})
			}
		}
	}
}
