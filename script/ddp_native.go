package script

import (
	"errors"
	"fmt"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// nativeDDP adds native.ddp(namedParameters, options, namedBuffers), the
// Go reducer under nn.parallel.DistributedDataParallel (prelude.js):
// options are bucketCapMB, firstBucketCapMB, gradientAsBucketView,
// findUnusedParameters, staticGraph, broadcastBuffers (rank 0's buffers
// before every forward; true by default) and processGroup (a group from
// dist.newGroup; the group of all ranks by default).
func (r *Runtime) nativeDDP(native *goja.Object) {
	// asWorldGroup(obj) makes the dist module that scripts see a handle on
	// the group of all ranks, as dist.newGroup's objects are on theirs.
	r.fn(native, "asWorldGroup", func(call goja.FunctionCall) goja.Value {
		obj, ok := call.Argument(0).(*goja.Object)
		if !ok {
			r.throwf("asWorldGroup: expects an object")
		}
		if r.groups == nil {
			r.groups = map[*goja.Object]dist.ProcessGroup{}
		}
		r.groups[obj] = r.group
		r.worldObject = obj
		return obj
	})
	// dist.join(joinables, fn, options): PyTorch's Join context over a
	// DistributedDataParallel model and, optionally, its
	// ZeroRedundancyOptimizer: fn is this rank's training loop; ranks that
	// run out of inputs first shadow the others' iterations, or, with
	// throwOnEarlyTermination, stop every rank with an error.
	r.fn(native, "join", func(call goja.FunctionCall) goja.Value {
		const fn = "dist.join"
		list, ok := call.Argument(0).(*goja.Object)
		if !ok || !r.isArray(list) {
			r.throwf("%s(joinables, fn, options): joinables must be an array of a DistributedDataParallel model and its ZeroRedundancyOptimizer, got %s", fn, describe(call.Argument(0)))
		}
		loop, ok := goja.AssertFunction(call.Argument(1))
		if !ok {
			r.throwf("%s(joinables, fn, options): fn must be a function (the training loop), got %s", fn, describe(call.Argument(1)))
		}
		o := r.options(call, 2)
		r.checkKeys(fn, o, "throwOnEarlyTermination", "enable")
		var d *ddp.DDP
		var z *zero.Optimizer
		var jsStep goja.Callable // ZeRO over an optimizer class (prelude.js)
		for i := 0; i < int(list.Get("length").ToInteger()); i++ {
			v := list.Get(fmt.Sprint(i))
			opt, ok := r.zeroOptimizerOf(v)
			var step goja.Callable
			if obj, isObj := v.(*goja.Object); isObj && !ok {
				step, _ = goja.AssertFunction(obj.Get("__joinStep"))
			}
			if ok || step != nil {
				if z != nil || jsStep != nil {
					r.throwf("%s: more than one ZeroRedundancyOptimizer among the joinables", fn)
				}
				z, jsStep = opt, step
				continue
			}
			if d != nil {
				r.throwf("%s: more than one DistributedDataParallel model among the joinables", fn)
			}
			d = r.ddpOf(fn, v)
		}
		if d == nil {
			r.throwf("%s: the joinables need a DistributedDataParallel model (whose reductions the ranks that ended shadow)", fn)
		}
		var result goja.Value
		var jsErr error
		body := func() error {
			result, jsErr = loop(goja.Undefined())
			return jsErr
		}
		if !optBool(o, "enable", true) {
			if err := body(); err != nil {
				panic(err)
			}
			return result
		}
		opts := ddp.JoinOptions{ThrowOnEarlyTermination: optBool(o, "throwOnEarlyTermination", false)}
		var err error
		switch {
		case z != nil:
			err = z.JoinWith(d, body, opts)
		case jsStep != nil:
			// A rank that ran out of inputs steps its shard with the
			// averaged gradients, as with a built-in optimizer.
			d.SetJoinStep(func() error {
				_, err := jsStep(goja.Undefined())
				return err
			})
			defer d.SetJoinStep(nil)
			err = d.JoinWith(body, opts)
		default:
			err = d.JoinWith(body, opts)
		}
		if jsErr != nil && !errors.Is(jsErr, ddp.ErrEarlyTermination) {
			panic(jsErr) // the loop's own exception, with its stack
		}
		if err != nil {
			r.throw(err)
		}
		return result
	})
	// dist.commHooks.PostLocalSGDState(options), checked when made.
	r.fn(native, "postLocalSGDState", func(call goja.FunctionCall) goja.Value {
		o := r.options(call, 0)
		if o == nil {
			r.throwf("dist.commHooks.PostLocalSGDState(options): options must be an object { startLocalSGDIter, subgroup, ... }, got %s", describe(call.Argument(0)))
		}
		r.postLocalSGD(o)
		return r.vm.ToValue(map[string]any{"postLocalSGDOptions": o})
	})
	// dist.PeriodicModelAverager({ period, warmupSteps, processGroup }).
	r.fn(native, "periodicModelAverager", func(call goja.FunctionCall) goja.Value {
		const fn = "dist.PeriodicModelAverager"
		o := r.options(call, 0)
		if o == nil {
			r.throwf("%s(options): options must be an object { period, warmupSteps, processGroup }, got %s", fn, describe(call.Argument(0)))
		}
		r.checkKeys(fn, o, "period", "warmupSteps", "processGroup")
		if optValue(o, "period") == nil {
			r.throwf("%s: period is required", fn)
		}
		// A null processGroup is dist.newGroup's answer on a rank outside
		// the group: its averaging leaves the parameters alone.
		var pg dist.ProcessGroup
		if v := o.Get("processGroup"); v == nil || !goja.IsNull(v) {
			pg = r.processGroupOption(fn, o)
		}
		a, err := ddp.NewPeriodicModelAverager(pg, r.optInt(fn, o, "period", 0), r.optInt(fn, o, "warmupSteps", 0))
		if err != nil {
			r.throwRangef("%v", err)
		}
		obj := r.vm.NewObject()
		r.fn(obj, "averageParameters", func(call goja.FunctionCall) goja.Value {
			if err := a.AverageParameters(r.tensorList(fn+".averageParameters", call.Argument(0))); err != nil {
				r.throw(err)
			}
			return goja.Undefined()
		})
		must(obj.DefineAccessorProperty("step", r.vm.ToValue(func(goja.FunctionCall) goja.Value { return r.vm.ToValue(a.Step()) }),
			nil, goja.FLAG_FALSE, goja.FLAG_TRUE))
		return obj
	})
	// dist.commHooks.PowerSGDState(options): checked when made, as
	// PyTorch's constructor checks them.
	r.fn(native, "powerSGDState", func(call goja.FunctionCall) goja.Value {
		o := r.options(call, 0)
		if o == nil {
			if !isMissing(call.Argument(0)) {
				r.throwf("dist.commHooks.PowerSGDState: options must be an object, got %s", describe(call.Argument(0)))
			}
			o = r.vm.NewObject()
		}
		r.powerSGDOptions(o)
		return r.vm.ToValue(map[string]any{"powerSGDOptions": o})
	})
	r.fn(native, "ddp", func(call goja.FunctionCall) goja.Value {
		const fn = "nn.parallel.DistributedDataParallel"
		named := func(v goja.Value, what string) []ddp.Param {
			var out []ddp.Param
			if isMissing(v) {
				return nil
			}
			pairs, ok := v.Export().([]any)
			if !ok {
				r.throwf("%s: internal: expected [name, %s] pairs", fn, what)
			}
			for i := range pairs {
				pair := v.ToObject(r.vm).Get(fmt.Sprint(i)).ToObject(r.vm)
				name := pair.Get("0").String()
				out = append(out, ddp.Param{Name: name, Tensor: r.unwrap(fn, what+" "+name, pair.Get("1"))})
			}
			return out
		}
		params := named(call.Argument(0), "parameter")
		buffers := named(call.Argument(2), "buffer")
		o := r.options(call, 1)
		r.checkKeys(fn, o, "bucketCapMB", "firstBucketCapMB", "gradientAsBucketView", "findUnusedParameters",
			"staticGraph", "broadcastBuffers", "processGroup")
		opts := ddp.Options{
			BucketCapMB:          optFloat(o, "bucketCapMB", 0),
			FirstBucketCapMB:     optFloat(o, "firstBucketCapMB", 0),
			GradientAsBucketView: optBool(o, "gradientAsBucketView", false),
			FindUnusedParameters: optBool(o, "findUnusedParameters", false),
			StaticGraph:          optBool(o, "staticGraph", false),
		}
		broadcastBuffers := optBool(o, "broadcastBuffers", true)
		pg := r.processGroupOption(fn, o)
		d, err := ddp.New(pg, params, opts)
		if err != nil {
			r.throw(err)
		}
		r.ddps = append(r.ddps, d)
		// Buffers (running statistics and the like) start as rank 0's, as
		// PyTorch's constructor syncs them with the parameters; with
		// broadcastBuffers (PyTorch's default) every forward pass takes
		// rank 0's again, so that the replicas never drift apart.
		syncBuffers := func() {
			works := make([]*dist.Work, len(buffers))
			for i, b := range buffers {
				works[i] = pg.Broadcast(b.Tensor, 0)
			}
			for i, w := range works {
				if err := w.Wait(); err != nil {
					r.throw(fmt.Errorf("ddp: broadcasting buffer %s from rank 0: %w", buffers[i].Name, err))
				}
			}
		}
		syncBuffers()
		if r.opts.Hooks.Path != "" {
			if err := d.RegisterCommHook(r.defaultWasmHook(pg)); err != nil {
				r.throw(err)
			}
		}
		obj := r.vm.NewObject()
		must(obj.DefineDataProperty("__ddp", r.vm.ToValue(d), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE))
		r.fn(obj, "registerCommHook", func(call goja.FunctionCall) goja.Value {
			h := r.commHook(pg, d, call.Argument(0), call.Argument(1))
			if err := d.RegisterCommHook(h); err != nil {
				r.throw(err)
			}
			return goja.Undefined()
		})
		r.fn(obj, "join", func(call goja.FunctionCall) goja.Value {
			loop, ok := goja.AssertFunction(call.Argument(0))
			if !ok {
				r.throwf("ddp.join(fn): fn must be a function (the training loop), got %s", describe(call.Argument(0)))
			}
			var result goja.Value
			var jsErr error
			err := d.Join(func() error {
				result, jsErr = loop(goja.Undefined())
				return jsErr
			})
			if jsErr != nil {
				panic(jsErr) // the loop's own exception, with its stack
			}
			if err != nil {
				r.throw(err)
			}
			return result
		})
		r.fn(obj, "setRequireSync", func(call goja.FunctionCall) goja.Value {
			d.SetRequireSync(r.toBool("DistributedDataParallel.setRequireSync", "argument 1", call.Argument(0)))
			return goja.Undefined()
		})
		r.fn(obj, "finalize", func(goja.FunctionCall) goja.Value {
			if err := d.Finalize(); err != nil {
				r.throw(err)
			}
			return goja.Undefined()
		})
		r.fn(obj, "bucketNames", func(goja.FunctionCall) goja.Value { return r.vm.ToValue(d.BucketNames()) })
		r.fn(obj, "syncBuffers", func(goja.FunctionCall) goja.Value {
			if broadcastBuffers {
				syncBuffers()
			}
			return goja.Undefined()
		})
		return obj
	})
}

// commHook makes the Go hook for registerCommHook(state, hook): hook is a
// JavaScript function, or one of dist.commHooks (marked with a "builtin"
// property: allreduce, fp16Compress, bf16Compress, powerSGD with a
// PowerSGDState as state, the fp16/bf16 wrappers around another hook, and
// ZeRO's overlap hooks around another hook, for the DDP d) or a Wasm
// hook from hooks.wasm(path, options)).
func (r *Runtime) commHook(pg dist.ProcessGroup, d *ddp.DDP, state, hook goja.Value) ddp.CommHook {
	const fn = "registerCommHook"
	o, ok := hook.(*goja.Object)
	if !ok {
		r.throwf("%s(state, hook): hook must be a function, got %s", fn, describe(hook))
	}
	if b := o.Get("builtin"); b != nil && !goja.IsUndefined(b) {
		switch name := b.String(); name {
		case "allreduce":
			return ddp.AllReduceHook(pg)
		case "fp16Compress":
			return ddp.FP16CompressHook(pg)
		case "bf16Compress":
			return ddp.BF16CompressHook(pg)
		case "fp16Wrapper", "bf16Wrapper":
			dt := dtype.Float16
			if name == "bf16Wrapper" {
				dt = dtype.BFloat16
			}
			return ddp.CompressHook(dt, r.commHook(pg, d, state, o.Get("inner")))
		case "zeroStep":
			return r.zeroStepHook(pg, d, state, o)
		case "wasm":
			return r.wasmHook(pg, o)
		case "postLocalSGD":
			so, ok := state.(*goja.Object)
			if !ok || so.Get("postLocalSGDOptions") == nil {
				r.throwf("%s: postLocalSGDHook needs a dist.commHooks.PostLocalSGDState(...) as its state, got %s", fn, describe(state))
			}
			s := r.postLocalSGD(so.Get("postLocalSGDOptions").ToObject(r.vm))
			return s.Hook()
		case "powerSGD", "batchedPowerSGD":
			so, ok := state.(*goja.Object)
			if !ok || so.Get("powerSGDOptions") == nil {
				r.throwf("%s: powerSGDHook needs a dist.commHooks.PowerSGDState(...) as its state, got %s", fn, describe(state))
			}
			s, err := ddp.NewPowerSGD(pg, r.powerSGDOptions(so.Get("powerSGDOptions").ToObject(r.vm)))
			if err != nil {
				r.throw(err)
			}
			if name == "batchedPowerSGD" {
				return s.BatchedHook()
			}
			return s.Hook()
		default:
			r.throwf("%s: unknown built-in hook %q", fn, name)
		}
	}
	f, ok := goja.AssertFunction(hook)
	if !ok {
		r.throwf("%s(state, hook): hook must be a function, got %s", fn, describe(hook))
	}
	return r.jsCommHook(state, f)
}

// jsCommHook turns hook(state, bucket) → future (or tensor) into a Go comm
// hook. The bucket the script sees has index, isLast, buffer (the flat
// gradients, reduced in place or replaced by the future's value),
// parameters, names and offsets (in elements).
func (r *Runtime) jsCommHook(state goja.Value, hook goja.Callable) ddp.CommHook {
	return func(b *ddp.Bucket) func() (*tensor.Tensor, error) {
		obj := r.vm.NewObject()
		must(obj.Set("index", b.Index))
		must(obj.Set("isLast", b.IsLast))
		must(obj.Set("buffer", r.borrow(b.Buffer)))
		params := make([]any, len(b.Params))
		for i, p := range b.Params {
			params[i] = r.borrow(p)
		}
		must(obj.Set("parameters", r.vm.NewArray(params...)))
		must(obj.Set("names", r.vm.ToValue(b.Names)))
		must(obj.Set("offsets", r.vm.ToValue(b.Offsets)))
		res, err := hook(goja.Undefined(), state, obj)
		return func() (*tensor.Tensor, error) {
			if err != nil {
				return nil, fmt.Errorf("comm hook: %w", err)
			}
			v := res
			if o, ok := res.(*goja.Object); ok && !r.isTensor(o) {
				wait, ok := goja.AssertFunction(o.Get("wait"))
				if !ok {
					return nil, fmt.Errorf("comm hook: must return a future (with wait) or a tensor, got %s", describe(res))
				}
				if v, err = wait(o); err != nil {
					return nil, fmt.Errorf("comm hook: %w", err)
				}
			}
			j := asJSTensor(v)
			if j == nil {
				return nil, fmt.Errorf("comm hook: the future's value must be the reduced bucket (a tensor), got %s", describe(v))
			}
			if j.released != "" {
				return nil, fmt.Errorf("comm hook: the reduced bucket was released %s", j.released)
			}
			return j.t, nil
		}
	}
}

// powerSGDOptions reads PowerSGDState's options (PyTorch's names in
// camelCase) and checks them as PyTorch does.
func (r *Runtime) powerSGDOptions(po *goja.Object) ddp.PowerSGDOptions {
	const fn = "dist.commHooks.PowerSGDState"
	r.checkKeys(fn, po, "matrixApproximationRank", "startPowerSGDIter", "minCompressionRate", "useErrorFeedback",
		"warmStart", "randomSeed", "orthogonalizationEpsilon")
	opts := ddp.PowerSGDOptions{
		Rank:               r.optInt(fn, po, "matrixApproximationRank", 1),
		StartIter:          r.optInt(fn, po, "startPowerSGDIter", 1000),
		MinCompressionRate: optFloat(po, "minCompressionRate", 2),
		NoErrorFeedback:    !optBool(po, "useErrorFeedback", true),
		NoWarmStart:        !optBool(po, "warmStart", true),
		Seed:               uint64(r.optInt(fn, po, "randomSeed", 0)),
		Epsilon:            optFloat(po, "orthogonalizationEpsilon", 0),
	}
	if opts.Rank < 1 {
		r.throwRangef("%s: matrixApproximationRank must be at least 1, got %d", fn, opts.Rank)
	}
	switch {
	case opts.StartIter < 0:
		r.throwRangef("%s: startPowerSGDIter must not be negative, got %d", fn, opts.StartIter)
	case opts.StartIter == 0:
		opts.StartIter = -1 // compress from the first iteration
	}
	if err := opts.Validate(); err != nil {
		r.throwRangef("%s: %v", fn, err) // PyTorch raises ValueError
	}
	return opts
}

// postLocalSGD reads PostLocalSGDState's options: startLocalSGDIter
// (required), subgroup (a group from dist.newGroup or dist.newSubgroups,
// null on ranks outside every subgroup), processGroup (the global group;
// all ranks by default) and postLocalGradientAllreduce (default true).
func (r *Runtime) postLocalSGD(o *goja.Object) *ddp.PostLocalSGD {
	const fn = "dist.commHooks.PostLocalSGDState"
	r.checkKeys(fn, o, "startLocalSGDIter", "subgroup", "processGroup", "postLocalGradientAllreduce")
	if optValue(o, "startLocalSGDIter") == nil {
		r.throwf("%s: startLocalSGDIter is required", fn)
	}
	var sub dist.ProcessGroup
	if v := optValue(o, "subgroup"); v != nil {
		g, ok := r.groups[v.ToObject(r.vm)]
		if !ok {
			r.throwf("%s: subgroup must be a group from dist.newGroup or dist.newSubgroups, got %s", fn, describe(v))
		}
		sub = g
	}
	s, err := ddp.NewPostLocalSGD(r.processGroupOption(fn, o), sub, r.optInt(fn, o, "startLocalSGDIter", 0), optBool(o, "postLocalGradientAllreduce", true))
	if err != nil {
		r.throwRangef("%v", err)
	}
	return s
}
