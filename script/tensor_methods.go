package script

import (
	"fmt"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// method is a tensor method: self is the live tensor of `this`.
type method func(r *Runtime, j *jsTensor, self *tensor.Tensor, call goja.FunctionCall) goja.Value

// installMethods builds the shared function values of every tensor method
// once per runtime; jsTensor.Get hands them out.
func (r *Runtime) installMethods() {
	r.methods = map[string]goja.Value{}
	for name, m := range tensorMethods {
		name, m := name, m
		fn := "tensor." + name
		r.methods[name] = r.native(name, func(call goja.FunctionCall) goja.Value {
			defer r.raiseArgError(fn) // "tensor.sum", more than native's "sum"
			j := asJSTensor(call.This)
			if j == nil {
				r.throwf("%s: called on %s, not a tensor", fn, describe(call.This))
			}
			self := r.live(fn, j)
			sc := r.rt.OpenScope()
			defer sc.Close()
			return m(r, j, self, call)
		})
	}
}

func unaryMethod(f func(*tensor.Tensor) *tensor.Tensor) method {
	return func(r *Runtime, _ *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		return r.wrap(f(t))
	}
}

// arith handles t op other where other is a tensor or a number.
func arith(name string, f func(a, b *tensor.Tensor) *tensor.Tensor, scalar func(*tensor.Tensor, float64) *tensor.Tensor) method {
	fn := "tensor." + name
	return func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		v := call.Argument(0)
		if j := asJSTensor(v); j != nil {
			return r.wrap(f(t, r.live(fn, j)))
		}
		if scalar != nil {
			return r.wrap(scalar(t, r.numberValue(fn, "argument", v)))
		}
		return r.wrap(f(t, r.tensorOrScalar(fn, v, t)))
	}
}

// dimKeep reads (dim?, keepdim?) with dim a number or an array.
func dimKeep(r *Runtime, fn string, call goja.FunctionCall) ([]int, bool) {
	if o := r.optionsOf(fn, call, 0, "dim", "keepdim"); o != nil {
		return r.dimsArg(fn, optValue(o, "dim")), optBool(o, "keepdim", false)
	}
	keep := boolArg(call, 1, false)
	if o := r.optionsOf(fn, call, 1, "keepdim"); o != nil {
		keep = optBool(o, "keepdim", false)
	}
	return r.dimsArg(fn, call.Argument(0)), keep
}

// pair returns PyTorch's (values, indices) as an array with .values and
// .indices, so that both `[v, i] = t.max(1)` and `t.max(1).values` work.
func (r *Runtime) pair(values, indices *tensor.Tensor) goja.Value {
	v, i := r.wrap(values), r.wrap(indices)
	arr := r.vm.NewArray(v, i)
	must(arr.Set("values", v))
	must(arr.Set("indices", i))
	return arr
}

func (r *Runtime) tensorArray(ts []*tensor.Tensor) goja.Value {
	vals := make([]any, len(ts))
	for i, t := range ts {
		vals[i] = r.wrap(t)
	}
	return r.vm.NewArray(vals...)
}

var tensorMethods = map[string]method{
	// Arithmetic with tensors or numbers.
	"add":        arith("add", (*tensor.Tensor).Add, (*tensor.Tensor).AddScalar),
	"sub":        arith("sub", (*tensor.Tensor).Sub, (*tensor.Tensor).SubScalar),
	"mul":        arith("mul", (*tensor.Tensor).Mul, (*tensor.Tensor).MulScalar),
	"div":        arith("div", (*tensor.Tensor).Div, (*tensor.Tensor).DivScalar),
	"pow":        arith("pow", (*tensor.Tensor).Pow, (*tensor.Tensor).PowScalar),
	"rsub":       arith("rsub", func(a, b *tensor.Tensor) *tensor.Tensor { return b.Sub(a) }, (*tensor.Tensor).RSubScalar),
	"maximum":    arith("maximum", (*tensor.Tensor).Maximum, nil),
	"minimum":    arith("minimum", (*tensor.Tensor).Minimum, nil),
	"eq":         arith("eq", (*tensor.Tensor).Eq, (*tensor.Tensor).EqScalar),
	"ne":         arith("ne", (*tensor.Tensor).Ne, (*tensor.Tensor).NeScalar),
	"lt":         arith("lt", (*tensor.Tensor).Lt, (*tensor.Tensor).LtScalar),
	"le":         arith("le", (*tensor.Tensor).Le, (*tensor.Tensor).LeScalar),
	"gt":         arith("gt", (*tensor.Tensor).Gt, (*tensor.Tensor).GtScalar),
	"ge":         arith("ge", (*tensor.Tensor).Ge, (*tensor.Tensor).GeScalar),
	"logicalAnd": arith("logicalAnd", (*tensor.Tensor).LogicalAnd, nil),
	"logicalOr":  arith("logicalOr", (*tensor.Tensor).LogicalOr, nil),
	"logicalNot": unaryMethod((*tensor.Tensor).LogicalNot),

	"neg":        unaryMethod((*tensor.Tensor).Neg),
	"exp":        unaryMethod((*tensor.Tensor).Exp),
	"log":        unaryMethod((*tensor.Tensor).Log),
	"sqrt":       unaryMethod((*tensor.Tensor).Sqrt),
	"rsqrt":      unaryMethod((*tensor.Tensor).Rsqrt),
	"abs":        unaryMethod((*tensor.Tensor).Abs),
	"sign":       unaryMethod((*tensor.Tensor).Sign),
	"square":     unaryMethod((*tensor.Tensor).Square),
	"reciprocal": unaryMethod((*tensor.Tensor).Reciprocal),
	"relu":       unaryMethod((*tensor.Tensor).Relu),
	"silu":       unaryMethod((*tensor.Tensor).Silu),
	"tanh":       unaryMethod((*tensor.Tensor).Tanh),
	"sigmoid":    unaryMethod((*tensor.Tensor).Sigmoid),
	"gelu": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		approx := "none"
		if o := r.optionsOf("tensor.gelu", call, 0, "approximate"); o != nil {
			approx = optString(o, "approximate", "none")
		} else if v := call.Argument(0); !isMissing(v) {
			approx = v.String()
		}
		return r.wrap(t.Gelu(approx))
	},

	// Reductions.
	"sum": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		dims, keep := dimKeep(r, "tensor.sum", call)
		return r.wrap(t.Sum(dims, keep))
	},
	"mean": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		dims, keep := dimKeep(r, "tensor.mean", call)
		return r.wrap(t.Mean(dims, keep))
	},
	"var": varStd(false),
	"std": varStd(true),
	"max": extreme(true),
	"min": extreme(false),
	"amax": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		dims, keep := dimKeep(r, "tensor.amax", call)
		return r.wrap(t.Amax(dims, keep))
	},
	"argmax": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		if isMissing(call.Argument(0)) {
			return r.wrap(t.Reshape(-1).Argmax(0, false))
		}
		return r.wrap(t.Argmax(r.intValue("tensor.argmax", "dim", call.Argument(0)), boolArg(call, 1, false)))
	},
	"softmax": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Softmax(r.intArg("tensor.softmax", "dim", call, 0, -1)))
	},
	"logSoftmax": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.LogSoftmax(r.intArg("tensor.logSoftmax", "dim", call, 0, -1)))
	},

	// Products.
	"matmul": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Matmul(r.unwrap("tensor.matmul", "other", call.Argument(0))))
	},
	"mm": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		u := r.unwrap("tensor.mm", "other", call.Argument(0))
		if t.Dim() != 2 || u.Dim() != 2 {
			r.throwf("tensor.mm: expects 2-D tensors, got shapes %v and %v", t.Shape(), u.Shape())
		}
		return r.wrap(t.Matmul(u))
	},
	"bmm": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		u := r.unwrap("tensor.bmm", "other", call.Argument(0))
		if t.Dim() != 3 || u.Dim() != 3 {
			r.throwf("tensor.bmm: expects 3-D tensors, got shapes %v and %v", t.Shape(), u.Shape())
		}
		return r.wrap(t.Matmul(u))
	},

	// Views and layout.
	"reshape": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Reshape(r.shapeArgs("tensor.reshape", call, 0)...))
	},
	"view": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.View(r.shapeArgs("tensor.view", call, 0)...))
	},
	"expand": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Expand(r.shapeArgs("tensor.expand", call, 0)...))
	},
	"expandAs": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.ExpandAs(r.unwrap("tensor.expandAs", "other", call.Argument(0))))
	},
	"permute": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Permute(r.shapeArgs("tensor.permute", call, 0)...))
	},
	"transpose": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Transpose(r.intValue("tensor.transpose", "dim0", call.Argument(0)), r.intValue("tensor.transpose", "dim1", call.Argument(1))))
	},
	"t": unaryMethod((*tensor.Tensor).T),
	"flatten": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Flatten(r.intArg("tensor.flatten", "startDim", call, 0, 0), r.intArg("tensor.flatten", "endDim", call, 1, -1)))
	},
	"unsqueeze": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Unsqueeze(r.intValue("tensor.unsqueeze", "dim", call.Argument(0))))
	},
	"squeeze": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Squeeze(r.dimsArg("tensor.squeeze", call.Argument(0))...))
	},
	"narrow": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		fn := "tensor.narrow"
		return r.wrap(t.Narrow(r.intValue(fn, "dim", call.Argument(0)), r.intValue(fn, "start", call.Argument(1)), r.intValue(fn, "length", call.Argument(2))))
	},
	"select": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		fn := "tensor.select"
		return r.wrap(t.Select(r.intValue(fn, "dim", call.Argument(0)), r.intValue(fn, "index", call.Argument(1))))
	},
	"contiguous": unaryMethod((*tensor.Tensor).Contiguous),
	"clone":      unaryMethod((*tensor.Tensor).Clone),
	"detach":     unaryMethod((*tensor.Tensor).Detach),
	"split": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		dim := r.intArg("tensor.split", "dim", call, 1, 0)
		if obj, ok := call.Argument(0).(*goja.Object); ok && isArrayObject(obj) {
			return r.tensorArray(t.SplitSizes(r.intList("tensor.split", "sizes", obj), dim))
		}
		return r.tensorArray(t.Split(r.intValue("tensor.split", "size", call.Argument(0)), dim))
	},
	"chunk": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.tensorArray(t.Chunk(r.intValue("tensor.chunk", "chunks", call.Argument(0)), r.intArg("tensor.chunk", "dim", call, 1, 0)))
	},

	// Types.
	// to(dtype), to(device) or to({ dtype, device }): a device may only be
	// the tensor's own (every tensor of a rank lives on the rank's device,
	// sameDevice), and then, without a dtype, to returns the tensor itself,
	// as PyTorch does when nothing changes.
	"to": func(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		const fn = "tensor.to"
		var dt, dev goja.Value
		if o := r.optionsOf(fn, call, 0, "dtype", "device"); o != nil {
			dt, dev = optValue(o, "dtype"), optValue(o, "device")
		} else if v := call.Argument(0); !isMissing(v) {
			if isDeviceName(v.String()) {
				dev = v
			} else {
				dt = v
			}
		}
		if dt == nil && dev == nil {
			r.throwf("%s: expects a dtype (\"bfloat16\"), a device or { dtype, device }, got none", fn)
		}
		if dev != nil {
			r.sameDevice(fn, dev, t.Device().String())
		}
		if dt == nil {
			return j.obj
		}
		return r.wrap(t.To(r.dtypeValue(fn, dt, t.DType())))
	},
	"float":    castMethod(dtype.Float32),
	"double":   castMethod(dtype.Float64),
	"half":     castMethod(dtype.Float16),
	"bfloat16": castMethod(dtype.BFloat16),
	"long":     castMethod(dtype.Int64),
	"int":      castMethod(dtype.Int32),
	"bool":     castMethod(dtype.Bool),

	// Indexing.
	"indexSelect": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.IndexSelect(r.intValue("tensor.indexSelect", "dim", call.Argument(0)), r.unwrap("tensor.indexSelect", "index", call.Argument(1))))
	},
	"gather": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		return r.wrap(t.Gather(r.intValue("tensor.gather", "dim", call.Argument(0)), r.unwrap("tensor.gather", "index", call.Argument(1))))
	},
	"scatterAdd": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		fn := "tensor.scatterAdd"
		return r.wrap(t.ScatterAdd(r.intValue(fn, "dim", call.Argument(0)), r.unwrap(fn, "index", call.Argument(1)), r.unwrap(fn, "src", call.Argument(2))))
	},
	"maskedFill": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		fn := "tensor.maskedFill"
		return r.wrap(t.MaskedFill(r.unwrap(fn, "mask", call.Argument(0)), r.numberValue(fn, "value", call.Argument(1))))
	},

	// Values out.
	"item": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		v, err := t.Item()
		if err != nil {
			r.throw(err)
		}
		if !t.DType().IsFloat() {
			if t.DType() == dtype.Bool {
				return r.vm.ToValue(v != 0)
			}
			return r.vm.ToValue(int64(v))
		}
		return r.vm.ToValue(v)
	},
	"toArray": toArray,
	"tolist":  toArray,
	"toString": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		return r.vm.ToValue(r.repr(t))
	},
	// valueOf is what JavaScript's arithmetic and comparisons call: x + 1
	// would quietly make a string and x - y NaN, far from where the
	// mistake is. Text (`${x}`, String(x)) goes through toString.
	"valueOf": func(r *Runtime, _ *jsTensor, _ *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		r.throwf("tensor: JavaScript's operators do not apply to tensors (x + 1 would be a string, x - y NaN): use x.add(y), x.sub(y), x.mul(y), x.div(y), x.lt(y), ...; x.item() for the number in a one-element tensor; `${x}` for text")
		return nil
	},
	"size": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		if isMissing(call.Argument(0)) {
			return r.vm.ToValue(shapeValues(t.Shape()))
		}
		d := r.intValue("tensor.size", "dim", call.Argument(0))
		if s := t.Size(d); s >= 0 {
			return r.vm.ToValue(s)
		}
		r.throwRangef("tensor.size: dimension %d out of range for a %d-dimensional tensor", d, t.Dim())
		return nil
	},
	"dim": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		return r.vm.ToValue(t.Dim())
	},
	"numel": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		return r.vm.ToValue(t.Numel())
	},
	"typedArray": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		return r.typedArrayOf(t)
	},

	// Autograd.
	"backward": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		opt := tensor.BackwardOptions{}
		if v := call.Argument(0); !isMissing(v) && r.isTensor(v) {
			opt.Grad = r.unwrap("tensor.backward", "gradient", v)
		}
		o := r.optionsOf("tensor.backward", call, 0, "retainGraph")
		if o == nil {
			o = r.optionsOf("tensor.backward", call, 1, "retainGraph")
		}
		opt.RetainGraph = optBool(o, "retainGraph", false)
		r.life.backward()
		if err := t.BackwardWith(opt); err != nil {
			r.throw(err)
		}
		r.life.backwardDone()
		return goja.Undefined()
	},
	"requiresGrad_": func(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		if err := t.SetRequiresGrad(boolArg(call, 0, true)); err != nil {
			r.throw(err)
		}
		return j.obj
	},

	// In place (not recorded by autograd; use under tensor.noGrad for
	// tensors that require grad, as in PyTorch).
	"zero_": func(r *Runtime, j *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		if err := t.Zero(); err != nil {
			r.throw(err)
		}
		return j.obj
	},
	"fill_": func(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		if err := t.Fill(r.numberValue("tensor.fill_", "value", call.Argument(0))); err != nil {
			r.throw(err)
		}
		return j.obj
	},
	"copy_": func(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		if err := t.CopyFrom(r.unwrap("tensor.copy_", "src", call.Argument(0))); err != nil {
			r.throw(err)
		}
		return j.obj
	},
	"add_": func(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		other := r.tensorOrScalar("tensor.add_", call.Argument(0), t)
		if o := r.optionsOf("tensor.add_", call, 1, "alpha"); o != nil {
			if alpha := r.optNumber("tensor.add_", o, "alpha", 1); alpha != 1 {
				other = other.MulScalar(alpha) // a fractional alpha makes a float, which add_ refuses for an integer tensor
			}
		}
		if err := t.AddInPlace(other); err != nil {
			r.throw(err)
		}
		return j.obj
	},
	"mul_": func(r *Runtime, j *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		if err := t.MulScalarInPlace(r.numberValue("tensor.mul_", "value", call.Argument(0))); err != nil {
			r.throw(err)
		}
		return j.obj
	},

	// Lifetime.
	"keep": func(r *Runtime, j *jsTensor, _ *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		r.life.keep(j)
		return j.obj
	},
	"release": func(r *Runtime, j *jsTensor, _ *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		if j.borrowed || j.param {
			r.throwf("tensor.release: this tensor is owned by the engine (a parameter, a gradient or optimizer state)")
		}
		j.releaseWith("by tensor.release()")
		return goja.Undefined()
	},
}

func castMethod(dt dtype.DType) method {
	return func(r *Runtime, _ *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
		return r.wrap(t.To(dt))
	}
}

func varStd(std bool) method {
	name := "tensor.var"
	if std {
		name = "tensor.std"
	}
	return func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		correction, keep := 1, false
		dims := []int(nil)
		if o := r.optionsOf(name, call, 0, "dim", "keepdim", "correction", "unbiased"); o != nil {
			dims = r.dimsArg(name, optValue(o, "dim"))
			correction, keep = r.optCorrection(name, o), optBool(o, "keepdim", false)
		} else {
			dims = r.dimsArg(name, call.Argument(0))
			if o := r.optionsOf(name, call, 1, "keepdim", "correction", "unbiased"); o != nil {
				correction, keep = r.optCorrection(name, o), optBool(o, "keepdim", false)
			} else if v := call.Argument(1); !isMissing(v) {
				if !r.toBool(name, "unbiased", v) { // unbiased=false
					correction = 0
				}
				keep = boolArg(call, 2, false)
			}
		}
		if std {
			return r.wrap(t.Std(dims, correction, keep))
		}
		return r.wrap(t.Var(dims, correction, keep))
	}
}

// optCorrection reads correction (PyTorch 2) or unbiased (PyTorch 1).
func (r *Runtime) optCorrection(fn string, o *goja.Object) int {
	if v := optValue(o, "unbiased"); v != nil && !r.toBool(fn, "option unbiased", v) {
		return 0
	}
	return r.optInt(fn, o, "correction", 1)
}

func extreme(isMax bool) method {
	name := "tensor.min"
	if isMax {
		name = "tensor.max"
	}
	return func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		if isMissing(call.Argument(0)) {
			if isMax {
				return r.wrap(t.MaxAll())
			}
			return r.wrap(t.MinAll())
		}
		if r.isTensor(call.Argument(0)) { // torch.max(a, b): elementwise
			other := r.unwrap(name, "other", call.Argument(0))
			if isMax {
				return r.wrap(t.Maximum(other))
			}
			return r.wrap(t.Minimum(other))
		}
		d := r.intValue(name, "dim", call.Argument(0))
		keep := boolArg(call, 1, false)
		var v, i *tensor.Tensor
		if isMax {
			v, i = t.Max(d, keep)
		} else {
			v, i = t.Min(d, keep)
		}
		return r.pair(v, i)
	}
}

// toArray converts to nested JavaScript arrays (numbers; booleans for
// bool tensors), as Tensor.tolist().
func toArray(r *Runtime, _ *jsTensor, t *tensor.Tensor, _ goja.FunctionCall) goja.Value {
	vals, err := t.Float64s()
	if err != nil {
		r.throw(err)
	}
	shape := t.Shape()
	conv := func(v float64) any { return v }
	switch {
	case t.DType() == dtype.Bool:
		conv = func(v float64) any { return v != 0 }
	case !t.DType().IsFloat():
		conv = func(v float64) any { return int64(v) }
	}
	if len(shape) == 0 {
		return r.vm.ToValue(conv(vals[0]))
	}
	var rec func(off int, dims []int) any
	rec = func(off int, dims []int) any {
		out := make([]any, dims[0])
		step := 1
		for _, d := range dims[1:] {
			step *= d
		}
		for i := range out {
			if len(dims) == 1 {
				out[i] = conv(vals[off+i])
			} else {
				out[i] = rec(off+i*step, dims[1:])
			}
		}
		return out
	}
	return r.vm.ToValue(rec(0, shape))
}

// typedArrayOf returns a typed array over t's memory when t is contiguous
// and in host memory (writes through it change the tensor, as NumPy views
// of torch tensors do; it is valid until the tensor is released), and a
// typed array holding a copy otherwise.
func (r *Runtime) typedArrayOf(t *tensor.Tensor) goja.Value {
	ctorName := map[dtype.DType]string{dtype.Float32: "Float32Array", dtype.Float64: "Float64Array",
		dtype.Int32: "Int32Array", dtype.Uint8: "Uint8Array", dtype.Bool: "Uint8Array", dtype.Int64: "BigInt64Array"}[t.DType()]
	src := t
	if ctorName == "" { // half types: widen to float32
		src = t.To(dtype.Float32)
		ctorName = "Float32Array"
	}
	data, shared := tensor.HostBytes(src)
	if !shared {
		var err error
		if data, err = src.Bytes(); err != nil {
			r.throw(err)
		}
	}
	ctor := r.vm.Get(ctorName)
	buf := r.vm.NewArrayBuffer(data)
	obj, err := r.vm.New(ctor, r.vm.ToValue(buf))
	if err != nil {
		r.throw(fmt.Errorf("tensor.typedArray: %w", err))
	}
	return obj
}
