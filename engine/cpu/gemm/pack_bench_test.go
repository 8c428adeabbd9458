package gemm

import (
	"fmt"
	"testing"
)

// BenchmarkPack measures packing one K block of a 1024×1024 operand in
// each layout (elements per second is what matters: it is overhead).
func BenchmarkPack(b *testing.B) {
	const n, kc = 1024, 344
	src := make([]float32, n*n)
	for _, mr := range []int{6, 12, 16, 32} {
		dst := make([]float32, n*kc+mr*kc)
		for _, tc := range []struct {
			name  string
			trans bool
			a     bool
		}{{"A", false, true}, {"At", true, true}, {"B", false, false}, {"Bt", true, false}} {
			if tc.a != (mr == 6 || mr == 12) {
				continue
			}
			b.Run(fmt.Sprintf("%s/%d", tc.name, mr), func(b *testing.B) {
				for b.Loop() {
					for i := 0; i < n; i += mr {
						rows := min(mr, n-i)
						if tc.a {
							packA(dst[i*kc:], src, n, tc.trans, i, rows, 0, kc, mr)
						} else {
							packB(dst[i*kc:], src, n, tc.trans, 0, kc, i, rows, mr)
						}
					}
				}
				b.ReportMetric(float64(n*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
			})
		}
	}
}
