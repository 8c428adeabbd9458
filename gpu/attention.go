package gpu

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Scaled dot-product attention as engine/cpu/attention.go computes it (the
// composition a PyTorch 1.13 model writes by hand), with the products as
// batched cuBLAS GEMMs over the B·H heads and the row work in
// gpu/kernels/attention.cu:
//
//	S = scale·q·kᵀ              GEMM (alpha = scale) into probs
//	P = softmax(S, causal mask)  attn_softmax, in place; masked entries 0
//	out = P·v                    GEMM
//
// and backward, with dP in scratch memory:
//
//	dP = dout·vᵀ                 GEMM
//	dS = P⊙(dP − rowsum(dP⊙P))   attn_softmax_bwd, in place
//	dq = scale·dS·k,  dk = scale·dSᵀ·q,  dv = Pᵀ·dout   GEMMs
//
// Unlike the CPU, the products do not skip the masked triangle under a
// causal mask (the probabilities there are exact zeros, so the results are
// the same). bfloat16 and float16 are widened to float32 copies and the
// outputs rounded back once, as the CPU does: computing the scores in 16
// bits would change the probabilities by far more than the rounding of
// the result.

// attnHead locates the [T, D] matrices of a [B, H, T, D] view: matrix (b, h)
// starts at off + b·sb + h·sh with rows ld elements apart.
type attnHead struct {
	buf         device.Buffer
	dt          dtype.DType
	off, sb, sh int
	ld          int
}

// headOf describes v, whose last axis must be contiguous and whose rows
// must not overlap (inputs that break either rule were copied by
// denseRows; outputs cannot be).
func (d *Device) headOf(name string, v device.View) (attnHead, error) {
	if len(v.Shape) != 4 {
		return attnHead{}, fmt.Errorf("%v: attention: %s has shape %v, want [B, H, T, D]", d, name, v.Shape)
	}
	t, dim := v.Shape[2], v.Shape[3]
	if dim > 1 && v.Strides[3] != 1 {
		return attnHead{}, fmt.Errorf("%v: attention: the last axis of %s is not contiguous (strides %v)", d, name, v.Strides)
	}
	ld := v.Strides[2]
	if t <= 1 || dim == 0 {
		ld = max(ld, dim, 1) // a single row: any row stride will do
	} else if ld < dim {
		return attnHead{}, fmt.Errorf("%v: attention: rows of %s overlap (strides %v)", d, name, v.Strides)
	}
	return attnHead{buf: v.Buf, dt: v.DType, off: v.Offset, sb: v.Strides[0], sh: v.Strides[1], ld: ld}, nil
}

// denseAttnHead describes the heads of a contiguous [B, H, t, cols] buffer.
func denseAttnHead(v device.View, h, t, cols int) attnHead {
	return attnHead{buf: v.Buf, dt: v.DType, off: v.Offset, sb: h * t * cols, sh: t * cols, ld: cols}
}

// tempBufs are device buffers an op frees when it returns (stream-ordered:
// later work reuses them only after the work queued so far).
type tempBufs struct {
	d    *Device
	bufs []device.Buffer
}

func (t *tempBufs) alloc(dt dtype.DType, shape []int) (device.View, error) {
	n := 1
	for _, e := range shape {
		n *= e
	}
	buf, err := t.d.Alloc(dt, n)
	if err != nil {
		return device.View{}, err
	}
	t.bufs = append(t.bufs, buf)
	return device.View{Buf: buf, DType: dt, Shape: shape, Strides: device.ContiguousStrides(shape)}, nil
}

func (t *tempBufs) free() {
	for _, b := range t.bufs {
		t.d.Free(b)
	}
	t.bufs = nil
}

// denseRows replaces each input that the products cannot read in place (a
// last axis that is not contiguous, or overlapping rows, as an expanded
// gradient has) with a contiguous copy.
func (d *Device) denseRows(t *tempBufs, vs ...*device.View) error {
	for _, v := range vs {
		if len(v.Shape) != 4 {
			continue // headOf reports it
		}
		rows, dim := v.Shape[2], v.Shape[3]
		if (dim <= 1 || v.Strides[3] == 1) && (rows <= 1 || dim == 0 || v.Strides[2] >= dim) {
			continue
		}
		dense, err := t.alloc(v.DType, v.Shape)
		if err != nil {
			return err
		}
		if err := d.Copy(dense, *v); err != nil {
			return err
		}
		*v = dense
	}
	return nil
}

// widenHalf swaps the bfloat16/float16 views among outs and ins for float32
// temporaries (inputs copied in) and returns the function that copies the
// outputs back, rounding once.
func (d *Device) widenHalf(t *tempBufs, outs, ins []*device.View) (back func() error, err error) {
	type pair struct{ orig, tmp device.View }
	var results []pair
	swap := func(p *device.View, load bool) error {
		if p.DType != dtype.BFloat16 && p.DType != dtype.Float16 {
			return nil
		}
		tmp, err := t.alloc(dtype.Float32, p.Shape)
		if err != nil {
			return err
		}
		if load {
			if err := d.Copy(tmp, *p); err != nil {
				return err
			}
		} else {
			results = append(results, pair{*p, tmp})
		}
		*p = tmp
		return nil
	}
	for _, p := range ins {
		if err := swap(p, true); err != nil {
			return nil, err
		}
	}
	for _, p := range outs {
		if err := swap(p, false); err != nil {
			return nil, err
		}
	}
	return func() error {
		for _, r := range results {
			if err := d.Copy(r.orig, r.tmp); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func anyHalf(vs ...device.View) bool {
	for _, v := range vs {
		if v.DType == dtype.BFloat16 || v.DType == dtype.Float16 {
			return true
		}
	}
	return false
}

// gemmHeads computes dst = alpha·op(a)·op(b) for every head (b, h), with
// m×k times k×n matrices (op transposes when ta, tb). Heads go to cuBLAS as
// one strided batch of B·H when every operand's heads are evenly spaced
// (sb = H·sh, as in a contiguous [B, H, T, D]), else as B batches of H
// (an output laid out [B, T, H, D], packed q/k/v).
func (d *Device) gemmHeads(nb, nh int, dst, a, b attnHead, ta, tb bool, m, n, k int, alpha float64) error {
	if nb*nh == 0 || m == 0 || n == 0 {
		return nil
	}
	operand := func(x attnHead, off, stride int, trans bool) device.GemmOperand {
		return device.GemmOperand{Buf: x.buf, DType: x.dt, Offset: off, Ld: x.ld, BatchStride: stride, Trans: trans}
	}
	even := func(x attnHead) bool { return nb == 1 || nh == 1 || x.sb == nh*x.sh }
	if even(dst) && even(a) && even(b) {
		stride := func(x attnHead) int {
			if nh == 1 {
				return x.sb
			}
			return x.sh
		}
		return d.Gemm(operand(dst, dst.off, stride(dst), false), operand(a, a.off, stride(a), ta),
			operand(b, b.off, stride(b), tb), nb*nh, m, n, k, alpha, 0)
	}
	for bi := range nb {
		err := d.Gemm(operand(dst, dst.off+bi*dst.sb, dst.sh, false), operand(a, a.off+bi*a.sb, a.sh, ta),
			operand(b, b.off+bi*b.sb, b.sh, tb), nh, m, n, k, alpha, 0)
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *Device) sameAttnType(op string, dt dtype.DType, vs ...device.View) error {
	if dt != dtype.Float32 && dt != dtype.Float64 {
		return fmt.Errorf("%v: %s of %v", d, op, dt)
	}
	for _, v := range vs {
		if v.DType != dt {
			return fmt.Errorf("%v: %s of %v with a %v operand", d, op, dt, v.DType)
		}
	}
	return nil
}

// Attention implements device.Device. q is [B, H, Tq, D], k and v are
// [B, H, Tk, D], out is [B, H, Tq, D], all with a contiguous last axis and
// any other strides; probs is a contiguous [B, H, Tq, Tk]. With causal,
// query i sees keys j ≤ i.
func (d *Device) Attention(out, probs, q, k, v device.View, scale float64, causal bool) error {
	t := tempBufs{d: d}
	defer t.free()
	if anyHalf(out, probs, q, k, v) {
		back, err := d.widenHalf(&t, []*device.View{&out, &probs}, []*device.View{&q, &k, &v})
		if err != nil {
			return err
		}
		if err := d.Attention(out, probs, q, k, v, scale, causal); err != nil {
			return err
		}
		return back()
	}
	if err := d.sameAttnType("attention", q.DType, k, v, out, probs); err != nil {
		return err
	}
	if err := d.denseRows(&t, &q, &k, &v); err != nil {
		return err
	}
	var hq, hk, hv, ho attnHead
	for _, o := range []struct {
		h    *attnHead
		name string
		v    device.View
	}{{&hq, "q", q}, {&hk, "k", k}, {&hv, "v", v}, {&ho, "out", out}} {
		var err error
		if *o.h, err = d.headOf(o.name, o.v); err != nil {
			return err
		}
	}
	if !probs.Contiguous() {
		return fmt.Errorf("%v: attention: probs is not contiguous", d)
	}
	if out.Numel() == 0 && probs.Numel() == 0 {
		return nil
	}
	nb, nh, tq, dim := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	tk := k.Shape[2]
	if tk == 0 {
		// No keys: nothing to attend to, the output is 0.
		return d.Fill(out, 0)
	}
	hp := denseAttnHead(probs, nh, tq, tk)
	if dim == 0 {
		// Empty heads: every score is 0·scale (NaN if scale is infinite).
		if err := d.Fill(probs, 0*scale); err != nil {
			return err
		}
	} else if err := d.gemmHeads(nb, nh, hp, hq, hk, false, true, tq, tk, dim, scale); err != nil {
		return err
	}
	rows := nb * nh * tq
	c := d.call(famAttention, kname("attn_softmax_", typeSuffix(probs.DType)))
	group, grid, block := c.rowLaunch(rows, tk)
	c.ptr(d.ptr(probs))
	c.i64(int64(rows))
	c.i64(int64(tq))
	c.i64(int64(tk))
	c.flag(causal)
	c.i32(int32(group))
	if err := c.launch(grid, block, 0); err != nil {
		return err
	}
	return d.gemmHeads(nb, nh, ho, hp, hv, false, false, tq, dim, tk, 1)
}

// AttentionBackward implements device.Device: dq, dk, dv (laid out as q, k,
// v may be) from dout and the probabilities Attention kept.
func (d *Device) AttentionBackward(dq, dk, dv, dout, q, k, v, probs device.View, scale float64) error {
	t := tempBufs{d: d}
	defer t.free()
	if anyHalf(dq, dk, dv, dout, q, k, v, probs) {
		back, err := d.widenHalf(&t, []*device.View{&dq, &dk, &dv}, []*device.View{&dout, &q, &k, &v, &probs})
		if err != nil {
			return err
		}
		if err := d.AttentionBackward(dq, dk, dv, dout, q, k, v, probs, scale); err != nil {
			return err
		}
		return back()
	}
	if err := d.sameAttnType("attention backward", q.DType, k, v, dq, dk, dv, dout, probs); err != nil {
		return err
	}
	if err := d.denseRows(&t, &q, &k, &v, &dout); err != nil {
		return err
	}
	var hq, hk, hv, hdo, hdq, hdk, hdv attnHead
	for _, o := range []struct {
		h    *attnHead
		name string
		v    device.View
	}{{&hq, "q", q}, {&hk, "k", k}, {&hv, "v", v}, {&hdo, "dout", dout}, {&hdq, "dq", dq}, {&hdk, "dk", dk}, {&hdv, "dv", dv}} {
		var err error
		if *o.h, err = d.headOf(o.name, o.v); err != nil {
			return err
		}
	}
	if !probs.Contiguous() {
		return fmt.Errorf("%v: attention backward: probs is not contiguous", d)
	}
	if dq.Numel() == 0 && dk.Numel() == 0 {
		return nil
	}
	nb, nh, tq, dim := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	tk := k.Shape[2]
	switch {
	case tk == 0: // no keys: the output was 0 whatever q
		return d.Fill(dq, 0)
	case tq == 0: // no queries: no key contributed
		if err := d.Fill(dk, 0); err != nil {
			return err
		}
		return d.Fill(dv, 0)
	case dim == 0: // every gradient is empty
		return nil
	}
	dp, err := t.alloc(q.DType, []int{nb, nh, tq, tk})
	if err != nil {
		return err
	}
	hp, hs := denseAttnHead(probs, nh, tq, tk), denseAttnHead(dp, nh, tq, tk)
	if err := d.gemmHeads(nb, nh, hs, hdo, hv, false, true, tq, tk, dim, 1); err != nil {
		return err
	}
	rows := nb * nh * tq
	c := d.call(famAttention, kname("attn_softmax_bwd_", typeSuffix(q.DType)))
	group, grid, block := c.rowLaunch(rows, tk)
	c.ptr(d.ptr(dp))
	c.ptr(d.ptr(probs))
	c.i64(int64(rows))
	c.i64(int64(tk))
	c.i32(int32(group))
	if err := c.launch(grid, block, 0); err != nil {
		return err
	}
	if err := d.gemmHeads(nb, nh, hdq, hs, hk, false, false, tq, dim, tk, scale); err != nil {
		return err
	}
	if err := d.gemmHeads(nb, nh, hdk, hs, hq, true, false, tk, dim, tq, scale); err != nil {
		return err
	}
	return d.gemmHeads(nb, nh, hdv, hp, hdo, true, false, tk, dim, tq, 1)
}
