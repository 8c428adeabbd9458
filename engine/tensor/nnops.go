package tensor

import (
	"math"
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
)

// lastAxis moves dim to the end and makes the result contiguous, so that
// row kernels see contiguous rows; restore undoes the move on a result.
func lastAxis(t *Tensor, dim int) (rows *Tensor, restore func(*Tensor) *Tensor) {
	nd := len(t.shape)
	if dim == nd-1 || nd == 0 {
		return t.Contiguous(), func(r *Tensor) *Tensor { return r }
	}
	moved := t.Transpose(dim, nd-1)
	c := moved.Contiguous()
	moved.Release()
	return c, func(r *Tensor) *Tensor { return r.Transpose(dim, nd-1) }
}

// Softmax normalises exp(t) along dim (torch.softmax).
func (t *Tensor) Softmax(dim int) *Tensor { return softmax("softmax", t, dim, false) }

// LogSoftmax is log(softmax(t)) computed stably (torch.log_softmax).
func (t *Tensor) LogSoftmax(dim int) *Tensor { return softmax("log_softmax", t, dim, true) }

func softmax(op string, t *Tensor, dim int, log bool) *Tensor {
	rt, bad := check(op, t)
	if bad != nil {
		return bad
	}
	t = rt.fullPrecision(t)
	if !t.dt.IsFloat() {
		return rt.fail(op, "not implemented for %v", t.dt)
	}
	d, ok := normDim(dim, max(1, len(t.shape)))
	if !ok {
		return rt.fail(op, "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
	}
	var rows *Tensor
	var restore func(*Tensor) *Tensor
	rt.NoGrad(func() { rows, restore = lastAxis(t, d) })
	defer rows.Release()
	y, err := rt.empty(t.dt, rows.shape)
	if err != nil {
		return rt.failErr(op, err)
	}
	if err := kernel(func() error { return rt.dev.Softmax(y.view(), rows.view(), log) }); err != nil {
		y.Release()
		return rt.failErr(op, err)
	}
	var out *Tensor
	rt.NoGrad(func() { out = restore(y) })
	if out != y {
		y.Release()
	}
	name := "SoftmaxBackward"
	if log {
		name = "LogSoftmaxBackward"
	}
	if n := out.record(name, t); n != nil {
		saved := n.save(out)
		n.backward = func(g *Tensor) []*Tensor {
			gr, back := lastAxis(g, d)
			yr, _ := lastAxis(saved, d)
			dx, err := g.rt.empty(g.dt, gr.shape)
			if err != nil {
				return []*Tensor{g.rt.failErr(op, err)}
			}
			if err := kernel(func() error { return g.rt.dev.SoftmaxBackward(dx.view(), gr.view(), yr.view(), log) }); err != nil {
				return []*Tensor{g.rt.failErr(op, err)}
			}
			return []*Tensor{back(dx)}
		}
	}
	return out
}

// LayerNorm normalises over the trailing dimensions normalizedShape, then
// scales by weight and shifts by bias (either may be nil), as
// torch.nn.functional.layer_norm.
func LayerNorm(x *Tensor, normalizedShape []int, weight, bias *Tensor, eps float64) *Tensor {
	rt, bad := check("layer_norm", x)
	if bad != nil {
		return bad
	}
	x, weight, bias = rt.fullPrecision(x), rt.fullPrecision(weight), rt.fullPrecision(bias)
	inputs := []*Tensor{x, weight, bias}
	for _, p := range []*Tensor{weight, bias} {
		if p == nil {
			continue
		}
		if _, bad := check("layer_norm", x, p); bad != nil {
			return bad
		}
		if !slices.Equal(p.shape, normalizedShape) {
			return rt.fail("layer_norm", "weight/bias of shape %v do not match normalized_shape %v", p.shape, normalizedShape)
		}
		if p.dt != x.dt {
			return rt.fail("layer_norm", "weight/bias dtype %v differs from the input's %v", p.dt, x.dt)
		}
	}
	nd, nn := len(x.shape), len(normalizedShape)
	if nn == 0 || nn > nd || !slices.Equal(x.shape[nd-nn:], normalizedShape) {
		return rt.fail("layer_norm", "normalized_shape %v does not match the trailing dimensions of input shape %v", normalizedShape, x.shape)
	}
	if !x.dt.IsFloat() {
		return rt.fail("layer_norm", "not implemented for %v", x.dt)
	}
	cols := numel(normalizedShape)
	rowsN := x.Numel() / max(cols, 1)
	var xr *Tensor
	rt.NoGrad(func() { xr = x.Reshape(rowsN, cols).Contiguous() })
	defer xr.Release()
	statT := x.dt
	if statT == BFloat16 || statT == Float16 {
		statT = Float32
	}
	y, err1 := rt.empty(x.dt, x.shape)
	mean, err2 := rt.empty(statT, []int{rowsN})
	rstd, err3 := rt.empty(statT, []int{rowsN})
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			y.Release()
			mean.Release()
			rstd.Release()
			return rt.failErr("layer_norm", err)
		}
	}
	defer mean.Release()
	defer rstd.Release()
	yv := y.view()
	yv.Shape, yv.Strides = []int{rowsN, cols}, []int{cols, 1}
	wv, bv := flatParam(weight, cols), flatParam(bias, cols)
	if err := kernel(func() error {
		return rt.dev.LayerNorm(yv, mean.view(), rstd.view(), xr.view(), wv, bv, eps)
	}); err != nil {
		y.Release()
		return rt.failErr("layer_norm", err)
	}
	if n := y.record("NativeLayerNormBackward", inputs...); n != nil {
		sx, sm, sr := n.save(xr), n.save(mean), n.save(rstd)
		var sw *Tensor
		if weight != nil {
			sw = n.save(weight)
		}
		xs := x.shape
		n.backward = func(g *Tensor) []*Tensor {
			rt := g.rt
			gr := g.Reshape(rowsN, cols).Contiguous()
			dx, err := rt.empty(g.dt, xs)
			if err != nil {
				return []*Tensor{rt.failErr("layer_norm", err)}
			}
			var dw, db *Tensor
			dwv, dbv := device.View{}, device.View{}
			if weight != nil && n.needs(1) {
				dw = rt.Empty(g.dt, normalizedShape...)
				if dw.err != nil {
					return []*Tensor{dw}
				}
				dwv = flatParam(dw, cols)
			}
			if bias != nil && n.needs(2) {
				db = rt.Empty(g.dt, normalizedShape...)
				if db.err != nil {
					return []*Tensor{db}
				}
				dbv = flatParam(db, cols)
			}
			dxv := dx.view()
			dxv.Shape, dxv.Strides = []int{rowsN, cols}, []int{cols, 1}
			if err := kernel(func() error {
				return rt.dev.LayerNormBackward(dxv, dwv, dbv, gr.view(), sx.view(), sm.view(), sr.view(), flatParam(sw, cols))
			}); err != nil {
				return []*Tensor{rt.failErr("layer_norm", err)}
			}
			return []*Tensor{dx, dw, db}
		}
	}
	return y
}

// flatParam views a contiguous parameter as a vector, or the empty view for
// nil.
func flatParam(p *Tensor, n int) device.View {
	if p == nil {
		return device.View{}
	}
	v := p.view()
	if !p.IsContiguous() {
		c := p.Contiguous()
		v = c.view()
	}
	v.Shape, v.Strides = []int{n}, []int{1}
	return v
}

// Reduction selects how a loss combines its per-element values.
type Reduction string

const (
	ReduceMean Reduction = "mean"
	ReduceSum  Reduction = "sum"
	ReduceNone Reduction = "none"
)

func (r Reduction) valid() bool {
	return r == ReduceMean || r == ReduceSum || r == ReduceNone || r == ""
}

// CrossEntropyOptions are torch.nn.functional.cross_entropy's options.
// The zero value is PyTorch's default except IgnoreIndex, whose default is
// -100: use DefaultCrossEntropy.
type CrossEntropyOptions struct {
	Reduction      Reduction
	IgnoreIndex    int64
	LabelSmoothing float64
}

// DefaultCrossEntropy is PyTorch's default: mean reduction, ignore_index
// -100, no label smoothing.
var DefaultCrossEntropy = CrossEntropyOptions{Reduction: ReduceMean, IgnoreIndex: -100}

// CrossEntropy is the cross-entropy loss between logits [N, C] (or [C]) and
// integer class targets [N] (or a scalar), fused: one pass computes the
// log-softmax and the loss, and backward writes softmax − onehot directly.
func CrossEntropy(logits, target *Tensor, opt CrossEntropyOptions) *Tensor {
	rt, bad := check("cross_entropy", logits, target)
	if bad != nil {
		return bad
	}
	logits = rt.fullPrecision(logits)
	if !opt.Reduction.valid() {
		return rt.fail("cross_entropy", "reduction must be mean, sum or none, not %q", opt.Reduction)
	}
	if opt.Reduction == "" {
		opt.Reduction = ReduceMean
	}
	if opt.LabelSmoothing < 0 || opt.LabelSmoothing > 1 {
		return rt.fail("cross_entropy", "label_smoothing must be between 0.0 and 1.0, got %v", opt.LabelSmoothing)
	}
	if !logits.dt.IsFloat() {
		return rt.fail("cross_entropy", "logits must be floating point, not %v", logits.dt)
	}
	if target.dt != Int64 {
		return rt.fail("cross_entropy", "expected target of class indices of type int64, got %v", target.dt)
	}
	var lg, tg *Tensor
	switch {
	case len(logits.shape) == 2 && len(target.shape) == 1 && target.shape[0] == logits.shape[0]:
		lg, tg = logits, target
	case len(logits.shape) == 1 && len(target.shape) == 0:
		lg, tg = logits.Unsqueeze(0), target.Reshape(1)
		defer lg.Release()
		defer tg.Release()
	default:
		return rt.fail("cross_entropy", "expected logits [N, C] with target [N] (or [C] with a scalar target), got %v and %v", logits.shape, target.shape)
	}
	var lc *Tensor
	rt.NoGrad(func() { lc = lg.Contiguous() })
	defer lc.Release()
	tc := tg.Contiguous()
	defer tc.Release()
	nrows := lc.shape[0]
	perRow, err := rt.empty(logits.dt, []int{nrows})
	if err != nil {
		return rt.failErr("cross_entropy", err)
	}
	kopt := device.CrossEntropyOptions{IgnoreIndex: opt.IgnoreIndex, LabelSmoothing: opt.LabelSmoothing}
	var count int
	if err := kernel(func() (err error) {
		count, err = rt.dev.CrossEntropy(perRow.view(), lc.view(), tc.view(), kopt)
		return err
	}); err != nil {
		perRow.Release()
		return rt.failErr("cross_entropy", err)
	}
	var out *Tensor
	rt.NoGrad(func() {
		switch opt.Reduction {
		case ReduceNone:
			out = perRow
			if len(logits.shape) == 1 {
				out = perRow.Reshape()
				perRow.Release()
			}
		case ReduceSum:
			out = perRow.SumAll()
			perRow.Release()
		default:
			s := perRow.SumAll()
			out = s.MulScalar(1 / float64(count)) // 0/0 = NaN, as PyTorch
			s.Release()
			perRow.Release()
		}
	})
	if n := out.record("CrossEntropyBackward", logits); n != nil {
		sl, st := n.save(lc), n.save(tc)
		shape := logits.shape
		n.backward = func(g *Tensor) []*Tensor {
			rt := g.rt
			var dl *Tensor // per-row upstream gradient
			switch opt.Reduction {
			case ReduceNone:
				dl = g.Reshape(nrows)
			case ReduceSum:
				dl = g.Reshape(1).Expand(nrows)
			default:
				dl = g.Reshape(1).MulScalar(1 / float64(count)).Expand(nrows)
			}
			dl = dl.Contiguous()
			dx, err := rt.empty(g.dt, sl.shape)
			if err != nil {
				return []*Tensor{rt.failErr("cross_entropy", err)}
			}
			if err := kernel(func() error {
				return rt.dev.CrossEntropyBackward(dx.view(), dl.view(), sl.view(), st.view(), kopt)
			}); err != nil {
				return []*Tensor{rt.failErr("cross_entropy", err)}
			}
			return []*Tensor{dx.Reshape(shape...)}
		}
	}
	return out
}

// MSELoss is the mean (or summed, or elementwise) squared error
// (torch.nn.functional.mse_loss); the shapes broadcast.
func MSELoss(input, target *Tensor, reduction Reduction) *Tensor {
	rt, bad := check("mse_loss", input, target)
	if bad != nil {
		return bad
	}
	input, target = rt.fullPrecision(input), rt.fullPrecision(target)
	if !reduction.valid() {
		return rt.fail("mse_loss", "reduction must be mean, sum or none, not %q", reduction)
	}
	d := input.Sub(target)
	sq := d.Square()
	d.Release()
	switch reduction {
	case ReduceNone:
		return sq
	case ReduceSum:
		defer sq.Release()
		return sq.SumAll()
	}
	defer sq.Release()
	return sq.MeanAll()
}

// ScaledDotProductAttention computes softmax(q·kᵀ/√D [+ causal mask])·v for
// q [B, H, Tq, D], k and v [B, H, Tk, D] in one fused op
// (torch.nn.functional.scaled_dot_product_attention with is_causal). The
// result is laid out as [B, Tq, H, D] in memory, so that the usual
// transpose(1, 2) and reshape to [B, Tq, H·D] cost nothing.
func ScaledDotProductAttention(q, k, v *Tensor, causal bool) *Tensor {
	rt, bad := check("scaled_dot_product_attention", q, k, v)
	if bad != nil {
		return bad
	}
	q, k, v = rt.lowPrecision(q), rt.lowPrecision(k), rt.lowPrecision(v)
	if len(q.shape) != 4 || len(k.shape) != 4 || len(v.shape) != 4 {
		return rt.fail("scaled_dot_product_attention", "expects q, k, v of shape [B, H, T, D], got %v, %v, %v", q.shape, k.shape, v.shape)
	}
	B, H, Tq, D := q.shape[0], q.shape[1], q.shape[2], q.shape[3]
	Tk := k.shape[2]
	if !slices.Equal(k.shape, []int{B, H, Tk, D}) || !slices.Equal(v.shape, k.shape) {
		return rt.fail("scaled_dot_product_attention", "shapes of q %v, k %v and v %v do not agree", q.shape, k.shape, v.shape)
	}
	if q.dt != k.dt || q.dt != v.dt || !q.dt.IsFloat() {
		return rt.fail("scaled_dot_product_attention", "q, k, v must share a floating-point dtype, got %v, %v, %v", q.dt, k.dt, v.dt)
	}
	if causal && Tq > Tk {
		return rt.fail("scaled_dot_product_attention", "causal attention needs Tq <= Tk, got %d and %d", Tq, Tk)
	}
	// The kernels need the last axis contiguous; other strides are free.
	ops := []*Tensor{q, k, v}
	for i, t := range ops {
		if t.strides[3] != 1 && D > 1 {
			c := t.Contiguous()
			defer c.Release()
			ops[i] = c
		}
	}
	qc, kc, vc := ops[0], ops[1], ops[2]
	store, err := rt.empty(q.dt, []int{B, Tq, H, D})
	if err != nil {
		return rt.failErr("scaled_dot_product_attention", err)
	}
	out := store.alias(0, []int{B, H, Tq, D}, []int{Tq * H * D, D, H * D, 1})
	store.Release()
	probs, err := rt.empty(q.dt, []int{B, H, Tq, Tk})
	if err != nil {
		out.Release()
		return rt.failErr("scaled_dot_product_attention", err)
	}
	defer probs.Release()
	scale := 1 / math.Sqrt(float64(D))
	if err := kernel(func() error {
		return rt.dev.Attention(out.view(), probs.view(), qc.view(), kc.view(), vc.view(), scale, causal)
	}); err != nil {
		out.Release()
		return rt.failErr("scaled_dot_product_attention", err)
	}
	if n := out.record("ScaledDotProductAttentionBackward", q, k, v); n != nil {
		sq, sk, sv, sp := n.save(qc), n.save(kc), n.save(vc), n.save(probs)
		n.backward = func(g *Tensor) []*Tensor {
			rt := g.rt
			gc := g
			if g.strides[3] != 1 && D > 1 {
				gc = g.Contiguous()
			}
			dq, e1 := rt.empty(q.dt, []int{B, H, Tq, D})
			dk, e2 := rt.empty(q.dt, []int{B, H, Tk, D})
			dv, e3 := rt.empty(q.dt, []int{B, H, Tk, D})
			if err := firstError(e1, e2, e3); err != nil {
				return []*Tensor{rt.failErr("scaled_dot_product_attention", err)}
			}
			if err := kernel(func() error {
				return rt.dev.AttentionBackward(dq.view(), dk.view(), dv.view(), gc.view(), sq.view(), sk.view(), sv.view(), sp.view(), scale)
			}); err != nil {
				return []*Tensor{rt.failErr("scaled_dot_product_attention", err)}
			}
			return []*Tensor{dq, dk, dv}
		}
	}
	return out
}

func firstError(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
