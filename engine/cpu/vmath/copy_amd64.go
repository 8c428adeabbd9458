//go:build amd64 && !purego

package vmath

//go:noescape
func copyRows(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)
