package dist

import (
	"fmt"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// benchSizes span 4 KiB to 256 MiB, as the issue asks.
var benchSizes = []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20}

func sizeName(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%dMiB", b>>20)
	default:
		return fmt.Sprintf("%dKiB", b>>10)
	}
}

// BenchmarkAllReduce reports the bus bandwidth of a float32 sum
// all-reduce (algorithm bandwidth × 2(n−1)/n, as nccl-tests does) on n
// in-process ranks; compare with BenchmarkCopy's bandwidth for the same
// bytes (docs/benchmarks.md).
func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("n=%d/%s", n, sizeName(size)), func(b *testing.B) {
				w, err := NewWorld(n, Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				xs := make([]*tensor.Tensor, n)
				for r := range n {
					rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
					xs[r] = rt.Ones(dtype.Float32, size/4)
				}
				b.ResetTimer()
				var wg sync.WaitGroup
				for r := range n {
					wg.Go(func() {
						pg := w.Group(r)
						for range b.N {
							if err := pg.AllReduce(xs[r], Avg).Wait(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(size)/sec/1e9, "algGB/s")
				b.ReportMetric(float64(size)*2*float64(n-1)/float64(n)/sec/1e9, "busGB/s")
			})
		}
	}
}

// BenchmarkCopy is the yardstick: one goroutine copying the same bytes.
func BenchmarkCopy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			for i := range src {
				src[i] = byte(i)
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}
