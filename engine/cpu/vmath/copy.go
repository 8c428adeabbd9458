package vmath

import "unsafe"

// CopyRows copies rows runs of cols elements from src, the runs srcStride
// elements apart, to dst, dstStride apart: a block of a matrix into
// another. For short runs (a 14-wide image's rows into its padded
// planes) it is several times faster than a copy per row, each of which
// calls memmove. The runs must not overlap.
func CopyRows(dst []float32, dstStride int, src []float32, srcStride, rows, cols int) {
	if rows < 0 || cols < 0 || dstStride < 0 || srcStride < 0 {
		panic("vmath.CopyRows: negative extent (rows " + itoa(rows) + ", cols " + itoa(cols) +
			", strides " + itoa(dstStride) + " and " + itoa(srcStride) + ")")
	}
	if rows == 0 || cols == 0 {
		return
	}
	if need := (rows-1)*dstStride + cols; len(dst) < need {
		panic("vmath.CopyRows: dst has length " + itoa(len(dst)) + ", want " + itoa(need))
	}
	if need := (rows-1)*srcStride + cols; len(src) < need {
		panic("vmath.CopyRows: src has length " + itoa(len(src)) + ", want " + itoa(need))
	}
	copyRows(&dst[0], dstStride, &src[0], srcStride, rows, cols)
}

// CopyBlock is CopyRows for float32 or float64 elements: it only moves
// bits, a float64 as two float32.
func CopyBlock[T ~float32 | ~float64](dst []T, dstStride int, src []T, srcStride, rows, cols int) {
	if rows <= 0 || cols <= 0 {
		CopyRows(nil, dstStride, nil, srcStride, rows, cols) // the checks of the extents
		return
	}
	f := int(unsafe.Sizeof(dst[0]) / 4)
	d := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)*f)
	s := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(src))), len(src)*f)
	CopyRows(d, dstStride*f, s, srcStride*f, rows, cols*f)
}
