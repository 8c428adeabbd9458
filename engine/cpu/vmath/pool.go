package vmath

import "math/bits"

// MaxPool2x2 sets each element of y (oh rows of ow) to the maximum of its
// 2×2 window of x (rows w apart, windows 2 apart, 2·oh ≤ rows of x and
// 2·ow ≤ w) and at to the window's maximum's position in x (a row-major
// index), in PyTorch's order: the first tap in row-major order that equals
// the maximum, or the last NaN when the window holds one. The value stored
// is that tap's own (of −0 and +0, the first's sign).
//
// Which tap holds the maximum is random for most data, so a branch per
// tap would be mispredicted half the time: the Go loop finds the maximum
// with the builtin max and its first tap from the bit mask of the taps
// equal to it; the vector kernels split the taps of 16 windows (AVX-512)
// or 8 (AVX2) into four vectors and pick among them with masks.
func MaxPool2x2[T ~float32 | ~float64](y []T, at []int64, x []T, w, ow, oh int) {
	if oh < 0 || ow < 0 || 2*ow > w {
		panic("vmath.MaxPool2x2: " + itoa(oh) + "×" + itoa(ow) + " windows of 2×2 in rows of " + itoa(w))
	}
	if oh == 0 || ow == 0 {
		return
	}
	if len(y) < oh*ow || len(at) < oh*ow || len(x) < (2*oh-1)*w+2*ow {
		panic("vmath.MaxPool2x2: y, at or x too short: " + itoa(len(y)) + ", " + itoa(len(at)) + ", " + itoa(len(x)) +
			" for " + itoa(oh) + "×" + itoa(ow) + " windows in rows of " + itoa(w))
	}
	if y32, ok := any(y).([]float32); ok {
		impl.maxPool2x2(y32, at, any(x).([]float32), w, ow, oh)
		return
	}
	maxPool2x2Go(y, at, x, w, ow, oh)
}

func maxPool2x2Go[T ~float32 | ~float64](y []T, at []int64, x []T, w, ow, oh int) {
	// Tap k's offset from its window's first element.
	offsets := [4]int{0, 1, w, w + 1}
	for r := range oh {
		r0 := x[2*r*w : 2*r*w+2*ow]
		r1 := x[(2*r+1)*w : (2*r+1)*w+2*ow]
		ys, ats := y[r*ow:(r+1)*ow], at[r*ow:(r+1)*ow]
		base := 2 * r * w
		for o := range ys {
			c := 2 * o
			taps := [4]T{r0[c], r0[c+1], r1[c], r1[c+1]}
			best := max(taps[0], taps[1], taps[2], taps[3])
			k := 0
			if best == best {
				mask := b2u8(taps[0] == best) | b2u8(taps[1] == best)<<1 | b2u8(taps[2] == best)<<2 | b2u8(taps[3] == best)<<3
				k = bits.TrailingZeros8(mask)
			} else {
				// A NaN: the last one, as a sequential scan keeps it.
				mask := b2u8(taps[0] != taps[0]) | b2u8(taps[1] != taps[1])<<1 | b2u8(taps[2] != taps[2])<<2 | b2u8(taps[3] != taps[3])<<3
				k = bits.Len8(mask) - 1
			}
			ys[o], ats[o] = taps[k&3], int64(base+c+offsets[k&3])
		}
	}
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// MaxPool2x2Backward is MaxPool2x2's gradient: it sets dx (h rows of w)
// to zero but at the positions in at, where it adds dy's elements, as
// PyTorch's backward scatters them (a −0 gradient lands as +0). It
// reports false, leaving dx partly written, when it cannot place a
// position: the vector kernel places each in its own window only (as
// MaxPool2x2 leaves them), the Go loop anywhere in the plane; the caller
// then scatters them itself, checking each.
func MaxPool2x2Backward[T ~float32 | ~float64](dx, dy []T, at []int64, w, h, ow, oh int) bool {
	if oh < 0 || ow < 0 || 2*ow > w || 2*oh > h {
		panic("vmath.MaxPool2x2Backward: " + itoa(oh) + "×" + itoa(ow) + " windows of 2×2 in " + itoa(h) + "×" + itoa(w))
	}
	if len(dx) < h*w || len(dy) < oh*ow || len(at) < oh*ow {
		panic("vmath.MaxPool2x2Backward: dx, dy or at too short: " + itoa(len(dx)) + ", " + itoa(len(dy)) + ", " + itoa(len(at)) +
			" for " + itoa(oh) + "×" + itoa(ow) + " windows in " + itoa(h) + "×" + itoa(w))
	}
	if d32, ok := any(dx).([]float32); ok {
		return impl.maxPool2x2Backward(d32[:h*w], any(dy).([]float32), at, w, ow, oh)
	}
	return maxPool2x2BackwardGo(dx[:h*w], dy, at, w, ow, oh)
}

// maxPool2x2BackwardGo clears the plane and adds each gradient at its
// position, anywhere in it.
func maxPool2x2BackwardGo[T ~float32 | ~float64](dx, dy []T, at []int64, w, ow, oh int) bool {
	clear(dx)
	for q, g := range dy[:oh*ow] {
		i := at[q]
		if uint64(i) >= uint64(len(dx)) {
			return false
		}
		dx[i] += g
	}
	return true
}

// clearUncovered zeroes what no window covers: the last column of an odd
// width and the last row of an odd height (dx is h rows of w).
func clearUncovered[T ~float32 | ~float64](dx []T, w, ow, oh int) {
	if 2*ow < w {
		for r := range 2 * oh {
			clear(dx[r*w+2*ow : (r+1)*w])
		}
	}
	clear(dx[2*oh*w:])
}
