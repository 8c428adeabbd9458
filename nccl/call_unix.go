//go:build darwin || freebsd || linux || netbsd

package nccl

import "github.com/ebitengine/purego"

// call calls the C function fn, whose arguments are integers or pointers,
// and returns its int result (an ncclResult_t): the low 32 bits of the
// return register, the rest being undefined for a C int. purego.SyscallN
// avoids a purego.RegisterFunc wrapper's reflection: 205 ns and 1
// allocation per ncclAllReduce on the fake, against 740 ns and 9
// (BenchmarkAllReduceCall).
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

// registerFunc makes *fptr call the C function fn (purego.RegisterFunc),
// for the one call with a struct passed by value.
func registerFunc(fptr any, fn uintptr) { purego.RegisterFunc(fptr, fn) }
