//go:build darwin || freebsd || linux || netbsd

package mpi

import (
	"github.com/ebitengine/purego"
)

// call calls the C function fn, whose arguments are integers or pointers,
// and returns its int result (an MPI error code): the low 32 bits of the
// return register, the rest being undefined for a C int. purego.SyscallN
// avoids a purego.RegisterFunc wrapper's reflection.
//
// A pointer converted to uintptr in call's argument list is kept alive and
// in place until call returns, as for purego.SyscallN.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(uint32(r))
}

func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }
