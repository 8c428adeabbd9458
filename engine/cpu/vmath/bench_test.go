package vmath

import (
	"fmt"
	"testing"
)

// Benchmarks: every kernel, every variant this CPU runs, on 4K, 1M and 16M
// elements (16 KiB per slice: in L1, the kernels' compute speed; 4 MiB and
// 64 MiB: beyond L2, the sizes of real activations and parameter sets),
// next to copy of the same bytes as the memory-bandwidth yardstick. Bytes
// are those read plus those written; ns/elem is reported for all.
//
//	go test -run '^$' -bench . -benchtime 1s ./engine/cpu/vmath

var benchSizes = []struct {
	name string
	n    int
}{{"4K", 1 << 12}, {"1M", 1 << 20}, {"16M", 1 << 24}}

func benchVariants(b *testing.B, bytesPerElem int, fn func(n int) func()) {
	for _, sz := range benchSizes {
		run := fn(sz.n)
		for _, k := range variants {
			b.Run(k.name+"/"+sz.name, func(b *testing.B) {
				if run == nil {
					b.Skip("size smaller than one row")
				}
				defer useVariant(k)()
				b.SetBytes(int64(bytesPerElem * sz.n))
				for b.Loop() {
					run()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(sz.n), "ns/elem")
			})
		}
	}
}

func benchInputs(n int, scale float64) []float32 { return newRand(uint64(n)).slice(n, scale) }

func BenchmarkCopy(b *testing.B) {
	for _, sz := range benchSizes {
		x, y := benchInputs(sz.n, 1), make([]float32, sz.n)
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(8 * sz.n))
			for b.Loop() {
				copy(y, x)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(sz.n), "ns/elem")
		})
	}
}

func benchUnary(b *testing.B, f func(dst, x []float32), scale float64) {
	benchVariants(b, 8, func(n int) func() {
		x, y := benchInputs(n, scale), make([]float32, n)
		return func() { f(y, x) }
	})
}

func benchBackward(b *testing.B, f func(dx, dy, x []float32)) {
	benchVariants(b, 12, func(n int) func() {
		x, dy, dx := benchInputs(n, 2), benchInputs(n, 1), make([]float32, n)
		return func() { f(dx, dy, x) }
	})
}

func BenchmarkExp(b *testing.B)      { benchUnary(b, Exp, 5) }
func BenchmarkLog(b *testing.B)      { benchUnary(b, Log, 5) }
func BenchmarkTanh(b *testing.B)     { benchUnary(b, Tanh, 2) }
func BenchmarkSigmoid(b *testing.B)  { benchUnary(b, Sigmoid, 3) }
func BenchmarkErf(b *testing.B)      { benchUnary(b, Erf, 1) }
func BenchmarkGelu(b *testing.B)     { benchUnary(b, Gelu, 2) }
func BenchmarkGeluTanh(b *testing.B) { benchUnary(b, GeluTanh, 2) }
func BenchmarkSilu(b *testing.B)     { benchUnary(b, Silu, 2) }
func BenchmarkRelu(b *testing.B)     { benchUnary(b, Relu, 2) }

func BenchmarkGeluBackward(b *testing.B)     { benchBackward(b, GeluBackward) }
func BenchmarkGeluTanhBackward(b *testing.B) { benchBackward(b, GeluTanhBackward) }
func BenchmarkSiluBackward(b *testing.B)     { benchBackward(b, SiluBackward) }

func BenchmarkAdd(b *testing.B) {
	benchVariants(b, 12, func(n int) func() {
		x, y, z := benchInputs(n, 1), benchInputs(n, 1), make([]float32, n)
		return func() { Add(z, x, y) }
	})
}

func BenchmarkMul(b *testing.B) {
	benchVariants(b, 12, func(n int) func() {
		x, y, z := benchInputs(n, 1), benchInputs(n, 1), make([]float32, n)
		return func() { Mul(z, x, y) }
	})
}

func BenchmarkAxpy(b *testing.B) {
	benchVariants(b, 12, func(n int) func() {
		x, y := benchInputs(n, 1), benchInputs(n, 1)
		return func() { Axpy(y, 1e-7, x) }
	})
}

var sink float64

func BenchmarkSum(b *testing.B) {
	benchVariants(b, 4, func(n int) func() {
		x := benchInputs(n, 1)
		return func() { sink += float64(Sum(x)) }
	})
}

func BenchmarkDot(b *testing.B) {
	benchVariants(b, 8, func(n int) func() {
		x, y := benchInputs(n, 1), benchInputs(n, 1)
		return func() { sink += float64(Dot(x, y)) }
	})
}

func BenchmarkMax(b *testing.B) {
	benchVariants(b, 4, func(n int) func() {
		x := benchInputs(n, 1)
		return func() { sink += float64(Max(x)) }
	})
}

// The row kernels run over n elements as rows of the given length (1024:
// an MLP width; 50304: a GPT-2 vocabulary padded to a multiple of 64).
func benchRows(b *testing.B, row int, f func(dst, x []float32)) {
	benchVariants(b, 8, func(n int) func() {
		if n < row {
			return nil
		}
		x, y := benchInputs(n, 3), make([]float32, n)
		return func() {
			for lo := 0; lo+row <= n; lo += row {
				f(y[lo:lo+row], x[lo:lo+row])
			}
		}
	})
}

func BenchmarkSoftmaxRow(b *testing.B) {
	for _, row := range []int{1024, 50304} {
		b.Run(fmt.Sprint(row), func(b *testing.B) { benchRows(b, row, SoftmaxRow) })
	}
}

func BenchmarkLogSoftmaxRow(b *testing.B) {
	for _, row := range []int{1024, 50304} {
		b.Run(fmt.Sprint(row), func(b *testing.B) { benchRows(b, row, LogSoftmaxRow) })
	}
}

func BenchmarkSoftmaxBackwardRow(b *testing.B) {
	benchVariants(b, 12, func(n int) func() {
		y, dy, dx := benchInputs(n, 1), benchInputs(n, 1), make([]float32, n)
		return func() {
			for lo := 0; lo+1024 <= n; lo += 1024 {
				SoftmaxBackwardRow(dx[lo:lo+1024], dy[lo:lo+1024], y[lo:lo+1024])
			}
		}
	})
}

func BenchmarkLayerNormRow(b *testing.B) {
	benchVariants(b, 8, func(n int) func() {
		x, y := benchInputs(n, 1), make([]float32, n)
		w, bb := benchInputs(1024, 1), benchInputs(1024, 1)
		return func() {
			for lo := 0; lo+1024 <= n; lo += 1024 {
				LayerNormRow(y[lo:lo+1024], x[lo:lo+1024], w, bb, 1e-5)
			}
		}
	})
}

// The optimizer steps read p, g, m, v and write p, m, v: 28 bytes/elem.
func BenchmarkAdamWStep(b *testing.B) {
	benchVariants(b, 28, func(n int) func() {
		p, g, m, v := benchInputs(n, 1), benchInputs(n, 1), make([]float32, n), make([]float32, n)
		return func() { AdamWStep(p, g, m, v, nil, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1, 0.001, false) }
	})
}

func BenchmarkAdamStep(b *testing.B) {
	benchVariants(b, 28, func(n int) func() {
		p, g, m, v := benchInputs(n, 1), benchInputs(n, 1), make([]float32, n), make([]float32, n)
		return func() { AdamStep(p, g, m, v, nil, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1, 0.001, false) }
	})
}

// SGD with momentum reads p, g, buf and writes p, buf: 20 bytes/elem.
func BenchmarkSGDStep(b *testing.B) {
	benchVariants(b, 20, func(n int) func() {
		p, g, buf := benchInputs(n, 1), benchInputs(n, 1), make([]float32, n)
		return func() { SGDStep(p, g, buf, 1e-3, 0.9, 0, 0, false, false, false) }
	})
}
