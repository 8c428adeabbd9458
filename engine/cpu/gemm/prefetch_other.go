//go:build !amd64

package gemm

import "unsafe"

// prefetch does nothing here: the Go loops leave the hardware to fetch.
func prefetch(p unsafe.Pointer, n int) {}
