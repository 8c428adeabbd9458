package tensor

import (
	"fmt"
	"math"
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
)

// promote is the result type of an arithmetic op on a and b, following
// torch.result_type for tensor operands: floats win over integers, wider
// floats over narrower, bfloat16 with float16 gives float32.
func promote(a, b DType) DType {
	if a == b {
		return a
	}
	rank := func(d DType) int {
		switch d {
		case Float64:
			return 7
		case Float32:
			return 6
		case BFloat16, Float16:
			return 5
		case Int64:
			return 4
		case Int32:
			return 3
		case Uint8:
			return 2
		}
		return 1 // Bool
	}
	if (a == BFloat16 && b == Float16) || (a == Float16 && b == BFloat16) {
		return Float32
	}
	if rank(a) >= rank(b) {
		return a
	}
	return b
}

// binaryOp applies op elementwise with broadcasting and type promotion.
func binaryOp(opName string, op device.BinaryOp, a, b *Tensor) *Tensor {
	rt, bad := check(opName, a, b)
	if bad != nil {
		return bad
	}
	shape, ok := broadcastShapes(a.shape, b.shape)
	if !ok {
		return rt.fail(opName, "shapes %v and %v cannot be broadcast together", a.shape, b.shape)
	}
	// A 0-d operand counts as a number, as in PyTorch's result_type.
	dt := ResultType(a, b)
	if op == device.Div && !dt.IsFloat() { // true division, as torch.div
		dt = Float32
	}
	if !dt.IsFloat() && dt != Int64 {
		// Small integer and bool arithmetic runs on int64 kernels and
		// converts back, as the results fit.
		ca, cb := a.To(Int64), b.To(Int64)
		r := binaryOp(opName, op, ca, cb)
		out := r.To(dt)
		ca.Release()
		cb.Release()
		r.Release()
		return out
	}
	out, ca, cb := runBinary(rt, opName, op, a, b, dt, dt, shape)
	defer releaseConverted(a, ca)
	defer releaseConverted(b, cb)
	if out.err != nil || !dt.IsFloat() {
		return out
	}
	n := out.record(binaryBackwardName[op], a, b)
	if n == nil {
		return out
	}
	as, bs := a.shape, b.shape
	switch op {
	case device.Add:
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g.sumTo(as), g.sumTo(bs)} }
	case device.Sub:
		n.backward = func(g *Tensor) []*Tensor {
			var gb *Tensor
			if n.needs(1) {
				gb = g.Neg().sumTo(bs)
			}
			return []*Tensor{g.sumTo(as), gb}
		}
	case device.Mul:
		sa, sb := n.saveIf(1, ca), n.saveIf(0, cb)
		n.backward = func(g *Tensor) []*Tensor {
			var ga, gb *Tensor
			if n.needs(0) {
				ga = g.Mul(sb).sumTo(as)
			}
			if n.needs(1) {
				gb = g.Mul(sa).sumTo(bs)
			}
			return []*Tensor{ga, gb}
		}
	case device.Div:
		sa, sb := n.saveIf(1, ca), n.save(cb)
		n.backward = func(g *Tensor) []*Tensor {
			var ga, gb *Tensor
			if n.needs(0) {
				ga = g.Div(sb).sumTo(as)
			}
			if n.needs(1) { // −g·a/b²
				gb = g.Mul(sa).Div(sb.Mul(sb)).Neg().sumTo(bs)
			}
			return []*Tensor{ga, gb}
		}
	case device.Pow:
		sa, sb, so := n.save(ca), n.save(cb), n.saveIf(1, out)
		n.backward = func(g *Tensor) []*Tensor {
			var ga, gb *Tensor
			if n.needs(0) { // g·b·a^(b−1), 0 where b == 0 (PyTorch's pow_backward)
				ga = g.Mul(sb).Mul(sa.Pow(sb.SubScalar(1)))
				ga = Where(sb.EqScalar(0), ZerosLike(ga), ga).sumTo(as)
			}
			if n.needs(1) { // g·a^b·log(a), 0 where a == 0 and b >= 0
				gb = g.Mul(so).Mul(sa.Log())
				gb = Where(sa.EqScalar(0).LogicalAnd(sb.GeScalar(0)), ZerosLike(gb), gb).sumTo(bs)
			}
			return []*Tensor{ga, gb}
		}
	case device.Maximum, device.Minimum:
		sa, sb := n.save(ca), n.save(cb)
		n.backward = func(g *Tensor) []*Tensor {
			// The gradient goes to the larger (smaller) input; ties split
			// it evenly, as PyTorch's max/min backward.
			var pick, tie *Tensor
			if op == device.Maximum {
				pick = sa.Gt(sb)
			} else {
				pick = sa.Lt(sb)
			}
			tie = sa.Eq(sb)
			half := g.MulScalar(0.5)
			zero := ZerosLike(g)
			ga := Where(pick, g, Where(tie, half, zero))
			gb := g.Sub(ga)
			return []*Tensor{ga.sumTo(as), gb.sumTo(bs)}
		}
	}
	if a.dt != dt || b.dt != dt {
		n.castGrads(a, b)
	}
	return out
}

var binaryBackwardName = map[device.BinaryOp]string{
	device.Add: "AddBackward", device.Sub: "SubBackward", device.Mul: "MulBackward", device.Div: "DivBackward",
	device.Pow: "PowBackward", device.Maximum: "MaximumBackward", device.Minimum: "MinimumBackward",
}

// saveIf saves t only when input i needs a gradient (what it is used for).
func (n *node) saveIf(i int, t *Tensor) *Tensor {
	if !n.needs(i) {
		return nil
	}
	return n.save(t)
}

// Add returns t + u with broadcasting.
func (t *Tensor) Add(u *Tensor) *Tensor { return binaryOp("add", device.Add, t, u) }

// Sub returns t − u.
func (t *Tensor) Sub(u *Tensor) *Tensor { return binaryOp("sub", device.Sub, t, u) }

// Mul returns t · u elementwise.
func (t *Tensor) Mul(u *Tensor) *Tensor { return binaryOp("mul", device.Mul, t, u) }

// Div returns t / u (true division: integer inputs give float32).
func (t *Tensor) Div(u *Tensor) *Tensor { return binaryOp("div", device.Div, t, u) }

// Pow returns t raised to u elementwise.
func (t *Tensor) Pow(u *Tensor) *Tensor { return binaryOp("pow", device.Pow, t, u) }

// Maximum returns the elementwise maximum (NaN propagates).
func (t *Tensor) Maximum(u *Tensor) *Tensor { return binaryOp("maximum", device.Maximum, t, u) }

// Minimum returns the elementwise minimum (NaN propagates).
func (t *Tensor) Minimum(u *Tensor) *Tensor { return binaryOp("minimum", device.Minimum, t, u) }

func compare(opName string, op device.BinaryOp, a, b *Tensor) *Tensor {
	rt, bad := check(opName, a, b)
	if bad != nil {
		return bad
	}
	shape, ok := broadcastShapes(a.shape, b.shape)
	if !ok {
		return rt.fail(opName, "shapes %v and %v cannot be broadcast together", a.shape, b.shape)
	}
	dt := promote(a.dt, b.dt)
	if dt == BFloat16 || dt == Float16 {
		dt = Float32
	}
	out, ca, cb := runBinary(rt, opName, op, a, b, dt, Bool, shape)
	releaseConverted(a, ca)
	releaseConverted(b, cb)
	return out
}

// releaseConverted releases c when it is a conversion of t made for an op.
func releaseConverted(t, c *Tensor) {
	if c != t {
		c.Release()
	}
}

// runBinary converts a and b to dt, runs op into a new tensor of type outDT
// broadcast to shape, and returns it with the converted operands (for
// autograd to save), which the caller releases with releaseConverted.
func runBinary(rt *Runtime, opName string, op device.BinaryOp, a, b *Tensor, dt, outDT DType, shape []int) (out, ca, cb *Tensor) {
	ca, cb = a, b
	if a.dt != dt {
		ca = a.To(dt)
	}
	if b.dt != dt {
		cb = b.To(dt)
	}
	out, err := rt.empty(outDT, shape)
	if err != nil {
		return rt.failErr(opName, err), ca, cb
	}
	av, _ := broadcastView(ca, shape)
	bv, _ := broadcastView(cb, shape)
	if err := kernel(func() error { return rt.dev.Binary(op, out.view(), av, bv) }); err != nil {
		out.Release()
		return rt.failErr(opName, err), ca, cb
	}
	return out, ca, cb
}

// Eq, Ne, Lt, Le, Gt, Ge compare elementwise and return bool tensors.
func (t *Tensor) Eq(u *Tensor) *Tensor { return compare("eq", device.Eq, t, u) }
func (t *Tensor) Ne(u *Tensor) *Tensor { return compare("ne", device.Ne, t, u) }
func (t *Tensor) Lt(u *Tensor) *Tensor { return compare("lt", device.Lt, t, u) }
func (t *Tensor) Le(u *Tensor) *Tensor { return compare("le", device.Le, t, u) }
func (t *Tensor) Gt(u *Tensor) *Tensor { return compare("gt", device.Gt, t, u) }
func (t *Tensor) Ge(u *Tensor) *Tensor { return compare("ge", device.Ge, t, u) }

// scalarLike is a 0-d tensor holding s, typed to combine with t without
// changing t's type (a Python scalar does not promote a tensor in PyTorch,
// except a float scalar with an integer tensor).
func (t *Tensor) scalarLike(s float64) *Tensor {
	dt := t.dt
	if !dt.IsFloat() && s != math.Trunc(s) {
		dt = Float32
	}
	if dt == Bool {
		dt = Int64
	}
	return t.rt.Scalar(dt, s)
}

func compareScalar(opName string, op device.BinaryOp, t *Tensor, s float64) *Tensor {
	if _, bad := check(opName, t); bad != nil {
		return bad
	}
	st := t.rt.Scalar(Float64, s)
	if t.dt.IsFloat() || s != math.Trunc(s) {
		st = st.To(promote(t.dt, Float32))
	} else {
		st = st.To(t.dt)
	}
	out := compare(opName, op, t, st)
	st.Release()
	return out
}

// EqScalar, NeScalar, LtScalar, LeScalar, GtScalar, GeScalar compare with a
// number.
func (t *Tensor) EqScalar(s float64) *Tensor { return compareScalar("eq", device.Eq, t, s) }
func (t *Tensor) NeScalar(s float64) *Tensor { return compareScalar("ne", device.Ne, t, s) }
func (t *Tensor) LtScalar(s float64) *Tensor { return compareScalar("lt", device.Lt, t, s) }
func (t *Tensor) LeScalar(s float64) *Tensor { return compareScalar("le", device.Le, t, s) }
func (t *Tensor) GtScalar(s float64) *Tensor { return compareScalar("gt", device.Gt, t, s) }
func (t *Tensor) GeScalar(s float64) *Tensor { return compareScalar("ge", device.Ge, t, s) }

// LogicalAnd, LogicalOr and LogicalNot combine bool (or nonzero) tensors.
func (t *Tensor) LogicalAnd(u *Tensor) *Tensor {
	return logical("logical_and", t, u, device.Gt)
}
func (t *Tensor) LogicalOr(u *Tensor) *Tensor {
	return logical("logical_or", t, u, device.Ge)
}
func (t *Tensor) LogicalNot() *Tensor {
	if _, bad := check("logical_not", t); bad != nil {
		return bad
	}
	return t.EqScalar(0)
}

// logical is and (op Gt) or or (op Ge) of the truth values of a and b, as
// one comparison of bytes: with p = (a != 0) and q = (b == 0), each 0 or 1,
// a and b is p > q, a or b is p >= q. (Through int64 copies and a product
// it took six passes, 27 ms of clamp's backward on 800K elements.)
func logical(opName string, a, b *Tensor, op device.BinaryOp) *Tensor {
	if _, bad := check(opName, a, b); bad != nil {
		return bad
	}
	p, q := a.NeScalar(0), b.EqScalar(0)
	out := compare(opName, op, p, q)
	p.Release()
	q.Release()
	return out
}

// unary applies a device unary op; grad, when not nil, maps (g, x, y) to the
// input gradient, where x is the input and y the output (either may be
// unsaved: pass saveX/saveY).
func unary(opName string, op device.UnaryOp, t *Tensor, s float64, floatOnly bool,
	saveX, saveY bool, grad func(g, x, y *Tensor) *Tensor) *Tensor {
	rt, bad := check(opName, t)
	if bad != nil {
		return bad
	}
	src := t
	if floatOnly && !t.dt.IsFloat() {
		src = t.To(Float32)
		defer src.Release()
	}
	out, err := rt.empty(src.dt, src.shape)
	if err != nil {
		return rt.failErr(opName, err)
	}
	if err := kernel(func() error { return rt.dev.Unary(op, out.view(), src.view(), s) }); err != nil {
		out.Release()
		return rt.failErr(opName, err)
	}
	if grad == nil || !src.dt.IsFloat() {
		return out
	}
	if n := out.record(opName, t); n != nil {
		var x, y *Tensor
		if saveX {
			x = n.save(src)
		}
		if saveY {
			y = n.save(out)
		}
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{grad(g, x, y)} }
	}
	return out
}

// activation applies op whose backward is a fused device kernel on the
// saved input (or output, for relu, tanh and sigmoid).
func activation(opName string, op device.UnaryOp, back device.ActivationOp, onOutput bool, t *Tensor) *Tensor {
	return unary(opName, op, t, 0, true, !onOutput, onOutput, func(g, x, y *Tensor) *Tensor {
		saved := x
		if onOutput {
			saved = y
		}
		return activationBackward(back, g, saved)
	})
}

func activationBackward(op device.ActivationOp, g, saved *Tensor) *Tensor {
	rt, bad := check("activation_backward", g, saved)
	if bad != nil {
		return bad
	}
	dx, err := rt.empty(saved.dt, saved.shape)
	if err != nil {
		return rt.failErr("activation_backward", err)
	}
	if err := kernel(func() error { return rt.dev.ActivationBackward(op, dx.view(), g.view(), saved.view()) }); err != nil {
		dx.Release()
		return rt.failErr("activation_backward", err)
	}
	return dx
}

// Neg returns −t.
func (t *Tensor) Neg() *Tensor {
	return unary("neg", device.Neg, t, 0, false, false, false, func(g, _, _ *Tensor) *Tensor { return g.Neg() })
}

// Exp returns eᵗ.
func (t *Tensor) Exp() *Tensor {
	return unary("exp", device.Exp, t, 0, true, false, true, func(g, _, y *Tensor) *Tensor { return g.Mul(y) })
}

// Log returns the natural logarithm.
func (t *Tensor) Log() *Tensor {
	return unary("log", device.Log, t, 0, true, true, false, func(g, x, _ *Tensor) *Tensor { return g.Div(x) })
}

// Sqrt returns √t.
func (t *Tensor) Sqrt() *Tensor {
	return unary("sqrt", device.Sqrt, t, 0, true, false, true, func(g, _, y *Tensor) *Tensor {
		return g.Div(y.MulScalar(2))
	})
}

// Rsqrt returns 1/√t.
func (t *Tensor) Rsqrt() *Tensor {
	return unary("rsqrt", device.Rsqrt, t, 0, true, false, true, func(g, _, y *Tensor) *Tensor {
		return g.Mul(y.PowScalar(3)).MulScalar(-0.5)
	})
}

// Abs returns |t|.
func (t *Tensor) Abs() *Tensor {
	return unary("abs", device.Abs, t, 0, false, true, false, func(g, x, _ *Tensor) *Tensor { return g.Mul(x.Sign()) })
}

// Sign returns −1, 0 or 1 (not differentiable: its gradient is zero).
func (t *Tensor) Sign() *Tensor {
	return unary("sign", device.Sign, t, 0, false, false, false, func(g, _, _ *Tensor) *Tensor { return ZerosLike(g) })
}

// Square returns t².
func (t *Tensor) Square() *Tensor {
	return unary("square", device.Square, t, 0, false, true, false, func(g, x, _ *Tensor) *Tensor {
		return g.Mul(x).MulScalar(2)
	})
}

// Reciprocal returns 1/t.
func (t *Tensor) Reciprocal() *Tensor {
	return unary("reciprocal", device.Reciprocal, t, 0, true, false, true, func(g, _, y *Tensor) *Tensor {
		return g.Mul(y.Square()).Neg()
	})
}

// Relu returns max(t, 0).
func (t *Tensor) Relu() *Tensor {
	return activation("relu", device.Relu, device.ReluBackward, true, t)
}

// Gelu returns the GELU of t: approximate "none" (the erf form) or "tanh",
// as torch.nn.functional.gelu.
func (t *Tensor) Gelu(approximate string) *Tensor {
	switch approximate {
	case "", "none":
		return activation("gelu", device.Gelu, device.GeluBackward, false, t)
	case "tanh":
		return activation("gelu", device.GeluTanh, device.GeluTanhBackward, false, t)
	}
	if t.err != nil {
		return t
	}
	return t.rt.fail("gelu", "approximate must be \"none\" or \"tanh\", not %q", approximate)
}

// Silu returns t·σ(t).
func (t *Tensor) Silu() *Tensor {
	return activation("silu", device.Silu, device.SiluBackward, false, t)
}

// Tanh returns tanh(t).
func (t *Tensor) Tanh() *Tensor {
	return activation("tanh", device.Tanh, device.TanhBackward, true, t)
}

// Sigmoid returns 1/(1+e⁻ᵗ).
func (t *Tensor) Sigmoid() *Tensor {
	return activation("sigmoid", device.Sigmoid, device.SigmoidBackward, true, t)
}

// AddScalar returns t + s.
func (t *Tensor) AddScalar(s float64) *Tensor {
	if t.err == nil && !t.dt.IsFloat() && s != math.Trunc(s) {
		return t.Add(t.scalarLike(s))
	}
	return unary("add", device.AddScalar, t, s, false, false, false, func(g, _, _ *Tensor) *Tensor { return g })
}

// SubScalar returns t − s.
func (t *Tensor) SubScalar(s float64) *Tensor { return t.AddScalar(-s) }

// RSubScalar returns s − t.
func (t *Tensor) RSubScalar(s float64) *Tensor {
	if t.err == nil && !t.dt.IsFloat() && s != math.Trunc(s) {
		return t.scalarLike(s).Sub(t)
	}
	return unary("rsub", device.RSubScalar, t, s, false, false, false, func(g, _, _ *Tensor) *Tensor { return g.Neg() })
}

// MulScalar returns t · s.
func (t *Tensor) MulScalar(s float64) *Tensor {
	if t.err == nil && !t.dt.IsFloat() && s != math.Trunc(s) {
		return t.Mul(t.scalarLike(s))
	}
	return unary("mul", device.MulScalar, t, s, false, false, false, func(g, _, _ *Tensor) *Tensor { return g.MulScalar(s) })
}

// DivScalar returns t / s (true division), as PyTorch 1.13's CPU kernel
// divides by a Python number: each element divided by s rounded to t's
// dtype (float32, float64), or, for bfloat16 and float16, in float32 by s
// in float32, then rounded. A multiplication by the reciprocal would
// differ in the last bit for most divisors that are not powers of two.
func (t *Tensor) DivScalar(s float64) *Tensor {
	if t.err != nil {
		return t
	}
	switch t.dt {
	case Float32, Float64:
		return t.Div(t.rt.Scalar(t.dt, s))
	case BFloat16, Float16:
		if s == 0 || math.Abs(s) == math.Exp2(math.Round(math.Log2(math.Abs(s)))) {
			return t.MulScalar(1 / s) // a power of two: exact either way
		}
		wide := t.To(Float32)
		defer wide.Release()
		q := wide.Div(t.rt.Scalar(Float32, s))
		defer q.Release()
		return q.To(t.dt)
	}
	return t.Div(t.rt.Scalar(Float32, s))
}

// RDivScalar returns s / t.
func (t *Tensor) RDivScalar(s float64) *Tensor {
	return unary("rdiv", device.RDivScalar, t, s, true, false, true, func(g, _, y *Tensor) *Tensor {
		// d(s/x)/dx = −s/x² = −y²/s
		return g.Mul(y.Square()).MulScalar(-1 / s)
	})
}

// PowScalar returns tˢ.
func (t *Tensor) PowScalar(s float64) *Tensor {
	if t.err == nil && !t.dt.IsFloat() && (s != math.Trunc(s) || s < 0) {
		c := t.To(Float32)
		defer c.Release()
		return c.PowScalar(s)
	}
	return unary("pow", device.PowScalar, t, s, false, true, false, func(g, x, _ *Tensor) *Tensor {
		if s == 0 {
			return ZerosLike(g)
		}
		return g.Mul(x.PowScalar(s - 1)).MulScalar(s)
	})
}

// Where selects a where cond is true and b elsewhere (torch.where), with
// broadcasting; differentiable in a and b.
func Where(cond, a, b *Tensor) *Tensor {
	rt, bad := check("where", cond, a, b)
	if bad != nil {
		return bad
	}
	if cond.dt != Bool {
		return rt.fail("where", "the condition must be a bool tensor, not %v", cond.dt)
	}
	shape, ok := broadcastShapes(a.shape, b.shape)
	if ok {
		shape, ok = broadcastShapes(shape, cond.shape)
	}
	if !ok {
		return rt.fail("where", "shapes %v, %v and %v cannot be broadcast together", cond.shape, a.shape, b.shape)
	}
	dt := ResultType(a, b)
	ca, cb := a, b
	if a.dt != dt {
		ca = a.To(dt)
		defer ca.Release()
	}
	if b.dt != dt {
		cb = b.To(dt)
		defer cb.Release()
	}
	out, err := rt.empty(dt, shape)
	if err != nil {
		return rt.failErr("where", err)
	}
	cv, _ := broadcastView(cond, shape)
	av, _ := broadcastView(ca, shape)
	bv, _ := broadcastView(cb, shape)
	if err := kernel(func() error { return rt.dev.Where(out.view(), cv, av, bv) }); err != nil {
		out.Release()
		return rt.failErr("where", err)
	}
	if n := out.record("WhereBackward", a, b); n != nil {
		c := n.save(cond)
		as, bs := a.shape, b.shape
		n.backward = func(g *Tensor) []*Tensor {
			zero := ZerosLike(g)
			var ga, gb *Tensor
			if n.needs(0) {
				ga = Where(c, g, zero).sumTo(as)
			}
			if n.needs(1) {
				gb = Where(c, zero, g).sumTo(bs)
			}
			return []*Tensor{ga, gb}
		}
		if a.dt != dt || b.dt != dt {
			n.castGrads(a, b)
		}
	}
	return out
}

// MaskedFill returns t with value where mask is true (Tensor.masked_fill);
// the gradient is zero at the filled places.
func (t *Tensor) MaskedFill(mask *Tensor, value float64) *Tensor {
	if _, bad := check("masked_fill", t, mask); bad != nil {
		return bad
	}
	v := t.rt.Scalar(t.dt, value)
	out := Where(mask, v, t)
	v.Release()
	if out.err == nil && !slices.Equal(out.shape, t.shape) {
		out.Release()
		return t.rt.fail("masked_fill", "mask of shape %v does not broadcast to the tensor's shape %v", mask.shape, t.shape)
	}
	return out
}

// sumTo reduces a broadcast gradient back to shape (the inverse of
// broadcasting: sum over added leading dimensions and over dimensions that
// were 1).
func (g *Tensor) sumTo(shape []int) *Tensor {
	if g.err != nil || slices.Equal(g.shape, shape) {
		return g
	}
	lead := len(g.shape) - len(shape)
	var dims []int
	for i := range g.shape {
		if i < lead || (shape[i-lead] == 1 && g.shape[i] != 1) {
			dims = append(dims, i)
		}
	}
	s := g.Sum(dims, true)
	if lead > 0 || !slices.Equal(s.shape, shape) {
		s = s.Reshape(shape...)
	}
	return s
}

// addInPlace adds g (broadcastable) into t without recording (gradient
// accumulation and optimizer code).
func (t *Tensor) addInPlace(g *Tensor) error {
	if _, bad := check("add_", t, g); bad != nil {
		return bad.err
	}
	src := g
	if g.dt != t.dt {
		src = g.To(t.dt)
		defer src.Release()
	}
	gv, err := broadcastView(src, t.shape)
	if err != nil {
		return fmt.Errorf("tensor: add_: %w", err)
	}
	t.st.version.Add(1)
	return kernel(func() error { return t.rt.dev.Binary(device.Add, t.view(), t.view(), gv) })
}

// AddInPlace adds u (broadcast to t's shape) into t, as t.add_(u). It is not
// recorded by autograd.
func (t *Tensor) AddInPlace(u *Tensor) error {
	if _, bad := check("add_", t, u); bad != nil {
		return bad.err
	}
	if err := t.checkInPlace("add_"); err != nil {
		return err
	}
	if dt := ResultType(t, u); !castable(dt, t.dt) { // a float into an integer tensor: PyTorch's error
		return castError("add_", dt, t.dt)
	}
	return t.addInPlace(u)
}

// MulScalarInPlace multiplies t by s in place, as t.mul_(s).
// DivScalarInPlace divides t by s in place, with DivScalar's rounding
// (PyTorch's t.div_(s)).
func (t *Tensor) DivScalarInPlace(s float64) error {
	if lz, off, ok := t.lazyRange(); ok && t.dt.IsFloat() {
		return t.recordStep("div_", lz, lazyStep{kind: lazyDiv, off: off, value: s})
	}
	if _, bad := check("div_", t); bad != nil {
		return bad.err
	}
	if err := t.checkInPlace("div_"); err != nil {
		return err
	}
	if !t.dt.IsFloat() { // true division's float result cannot go back (PyTorch's error)
		return castError("div_", Float32, t.dt)
	}
	if t.dt != Float32 && t.dt != Float64 {
		q := t.DivScalar(s)
		defer q.Release()
		return t.CopyFrom(q)
	}
	d := t.rt.Scalar(t.dt, s)
	defer d.Release()
	dv, err := broadcastView(d, t.shape)
	if err != nil {
		return fmt.Errorf("tensor: div_: %w", err)
	}
	t.st.version.Add(1)
	return kernel(func() error { return t.rt.dev.Binary(device.Div, t.view(), t.view(), dv) })
}

// MulScalarFrom sets t to src·s, in place (torch.mul(src, s, out=t)): one
// pass over memory where CopyFrom and MulScalarInPlace make two, as
// DistributedDataParallel's reducer divides each gradient while copying it
// into its bucket. src must have t's shape and dtype, a float one; the
// product is rounded as MulScalar's is.
func (t *Tensor) MulScalarFrom(src *Tensor, s float64) error {
	if _, bad := check("mul_out", t, src); bad != nil {
		return bad.err
	}
	if !slices.Equal(t.shape, src.shape) || t.dt != src.dt || !t.dt.IsFloat() {
		return fmt.Errorf("tensor: mul_out: want a source of the output's shape %v and float dtype %v, got %v %v", t.shape, t.dt, src.shape, src.dt)
	}
	if err := t.checkInPlace("mul_out"); err != nil {
		return err
	}
	t.st.version.Add(1)
	if t.coversStorage() {
		t.st.zeroPending = false // every byte is about to be written
	}
	return kernel(func() error { return t.rt.dev.Unary(device.MulScalar, t.view(), src.view(), s) })
}

func (t *Tensor) MulScalarInPlace(s float64) error {
	if lz, off, ok := t.lazyRange(); ok && t.dt.IsFloat() {
		return t.recordStep("mul_", lz, lazyStep{kind: lazyMul, off: off, value: s})
	}
	if _, bad := check("mul_", t); bad != nil {
		return bad.err
	}
	if err := t.checkInPlace("mul_"); err != nil {
		return err
	}
	if !t.dt.IsFloat() && s != math.Trunc(s) { // the product is a float: PyTorch's error
		return castError("mul_", Float32, t.dt)
	}
	t.st.version.Add(1)
	return kernel(func() error { return t.rt.dev.Unary(device.MulScalar, t.view(), t.view(), s) })
}
