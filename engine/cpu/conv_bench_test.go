package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// BenchmarkConv2d times the convolution kernels at the Fashion-MNIST
// CNN's two layers (batch 64) and a ResNet layer, each beside the GEMMs
// alone at the same shapes on columns made beforehand (one product per
// sample, the samples shared among the threads, as the kernel runs
// them): the kernel's GFLOP/s over the GEMMs' is the share of the
// machine's GEMM rate for these shapes that the convolution reaches.
//
//	go test -run '^$' -bench Conv2d ./engine/cpu
func BenchmarkConv2d(b *testing.B) {
	// New resolves the choice of GEMM: with the engine's kernels the
	// pool's workers poll between loops, and a loop's second thread starts
	// at once rather than after a parked worker's wake-up (about 100 µs on
	// a VM, a third of a product here).
	d := New(Options{})
	b.Log(blas.Info())
	for _, tc := range []struct {
		name string
		g    device.WindowGeom
		o    int
	}{
		{"cnn-conv1", device.WindowGeom{N: 64, C: 1, H: 28, W: 28, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 28, OW: 28}, 16},
		{"cnn-conv2", device.WindowGeom{N: 64, C: 16, H: 14, W: 14, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 14, OW: 14}, 32},
		{"resnet-stem", device.WindowGeom{N: 32, C: 3, H: 32, W: 32, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 32, OW: 32}, 16},
		{"resnet-16", device.WindowGeom{N: 32, C: 16, H: 32, W: 32, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 32, OW: 32}, 16},
		{"resnet-32", device.WindowGeom{N: 32, C: 32, H: 16, W: 16, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 16, OW: 16}, 32},
		{"resnet-down", device.WindowGeom{N: 32, C: 16, H: 32, W: 32, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 16, OW: 16}, 32},
		{"patch4", device.WindowGeom{N: 32, C: 16, H: 32, W: 32, KH: 4, KW: 4, SH: 4, SW: 4, DH: 1, DW: 1, OH: 8, OW: 8}, 32},
		{"k4s2", device.WindowGeom{N: 32, C: 16, H: 32, W: 32, KH: 4, KW: 4, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 16, OW: 16}, 32},
		{"k3s3", device.WindowGeom{N: 32, C: 16, H: 33, W: 33, KH: 3, KW: 3, SH: 3, SW: 3, DH: 1, DW: 1, OH: 11, OW: 11}, 32},
		{"resnet-shortcut", device.WindowGeom{N: 32, C: 16, H: 32, W: 32, KH: 1, KW: 1, SH: 2, SW: 2, DH: 1, DW: 1, OH: 16, OW: 16}, 32},
	} {
		g, o := tc.g, tc.o
		ck, l := g.C*g.KH*g.KW, g.OH*g.OW
		r := rand.New(rand.NewPCG(1, 2))
		x := newOperand(b, d, dtype.Float32, []int{g.N, g.C, g.H, g.W}, randn(r, g.N*g.C*g.H*g.W, 1, dtype.Float32), contiguous)
		w := newOperand(b, d, dtype.Float32, []int{o, ck}, randn(r, o*ck, 1, dtype.Float32), contiguous)
		dy := newOperand(b, d, dtype.Float32, []int{g.N, o, l}, randn(r, g.N*o*l, 1, dtype.Float32), contiguous)
		y := emptyOperand(b, d, dtype.Float32, dy.Shape, contiguous)
		dx := emptyOperand(b, d, dtype.Float32, x.Shape, contiguous)
		dw := emptyOperand(b, d, dtype.Float32, w.Shape, contiguous)
		cols := emptyOperand(b, d, dtype.Float32, []int{g.N, ck, l}, contiguous)
		if err := d.Unfold(cols, x, g); err != nil {
			b.Fatal(err)
		}
		dcols := emptyOperand(b, d, dtype.Float32, cols.Shape, contiguous)
		flops := 2 * float64(g.N) * float64(o) * float64(ck) * float64(l)
		report := func(b *testing.B, products int) {
			b.ReportMetric(float64(products)*flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		// perSample runs fn(n) for every sample, the samples shared among
		// the threads.
		perSample := func(fn func(n int)) {
			parallel.For(g.N, 1, func(lo, hi int) {
				for n := lo; n < hi; n++ {
					fn(n)
				}
			})
		}
		wv, dyv, cv, yv, dcv := rowsOf[float32](w), rowsOf[float32](dy), rowsOf[float32](cols), rowsOf[float32](y), rowsOf[float32](dcols)
		dwParts := make([]float32, g.N*o*ck)
		for _, run := range []struct {
			name     string
			products int
			fn       func() error
		}{
			{"forward", 1, func() error { return d.Conv2d(y, x, w, device.View{}, g) }},
			{"forward-gemm", 1, func() error {
				perSample(func(n int) {
					gemm.SgemmSerial(false, false, o, l, ck, 1, wv, ck, cv[n*ck*l:], l, 0, yv[n*o*l:], l)
				})
				return nil
			}},
			{"backward", 2, func() error { return d.Conv2dBackward(dx, dw, device.View{}, dy, x, w, g) }},
			{"backward-dx", 1, func() error { return d.Conv2dBackward(dx, device.View{}, device.View{}, dy, x, w, g) }},
			{"backward-dw", 1, func() error { return d.Conv2dBackward(device.View{}, dw, device.View{}, dy, x, w, g) }},
			{"backward-gemm", 2, func() error {
				perSample(func(n int) {
					gemm.SgemmSerial(false, true, o, ck, l, 1, dyv[n*o*l:], l, cv[n*ck*l:], l, 0, dwParts[n*o*ck:], ck)
					gemm.SgemmSerial(true, false, ck, l, o, 1, wv, ck, dyv[n*o*l:], l, 0, dcv[n*ck*l:], l)
				})
				return nil
			}},
		} {
			b.Run(fmt.Sprintf("%s/%s", tc.name, run.name), func(b *testing.B) {
				for b.Loop() {
					if err := run.fn(); err != nil {
						b.Fatal(err)
					}
				}
				report(b, run.products)
			})
		}
	}
}
