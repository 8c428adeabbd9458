//go:build !(darwin || freebsd || linux || netbsd)

package mpi

import (
	"errors"
)

// Without dlopen no library loads, so call is never reached.

func call(fn uintptr, args ...uintptr) int32 { panic("mpi: no C calls on this platform") }

func dlopen(string) (uintptr, error) {
	return 0, errors.New("loading shared libraries is not supported on this platform")
}

func dlsym(uintptr, string) (uintptr, error) {
	return 0, errors.New("loading shared libraries is not supported on this platform")
}
