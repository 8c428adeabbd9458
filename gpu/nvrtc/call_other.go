//go:build !(darwin || freebsd || linux || netbsd)

package nvrtc

// Without dlopen (gpu/libs) no library loads, so these are never reached.

func call(fn uintptr, args ...uintptr) int32      { panic("nvrtc: no C calls on this platform") }
func callPtr(fn uintptr, args ...uintptr) uintptr { panic("nvrtc: no C calls on this platform") }
