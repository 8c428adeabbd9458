//go:build amd64

package gemm

import "golang.org/x/sys/cpu"

// simdTranspose reports whether transpose8 and transpose4 can run here.
var simdTranspose = cpu.X86.HasAVX

// transpose8 sets dst[p·ldd + r] = src[r·lds + p] for r < 8 and p < n, n a
// multiple of 8 (transpose_amd64.s).
//
//go:noescape
func transpose8(dst *float32, ldd int, src *float32, lds int, n int)

// transpose4 is transpose8 for 4 rows.
//
//go:noescape
func transpose4(dst *float32, ldd int, src *float32, lds int, n int)

// transpose2 is transpose8 for 2 rows.
//
//go:noescape
func transpose2(dst *float32, ldd int, src *float32, lds int, n int)
