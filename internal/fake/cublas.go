//go:build darwin || freebsd || linux || netbsd

package fake

import (
	_ "embed"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

//go:embed cublas.c
var cublasSource string

var cublasLib = fakeLib{soname: "libcublas.so.12", file: "cublas.c"}

// CUBLAS returns the path of the fake cuBLAS built from cublas.c (cuBLAS
// 12.4.5, computing float32 and float64 GEMMs on host memory; see the
// file's comment), or skips the test when there is no C compiler.
func CUBLAS(tb testing.TB) string {
	tb.Helper()
	return cublasLib.path(tb, cublasSource)
}

// GemmCall is what the fake's cublasGemmStridedBatchedEx last received
// (struct fakecublas_gemm in cublas.c, field for field). Alpha and Beta
// are the scalars read as the compute type says (0 for the 16F types),
// AlphaBits and BetaBits the bytes read: 4 for float and int, 8 for
// double, 2 for half.
type GemmCall struct {
	Calls                   int64 // calls since the last reset
	Handle                  uint64
	TransA, TransB, M, N, K int64
	Alpha                   float64
	AlphaBits               uint64
	A                       uint64
	AType, LDA, StrideA     int64
	B                       uint64
	BType, LDB, StrideB     int64
	Beta                    float64
	BetaBits                uint64
	C                       uint64
	CType, LDC, StrideC     int64
	Batch, Compute, Algo    int64
	Computed                int64 // 1 when the fake computed C (float32 or float64)
}

// CUBLASControl reaches the fake cuBLAS's test-only functions; see
// NVRTCControl.
type CUBLASControl struct {
	path string

	reset     func()
	last      func(out unsafe.Pointer)
	live      func() int32
	fail      func(fn string, status int32)
	stream    func(h uintptr) uint64
	workspace func(h uintptr, bytes *uint64) uint64
	mathMode  func(h uintptr) int32
}

// OpenCUBLAS builds (once per process) and opens the fake cuBLAS, resets
// its records and injected errors, and returns its controls.
func OpenCUBLAS(tb testing.TB) *CUBLASControl {
	tb.Helper()
	c := &CUBLASControl{path: CUBLAS(tb)}
	h := dlopenFake(tb, c.path)
	purego.RegisterLibFunc(&c.reset, h, "fakecublas_reset")
	purego.RegisterLibFunc(&c.last, h, "fakecublas_last")
	purego.RegisterLibFunc(&c.live, h, "fakecublas_live_handles")
	purego.RegisterLibFunc(&c.fail, h, "fakecublas_fail")
	purego.RegisterLibFunc(&c.stream, h, "fakecublas_stream")
	purego.RegisterLibFunc(&c.workspace, h, "fakecublas_workspace")
	purego.RegisterLibFunc(&c.mathMode, h, "fakecublas_math_mode")
	c.reset()
	return c
}

// Path is the library's path, for cublas.LoadFrom.
func (c *CUBLASControl) Path() string { return c.path }

// Reset clears the record of the last GEMM and injected errors.
func (c *CUBLASControl) Reset() { c.reset() }

// Last returns the arguments of the last GEMM.
func (c *CUBLASControl) Last() GemmCall {
	var g GemmCall
	c.last(unsafe.Pointer(&g))
	return g
}

// LiveHandles is the number of handles created and not destroyed.
func (c *CUBLASControl) LiveHandles() int { return int(c.live()) }

// Fail makes every later call of the function named fn (as exported:
// "cublasCreate_v2") return status, until Reset.
func (c *CUBLASControl) Fail(fn string, status int) { c.fail(fn, int32(status)) }

// Stream is the stream last set on the cublasHandle_t h.
func (c *CUBLASControl) Stream(h uintptr) uintptr { return uintptr(c.stream(h)) }

// Workspace is the workspace last set on h (reset by cublasSetStream_v2,
// as cuBLAS does).
func (c *CUBLASControl) Workspace(h uintptr) (ptr uint64, bytes uint64) {
	ptr = c.workspace(h, &bytes)
	return ptr, bytes
}

// MathMode is the math mode last set on h.
func (c *CUBLASControl) MathMode(h uintptr) int { return int(c.mathMode(h)) }
