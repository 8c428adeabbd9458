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

// The convolution kernels (device.Convolver): im2col + GEMM one sample at
// a time. The composition of Unfold and a batched matmul writes the whole
// batch's columns (C·KH·KW × OH·OW per sample: 7 MB for the Fashion-MNIST
// CNN's second layer at batch 64) to memory and reads them back to pack
// them for the GEMM; here each thread unfolds one sample into a buffer of
// its own, which is still in its cache when the GEMM packs it, and the
// backward folds each sample's column gradient as soon as it is made.
// This is PyTorch's own CPU algorithm (slow_conv2d: im2col and a GEMM per
// sample, the samples shared among the threads).
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
	return c
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

// forward computes y[n] = w·cols(n) (+ bias) for n in [lo, hi).
func (c *conv[T]) forward(y, x, w, bias, buf []T, lo, hi int, mm func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)) {
	for n := lo; n < hi; n++ {
		cols := c.columns(buf, x, n)
		yn := y[n*c.o*c.l : (n+1)*c.o*c.l]
		var beta T
		if bias != nil {
			// PyTorch's slow_conv2d: the output starts as the bias and
			// the product is added to it.
			for r, b := range bias {
				fillDoubling(yn[r*c.l:(r+1)*c.l], b)
			}
			beta = 1
		}
		mm(false, false, c.o, c.l, c.ck, 1, w, c.ck, cols, c.l, beta, yn, c.l)
	}
}

// backward accumulates the weight gradient of samples [lo, hi) into acc
// (overwriting it first when fresh) and writes their input gradients.
func (c *conv[T]) backward(dx, acc, dy, x, w, cols, dcols []T, lo, hi int, fresh bool, mm func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)) {
	for n := lo; n < hi; n++ {
		dyn := dy[n*c.o*c.l : (n+1)*c.o*c.l]
		if acc != nil {
			var beta T = 1
			if fresh && n == lo {
				beta = 0
			}
			mm(false, true, c.o, c.ck, c.l, 1, dyn, c.l, c.columns(cols, x, n), c.l, beta, acc, c.ck)
		}
		if dx != nil {
			if c.direct {
				mm(true, false, c.ck, c.l, c.o, 1, w, c.ck, dyn, c.l, 0, dx[n*c.in:(n+1)*c.in], c.l)
				continue
			}
			mm(true, false, c.ck, c.l, c.o, 1, w, c.ck, dyn, c.l, 0, dcols, c.l)
			c.foldInto(dx, dcols, n)
		}
	}
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
		c.forward(y, x, w, bias, buf, 0, n, c.threaded)
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
		c.forward(y, x, w, bias, buf[s*per:(s+1)*per], lo, hi, c.serial)
	})
	return nil
}

// bufElems is the size of one sample's columns (none when direct).
func (c *conv[T]) bufElems() int {
	if c.direct {
		return 0
	}
	return c.ck * c.l
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
	return elems[T](buf)[:slots*per], func() { d.Free(buf) }, nil
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
		c := newConv[float32](g, o)
		if present(dbias) {
			biasGrad32(rowsOf[float32](dbias), rowsOf[float32](dy), g.N, o, c.l)
		}
		return convBackward(d, c, dx, dw, dy, x, w)
	}
	c := newConv[float64](g, o)
	if present(dbias) {
		biasGrad(rowsOf[float64](dbias), rowsOf[float64](dy), g.N, o, c.l)
	}
	return convBackward(d, c, dx, dw, dy, x, w)
}

// biasGrad32 sums dy [N, O, L] over N and L per channel: each row's sum
// in float64 lanes, the rows added in sample order in float64.
func biasGrad32(db, dy []float32, n, o, l int) {
	parallel.For(o, rowGrain(n*l), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			var s float64
			for i := range n {
				s += vmath.Sum64(dy[(i*o+r)*l : (i*o+r+1)*l])
			}
			db[r] = float32(s)
		}
	})
}

func biasGrad(db, dy []float64, n, o, l int) {
	parallel.For(o, rowGrain(n*l), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			var s float64
			for i := range n {
				for _, v := range dy[(i*o+r)*l : (i*o+r+1)*l] {
					s += v
				}
			}
			db[r] = s
		}
	})
}

func convBackward[T float](d *Device, c *conv[T], dxv, dwv, dyv, xv, wv device.View) error {
	dx, dw, dy, x, w := optRows[T](dxv), optRows[T](dwv), rowsOf[T](dyv), rowsOf[T](xv), rowsOf[T](wv)
	n := c.g.N
	if dx == nil && dw == nil {
		return nil
	}
	if n == 0 || c.o == 0 {
		clear(dx)
		clear(dw)
		return nil
	}
	// Two buffers a thread: the sample's columns and their gradient.
	per := 2 * c.bufElems()
	blocks := 1
	if dw != nil {
		var z T
		blocks = convBlocks(n, c.o*c.ck, int(unsafe.Sizeof(z)))
	}
	threads := parallel.Threads()
	if dw != nil && blocks == 1 || dw == nil && (n < threads || threads == 1) {
		buf, free, err := convScratch[T](d, 1, per)
		if err != nil {
			return err
		}
		defer free()
		cols, dcols := buf[:per/2], buf[per/2:]
		// One block: its samples in order, every thread in each GEMM.
		c.backward(dx, dw, dy, x, w, cols, dcols, 0, n, true, c.threaded)
		return nil
	}
	var partials []T
	if dw != nil {
		p, free, err := convScratch[T](d, blocks, c.o*c.ck)
		if err != nil {
			return err
		}
		defer free()
		partials = p
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
		cols, dcols := mine[:per/2], mine[per/2:]
		for b := lo; b < hi; b++ {
			if dw == nil {
				c.backward(dx, nil, dy, x, w, cols, dcols, b, b+1, true, c.serial)
				continue
			}
			first, last := b*n/blocks, (b+1)*n/blocks
			c.backward(dx, partials[b*c.o*c.ck:(b+1)*c.o*c.ck], dy, x, w, cols, dcols, first, last, true, c.serial)
		}
	})
	if dw != nil {
		sumBlocks(dw, partials, blocks)
	}
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
