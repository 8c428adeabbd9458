package script

import (
	"fmt"
	"math"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn/functional"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// nativeLayers installs the functional forms of the convolution, pooling
// and normalisation layers (nn.functional.conv1d, conv2d, maxPool2d,
// avgPool2d, adaptiveAvgPool2d, dropout2d, rmsNorm, batchNorm), SyncBatchNorm's synchronised batch norm, and the
// initialisations of Conv and MultiheadAttention, which prelude.js's
// module classes build on. The arithmetic lives in engine/nn/functional.
func (r *Runtime) nativeLayers(native, F *goja.Object) {
	conv := func(name string, f func(x, w, b *tensor.Tensor, o functional.ConvOptions) *tensor.Tensor) {
		r.fn(F, name, func(call goja.FunctionCall) goja.Value {
			fn := "nn.functional." + name
			x, w := r.unwrap(fn, "input", call.Argument(0)), r.unwrap(fn, "weight", call.Argument(1))
			var b *tensor.Tensor
			if v := call.Argument(2); !isMissing(v) {
				b = r.unwrap(fn, "bias", v)
			}
			// (x, w, b, { stride, padding, dilation, groups }) or
			// PyTorch's positional (x, w, b, stride, padding, dilation, groups).
			stride, padding, dilation, groups := call.Argument(3), call.Argument(4), call.Argument(5), call.Argument(6)
			if o := r.optionsOf(fn, call, 3, "stride", "padding", "dilation", "groups"); o != nil {
				stride, padding, dilation, groups = o.Get("stride"), o.Get("padding"), o.Get("dilation"), o.Get("groups")
			}
			opts := functional.ConvOptions{
				Stride:   r.intsOrOne(fn, "stride", stride),
				Dilation: r.intsOrOne(fn, "dilation", dilation),
				Groups:   1,
			}
			opts.Padding, opts.PaddingString = r.paddingArg(fn, padding)
			if !isMissing(groups) {
				opts.Groups = r.intValue(fn, "groups", groups)
				if opts.Groups <= 0 {
					r.throwRangef("%s: non-positive groups is not supported, got %d", fn, opts.Groups)
				}
			}
			return r.layerResult(fn, f(x, w, b, opts))
		})
	}
	conv("conv1d", functional.Conv1d)
	conv("conv2d", functional.Conv2d)

	r.fn(F, "maxPool2d", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.maxPool2d"
		x := r.unwrap(fn, "input", call.Argument(0))
		if isMissing(call.Argument(1)) {
			r.throwf("%s: kernelSize is missing", fn)
		}
		// (x, kernelSize, { stride, padding, dilation, ceilMode }) or
		// (x, kernelSize, stride, padding, dilation, ceilMode).
		stride, padding, dilation, ceil := call.Argument(2), call.Argument(3), call.Argument(4), call.Argument(5)
		if o := r.optionsOf(fn, call, 2, "stride", "padding", "dilation", "ceilMode"); o != nil {
			stride, padding, dilation, ceil = o.Get("stride"), o.Get("padding"), o.Get("dilation"), o.Get("ceilMode")
		}
		opts := functional.PoolOptions{
			KernelSize: r.intsOrOne(fn, "kernelSize", call.Argument(1)),
			Stride:     r.intsOrOne(fn, "stride", stride),
			Padding:    r.intsOrOne(fn, "padding", padding),
			Dilation:   r.intsOrOne(fn, "dilation", dilation),
			CeilMode:   !isMissing(ceil) && r.toBool(fn, "ceilMode", ceil),
		}
		return r.layerResult(fn, functional.MaxPool2d(x, opts))
	})

	r.fn(F, "avgPool2d", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.avgPool2d"
		x := r.unwrap(fn, "input", call.Argument(0))
		if isMissing(call.Argument(1)) {
			r.throwf("%s: kernelSize is missing", fn)
		}
		// (x, kernelSize, { stride, padding, ceilMode, countIncludePad,
		// divisorOverride }) or PyTorch's positional order.
		stride, padding, ceil, include, divisor := call.Argument(2), call.Argument(3), call.Argument(4), call.Argument(5), call.Argument(6)
		if o := r.optionsOf(fn, call, 2, "stride", "padding", "ceilMode", "countIncludePad", "divisorOverride"); o != nil {
			stride, padding, ceil, include, divisor = o.Get("stride"), o.Get("padding"), o.Get("ceilMode"), o.Get("countIncludePad"), o.Get("divisorOverride")
		}
		opts := functional.AvgPoolOptions{
			KernelSize: r.intsOrOne(fn, "kernelSize", call.Argument(1)),
			Stride:     r.intsOrOne(fn, "stride", stride),
			Padding:    r.intsOrOne(fn, "padding", padding),
			CeilMode:   !isMissing(ceil) && r.toBool(fn, "ceilMode", ceil),
			ExcludePad: !isMissing(include) && !r.toBool(fn, "countIncludePad", include),
		}
		if !isMissing(divisor) {
			if opts.DivisorOverride = r.intValue(fn, "divisorOverride", divisor); opts.DivisorOverride == 0 {
				r.throwRangef("%s: divisor must be not zero", fn)
			}
		}
		return r.layerResult(fn, functional.AvgPool2d(x, opts))
	})

	r.fn(F, "adaptiveAvgPool2d", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.adaptiveAvgPool2d"
		x := r.unwrap(fn, "input", call.Argument(0))
		v := call.Argument(1)
		if isMissing(v) {
			r.throwf("%s: outputSize is missing", fn)
		}
		// An integer, or [h, w] whose null entries (PyTorch's None) keep
		// the input's size: -1 for functional.AdaptiveAvgPool2d.
		var size []int
		if r.isArray(v) {
			obj := v.ToObject(r.vm)
			if n := r.arrayLength(fn, "outputSize", obj, 0); n != 2 {
				r.throwRangef("%s: outputSize must be an integer or an array of 2 (integers or null), got %d entries", fn, n)
			}
			for i := range 2 {
				e := obj.Get(fmt.Sprint(i))
				if isMissing(e) {
					size = append(size, -1)
					continue
				}
				size = append(size, r.intValue(fn, fmt.Sprintf("outputSize[%d]", i), e))
			}
		} else {
			size = []int{r.intValue(fn, "outputSize", v)}
		}
		for _, d := range size {
			if d < -1 {
				r.throwRangef("%s: outputSize must be non-negative, got %d", fn, d)
			}
		}
		return r.layerResult(fn, functional.AdaptiveAvgPool2d(x, size))
	})

	r.fn(F, "dropout2d", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.dropout2d"
		x := r.unwrap(fn, "input", call.Argument(0))
		// (x, p, training, inplace) or (x, { p, training, inplace }).
		pv, training, inplace := call.Argument(1), call.Argument(2), call.Argument(3)
		if o := r.optionsOf(fn, call, 1, "p", "training", "inplace"); o != nil {
			pv, training, inplace = o.Get("p"), o.Get("training"), o.Get("inplace")
		}
		p := 0.5
		if !isMissing(pv) {
			p = r.numberValue(fn, "p", pv)
		}
		train := isMissing(training) || r.toBool(fn, "training", training)
		y := functional.Dropout2d(x, p, train)
		if !isMissing(inplace) && r.toBool(fn, "inplace", inplace) && y.Err() == nil {
			// PyTorch's feature_dropout_ writes into the input and returns
			// it. Here that is a copy back, which autograd does not record:
			// CopyFrom refuses an input that requires a gradient.
			if train && p > 0 {
				err := x.CopyFrom(y)
				y.Release()
				if err != nil {
					r.throw(fmt.Errorf("%s: inplace: %w", fn, err))
				}
			}
			return call.Argument(0)
		}
		return r.layerResult(fn, y)
	})

	r.fn(F, "rmsNorm", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.rmsNorm"
		x := r.unwrap(fn, "input", call.Argument(0))
		if isMissing(call.Argument(1)) {
			r.throwf("%s: normalizedShape is missing", fn)
		}
		shape := r.intsOrOne(fn, "normalizedShape", call.Argument(1))
		var w *tensor.Tensor
		if v := call.Argument(2); !isMissing(v) {
			w = r.unwrap(fn, "weight", v)
		}
		eps := functional.RMSNormEps(x.DType())
		if v := call.Argument(3); !isMissing(v) {
			eps = r.numberValue(fn, "eps", v)
		}
		return r.layerResult(fn, functional.RMSNorm(x, shape, w, eps))
	})

	r.fn(F, "batchNorm", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.batchNorm"
		x := r.unwrap(fn, "input", call.Argument(0))
		maybe := func(what string, v goja.Value) *tensor.Tensor {
			if isMissing(v) {
				return nil
			}
			return r.unwrap(fn, what, v)
		}
		o := functional.BatchNormOptions{
			RunningMean: maybe("runningMean", call.Argument(1)),
			RunningVar:  maybe("runningVar", call.Argument(2)),
		}
		// (x, runningMean, runningVar, { weight, bias, training, momentum, eps })
		// or PyTorch's positional (…, weight, bias, training, momentum, eps).
		weight, bias, training, momentum, eps := call.Argument(3), call.Argument(4), call.Argument(5), call.Argument(6), call.Argument(7)
		if opts := r.optionsOf(fn, call, 3, "weight", "bias", "training", "momentum", "eps"); opts != nil {
			weight, bias, training, momentum, eps = opts.Get("weight"), opts.Get("bias"), opts.Get("training"), opts.Get("momentum"), opts.Get("eps")
		}
		o.Weight, o.Bias = maybe("weight", weight), maybe("bias", bias)
		o.Training = !isMissing(training) && r.toBool(fn, "training", training)
		o.Momentum, o.Eps = 0.1, 1e-5
		if !isMissing(momentum) {
			o.Momentum = r.numberValue(fn, "momentum", momentum)
		}
		if !isMissing(eps) {
			o.Eps = r.numberValue(fn, "eps", eps)
		}
		return r.layerResult(fn, functional.BatchNorm(x, o))
	})

	// syncBatchNorm(x, runningMean, runningVar, weight, bias, momentum,
	// eps, group): nn.SyncBatchNorm's training forward, the statistics
	// summed over group (a dist group; null: every rank) in forward and
	// their gradients in backward.
	r.fn(native, "syncBatchNorm", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.SyncBatchNorm"
		maybe := func(what string, v goja.Value) *tensor.Tensor {
			if isMissing(v) {
				return nil
			}
			return r.unwrap(fn, what, v)
		}
		pg := r.group
		if v := call.Argument(7); !isMissing(v) {
			g, ok := r.groups[v.ToObject(r.vm)]
			if !ok || g == nil {
				r.throwf("%s: processGroup must be a group from dist.newGroup that this rank belongs to, got %s", fn, describe(v))
			}
			pg = g
		}
		o := functional.BatchNormOptions{
			RunningMean: maybe("runningMean", call.Argument(1)),
			RunningVar:  maybe("runningVar", call.Argument(2)),
			Weight:      maybe("weight", call.Argument(3)),
			Bias:        maybe("bias", call.Argument(4)),
			Training:    true,
			Momentum:    r.numberValue(fn, "momentum", call.Argument(5)),
			Eps:         r.numberValue(fn, "eps", call.Argument(6)),
			AllReduce:   func(t *tensor.Tensor) error { return pg.AllReduce(t, dist.Sum).Wait() },
		}
		return r.layerResult(fn, functional.BatchNorm(r.unwrap(fn, "input", call.Argument(0)), o))
	})

	// convInit(fn, shape, bias): a convolution's weight of shape
	// [out, in/groups, kernel...] and bias [out] (or null), drawn as
	// PyTorch's _ConvNd.reset_parameters does: Linear's recipe with
	// fan_in = in/groups · ∏kernel.
	r.fn(native, "convInit", func(call goja.FunctionCall) goja.Value {
		fn := call.Argument(0).String()
		shape := r.intList(fn, "weight shape", call.Argument(1))
		if err := tensor.CheckShape(dtype.Float32, shape...); err != nil {
			r.throwRangef("%s: weight of shape %v: %v", fn, shape, err)
		}
		fanIn := 1
		for _, d := range shape[1:] {
			fanIn *= d
		}
		return r.linearParams(fn, shape, fanIn, boolArg(call, 2, true))
	})

	// xavierUniform(t): torch.nn.init.xavier_uniform_(t) in place with the
	// bound computed in float64 as PyTorch's Python does, so that the
	// draws equal PyTorch's to the bit (MultiheadAttention's in_proj_weight).
	r.fn(native, "xavierUniform", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.MultiheadAttention"
		t := r.unwrap(fn, "tensor", call.Argument(0))
		if t.Dim() < 2 {
			r.throwRangef("%s: fan in and fan out cannot be computed for a tensor of fewer than 2 dimensions", fn)
		}
		s := t.Shape()
		receptive := 1
		for _, d := range s[2:] {
			receptive *= d
		}
		fanIn, fanOut := s[1]*receptive, s[0]*receptive
		std := 1.0 * math.Sqrt(2.0/float64(fanIn+fanOut))
		a := math.Sqrt(3.0) * std
		if err := t.UniformFill(r.rt.Generator(), -a, a); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
}

// layerResult hands the result of a functional layer op to the script; a
// failure is an Error naming the script's function (fn) in place of the
// engine's op name.
func (r *Runtime) layerResult(fn string, t *tensor.Tensor) goja.Value {
	if err := t.Err(); err != nil {
		msg := err.Error()
		if rest, ok := strings.CutPrefix(msg, "nn: "); ok {
			if _, after, found := strings.Cut(rest, ": "); found {
				msg = after
			}
		}
		r.throw(fmt.Errorf("%s: %s", fn, msg))
	}
	return r.wrap(t)
}

// intsOrOne reads PyTorch's int-or-tuple arguments: a number, or an array
// of numbers; nil when absent.
func (r *Runtime) intsOrOne(fn, what string, v goja.Value) []int {
	if isMissing(v) {
		return nil
	}
	if r.isArray(v) {
		return r.intList(fn, what, v)
	}
	return []int{r.intValue(fn, what, v)}
}

// paddingArg reads a convolution's padding: a number, an array of numbers,
// or "same" / "valid".
func (r *Runtime) paddingArg(fn string, v goja.Value) ([]int, string) {
	if isMissing(v) {
		return nil, ""
	}
	if s, ok := stringOf(v); ok {
		if s != "same" && s != "valid" {
			r.throwRangef("%s: invalid padding string %q: padding is a number, an array of numbers, \"same\" or \"valid\"", fn, s)
		}
		return nil, s
	}
	return r.intsOrOne(fn, "padding", v), ""
}
