// Package testreq lets a test that needs something optional — a GPU, the
// NVIDIA libraries, NVRTC — skip where it is missing, unless the run says
// it must be there. On a GPU machine, tools/gpucheck/run.sh sets
// ZEROENG_REQUIRE_GPU=1, so that a test that would skip (no driver found,
// no NCCL) fails instead and a summary can never count a skip as a pass;
// CI sets ZEROENG_REQUIRE_NVRTC=1, since it installs NVRTC for the tests
// that compile the kernels, and ZEROENG_REQUIRE_PROGRAMS=1, since it
// installs the C and Rust toolchains of the training programs.
package testreq

import (
	"fmt"
	"os"
	"testing"
)

// Need is something a test may need; its value is the environment
// variable that makes it required.
type Need string

const (
	// GPU is a CUDA GPU with its driver, and the libraries zeroeng loads
	// for it (NVRTC, cuBLAS, NCCL).
	GPU Need = "ZEROENG_REQUIRE_GPU"
	// NVRTC is NVIDIA's runtime compiler, which compiles the kernels
	// without a GPU. A run that requires the GPU requires it too.
	NVRTC Need = "ZEROENG_REQUIRE_NVRTC"
	// Programs is what builds the sample training programs and those of the tests
	// (internal/hookbuild): clang for wasm32-wasi with WASI's libc and compiler-rt, and
	// rustc with the wasm32-wasi standard library.
	Programs Need = "ZEROENG_REQUIRE_PROGRAMS"
)

// Required reports whether this run must have need.
func Required(need Need) bool {
	if os.Getenv(string(need)) == "1" {
		return true
	}
	return need == NVRTC && os.Getenv(string(GPU)) == "1"
}

// Skip skips the test for the reason given, or fails it when the run
// requires need.
func Skip(tb testing.TB, need Need, format string, args ...any) {
	tb.Helper()
	reason := fmt.Sprintf(format, args...)
	if Required(need) {
		tb.Fatalf("%s=1, but: %s", need, reason)
	}
	tb.Skip(reason)
}
