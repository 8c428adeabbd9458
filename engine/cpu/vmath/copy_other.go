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

func deinterleaveRows(even *float32, evenStride int, odd *float32, oddStride int, src *float32, srcStride int, rows, pairs int) {
	e := unsafe.Slice(even, (rows-1)*evenStride+pairs)
	o := unsafe.Slice(odd, (rows-1)*oddStride+pairs)
	s := unsafe.Slice(src, (rows-1)*srcStride+2*pairs)
	for r := range rows {
		er, or, sr := e[r*evenStride:][:pairs], o[r*oddStride:][:pairs], s[r*srcStride:][:2*pairs]
		for j := range er {
			er[j], or[j] = sr[2*j], sr[2*j+1]
		}
	}
}

func interleaveRows(dst *float32, dstStride int, even *float32, evenStride int, odd *float32, oddStride int, rows, pairs int) {
	d := unsafe.Slice(dst, (rows-1)*dstStride+2*pairs)
	e := unsafe.Slice(even, (rows-1)*evenStride+pairs)
	o := unsafe.Slice(odd, (rows-1)*oddStride+pairs)
	for r := range rows {
		dr, er, or := d[r*dstStride:][:2*pairs], e[r*evenStride:][:pairs], o[r*oddStride:][:pairs]
		for j := range er {
			dr[2*j], dr[2*j+1] = er[j], or[j]
		}
	}
}

func copyRowsAdd(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32) {
	d := unsafe.Slice(dst, (rows-1)*dstStride+cols)
	x := unsafe.Slice(src, (rows-1)*srcStride+cols)
	for r := range rows {
		dr, xr := d[r*dstStride:][:cols], x[r*srcStride:][:cols]
		for j, v := range xr {
			dr[j] = v + s
		}
	}
}
