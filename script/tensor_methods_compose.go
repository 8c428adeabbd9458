package script

import (
	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The tensor methods over engine/tensor/compose.go: clamp (clip) and
// clamp_, norm, repeat, flip, unbind, all, any, where, repeatInterleave,
// and the in-place sub_ and div_, with PyTorch's arguments given
// positionally or in an options object.
func init() {
	for name, m := range map[string]method{
		"clamp":            clampMethod("clamp", false),
		"clip":             clampMethod("clip", false),
		"clamp_":           clampMethod("clamp_", true),
		"clip_":            clampMethod("clip_", true),
		"norm":             normMethod,
		"repeat":           repeatMethod,
		"flip":             flipMethod,
		"unbind":           unbindMethod,
		"all":              allAnyMethod("all", (*tensor.Tensor).All),
		"any":              allAnyMethod("any", (*tensor.Tensor).Any),
		"where":            whereMethod,
		"repeatInterleave": repeatInterleaveMethod,
		"sub_":             subInPlaceMethod,
		"div_":             divInPlaceMethod,
	} {
		if _, dup := tensorMethods[name]; dup {
			panic("script: tensor method " + name + " is defined twice")
		}
		tensorMethods[name] = m
	}
}

// clampMethod reads t.clamp(min?, max?) or t.clamp({ min, max }), with
// PyTorch's two overloads: numbers, or tensors (either bound absent:
// undefined or null). As PyTorch's argument parser does, a number beside a
// tensor is accepted only when that tensor is 0-d and does not require
// grad, and then the tensor counts as a number.
func clampMethod(name string, inPlace bool) method {
	fn := "tensor." + name
	return func(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		lo, hi := call.Argument(0), call.Argument(1)
		if o := r.optionsOf(fn, call, 0, "min", "max"); o != nil {
			if !isMissing(call.Argument(1)) {
				r.throwf("%s: give min and max either as arguments or as options, not both", fn)
			}
			lo, hi = optValue(o, "min"), optValue(o, "max")
		}
		if isMissing(lo) && isMissing(hi) {
			r.throwf("%s: at least one of min or max must be given", fn)
		}
		isNumber := func(v goja.Value) bool { return !isMissing(v) && !r.isTensor(v) }
		if r.isTensor(lo) && !isNumber(hi) || r.isTensor(hi) && !isNumber(lo) {
			bound := func(v goja.Value) *tensor.Tensor {
				if isMissing(v) {
					return nil
				}
				return r.unwrap(fn, "a bound", v)
			}
			if inPlace {
				r.throwIfErr(t.ClampTensorInPlace(bound(lo), bound(hi)))
				return j.obj
			}
			return r.wrap(t.ClampTensor(bound(lo), bound(hi)))
		}
		floatBound := false
		number := func(what string, v goja.Value) *float64 {
			if isMissing(v) {
				return nil
			}
			if b := asJSTensor(v); b != nil {
				bt := r.live(fn, b)
				if bt.Dim() != 0 || bt.RequiresGrad() {
					r.throwf("%s: min and max must both be numbers or both tensors; beside a number, %s may be a tensor only if it is 0-d and does not require grad", fn, what)
				}
				x, err := bt.Item()
				r.throwIfErr(err)
				floatBound = floatBound || bt.DType().IsFloat()
				return &x
			}
			x := r.numberValue(fn, what, v)
			return &x
		}
		min, max := number("min", lo), number("max", hi)
		if floatBound && !t.DType().IsFloat() {
			// A floating-point bound makes the result float32 even when
			// its value is integral.
			if inPlace {
				r.throwf("%s: result type float32 can't be cast to the desired output type %v", fn, t.DType())
			}
			t = t.To(dtype.Float32)
		}
		if inPlace {
			r.throwIfErr(t.ClampInPlace(min, max))
			return j.obj
		}
		return r.wrap(t.Clamp(min, max))
	}
}

// throwIfErr raises err, if any, as a JavaScript exception.
func (r *Runtime) throwIfErr(err error) {
	if err != nil {
		r.throw(err)
	}
}

// normMethod reads t.norm(p?, dim?, keepdim?), with options for any tail
// ({ p, dim, keepdim }, (p, { dim, keepdim }), (p, dim, { keepdim })). p
// is a number (Infinity, -Infinity and 0 included) or 'fro', the default,
// which is the 2-norm over all dims or one and sqrt(sum(x²)) over two, as
// PyTorch 1.13's torch.norm.
func normMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	const fn = "tensor.norm"
	var p, dim goja.Value
	keep := false
	if o := r.optionsOf(fn, call, 0, "p", "dim", "keepdim"); o != nil {
		p, dim, keep = optValue(o, "p"), optValue(o, "dim"), optBool(o, "keepdim", false)
	} else if o := r.optionsOf(fn, call, 1, "dim", "keepdim"); o != nil {
		p, dim, keep = call.Argument(0), optValue(o, "dim"), optBool(o, "keepdim", false)
	} else if o := r.optionsOf(fn, call, 2, "keepdim"); o != nil {
		p, dim, keep = call.Argument(0), call.Argument(1), optBool(o, "keepdim", false)
	} else {
		p, dim, keep = call.Argument(0), call.Argument(1), boolArg(call, 2, false)
	}
	dims := r.dimsArg(fn, dim)
	if isMissing(p) {
		return r.wrap(t.FrobeniusNorm(dims, keep))
	}
	if s, ok := stringOf(p); ok {
		switch s {
		case "fro":
			return r.wrap(t.FrobeniusNorm(dims, keep))
		case "nuc":
			r.throwf("%s: p 'nuc' (the nuclear norm) is not supported", fn)
		}
		r.throwf("%s: p must be a number or 'fro', got %q", fn, s)
	}
	return r.wrap(t.Norm(r.numberValue(fn, "p", p), dims, keep))
}

// intArgs reads integers given as one array or as arguments from position
// 0 on: t.repeat(2, 3) and t.repeat([2, 3]).
func (r *Runtime) intArgs(fn, what string, call goja.FunctionCall) []int {
	if r.isArray(call.Argument(0)) {
		if len(call.Arguments) > 1 {
			r.throwf("%s: give %s as one array or as integer arguments, not both", fn, what)
		}
		return r.intList(fn, what, call.Argument(0))
	}
	out := make([]int, len(call.Arguments))
	for i, v := range call.Arguments {
		out[i] = r.intValue(fn, what, v)
	}
	return out
}

func repeatMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	return r.wrap(t.Repeat(r.intArgs("tensor.repeat", "sizes", call)...))
}

// flipMethod reads t.flip(dims): t.flip(0), t.flip(0, 1) or t.flip([0, 1]);
// dims is required, as in PyTorch.
func flipMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	if len(call.Arguments) == 0 {
		r.throwf("tensor.flip: dims is missing (t.flip(0), t.flip([0, 1]))")
	}
	return r.wrap(t.Flip(r.intArgs("tensor.flip", "dims", call)...))
}

func unbindMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	parts := t.Unbind(r.intArg("tensor.unbind", "dim", call, 0, 0))
	if len(parts) == 1 {
		if err := parts[0].Err(); err != nil {
			r.throw(err)
		}
	}
	return r.tensorArray(parts)
}

// allAnyMethod reads t.all(), t.all(dim, keepdim?), t.all(dim, { keepdim })
// or t.all({ dim, keepdim }). dim is one integer: PyTorch 1.13 reduces one
// dimension or all of them.
func allAnyMethod(name string, f func(*tensor.Tensor, []int, bool) *tensor.Tensor) method {
	fn := "tensor." + name
	return func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		dim, keep := call.Argument(0), false
		if o := r.optionsOf(fn, call, 0, "dim", "keepdim"); o != nil {
			dim, keep = optValue(o, "dim"), optBool(o, "keepdim", false)
		} else if o := r.optionsOf(fn, call, 1, "keepdim"); o != nil {
			keep = optBool(o, "keepdim", false)
		} else {
			keep = boolArg(call, 1, false)
		}
		var dims []int
		if !isMissing(dim) {
			dims = []int{r.intValue(fn, "dim", dim)}
		} else if keep {
			r.throwf("%s: keepdim needs a dim", fn)
		}
		return r.wrap(f(t, dims, keep))
	}
}

// whereMethod is t.where(condition, other): t where condition holds,
// other elsewhere, in their result type (other may be a number, like a
// Python scalar). A uint8 condition counts nonzero as true, as PyTorch
// 1.13 still accepts.
func whereMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	const fn = "tensor.where"
	cond := r.unwrap(fn, "condition", call.Argument(0))
	switch cond.DType() {
	case dtype.Bool:
	case dtype.Uint8:
		cond = cond.NeScalar(0)
	default:
		r.throwf("%s: the condition must be a bool tensor, got %v", fn, cond.DType())
	}
	if isMissing(call.Argument(1)) {
		r.throwf("%s: other is missing (t.where(condition, other))", fn)
	}
	other := r.tensorOrScalar(fn, r.checkedOther(fn, call.Argument(1)), t)
	dt := tensor.ResultType(t, other)
	return r.wrap(tensor.Where(cond, t.To(dt), other.To(dt)))
}

// checkedOther returns v when it is a tensor or a number, and raises an
// error naming other otherwise.
func (r *Runtime) checkedOther(fn string, v goja.Value) goja.Value {
	if !r.isTensor(v) {
		r.numberValue(fn, "other", v)
	}
	return v
}

// repeatInterleaveMethod reads t.repeatInterleave(repeats, dim?) or
// (repeats, { dim }); repeats is a number. Without dim, t is flattened.
func repeatInterleaveMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	const fn = "tensor.repeatInterleave"
	dim := call.Argument(1)
	if o := r.optionsOf(fn, call, 1, "dim"); o != nil {
		dim = optValue(o, "dim")
	}
	if j := asJSTensor(call.Argument(0)); j != nil { // one count per slice
		repeats := r.live(fn, j)
		if isMissing(dim) {
			return r.wrap(t.Reshape(-1).RepeatInterleaveTensor(repeats, 0))
		}
		return r.wrap(t.RepeatInterleaveTensor(repeats, r.intValue(fn, "dim", dim)))
	}
	repeats := r.intValue(fn, "repeats", call.Argument(0))
	if isMissing(dim) {
		return r.wrap(t.RepeatInterleaveFlat(repeats))
	}
	return r.wrap(t.RepeatInterleave(repeats, r.intValue(fn, "dim", dim)))
}

// subInPlaceMethod is t.sub_(other, { alpha }): other a tensor or a number.
func subInPlaceMethod(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	const fn = "tensor.sub_"
	alpha := 1.0
	if o := r.optionsOf(fn, call, 1, "alpha"); o != nil {
		alpha = r.optNumber(fn, o, "alpha", 1)
	} else if !isMissing(call.Argument(1)) {
		r.throwf("%s(other, options): options must be an object { alpha }, got %s", fn, describe(call.Argument(1)))
	}
	if u := asJSTensor(call.Argument(0)); u != nil {
		r.throwIfErr(t.SubInPlace(r.live(fn, u), alpha))
	} else {
		r.throwIfErr(t.SubScalarInPlace(r.numberValue(fn, "other", call.Argument(0)), alpha))
	}
	return j.obj
}

// divInPlaceMethod is t.div_(other): true division by a tensor or a
// number; the quotient must fit t's type (a floating-point tensor).
func divInPlaceMethod(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	const fn = "tensor.div_"
	if !isMissing(call.Argument(1)) {
		r.throwf("%s: takes one argument, other (roundingMode is not supported)", fn)
	}
	if u := asJSTensor(call.Argument(0)); u != nil {
		r.throwIfErr(t.DivInPlace(r.live(fn, u)))
		return j.obj
	}
	s := r.numberValue(fn, "other", call.Argument(0))
	if !t.DType().IsFloat() {
		r.throwf("%s: result type float32 can't be cast to the desired output type %v", fn, t.DType())
	}
	r.throwIfErr(t.DivScalarInPlace(s))
	return j.obj
}
