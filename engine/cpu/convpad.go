package cpu

import (
	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
)

// padding is the layout in which a convolution's windows and rows
// products read a sample: each plane (channels of rows×cols) zero-padded
// and split into the phases of the strides, so that every tap of every
// window is at a fixed offset from the window's output position, output
// rows Stride = w apart and output columns 1 apart, whatever the stride.
//
// With strides (sh, sw), input row y = sh·i + a is row i of phase a. Tap
// row ky reads input row sh·oy + ky·dh − ph = sh·(oy + q) + a, where
// q = ⌊(ky·dh − ph)/sh⌋ and a is the remainder: row oy + q of phase a.
// The phase planes are padded to rows q0 … OH−1+q1 of every shift q in
// [q0, q1], so row oy + q of a phase sits at padded row oy + q − q0;
// likewise the columns. Only the phases some tap reads are kept (a 1×1
// convolution of stride 2 reads one phase in four). With strides of 1
// there is one phase, padded by the padding: the plain zero-padded image.
type padding struct {
	channels, rows, cols int     // the sample's planes
	sh, sw               int     // the strides: phases along rows and columns
	qy0, qx0             int     // the smallest tap shifts, ⌊−ph/sh⌋ and ⌊−pw/sw⌋
	h, w                 int     // a padded phase plane
	slots                []int   // phase a·sw+b's plane within a channel, or −1
	planes               int     // phase planes kept per channel
	offs                 []int32 // tap (channel, kernel row, kernel column) → offset
	slack                int     // elements read past the planes
}

// newPadding lays out planes of rows×cols for windows of kh×kw taps with
// strides sh, sw, padding ph, pw and dilations dh, dw, producing outH×outW
// positions. For a windows product, tile is its tiles' width (rows whose
// width is not a multiple of it are flattened, windowsInto); for a rows
// product, 0.
func newPadding(channels, rows, cols, kh, kw, sh, sw, ph, pw, dh, dw, outH, outW, tile int) padding {
	p := padding{channels: channels, rows: rows, cols: cols, sh: sh, sw: sw}
	p.qy0, p.qx0 = floorDiv(-ph, sh), floorDiv(-pw, sw)
	qy1, qx1 := floorDiv((kh-1)*dh-ph, sh), floorDiv((kw-1)*dw-pw, sw)
	p.h = outH + qy1 - p.qy0
	// A row's right padding is the next row's left: output column x of
	// tap shift qx reads padded column x + qx − qx0, and one past the
	// row lands in the next row's left padding (zero) as long as w ≥
	// outW + qx1; the data columns read, up to outW + qx1 of each phase,
	// must fit after the left padding, and a flattened product's output
	// rows take w ≥ outW. That saves up to −qx0 columns a row over
	// padding both sides (16 → 15 for a 14-wide image and a 3×3 kernel):
	// a shallower weight gradient (the rows product's depth is outH·w).
	p.w = max(1, outW, outW+qx1)
	for b := range min(sw, cols) {
		p.w = max(p.w, min((cols-b+sw-1)/sw, outW+qx1)-p.qx0)
	}
	if tile > 0 && outW%tile != 0 {
		// A flattened windows product computes outH·w positions in
		// tiles, the last one partial (computed into scratch and
		// merged): the width of the fewest tiles, the widest of those
		// (14 rows of 16 make 7 whole tiles of 32, of 15 six and a part).
		wide := max(p.w, outW+qx1-p.qx0)
		for w := wide; w >= p.w; w-- {
			if (outH*w+tile-1)/tile < (outH*wide+tile-1)/tile {
				wide = w
			}
		}
		p.w = wide
	}
	// The rows product, and the windows product over flattened rows,
	// read whole padded rows from the last tap's offset, qx1 − qx0 past
	// the planes; the windows product reads WindowsSlack past that.
	p.slack = gemm.WindowsSlack + qx1 - p.qx0
	p.slots = make([]int, sh*sw)
	for i := range p.slots {
		p.slots[i] = -1
	}
	type tap struct{ slot, qy, qx int }
	taps := make([]tap, 0, kh*kw)
	for i := range kh {
		for j := range kw {
			ry, rx := i*dh-ph, j*dw-pw
			qy, qx := floorDiv(ry, sh), floorDiv(rx, sw)
			phase := (ry-sh*qy)*sw + (rx - sw*qx)
			if p.slots[phase] < 0 {
				p.slots[phase] = p.planes
				p.planes++
			}
			taps = append(taps, tap{p.slots[phase], qy, qx})
		}
	}
	plane := p.h * p.w
	p.offs = make([]int32, 0, channels*kh*kw)
	for ch := range channels {
		for _, t := range taps {
			p.offs = append(p.offs, int32((ch*p.planes+t.slot)*plane+(t.qy-p.qy0)*p.w+t.qx-p.qx0))
		}
	}
	return p
}

// spread is the layout of a convolution's output gradient for the rows
// product: channels of rows×cols, each row stretched to w with zeros.
func spread(channels, rows, cols, w int) padding {
	return padding{channels: channels, rows: rows, cols: cols, sh: 1, sw: 1, h: rows, w: w, slots: []int{0}, planes: 1}
}

// floorDiv is ⌊a/b⌋ for b > 0.
func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// elems is the size of the padded planes with the slack read past them.
func (p padding) elems() int { return p.channels*p.planes*p.h*p.w + p.slack }

// fits reports whether the windows' offsets fit in int32.
func (p padding) fits() bool { return int64(p.elems()) <= windowsMax }

// windowsMax is the largest padded layout (its offsets are int32); a
// sample past it takes the im2col route. Tests lower it to run that
// route on small samples.
var windowsMax int64 = 1<<31 - 1

// padInto copies a sample (channels of rows×cols) into dst, whose padding
// is zero and stays so: only the elements of the phases kept that fall
// inside their padded planes are written.
func padInto[T float](dst, src []T, p padding) {
	plane := p.h * p.w
	if p.sh == 1 && p.sw == 1 {
		// One phase: every channel's rows into its padded plane, from
		// row −qy0, column −qx0, in one call.
		rows, cols := min(p.rows, p.h+p.qy0), min(p.cols, p.w+p.qx0)
		if slot := p.slots[0]; slot >= 0 && rows > 0 && cols > 0 {
			at := slot*plane - p.qy0*p.w - p.qx0
			vmath.CopyPlanes(dst[at:], p.w, p.planes*plane, src, p.cols, p.rows*p.cols, p.channels, rows, cols)
		}
		return
	}
	for ch := range p.channels {
		in := src[ch*p.rows*p.cols : (ch+1)*p.rows*p.cols]
		for a := range p.sh {
			if p.sw == 2 && p.splitPair(a) {
				// Both column phases of these rows in one pass: input
				// row sh·i + a into padded row i − qy0 of each.
				if rows := min((p.rows-a+p.sh-1)/p.sh, p.h+p.qy0); rows > 0 {
					at := -p.qy0*p.w - p.qx0
					even := dst[(ch*p.planes+p.slots[a*2])*plane+at:]
					odd := dst[(ch*p.planes+p.slots[a*2+1])*plane+at:]
					vmath.DeinterleaveRows(even, p.w, odd, p.w, in[a*p.cols:], p.sh*p.cols, rows, p.cols)
				}
				continue
			}
			for b := range p.sw {
				slot := p.slots[a*p.sw+b]
				if slot < 0 {
					continue
				}
				out := dst[(ch*p.planes+slot)*plane : (ch*p.planes+slot+1)*plane]
				// Input row sh·i + a is padded row i − qy0; column
				// sw·j + b padded column j − qx0.
				rows := min((p.rows-a+p.sh-1)/p.sh, p.h+p.qy0)
				cols := min((p.cols-b+p.sw-1)/p.sw, p.w+p.qx0)
				if rows <= 0 || cols <= 0 {
					continue
				}
				if p.sh == 1 && p.sw == 1 {
					vmath.CopyBlock(out[-p.qy0*p.w-p.qx0:], p.w, in, p.cols, rows, cols)
					continue
				}
				for i := range rows {
					// Every sw-th element of the input row from b, into
					// a run of the padded row.
					from := in[(p.sh*i+a)*p.cols+b:][:p.sw*(cols-1)+1]
					to := out[(i-p.qy0)*p.w-p.qx0:][:cols]
					if p.sw == 1 {
						copy(to, from)
						continue
					}
					for j := range to {
						to[j] = from[p.sw*j]
					}
				}
			}
		}
	}
}

// splitPair reports whether padInto can write both column phases of the
// rows of phase a (columns of stride 2) in one pass: both are kept and
// take every column of their parity.
func (p padding) splitPair(a int) bool {
	return p.slots[a*2] >= 0 && p.slots[a*2+1] >= 0 && p.cols >= 2 &&
		(p.cols+1)/2 <= p.w+p.qx0 && p.cols/2 <= p.w+p.qx0
}
