//go:build darwin || freebsd || linux || netbsd

package cublas

import "github.com/ebitengine/purego"

// call calls the C function fn, whose arguments are integers or pointers,
// and returns its int result (a cublasStatus_t): the low 32 bits of the
// return register, the rest being undefined for a C int.
//
// A pointer converted to uintptr in call's argument list is kept alive and
// in place until call returns, as for purego.SyscallN.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(uint32(r))
}

// callPtr calls fn and returns its pointer result.
//
//go:uintptrescapes
func callPtr(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// callv calls fn with args, which must be heap memory, without allocating
// (call's variadic slice escapes). Addresses among args must be of memory
// that stays alive and in place for the call.
func callv(fn uintptr, args []uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(uint32(r))
}
