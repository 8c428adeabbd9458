package script

import (
	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The tensor methods over engine/tensor/sortscan.go: sin, cos, erf,
// cumsum, cumprod, sort, argsort, topk and prod, with PyTorch's arguments
// given positionally or in an options object.
func init() {
	for name, m := range map[string]method{
		"sin":     unaryMethod((*tensor.Tensor).Sin),
		"cos":     unaryMethod((*tensor.Tensor).Cos),
		"erf":     unaryMethod((*tensor.Tensor).Erf),
		"cumsum":  cumulativeMethod("cumsum", (*tensor.Tensor).Cumsum),
		"cumprod": cumulativeMethod("cumprod", (*tensor.Tensor).Cumprod),
		"sort": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
			dim, descending, stable := sortArgs(r, "tensor.sort", call)
			return r.pair(t.Sort(dim, descending, stable))
		},
		"argsort": func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
			dim, descending, stable := sortArgs(r, "tensor.argsort", call)
			return r.wrap(t.Argsort(dim, descending, stable))
		},
		"topk": topkMethod,
		"prod": prodMethod,
	} {
		if _, dup := tensorMethods[name]; dup {
			panic("script: tensor method " + name + " is defined twice")
		}
		tensorMethods[name] = m
	}
}

// cumulativeMethod reads t.cumsum(dim), t.cumsum(dim, { dtype }) or
// t.cumsum({ dim, dtype }); dim is required, as in PyTorch, and dtype
// casts the input before the scan (torch.cumsum's dtype argument: a bool
// mask's running count in float32, say).
func cumulativeMethod(name string, f func(*tensor.Tensor, int) *tensor.Tensor) method {
	fn := "tensor." + name
	return func(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
		v := call.Argument(0)
		var dt goja.Value
		if o := r.optionsOf(fn, call, 0, "dim", "dtype"); o != nil {
			v, dt = optValue(o, "dim"), optValue(o, "dtype")
		} else if o := r.optionsOf(fn, call, 1, "dtype"); o != nil {
			dt = optValue(o, "dtype")
		}
		dim := r.intValue(fn, "dim", v)
		if isMissing(dt) {
			return r.wrap(f(t, dim))
		}
		// The result in dtype too: an integer scan runs in int64, and
		// int64's wrapped sums cast to int32 are int32's.
		want := r.dtypeValue(fn, dt, t.DType())
		return r.wrap(f(t.To(want), dim).To(want))
	}
}

// sortArgs reads (dim = -1, descending = false), ({ dim, descending,
// stable }) or (dim, { descending, stable }).
func sortArgs(r *Runtime, fn string, call goja.FunctionCall) (dim int, descending, stable bool) {
	if o := r.optionsOf(fn, call, 0, "dim", "descending", "stable"); o != nil {
		return r.optInt(fn, o, "dim", -1), optBool(o, "descending", false), optBool(o, "stable", false)
	}
	dim = r.intArg(fn, "dim", call, 0, -1)
	if o := r.optionsOf(fn, call, 1, "descending", "stable"); o != nil {
		return dim, optBool(o, "descending", false), optBool(o, "stable", false)
	}
	return dim, boolArg(call, 1, false), false
}

// topkMethod reads t.topk(k, dim = -1, largest = true, sorted = true) or
// t.topk(k, { dim, largest, sorted }).
func topkMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	const fn = "tensor.topk"
	k := r.intValue(fn, "k", call.Argument(0))
	if o := r.optionsOf(fn, call, 1, "dim", "largest", "sorted"); o != nil {
		return r.pair(t.TopK(k, r.optInt(fn, o, "dim", -1), optBool(o, "largest", true), optBool(o, "sorted", true)))
	}
	return r.pair(t.TopK(k, r.intArg(fn, "dim", call, 1, -1), boolArg(call, 2, true), boolArg(call, 3, true)))
}

// prodMethod reads t.prod(), t.prod(dim, keepdim = false), t.prod({ dim,
// keepdim }) or t.prod(dim, { keepdim }). PyTorch's prod reduces one
// dimension or all of them: a list of dims is an error, and so is keepdim
// without a dim.
func prodMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	const fn = "tensor.prod"
	var dim, keep goja.Value
	if o := r.optionsOf(fn, call, 0, "dim", "keepdim"); o != nil {
		dim, keep = optValue(o, "dim"), optValue(o, "keepdim")
	} else {
		dim, keep = call.Argument(0), call.Argument(1)
		if o := r.optionsOf(fn, call, 1, "keepdim"); o != nil {
			keep = optValue(o, "keepdim")
		}
	}
	if isMissing(dim) {
		if !isMissing(keep) {
			r.throwf("%s: keepdim needs a dim (the product of every element is a 0-dimensional tensor)", fn)
		}
		return r.wrap(t.ProdAll())
	}
	if obj, ok := dim.(*goja.Object); ok && isArrayObject(obj) {
		r.throwf("%s: dim must be one integer (torch.prod reduces one dimension or all), got an array", fn)
	}
	return r.wrap(t.Prod(r.intValue(fn, "dim", dim), !isMissing(keep) && r.toBool(fn, "keepdim", keep)))
}
