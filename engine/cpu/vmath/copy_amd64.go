//go:build amd64 && !purego

package vmath

//go:noescape
func copyRows(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)

//go:noescape
func copyRowsAVX512(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)

//go:noescape
func copyRowsAddAVX512(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32)

//go:noescape
func copyRowsAVX2(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)

//go:noescape
func copyRowsAddAVX2(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32)

//go:noescape
func deinterleaveRows(even *float32, evenStride int, odd *float32, oddStride int, src *float32, srcStride int, rows, pairs int)

//go:noescape
func interleaveRows(dst *float32, dstStride int, even *float32, evenStride int, odd *float32, oddStride int, rows, pairs int)

//go:noescape
func copyRowsAdd(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32)
