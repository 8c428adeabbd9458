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
