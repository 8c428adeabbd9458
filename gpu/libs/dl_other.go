//go:build !(darwin || freebsd || linux || netbsd)

package libs

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("loading shared libraries is not supported on " + runtime.GOOS)

func dlopen(string, bool) (uintptr, error)   { return 0, errUnsupported }
func dlsym(uintptr, string) (uintptr, error) { return 0, errUnsupported }
func dlclose(uintptr)                        {}
