package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// bnRef is batch norm from its definition in float64 on [N, C, S]: the
// statistics, the output and, for dy, the gradients (training uses the
// batch's statistics, evaluation treats them as constants).
func bnRef(x, w, b, dy []float64, n, c, s int, eps float64, training bool) (mean, varSum, y, dx, dw, db []float64) {
	mean, varSum = make([]float64, c), make([]float64, c)
	y, dx, dw, db = make([]float64, len(x)), make([]float64, len(x)), make([]float64, c), make([]float64, c)
	cnt := float64(n * s)
	at := func(i, ch, j int) int { return (i*c+ch)*s + j }
	for ch := range c {
		for i := range n {
			for j := range s {
				mean[ch] += x[at(i, ch, j)]
			}
		}
		mean[ch] /= cnt
		for i := range n {
			for j := range s {
				d := x[at(i, ch, j)] - mean[ch]
				varSum[ch] += d * d
			}
		}
		is := 1 / math.Sqrt(varSum[ch]/cnt+eps)
		var sum, dot float64
		for i := range n {
			for j := range s {
				k := at(i, ch, j)
				xh := (x[k] - mean[ch]) * is
				y[k] = xh*w[ch] + b[ch]
				sum += dy[k]
				dot += dy[k] * xh
			}
		}
		db[ch], dw[ch] = sum, dot
		for i := range n {
			for j := range s {
				k := at(i, ch, j)
				g := dy[k]
				if training {
					xh := (x[k] - mean[ch]) * is
					g -= (sum + xh*dot) / cnt
				}
				dx[k] = g * is * w[ch]
			}
		}
	}
	return mean, varSum, y, dx, dw, db
}

// TestBatchNormKernel: device.BatchNormer's statistics, output and
// gradients against the definition, in float32 (the vectorised loops,
// with their tails) and float64, for planes of 1 to 1,024 elements, in
// training and evaluation.
func TestBatchNormKernel(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(7, 8))
	const eps = 1e-5
	for _, sh := range [][3]int{{2, 3, 1}, {3, 2, 7}, {4, 5, 33}, {5, 3, 1024}, {1, 2, 100}} {
		n, c, s := sh[0], sh[1], sh[2]
		for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
			for _, training := range []bool{true, false} {
				t.Run(fmt.Sprintf("%dx%dx%d/%v/training=%v", n, c, s, dt, training), func(t *testing.T) {
					xs := randn(r, n*c*s, 2, dt)
					for i := range xs {
						xs[i] = roundTo(dt, xs[i]+3) // a mean away from zero
					}
					ws, bs, dys := randn(r, c, 1, dt), randn(r, c, 1, dt), randn(r, n*c*s, 1, dt)
					mean, varSum, wantY, wantDx, wantDw, wantDb := bnRef(xs, ws, bs, dys, n, c, s, eps, training)
					shape := []int{n, c, s}
					x := newOperand(t, d, dt, shape, xs, contiguous)

					mv := emptyOperand(t, d, dtype.Float64, []int{c}, contiguous)
					vv := emptyOperand(t, d, dtype.Float64, []int{c}, contiguous)
					if err := d.BatchNormStats(mv, vv, x); err != nil {
						t.Fatal(err)
					}
					assertClose(t, "mean", values(t, d, mv), mean, 1e-12)
					assertClose(t, "varSum", values(t, d, vv), varSum, 1e-12)

					// The kernels take the statistics in x's type, as the
					// layer rounds them.
					invstd := make([]float64, c)
					for ch := range c {
						invstd[ch] = roundTo(dt, 1/math.Sqrt(varSum[ch]/float64(n*s)+eps))
					}
					meanT := make([]float64, c)
					for ch := range c {
						meanT[ch] = roundTo(dt, mean[ch])
					}
					m := newOperand(t, d, dt, []int{c}, meanT, contiguous)
					is := newOperand(t, d, dt, []int{c}, invstd, contiguous)
					w := newOperand(t, d, dt, []int{c}, ws, contiguous)
					b := newOperand(t, d, dt, []int{c}, bs, contiguous)
					y := emptyOperand(t, d, dt, shape, contiguous)
					poison(t, d, y)
					if err := d.BatchNorm(y, x, m, is, w, b); err != nil {
						t.Fatal(err)
					}
					tol := 10 * tolerance(dt)
					assertClose(t, "y", values(t, d, y), wantY, tol)

					dy := newOperand(t, d, dt, shape, dys, contiguous)
					dx := emptyOperand(t, d, dt, shape, contiguous)
					dw := emptyOperand(t, d, dt, []int{c}, contiguous)
					db := emptyOperand(t, d, dt, []int{c}, contiguous)
					for _, v := range []device.View{dx, dw, db} {
						poison(t, d, v)
					}
					if err := d.BatchNormBackward(dx, dw, db, dy, x, m, is, w, training); err != nil {
						t.Fatal(err)
					}
					// The sums grow with N·S: compare them relative to
					// their size.
					assertClose(t, "dx", values(t, d, dx), wantDx, tol)
					assertClose(t, "dw", values(t, d, dw), wantDw, tol*math.Sqrt(float64(n*s)))
					assertClose(t, "db", values(t, d, db), wantDb, tol*math.Sqrt(float64(n*s)))
				})
			}
		}
	}
}
