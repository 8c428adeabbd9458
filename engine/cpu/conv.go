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
// The input gradient of other strides, or of fewer than 4 input
// channels, is a packed GEMM of each sample's column gradient, folded at
// once while it is in cache: PyTorch's own CPU algorithm (slow_conv2d);
// so is every product whose offsets would not fit in int32.
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
	// The weight gradient as a rows product (windows): row t of A is the
	// padded sample from tap t's offset on, through OH whole padded rows;
	// B is the output gradient spread to rows as long (zero past OW); C
	// is the gradient transposed, [C·KH·KW, O].
	windowsGrad bool
	grad        padding
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
	c.fwd = newPadding(g.C, g.H, g.W, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, g.DH, g.DW, g.OH, g.OW)
	c.windows = c.fwd.fits()
	// dx[i] = Σ_t w[t]·dy[i - t·d + p]: with t' = K-1-t the flipped
	// kernel reads dy padded by q = d·(K-1) - p, which must not be
	// negative (padding wider than the kernel's reach); with strides of
	// 1 only. The product's rows are the input channels: with fewer than
	// 4 most of a kernel tile's rows would be wasted, and the fold is
	// faster (a 3×3 convolution of 1 channel: 0.84 ms against 1.1 for 64
	// samples of 28×28; equal at 3 channels).
	qh, qw := g.DH*(g.KH-1)-g.PH, g.DW*(g.KW-1)-g.PW
	if c.windows && g.SH == 1 && g.SW == 1 && qh >= 0 && qw >= 0 && g.C >= 4 {
		c.back = newPadding(o, g.OH, g.OW, g.KH, g.KW, 1, 1, qh, qw, g.DH, g.DW, g.H, g.W)
		c.windowsBack = c.back.fits()
	}
	c.grad = spread(o, g.OH, g.OW, c.fwd.w)
	c.windowsGrad = c.windows
	return c
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
			windowsInto(yn, buf[c.fwd.elems():], c.o, c.ck, w, bias, xp, c.fwd, c.g.OH, c.g.OW, threads)
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
// the windows product with the flipped weights wf. The padding in gbuf
// and dbuf is zero.
func (c *conv[T]) backward(dx, acc, dy, x, w, wf, gbuf, dbuf []T, lo, hi int, fresh bool, threads int) {
	mm := c.serial
	if threads > 1 {
		mm = c.threaded
	}
	for n := lo; n < hi; n++ {
		dyn := dy[n*c.o*c.l : (n+1)*c.o*c.l]
		if acc != nil {
			var beta T = 1
			if fresh && n == lo {
				beta = 0
			}
			if c.windowsGrad {
				xp, dyp := gbuf[:c.fwd.elems()], gbuf[c.fwd.elems():]
				padInto(xp, x[n*c.in:(n+1)*c.in], c.fwd)
				padInto(dyp, dyn, c.grad)
				k := c.g.OH * c.fwd.w
				gemm.GemmRows(c.ck, c.o, k, 1, gemm.Rows[T]{Base: xp, Offs: c.fwd.offs}, true, dyp, k, beta, acc, c.o, threads)
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
			dyp := dbuf[:c.back.elems()]
			padInto(dyp, dyn, c.back)
			windowsInto(dxn, dbuf[c.back.elems():], c.g.C, c.o*c.g.KH*c.g.KW, wf, nil, dyp, c.back, c.g.H, c.g.W, threads)
		default:
			mm(true, false, c.ck, c.l, c.o, 1, w, c.ck, dyn, c.l, 0, dbuf, c.l)
			c.foldInto(dx, dbuf, n)
		}
	}
}

// windowsInto sets out [m, rows·cols] to a·B (+ bias per row), B the
// windows of the padded planes xp (layout p) at rows×cols positions and
// a m×k. When cols is not a multiple of the kernel's tile width, every
// row would end in a partial tile, computed into a scratch tile and
// merged (every tile, for a 14-wide image); instead the rows are
// flattened into one run through the padded rows, their padding columns
// computed too (p.w − cols of p.w; a partial tile wastes more), into
// flat [m, rows·p.w], then packed into out.
func windowsInto[T float](out, flat []T, m, k int, a, bias, xp []T, p padding, rows, cols, threads int) {
	dst, n := out, rows*cols
	win := gemm.Windows[T]{Base: xp, Offs: p.offs, Width: cols, Stride: p.w}
	flatten := flattened[T](cols)
	if flatten {
		n = rows * p.w
		dst, win.Width, win.Stride = flat[:m*n], n, 0
	}
	beta := startWithBias(dst, bias, n)
	gemm.GemmWindows(m, n, k, 1, a, k, win, beta, dst, n, threads)
	if flatten {
		vmath.CopyBlock(out, cols, dst, p.w, m*rows, cols)
	}
}

// startWithBias fills each row (n long) of dst with its bias and returns
// the beta that adds a product to it, as PyTorch's slow_conv2d starts the
// output from the bias; without a bias, beta 0.
func startWithBias[T float](dst, bias []T, n int) T {
	if bias == nil {
		return 0
	}
	for r, b := range bias {
		fillDoubling(dst[r*n:(r+1)*n], b)
	}
	return 1
}

// flattened reports whether windowsInto flattens rows of cols positions.
func flattened[T float](cols int) bool {
	_, nr := gemm.WindowsTile[T]()
	return cols%nr != 0
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
	slots, buf, free, err := convSlots[T](d, threads, c.bufElems())
	if err != nil {
		return err
	}
	defer free()
	per := c.bufElems()
	parallel.For(n, 1, func(lo, hi int) {
		s := <-slots
		defer func() { slots <- s }()
		c.forward(y, x, w, bias, buf[s*per:(s+1)*per], lo, hi, 1)
	})
	return nil
}

// bufElems is the size of the forward's buffer: one sample's padded
// planes, or its columns (none when direct).
func (c *conv[T]) bufElems() int {
	switch {
	case c.windows:
		if flattened[T](c.g.OW) {
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
	case c.windowsGrad:
		gbuf = c.fwd.elems() + c.grad.elems()
	default:
		gbuf = c.ck * c.l
	}
	switch {
	case !dx || c.direct:
	case c.windowsBack:
		dbuf = c.back.elems()
		if flattened[T](c.g.W) {
			dbuf += c.g.C * c.g.H * c.back.w
		}
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

// convSlots is convScratch for the threads of a parallel loop: each chunk
// takes a slot's buffer from the channel and puts it back.
func convSlots[T float](d *Device, threads, per int) (chan int, []T, func(), error) {
	buf, free, err := convScratch[T](d, threads, per)
	if err != nil {
		return nil, nil, nil, err
	}
	slots := make(chan int, threads)
	for s := range threads {
		slots <- s
	}
	return slots, buf, free, nil
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
	if dx != nil && c.windowsBack {
		buf, free, err := convScratch[T](d, 1, len(w))
		if err != nil {
			return err
		}
		defer free()
		wf = buf
		c.flipped(wf, w)
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
		c.backward(dx, acc, dy, x, w, wf, buf[:gElems], buf[gElems:], 0, n, true, threads)
		sum()
		return nil
	}
	units := blocks
	if dw == nil {
		units = n // no sums over samples: any split will do
	}
	slots, buf, free, err := convSlots[T](d, threads, per)
	if err != nil {
		return err
	}
	defer free()
	parallel.For(units, 1, func(lo, hi int) {
		s := <-slots
		defer func() { slots <- s }()
		mine := buf[s*per : (s+1)*per]
		gbuf, dbuf := mine[:gElems], mine[gElems:]
		for b := lo; b < hi; b++ {
			if dw == nil {
				c.backward(dx, nil, dy, x, w, wf, gbuf, dbuf, b, b+1, true, 1)
				continue
			}
			first, last := b*n/blocks, (b+1)*n/blocks
			c.backward(dx, partials[b*c.o*c.ck:(b+1)*c.o*c.ck], dy, x, w, wf, gbuf, dbuf, first, last, true, 1)
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
			p := partials[b*m+lo : b*m+hi]
			out := dw[lo:hi]
			for i := range out {
				out[i] += p[i]
			}
		}
	})
}

// sumBlocksTransposed writes into dw [cols, rows] the sum of the blocks
// partials, each its transpose [rows, cols], in block order.
func sumBlocksTransposed[T float](dw, partials []T, blocks, rows, cols int) {
	m := rows * cols
	parallel.For(cols, rowGrain(rows*blocks), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			out := dw[j*rows : (j+1)*rows]
			for i := range out {
				out[i] = partials[i*cols+j]
			}
			for b := 1; b < blocks; b++ {
				p := partials[b*m : (b+1)*m]
				for i := range out {
					out[i] += p[i*cols+j]
				}
			}
		}
	})
}
