package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// DevicePtr is a device address, a CUdeviceptr.
type DevicePtr uint64

// Context is a retained primary context of a device. Its methods, and
// those of the streams, events and modules made from it, are safe for
// concurrent use; each makes the context current on its OS thread for the
// duration of its driver call.
type Context struct {
	d        *Driver
	dev      *Device
	h        uintptr    // CUcontext
	self     [1]uintptr // h, as cuCtxSetCurrent's argument list
	released atomic.Bool
}

// Device returns the context's device.
func (c *Context) Device() *Device { return c.dev }

// Handle returns the raw CUcontext.
func (c *Context) Handle() uintptr { return c.h }

// maxArgs is the most arguments a bound function takes (cuLaunchKernel).
const maxArgs = 11

// argsPool holds argument arrays for ccallv, which needs them in the heap.
var argsPool = sync.Pool{New: func() any { return new([maxArgs]uintptr) }}

// call makes c current on the calling OS thread and calls fn with args. It
// returns the first failing call's result, and "cuCtxSetCurrent" when that
// was the one.
//
// call does not allocate. Its arguments are integers, handles and
// addresses of memory that is not Go's or is pinned: a Go pointer converted
// to uintptr in the call expression is not kept alive or in place (see
// callOut for those).
//
// The thread is locked only for the two calls: the goroutine may run on
// another thread by its next call, which sets the context again there.
// cuCtxSetCurrent of the context already current is a thread-local store
// in the driver, so doing it every time costs one more C call (about 100ns
// through purego, less than a tenth of a real launch's host time) and
// needs no record of which thread has which context.
func (c *Context) call(fn uintptr, args ...uintptr) (Result, string) {
	a := argsPool.Get().(*[maxArgs]uintptr)
	n := copy(a[:], args)
	runtime.LockOSThread()
	r := ccallv(c.d.fn.cuCtxSetCurrent, c.self[:])
	failed := "cuCtxSetCurrent"
	if r == Success {
		r, failed = ccallv(fn, a[:n]), ""
	}
	runtime.UnlockOSThread()
	argsPool.Put(a)
	return r, failed
}

// callOut is call for calls that pass the addresses of Go variables, as
// callOut(fn, uintptr(unsafe.Pointer(&x))): marked uintptrescapes, like
// SyscallN, it makes x heap-allocated and keeps it alive until the call
// returns, as unsafe.Pointer rule 4 requires. It allocates.
//
//go:uintptrescapes
func (c *Context) callOut(fn uintptr, args ...uintptr) (Result, string) {
	return c.call(fn, args...)
}

// do is call, with the result turned into an *Error naming name (or
// cuCtxSetCurrent when the context could not be made current).
func (c *Context) do(name string, fn uintptr, args ...uintptr) error {
	r, failed := c.call(fn, args...)
	if r == Success {
		return nil
	}
	return c.err(name, r, failed)
}

// doOut is do for calls that pass the addresses of Go variables.
//
//go:uintptrescapes
func (c *Context) doOut(name string, fn uintptr, args ...uintptr) error {
	return c.do(name, fn, args...)
}

func (c *Context) err(name string, r Result, failed string) *Error {
	if failed != "" {
		return c.d.newError(failed, r, "making the context of device "+fmt.Sprint(c.dev.Ordinal)+" current for "+name)
	}
	return c.d.newError(name, r, "")
}

// Do runs fn with the context current on a locked OS thread, for calls
// into libraries that use the current context (cuBLAS, NCCL). Calls in fn
// to another context's methods make that one current instead.
func (c *Context) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := ccallv(c.d.fn.cuCtxSetCurrent, c.self[:]); r != Success {
		return c.err("Context.Do", r, "cuCtxSetCurrent")
	}
	return fn()
}

// Release releases the primary context (cuDevicePrimaryCtxRelease_v2);
// the driver destroys it, with everything allocated in it, when the last
// retain is released. Later calls return an error.
func (c *Context) Release() error {
	if c.released.Swap(true) {
		return &Error{Call: "cuDevicePrimaryCtxRelease_v2", Code: ErrorInvalidContext, Detail: "the context was already released"}
	}
	r := ccall(c.d.fn.cuDevicePrimaryCtxRelease, uintptr(c.dev.h))
	return c.d.error(fmt.Sprintf("cuDevicePrimaryCtxRelease_v2(device %d)", c.dev.Ordinal), r)
}

// Synchronize waits for all work in the context (cuCtxSynchronize).
func (c *Context) Synchronize() error {
	return c.do("cuCtxSynchronize", c.d.fn.cuCtxSynchronize)
}

// MemAlloc allocates device memory (cuMemAlloc_v2), aligned to at least
// 256 bytes. Its contents are undefined.
func (c *Context) MemAlloc(bytes uint64) (DevicePtr, error) {
	var p DevicePtr
	if err := c.doOut("cuMemAlloc_v2", c.d.fn.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes)); err != nil {
		if e, ok := err.(*Error); ok && e.Detail == "" {
			e.Detail = fmt.Sprintf("%d bytes", bytes)
		}
		return 0, err
	}
	return p, nil
}

// MemFree frees device memory (cuMemFree_v2).
func (c *Context) MemFree(p DevicePtr) error {
	return c.do("cuMemFree_v2", c.d.fn.cuMemFree, uintptr(p))
}

// MemGetInfo returns the device's free and total memory in bytes
// (cuMemGetInfo_v2).
func (c *Context) MemGetInfo() (free, total uint64, err error) {
	var f, t uint64 // size_t
	err = c.doOut("cuMemGetInfo_v2", c.d.fn.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))
	return f, t, err
}

// HostAlloc allocates page-locked host memory (cuMemAllocHost_v2), which
// copies reach by DMA, truly asynchronously. The memory is not Go's: the
// garbage collector neither moves nor frees it, and HostFree must.
func (c *Context) HostAlloc(bytes int) ([]byte, error) {
	if bytes <= 0 {
		return nil, &Error{Call: "cuMemAllocHost_v2", Code: ErrorInvalidValue, Detail: fmt.Sprintf("%d bytes", bytes)}
	}
	var p unsafe.Pointer
	if err := c.doOut("cuMemAllocHost_v2", c.d.fn.cuMemAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(bytes)); err != nil {
		if e, ok := err.(*Error); ok && e.Detail == "" {
			e.Detail = fmt.Sprintf("%d bytes", bytes)
		}
		return nil, err
	}
	return unsafe.Slice((*byte)(p), bytes), nil
}

// HostFree frees memory from HostAlloc (cuMemFreeHost); b must be the
// slice HostAlloc returned, or one starting where it starts.
func (c *Context) HostFree(b []byte) error {
	if cap(b) == 0 {
		return &Error{Call: "cuMemFreeHost", Code: ErrorInvalidValue, Detail: "an empty slice"}
	}
	return c.do("cuMemFreeHost", c.d.fn.cuMemFreeHost, uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
