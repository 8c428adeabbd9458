package cpu

import (
	"fmt"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The convolution kernels (device.Convolver), one sample at a time, the
// samples shared among the threads, each thread with buffers of its own
// that stay in its cache.
//
// The convolution is an implicit GEMM (gemm.Windows): the sample is
// copied once into a zero-padded buffer, split into the phases of the
// strides (convpad.go), and the GEMM's micro-kernel reads each tap's row
// of the column matrix from it in place, at the tap's offset. No column
// matrix is written: im2col would write C·KH·KW × OH·OW elements per
// sample (9 copies of the input for a 3×3 kernel) and the GEMM would copy
// them again into packed panels. The weight's gradient, a sum over the
// positions, reads the same buffer with the positions as the depth
// (gemm.Rows). With strides of 1 the input's gradient is the windows
// product of the output gradient padded by the kernel's extent less the
// padding, with the weights flipped and transposed (a transposed
// convolution as a convolution), so the backward needs no fold (col2im)
// either.
//
// Rows of a width that is not a multiple of the kernel's tile (a 14-wide
// image) are flattened into one run through the padded rows, padding
// columns computed too; with a multiple of 32 channels (output channels
// for the forward, input channels for the input gradient) the product runs
// turned instead (gemm.GemmPositionsA: 14 or 8 positions by 32 channels a
// tile, no padding column, nothing to pack afterwards) where that computes
// fewer positions (usePositions). When both gradients are wanted, the output
// gradient is padded once: the weight gradient reads its spread rows
// from the input gradient's padded copy (spreadIn).
//
// With larger strides (and dilations of 1, two or more taps a phase on
// average) the input splits into the strides' phases, each a convolution
// of stride 1 of the output gradient with the taps that reach it
// (backPhase): one windows product a phase, interleaved into the input
// gradient row by row.
//
// The input gradient of the rest (fewer than 4 input channels, kernels
// not much larger than the stride, dilated strided kernels) is a packed GEMM of
// each sample's column gradient, folded at once while it is in cache:
// PyTorch's own CPU algorithm (slow_conv2d); so is every product whose
// offsets would not fit in int32.
//
// A 1×1 convolution with stride 1 and no padding needs no columns: the
// sample itself is the matrix [C, H·W].
//
// The weight's gradient sums over the samples. So that it repeats bit for
// bit whatever the number of threads, the samples are split into blocks
// chosen from N and the shapes alone; each block's sum runs in sample
// order into a partial of its own, and the partials are added in block
// order. One block (N = 1, or weights too large for several partials)
// runs its samples in order with every thread in each GEMM.

const (
	// convBlocksMax is the most blocks a weight gradient is split into:
	// enough to balance 16 threads.
	convBlocksMax = 16
	// convPartialsMax bounds the bytes of the blocks' partial sums.
	convPartialsMax = 32 << 20
)

// convBlocks is the number of blocks the N samples' weight gradient is
// summed in, for a weight of wElems elements of size bytes.
func convBlocks(n, wElems, size int) int {
	return max(1, min(n, convBlocksMax, convPartialsMax/max(1, wElems*size)))
}

// conv is one convolution call on slices of T (float32 or float64).
type conv[T float] struct {
	g         device.WindowGeom
	o, ck, l  int  // output channels, weight columns C·KH·KW, positions OH·OW
	direct    bool // a 1×1 kernel, stride 1, no padding: the columns are x itself
	serial    func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)
	threaded  func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)
	plane, in int // elements of one input plane, of one input sample

	// The forward as a windows product (not direct): the sample
	// zero-padded and split into the strides' phases (fwd).
	windows bool
	fwd     padding
	// The input gradient as a windows product (windows, strides of 1,
	// padding no wider than the kernel's extent, 4 or more channels): the
	// output gradient padded (back), with the flipped weights.
	windowsBack bool
	back        padding
	// The input gradient of strides above 1 (dilations of 1, 4 or more
	// channels) as one windows product a phase of the input (phases):
	// wf holds every phase's flipped weights one after another.
	phases []backPhase
	// The weight gradient as a rows product (windows): row t of A is the
	// sample padded (gx, as narrow as the windows allow) from tap t's
	// offset on, through OH whole padded rows; B is the output gradient
	// spread to rows as long (grad, zero past OW); C is the gradient
	// transposed, [C·KH·KW, O].
	windowsGrad bool
	gx, grad    padding
	// spreadIn: the input gradient's padded output gradient (back) holds
	// the rows product's B as well, from element spreadOff on with its
	// channels a back plane apart: a back row is as wide as a gx row,
	// its right padding (and the next row's left) the zeros that spread
	// puts past OW, and a padding row after the last (qh ≥ 1), so that
	// when both gradients are wanted the output gradient is padded once.
	spreadIn bool

	// This call's weights packed for the windows products once, for
	// every sample (gemm.PackWindowsA): the forward's, the input
	// gradient's flipped ones, and each phase's.
	wa, wb gemm.WindowsA[T]
	phaseA []gemm.WindowsA[T]
	// The forward and the input gradient as positions products
	// (gemm.GemmPositionsA: positions as the tiles' rows, channels as
	// the vectors) where that computes fewer positions than the windows
	// product (usePositions), with the weights packed for them.
	posFwd, posBack bool
	pa, pb          gemm.PositionsA[T]
}

func newConv[T float](g device.WindowGeom, o int) *conv[T] {
	c := &conv[T]{g: g, o: o, ck: g.C * g.KH * g.KW, l: g.OH * g.OW, plane: g.H * g.W}
	c.in = g.C * c.plane
	c.direct = g.KH == 1 && g.KW == 1 && g.SH == 1 && g.SW == 1 && g.PH == 0 && g.PW == 0 && g.OH == g.H && g.OW == g.W
	switch p := any(c).(type) {
	case *conv[float32]:
		p.serial, p.threaded = gemm.SgemmSerial, gemm.Sgemm
	case *conv[float64]:
		p.serial, p.threaded = gemm.DgemmSerial, gemm.Dgemm
	}
	if c.direct || c.l == 0 {
		return c
	}
	tile := gemm.WindowsTileWidth[T]()
	c.fwd = newPadding(g.C, g.H, g.W, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, g.DH, g.DW, g.OH, g.OW, tile)
	if usePositions[T](o, g.OH, g.OW, c.fwd.w) {
		c.posFwd = true
		c.fwd = newPadding(g.C, g.H, g.W, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, g.DH, g.DW, g.OH, g.OW, 0)
	}
	c.windows = c.fwd.fits()
	c.gx = newPadding(g.C, g.H, g.W, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, g.DH, g.DW, g.OH, g.OW, 0)
	c.grad = spread(o, g.OH, g.OW, c.gx.w)
	c.windowsGrad = c.windows && c.gx.fits()
	// dx[i] = Σ_t w[t]·dy[i - t·d + p]: with t' = K-1-t the flipped
	// kernel reads dy padded by q = d·(K-1) - p, which must not be
	// negative (padding wider than the kernel's reach); with strides of
	// 1 only. The product's rows are the input channels: with fewer than
	// 4 most of a kernel tile's rows would be wasted, and the fold is
	// faster (a 3×3 convolution of 1 channel: 0.84 ms against 1.1 for 64
	// samples of 28×28; equal at 3 channels).
	qh, qw := g.DH*(g.KH-1)-g.PH, g.DW*(g.KW-1)-g.PW
	if c.windows && g.SH == 1 && g.SW == 1 && qh >= 0 && qw >= 0 && g.C >= 4 {
		c.back = newPadding(o, g.OH, g.OW, g.KH, g.KW, 1, 1, qh, qw, g.DH, g.DW, g.H, g.W, tile)
		narrow := newPadding(o, g.OH, g.OW, g.KH, g.KW, 1, 1, qh, qw, g.DH, g.DW, g.H, g.W, 0)
		// The padded output gradient's rows as wide as the weight
		// gradient's (w), and a padding row after the last: its spread
		// output gradient is the padded one from its first data element
		// on.
		spreads := func(w int) bool { return c.windowsGrad && w == c.gx.w && qh >= 1 }
		switch {
		case usePositions[T](g.C, g.H, g.W, c.back.w):
			c.posBack, c.back = true, narrow
		case spreads(narrow.w):
			c.back = narrow // rather than the flattened product's width
		}
		c.windowsBack = c.back.fits()
		c.spreadIn = c.windowsBack && spreads(c.back.w)
	}
	// Phases of one tap each are small products that the fold's one
	// product outruns (a 4×4 kernel of stride 4: 19-20 GFLOP/s as phases,
	// 32-33 folded; 3×3 of stride 3: 24-28 against 29-37); from two taps a
	// phase on average they win (3×3 of stride 2: 54-66 against 31-38; 4×4
	// of stride 2: 70-72 against 41-51).
	if c.windows && (g.SH > 1 || g.SW > 1) && g.DH == 1 && g.DW == 1 && g.C >= 4 && g.KH*g.KW >= 2*g.SH*g.SW {
		c.phases = backPhases(g, o)
	}
	return c
}

// usePositions reports whether a windows product of m rows (channels) at
// rows×cols positions is to run as a positions product: there is a
// positions kernel for m rows, and it computes fewer positions than the
// windows product over rows flattened to their padded width w, which
// computes every padding column and rounds the whole up to its tiles (a
// 14-wide image: 14 positions a row against 16), then packs the rows into
// the output. Rows that are a multiple of the windows tile are not
// flattened and waste nothing.
func usePositions[T float](m, rows, cols, w int) bool {
	p := gemm.PositionsTile[T](m, cols)
	if p == 0 || !flattened[T](cols) {
		return false
	}
	tile := gemm.WindowsTileWidth[T]()
	return rows*((cols+p-1)/p)*p <= (rows*w+tile-1)/tile*tile
}

// backPhase is one phase of a strided convolution's input gradient: the
// input positions (sh·i + a, sw·j + b), which only the kernel rows ky ≡
// a + ph and columns kx ≡ b + pw (mod the strides) reach. Over them the
// input gradient is a convolution of stride 1 of the output gradient:
// with those taps' rows ky_0 < … < ky_{M−1} (sh apart), input row sh·i +
// a takes dy row i − q_m from tap m, q_m = (ky_m − ph − a)/sh = q_0 + m,
// so that, the taps flipped (u = M−1−m), tap u reads dy row i + u − P
// with P = q_0 + M − 1: a windows product with padding P (and likewise
// the columns).
type backPhase struct {
	a, b       int     // the phase's first input row and column
	rows, cols int     // its positions: ⌈(H−a)/sh⌉ × ⌈(W−b)/sw⌉
	ky, kx     []int   // its taps' kernel rows and columns, flipped (last first)
	padH, padW int     // P along rows and columns
	pad        padding // the shared padded output gradient, with its taps' offsets
	k, wOff    int     // its weights' columns (O·taps) and where they start in wf
	out        int     // where its product starts in the buffer (phasesElems)
}

// backPhases lays out the phases of the input gradient of g (dilations of
// 1) with o output channels. Every phase reads one copy of the output
// gradient, padded by the largest P before and as far as any phase reads
// after; each phase's padding has that layout and its own taps' offsets.
// A P below zero (taps that read rows ahead) is a shift within that
// layout. It returns nil, leaving the input gradient to the fold, when a
// phase has no taps (a kernel smaller than the stride: the fold's product
// writes those zeros with the rest, faster; a 1×1 convolution of stride
// 2 took 14 GFLOP/s as phases against 19), or when the offsets would not
// fit.
func backPhases(g device.WindowGeom, o int) []backPhase {
	taps := func(a, s, p, k int) []int {
		var t []int
		for kk := k - 1; kk >= 0; kk-- { // flipped: the last tap first
			if ((a+p-kk)%s+s)%s == 0 {
				t = append(t, kk)
			}
		}
		return t
	}
	var out []backPhase
	qh, qw, endH, endW := 0, 0, 0, 0 // the shared padding before (no P's below 0), and the rows and columns read
	for a := range min(g.SH, g.H) {
		for b := range min(g.SW, g.W) {
			ph := backPhase{a: a, b: b, rows: (g.H - a + g.SH - 1) / g.SH, cols: (g.W - b + g.SW - 1) / g.SW,
				ky: taps(a, g.SH, g.PH, g.KH), kx: taps(b, g.SW, g.PW, g.KW)}
			mh, mw := len(ph.ky), len(ph.kx)
			if mh == 0 || mw == 0 {
				return nil
			}
			// q_0 from the first tap in the forward order, which is the
			// flipped order's last.
			ph.padH = floorDiv(ph.ky[mh-1]-g.PH-a, g.SH) + mh - 1
			ph.padW = floorDiv(ph.kx[mw-1]-g.PW-b, g.SW) + mw - 1
			ph.k = o * mh * mw
			qh, qw = max(qh, ph.padH), max(qw, ph.padW)
			// Position i, tap u reads row i + u − P: the last, rows − 1
			// + mh − 1 − P, ends the rows read.
			endH, endW = max(endH, ph.rows+mh-1-ph.padH), max(endW, ph.cols+mw-1-ph.padW)
			out = append(out, ph)
		}
	}
	// The layout: rows and columns of dy from −qh and −qw to endH and
	// endW (past OH and OW: zeros), each channel a plane.
	shared := padding{channels: o, rows: g.OH, cols: g.OW, sh: 1, sw: 1, qy0: -qh, qx0: -qw,
		h: qh + max(endH, 1), w: qw + max(endW, 1), slots: []int{0}, planes: 1}
	shared.slack = gemm.WindowsSlack + shared.w // flattened rows read into the next
	if !shared.fits() {
		return nil
	}
	plane, wOff, outOff := shared.h*shared.w, 0, shared.elems()
	for p := range out {
		ph := &out[p]
		ph.pad = shared
		ph.pad.offs = make([]int32, 0, ph.k)
		for ch := range o {
			for u := range ph.ky {
				for v := range ph.kx {
					ph.pad.offs = append(ph.pad.offs, int32(ch*plane+(u-ph.padH+qh)*shared.w+v-ph.padW+qw))
				}
			}
		}
		ph.wOff, ph.out = wOff, outOff
		wOff += g.C * ph.k
		outOff += g.C * ph.rows * ph.cols
	}
	return out
}

// phasesElems is the size of the phases' buffer: the padded output
// gradient they share (its padding stays zero across samples), every
// phase's product (at its out), and room for the largest product's rows
// flattened to their padded width.
func (c *conv[T]) phasesElems() int {
	last := c.phases[len(c.phases)-1]
	flat := 0
	for _, ph := range c.phases {
		if flattened[T](ph.cols) {
			flat = max(flat, c.g.C*ph.rows*ph.pad.w)
		}
	}
	return last.out + c.g.C*last.rows*last.cols + flat
}

// phaseWeights writes into wf every phase's flipped weights, phase after
// phase: wf[wOff + c·k + (r, u, v)] = w[r, c, ky_u, kx_v].
func (c *conv[T]) phaseWeights(wf, w []T) {
	kh, kw := c.g.KH, c.g.KW
	for _, ph := range c.phases {
		dst := wf[ph.wOff:]
		for ch := range c.g.C {
			i := ch * ph.k
			for r := range c.o {
				src := w[r*c.ck+ch*kh*kw:]
				for _, ky := range ph.ky {
					for _, kx := range ph.kx {
						dst[i] = src[ky*kw+kx]
						i++
					}
				}
			}
		}
	}
}

// phasesInto writes sample dyn's input gradient into dxn: the output
// gradient padded once, each phase's windows product into the buffer
// (phasesElems), then dxn row by row, each row interleaving its phases'
// rows while it is in cache (a phase at a time would write every line of
// dxn once a phase).
func (c *conv[T]) phasesInto(dxn, dyn, buf []T, threads int) {
	g := c.g
	dyp := buf[:c.phases[0].pad.elems()]
	padInto(dyp, dyn, c.phases[0].pad) // the layout every phase shares
	last := c.phases[len(c.phases)-1]
	flat := buf[last.out+g.C*last.rows*last.cols:]
	product := func(ph *backPhase) []T { return buf[ph.out : ph.out+g.C*ph.rows*ph.cols] }
	for p := range c.phases {
		ph := &c.phases[p]
		windowsInto(product(ph), flat, c.phaseA[p], nil, dyp, ph.pad, ph.rows, ph.cols, threads)
	}
	// Phase a·sw' + b is rows a, a+sh, … and columns b, b+sw, …, where
	// sw' = min(sw, W) phases run along a row (backPhases's order).
	across := min(g.SW, g.W)
	for ch := range g.C {
		if across == 2 {
			// The common case: the rows of each a interleave the
			// even columns of phase b = 0 with the odd ones of b = 1.
			for a := range min(g.SH, g.H) {
				p0, p1 := &c.phases[a*2], &c.phases[a*2+1]
				vmath.InterleaveRows(dxn[ch*c.plane+a*g.W:], g.SH*g.W, product(p0)[ch*p0.rows*p0.cols:], p0.cols,
					product(p1)[ch*p1.rows*p1.cols:], p1.cols, p0.rows, g.W)
			}
			continue
		}
		for y := range g.H {
			row := dxn[ch*c.plane+y*g.W : ch*c.plane+(y+1)*g.W]
			i, first := y/g.SH, (y%g.SH)*across
			for b := range across {
				ph := &c.phases[first+b]
				from := product(ph)[(ch*ph.rows+i)*ph.cols:][:ph.cols]
				if across == 1 {
					copy(row, from)
					continue
				}
				for j, v := range from {
					row[b+g.SW*j] = v
				}
			}
		}
	}
}

// flipped writes into wf the weights of the input gradient's windows
// product: wf[c, (o, i, j)] = w[o, c, KH-1-i, KW-1-j].
func (c *conv[T]) flipped(wf, w []T) {
	kh, kw := c.g.KH, c.g.KW
	k := kh * kw
	for ch := range c.g.C {
		for r := range c.o {
			src := w[r*c.ck+ch*k : r*c.ck+(ch+1)*k]
			dst := wf[ch*c.o*k+r*k : ch*c.o*k+(r+1)*k]
			for i := range kh {
				for j := range kw {
					dst[i*kw+j] = src[(kh-1-i)*kw+kw-1-j]
				}
			}
		}
	}
}

// columns returns sample n's columns [C·KH·KW, OH·OW]: x's sample itself
// for a direct convolution, else unfolded into buf.
func (c *conv[T]) columns(buf, x []T, n int) []T {
	src := x[n*c.in : (n+1)*c.in]
	if c.direct {
		return src
	}
	k := c.g.KH * c.g.KW * c.l
	for ch := range c.g.C {
		unfoldPlane(buf[ch*k:(ch+1)*k], src[ch*c.plane:(ch+1)*c.plane], c.g)
	}
	return buf[:c.ck*c.l]
}

// foldInto overwrites sample n of dx with the fold of its column gradient.
func (c *conv[T]) foldInto(dx, dcols []T, n int) {
	dst := dx[n*c.in : (n+1)*c.in]
	k := c.g.KH * c.g.KW * c.l
	for ch := range c.g.C {
		foldPlane(dst[ch*c.plane:(ch+1)*c.plane], dcols[ch*k:(ch+1)*k], c.g, true)
	}
}

// forward computes y[n] = w·cols(n) (+ bias) for n in [lo, hi), on the
// threads given (1 when the caller divides the samples among threads).
// buf holds the sample's padded planes (their padding zero) or columns.
func (c *conv[T]) forward(y, x, w, bias, buf []T, lo, hi, threads int) {
	for n := lo; n < hi; n++ {
		yn := y[n*c.o*c.l : (n+1)*c.o*c.l]
		if c.windows {
			xp := buf[:c.fwd.elems()]
			padInto(xp, x[n*c.in:(n+1)*c.in], c.fwd)
			if c.posFwd {
				positionsInto(yn, c.pa, bias, xp, c.fwd, c.g.OH, c.g.OW, threads)
				continue
			}
			windowsInto(yn, buf[c.fwd.elems():], c.wa, bias, xp, c.fwd, c.g.OH, c.g.OW, threads)
			continue
		}
		beta := startWithBias(yn, bias, c.l)
		mm := c.serial
		if threads > 1 {
			mm = c.threaded
		}
		mm(false, false, c.o, c.l, c.ck, 1, w, c.ck, c.columns(buf, x, n), c.l, beta, yn, c.l)
	}
}

// backward accumulates the weight gradient of samples [lo, hi) into acc
// (overwriting it first when fresh; transposed for the rows product) and
// writes their input gradients. gbuf takes what the weight gradient
// reads: the sample's columns, or its padded planes and spread output
// gradient; dbuf its column gradient, or its padded output gradient for
// the products with the flipped weights (c.wb, c.pb, c.phaseA). The
// padding in gbuf and dbuf is zero.
func (c *conv[T]) backward(dx, acc, dy, x, w, gbuf, dbuf []T, lo, hi int, fresh bool, threads int) {
	mm := c.serial
	if threads > 1 {
		mm = c.threaded
	}
	for n := lo; n < hi; n++ {
		dyn := dy[n*c.o*c.l : (n+1)*c.o*c.l]
		var dyBack []T // dy padded for the input gradient's windows product
		if dx != nil && c.windowsBack {
			dyBack = dbuf[:c.back.elems()]
			padInto(dyBack, dyn, c.back)
		}
		if acc != nil {
			var beta T = 1
			if fresh && n == lo {
				beta = 0
			}
			if c.windowsGrad {
				xp := gbuf[:c.gx.elems()]
				padInto(xp, x[n*c.in:(n+1)*c.in], c.gx)
				k := c.g.OH * c.gx.w
				b, ldb := gbuf[c.gx.elems():], k
				if c.spreadIn && dyBack != nil {
					b, ldb = dyBack[c.spreadOff():], c.back.h*c.back.w
				} else {
					padInto(b, dyn, c.grad)
				}
				gemm.GemmRows(c.ck, c.o, k, 1, gemm.Rows[T]{Base: xp, Offs: c.gx.offs}, true, b, ldb, beta, acc, c.o, threads)
			} else {
				mm(false, true, c.o, c.ck, c.l, 1, dyn, c.l, c.columns(gbuf, x, n), c.l, beta, acc, c.ck)
			}
		}
		if dx == nil {
			continue
		}
		dxn := dx[n*c.in : (n+1)*c.in]
		switch {
		case c.direct:
			mm(true, false, c.ck, c.l, c.o, 1, w, c.ck, dyn, c.l, 0, dxn, c.l)
		case c.windowsBack:
			if c.posBack {
				positionsInto(dxn, c.pb, nil, dyBack, c.back, c.g.H, c.g.W, threads)
				break
			}
			windowsInto(dxn, dbuf[c.back.elems():], c.wb, nil, dyBack, c.back, c.g.H, c.g.W, threads)
		case c.phases != nil:
			c.phasesInto(dxn, dyn, dbuf, threads)
		default:
			mm(true, false, c.ck, c.l, c.o, 1, w, c.ck, dyn, c.l, 0, dbuf, c.l)
			c.foldInto(dx, dbuf, n)
		}
	}
}

// spreadOff is where, in the padded output gradient (back), the spread
// one starts (spreadIn): at its first data element, row −qy0, column −qx0.
func (c *conv[T]) spreadOff() int { return -c.back.qy0*c.back.w - c.back.qx0 }

// windowsInto sets out [m, rows·cols] to a·B (+ bias per row), B the
// windows of the padded planes xp (layout p) at rows×cols positions and a
// the weights packed for them (m rows). When cols is not a multiple of the
// kernel's tile width, every row would end in a partial tile, computed
// into a scratch tile and merged (every tile, for a 14-wide image);
// instead the rows are flattened into one run through the padded rows,
// their padding columns computed too (p.w − cols of p.w; a partial tile
// wastes more), into flat [m, rows·p.w], then packed into out.
func windowsInto[T float](out, flat []T, a gemm.WindowsA[T], bias, xp []T, p padding, rows, cols, threads int) {
	m, dst, n := a.Rows(), out, rows*cols
	win := gemm.Windows[T]{Base: xp, Offs: p.offs, Width: cols, Stride: p.w}
	if !flattened[T](cols) {
		beta := startWithBias(dst, bias, n)
		gemm.GemmWindowsA(a, n, 1, win, beta, dst, n, threads)
		return
	}
	n = rows * p.w
	dst, win.Width, win.Stride = flat[:m*n], n, 0
	gemm.GemmWindowsA(a, n, 1, win, 0, dst, n, threads)
	if bias == nil {
		vmath.CopyBlock(out, cols, dst, p.w, m*rows, cols)
		return
	}
	// The bias added as the rows are packed: one pass instead of a fill
	// before the product and its reading C back, and the same sums (the
	// product rounded, then the bias added with one rounding).
	for r, b := range bias {
		vmath.CopyRowsAdd(out[r*rows*cols:], cols, dst[r*n:], p.w, rows, cols, b)
	}
}

// packForward packs the weights w for this call's forward (c.pa or c.wa),
// in scratch from d that the returned function frees.
func (c *conv[T]) packForward(d *Device, w []T) (free func(), err error) {
	if c.posFwd {
		c.pa, free, err = packPositions(d, c.o, c.ck, w)
	} else {
		c.wa, free, err = packWindows(d, c.o, c.ck, w)
	}
	return free, err
}

// packBack packs the flipped weights wf for this call's input gradient
// (c.pb or c.wb), in scratch from d that the returned function frees.
func (c *conv[T]) packBack(d *Device, wf []T) (free func(), err error) {
	k := c.o * c.g.KH * c.g.KW
	if c.posBack {
		c.pb, free, err = packPositions(d, c.g.C, k, wf)
	} else {
		c.wb, free, err = packWindows(d, c.g.C, k, wf)
	}
	return free, err
}

// positionsInto sets out [m, rows·cols] to a·B (+ bias per row) as a
// positions product (gemm.GemmPositionsA), B the windows of the padded
// planes xp (layout p) at rows×cols positions: no padding column
// computed and nothing to pack afterwards.
func positionsInto[T float](out []T, a gemm.PositionsA[T], bias, xp []T, p padding, rows, cols, threads int) {
	n := rows * cols
	gemm.GemmPositionsA(a, n, gemm.Windows[T]{Base: xp, Offs: p.offs, Width: cols, Stride: p.w}, bias, out, n, threads)
}

// packPositions packs a, m×k, for this call's positions products, in
// scratch from d (gemm.PackPositionsA).
func packPositions[T float](d *Device, m, k int, a []T) (gemm.PositionsA[T], func(), error) {
	buf, free, err := convScratch[T](d, 1, gemm.PositionsALen[T](m, k))
	if err != nil {
		return gemm.PositionsA[T]{}, nil, err
	}
	return gemm.PackPositionsA(buf, m, k, a, k), free, nil
}

// packWindows packs a, m×k, for this call's windows products, in scratch
// from d (gemm.PackWindowsA).
func packWindows[T float](d *Device, m, k int, a []T) (gemm.WindowsA[T], func(), error) {
	buf, free, err := convScratch[T](d, 1, gemm.WindowsALen[T](m, k))
	if err != nil {
		return gemm.WindowsA[T]{}, nil, err
	}
	return gemm.PackWindowsA(buf, m, k, a, k), free, nil
}

// startWithBias fills each row (n long) of dst with its bias and returns
// the beta that adds a product to it, as PyTorch's slow_conv2d starts the
// output from the bias; without a bias, beta 0.
func startWithBias[T float](dst, bias []T, n int) T {
	if bias == nil {
		return 0
	}
	for r, b := range bias {
		fillFloats(dst[r*n:(r+1)*n], b)
	}
	return 1
}

// flattened reports whether windowsInto flattens rows of cols positions.
func flattened[T float](cols int) bool {
	return cols%gemm.WindowsTileWidth[T]() != 0
}

// checkConv checks the operands of a convolution against g and returns
// the output channels.
func checkConv(op string, g device.WindowGeom, x, w, bias, y device.View) (int, error) {
	if err := checkWindows(op, g, x, w, bias, y); err != nil {
		return 0, err
	}
	ck, l := g.C*g.KH*g.KW, g.OH*g.OW
	o := 0
	if len(w.Shape) > 0 {
		o = w.Shape[0]
	}
	bad := x.Numel() != g.N*g.C*g.H*g.W || w.Numel() != o*ck || y.Numel() != g.N*o*l ||
		w.DType != x.DType || y.DType != x.DType || present(bias) && (bias.Numel() != o || bias.DType != x.DType)
	if bad {
		return 0, fmt.Errorf("cpu: %s: input %v %v, weight %v %v, bias %v, output %v %v for windows %+v",
			op, x.DType, x.Shape, w.DType, w.Shape, bias.Shape, y.DType, y.Shape, g)
	}
	if x.DType != dtype.Float32 && x.DType != dtype.Float64 {
		return 0, fmt.Errorf("cpu: %s of %v", op, x.DType)
	}
	return o, nil
}

// Conv2d is device.Convolver's: float32 and float64.
func (d *Device) Conv2d(y, x, w, bias device.View, g device.WindowGeom) error {
	o, err := checkConv("conv2d", g, x, w, bias, y)
	if err != nil {
		return err
	}
	if x.DType == dtype.Float32 {
		return convForward(d, newConv[float32](g, o), y, x, w, bias)
	}
	return convForward(d, newConv[float64](g, o), y, x, w, bias)
}

func convForward[T float](d *Device, c *conv[T], yv, xv, wv, bv device.View) error {
	y, x, w, bias := rowsOf[T](yv), rowsOf[T](xv), rowsOf[T](wv), optRows[T](bv)
	n := c.g.N
	if n == 0 || c.o == 0 {
		return nil
	}
	if c.windows {
		free, err := c.packForward(d, w)
		if err != nil {
			return err
		}
		defer free()
	}
	threads := parallel.Threads()
	if n < threads || threads == 1 {
		// Too few samples to go round: one at a time, every thread in
		// its GEMM.
		buf, free, err := convScratch[T](d, 1, c.bufElems())
		if err != nil {
			return err
		}
		defer free()
		c.forward(y, x, w, bias, buf, 0, n, threads)
		return nil
	}
	per := c.bufElems()
	buf, free, err := convScratch[T](d, threads, per)
	if err != nil {
		return err
	}
	defer free()
	// A buffer a thread, which runs the same samples call after call.
	parallel.ForThreads(n, 1, threads, func(t, lo, hi int) {
		c.forward(y, x, w, bias, buf[t*per:(t+1)*per], lo, hi, 1)
	})
	return nil
}

// bufElems is the size of the forward's buffer: one sample's padded
// planes, or its columns (none when direct).
func (c *conv[T]) bufElems() int {
	switch {
	case c.windows:
		if flattened[T](c.g.OW) && !c.posFwd {
			return c.fwd.elems() + c.o*c.g.OH*c.fwd.w
		}
		return c.fwd.elems()
	case c.direct:
		return 0
	}
	return c.ck * c.l
}

// backElems is the size of the backward's buffers: what the weight
// gradient reads of one sample (its columns, or its padded planes and
// spread output gradient), and its column gradient or padded output
// gradient for the input's.
func (c *conv[T]) backElems(dw, dx bool) (gbuf, dbuf int) {
	switch {
	case !dw || c.direct:
	case c.spreadIn && dx:
		gbuf = c.gx.elems() // the spread output gradient is in dbuf's
	case c.windowsGrad:
		gbuf = c.gx.elems() + c.grad.elems()
	default:
		gbuf = c.ck * c.l
	}
	switch {
	case !dx || c.direct:
	case c.windowsBack:
		dbuf = c.back.elems()
		if flattened[T](c.g.W) && !c.posBack {
			dbuf += c.g.C * c.g.H * c.back.w
		}
	case c.phases != nil:
		dbuf = c.phasesElems()
	default:
		dbuf = c.ck * c.l
	}
	return gbuf, dbuf
}

// convScratch allocates slots buffers of per elements from d, so that the
// scratch counts against the device's memory limit.
func convScratch[T float](d *Device, slots, per int) ([]T, func(), error) {
	if slots*per == 0 {
		return nil, func() {}, nil
	}
	var z T
	dt := dtype.Float32
	if _, ok := any(z).(float64); ok {
		dt = dtype.Float64
	}
	buf, err := d.Alloc(dt, slots*per)
	if err != nil {
		return nil, nil, err
	}
	// Zero, for the padding of the windows products' planes (which the
	// samples never overwrite) and so that nothing stale is ever read.
	s := elems[T](buf)[:slots*per]
	clear(s)
	return s, func() { d.Free(buf) }, nil
}

// Conv2dBackward is device.Convolver's: float32 and float64.
func (d *Device) Conv2dBackward(dx, dw, dbias, dy, x, w device.View, g device.WindowGeom) error {
	o, err := checkConv("conv2d backward", g, x, w, device.View{}, dy)
	if err != nil {
		return err
	}
	if present(dx) && (dx.DType != x.DType || dx.Numel() != x.Numel() || !dx.Contiguous()) ||
		present(dw) && (dw.DType != x.DType || dw.Numel() != w.Numel() || !dw.Contiguous()) ||
		present(dbias) && (dbias.DType != x.DType || dbias.Numel() != o || !dbias.Contiguous()) {
		return fmt.Errorf("cpu: conv2d backward: gradients %v %v, %v %v, %v %v for input %v, weight %v",
			dx.DType, dx.Shape, dw.DType, dw.Shape, dbias.DType, dbias.Shape, x.Shape, w.Shape)
	}
	if x.DType == dtype.Float32 {
		return convBackward(d, newConv[float32](g, o), dx, dw, dbias, dy, x, w)
	}
	return convBackward(d, newConv[float64](g, o), dx, dw, dbias, dy, x, w)
}

// biasGrad sums dy [N, O, L] over N and L per channel: each row's sum in
// float64 lanes, the rows added in sample order in float64.
func biasGrad[T float](db, dy []T, n, o, l int) {
	parallel.For(o, rowGrain(n*l), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			var s float64
			for i := range n {
				s += vmath.Sum64(dy[(i*o+r)*l : (i*o+r+1)*l])
			}
			db[r] = T(s)
		}
	})
}

func convBackward[T float](d *Device, c *conv[T], dxv, dwv, dbv, dyv, xv, wv device.View) error {
	dx, dw, dy, x, w := optRows[T](dxv), optRows[T](dwv), rowsOf[T](dyv), rowsOf[T](xv), rowsOf[T](wv)
	if db := optRows[T](dbv); db != nil {
		biasGrad(db, dy, c.g.N, c.o, c.l)
	}
	n := c.g.N
	if dx == nil && dw == nil {
		return nil
	}
	if n == 0 || c.o == 0 {
		clear(dx)
		clear(dw)
		return nil
	}
	// Two buffers a thread: what the weight gradient reads, and what the
	// input gradient does.
	gElems, dElems := c.backElems(dw != nil, dx != nil)
	per := gElems + dElems
	var wf []T
	if dx != nil && (c.windowsBack || c.phases != nil) {
		buf, free, err := convScratch[T](d, 1, len(w))
		if err != nil {
			return err
		}
		defer free()
		wf = buf
		if c.windowsBack {
			c.flipped(wf, w)
			free, err := c.packBack(d, wf)
			if err != nil {
				return err
			}
			defer free()
		} else {
			c.phaseWeights(wf, w)
			// Every phase's weights packed in one scratch buffer.
			lens, total := make([]int, len(c.phases)), 0
			for p, ph := range c.phases {
				lens[p] = gemm.WindowsALen[T](c.g.C, ph.k)
				total += lens[p]
			}
			packed, free, err := convScratch[T](d, 1, total)
			if err != nil {
				return err
			}
			defer free()
			c.phaseA = make([]gemm.WindowsA[T], len(c.phases))
			for p, ph := range c.phases {
				c.phaseA[p] = gemm.PackWindowsA(packed[:lens[p]], c.g.C, ph.k, wf[ph.wOff:ph.wOff+c.g.C*ph.k], ph.k)
				packed = packed[lens[p]:]
			}
		}
	}
	blocks := 1
	if dw != nil {
		var z T
		blocks = convBlocks(n, c.o*c.ck, int(unsafe.Sizeof(z)))
	}
	// The blocks' partial sums of the weight gradient; the rows product's
	// are transposed, so even one block needs one.
	var partials []T
	if dw != nil && (blocks > 1 || c.windowsGrad) {
		p, free, err := convScratch[T](d, blocks, c.o*c.ck)
		if err != nil {
			return err
		}
		defer free()
		partials = p
	}
	sum := func() {
		switch {
		case dw == nil:
		case c.windowsGrad:
			sumBlocksTransposed(dw, partials, blocks, c.ck, c.o)
		case blocks > 1:
			sumBlocks(dw, partials, blocks)
		}
	}
	threads := parallel.Threads()
	if dw != nil && blocks == 1 || dw == nil && (n < threads || threads == 1) {
		buf, free, err := convScratch[T](d, 1, per)
		if err != nil {
			return err
		}
		defer free()
		// One block: its samples in order, every thread in each GEMM.
		acc := dw
		if partials != nil {
			acc = partials
		}
		c.backward(dx, acc, dy, x, w, buf[:gElems], buf[gElems:], 0, n, true, threads)
		sum()
		return nil
	}
	units := blocks
	if dw == nil {
		units = n // no sums over samples: any split will do
	}
	buf, free, err := convScratch[T](d, threads, per)
	if err != nil {
		return err
	}
	defer free()
	parallel.ForThreads(units, 1, threads, func(t, lo, hi int) {
		mine := buf[t*per : (t+1)*per]
		gbuf, dbuf := mine[:gElems], mine[gElems:]
		for b := lo; b < hi; b++ {
			if dw == nil {
				c.backward(dx, nil, dy, x, w, gbuf, dbuf, b, b+1, true, 1)
				continue
			}
			first, last := b*n/blocks, (b+1)*n/blocks
			c.backward(dx, partials[b*c.o*c.ck:(b+1)*c.o*c.ck], dy, x, w, gbuf, dbuf, first, last, true, 1)
		}
	})
	sum()
	return nil
}

// sumBlocks writes into dw the sum of the blocks partials (each len(dw)
// long) in block order.
func sumBlocks[T float](dw, partials []T, blocks int) {
	m := len(dw)
	parallel.For(m, rowGrain(blocks), func(lo, hi int) {
		copy(dw[lo:hi], partials[lo:hi])
		for b := 1; b < blocks; b++ {
			addTo(dw[lo:hi], partials[b*m+lo:b*m+hi])
		}
	})
}

// sumBlocksTransposed writes into dw [cols, rows] the sum of the blocks
// partials, each its transpose [rows, cols], in block order: the blocks
// are added into the first in place, over contiguous memory (the same
// additions in the same order as element by element), and the sum is
// then transposed into dw once.
func sumBlocksTransposed[T float](dw, partials []T, blocks, rows, cols int) {
	m := rows * cols
	if blocks > 1 {
		parallel.For(m, rowGrain(blocks), func(lo, hi int) {
			for b := 1; b < blocks; b++ {
				addTo(partials[lo:hi], partials[b*m+lo:b*m+hi])
			}
		})
	}
	sum := partials[:m]
	parallel.For(cols, rowGrain(rows), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			out := dw[j*rows : (j+1)*rows]
			for i := range out {
				out[i] = sum[i*cols+j]
			}
		}
	})
}
