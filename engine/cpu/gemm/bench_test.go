package gemm

import (
	"fmt"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// The benchmark shapes: square products, a tall one (a 4096-token batch
// through a 1024×1024 layer), and the batched attention products of one
// GPT layer (32 heads, T = 128, head dimension 64: scores Q·Kᵀ and
// weighted values P·V).
var benchShapes = []struct {
	name    string
	m, n, k int
}{
	{"256x256x256", 256, 256, 256},
	{"1024x1024x1024", 1024, 1024, 1024},
	{"4096x1024x1024", 4096, 1024, 1024},
}

// BenchmarkSgemm reports GFLOP/s for each kernel usable on this machine
// at 1 and 2 threads: go test -bench Sgemm -run '^$' ./engine/cpu/gemm
func BenchmarkSgemm(b *testing.B) {
	for _, kern := range kernelNames() {
		for _, s := range benchShapes {
			if kern == "go" && s.m*s.n*s.k > 1<<30 {
				continue // minutes at the portable kernel's speed
			}
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d", kern, s.name, threads), func(b *testing.B) {
					restore, err := useKernel(kern)
					if err != nil {
						b.Fatal(err)
					}
					defer restore()
					parallel.SetThreads(threads)
					defer parallel.SetThreads(0)
					x := benchData(s.m * s.k)
					y := benchData(s.k * s.n)
					z := make([]float32, s.m*s.n)
					b.ResetTimer()
					for b.Loop() {
						Sgemm(false, false, s.m, s.n, s.k, 1, x, s.k, y, s.n, 0, z, s.n)
					}
					reportFlops(b, 2*float64(s.m)*float64(s.n)*float64(s.k))
				})
			}
		}
	}
}

// BenchmarkSgemmBatchedAttention is one attention layer's two batched
// products for 32 heads: S = Q·Kᵀ (128×64 · 64×128) and O = P·V
// (128×128 · 128×64).
func BenchmarkSgemmBatchedAttention(b *testing.B) {
	const heads, t, d = 32, 128, 64
	for _, kern := range kernelNames() {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/32x128x64x128/threads=%d", kern, threads), func(b *testing.B) {
				restore, err := useKernel(kern)
				if err != nil {
					b.Fatal(err)
				}
				defer restore()
				parallel.SetThreads(threads)
				defer parallel.SetThreads(0)
				q, k, v := benchData(heads*t*d), benchData(heads*t*d), benchData(heads*t*d)
				s := make([]float32, heads*t*t)
				o := make([]float32, heads*t*d)
				b.ResetTimer()
				for b.Loop() {
					SgemmBatched(heads, false, true, t, t, d, 0.125, q, d, t*d, k, d, t*d, 0, s, t, t*t)
					SgemmBatched(heads, false, false, t, d, t, 1, s, t, t*t, v, d, t*d, 0, o, d, t*d)
				}
				reportFlops(b, 2*2*heads*float64(t*t*d))
			})
		}
	}
}

// BenchmarkDgemm reports float64 speed at 256³ (gradient-check sizes).
func BenchmarkDgemm(b *testing.B) {
	const n = 256
	x := make([]float64, n*n)
	for i := range x {
		x[i] = float64(i%7) - 3
	}
	z := make([]float64, n*n)
	for b.Loop() {
		Dgemm(false, false, n, n, n, 1, x, n, x, n, 0, z, n)
	}
	reportFlops(b, 2*n*n*n)
}

func benchData(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%13)/13 - 0.5
	}
	return x
}

func reportFlops(b *testing.B, flops float64) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkSgemmLinear reports GFLOP/s for the three products of a
// Linear layer of the mlp workload (batch 256, 4096 → 4096): the forward
// x·Wᵀ, the input gradient dy·W and the weight gradient dyᵀ·x, on the
// threads of the pool. W is 64 MiB: packing it streams from memory.
//
//	go test -run '^$' -bench SgemmLinear ./engine/cpu/gemm
func BenchmarkSgemmLinear(b *testing.B) {
	const batch, in, out = 256, 4096, 4096
	x, w, dy := benchData(batch*in), benchData(out*in), benchData(batch*out)
	y, dx, dw := make([]float32, batch*out), make([]float32, batch*in), make([]float32, out*in)
	for _, p := range []struct {
		name string
		run  func()
	}{
		{"forward", func() { Sgemm(false, true, batch, out, in, 1, x, in, w, in, 0, y, out) }},
		{"input-grad", func() { Sgemm(false, false, batch, in, out, 1, dy, out, w, in, 0, dx, in) }},
		{"weight-grad", func() { Sgemm(true, false, out, in, batch, 1, dy, out, x, in, 0, dw, in) }},
	} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				p.run()
			}
			reportFlops(b, 2*float64(batch)*float64(in)*float64(out))
		})
	}
}
