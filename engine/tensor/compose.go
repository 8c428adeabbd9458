package tensor

import (
	"fmt"
	"math"
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Ops composed from the engine's other ops: clamp, norm, repeat, flip,
// unbind, all/any, repeat_interleave, the in-place sub_, div_ and clamp_,
// linspace and eye. They need no kernel of their own, so they run on every
// device. Where PyTorch's gradient is not what autograd would derive from
// the composition (clamp at its bounds, a norm that is zero), the op
// computes its forward pass unrecorded and records PyTorch's backward
// formula instead.

// composed runs f in a scope of its own, so that the temporaries of a
// composed op are released when it returns; only the result survives.
func composed(rt *Runtime, f func() *Tensor) *Tensor {
	sc := rt.OpenScope()
	out := f()
	sc.Keep(out)
	sc.Close()
	return out
}

// ResultType is torch.result_type of tensor operands (nil ones are
// skipped): a 0-dimensional tensor takes part like a Python number does,
// changing the type of higher-dimensional operands only when it is of a
// higher category (bool < integer < floating point). A float32 tensor
// with a 0-d float64 tensor gives float32; an int64 tensor with a 0-d
// float64 one gives float64.
func ResultType(ts ...*Tensor) DType {
	var dims, zero DType // dtype.Invalid: no operand of that kind
	for _, t := range ts {
		if t == nil {
			continue
		}
		if len(t.shape) == 0 {
			zero = promoteDefined(zero, t.dt)
		} else {
			dims = promoteDefined(dims, t.dt)
		}
	}
	return combineCategories(dims, zero)
}

// promoteDefined is promote where either type may be undefined.
func promoteDefined(a, b DType) DType {
	switch {
	case a == dtype.Invalid:
		return b
	case b == dtype.Invalid:
		return a
	}
	return promote(a, b)
}

// combineCategories is ATen's combine_categories: the type of the higher
// priority operands, unless the lower ones are of a higher category.
func combineCategories(higher, lower DType) DType {
	switch {
	case higher.IsFloat():
		return higher
	case higher == Bool || lower.IsFloat():
		return promoteDefined(higher, lower)
	case higher != dtype.Invalid:
		return higher
	}
	return lower
}

// castable reports whether an in-place op may write a result of type from
// into a tensor of type to (ATen's canCast): not floating point into an
// integer tensor, not a number into a bool tensor.
func castable(from, to DType) bool {
	return !(from.IsFloat() && !to.IsFloat()) && !(from != Bool && to == Bool)
}

// castError is PyTorch's refusal of an in-place op whose result type the
// tensor cannot hold.
func castError(op string, from, to DType) error {
	return fmt.Errorf("tensor: %s: result type %v can't be cast to the desired output type %v", op, from, to)
}

// scalarFor converts the number v to dt as c10's checked Scalar conversion
// does when an op turns a Python number into an element (clamp's bounds,
// linspace's ends): an integral number out of an integer type's range, or
// a finite number beyond a float type's largest, is an error rather than a
// wrapped or infinite bound. Integral numbers wrap into uint8 from
// [-255, 255], as PyTorch's int64-to-uint8 check allows; other numbers
// truncate toward zero into integer types.
func scalarFor(op, what string, dt DType, v float64) (float64, error) {
	lo, hi := 0.0, 0.0
	switch dt {
	case Float64:
		return v, nil
	case Float32:
		lo, hi = -math.MaxFloat32, math.MaxFloat32
	case BFloat16:
		lo, hi = -3.3895313892515355e38, 3.3895313892515355e38
	case Float16:
		lo, hi = -65504, 65504
	case Int64:
		if v >= -(1<<63) && v < 1<<63 { // 2⁶³ itself does not fit
			return math.Trunc(v), nil
		}
	case Int32:
		lo, hi = math.MinInt32, math.MaxInt32
	case Uint8:
		lo, hi = 0, 255
		if v == math.Trunc(v) && v >= -255 && v < 0 {
			return float64(uint8(int64(v))), nil
		}
	case Bool:
		if v != 0 {
			return 1, nil
		}
		return 0, nil
	}
	if dt.IsFloat() {
		if math.IsNaN(v) || math.IsInf(v, 0) || (v >= lo && v <= hi) {
			return v, nil
		}
	} else if v >= lo && v <= hi {
		return math.Trunc(v), nil
	}
	return 0, fmt.Errorf("tensor: %s: %s %v cannot be converted to type %v without overflow", op, what, v, dt)
}

// sgn is torch.sgn of a real tensor: -1, 0 or 1, and 0 for NaN (the Sign
// op keeps NaN, which norm's backward must not).
func sgn(x *Tensor) *Tensor {
	return x.GtScalar(0).To(x.dt).Sub(x.LtScalar(0).To(x.dt))
}

// Clamp limits every element of t to [min, max], torch.clamp with numbers;
// either bound may be nil, not both. The result is min(max(x, min), max):
// a lower bound above the upper one gives the upper one everywhere, and
// NaN elements stay NaN. As PyTorch 1.13's CPU kernels do, a NaN bound
// makes every element NaN when both bounds are given and leaves t's values
// unchanged when it is the only one. An integer or bool tensor with a
// fractional bound gives float32, a bool tensor with an integral bound
// int64. The gradient passes where min <= x <= max, bounds included
// (PyTorch's clamp_backward), and is zero elsewhere.
func (t *Tensor) Clamp(min, max *float64) *Tensor {
	rt, bad := check("clamp", t)
	if bad != nil {
		return bad
	}
	dt, lo, hi, err := t.clampScalars("clamp", min, max)
	if err != nil {
		return errTensor(rt, err)
	}
	return composed(rt, func() *Tensor {
		var out, x, loT, hiT *Tensor
		rt.NoGrad(func() {
			x = t.To(dt)
			loT, hiT = scalarOrNil(rt, dt, lo), scalarOrNil(rt, dt, hi)
			out = clampValues(x, loT, hiT, lo, hi)
		})
		if out.err != nil || !dt.IsFloat() {
			return out
		}
		if n := out.record("ClampBackward1", t); n != nil {
			xs := n.save(x)
			var los, his *Tensor
			if loT != nil {
				los = n.save(loT)
			}
			if hiT != nil {
				his = n.save(hiT)
			}
			n.backward = func(g *Tensor) []*Tensor {
				return []*Tensor{Where(clampInside(xs, los, his), g, ZerosLike(g))}
			}
		}
		return out
	})
}

// clampScalars checks Clamp's bounds and returns the result type and the
// bounds converted to it (nil where absent).
func (t *Tensor) clampScalars(op string, min, max *float64) (DType, *float64, *float64, error) {
	if min == nil && max == nil {
		return 0, nil, nil, fmt.Errorf("tensor: %s: at least one of min or max must be given", op)
	}
	dt := t.dt
	if !dt.IsFloat() {
		// A Python number takes part in type promotion as int64 (integral)
		// or the default float32; it changes the type of a bool tensor, or
		// of an integer tensor when it is fractional.
		wrapped := Int64
		for _, b := range []*float64{min, max} {
			if b != nil && *b != math.Trunc(*b) {
				wrapped = Float32
			}
		}
		if dt == Bool || wrapped == Float32 {
			dt = promote(dt, wrapped)
		}
	}
	conv := func(what string, b *float64) (*float64, error) {
		if b == nil {
			return nil, nil
		}
		v, err := scalarFor(op, what, dt, *b)
		return &v, err
	}
	lo, err := conv("min", min)
	if err != nil {
		return 0, nil, nil, err
	}
	hi, err := conv("max", max)
	return dt, lo, hi, err
}

func scalarOrNil(rt *Runtime, dt DType, v *float64) *Tensor {
	if v == nil {
		return nil
	}
	return rt.Scalar(dt, *v)
}

// clampValues computes min(max(x, lo), hi) unrecorded, with the NaN rules
// of PyTorch's scalar clamp when lo and hi are numbers (loV, hiV).
func clampValues(x, lo, hi *Tensor, loV, hiV *float64) *Tensor {
	isNaN := func(v *float64) bool { return v != nil && math.IsNaN(*v) }
	switch {
	case loV != nil && hiV != nil && (isNaN(loV) || isNaN(hiV)):
		return FullLike(x, math.NaN())
	case isNaN(loV) || isNaN(hiV): // a lone NaN bound: no change
		return x.Clone()
	}
	if loV != nil && hiV != nil && x.dt.IsFloat() {
		if out, ok := clampOnePass(x, *loV, *hiV); ok {
			return out
		}
	}
	out := x
	if lo != nil {
		out = out.Maximum(lo)
	}
	if hi != nil {
		out = out.Minimum(hi)
	}
	if out == x {
		out = x.Clone()
	}
	return out
}

// clampOnePass runs the device's one-pass clamp (device.Clamper) when it
// has one that takes x; otherwise it reports false and the caller runs
// Maximum and Minimum, which give the same bits.
func clampOnePass(x *Tensor, lo, hi float64) (*Tensor, bool) {
	c, ok := x.rt.dev.(device.Clamper)
	if !ok {
		return nil, false
	}
	out, err := x.rt.empty(x.dt, x.shape)
	if err != nil {
		return nil, false // the two ops meet the same failure and report it
	}
	if err := kernel(func() error { return c.Clamp(out.view(), x.view(), lo, hi) }); err != nil {
		out.Release()
		return nil, false
	}
	return out, true
}

// clampInside is where clamp passes the gradient to its input: lo <= x <=
// hi, false where x or a bound is NaN.
func clampInside(x, lo, hi *Tensor) *Tensor {
	switch {
	case lo != nil && hi != nil:
		return x.Ge(lo).LogicalAnd(x.Le(hi))
	case lo != nil:
		return x.Ge(lo)
	}
	return x.Le(hi)
}

// ClampTensor is torch.clamp with tensor bounds, either of which may be
// nil (not both): min(max(x, min), max) elementwise, with t and the bounds
// broadcast together and promoted to their result type (ResultType); a
// NaN anywhere gives NaN. It is differentiable in t and in the bounds, as
// PyTorch's clamp_backward_min_max: a bound gets the gradient where it
// was the value taken, min where x < min (and min < max), max where x >
// max or max < min.
func (t *Tensor) ClampTensor(min, max *Tensor) *Tensor {
	rt, dt, _, err := t.clampTensors("clamp", min, max)
	if err != nil {
		return errTensor(rt, err)
	}
	return composed(rt, func() *Tensor {
		var out, x, lo, hi *Tensor
		rt.NoGrad(func() {
			x = t.To(dt)
			if min != nil {
				lo = min.To(dt)
			}
			if max != nil {
				hi = max.To(dt)
			}
			out = clampValues(x, lo, hi, nil, nil)
		})
		if out.err != nil || !dt.IsFloat() {
			return out
		}
		n := out.record("ClampBackward0", t, min, max)
		if n == nil {
			return out
		}
		xs := n.save(x)
		var los, his *Tensor
		if lo != nil {
			los = n.save(lo)
		}
		if hi != nil {
			his = n.save(hi)
		}
		shapes := [][]int{t.shape, nil, nil}
		if min != nil {
			shapes[1] = min.shape
		}
		if max != nil {
			shapes[2] = max.shape
		}
		n.backward = func(g *Tensor) []*Tensor {
			zero := ZerosLike(g)
			grads := make([]*Tensor, 3)
			if n.needs(0) {
				grads[0] = Where(clampInside(xs, los, his), g, zero).sumTo(shapes[0])
			}
			if n.needs(1) {
				pick := xs.Lt(los)
				if his != nil {
					pick = pick.LogicalAnd(los.Lt(his))
				}
				grads[1] = Where(pick, g, zero).sumTo(shapes[1])
			}
			if n.needs(2) {
				pick := xs.Gt(his)
				if los != nil {
					pick = pick.LogicalOr(his.Lt(los))
				}
				grads[2] = Where(pick, g, zero).sumTo(shapes[2])
			}
			return grads
		}
		n.castGrads(t, min, max)
		return out
	})
}

// clampTensors checks ClampTensor's operands and returns their runtime,
// result type and broadcast shape.
func (t *Tensor) clampTensors(op string, min, max *Tensor) (*Runtime, DType, []int, error) {
	ts := []*Tensor{t}
	for _, b := range []*Tensor{min, max} {
		if b != nil {
			ts = append(ts, b)
		}
	}
	rt, bad := check(op, ts...)
	if bad != nil {
		return rt, 0, nil, bad.err
	}
	if len(ts) == 1 {
		return rt, 0, nil, fmt.Errorf("tensor: %s: at least one of min or max must be given", op)
	}
	shape := t.shape
	for _, b := range ts[1:] {
		s, ok := broadcastShapes(shape, b.shape)
		if !ok {
			return rt, 0, nil, fmt.Errorf("tensor: %s: shapes %v, %v and %v cannot be broadcast together", op, t.shape, shapeOrNone(min), shapeOrNone(max))
		}
		shape = s
	}
	return rt, ResultType(t, min, max), shape, nil
}

func shapeOrNone(t *Tensor) any {
	if t == nil {
		return "None"
	}
	return t.shape
}

// ClampInPlace clamps t to numbers in place (t.clamp_(min, max)), with
// Clamp's rules; a bound that would change t's type (a fractional bound
// for an integer tensor) is an error. It is not recorded by autograd.
func (t *Tensor) ClampInPlace(min, max *float64) error {
	if _, bad := check("clamp_", t); bad != nil {
		return bad.err
	}
	dt, lo, hi, err := t.clampScalars("clamp_", min, max)
	if err != nil {
		return err
	}
	if dt != t.dt {
		return castError("clamp_", dt, t.dt)
	}
	if lo != nil && math.IsNaN(*lo) || hi != nil && math.IsNaN(*hi) {
		return t.assign("clamp_", func() *Tensor { return clampValues(t, nil, nil, lo, hi) })
	}
	// The bounds have t's type: max then min, each in place, is the clamp.
	for _, b := range []struct {
		op device.BinaryOp
		v  *float64
	}{{device.Maximum, lo}, {device.Minimum, hi}} {
		if b.v == nil {
			continue
		}
		s := t.rt.Scalar(dt, *b.v)
		err := t.binaryInPlace("clamp_", b.op, s, dt, nil)
		s.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// ClampTensorInPlace clamps t to tensor bounds in place
// (t.clamp_(min, max) with tensors): the bounds broadcast to t's shape,
// and the result type must be one t can hold.
func (t *Tensor) ClampTensorInPlace(min, max *Tensor) error {
	_, dt, shape, err := t.clampTensors("clamp_", min, max)
	if err != nil {
		return err
	}
	if !slices.Equal(shape, t.shape) {
		return fmt.Errorf("tensor: clamp_: output with shape %v doesn't match the broadcast shape %v", t.shape, shape)
	}
	if !castable(dt, t.dt) {
		return castError("clamp_", dt, t.dt)
	}
	return t.assign("clamp_", func() *Tensor {
		var lo, hi *Tensor
		if min != nil {
			lo = min.To(dt)
		}
		if max != nil {
			hi = max.To(dt)
		}
		return clampValues(t.To(dt), lo, hi, nil, nil)
	}, min, max)
}

// checkInPlaceOperands is checkInPlace, and refuses operands that require
// grad with grad mode on: PyTorch would make t part of the graph, but the
// in-place ops here are not recorded, and the operands' gradient would be
// lost without a word.
func (t *Tensor) checkInPlaceOperands(op string, operands ...*Tensor) error {
	if err := t.checkInPlace(op); err != nil {
		return err
	}
	for _, u := range operands {
		if u != nil && u.requiresGrad && t.rt.noGrad == 0 {
			return fmt.Errorf("tensor: %s: an operand requires grad, and in-place operations are not recorded by autograd; use the out-of-place op, or run it under NoGrad", op)
		}
	}
	return nil
}

// assign writes f's result, computed unrecorded from t and operands, into
// t in place (through a temporary: f may read t), after autograd's
// in-place checks.
func (t *Tensor) assign(op string, f func() *Tensor, operands ...*Tensor) error {
	if err := t.checkInPlaceOperands(op, operands...); err != nil {
		return err
	}
	sc := t.rt.OpenScope()
	defer sc.Close()
	var err error
	t.rt.NoGrad(func() {
		r := f()
		if err = r.Err(); err == nil {
			err = t.CopyFrom(r)
		}
	})
	return err
}

// SubInPlace subtracts alpha·u from t in place, t.sub_(u, alpha=alpha):
// u broadcasts to t's shape, and the operands' result type (ResultType)
// must be one t can hold. Bool tensors cannot subtract, and a fractional
// alpha needs a floating-point result, as in PyTorch. The write bumps t's
// version; a tensor autograd tracks refuses it (see CopyFrom).
func (t *Tensor) SubInPlace(u *Tensor, alpha float64) error {
	if _, bad := check("sub_", t, u); bad != nil {
		return bad.err
	}
	switch {
	case t.dt == Bool && u.dt == Bool:
		return fmt.Errorf("tensor: sub_: subtraction, the `-` operator, with two bool tensors is not supported; use logical_xor")
	case t.dt == Bool || u.dt == Bool:
		return fmt.Errorf("tensor: sub_: subtraction, the `-` operator, with a bool tensor is not supported; to invert a mask, use logical_not")
	}
	dt := ResultType(t, u)
	if !dt.IsFloat() && alpha != math.Trunc(alpha) {
		return fmt.Errorf("tensor: sub_: for integral input tensors, argument alpha must not be a floating point number, got %v", alpha)
	}
	return t.binaryInPlace("sub_", device.Sub, u, dt, func(v *Tensor) *Tensor {
		if alpha != 1 {
			return v.MulScalar(alpha)
		}
		return v
	})
}

// SubScalarInPlace subtracts alpha·s from t in place, t.sub_(s,
// alpha=alpha) with a number: s takes t's type (a fractional s cannot
// reach an integer tensor).
func (t *Tensor) SubScalarInPlace(s, alpha float64) error {
	if _, bad := check("sub_", t); bad != nil {
		return bad.err
	}
	if t.dt == Bool {
		return fmt.Errorf("tensor: sub_: subtraction, the `-` operator, with a bool tensor is not supported; to invert a mask, use logical_not")
	}
	if !t.dt.IsFloat() && (s != math.Trunc(s) || alpha != math.Trunc(alpha)) {
		if alpha != math.Trunc(alpha) {
			return fmt.Errorf("tensor: sub_: for integral input tensors, argument alpha must not be a floating point number, got %v", alpha)
		}
		return castError("sub_", Float32, t.dt)
	}
	v := t.rt.Scalar(t.dt, s)
	defer v.Release()
	return t.SubInPlace(v, alpha)
}

// DivInPlace divides t by u in place, t.div_(u) (true division): u
// broadcasts to t's shape; the quotient is floating point, so t must be.
func (t *Tensor) DivInPlace(u *Tensor) error {
	if _, bad := check("div_", t, u); bad != nil {
		return bad.err
	}
	dt := ResultType(t, u)
	if !dt.IsFloat() {
		dt = Float32
	}
	return t.binaryInPlace("div_", device.Div, u, dt, nil)
}

// binaryInPlace writes t op prep(u) into t, computed in dt. When t, u and
// dt share a type the device runs natively, one kernel writes t directly;
// otherwise the result is computed out of place and copied in.
func (t *Tensor) binaryInPlace(op string, kind device.BinaryOp, u *Tensor, dt DType, prep func(*Tensor) *Tensor) error {
	if !castable(dt, t.dt) {
		return castError(op, dt, t.dt)
	}
	if shape, ok := broadcastShapes(t.shape, u.shape); !ok || !slices.Equal(shape, t.shape) {
		if !ok {
			return fmt.Errorf("tensor: %s: shapes %v and %v cannot be broadcast together", op, t.shape, u.shape)
		}
		return fmt.Errorf("tensor: %s: output with shape %v doesn't match the broadcast shape %v", op, t.shape, shape)
	}
	if err := t.checkInPlaceOperands(op, u); err != nil {
		return err
	}
	if prep == nil {
		prep = func(v *Tensor) *Tensor { return v }
	}
	sc := t.rt.OpenScope()
	defer sc.Close()
	var err error
	t.rt.NoGrad(func() {
		if dt != t.dt || u.dt != dt || !(dt.IsFloat() || dt == Int64) {
			r := binaryOp(op, kind, t.To(dt), prep(u.To(dt)))
			if err = r.Err(); err == nil {
				err = t.CopyFrom(r)
			}
			return
		}
		v := prep(u)
		if v.st == t.st && !SameMemory(v, t) {
			v = v.Clone() // u overlaps t partially: read it before writing
		}
		if err = v.Err(); err != nil {
			return
		}
		vv, _ := broadcastView(v, t.shape)
		t.st.version.Add(1)
		if err = kernel(func() error { return t.rt.dev.Binary(kind, t.view(), t.view(), vv) }); err != nil {
			err = fmt.Errorf("tensor: %s: %w", op, err)
		}
	})
	return err
}

// Norm is the p-norm of t over dims (every dimension when dims is empty),
// torch.norm(t, p, dim, keepdim) with a number p: (Σ|x|ᵖ)^(1/p); +Inf is
// the largest |x|, -Inf the smallest, 0 the count of nonzero elements. A
// norm over no elements is 0. Half-precision inputs are reduced in float32
// and the result rounded back, as PyTorch accumulates them. The gradient
// is PyTorch 1.13's norm_backward: 0 where the norm is 0 (p >= 1),
// sign(x) for p = 1, and for ±Inf shared evenly by the elements equal to
// the norm; p = 0 gives no gradient.
func (t *Tensor) Norm(p float64, dims []int, keepDim bool) *Tensor {
	rt, bad := check("norm", t)
	if bad != nil {
		return bad
	}
	if !t.dt.IsFloat() {
		return rt.fail("norm", "input dtype should be either floating point or complex. Got %v instead", t.dt)
	}
	_, keep, final, bad := t.reduceDims("norm", dims, keepDim)
	if bad != nil {
		return bad
	}
	return composed(rt, func() *Tensor {
		var y *Tensor
		rt.NoGrad(func() {
			x := t
			if t.dt == BFloat16 || t.dt == Float16 {
				x = t.To(Float32)
			}
			switch {
			case t.Numel() == 0:
				y = rt.Zeros(x.dt, final...)
			case p == 0:
				y = x.NeScalar(0).To(x.dt).Sum(dims, keepDim)
			case p == 1:
				y = x.Abs().Sum(dims, keepDim)
			case p == 2:
				y = x.Square().Sum(dims, keepDim).Sqrt()
			case math.IsInf(p, 1):
				y = x.Abs().reduce("norm", device.Max, dims, keepDim)
			case math.IsInf(p, -1):
				y = x.Abs().reduce("norm", device.Min, dims, keepDim)
			default:
				y = x.Abs().PowScalar(p).Sum(dims, keepDim).PowScalar(1 / p)
			}
			y = y.To(t.dt)
		})
		if y.err != nil {
			return y
		}
		if n := y.record("NormBackward1", t); n != nil {
			x, saved := n.save(t), n.save(y)
			n.backward = func(g *Tensor) []*Tensor {
				norm := saved
				if !keepDim {
					g, norm = g.Reshape(keep...), saved.Reshape(keep...)
				}
				return []*Tensor{normBackward(g, x, norm, p, dims)}
			}
		}
		return y
	})
}

// normBackward is PyTorch 1.13's norm_backward for a real input x, its
// norm y and the output gradient g (both with the reduced dims kept).
func normBackward(g, x, y *Tensor, p float64, dims []int) *Tensor {
	switch {
	case p == 0:
		return nil
	case p == 1:
		return sgn(x).Mul(g)
	case p == 2:
		return g.Mul(x.Div(y).MaskedFill(y.EqScalar(0), 0))
	case math.IsInf(p, 0):
		// The elements equal to the norm share its gradient; a NaN
		// element is one of them (and gets 0, as sgn(NaN) is 0).
		a := x.Abs()
		mask := a.Eq(y).LogicalOr(a.Ne(a)).To(x.dt)
		return sgn(x).Mul(g.Div(mask.Sum(dims, true)).Mul(mask))
	case p < 1:
		scaled := sgn(x).Mul(x.Abs().PowScalar(p-1).MaskedFill(x.EqScalar(0), 0))
		return scaled.Mul(g).Mul(y.PowScalar(1 - p))
	case p < 2:
		scaled := sgn(x).Mul(x.Abs().PowScalar(p - 1))
		return scaled.Mul(g.Div(y.PowScalar(p-1)).MaskedFill(y.EqScalar(0), 0))
	}
	scaled := x.Mul(x.Abs().PowScalar(p - 2))
	return scaled.Mul(g.Div(y.PowScalar(p-1)).MaskedFill(y.EqScalar(0), 0))
}

// FrobeniusNorm is torch.norm(t, 'fro', dim, keepdim) in PyTorch 1.13: the
// 2-norm (Norm) over no dims (all of them) or one; over two it is computed
// as sqrt(sum(x·x)), whose gradient is NaN where that norm is 0, as
// PyTorch's frobenius_norm is. More than two dims is an error.
func (t *Tensor) FrobeniusNorm(dims []int, keepDim bool) *Tensor {
	rt, bad := check("norm", t)
	if bad != nil {
		return bad
	}
	switch {
	case len(dims) > 2:
		return rt.fail("norm", "the Frobenius norm expects at most 2 dimensions, but got %d dimensions instead", len(dims))
	case len(dims) < 2:
		return t.Norm(2, dims, keepDim)
	case !t.dt.IsFloat():
		return rt.fail("norm", "input dtype should be either floating point or complex. Got %v instead", t.dt)
	}
	a, _ := normDim(dims[0], max(1, len(t.shape)))
	b, _ := normDim(dims[1], max(1, len(t.shape)))
	if a == b {
		return rt.fail("norm", "expected dims to be different, got %v instead", dims)
	}
	if _, _, _, bad := t.reduceDims("norm", dims, keepDim); bad != nil {
		return bad
	}
	return composed(rt, func() *Tensor { return t.Mul(t).Sum(dims, keepDim).Sqrt() })
}

// ownCopy returns r, or a copy of it when it shares t's memory: ops that
// PyTorch defines as returning new tensors (repeat, flip) must not return a
// view, even where the composition reduces to one.
func ownCopy(t, r *Tensor) *Tensor {
	if r.err == nil && r.st == t.st {
		return r.Clone()
	}
	return r
}

// Repeat tiles t: sizes[i] copies along dimension i, with t's shape padded
// in front with ones to len(sizes) dimensions (Tensor.repeat). It is a
// broadcast followed by one copy; the gradient sums the copies.
func (t *Tensor) Repeat(sizes ...int) *Tensor {
	rt, bad := check("repeat", t)
	if bad != nil {
		return bad
	}
	if len(sizes) < len(t.shape) {
		return rt.fail("repeat", "number of dimensions of repeat dims (%d) can not be smaller than number of dimensions of tensor (%d)", len(sizes), len(t.shape))
	}
	padded := slices.Concat(slices.Repeat([]int{1}, len(sizes)-len(t.shape)), t.shape)
	split := make([]int, 0, 2*len(sizes))
	expanded := make([]int, 0, 2*len(sizes))
	final := make([]int, len(sizes))
	for i, s := range sizes {
		if s < 0 {
			return rt.fail("repeat", "trying to create tensor with negative dimension %d: %v", s, sizes)
		}
		split = append(split, 1, padded[i])
		expanded = append(expanded, s, padded[i])
		final[i] = s * padded[i]
	}
	return composed(rt, func() *Tensor {
		return ownCopy(t, t.Reshape(split...).Expand(expanded...).Reshape(final...))
	})
}

// RepeatInterleave repeats each slice of dimension dim repeats times in
// place (Tensor.repeat_interleave(repeats, dim)): [a, b] gives [a, a, b, b]
// for 2.
func (t *Tensor) RepeatInterleave(repeats, dim int) *Tensor {
	rt, bad := check("repeat_interleave", t)
	if bad != nil {
		return bad
	}
	if repeats < 0 {
		return rt.fail("repeat_interleave", "repeats can not be negative, got %d", repeats)
	}
	if len(t.shape) == 0 {
		return rt.fail("repeat_interleave", "dimension specified as %d but tensor has no dimensions", dim)
	}
	d, ok := normDim(dim, len(t.shape))
	if !ok {
		return rt.fail("repeat_interleave", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
	}
	expanded := slices.Insert(slices.Clone(t.shape), d+1, repeats)
	final := slices.Clone(t.shape)
	final[d] *= repeats
	return composed(rt, func() *Tensor {
		return ownCopy(t, t.Unsqueeze(d+1).Expand(expanded...).Reshape(final...))
	})
}

// RepeatInterleaveTensor repeats slice i of dimension dim repeats[i]
// times (repeat_interleave with a tensor of repeats: an integer tensor of
// one element, or of one per slice). The repeats are read on the host (the
// result's shape depends on them, as in PyTorch, which syncs too); the
// result is one index_select, whose gradient adds each copy back.
func (t *Tensor) RepeatInterleaveTensor(repeats *Tensor, dim int) *Tensor {
	rt, bad := check("repeat_interleave", t, repeats)
	if bad != nil {
		return bad
	}
	if repeats.dt.IsFloat() || repeats.dt == Bool || len(repeats.shape) > 1 {
		return rt.fail("repeat_interleave", "repeats must be a 0-d or 1-d integer tensor, got %v of shape %v", repeats.dt, repeats.shape)
	}
	if len(t.shape) == 0 {
		return rt.fail("repeat_interleave", "dimension specified as %d but tensor has no dimensions", dim)
	}
	d, ok := normDim(dim, len(t.shape))
	if !ok {
		return rt.fail("repeat_interleave", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
	}
	counts, err := repeats.Float64s()
	if err != nil {
		return rt.failErr("repeat_interleave", err)
	}
	n := t.shape[d]
	switch {
	case len(counts) == 1 && n != 1:
		return t.RepeatInterleave(int(counts[0]), d)
	case len(counts) != n:
		return rt.fail("repeat_interleave", "repeats must have the same size as input along dim %d, but got repeats.size(0) = %d and input.size(%d) = %d", d, len(counts), d, n)
	}
	var index []int64
	for i, c := range counts {
		if c < 0 {
			return rt.fail("repeat_interleave", "repeats can not be negative")
		}
		for range int(c) {
			index = append(index, int64(i))
		}
	}
	return composed(rt, func() *Tensor { return t.IndexSelect(d, rt.FromInt64s(index, len(index))) })
}

// RepeatInterleaveFlat is repeat_interleave without a dim: t flattened,
// each element repeated.
func (t *Tensor) RepeatInterleaveFlat(repeats int) *Tensor {
	if _, bad := check("repeat_interleave", t); bad != nil {
		return bad
	}
	return composed(t.rt, func() *Tensor { return t.Reshape(-1).RepeatInterleave(repeats, 0) })
}

// Flip reverses the order of elements along each of dims (torch.flip),
// into a new tensor. Each flipped dimension is one index_select copy; the
// gradient is the flipped gradient.
func (t *Tensor) Flip(dims ...int) *Tensor {
	rt, bad := check("flip", t)
	if bad != nil {
		return bad
	}
	nd := len(t.shape)
	seen := make([]bool, max(1, nd))
	for _, dim := range dims {
		d, ok := normDim(dim, max(1, nd))
		if !ok {
			return rt.fail("flip", "dimension %d out of range for a %d-dimensional tensor", dim, nd)
		}
		if seen[d] {
			return rt.fail("flip", "dim %d appears multiple times in the list of dims", d)
		}
		seen[d] = true
	}
	return composed(rt, func() *Tensor {
		out := t
		for d := 0; d < nd; d++ {
			if n := t.shape[d]; seen[d] && n > 1 {
				out = out.IndexSelect(d, rt.Arange(Int64, float64(n-1), -1, -1))
			}
		}
		if out == t {
			out = t.Clone()
		}
		return out
	})
}

// Unbind returns the slices of t along dim, each without that dimension
// (torch.unbind); they are views of t. A failure is the only element.
func (t *Tensor) Unbind(dim int) []*Tensor {
	if _, bad := check("unbind", t); bad != nil {
		return []*Tensor{bad}
	}
	if len(t.shape) == 0 {
		return []*Tensor{t.rt.fail("unbind", "dimension specified as %d but tensor has no dimensions", dim)}
	}
	d, ok := normDim(dim, len(t.shape))
	if !ok {
		return []*Tensor{t.rt.fail("unbind", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))}
	}
	out := make([]*Tensor, t.shape[d])
	for i := range out {
		out[i] = t.Select(d, i)
	}
	return out
}

// All reports, over dims (every dimension when dims is empty), whether
// every element is nonzero (torch.all): bool, or uint8 for a uint8 tensor
// as in PyTorch 1.13. NaN is nonzero; over no elements the answer is true.
func (t *Tensor) All(dims []int, keepDim bool) *Tensor { return t.allAny("all", dims, keepDim) }

// Any reports whether some element is nonzero (torch.any); over no
// elements the answer is false.
func (t *Tensor) Any(dims []int, keepDim bool) *Tensor { return t.allAny("any", dims, keepDim) }

func (t *Tensor) allAny(op string, dims []int, keepDim bool) *Tensor {
	rt, bad := check(op, t)
	if bad != nil {
		return bad
	}
	if _, _, _, bad := t.reduceDims(op, dims, keepDim); bad != nil {
		return bad
	}
	return composed(rt, func() *Tensor {
		var out *Tensor
		if op == "all" { // no zero among them
			out = t.EqScalar(0).Sum(dims, keepDim).EqScalar(0)
		} else {
			out = t.NeScalar(0).Sum(dims, keepDim).GtScalar(0)
		}
		if t.dt == Uint8 {
			out = out.To(Uint8)
		}
		return out
	})
}

// Eye returns the n×m identity matrix of type dt (torch.eye(n, m)).
func (rt *Runtime) Eye(dt DType, n, m int) *Tensor {
	switch {
	case n < 0:
		return rt.fail("eye", "n must be greater or equal to 0, got %d", n)
	case m < 0:
		return rt.fail("eye", "m must be greater or equal to 0, got %d", m)
	case !dt.Valid():
		return rt.fail("eye", "invalid dtype %v", dt)
	}
	return composed(rt, func() *Tensor {
		rows := rt.Arange(Int64, 0, float64(n), 1).Unsqueeze(1)
		cols := rt.Arange(Int64, 0, float64(m), 1).Unsqueeze(0)
		eq := rows.Eq(cols)
		if dt == Bool {
			return eq
		}
		return eq.To(dt)
	})
}

// Linspace returns steps values from start to end, evenly spaced
// (torch.linspace), bit for bit as PyTorch 1.13's CPU kernel computes
// them with AVX2 on one thread: step = (end-start)/(steps-1) in the
// element type (in float64 for integer types); the first half counts up
// from start and the second down from end, each value start + i·step
// rounded once (a fused multiply-add). In runs of two vectors (32 bytes
// each), only the first element of each vector is computed so; the others
// add k·step to it (k < the vector's width). Integer types truncate.
// start and end must fit dt, as PyTorch's conversion of its arguments
// demands.
func (rt *Runtime) Linspace(dt DType, start, end float64, steps int) *Tensor {
	if steps < 0 {
		return rt.fail("linspace", "number of steps must be non-negative, got %d", steps)
	}
	if dt == Bool || !dt.Valid() {
		return rt.fail("linspace", "not implemented for dtype %v", dt)
	}
	if _, err := checkedNumel([]int{steps}, Float64); err != nil {
		return rt.failErr("linspace", err)
	}
	s, err := scalarFor("linspace", "start", dt, start)
	if err != nil {
		return errTensor(rt, err)
	}
	e, err := scalarFor("linspace", "end", dt, end)
	if err != nil {
		return errTensor(rt, err)
	}
	var vals []float64
	switch {
	case steps == 1:
		vals = []float64{s} // filled with start, as linspace_out does
	case steps > 1:
		vals = linspaceValues(dt, s, e, steps)
	}
	return rt.fromFloat64s(dt, vals, []int{steps})
}

// linspaceValues runs linspace_kernel for steps >= 2 on start and end
// already converted to dt.
func linspaceValues(dt DType, start, end float64, steps int) []float64 {
	var width int // elements in one 32-byte vector
	var scalar func(i int) float64
	var lane func(base float64, k int) float64
	n := steps - 1 // the divisor, and steps-1-i counts down from it
	switch dt {
	case Float32:
		s, e := float32(start), float32(end)
		step := float32(float32(e-s) / float32(n))
		scalar = func(i int) float64 {
			if i < steps/2 {
				return float64(fma32(step, float32(i), s))
			}
			return float64(fma32(-step, float32(n-i), e))
		}
		lane = func(base float64, k int) float64 { return float64(float32(base) + float32(float32(k)*step)) }
		width = 8
	case Float64:
		step := (end - start) / float64(n)
		scalar = func(i int) float64 {
			if i < steps/2 {
				return math.FMA(step, float64(i), start)
			}
			return math.FMA(-step, float64(n-i), end)
		}
		lane = func(base float64, k int) float64 { return base + float64(float64(k)*step) }
		width = 4
	case BFloat16, Float16:
		// c10's 16-bit floats compute each operation in float32 and round
		// the result, integers included: nothing is fused.
		r := func(x float32) float32 { return dtype.F16FromFloat32(x).Float32() }
		if dt == BFloat16 {
			r = func(x float32) float32 { return dtype.BF16FromFloat32(x).Float32() }
		}
		s, e := r(float32(start)), r(float32(end))
		step := r(r(e-s) / r(float32(n)))
		scalar = func(i int) float64 {
			if i < steps/2 {
				return float64(r(s + r(step*r(float32(i)))))
			}
			return float64(r(e - r(step*r(float32(n-i)))))
		}
		lane = func(base float64, k int) float64 { return float64(r(float32(base) + r(r(float32(k))*step))) }
		width = 16
	default: // integers: a float64 step, truncated results
		step := (end - start) / float64(n)
		wrap := func(v float64) float64 { return math.Trunc(v) }
		width = 32 / dt.Size()
		if dt == Uint8 {
			wrap = func(v float64) float64 { return float64(uint8(int64(v))) }
		}
		scalar = func(i int) float64 {
			if i < steps/2 {
				return wrap(math.FMA(step, float64(i), start))
			}
			return wrap(math.FMA(-step, float64(n-i), end))
		}
		lane = func(base float64, k int) float64 { return wrap(base + float64(float64(k)*step)) }
	}
	out := make([]float64, steps)
	vectorized := steps / (2 * width) * (2 * width)
	for i := 0; i < vectorized; i += width {
		base := scalar(i)
		for k := 0; k < width; k++ {
			out[i+k] = lane(base, k)
		}
	}
	for i := vectorized; i < steps; i++ {
		out[i] = scalar(i)
	}
	return out
}

// fma32 is a·b + c rounded once to float32, as the FMA instruction that
// GCC contracts float32 a·b + c into.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b) // exact: 48 significant bits at most
	s := p + float64(c)
	// The float64 sum may itself be rounded; when it lands exactly halfway
	// between two float32 values, that rounding decides the tie, so use
	// the exact error of the sum to break it.
	bb := s - p
	errSum := (p - (s - bb)) + (float64(c) - bb)
	f := float32(s)
	if errSum != 0 && float64(f) != s {
		other := math.Nextafter32(f, float32(math.Copysign(math.Inf(1), s-float64(f))))
		if (float64(f)+float64(other))/2 == s { // a tie that is not one
			if (errSum > 0) == (other > f) {
				return other
			}
		}
	}
	return f
}
