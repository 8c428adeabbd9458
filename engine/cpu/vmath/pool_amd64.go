//go:build amd64 && !purego

package vmath

//go:noescape
func maxPool2x2AVX512(y *float32, at *int64, x *float32, w, ow, oh, full, tail int)

// maxPool2x2AVX512Go runs the AVX-512 kernel where its int32 positions
// fit, the Go loop elsewhere.
func maxPool2x2AVX512Go(y []float32, at []int64, x []float32, w, ow, oh int) {
	if int64(2*oh)*int64(w) >= 1<<31 {
		maxPool2x2Go(y, at, x, w, ow, oh)
		return
	}
	maxPool2x2AVX512(&y[0], &at[0], &x[0], w, ow, oh, ow/16, poolTail(ow))
}

//go:noescape
func maxPool2x2BackwardAVX512(dx, dy *float32, at *int64, w, ow, oh, full, tail int) (ok bool)

// maxPool2x2BackwardAVX512Go runs the AVX-512 kernel over the windows
// and clears what they do not cover.
func maxPool2x2BackwardAVX512Go(dx, dy []float32, at []int64, w, ow, oh int) bool {
	if oh == 0 || ow == 0 {
		clear(dx)
		return true
	}
	if !maxPool2x2BackwardAVX512(&dx[0], &dy[0], &at[0], w, ow, oh, ow/16, poolTail(ow)) {
		return false
	}
	clearUncovered(dx, w, ow, oh)
	return true
}

// poolTail packs the masks of a row's last, partial chunk of ow%16
// windows: its 2·rem input lanes in two vectors (bits 0-15 and 16-31) and
// its rem outputs (bits 32-47); 0 when ow is a multiple of 16.
func poolTail(ow int) int {
	rem := ow % 16
	if rem == 0 {
		return 0
	}
	in := 2 * rem
	return (1<<min(in, 16) - 1) | (1<<max(in-16, 0)-1)<<16 | (1<<rem-1)<<32
}

//go:noescape
func maxPool2x2AVX2(y *float32, at *int64, x *float32, w, ow, oh int, masks *int32)

// maxPool2x2AVX2Go runs the AVX2 kernel where its int32 positions fit,
// the Go loop elsewhere.
func maxPool2x2AVX2Go(y []float32, at []int64, x []float32, w, ow, oh int) {
	if int64(2*oh)*int64(w) >= 1<<31 {
		maxPool2x2Go(y, at, x, w, ow, oh)
		return
	}
	masks := poolMasksAVX2(ow % 8)
	maxPool2x2AVX2(&y[0], &at[0], &x[0], w, ow, oh, &masks[0])
}

// poolMasksAVX2 is the AVX2 kernel's tail of rem windows as VMASKMOVPS
// masks (-1 in a lane taken): the 2·rem input lanes of the two vectors
// of a row, the rem outputs, and the rem positions as int64 lanes in two
// vectors of 4.
func poolMasksAVX2(rem int) [40]int32 {
	var m [40]int32
	lane := func(taken bool) int32 {
		if taken {
			return -1
		}
		return 0
	}
	for i := range 8 {
		m[i] = lane(i < 2*rem)      // row inputs, the first vector
		m[8+i] = lane(8+i < 2*rem)  // the second
		m[16+i] = lane(i < rem)     // outputs
		m[24+2*i] = lane(i < rem)   // positions: int64 lane i, low half
		m[24+2*i+1] = lane(i < rem) // and high half
	}
	return m
}
