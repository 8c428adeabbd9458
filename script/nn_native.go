package script

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/rand"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// nativeNN installs what the JavaScript module system (prelude.js) builds
// on: torch.nn.functional, PyTorch's layer initialisations, parameters, and
// state-dict loading.
func (r *Runtime) nativeNN(native *goja.Object) {
	F := r.vm.NewObject()
	must(native.Set("functional", F))
	opt := func(fn string, call goja.FunctionCall, i int, known ...string) *goja.Object {
		return r.optionsOf(fn, call, i, known...)
	}
	maybe := func(fn, what string, v goja.Value) *tensor.Tensor {
		if isMissing(v) {
			return nil
		}
		return r.unwrap(fn, what, v)
	}
	r.fn(F, "linear", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.linear"
		return r.wrap(tensor.Linear(r.unwrap(fn, "input", call.Argument(0)), r.unwrap(fn, "weight", call.Argument(1)), maybe(fn, "bias", call.Argument(2))))
	})
	act := func(name string, f func(*tensor.Tensor) *tensor.Tensor) {
		r.fn(F, name, func(call goja.FunctionCall) goja.Value {
			return r.wrap(f(r.unwrap("nn.functional."+name, "input", call.Argument(0))))
		})
	}
	act("relu", (*tensor.Tensor).Relu)
	act("silu", (*tensor.Tensor).Silu)
	act("tanh", (*tensor.Tensor).Tanh)
	act("sigmoid", (*tensor.Tensor).Sigmoid)
	r.fn(F, "gelu", func(call goja.FunctionCall) goja.Value {
		approx := "none"
		if o := opt("nn.functional.gelu", call, 1, "approximate"); o != nil {
			approx = optString(o, "approximate", "none")
		} else if v := call.Argument(1); !isMissing(v) {
			approx = v.String()
		}
		return r.wrap(r.unwrap("nn.functional.gelu", "input", call.Argument(0)).Gelu(approx))
	})
	dimFn := func(name string, f func(*tensor.Tensor, int) *tensor.Tensor) {
		r.fn(F, name, func(call goja.FunctionCall) goja.Value {
			fn := "nn.functional." + name
			d := -1
			if o := opt(fn, call, 1, "dim"); o != nil {
				d = r.optInt(fn, o, "dim", -1)
			} else {
				d = r.intArg(fn, "dim", call, 1, -1)
			}
			return r.wrap(f(r.unwrap(fn, "input", call.Argument(0)), d))
		})
	}
	dimFn("softmax", (*tensor.Tensor).Softmax)
	dimFn("logSoftmax", (*tensor.Tensor).LogSoftmax)
	r.fn(F, "layerNorm", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.layerNorm"
		x := r.unwrap(fn, "input", call.Argument(0))
		shape := r.dimsArg(fn, call.Argument(1))
		eps := 1e-5
		if v := call.Argument(4); !isMissing(v) {
			eps = r.numberValue(fn, "eps", v)
		}
		return r.wrap(tensor.LayerNorm(x, shape, maybe(fn, "weight", call.Argument(2)), maybe(fn, "bias", call.Argument(3)), eps))
	})
	r.fn(F, "embedding", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.embedding"
		idx, w := r.unwrap(fn, "input", call.Argument(0)), r.unwrap(fn, "weight", call.Argument(1))
		pad := int64(-1) // the engine's "no padding row"
		if v := optValue(opt(fn, call, 2, "paddingIdx"), "paddingIdx"); v != nil && w.Dim() > 0 {
			pad = int64(r.paddingIdx(fn, v, w.Shape()[0]))
		}
		return r.wrap(tensor.Embedding(idx, w, pad))
	})
	r.fn(F, "dropout", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.dropout"
		p, training := 0.5, true
		if o := opt(fn, call, 1, "p", "training"); o != nil {
			p, training = r.optNumber(fn, o, "p", 0.5), optBool(o, "training", true)
		} else {
			if v := call.Argument(1); !isMissing(v) {
				p = r.numberValue(fn, "p", v)
			}
			training = boolArg(call, 2, true)
		}
		return r.wrap(tensor.Dropout(r.unwrap(fn, "input", call.Argument(0)), p, training, r.rt.Generator()))
	})
	r.fn(F, "crossEntropy", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.crossEntropy"
		o := opt(fn, call, 2, "reduction", "ignoreIndex", "labelSmoothing")
		ce := tensor.CrossEntropyOptions{
			Reduction:      tensor.Reduction(optString(o, "reduction", "mean")),
			IgnoreIndex:    int64(r.optInt(fn, o, "ignoreIndex", -100)),
			LabelSmoothing: r.optNumber(fn, o, "labelSmoothing", 0),
		}
		return r.wrap(tensor.CrossEntropy(r.unwrap(fn, "input", call.Argument(0)), r.unwrap(fn, "target", call.Argument(1)), ce))
	})
	r.fn(F, "mseLoss", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.mseLoss"
		red := tensor.Reduction(optString(opt(fn, call, 2, "reduction"), "reduction", "mean"))
		return r.wrap(tensor.MSELoss(r.unwrap(fn, "input", call.Argument(0)), r.unwrap(fn, "target", call.Argument(1)), red))
	})
	r.fn(F, "scaledDotProductAttention", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.functional.scaledDotProductAttention"
		causal := optBool(opt(fn, call, 3, "isCausal"), "isCausal", false)
		return r.wrap(tensor.ScaledDotProductAttention(r.unwrap(fn, "query", call.Argument(0)), r.unwrap(fn, "key", call.Argument(1)), r.unwrap(fn, "value", call.Argument(2)), causal))
	})

	r.nativeLayers(native, F)

	// PyTorch's default initialisations, draw for draw from the rank's
	// generator.
	// checkOptions(fn, options, keys): the prelude's layers check their
	// options objects as the Go half does (checkKeys).
	r.fn(native, "checkOptions", func(call goja.FunctionCall) goja.Value {
		o, _ := call.Argument(1).(*goja.Object)
		if o != nil && !r.isTensor(o) {
			var keys []string
			if err := r.vm.ExportTo(call.Argument(2), &keys); err != nil {
				r.throwf("checkOptions: %v", err)
			}
			r.checkKeys(call.Argument(0).String(), o, keys...)
		}
		return goja.Undefined()
	})
	r.fn(native, "linearInit", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.Linear"
		in, out := r.intValue(fn, "inFeatures", call.Argument(0)), r.intValue(fn, "outFeatures", call.Argument(1))
		bias := boolArg(call, 2, true)
		if err := tensor.CheckShape(dtype.Float32, out, in); err != nil {
			r.throwf("%s(%d, %d): %v", fn, in, out, err)
		}
		return r.linearParams(fn, []int{out, in}, in, bias)
	})
	r.fn(native, "embeddingInit", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.Embedding"
		num, dim := r.intValue(fn, "numEmbeddings", call.Argument(0)), r.intValue(fn, "embeddingDim", call.Argument(1))
		if err := tensor.CheckShape(dtype.Float32, num, dim); err != nil {
			r.throwf("%s(%d, %d): %v", fn, num, dim, err)
		}
		// Embedding.reset_parameters: normal_(0, 1) over the whole weight
		// (rand.EmbeddingInit), in the tensor's memory; then the padding
		// row is zeroed.
		w := r.newTensor(dtype.Float32, num, dim)
		if err := w.FillRandom(r.rt.Generator(), tensor.Normal(0, 1)); err != nil {
			w.Release()
			r.throw(fmt.Errorf("%s(%d, %d): %w", fn, num, dim, err))
		}
		if v := call.Argument(2); !isMissing(v) {
			pad := r.paddingIdx(fn, v, num)
			row := w.Narrow(0, pad, 1)
			err := row.Zero()
			row.Release()
			if err != nil {
				w.Release()
				r.throw(err)
			}
		}
		return r.wrap(w)
	})
	r.method(native, "parameter", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.Parameter"
		j := asJSTensor(call.Argument(0))
		if j == nil {
			r.throwf("%s: expects a tensor, got %s", fn, describe(call.Argument(0)))
		}
		t := r.live(fn, j)
		if !t.IsLeaf() {
			t = t.Detach()
			j = &jsTensor{r: r, t: t.Persist()}
			j.obj = r.vm.NewDynamicObject(j)
		}
		if err := t.SetRequiresGrad(boolArg(call, 1, true)); err != nil {
			r.throw(err)
		}
		r.life.keep(j)
		j.param = true
		return j.obj
	})
	// optimizerRepr(name, paramGroups): PyTorch's print form of an
	// optimizer, shared by the native ones and the Optimizer class.
	r.method(native, "optimizerRepr", func(call goja.FunctionCall) goja.Value {
		return r.vm.ToValue(r.optimizerRepr(call.Argument(0).String(), call.Argument(1)))
	})
	r.method(native, "isParameter", func(call goja.FunctionCall) goja.Value {
		j := asJSTensor(call.Argument(0))
		return r.vm.ToValue(j != nil && j.param)
	})
	r.fn(native, "loadStateDict", r.loadStateDict)
	r.fn(native, "checkpoint", r.activationCheckpoint)
	r.fn(native, "normalInit", r.normalInit)
	r.fn(native, "uniformInit", r.uniformInit)
	r.fn(native, "truncNormal", r.truncNormalInit)
	r.fn(native, "moduleTo", r.moduleTo)
	r.fn(native, "clipGradNorm", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.utils.clipGradNorm_"
		params := r.tensorList(fn, call.Argument(0))
		r.refuseSteppedInBackward(fn, "clipping needs the norm of the whole gradient before the step", params)
		maxNorm := r.numberValue(fn, "maxNorm", call.Argument(1))
		total, err := optim.ClipGradNorm(params, maxNorm, r.normTypeArg(fn, call.Argument(2)))
		if err != nil {
			r.throw(err)
		}
		return r.vm.ToValue(total)
	})
}

// normTypeArg is clip_grad_norm_'s norm_type: a number, "inf" or
// Infinity; 2 when absent.
func (r *Runtime) normTypeArg(fn string, v goja.Value) float64 {
	switch {
	case isMissing(v):
		return 2
	case v.String() == "inf" || v.String() == "Infinity":
		return math.Inf(1)
	}
	return r.numberValue(fn, "normType", v)
}

// moduleTo(entries, arg) is Module.to: entries are [name, tensor] pairs
// (parameters, then buffers); arg is a dtype ("bfloat16"), a device, or
// { dtype, device }. Floating-point entries are converted in place
// (module.to keeps every parameter's identity, so optimizers made before
// still hold them). Each rank's tensors already live on its device: a
// device of that kind ("cuda" on a cuda:3 rank) is accepted and changes
// nothing (sameDevice).
func (r *Runtime) moduleTo(call goja.FunctionCall) goja.Value {
	const fn = "Module.to"
	dtArg, dev := call.Argument(1), goja.Value(nil)
	if o := r.optionsOf(fn, call, 1, "dtype", "device"); o != nil {
		dtArg, dev = optValue(o, "dtype"), optValue(o, "device")
		if dtArg == nil && dev == nil {
			r.throwf("%s: expects a dtype (\"bfloat16\"), a device or { dtype, device }, got an object with neither", fn)
		}
	} else if isMissing(dtArg) {
		r.throwf("%s: expects a dtype (\"bfloat16\") or a device", fn)
	} else if isDeviceName(dtArg.String()) {
		dtArg, dev = nil, dtArg
	}
	if dev != nil {
		r.sameDevice(fn, dev, r.rt.Device().String())
	}
	if dtArg == nil {
		return goja.Undefined()
	}
	s := dtArg.String()
	dt, ok := dtype.Parse(s)
	if !ok {
		r.throwf("%s: unknown dtype %s (float32, float64, bfloat16, float16)", fn, describe(dtArg))
	}
	if !dt.IsFloat() {
		r.throwf("%s(%q): only a floating-point dtype converts a module", fn, s)
	}
	entries, ok := call.Argument(0).Export().([]any)
	if !ok {
		r.throwf("%s: internal: entries must be an array", fn)
	}
	for _, e := range entries {
		pair, _ := e.([]any)
		if len(pair) != 2 {
			r.throwf("%s: internal: entries must be [name, tensor] pairs", fn)
		}
		j, ok := pair[1].(*jsTensor)
		if !ok {
			continue
		}
		if !j.t.DType().IsFloat() {
			continue
		}
		if err := j.t.Retype(dt); err != nil {
			r.throwf("%s(%q): %v: %v", fn, s, pair[0], err)
		}
	}
	return goja.Undefined()
}

// paddingIdx is the padding row v of an embedding of num rows, as
// PyTorch's F.embedding and nn.Embedding read padding_idx: a negative one
// counts from the end (padding_idx + num_embeddings); out of range is an
// error.
func (r *Runtime) paddingIdx(fn string, v goja.Value, num int) int {
	pad := r.intValue(fn, "paddingIdx", v)
	if pad < -num || pad >= num {
		r.throwRangef("%s: paddingIdx %d must be within numEmbeddings %d (from %d to %d)", fn, pad, num, -num, num-1)
	}
	if pad < 0 {
		pad += num
	}
	return pad
}

// isDeviceName reports whether s names a device ("cpu", "cuda", "cuda:1").
func isDeviceName(s string) bool {
	kind, _, _ := strings.Cut(s, ":")
	return kind == "cpu" || kind == "cuda"
}

// sameDevice checks that the device v of fn is one of the kind of here,
// the device a rank's tensors live on ("cuda" or "cuda:0" on a cuda:3
// rank, as Module.to has always taken them): tensors do not move between
// devices, so any other device is an error, never a silent no-op.
func (r *Runtime) sameDevice(fn string, v goja.Value, here string) {
	s := v.String()
	if !isDeviceName(s) {
		r.throwf("%s: unknown device %s (\"cpu\", \"cuda\", \"cuda:0\", ...)", fn, describe(v))
	}
	kind, _, _ := strings.Cut(here, ":")
	if want, _, _ := strings.Cut(s, ":"); want != kind {
		r.throwf("%s(%q): this rank runs on %s; tensors live on the rank's device (zeroeng run --device)", fn, s, here)
	}
}

// loadStateDict(own, sd, strict): own maps a module's names to its tensors,
// sd the loaded ones. Everything is checked before anything is copied, so a
// failed load leaves the module as it was; the messages are PyTorch's.
func (r *Runtime) loadStateDict(call goja.FunctionCall) goja.Value {
	const fn = "Module.loadStateDict"
	ownObj, ok1 := call.Argument(0).(*goja.Object)
	sdObj, ok2 := call.Argument(1).(*goja.Object)
	if !ok1 || !ok2 {
		r.throwf("%s: expects a state dict (an object of tensors), got %s", fn, describe(call.Argument(1)))
	}
	strict := boolArg(call, 2, true)
	var own []nn.NamedTensor
	for _, name := range ownObj.Keys() {
		own = append(own, nn.NamedTensor{Name: name, Tensor: r.unwrap(fn, "parameter "+name, ownObj.Get(name))})
	}
	sd := map[string]*tensor.Tensor{}
	for _, name := range sdObj.Keys() {
		v := sdObj.Get(name)
		if isMissing(v) {
			continue
		}
		if !r.isTensor(v) {
			r.throwf("Error(s) in loading state_dict:\n\t%s: expected a tensor, got %s", name, describe(v))
		}
		sd[name] = r.unwrap(fn, name, v)
	}
	missing, unexpected, err := nn.CopyStateDict(own, sd, strict)
	if err != nil {
		r.throwf("Error(s) in loading state_dict:\n\t%v%s", err, ddpPrefixHint(ownObj.Keys(), sdObj.Keys()))
	}
	// An object of its own rather than a Go map, whose keys goja lists in
	// Go's random map order: the keys in PyTorch's order (_IncompatibleKeys'
	// missing_keys, unexpected_keys), the same in every run.
	res := r.vm.NewObject()
	must(res.Set("missingKeys", toAny(missing)))
	must(res.Set("unexpectedKeys", toAny(unexpected)))
	return res
}

// ddpPrefix is what DistributedDataParallel's state dict puts before its
// module's names.
const ddpPrefix = "module."

// ddpPrefixHint is what a failed load adds when the names differ by
// DistributedDataParallel's "module." prefix alone: a state dict saved from
// a wrapped model loaded into the bare one, or the other way round.
func ddpPrefixHint(own, loaded []string) string {
	allPrefixed := func(keys []string) bool {
		for _, k := range keys {
			if !strings.HasPrefix(k, ddpPrefix) {
				return false
			}
		}
		return len(keys) > 0
	}
	nonePrefixed := func(keys []string) bool {
		return !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, ddpPrefix) })
	}
	switch {
	case allPrefixed(loaded) && nonePrefixed(own):
		return "\n\tThe state dict was saved from a DistributedDataParallel model (its keys start with \"module.\"): " +
			"load it into the wrapped model (nn.parallel.DistributedDataParallel(model).loadStateDict(sd)), " +
			"or strip the prefix with nn.utils.consumePrefixInStateDictIfPresent(sd, \"module.\")"
	case allPrefixed(own) && nonePrefixed(loaded):
		return "\n\tThe model is wrapped in DistributedDataParallel (its keys start with \"module.\") and the state dict is " +
			"of the bare model: load it into the wrapped one's module (model.module.loadStateDict(sd))"
	}
	return ""
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// linearParams returns [weight, bias] (bias null when !bias) of a layer
// with PyTorch's default initialisation (nn.Linear's reset_parameters,
// which _ConvNd's repeats): weight of shape shape, uniform_(-w, w), then
// bias of shape[0] elements, uniform_(-b, b), with (w, b) =
// rand.LinearBounds(fanIn), drawn into the tensors' own memory (the draws
// of rand.LinearInit).
func (r *Runtime) linearParams(fn string, shape []int, fanIn int, bias bool) goja.Value {
	g := r.rt.Generator()
	wb, bb := rand.LinearBounds(fanIn)
	w := r.newTensor(dtype.Float32, shape...)
	if err := w.FillRandom(g, tensor.Uniform(-wb, wb)); err != nil {
		w.Release()
		r.throw(fmt.Errorf("%s: weight of shape %v: %w", fn, shape, err))
	}
	wt := r.wrap(w)
	if !bias {
		return r.vm.NewArray(wt, goja.Null())
	}
	b := r.newTensor(dtype.Float32, shape[0])
	if err := b.FillRandom(g, tensor.Uniform(-bb, bb)); err != nil {
		b.Release()
		r.throw(fmt.Errorf("%s: bias of %d elements: %w", fn, shape[0], err))
	}
	return r.vm.NewArray(wt, r.wrap(b))
}

// newTensor is memory for a new tensor the script's code fills in place:
// lazy inside zero.init (the fills are recorded), else uninitialised.
func (r *Runtime) newTensor(dt dtype.DType, shape ...int) *tensor.Tensor {
	if r.lazyInit > 0 {
		return r.rt.Lazy(dt, shape...)
	}
	return r.rt.Empty(dt, shape...)
}
