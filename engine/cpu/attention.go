package cpu

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Scaled dot-product attention, one (batch, head) pair at a time, as a
// PyTorch 1.13 model writes it by hand (nanoGPT's CausalSelfAttention):
//
//	att = (q @ k.transpose(-2, -1)) * scale
//	att = att.masked_fill(mask == 0, float("-inf"))
//	att = softmax(att, dim=-1)   // kept for the backward pass
//	out = att @ v
//
// and the backward of that composition through autograd's matmul and
// softmax_backward_data.
//
// Threads: with at least as many heads as threads, whole heads run in
// parallel, each on one thread with the Go GEMM (engine/cpu/gemm) called
// from inside the parallel loop. Its own parallel loops then find every
// worker busy and run inline on the calling thread (or borrow a worker that
// has run out of heads), so nothing is oversubscribed, and a head's q, k, v
// and probabilities stay in one core's cache. A CBLAS library is not used
// there: engine/cpu/blas serialises calls into it, which would undo the
// parallel loop. With fewer heads than threads, heads run one after the
// other, and each product (blas.Sgemm, possibly a threaded CBLAS) and each
// block of softmax rows is parallelised instead.
//
// Causality: rows are processed in blocks of attnBlock queries; a block
// only needs the keys up to its last query, so much of the masked upper
// triangle's work is skipped: 5/8 of the full products remain for
// T = 128, about half for long sequences.

// attnBlock is the number of query rows processed together under a causal
// mask: smaller blocks skip more of the masked triangle, larger ones make
// more efficient products (each product packs its operands afresh). On
// T = 128, D = 64, blocks of 32, 48 and 64 rows measured within noise of
// each other; 32 skips more of the triangle on longer sequences.
const attnBlock = 32

// attnScratchMax bounds the rows·keys of one block's scratch (1 MiB of
// float32) when there is no mask to block the rows by.
const attnScratchMax = 1 << 18

// head locates the [T, D] matrices of one tensor [B, H, T, D]: matrix (b, h)
// starts at off + b·sb + h·sh with rows ld elements apart.
type head struct{ off, sb, sh, ld int }

func (h head) at(b, hh int) int { return h.off + b*h.sb + hh*h.sh }

// headOf describes v, whose last axis must be contiguous and whose rows
// must not overlap (inputs that break either rule have been copied by
// denseRows; outputs cannot be).
func headOf(name string, v device.View) (head, error) {
	if len(v.Shape) != 4 {
		return head{}, fmt.Errorf("cpu: attention: %s has shape %v, want [B, H, T, D]", name, v.Shape)
	}
	t, dim := v.Shape[2], v.Shape[3]
	if dim > 1 && v.Strides[3] != 1 {
		return head{}, fmt.Errorf("cpu: attention: the last axis of %s is not contiguous (strides %v)", name, v.Strides)
	}
	ld := v.Strides[2]
	if t <= 1 || dim == 0 {
		ld = max(ld, dim, 1) // a single row: any row stride will do
	} else if ld < dim {
		return head{}, fmt.Errorf("cpu: attention: rows of %s overlap (strides %v)", name, v.Strides)
	}
	return head{off: v.Offset, sb: v.Strides[0], sh: v.Strides[1], ld: ld}, nil
}

// attn is one attention call on slices of T (float32 or float64).
type attn[T float] struct {
	b, h, tq, tk, dim int
	scale             T
	causal            bool

	gemm     func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)
	softmax  func(dst, x []T)
	softmaxB func(dx, dy, y []T)
	rows     func(n, grain int, fn func(lo, hi int)) // parallel.For, or inline

	// Operands: the buffers and where each head's matrix lies in them.
	q, k, v, out, dout, dq, dk, dv     []T
	hq, hk, hv, ho, hdo, hdq, hdk, hdv head
	probs                              []T // [B, H, Tq, Tk] contiguous, from its offset
}

func inline(n, _ int, fn func(lo, hi int)) { fn(0, n) }

// setup fills the shape, the strategy and the kernels for T.
func (a *attn[T]) setup(shape []int, tk int, heads bool) {
	a.b, a.h, a.tq, a.dim = shape[0], shape[1], shape[2], shape[3]
	a.tk = tk
	a.rows = parallel.For
	if heads {
		a.rows = inline
	}
	switch p := any(a).(type) {
	case *attn[float32]:
		p.gemm = blas.Sgemm
		if heads {
			p.gemm = gemm.Sgemm
		}
		p.softmax, p.softmaxB = vmath.SoftmaxRow, vmath.SoftmaxBackwardRow
	case *attn[float64]:
		p.gemm = blas.Dgemm
		if heads {
			p.gemm = gemm.Dgemm
		}
		p.softmax = func(dst, x []float64) { softmaxRow64(dst, x, false) }
		p.softmaxB = func(dx, dy, y []float64) { softmaxBackwardRow64(dx, dy, y, false) }
	}
}

// blockRows is the number of query rows processed together.
func (a *attn[T]) blockRows(causal bool) int {
	if causal {
		return max(1, min(a.tq, attnBlock))
	}
	if a.tq*a.tk > attnScratchMax {
		return max(1, min(a.tq, attnScratchMax/max(1, a.tk)))
	}
	return max(1, a.tq)
}

// keys is the number of keys that the queries before i1 attend to: the
// columns after it are masked for all of them.
func (a *attn[T]) keys(i1 int, causal bool) int {
	if causal {
		return min(i1, a.tk)
	}
	return a.tk
}

// forEachHead runs fn(chunk, b, h) for every head: chunks fixed chunks of
// heads in parallel, or all heads in order on the caller (chunks == 1).
func (a *attn[T]) forEachHead(chunks int, fn func(c, b, h int)) {
	n := a.b * a.h
	per := (n + chunks - 1) / chunks
	parallel.For(chunks, 1, func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			for i := c * per; i < min((c+1)*per, n); i++ {
				fn(c, i/a.h, i%a.h)
			}
		}
	})
}

// forward computes probabilities and output of head (b, h).
func (a *attn[T]) forward(b, h int) {
	q, k, v := a.q[a.hq.at(b, h):], a.k[a.hk.at(b, h):], a.v[a.hv.at(b, h):]
	out := a.out[a.ho.at(b, h):]
	probs := a.probs[(b*a.h+h)*a.tq*a.tk:]
	tk, causal := a.tk, a.causal
	block := a.blockRows(causal)
	for i0 := 0; i0 < a.tq; i0 += block {
		m := min(block, a.tq-i0)
		n := a.keys(i0+m, causal)
		p := probs[i0*tk:]
		// S = scale·q·kᵀ for the keys the block sees.
		a.gemm(false, true, m, n, a.dim, a.scale, q[i0*a.hq.ld:], a.hq.ld, k, a.hk.ld, 0, p, tk)
		a.rows(m, rowGrain(4*n), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := p[i*tk : (i+1)*tk]
				l := a.keys(i0+i+1, causal)
				a.softmax(row[:l], row[:l])
				clear(row[l:]) // masked: exactly 0
			}
		})
		// out = P·v; the masked probabilities are zeros.
		a.gemm(false, false, m, a.dim, n, 1, p, tk, v, a.hv.ld, 0, out[i0*a.ho.ld:], a.ho.ld)
	}
}

// backward computes dq, dk, dv of head (b, h) with scratch for a block's
// dP and dS:
//
//	dP = dout·vᵀ,  dS = P⊙(dP − rowsum(dP⊙P))
//	dq = scale·dS·k,  dk = scale·dSᵀ·q,  dv = Pᵀ·dout
//
// dk and dv accumulate over the blocks of query rows.
//
// The mask is not an argument of the backward: the probabilities carry it,
// as exact zeros. When a head's probabilities are zero above the diagonal,
// the blocks skip that triangle as the forward did; this is exact for any
// probabilities that are zero there (their dS and their share of dv are
// zero), so no flag is needed.
func (a *attn[T]) backward(scratch []T, b, h int) {
	q, k, v := a.q[a.hq.at(b, h):], a.k[a.hk.at(b, h):], a.v[a.hv.at(b, h):]
	dout := a.dout[a.hdo.at(b, h):]
	dq, dk, dv := a.dq[a.hdq.at(b, h):], a.dk[a.hdk.at(b, h):], a.dv[a.hdv.at(b, h):]
	probs := a.probs[(b*a.h+h)*a.tq*a.tk:]
	tk, dim := a.tk, a.dim
	causal := upperTriangleZero(probs, a.tq, tk)
	block := a.blockRows(causal)
	// Blocks run last to first: the last block sees the most keys, so its
	// products initialise dk and dv (beta 0) and the earlier ones add to
	// them. Keys that no query sees get zero gradients.
	blocks := (a.tq + block - 1) / block
	seen := 0
	if blocks > 0 {
		seen = a.keys(a.tq, causal)
	}
	for j := seen; j < tk; j++ {
		clear(dk[j*a.hdk.ld : j*a.hdk.ld+dim])
		clear(dv[j*a.hdv.ld : j*a.hdv.ld+dim])
	}
	var beta T
	for bi := blocks - 1; bi >= 0; bi-- {
		i0 := bi * block
		m := min(block, a.tq-i0)
		n := a.keys(i0+m, causal)
		p := probs[i0*tk:]
		do := dout[i0*a.hdo.ld:]
		a.gemm(false, true, m, n, dim, 1, do, a.hdo.ld, v, a.hv.ld, 0, scratch, tk)
		a.rows(m, rowGrain(2*n), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				l := a.keys(i0+i+1, causal)
				ds := scratch[i*tk : i*tk+n]
				a.softmaxB(ds[:l], ds[:l], p[i*tk:i*tk+l])
				clear(ds[l:])
			}
		})
		a.gemm(false, false, m, dim, n, a.scale, scratch, tk, k, a.hk.ld, 0, dq[i0*a.hdq.ld:], a.hdq.ld)
		a.gemm(true, false, n, dim, m, a.scale, scratch, tk, q[i0*a.hq.ld:], a.hq.ld, beta, dk, a.hdk.ld)
		a.gemm(true, false, n, dim, m, 1, p, tk, do, a.hdo.ld, beta, dv, a.hdv.ld)
		beta = 1
	}
}

// heads decides the strategy: whole heads in parallel when there are
// enough of them to keep every thread busy.
func attnParallelHeads(n int) bool { return n >= parallel.Threads() }

// Attention implements device.Device. q is [B, H, Tq, D], k and v are
// [B, H, Tk, D], out is [B, H, Tq, D], all with a contiguous last axis and
// any other strides; probs is a contiguous [B, H, Tq, Tk]. With causal,
// query i sees keys j ≤ i.
func (d *Device) Attention(out, probs, q, k, v device.View, scale float64, causal bool) error {
	if anyHalf(out, probs, q, k, v) {
		return d.widened([]*device.View{&out, &probs}, []*device.View{&q, &k, &v}, func() error {
			return d.Attention(out, probs, q, k, v, scale, causal)
		})
	}
	if err := sameDType("attention", q.DType, k, v, out, probs); err != nil {
		return err
	}
	temps, err := d.denseRows(&q, &k, &v)
	defer d.freeAll(temps)
	if err != nil {
		return err
	}
	switch q.DType {
	case dtype.Float32:
		return attention[float32](out, probs, q, k, v, scale, causal)
	case dtype.Float64:
		return attention[float64](out, probs, q, k, v, scale, causal)
	}
	return fmt.Errorf("cpu: attention of %v", q.DType)
}

// denseRows replaces each input of shape [B, H, T, D] that the products
// cannot read in place (a last axis that is not contiguous, or rows that
// overlap, as an expanded gradient has) with a contiguous copy. It returns
// the buffers to free.
func (d *Device) denseRows(vs ...*device.View) ([]device.Buffer, error) {
	var temps []device.Buffer
	for _, v := range vs {
		if len(v.Shape) != 4 {
			continue // headOf reports it
		}
		t, dim := v.Shape[2], v.Shape[3]
		if (dim <= 1 || v.Strides[3] == 1) && (t <= 1 || dim == 0 || v.Strides[2] >= dim) {
			continue
		}
		buf, err := d.Alloc(v.DType, v.Numel())
		if err != nil {
			return temps, err
		}
		temps = append(temps, buf)
		dense := device.View{Buf: buf, DType: v.DType, Shape: v.Shape, Strides: device.ContiguousStrides(v.Shape)}
		if err := d.Copy(dense, *v); err != nil {
			return temps, err
		}
		*v = dense
	}
	return temps, nil
}

func (d *Device) freeAll(bufs []device.Buffer) {
	for _, b := range bufs {
		d.Free(b)
	}
}

func attention[T float](out, probs, q, k, v device.View, scale float64, causal bool) error {
	var a attn[T]
	var err error
	for _, o := range []struct {
		h    *head
		name string
		v    device.View
	}{{&a.hq, "q", q}, {&a.hk, "k", k}, {&a.hv, "v", v}, {&a.ho, "out", out}} {
		if *o.h, err = headOf(o.name, o.v); err != nil {
			return err
		}
	}
	if !probs.Contiguous() {
		return fmt.Errorf("cpu: attention: probs is not contiguous")
	}
	if out.Numel() == 0 && probs.Numel() == 0 {
		return nil
	}
	heads := q.Shape[0] * q.Shape[1]
	par := attnParallelHeads(heads)
	a.setup(q.Shape, k.Shape[2], par)
	a.scale, a.causal = T(scale), causal
	a.q, a.k, a.v, a.out = elems[T](q.Buf), elems[T](k.Buf), elems[T](v.Buf), elems[T](out.Buf)
	a.probs = elems[T](probs.Buf)[probs.Offset:]
	if a.tk == 0 {
		// No keys: nothing to attend to, the output is 0.
		zeroHeads(&a, a.out, a.ho, a.tq)
		return nil
	}
	if a.dim == 0 {
		// Empty heads: every score is 0, the output is empty.
		uniformProbs(&a)
		return nil
	}
	chunks := 1
	if par {
		chunks = min(heads, 4*parallel.Threads())
	}
	a.forEachHead(chunks, func(_, b, h int) { a.forward(b, h) })
	return nil
}

// uniformProbs sets the probabilities of empty heads, whose scores are all
// 0·scale: 1/l over the l keys each query sees (NaN if scale is infinite).
func uniformProbs[T float](a *attn[T]) {
	for hd := 0; hd < a.b*a.h; hd++ {
		for i := 0; i < a.tq; i++ {
			row := a.probs[(hd*a.tq+i)*a.tk : (hd*a.tq+i+1)*a.tk]
			l := a.keys(i+1, a.causal)
			for j := range row[:l] {
				row[j] = 0 * a.scale
			}
			a.softmax(row[:l], row[:l])
			clear(row[l:])
		}
	}
}

// zeroHeads clears the t rows of every head of a [B, H, t, D] operand.
func zeroHeads[T float](a *attn[T], x []T, hx head, t int) {
	for b := 0; b < a.b; b++ {
		for h := 0; h < a.h; h++ {
			o := hx.at(b, h)
			for i := 0; i < t; i++ {
				clear(x[o+i*hx.ld : o+i*hx.ld+a.dim])
			}
		}
	}
}

// AttentionBackward implements device.Device: dq, dk, dv (laid out as q, k,
// v may be) from dout and the probabilities Attention kept.
func (d *Device) AttentionBackward(dq, dk, dv, dout, q, k, v, probs device.View, scale float64) error {
	if anyHalf(dq, dk, dv, dout, q, k, v, probs) {
		return d.widened([]*device.View{&dq, &dk, &dv}, []*device.View{&dout, &q, &k, &v, &probs}, func() error {
			return d.AttentionBackward(dq, dk, dv, dout, q, k, v, probs, scale)
		})
	}
	if err := sameDType("attention backward", q.DType, k, v, dq, dk, dv, dout, probs); err != nil {
		return err
	}
	temps, err := d.denseRows(&q, &k, &v, &dout)
	defer d.freeAll(temps)
	if err != nil {
		return err
	}
	switch q.DType {
	case dtype.Float32:
		return attentionBackward[float32](d, dq, dk, dv, dout, q, k, v, probs, scale)
	case dtype.Float64:
		return attentionBackward[float64](d, dq, dk, dv, dout, q, k, v, probs, scale)
	}
	return fmt.Errorf("cpu: attention backward of %v", q.DType)
}

func attentionBackward[T float](d *Device, dq, dk, dv, dout, q, k, v, probs device.View, scale float64) error {
	var a attn[T]
	var err error
	for _, o := range []struct {
		h    *head
		name string
		v    device.View
	}{{&a.hq, "q", q}, {&a.hk, "k", k}, {&a.hv, "v", v}, {&a.hdo, "dout", dout},
		{&a.hdq, "dq", dq}, {&a.hdk, "dk", dk}, {&a.hdv, "dv", dv}} {
		if *o.h, err = headOf(o.name, o.v); err != nil {
			return err
		}
	}
	if !probs.Contiguous() {
		return fmt.Errorf("cpu: attention backward: probs is not contiguous")
	}
	if dq.Numel() == 0 && dk.Numel() == 0 {
		return nil
	}
	heads := q.Shape[0] * q.Shape[1]
	par := attnParallelHeads(heads)
	a.setup(q.Shape, k.Shape[2], par)
	a.scale = T(scale)
	a.q, a.k, a.v = elems[T](q.Buf), elems[T](k.Buf), elems[T](v.Buf)
	a.dout, a.dq, a.dk, a.dv = elems[T](dout.Buf), elems[T](dq.Buf), elems[T](dk.Buf), elems[T](dv.Buf)
	a.probs = elems[T](probs.Buf)[probs.Offset:]
	if a.tk == 0 {
		zeroHeads(&a, a.dq, a.hdq, a.tq)
		return nil
	}
	if a.tq == 0 {
		// No queries: the keys and values get no gradient.
		zeroHeads(&a, a.dk, a.hdk, a.tk)
		zeroHeads(&a, a.dv, a.hdv, a.tk)
		return nil
	}
	chunks := 1
	if par {
		chunks = min(heads, 4*parallel.Threads())
	}
	var z T
	dt := dtype.Float32
	if _, ok := any(z).(float64); ok {
		dt = dtype.Float64
	}
	per := max(a.blockRows(true), a.blockRows(false)) * a.tk
	buf, err := d.Alloc(dt, chunks*per)
	if err != nil {
		return err
	}
	defer d.Free(buf)
	scratch := elems[T](buf)
	a.forEachHead(chunks, func(c, b, h int) { a.backward(scratch[c*per:(c+1)*per], b, h) })
	return nil
}

// upperTriangleZero reports whether one head's probabilities [tq, tk] are
// zero above the diagonal (j > i). It reads the masked entries only: about
// half of them under a causal mask, usually one otherwise.
func upperTriangleZero[T float](p []T, tq, tk int) bool {
	for i := 0; i < min(tq, tk-1); i++ {
		for _, x := range p[i*tk+i+1 : (i+1)*tk] {
			if x != 0 {
				return false
			}
		}
	}
	return true
}
