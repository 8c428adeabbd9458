//go:build (darwin || freebsd || linux || netbsd) && (amd64 || arm64)

package cuda

import "github.com/ebitengine/purego"

// The driver is called through purego.SyscallN rather than
// purego.RegisterFunc, which builds each call by reflection (hundreds of
// nanoseconds, and allocations): launches and copies are issued thousands
// of times a step. Every driver function bound here takes integers and
// pointers only, which SyscallN passes correctly.
//
// SyscallN is marked go:uintptrescapes, which makes its variadic slice
// escape: a slice made for each call would be allocated. ccallv therefore
// takes a slice the caller keeps in the heap (a pooled array, or one of the
// Context), and ccall, which makes one per call, serves calls that are not
// hot.
//
// CUresult is a C enum, 32 bits wide: the upper half of the return
// register is undefined, hence the conversion through int32.

// ccall calls the C function fn with args and returns its CUresult.
//
// Like SyscallN, it is marked uintptrescapes: a Go pointer converted to
// uintptr in the call expression, ccall(fn, uintptr(unsafe.Pointer(&x))),
// makes x heap-allocated and kept alive until ccall returns, as
// unsafe.Pointer rule 4 requires of such calls.
//
//go:uintptrescapes
func ccall(fn uintptr, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(r))
}

// ccallv calls the C function fn with args, which must be heap memory, and
// returns its CUresult. It does not allocate. Addresses among args must be
// of memory that is not Go's, or of Go memory pinned for the call: a uintptr
// keeps nothing alive or in place.
func ccallv(fn uintptr, args []uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(r))
}
