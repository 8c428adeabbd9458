package blas

import (
	"fmt"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

var benchShapes = []struct {
	name    string
	m, n, k int
}{
	{"256x256x256", 256, 256, 256},
	{"1024x1024x1024", 1024, 1024, 1024},
	{"4096x1024x1024", 4096, 1024, 1024},
}

// BenchmarkSgemm compares the two implementations through the dispatcher,
// in GFLOP/s, at 1 and 2 threads:
//
//	go test -run '^$' -bench . ./engine/cpu/blas
func BenchmarkSgemm(b *testing.B) {
	for _, mode := range []string{"go", "cblas"} {
		for _, s := range benchShapes {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d", mode, s.name, threads), func(b *testing.B) {
					benchMode(b, mode, threads)
					x, y, z := data(s.m*s.k), data(s.k*s.n), make([]float32, s.m*s.n)
					b.ResetTimer()
					for b.Loop() {
						Sgemm(false, false, s.m, s.n, s.k, 1, x, s.k, y, s.n, 0, z, s.n)
					}
					report(b, 2*float64(s.m)*float64(s.n)*float64(s.k))
				})
			}
		}
	}
}

// BenchmarkSgemmBatchedAttention runs one attention layer's batched
// products (32 heads, T = 128, d = 64) in each mode; mode cblas-loop forces
// one cblas_sgemm per product, the alternative the dispatcher rejects for
// products this small.
func BenchmarkSgemmBatchedAttention(b *testing.B) {
	const heads, t, d = 32, 128, 64
	for _, mode := range []string{"go", "cblas", "cblas-loop"} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/32x128x64x128/threads=%d", mode, threads), func(b *testing.B) {
				m := mode
				if m == "cblas-loop" {
					m = "cblas"
				}
				benchMode(b, m, threads)
				q, k, v := data(heads*t*d), data(heads*t*d), data(heads*t*d)
				s, o := make([]float32, heads*t*t), make([]float32, heads*t*d)
				l := current().lib
				b.ResetTimer()
				for b.Loop() {
					if mode != "cblas-loop" {
						SgemmBatched(heads, false, true, t, t, d, 0.125, q, d, t*d, k, d, t*d, 0, s, t, t*t)
						SgemmBatched(heads, false, false, t, d, t, 1, s, t, t*t, v, d, t*d, 0, o, d, t*d)
						continue
					}
					unlock := lock(l)
					for h := 0; h < heads; h++ {
						l.Sgemm(false, true, t, t, d, 0.125, q[h*t*d:], d, k[h*t*d:], d, 0, s[h*t*t:], t)
					}
					for h := 0; h < heads; h++ {
						l.Sgemm(false, false, t, d, t, 1, s[h*t*t:], t, v[h*t*d:], d, 0, o[h*t*d:], d)
					}
					unlock()
				}
				report(b, 2*2*heads*float64(t*t*d))
			})
		}
	}
}

// BenchmarkSgemmSmall finds the crossover below which the Go kernels beat
// a CBLAS call.
func BenchmarkSgemmSmall(b *testing.B) {
	for _, n := range []int{16, 32, 48, 64, 96, 128} {
		for _, mode := range []string{"go", "cblas"} {
			b.Run(fmt.Sprintf("%s/%d/threads=2", mode, n), func(b *testing.B) {
				benchMode(b, mode, 2)
				x, z := data(n*n), make([]float32, n*n)
				l := current().lib
				b.ResetTimer()
				for b.Loop() {
					if l == nil {
						Sgemm(false, false, n, n, n, 1, x, n, x, n, 0, z, n)
						continue
					}
					// Straight to the library, below the dispatcher's
					// crossover.
					unlock := lock(l)
					l.Sgemm(false, false, n, n, n, 1, x, n, x, n, 0, z, n)
					unlock()
				}
				report(b, 2*float64(n*n*n))
			})
		}
	}
}

// BenchmarkSgemmBatchedCrossover compares, per product size, a batch of 8
// run by the Go batched kernel and by one CBLAS call per product.
func BenchmarkSgemmBatchedCrossover(b *testing.B) {
	const batch = 8
	for _, n := range []int{64, 128, 192, 256, 384} {
		for _, mode := range []string{"go", "cblas"} {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%dx%d/threads=%d", mode, batch, n, threads), func(b *testing.B) {
					benchMode(b, mode, threads)
					x, z := data(batch*n*n), make([]float32, batch*n*n)
					l := current().lib
					b.ResetTimer()
					for b.Loop() {
						if l == nil {
							SgemmBatched(batch, false, false, n, n, n, 1, x, n, n*n, x, n, n*n, 0, z, n, n*n)
							continue
						}
						unlock := lock(l)
						for i := 0; i < batch; i++ {
							l.Sgemm(false, false, n, n, n, 1, x[i*n*n:], n, x[i*n*n:], n, 0, z[i*n*n:], n)
						}
						unlock()
					}
					report(b, 2*batch*float64(n*n*n))
				})
			}
		}
	}
}

// benchMode selects mode (skipping when CBLAS is wanted and missing) and
// the thread count for one benchmark.
func benchMode(b *testing.B, mode string, threads int) {
	if err := Use(mode); err != nil {
		b.Skip(err)
	}
	parallel.SetThreads(threads)
	b.Cleanup(func() {
		Use("auto")
		parallel.SetThreads(0)
	})
}

func data(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%13)/13 - 0.5
	}
	return x
}

func report(b *testing.B, flops float64) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
