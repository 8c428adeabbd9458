//go:build !amd64 || purego

package vmath

import "unsafe"

func copyRows(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int) {
	d := unsafe.Slice(dst, (rows-1)*dstStride+cols)
	s := unsafe.Slice(src, (rows-1)*srcStride+cols)
	for r := range rows {
		copy(d[r*dstStride:r*dstStride+cols], s[r*srcStride:r*srcStride+cols])
	}
}

// The loops of DeinterleaveRows, InterleaveRows and CopyRowsAdd on the
// float32 route, where there is no assembly: the Go loops.

func deinterleaveRows(even *float32, evenStride int, odd *float32, oddStride int, src *float32, srcStride int, rows, pairs int) {
	deinterleaveGo(unsafe.Slice(even, (rows-1)*evenStride+pairs), evenStride, unsafe.Slice(odd, (rows-1)*oddStride+pairs), oddStride,
		unsafe.Slice(src, (rows-1)*srcStride+2*pairs), srcStride, rows, pairs)
}

func interleaveRows(dst *float32, dstStride int, even *float32, evenStride int, odd *float32, oddStride int, rows, pairs int) {
	interleaveGo(unsafe.Slice(dst, (rows-1)*dstStride+2*pairs), dstStride, unsafe.Slice(even, (rows-1)*evenStride+pairs), evenStride,
		unsafe.Slice(odd, (rows-1)*oddStride+pairs), oddStride, rows, pairs)
}

func copyRowsAdd(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32) {
	copyRowsAddGo(unsafe.Slice(dst, (rows-1)*dstStride+cols), dstStride, unsafe.Slice(src, (rows-1)*srcStride+cols), srcStride, rows, cols, s)
}
