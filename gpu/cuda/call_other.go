//go:build !((darwin || freebsd || linux || netbsd) && (amd64 || arm64))

package cuda

// Calls fail where this package does not call C: NVIDIA's driver exists
// for 64-bit Linux (x86-64 and aarch64), and purego loads libraries only on
// Unix systems. (On Windows, libs finds no library, so no Driver exists.)

func ccall(fn uintptr, args ...uintptr) Result { return ErrorNotSupported }

func ccallv(fn uintptr, args []uintptr) Result { return ErrorNotSupported }
