package gpu

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/device/devicetest"
	"github.com/zeroeng/zeroeng/internal/testreq"
)

// openGPU opens GPU 0 with the real NVIDIA libraries, or skips the test
// saying what is missing (fails it under ZEROENG_REQUIRE_GPU=1). make
// gpu-check runs these tests on a GPU machine (tools/gpucheck/run.sh).
func openGPU(t *testing.T, opt Options) *Device {
	t.Helper()
	d, err := Open(opt)
	if err != nil {
		testreq.Skip(t, testreq.GPU, "no usable GPU: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("closing %v: %v", d, err)
		}
	})
	t.Logf("%s", DeviceLine(d.Props()))
	return d
}

// TestConformanceGPU runs every engine op on the GPU against the CPU engine
// (engine/device/devicetest: fresh random inputs, poisoned outputs, float32
// within 1e-5, bfloat16 within 1e-2, NaN only where the CPU has NaN).
func TestConformanceGPU(t *testing.T) {
	d := openGPU(t, Options{})
	devicetest.Conformance(t, cpu.New(cpu.Options{}), d)
}

// TestConformanceGPUTF32 repeats the matrix products with TF32 tensor cores
// allowed, within TF32's 3e-4.
func TestConformanceGPUTF32(t *testing.T) {
	d := openGPU(t, Options{TF32: true})
	devicetest.ConformanceWith(t, cpu.New(cpu.Options{}), d, devicetest.Options{
		TF32: true,
		Filter: func(name string) bool {
			return strings.HasPrefix(name, "Gemm/") || strings.HasPrefix(name, "Attention")
		},
	})
}
