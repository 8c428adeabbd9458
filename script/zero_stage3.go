package script

import (
	"errors"
	"fmt"
	"slices"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// The script side of ZeRO stage 3. zero.init(fn) builds a model without
// its memory: the tensors fn makes through the factories (tensor.empty,
// zeros, ones, full, rand, randn), the layers' initialisations and
// io.loadSafetensors are lazy (engine/tensor's Lazy): their in-place
// initialisations are recorded, the generator moves on as they would move
// it, and the stage-3 optimizer makes only each rank's slices from them.
// Used any other way first, a lazy tensor makes all of its values, so
// nothing ever reads other values than the same script without
// zero.init would.
//
// zero.fullyShard(module) (prelude.js) records the module's own
// parameters as a unit and wraps its forward in native.zero.beforeForward
// / afterForward; a ZeroRedundancyOptimizer with stage: 3 is then made
// over the units and shards them (zero/stage3.go). Before that optimizer
// exists the wrappers do nothing: the parameters are whole (or lazy, under
// zero.init), as FSDP2's are not, but a script marks its units first and
// makes its optimizer next, as in PyTorch.

// zeroPlan is the script's stage-3 plan (zero.Plan): the units
// zero.fullyShard marked and, once made, the optimizer that shards them.
func (r *Runtime) zeroPlan() *zero.Plan {
	if r.plan == nil {
		r.plan = zero.NewPlan()
	}
	return r.plan
}

// stage3 is the script's stage-3 optimizer, or nil before it is made.
func (r *Runtime) stage3() *zero.Optimizer {
	if r.plan == nil {
		return nil
	}
	return r.plan.Optimizer()
}

// nativeStage3 adds the unit functions to native.zero.
func (r *Runtime) nativeStage3(o *goja.Object) {
	r.stage3Natives(o)
	// unit(params, reshardAfterForward) → the unit's number.
	// lazyInit(fn): fn() with the tensors it makes lazy (zero.init).
	r.fn(o, "lazyInit", func(call goja.FunctionCall) goja.Value {
		f, ok := goja.AssertFunction(call.Argument(0))
		if !ok {
			r.throwf("zero.init(fn): fn must be a function that builds the model, got %s", describe(call.Argument(0)))
		}
		r.lazyInit++
		defer func() { r.lazyInit-- }()
		v, err := f(goja.Undefined())
		r.rethrow(err)
		return v
	})
	r.fn(o, "unit", func(call goja.FunctionCall) goja.Value {
		const fn = "zero.fullyShard"
		if r.stage3() != nil {
			r.throwf("%s: the stage-3 optimizer is made already: mark every unit (each block, then the model) before making it", fn)
		}
		params := r.tensorList(fn, call.Argument(0))
		id, err := r.zeroPlan().FullyShard(params, call.Argument(1).ToBoolean())
		if err != nil {
			r.throwf("%s: %v", fn, err)
		}
		return r.vm.ToValue(id)
	})
	r.fn(o, "beforeForward", func(call goja.FunctionCall) goja.Value {
		if u := r.stage3Unit(call.Argument(0)); u != nil {
			if err := u.BeforeForward(); err != nil {
				r.throw(err)
			}
		}
		return goja.Undefined()
	})
	// afterForward(id, output): the output is a tensor, or arrays and
	// plain objects of them (what a module's forward returns).
	r.fn(o, "afterForward", func(call goja.FunctionCall) goja.Value {
		if u := r.stage3Unit(call.Argument(0)); u != nil {
			var outs []*tensor.Tensor
			for _, j := range collectTensors(call.Argument(1).Export()) {
				if j.released == "" {
					outs = append(outs, j.t)
				}
			}
			if err := u.AfterForward(outs); err != nil {
				r.throw(err)
			}
		}
		return goja.Undefined()
	})
}

// stage3Natives adds what Module.stateDict and loadStateDict use under
// stage 3 (prelude.js).
func (r *Runtime) stage3Natives(o *goja.Object) {
	// sharded(params): whether a stage-3 optimizer shards any of them.
	r.fn(o, "sharded", func(call goja.FunctionCall) goja.Value {
		if r.stage3() == nil {
			return r.vm.ToValue(false)
		}
		return r.vm.ToValue(r.zeroPlan().Sharded(r.tensorList("stateDict", call.Argument(0))))
	})
	r.fn(o, "stateDict", r.stage3StateDict)
	r.fn(o, "loadStateDict", r.stage3LoadStateDict)
	// withFullParams(writeBack, fn): fn with the whole model gathered.
	r.fn(o, "withFullParams", func(call goja.FunctionCall) goja.Value {
		f, _ := goja.AssertFunction(call.Argument(1))
		return r.callWithFullParams(r.stage3(), call.Argument(0).ToBoolean(), f)
	})
}

// paramPlace is where a parameter the stage-3 optimizer shards lies:
// bucket, the parameter's offset in it, and this rank's slice [lo, hi).
type paramPlace struct {
	bucket, offset, lo, hi int
}

// mine is the range [s, e) of the flattened parameter of n elements that
// this rank's slice holds (s == e: none).
func (pl paramPlace) mine(n int) (s, e int) {
	s = min(max(pl.lo-pl.offset, 0), n)
	e = max(min(pl.hi-pl.offset, n), s)
	return s, e
}

// stage3Places maps every parameter the stage-3 optimizer shards to its
// place (nil without one).
func (r *Runtime) stage3Places() map[*tensor.Tensor]paramPlace {
	z := r.stage3()
	if z == nil {
		return nil
	}
	out := map[*tensor.Tensor]paramPlace{}
	for i := range z.NumFlatBuckets() {
		params, offsets, _, lo, hi := z.FlatBucket(i)
		for j, p := range params {
			out[p] = paramPlace{bucket: i, offset: offsets[j], lo: lo, hi: hi}
		}
	}
	return out
}

// stage3StateDict(raw, type, rank0Only, offloadToCpu) is Module.stateDict
// (its options checked in prelude.js): raw is the module's own tensors by
// name. Without a stage-3 optimizer sharding them it returns raw (on every
// rank, or on rank 0 only). Under one, { type: "full" } gathers each
// sharded parameter whole in turn (GatherParam: only that tensor is ever
// put together, in host memory) into a copy, on every rank or on rank 0
// only; { type: "sharded" } returns, without communication, a copy of this
// rank's part of each, as { shard, offset, shape }. Other tensors are
// copies (full) or themselves (sharded).
func (r *Runtime) stage3StateDict(call goja.FunctionCall) goja.Value {
	const fn = "Module.stateDict"
	raw, ok := call.Argument(0).(*goja.Object)
	if !ok {
		r.throwf("%s: expects a state dict", fn)
	}
	typ := call.Argument(1).String()
	if typ != "full" && typ != "sharded" {
		r.throwRangef(`%s: type must be "full" or "sharded", got %s`, fn, describe(call.Argument(1)))
	}
	rank0Only, offload := call.Argument(2), call.Argument(3)
	for _, v := range []goja.Value{rank0Only, offload} {
		if _, isBool := v.Export().(bool); !isBool {
			r.throwf("%s: rank0Only and offloadToCpu must be booleans, got %s", fn, describe(v))
		}
	}
	if typ == "sharded" && rank0Only.ToBoolean() {
		r.throwRangef(`%s: rank0Only applies to type "full" (each rank's sharded state dict is its own)`, fn)
	}
	if offload.ToBoolean() && r.rt.Device().Kind() != device.CPU {
		// A script's tensors live on its rank's device: there is no CPU
		// tensor to hand back yet (the gathering itself goes through host
		// memory, one tensor at a time).
		r.throwf("%s: offloadToCpu is not supported on a %s rank yet (the script holds tensors of its own device only); on a CPU rank it changes nothing", fn, r.rt.Device().Kind())
	}
	places := r.stage3Places()
	names := raw.Keys()
	tensors := make([]*tensor.Tensor, len(names))
	anySharded := false
	for i, k := range names {
		tensors[i] = r.unwrap(fn, k, raw.Get(k))
		_, sharded := places[tensors[i]]
		anySharded = anySharded || sharded
	}
	rank := r.opts.Rank
	if r.stage3() != nil {
		rank = r.stage3().ProcessGroup().Rank()
	}
	if !anySharded {
		if rank0Only.ToBoolean() && rank != 0 {
			return r.vm.NewObject()
		}
		return raw
	}
	out := r.vm.NewObject()
	z := r.stage3()
	if typ == "sharded" {
		for i, k := range names {
			t := tensors[i]
			pl, sharded := places[t]
			if !sharded {
				must(out.Set(k, raw.Get(k)))
				continue
			}
			s, e := pl.mine(t.Numel())
			var shard *tensor.Tensor
			if s < e {
				slice, err := z.ParamSlice(pl.bucket)
				if err != nil {
					r.throw(err)
				}
				view := slice.Narrow(0, pl.offset+s-pl.lo, e-s)
				shard = view.Clone()
				view.Release()
			} else {
				shard = r.rt.Empty(t.DType(), 0)
			}
			entry := r.vm.NewObject()
			must(entry.Set("shard", r.wrap(shard)))
			must(entry.Set("offset", s))
			must(entry.Set("shape", toAnyInts(t.Shape())))
			must(out.Set(k, entry))
		}
		return out
	}
	to := -1
	if rank0Only.ToBoolean() {
		to = 0
	}
	done := map[*tensor.Tensor]goja.Value{} // a parameter under two names: one copy
	for i, k := range names {
		t := tensors[i]
		if v, ok := done[t]; ok {
			if v != nil {
				must(out.Set(k, v))
			}
			continue
		}
		var v goja.Value
		if _, sharded := places[t]; sharded {
			b, err := z.GatherParam(t, 0, t.Numel(), to)
			if err != nil {
				r.throw(err)
			}
			if b != nil {
				v = r.wrap(r.rt.FromBytes(t.DType(), b, t.Shape()...))
			}
		} else if to < 0 || rank == to {
			v = r.wrap(t.Detach().Clone())
		}
		done[t] = v
		if v != nil {
			must(out.Set(k, v))
		}
	}
	return out
}

func toAnyInts(xs []int) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// stage3LoadStateDict(raw, sd, strict) is Module.loadStateDict under stage
// 3: each rank writes its own slice of every sharded parameter from the
// given whole tensor (a full state dict, on every rank) or from its shard
// (a sharded state dict made under the same world size and units), and
// the other tensors whole, without gathering a unit and without
// communication. Everything is checked before anything is written.
func (r *Runtime) stage3LoadStateDict(call goja.FunctionCall) goja.Value {
	const fn = "Module.loadStateDict"
	ownObj, ok1 := call.Argument(0).(*goja.Object)
	sdObj, ok2 := call.Argument(1).(*goja.Object)
	if !ok1 || !ok2 || r.isTensor(call.Argument(1)) {
		r.throwf("%s: expects a state dict (an object of tensors), got %s", fn, describe(call.Argument(1)))
	}
	strict := boolArg(call, 2, true)
	type source struct {
		full   *tensor.Tensor
		shard  *tensor.Tensor
		offset int
		shape  []int
	}
	sd := map[string]source{}
	for _, name := range sdObj.Keys() {
		v := sdObj.Get(name)
		if isMissing(v) {
			continue
		}
		if r.isTensor(v) {
			sd[name] = source{full: r.unwrap(fn, name, v)}
			continue
		}
		o, ok := v.(*goja.Object)
		if !ok || !r.isTensor(o.Get("shard")) {
			r.throwf("Error(s) in loading state_dict:\n\t%s: expected a tensor or a shard { shard, offset, shape }, got %s", name, describe(v))
		}
		var shape []int
		for _, d := range r.intList(fn, "shape", o.Get("shape")) {
			shape = append(shape, d)
		}
		sd[name] = source{shard: r.unwrap(fn, name+".shard", o.Get("shard")), offset: r.intValue(fn, name+".offset", o.Get("offset")), shape: shape}
	}
	places := r.stage3Places()
	var missing, unexpected, msgs []string
	type write struct {
		dst *tensor.Tensor // a tensor written whole, or
		pl  paramPlace     // a parameter's slice
		s   int
		src source
		t   *tensor.Tensor
	}
	var writes []write
	known := map[string]bool{}
	for _, name := range ownObj.Keys() {
		t := r.unwrap(fn, "parameter "+name, ownObj.Get(name))
		known[name] = true
		src, ok := sd[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		shape := src.shape
		if src.full != nil {
			shape = src.full.Shape()
		}
		if !slices.Equal(shape, t.Shape()) {
			msgs = append(msgs, fmt.Sprintf("size mismatch for %s: copying a param with shape %v from checkpoint, the shape in current model is %v", name, shape, t.Shape()))
			continue
		}
		pl, sharded := places[t]
		s, e := pl.mine(t.Numel())
		switch {
		case src.shard != nil && !sharded:
			msgs = append(msgs, fmt.Sprintf("%s: a shard of a tensor that ZeRO stage 3 does not shard", name))
			continue
		case src.shard != nil && (src.offset != s || src.shard.Numel() != e-s):
			msgs = append(msgs, fmt.Sprintf("%s: the shard holds elements [%d, %d) and this rank keeps [%d, %d): load a sharded state dict under the world size and units that made it, or a full one", name, src.offset, src.offset+src.shard.Numel(), s, e))
			continue
		}
		w := write{src: src, t: t}
		if sharded {
			w.pl, w.s = pl, s
			if s == e {
				continue // nothing of it here
			}
		} else {
			w.dst = t
		}
		writes = append(writes, w)
	}
	for name := range sd {
		if !known[name] {
			unexpected = append(unexpected, name)
		}
	}
	slices.Sort(unexpected)
	if err := nn.LoadStateDictError(strict, missing, unexpected, msgs); err != nil {
		r.throwf("Error(s) in loading state_dict:\n\t%v", err)
	}
	z := r.stage3()
	sc := r.rt.OpenScope()
	defer sc.Close()
	var err error
	written := map[int]bool{}
	r.rt.NoGrad(func() {
		for _, w := range writes {
			if w.dst != nil {
				if err = w.dst.CopyFrom(w.src.full); err != nil {
					return
				}
				continue
			}
			s, e := w.pl.mine(w.t.Numel())
			slice, serr := z.ParamSlice(w.pl.bucket)
			if serr != nil {
				err = serr
				return
			}
			src := w.src.shard
			if src == nil {
				src = w.src.full.Reshape(-1).Narrow(0, s, e-s)
			}
			if err = slice.Narrow(0, w.pl.offset+s-w.pl.lo, e-s).CopyFrom(src); err != nil {
				return
			}
			written[w.pl.bucket] = true
		}
	})
	for b := range written {
		if werr := z.SliceWritten(b); err == nil {
			err = werr
		}
	}
	if err != nil {
		r.throwf("Error(s) in loading state_dict:\n\t%v", err)
	}
	return r.vm.ToValue(map[string]any{"missingKeys": toAny(missing), "unexpectedKeys": toAny(unexpected)})
}

// callWithFullParams calls f with z's whole model gathered (under stage 3)
// and returns its value; after a failure of f nothing is written back,
// and its exception is thrown as it was.
func (r *Runtime) callWithFullParams(z *zero.Optimizer, writeBack bool, f goja.Callable) goja.Value {
	var out goja.Value
	r.rethrow(z.WithFullParams(writeBack, func() (err error) {
		out, err = f(goja.Undefined())
		return err
	}))
	return out
}

// rethrow raises err in the script: a JavaScript exception as it was
// thrown, any other error as an Error.
func (r *Runtime) rethrow(err error) {
	if err == nil {
		return
	}
	var ex *goja.Exception
	if errors.As(err, &ex) {
		panic(ex)
	}
	r.throw(err)
}

// stage3Unit is unit id of the stage-3 optimizer, or nil before there is
// one.
func (r *Runtime) stage3Unit(id goja.Value) *zero.Unit {
	if r.stage3() == nil {
		return nil
	}
	return r.stage3().Unit(int(id.ToInteger()))
}
