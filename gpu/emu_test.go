//go:build linux

package gpu

import (
	"os"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/device/devicetest"
	"github.com/zeroeng/zeroeng/gpu/kernels/kernelstest"
)

// TestConformanceEmulated runs the conformance suite (every engine op
// against the CPU engine) on the CUDA kernels without a GPU: kernelstest
// compiles gpu/kernels as host C++, and the fake driver, told where by
// ZEEMU_DIR, runs each launch on host memory one block at a time. It checks
// the kernels' arithmetic, indexing and the Go side's launches; not CUDA's
// concurrency, its math library or NVRTC (TestConformanceGPU does, on a
// GPU). The fake cuBLAS computes float32 and float64 products only.
//
// ZEEMU_LARGE=1 adds the suite's large cases; ZEEMU_FILTER=Op1,Op2 selects.
func TestConformanceEmulated(t *testing.T) {
	if testing.Short() {
		t.Skip("the emulated GPU conformance (a minute on two cores) runs with make test-all")
	}
	t.Setenv("ZEEMU_DIR", kernelstest.Build(t))
	d, _ := openFake(t)
	filter := os.Getenv("ZEEMU_FILTER")
	devicetest.ConformanceWith(t, cpu.New(cpu.Options{}), d, devicetest.Options{
		Short: os.Getenv("ZEEMU_LARGE") == "",
		Filter: func(name string) bool {
			if strings.HasPrefix(name, "Gemm/bf16") || strings.HasPrefix(name, "Gemm/f16") {
				return false
			}
			if filter == "" {
				return true
			}
			for _, f := range strings.Split(filter, ",") {
				if strings.HasPrefix(name, f) {
					return true
				}
			}
			return false
		},
	})
}
