package cuda

import (
	"runtime"
	"time"
	"unsafe"
)

// Stream and event creation flags (cuda.h, CUstream_flags and
// CUevent_flags).
const (
	streamNonBlocking  = 0x1 // CU_STREAM_NON_BLOCKING
	eventDisableTiming = 0x2 // CU_EVENT_DISABLE_TIMING
)

// The details of errors of handles used after their destruction: the
// handle is zeroed, and never passed to the driver, where 0 could mean the
// NULL stream.
const (
	errDestroyedStream = "the stream was destroyed"
	errDestroyedEvent  = "the event was destroyed"
	errUnloadedModule  = "the module was unloaded"
	errZeroFunction    = "the zero Function, not one from Module.Function"
)

// Stream is a CUDA stream: work queued on it runs in order, and
// concurrently with other streams' work.
//
// Copies and memsets are queued: they return before the device has done
// them, and memory is read or written when the stream reaches them. Host
// memory must stay alive and unchanged (CopyHtoD), or be left unread
// (CopyDtoH), until then: Sync the stream, or an event recorded after the
// copy, before reusing it. For page-locked memory from Context.HostAlloc
// the copy is truly asynchronous. Go memory is pageable: the driver stages
// it, so that CopyHtoD returns once it has read the source and CopyDtoH
// once the data is there, but that is the driver's behaviour, not a
// promise of this package, which pins Go memory (runtime.Pinner) only for
// the call; callers Sync before reusing a Go buffer too.
type Stream struct {
	ctx *Context
	h   uintptr // CUstream; 0 once destroyed
}

// NewStream creates a stream (cuStreamCreate). A non-blocking stream does
// not synchronize with the legacy NULL stream.
func (c *Context) NewStream(nonBlocking bool) (*Stream, error) {
	var flags uintptr
	if nonBlocking {
		flags = streamNonBlocking
	}
	var h uintptr
	if err := c.doOut("cuStreamCreate", c.d.fn.cuStreamCreate, uintptr(unsafe.Pointer(&h)), flags); err != nil {
		return nil, err
	}
	return &Stream{ctx: c, h: h}, nil
}

// Handle returns the raw CUstream, for cuBLAS and NCCL; 0, the NULL
// stream, for a nil Stream.
func (s *Stream) Handle() uintptr {
	if s == nil {
		return 0
	}
	return s.h
}

// Context returns the stream's context.
func (s *Stream) Context() *Context { return s.ctx }

// do calls fn in the stream's context, failing without a call once the
// stream is destroyed: its handle would be the NULL stream's, 0. Like
// Context.do, it takes no addresses of unpinned Go memory.
func (s *Stream) do(name string, fn uintptr, args ...uintptr) error {
	if s.h == 0 {
		return &Error{Call: name, Code: ErrorInvalidHandle, Detail: errDestroyedStream}
	}
	return s.ctx.do(name, fn, args...)
}

// Sync waits for the stream's work to finish (cuStreamSynchronize).
func (s *Stream) Sync() error {
	return s.do("cuStreamSynchronize", s.ctx.d.fn.cuStreamSynchronize, s.h)
}

// Query reports whether the stream's work has finished (cuStreamQuery).
func (s *Stream) Query() (done bool, err error) {
	if s.h == 0 {
		return false, &Error{Call: "cuStreamQuery", Code: ErrorInvalidHandle, Detail: errDestroyedStream}
	}
	r, failed := s.ctx.call(s.ctx.d.fn.cuStreamQuery, s.h)
	switch {
	case r == Success:
		return true, nil
	case r == ErrorNotReady && failed == "":
		return false, nil
	}
	return false, s.ctx.err("cuStreamQuery", r, failed)
}

// WaitEvent makes the stream's later work wait for the work e recorded
// (cuStreamWaitEvent), without blocking the host.
func (s *Stream) WaitEvent(e *Event) error {
	if e.h == 0 {
		return &Error{Call: "cuStreamWaitEvent", Code: ErrorInvalidHandle, Detail: errDestroyedEvent}
	}
	return s.do("cuStreamWaitEvent", s.ctx.d.fn.cuStreamWaitEvent, s.h, e.h, 0)
}

// Destroy destroys the stream (cuStreamDestroy_v2); work already queued
// still runs.
func (s *Stream) Destroy() error {
	err := s.do("cuStreamDestroy_v2", s.ctx.d.fn.cuStreamDestroy, s.h)
	if err == nil {
		s.h = 0
	}
	return err
}

// CopyHtoD copies src to device memory at dst (cuMemcpyHtoDAsync_v2).
// See Stream for how long src must be left alone.
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	// Pinned, src stays alive and in place while the driver reads it
	// through the uintptr the call passes.
	var pin runtime.Pinner
	pin.Pin(unsafe.SliceData(src))
	err := s.do("cuMemcpyHtoDAsync_v2", s.ctx.d.fn.cuMemcpyHtoDAsync,
		uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), s.h)
	pin.Unpin()
	return err
}

// CopyDtoH copies len(dst) bytes of device memory at src to dst
// (cuMemcpyDtoHAsync_v2). See Stream for when dst holds them.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	var pin runtime.Pinner
	pin.Pin(unsafe.SliceData(dst))
	err := s.do("cuMemcpyDtoHAsync_v2", s.ctx.d.fn.cuMemcpyDtoHAsync,
		uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), s.h)
	pin.Unpin()
	return err
}

// CopyDtoD copies bytes of device memory from src to dst
// (cuMemcpyDtoDAsync_v2).
func (s *Stream) CopyDtoD(dst, src DevicePtr, bytes uint64) error {
	return s.do("cuMemcpyDtoDAsync_v2", s.ctx.d.fn.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(bytes), s.h)
}

// MemsetD8 sets n bytes at dst to v (cuMemsetD8Async).
func (s *Stream) MemsetD8(dst DevicePtr, v uint8, n uint64) error {
	return s.do("cuMemsetD8Async", s.ctx.d.fn.cuMemsetD8Async, uintptr(dst), uintptr(v), uintptr(n), s.h)
}

// MemsetD32 sets n 32-bit words at dst, which must be 4-byte aligned, to v
// (cuMemsetD32Async).
func (s *Stream) MemsetD32(dst DevicePtr, v uint32, n uint64) error {
	return s.do("cuMemsetD32Async", s.ctx.d.fn.cuMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), s.h)
}

// Event is a CUDA event: a point in a stream's work, to wait for or time.
type Event struct {
	ctx *Context
	h   uintptr // CUevent; 0 once destroyed
}

// NewEvent creates an event (cuEventCreate). Events that do not time
// (CU_EVENT_DISABLE_TIMING) are cheaper to record and wait for.
func (c *Context) NewEvent(timing bool) (*Event, error) {
	var flags uintptr
	if !timing {
		flags = eventDisableTiming
	}
	var h uintptr
	if err := c.doOut("cuEventCreate", c.d.fn.cuEventCreate, uintptr(unsafe.Pointer(&h)), flags); err != nil {
		return nil, err
	}
	return &Event{ctx: c, h: h}, nil
}

// Handle returns the raw CUevent.
func (e *Event) Handle() uintptr { return e.h }

// do calls fn in the event's context, failing without a call once the
// event is destroyed. Like Context.do, it takes no addresses of unpinned Go
// memory.
func (e *Event) do(name string, fn uintptr, args ...uintptr) error {
	if e.h == 0 {
		return &Error{Call: name, Code: ErrorInvalidHandle, Detail: errDestroyedEvent}
	}
	return e.ctx.do(name, fn, args...)
}

// Record records the event at the current end of stream s's work
// (cuEventRecord); a nil s is the NULL stream.
func (e *Event) Record(s *Stream) error {
	if s != nil && s.h == 0 {
		return &Error{Call: "cuEventRecord", Code: ErrorInvalidHandle, Detail: errDestroyedStream}
	}
	return e.do("cuEventRecord", e.ctx.d.fn.cuEventRecord, e.h, s.Handle())
}

// Sync waits for the work before the event's last record
// (cuEventSynchronize).
func (e *Event) Sync() error {
	return e.do("cuEventSynchronize", e.ctx.d.fn.cuEventSynchronize, e.h)
}

// Query reports whether the work before the event's last record has
// finished (cuEventQuery).
func (e *Event) Query() (bool, error) {
	if e.h == 0 {
		return false, &Error{Call: "cuEventQuery", Code: ErrorInvalidHandle, Detail: errDestroyedEvent}
	}
	r, failed := e.ctx.call(e.ctx.d.fn.cuEventQuery, e.h)
	switch {
	case r == Success:
		return true, nil
	case r == ErrorNotReady && failed == "":
		return false, nil
	}
	return false, e.ctx.err("cuEventQuery", r, failed)
}

// Destroy destroys the event (cuEventDestroy_v2).
func (e *Event) Destroy() error {
	err := e.do("cuEventDestroy_v2", e.ctx.d.fn.cuEventDestroy, e.h)
	if err == nil {
		e.h = 0
	}
	return err
}

// Elapsed returns the time between two recorded timing events
// (cuEventElapsedTime, about half a microsecond of resolution). Both must
// have completed.
func Elapsed(start, end *Event) (time.Duration, error) {
	if start.h == 0 || end.h == 0 {
		return 0, &Error{Call: "cuEventElapsedTime", Code: ErrorInvalidHandle, Detail: errDestroyedEvent}
	}
	var ms float32
	if err := start.ctx.doOut("cuEventElapsedTime", start.ctx.d.fn.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.h, end.h); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
