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
	tail := 0
	if rem := ow % 16; rem > 0 {
		in := 2 * rem
		tail = (1<<min(in, 16) - 1) | (1<<max(in-16, 0)-1)<<16 | (1<<rem-1)<<32
	}
	maxPool2x2AVX512(&y[0], &at[0], &x[0], w, ow, oh, ow/16, tail)
}
