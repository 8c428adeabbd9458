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
