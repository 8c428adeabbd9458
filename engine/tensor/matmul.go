package tensor

import (
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
)

// gemmOperand describes the matrices of t [batch..., r, c] for a GEMM
// without copying when the last two dimensions are row-major or transposed
// and the batch dimensions collapse to one stride; ok is false otherwise.
func gemmOperand(t *Tensor, batchShape []int) (op device.GemmOperand, ok bool) {
	nd := len(t.shape)
	r, c := t.shape[nd-2], t.shape[nd-1]
	rs, cs := t.strides[nd-2], t.strides[nd-1]
	op = device.GemmOperand{Buf: t.view().Buf, DType: t.dt, Offset: t.off}
	switch {
	case (cs == 1 || c == 1) && (rs >= max(c, 1) || r == 1):
		op.Ld = max(rs, c, 1)
		if r == 1 {
			op.Ld = max(c, 1)
		}
	case (rs == 1 || r == 1) && (cs >= max(r, 1) || c == 1):
		op.Trans = true
		op.Ld = max(cs, r, 1)
		if c == 1 {
			op.Ld = max(r, 1)
		}
	default:
		return op, false
	}
	// Batch dimensions (broadcast to batchShape) must collapse into a single
	// stride: all zero (broadcast) or one run of equal steps.
	bst, okb := broadcastStrides(t.shape[:nd-2], t.strides[:nd-2], batchShape)
	if !okb {
		return op, false
	}
	step, uniform := uniformBatch(bst, batchShape)
	if !uniform {
		return op, false
	}
	op.BatchStride = step
	return op, true
}

// uniformBatch reports whether strides address the batch as one run of
// equal steps, and the step.
func uniformBatch(strides, shape []int) (int, bool) {
	step, expect := 0, -1
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == 1 {
			continue
		}
		if expect == -1 {
			step = strides[i]
			expect = step * shape[i]
			continue
		}
		if strides[i] != expect {
			return 0, false
		}
		expect *= shape[i]
	}
	return step, true
}

// Matmul is the matrix product with torch.matmul's rules: vectors are
// promoted to matrices and back, leading batch dimensions broadcast.
func (t *Tensor) Matmul(u *Tensor) *Tensor {
	rt, bad := check("matmul", t, u)
	if bad != nil {
		return bad
	}
	t, u = rt.lowPrecision(t), rt.lowPrecision(u)
	if len(t.shape) == 0 || len(u.shape) == 0 {
		return rt.fail("matmul", "both arguments need at least 1 dimension, got shapes %v and %v", t.shape, u.shape)
	}
	if t.dt != u.dt {
		return rt.fail("matmul", "expected both arguments to have the same dtype, got %v and %v", t.dt, u.dt)
	}
	if !t.dt.IsFloat() {
		return rt.fail("matmul", "not implemented for %v", t.dt)
	}
	a, b := t, u
	if len(a.shape) == 1 {
		a = a.Unsqueeze(0)
		defer a.Release()
	}
	if len(b.shape) == 1 {
		b = b.Unsqueeze(1)
		defer b.Release()
	}
	out := mm(a, b)
	if (len(t.shape) > 1 && len(u.shape) > 1) || out.err != nil {
		return out
	}
	// Drop the dimensions that promoted vectors to matrices.
	shape := out.shape[:len(out.shape)-2]
	if len(t.shape) > 1 {
		shape = append(slices.Clone(shape), out.shape[len(out.shape)-2])
	}
	if len(u.shape) > 1 {
		shape = append(slices.Clone(shape), out.shape[len(out.shape)-1])
	}
	r := out.Reshape(shape...)
	out.Release()
	return r
}

// mm multiplies a [..., m, k] by b [..., k, n] with batch broadcasting.
func mm(a, b *Tensor) *Tensor {
	rt := a.rt
	na, nb := len(a.shape), len(b.shape)
	m, k, k2, n := a.shape[na-2], a.shape[na-1], b.shape[nb-2], b.shape[nb-1]
	if k != k2 {
		return rt.fail("matmul", "shapes %v and %v cannot be multiplied (%dx%d and %dx%d)", a.shape, b.shape, m, k, k2, n)
	}
	batch, ok := broadcastShapes(a.shape[:na-2], b.shape[:nb-2])
	if !ok {
		return rt.fail("matmul", "batch dimensions of %v and %v cannot be broadcast", a.shape, b.shape)
	}
	ca, cb := a, b
	aop, ok := gemmOperand(a, batch)
	if !ok {
		ca = a.Expand(append(slices.Clone(batch), m, k)...).Contiguous()
		defer ca.Release()
		aop, _ = gemmOperand(ca, batch)
	}
	bop, ok := gemmOperand(b, batch)
	if !ok {
		cb = b.Expand(append(slices.Clone(batch), k, n)...).Contiguous()
		defer cb.Release()
		bop, _ = gemmOperand(cb, batch)
	}
	shape := append(slices.Clone(batch), m, n)
	out, err := rt.empty(a.dt, shape)
	if err != nil {
		return rt.failErr("matmul", err)
	}
	nbatch := numel(batch)
	cop := device.GemmOperand{Buf: out.st.buf, DType: out.dt, Ld: max(n, 1), BatchStride: m * n}
	if err := kernel(func() error {
		if k == 0 {
			return rt.dev.Fill(out.view(), 0)
		}
		return rt.dev.Gemm(cop, aop, bop, nbatch, m, n, k, 1, 0)
	}); err != nil {
		out.Release()
		return rt.failErr("matmul", err)
	}
	if nd := out.record("MmBackward", a, b); nd != nil {
		sa, sb := nd.saveIf(1, a), nd.saveIf(0, b)
		as, bs := a.shape, b.shape
		nd.backward = func(g *Tensor) []*Tensor {
			var ga, gb *Tensor
			if nd.needs(0) {
				ga = g.Matmul(sb.MT()).sumTo(as)
			}
			if nd.needs(1) {
				gb = sa.MT().Matmul(g).sumTo(bs)
			}
			return []*Tensor{ga, gb}
		}
	}
	return out
}

// Linear computes x·Wᵀ + b for x [..., in], weight [out, in] and an optional
// bias [out] (torch.nn.functional.linear), as one fused op: the bias is
// written first and the product accumulated onto it.
func Linear(x, weight, bias *Tensor) *Tensor {
	inputs := []*Tensor{x, weight}
	if bias != nil {
		inputs = append(inputs, bias)
	}
	rt, bad := check("linear", inputs...)
	if bad != nil {
		return bad
	}
	x, weight, bias = rt.lowPrecision(x), rt.lowPrecision(weight), rt.lowPrecision(bias)
	if len(weight.shape) != 2 || len(x.shape) == 0 {
		return rt.fail("linear", "expects input [..., in] and weight [out, in], got %v and %v", x.shape, weight.shape)
	}
	outF, inF := weight.shape[0], weight.shape[1]
	if x.shape[len(x.shape)-1] != inF {
		return rt.fail("linear", "input of shape %v does not match weight of shape %v (in_features %d)", x.shape, weight.shape, inF)
	}
	if bias != nil && (len(bias.shape) != 1 || bias.shape[0] != outF) {
		return rt.fail("linear", "bias of shape %v does not match out_features %d", bias.shape, outF)
	}
	if x.dt != weight.dt || (bias != nil && bias.dt != x.dt) {
		return rt.fail("linear", "mixed dtypes: input %v, weight %v", x.dt, weight.dt)
	}
	rows := numel(x.shape[:len(x.shape)-1]) // not numel / in: in may be 0
	x2 := x
	if len(x.shape) != 2 {
		x2 = x.Reshape(rows, inF)
		defer x2.Release()
	}
	outShape := append(slices.Clone(x.shape[:len(x.shape)-1]), outF)
	out, err := rt.empty(x.dt, outShape)
	if err != nil {
		return rt.failErr("linear", err)
	}
	aop, ok := gemmOperand(x2, nil)
	if !ok {
		x2 = x2.Contiguous()
		defer x2.Release()
		aop, _ = gemmOperand(x2, nil)
	}
	wop, ok := gemmOperand(weight, nil)
	wc := weight
	if !ok {
		wc = weight.Contiguous()
		defer wc.Release()
		wop, _ = gemmOperand(wc, nil)
	}
	wop.Trans = !wop.Trans // x·Wᵀ
	cop := device.GemmOperand{Buf: out.st.buf, DType: out.dt, Ld: max(outF, 1)}
	beta := 0.0
	if err := kernel(func() error {
		if bias != nil {
			bv, _ := broadcastView(bias, []int{rows, outF})
			ov := out.view()
			ov.Shape, ov.Strides = []int{rows, outF}, []int{outF, 1}
			if err := rt.dev.Copy(ov, bv); err != nil {
				return err
			}
			beta = 1
		}
		if inF == 0 {
			if bias == nil {
				return rt.dev.Fill(out.view(), 0)
			}
			return nil
		}
		return rt.dev.Gemm(cop, aop, wop, 1, rows, outF, inF, 1, beta)
	}); err != nil {
		out.Release()
		return rt.failErr("linear", err)
	}
	// The node's inputs are addmm's, (bias, input, weight), so that, as in
	// PyTorch, the bias's gradient is final before the weight's: DDP's
	// rebuilt buckets follow that order.
	ib, ix, iw := -1, 0, 1
	recorded := []*Tensor{x, weight}
	if bias != nil {
		ib, ix, iw = 0, 1, 2
		recorded = []*Tensor{bias, x, weight}
	}
	if n := out.record("AddmmBackward", recorded...); n != nil {
		sx, sw := n.saveIf(iw, x2), n.saveIf(ix, weight)
		xs := x.shape
		n.backward = func(g *Tensor) []*Tensor {
			g2 := g.Reshape(rows, outF)
			grads := make([]*Tensor, len(recorded))
			if ib >= 0 && n.needs(ib) {
				grads[ib] = g2.Sum([]int{0}, false)
			}
			if n.needs(ix) {
				grads[ix] = g2.Matmul(sw).Reshape(xs...)
			}
			if n.needs(iw) {
				grads[iw] = g2.MT().Matmul(sx)
			}
			return grads
		}
	}
	return out
}
