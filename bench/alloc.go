package bench

import (
	"runtime"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// steadyState runs a few more steps and reports the Go heap bytes allocated
// per step and the device-pool misses per step.
func steadyState(rt *tensor.Runtime, step func() error) (heapPerStep int64, missesPerStep float64, err error) {
	const n = 5
	var before, after runtime.MemStats
	s0 := rt.Stats()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		if err := step(); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&after)
	s1 := rt.Stats()
	return int64(after.TotalAlloc-before.TotalAlloc) / n, float64(s1.Allocs-s0.Allocs) / n, nil
}
