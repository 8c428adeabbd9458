//go:build amd64

package gemm

import "unsafe"

// prefetch asks the caches for the lines of the n bytes from p
// (PREFETCHT0), so that a run about to be read is on its way; it never
// faults (prefetch_amd64.s).
//
//go:noescape
func prefetch(p unsafe.Pointer, n int)
