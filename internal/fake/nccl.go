//go:build darwin || freebsd || linux || netbsd

package fake

import (
	_ "embed"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

//go:embed nccl.c
var ncclSource string

var ncclLib = fakeLib{soname: "libnccl.so.2", file: "nccl.c"}

// NCCL returns the path of the fake NCCL built from nccl.c (NCCL 2.21.5,
// recording each call and copying send to recv for one rank; see the
// file's comment), or skips the test when there is no C compiler.
func NCCL(tb testing.TB) string {
	tb.Helper()
	return ncclLib.path(tb, ncclSource)
}

// NCCLCall is what the fake NCCL's last collective or point-to-point call
// received. Op, Root and Peer are -1 for a call without them.
type NCCLCall struct {
	Fn                           string // "ncclAllReduce"
	Calls                        int64  // calls since the last reset
	Send, Recv                   uint64
	Count, DType, Op, Root, Peer int64
	Comm                         uintptr
	Stream                       uintptr
	// Grouped says that the call ran between ncclGroupStart and
	// ncclGroupEnd on the same OS thread (NCCL's group state is per
	// thread).
	Grouped bool
}

// ncclCallC is struct fakenccl_call of nccl.c.
type ncclCallC struct {
	fn                           [32]byte
	calls                        int64
	send, recv                   uint64
	count, dtype, op, root, peer int64
	comm, stream                 uint64
	grouped                      int64
}

// NCCLControl reaches the fake NCCL's test-only functions; see
// NVRTCControl.
type NCCLControl struct {
	path string

	reset    func()
	last     func(out unsafe.Pointer)
	lastInit func(id unsafe.Pointer, nranks, rank *int32)
	counts   func(starts, ends, destroys, aborts *int32)
	setAsync func(r int32)
	setLast  func(msg string)
	fail     func(fn string, result int32, message string)
}

// OpenNCCL builds (once per process) and opens the fake NCCL, resets its
// records, counts and injected errors, and returns its controls.
func OpenNCCL(tb testing.TB) *NCCLControl {
	tb.Helper()
	c := &NCCLControl{path: NCCL(tb)}
	h := dlopenFake(tb, c.path)
	purego.RegisterLibFunc(&c.reset, h, "fakenccl_reset")
	purego.RegisterLibFunc(&c.last, h, "fakenccl_last")
	purego.RegisterLibFunc(&c.lastInit, h, "fakenccl_last_init")
	purego.RegisterLibFunc(&c.counts, h, "fakenccl_counts")
	purego.RegisterLibFunc(&c.setAsync, h, "fakenccl_set_async_error")
	purego.RegisterLibFunc(&c.setLast, h, "fakenccl_set_last_error")
	purego.RegisterLibFunc(&c.fail, h, "fakenccl_fail")
	c.reset()
	return c
}

// Path is the library's path, for nccl.LoadFrom.
func (c *NCCLControl) Path() string { return c.path }

// Reset clears the records, counts, asynchronous error and injected
// errors.
func (c *NCCLControl) Reset() { c.reset() }

// Last returns the last collective or point-to-point call.
func (c *NCCLControl) Last() NCCLCall {
	var r ncclCallC
	c.last(unsafe.Pointer(&r))
	n := 0
	for n < len(r.fn) && r.fn[n] != 0 {
		n++
	}
	return NCCLCall{
		Fn: string(r.fn[:n]), Calls: r.calls, Send: r.send, Recv: r.recv,
		Count: r.count, DType: r.dtype, Op: r.op, Root: r.root, Peer: r.peer,
		Comm: uintptr(r.comm), Stream: uintptr(r.stream), Grouped: r.grouped != 0,
	}
}

// LastInit returns what the last ncclCommInitRank received: the unique id
// (passed by value), nranks and rank (-1 before any call).
func (c *NCCLControl) LastInit() (id [128]byte, nranks, rank int) {
	var n, r int32
	c.lastInit(unsafe.Pointer(&id), &n, &r)
	return id, int(n), int(r)
}

// Counts returns the number of ncclGroupStart, ncclGroupEnd,
// ncclCommDestroy and ncclCommAbort calls that succeeded.
func (c *NCCLControl) Counts() (groupStarts, groupEnds, destroys, aborts int) {
	var s, e, d, a int32
	c.counts(&s, &e, &d, &a)
	return int(s), int(e), int(d), int(a)
}

// SetAsyncError sets what ncclCommGetAsyncError reports (an ncclResult_t).
func (c *NCCLControl) SetAsyncError(result int) { c.setAsync(int32(result)) }

// SetLastError sets what ncclGetLastError returns, as a warning from
// NCCL's background threads would.
func (c *NCCLControl) SetLastError(message string) { c.setLast(message) }

// Fail makes every later call of the function named fn (as exported:
// "ncclAllReduce") return result, with message as ncclGetLastError's
// string, until Reset.
func (c *NCCLControl) Fail(fn string, result int, message string) { c.fail(fn, int32(result), message) }
