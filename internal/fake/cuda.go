//go:build darwin || freebsd || linux || netbsd

package fake

import (
	_ "embed"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

//go:embed cuda.c
var cudaSource string

var cudaLib = fakeLib{soname: "libcuda.so.1", file: "cuda.c"}

// CUDA returns the path of the fake CUDA driver, libcuda.so.1, built from
// cuda.c once per test binary (see the file's comment for what it does), or
// skips the test when there is no C compiler.
func CUDA(tb testing.TB) string {
	tb.Helper()
	return cudaLib.path(tb, cudaSource)
}

// CUDAControl reaches the fake driver's test-only functions: error
// injection, call counts and what the last kernel launch received. It
// opens the same library as the binding does (the dynamic loader returns
// the same handle), so both see the same state.
type CUDAControl struct {
	path string

	fail        func(call string, code int32) int32
	calls       func(call string) int32
	paramSizes  func(sizes unsafe.Pointer, n int32)
	lastLaunch  func(name unsafe.Pointer, nameCap int32, dims unsafe.Pointer, stream unsafe.Pointer, params unsafe.Pointer, cap int32) int32
	streamFlags func(s uintptr) int32
	eventFlags  func(e uintptr) int32
	live        func(host int32) int32
	contextRefs func(dev int32) int32
	current     func(pctx unsafe.Pointer) int32
	reset       func()
	paramBuf    []int32
}

// OpenCUDA builds (once per process) and opens the fake driver, resets its
// counters and injected errors, and returns its controls.
func OpenCUDA(tb testing.TB) *CUDAControl {
	tb.Helper()
	c := &CUDAControl{path: CUDA(tb)}
	h := dlopenFake(tb, c.path)
	purego.RegisterLibFunc(&c.fail, h, "fakecuda_fail")
	purego.RegisterLibFunc(&c.calls, h, "fakecuda_calls")
	purego.RegisterLibFunc(&c.paramSizes, h, "fakecuda_param_sizes")
	purego.RegisterLibFunc(&c.lastLaunch, h, "fakecuda_last_launch")
	purego.RegisterLibFunc(&c.streamFlags, h, "fakecuda_stream_flags")
	purego.RegisterLibFunc(&c.eventFlags, h, "fakecuda_event_flags")
	purego.RegisterLibFunc(&c.live, h, "fakecuda_live")
	purego.RegisterLibFunc(&c.contextRefs, h, "fakecuda_context_refs")
	purego.RegisterLibFunc(&c.reset, h, "fakecuda_reset")
	purego.RegisterLibFunc(&c.current, h, "cuCtxGetCurrent")
	c.reset()
	return c
}

// Path is the library's path, for cuda.LoadFrom.
func (c *CUDAControl) Path() string { return c.path }

// Reset clears call counts, injected errors, parameter sizes and the last
// launch.
func (c *CUDAControl) Reset() { c.reset() }

// Fail makes the next call of the driver function named call (as
// exported: "cuMemAlloc_v2") return code.
func (c *CUDAControl) Fail(tb testing.TB, call string, code int) {
	tb.Helper()
	if c.fail(call, int32(code)) != 0 {
		tb.Fatalf("fake CUDA has no function %s", call)
	}
}

// Calls returns how many times the driver function named call was called
// since the last reset.
func (c *CUDAControl) Calls(tb testing.TB, call string) int {
	tb.Helper()
	n := c.calls(call)
	if n < 0 {
		tb.Fatalf("fake CUDA has no function %s", call)
	}
	return int(n)
}

// SetParamSizes tells the fake the byte sizes of the next launches' kernel
// parameters, so that it records their values.
func (c *CUDAControl) SetParamSizes(sizes ...int) {
	c.paramBuf = c.paramBuf[:0]
	for _, s := range sizes {
		c.paramBuf = append(c.paramBuf, int32(s))
	}
	var p unsafe.Pointer
	if len(c.paramBuf) > 0 {
		p = unsafe.Pointer(&c.paramBuf[0])
	}
	c.paramSizes(p, int32(len(c.paramBuf)))
}

// Launch is what the fake's cuLaunchKernel received.
type Launch struct {
	Name   string
	Grid   [3]uint32
	Block  [3]uint32
	Shared uint32
	Stream uintptr // the CUstream, 0 for the NULL stream
	// Params are the parameters' bytes, one after the other without
	// padding, in the sizes given to SetParamSizes.
	Params []byte
}

// LastLaunch returns the last launch, and false when there was none since
// the last reset.
func (c *CUDAControl) LastLaunch() (Launch, bool) {
	var name [256]byte
	var dims [7]uint32
	var stream uintptr
	params := make([]byte, 32768)
	n := c.lastLaunch(unsafe.Pointer(&name[0]), int32(len(name)), unsafe.Pointer(&dims[0]),
		unsafe.Pointer(&stream), unsafe.Pointer(&params[0]), int32(len(params)))
	if n < 0 {
		return Launch{}, false
	}
	end := 0
	for end < len(name) && name[end] != 0 {
		end++
	}
	return Launch{
		Name:   string(name[:end]),
		Grid:   [3]uint32{dims[0], dims[1], dims[2]},
		Block:  [3]uint32{dims[3], dims[4], dims[5]},
		Shared: dims[6],
		Stream: stream,
		Params: params[:n],
	}, true
}

// StreamFlags returns the flags a live stream was created with, or -1.
func (c *CUDAControl) StreamFlags(stream uintptr) int { return int(c.streamFlags(stream)) }

// EventFlags returns the flags a live event was created with, or -1.
func (c *CUDAControl) EventFlags(event uintptr) int { return int(c.eventFlags(event)) }

// LiveDeviceAllocs returns the number of device allocations not freed.
func (c *CUDAControl) LiveDeviceAllocs() int { return int(c.live(0)) }

// LiveHostAllocs returns the number of page-locked host allocations not
// freed.
func (c *CUDAControl) LiveHostAllocs() int { return int(c.live(1)) }

// ContextRefs returns the retain count of device dev's primary context.
func (c *CUDAControl) ContextRefs(dev int) int { return int(c.contextRefs(int32(dev))) }

// CurrentContext returns the CUcontext current on the calling OS thread
// (cuCtxGetCurrent), which is meaningful only while the goroutine is locked
// to its thread, as in cuda.Context.Do.
func (c *CUDAControl) CurrentContext() uintptr {
	var h uintptr
	c.current(unsafe.Pointer(&h))
	return h
}
