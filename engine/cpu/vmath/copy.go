package vmath

import "unsafe"

// CopyRows copies rows runs of cols elements from src, the runs srcStride
// elements apart, to dst, dstStride apart: a block of a matrix into
// another. For short runs (a 14-wide image's rows into its padded
// planes) it is several times faster than a copy per row, each of which
// calls memmove. The runs must not overlap.
func CopyRows(dst []float32, dstStride int, src []float32, srcStride, rows, cols int) {
	const fn = "vmath.CopyRows"
	if !checkBlock(fn, rows, cols, "dst", len(dst), dstStride, cols) || !checkBlock(fn, rows, cols, "src", len(src), srcStride, cols) {
		return
	}
	if impl.copyRows != nil {
		impl.copyRows(&dst[0], dstStride, &src[0], srcStride, rows, cols)
		return
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

// CopyPlanes is CopyBlock for planes blocks of rows×cols at once, the
// blocks dstPlane and srcPlane elements apart: a sample's channels into
// their padded planes in one call, checked once (a call a channel, each
// checked, cost the CNN's second convolution 5% of its weight gradient).
func CopyPlanes[T ~float32 | ~float64](dst []T, dstStride, dstPlane int, src []T, srcStride, srcPlane, planes, rows, cols int) {
	const fn = "vmath.CopyPlanes"
	if planes < 0 || rows < 0 || cols < 0 || dstStride < 0 || srcStride < 0 || dstPlane < 0 || srcPlane < 0 {
		panic(fn + ": negative extent (planes " + itoa(planes) + ", rows " + itoa(rows) + ", cols " + itoa(cols) + ")")
	}
	if planes == 0 || rows == 0 || cols == 0 {
		return
	}
	for _, b := range []struct {
		name             string
		n, plane, stride int
	}{{"dst", len(dst), dstPlane, dstStride}, {"src", len(src), srcPlane, srcStride}} {
		if need := (planes-1)*b.plane + (rows-1)*b.stride + cols; b.n < need {
			panic(fn + ": " + b.name + " has length " + itoa(b.n) + ", want " + itoa(need))
		}
	}
	f := int(unsafe.Sizeof(dst[0]) / 4)
	run := copyRows
	if impl.copyRows != nil {
		run = impl.copyRows
	}
	for p := range planes {
		d := (*float32)(unsafe.Pointer(&dst[p*dstPlane]))
		s := (*float32)(unsafe.Pointer(&src[p*srcPlane]))
		run(d, dstStride*f, s, srcStride*f, rows, cols*f)
	}
}

// DeinterleaveRows splits rows runs of cols elements of src, srcStride
// apart, into their even-indexed elements, ⌈cols/2⌉ a row written to
// even (rows evenStride apart), and their odd-indexed ones, ⌊cols/2⌋ to
// odd (oddStride apart): the two column phases of a stride-2
// convolution's input. The runs must not overlap. float32 takes the
// assembly on amd64; float64 and the other architectures the Go loop.
func DeinterleaveRows[T ~float32 | ~float64](even []T, evenStride int, odd []T, oddStride int, src []T, srcStride, rows, cols int) {
	const fn = "vmath.DeinterleaveRows"
	if !checkBlock(fn, rows, cols, "src", len(src), srcStride, cols) ||
		!checkBlock(fn, rows, cols, "even", len(even), evenStride, (cols+1)/2) ||
		!checkBlock(fn, rows, cols, "odd", len(odd), oddStride, cols/2) {
		return
	}
	pairs := cols / 2
	if e, ok := any(even).([]float32); ok && pairs > 0 {
		o, x := any(odd).([]float32), any(src).([]float32)
		deinterleaveRows(&e[0], evenStride, &o[0], oddStride, &x[0], srcStride, rows, pairs)
	} else {
		deinterleaveGo(even, evenStride, odd, oddStride, src, srcStride, rows, pairs)
	}
	if cols%2 == 1 {
		for r := range rows {
			even[r*evenStride+pairs] = src[r*srcStride+2*pairs]
		}
	}
}

// deinterleaveGo is DeinterleaveRows's pairs (2·pairs elements a row) in Go.
func deinterleaveGo[T ~float32 | ~float64](even []T, evenStride int, odd []T, oddStride int, src []T, srcStride, rows, pairs int) {
	for r := range rows {
		e, o, x := even[r*evenStride:][:pairs], odd[r*oddStride:][:pairs], src[r*srcStride:][:2*pairs]
		for j := range e {
			e[j], o[j] = x[2*j], x[2*j+1]
		}
	}
}

// InterleaveRows is the inverse of DeinterleaveRows: row r of dst (cols
// elements, dstStride apart) takes its even-indexed elements from row r
// of even and its odd-indexed ones from row r of odd.
func InterleaveRows[T ~float32 | ~float64](dst []T, dstStride int, even []T, evenStride int, odd []T, oddStride int, rows, cols int) {
	const fn = "vmath.InterleaveRows"
	if !checkBlock(fn, rows, cols, "dst", len(dst), dstStride, cols) ||
		!checkBlock(fn, rows, cols, "even", len(even), evenStride, (cols+1)/2) ||
		!checkBlock(fn, rows, cols, "odd", len(odd), oddStride, cols/2) {
		return
	}
	pairs := cols / 2
	if d, ok := any(dst).([]float32); ok && pairs > 0 {
		e, o := any(even).([]float32), any(odd).([]float32)
		interleaveRows(&d[0], dstStride, &e[0], evenStride, &o[0], oddStride, rows, pairs)
	} else {
		interleaveGo(dst, dstStride, even, evenStride, odd, oddStride, rows, pairs)
	}
	if cols%2 == 1 {
		for r := range rows {
			dst[r*dstStride+2*pairs] = even[r*evenStride+pairs]
		}
	}
}

// interleaveGo is InterleaveRows's pairs in Go.
func interleaveGo[T ~float32 | ~float64](dst []T, dstStride int, even []T, evenStride int, odd []T, oddStride, rows, pairs int) {
	for r := range rows {
		d, e, o := dst[r*dstStride:][:2*pairs], even[r*evenStride:][:pairs], odd[r*oddStride:][:pairs]
		for j := range e {
			d[2*j], d[2*j+1] = e[j], o[j]
		}
	}
}

// checkBlock panics, naming fn and the slice, when rows runs of run
// elements, stride apart, do not fit in a slice of length n or an extent
// is negative; it reports whether there is anything to do.
func checkBlock(fn string, rows, cols int, name string, n, stride, run int) bool {
	if rows < 0 || cols < 0 || stride < 0 {
		panic(fn + ": negative extent (rows " + itoa(rows) + ", cols " + itoa(cols) + ", " + name + " stride " + itoa(stride) + ")")
	}
	if rows == 0 || cols == 0 {
		return false
	}
	if need := (rows-1)*stride + run; n < need {
		panic(fn + ": " + name + " has length " + itoa(n) + ", want " + itoa(need))
	}
	return true
}

// CopyRowsAdd is CopyRows with s added to every element on the way, each
// sum rounded once: a convolution's bias added while its rows are packed.
// float32 takes the assembly on amd64, float64 the Go loop.
func CopyRowsAdd[T ~float32 | ~float64](dst []T, dstStride int, src []T, srcStride, rows, cols int, s T) {
	const fn = "vmath.CopyRowsAdd"
	if !checkBlock(fn, rows, cols, "dst", len(dst), dstStride, cols) || !checkBlock(fn, rows, cols, "src", len(src), srcStride, cols) {
		return
	}
	if d, ok := any(dst).([]float32); ok {
		run := copyRowsAdd
		if impl.copyRowsAdd != nil {
			run = impl.copyRowsAdd
		}
		run(&d[0], dstStride, &any(src).([]float32)[0], srcStride, rows, cols, float32(s))
		return
	}
	copyRowsAddGo(dst, dstStride, src, srcStride, rows, cols, s)
}

// copyRowsAddGo is CopyRowsAdd in Go.
func copyRowsAddGo[T ~float32 | ~float64](dst []T, dstStride int, src []T, srcStride, rows, cols int, s T) {
	for r := range rows {
		d, x := dst[r*dstStride:][:cols], src[r*srcStride:][:cols]
		for j, v := range x {
			d[j] = v + s
		}
	}
}
