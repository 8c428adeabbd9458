//go:build !amd64

package gemm

// simdTranspose is false: packing uses the Go loops only.
const simdTranspose = false

func transpose8(dst *float32, ldd int, src *float32, lds int, n int) { panic("unreachable") }
func transpose4(dst *float32, ldd int, src *float32, lds int, n int) { panic("unreachable") }
func transpose2(dst *float32, ldd int, src *float32, lds int, n int) { panic("unreachable") }
