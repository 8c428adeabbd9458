//go:build !(darwin || freebsd || linux || netbsd)

package cublas

// Without dlopen (gpu/libs) no library loads, so these are never reached.

func call(fn uintptr, args ...uintptr) int32      { panic("cublas: no C calls on this platform") }
func callPtr(fn uintptr, args ...uintptr) uintptr { panic("cublas: no C calls on this platform") }
func callv(fn uintptr, args []uintptr) int32      { panic("cublas: no C calls on this platform") }
