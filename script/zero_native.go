package script

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// zeroOptionKeys are ZeroRedundancyOptimizer's own options; every other
// key is a hyper-parameter of the wrapped optimizer.
var zeroOptionKeys = []string{"optimizer", "partition", "parametersAsBucketView", "overlapWithDDP", "stage", "bucketCapMB", "processGroup", "logMemory", "limitAllGathers", "offload", "schedule", "strictSchedule"}

// nativeZero adds native.zero.ZeroRedundancyOptimizer(params, options),
// under zero.ZeroRedundancyOptimizer in prelude.js. The optimizer object
// has the plain optimizers' methods (step, zeroGrad, paramGroups,
// addParamGroup, stateDict, loadStateDict) and consolidateStateDict(to),
// memory(), shards(), noSync(fn) (stage 2), join(model, fn) and close().
func (r *Runtime) nativeZero(native *goja.Object) {
	o := r.vm.NewObject()
	must(native.Set("zero", o))
	r.nativeStage3(o)
	// optionKeys: ZeRO's own keys, which the class form (prelude.js's
	// ShardedOptimizer) keeps from the optimizer class's defaults.
	must(o.Set("optionKeys", slices.Clone(zeroOptionKeys)))
	// greedyPartition(sizes, ranks): the owner rank of every parameter of
	// every group (sizes[g][i] elements), PyTorch's greedy partition, for
	// ZeRO over an optimizer class written in JavaScript (prelude.js).
	r.fn(o, "greedyPartition", func(call goja.FunctionCall) goja.Value {
		var sizes [][]int
		if err := r.vm.ExportTo(call.Argument(0), &sizes); err != nil {
			r.throwf("zero: greedyPartition: %v", err)
		}
		load := make([]int, r.intValue("zero: greedyPartition", "ranks", call.Argument(1)))
		owners := make([]any, len(sizes))
		for g, s := range sizes {
			owners[g] = zero.AssignLargestFirst(s, load)
		}
		return r.vm.ToValue(owners)
	})
	r.fn(o, "ZeroRedundancyOptimizer", func(call goja.FunctionCall) goja.Value {
		const fn = "zero.ZeroRedundancyOptimizer"
		ops := r.options(call, 1)
		name := optString(ops, "optimizer", "")
		if name == "" {
			// An unknown key first: { optimzer: "adamw" } is a misspelled
			// optimizer, not a missing one.
			r.checkKeys(fn, ops, slices.Concat(zeroOptionKeys, allOptimizerOptions(), implementationSwitches)...)
			var names []string
			for _, k := range optim.Kinds() {
				names = append(names, strconv.Quote(strings.ToLower(k.String())))
			}
			r.throwf("%s: options.optimizer is required: %s or an optimizer class (a subclass of optim.Optimizer)", fn, strings.Join(names, ", "))
		}
		kind, err := optim.ParseKind(name)
		if err != nil {
			r.throwf("%s: %v", fn, err)
		}
		defaults := defaultGroup(kind)
		r.requireOptions(fn, kind, ops, " for "+strings.ToLower(kind.String()))
		// One options object holds ZeRO's options and the optimizer's:
		// a key that is neither is an error naming the one meant.
		r.checkKeys(fn, ops, slices.Concat(zeroOptionKeys, optimizerOptions(kind), implementationSwitches)...)
		hyper := r.vm.NewObject()
		if ops != nil {
			for _, k := range ops.Keys() {
				if !slices.Contains(zeroOptionKeys, k) {
					must(hyper.Set(k, ops.Get(k)))
				}
			}
		}
		r.groupOptions(fn, kind, &defaults, hyper, false)
		opts := zero.Options{
			Partition:              optString(ops, "partition", ""),
			ParametersAsBucketView: optBool(ops, "parametersAsBucketView", false),
			Stage:                  r.optInt(fn, ops, "stage", 1),
			BucketCapMB:            optFloat(ops, "bucketCapMB", 0),
			OverlapWithDDP:         optBool(ops, "overlapWithDDP", false),
			LimitAllGathers:        r.optInt(fn, ops, "limitAllGathers", 0),
		}
		if v := optValue(ops, "schedule"); v != nil {
			// Stage 2's step schedule (zero.schedule or zero.schedules);
			// zero.New refuses it under the other stages.
			obj, ok := v.(*goja.Object)
			if !ok || obj.Get("__zeroSchedule") == nil || !obj.Get("__zeroSchedule").ToBoolean() {
				r.throwf("%s: schedule must be made by zero.schedule({...}) or be one of zero.schedules, got %s", fn, describe(v))
			}
			opts.Schedule = r.zeroSchedule(r.processGroupOption(fn, ops), obj)
		}
		opts.StrictSchedule = optBool(ops, "strictSchedule", false)
		switch off := optString(ops, "offload", "none"); off {
		case "none":
		case "cpu":
			// The host: a CPU device of its own, also on a CPU rank.
			opts.Offload = tensor.NewRuntime(cpu.New(cpu.Options{Index: r.opts.Rank}), 0)
		default:
			r.throwf("%s: offload must be \"cpu\" or \"none\", got %q", fn, off)
		}
		if opts.ShardsParameters() {
			if r.stage3() != nil {
				r.throwf("%s: this script has a stage-3 optimizer already (one shards the units zero.fullyShard marked)", fn)
			}
			// The optimizer takes the units and becomes the plan's.
			opts.Plan = r.zeroPlan()
		}
		pg := r.processGroupOption(fn, ops)
		z := r.newZero(fn, pg, kind, defaults, opts, call.Argument(0))
		if opts.Schedule != nil {
			// Its steps run inside backward (refuseSteppedInBackward).
			r.steppedInBackward = append(r.steppedInBackward, z)
		}
		return r.zeroObject(z, pg, optBool(ops, "logMemory", true))
	})
}

// processGroupOption is options.processGroup (a group from dist.newGroup),
// or the group of all ranks.
func (r *Runtime) processGroupOption(fn string, o *goja.Object) dist.ProcessGroup {
	v := optValue(o, "processGroup")
	if v == nil {
		return r.group
	}
	g, ok := r.groups[v.ToObject(r.vm)]
	if !ok || g == nil {
		r.throwf("%s: processGroup must be a group from dist.newGroup that this rank belongs to, got %s", fn, describe(v))
	}
	return g
}

// defaultGroup has PyTorch's defaults for kind.
func defaultGroup(kind optim.Kind) optim.ParamGroup { return optim.Defaults(kind) }

// newZero builds the optimizer over the params argument: an array of
// tensors, or of groups {params, ...options}.
func (r *Runtime) newZero(fn string, pg dist.ProcessGroup, kind optim.Kind, defaults optim.ParamGroup, opts zero.Options, v goja.Value) *zero.Optimizer {
	list, ok := v.(*goja.Object)
	if !ok || !r.isArray(list) || list.Get("length").ToInteger() == 0 {
		r.throwf("%s: params must be a non-empty array of tensors or of parameter groups, got %s", fn, describe(v))
	}
	first := list.Get("0")
	if r.isTensor(first) {
		z, err := zero.New(pg, kind, r.tensorList(fn, list), defaults, opts)
		if err != nil {
			r.throw(err)
		}
		return z
	}
	// Groups: the first makes the optimizer, with its own options.
	g0, ok := first.(*goja.Object)
	if !ok || r.isArray(first) {
		r.throwf("%s: a parameter group must be an object {params, ...}, got %s", fn, describe(first))
	}
	z, err := zero.New(pg, kind, r.tensorList(fn+" group params", g0.Get("params")), defaults, opts)
	if err != nil {
		r.throw(err)
	}
	// The first group's own options; the others go through addParamGroup.
	g0Hyper := z.ParamGroups()[0]
	r.groupOptions(fn, kind, g0Hyper, g0, true)
	if err := g0Hyper.Validate(kind); err != nil {
		r.throw(err)
	}
	for i := 1; i < int(list.Get("length").ToInteger()); i++ {
		r.addGroup(fn, z, list.Get(fmt.Sprint(i)))
	}
	return z
}

// zeroObject is the script face of a ZeroRedundancyOptimizer.
func (r *Runtime) zeroObject(z *zero.Optimizer, pg dist.ProcessGroup, logMemory bool) goja.Value {
	obj := r.optimizerObject(z)
	o := z.Options()
	must(obj.Set("options", map[string]any{"partition": o.Partition, "stage": o.Stage,
		"parametersAsBucketView": o.ParametersAsBucketView, "overlapWithDDP": o.OverlapWithDDP, "bucketCapMB": o.BucketCapMB,
		"limitAllGathers": o.LimitAllGathers}))
	// withFullParams(fn, { writeBack }): under stage 3, fn runs with the
	// whole model gathered (to read, save or load its weights; with
	// writeBack, what fn writes into the parameters is kept); every rank
	// must call it. Elsewhere it just runs fn. Returns fn's value.
	r.fn(obj, "withFullParams", func(call goja.FunctionCall) goja.Value {
		const fn = "zopt.withFullParams"
		f, ok := goja.AssertFunction(call.Argument(0))
		if !ok {
			r.throwf("%s(fn): fn must be a function, got %s", fn, describe(call.Argument(0)))
		}
		return r.callWithFullParams(z, optBool(r.optionsOf(fn, call, 1, "writeBack"), "writeBack", false), f)
	})
	steps := 0
	warned := false
	step := func() error {
		err := z.Step()
		if errors.Is(err, zero.ErrNoOverlapHook) {
			// PyTorch warns and returns; so do we, once per optimizer.
			if !warned {
				warned = true
				r.writeLines(r.opts.Stderr, fmt.Sprintf("warning: rank %d: %v", pg.Rank(), err))
			}
			return nil
		}
		return err
	}
	r.fn(obj, "step", func(call goja.FunctionCall) goja.Value {
		loss := r.optimizerStep("ZeroRedundancyOptimizer.step", call, step)
		if steps++; steps == 1 && logMemory {
			// What sharding saved, once per rank, on the log.
			m := z.Memory()
			r.writeLines(r.opts.Stderr, fmt.Sprintf("zero: rank %d of %d (stage %d, %s partition) holds parameters %s, gradients %s, optimizer state %s",
				pg.Rank(), pg.Size(), o.Stage, o.Partition, mib(m.Parameters), mib(m.Gradients), mib(m.State)))
		}
		return loss
	})
	r.fn(obj, "consolidateStateDict", func(call goja.FunctionCall) goja.Value {
		to := 0
		if !isMissing(call.Argument(0)) {
			to = r.intValue("zopt.consolidateStateDict", "to", call.Argument(0))
		}
		if err := z.ConsolidateStateDict(to); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
	r.fn(obj, "memory", func(goja.FunctionCall) goja.Value {
		m := z.Memory()
		mv := z.Offloaded()
		return r.vm.ToValue(map[string]any{"parameters": m.Parameters, "gradients": m.Gradients,
			"optimizerState": m.State, "ownedParameters": m.OwnedParameters, "total": m.Total(),
			"hostState": m.HostState, "toHostBytes": mv.ToHost, "toDeviceBytes": mv.ToDevice})
	})
	r.fn(obj, "shards", func(goja.FunctionCall) goja.Value { return r.vm.ToValue(z.ShardSizes()) })
	r.fn(obj, "clipGradNorm_", func(call goja.FunctionCall) goja.Value {
		const fn = "zopt.clipGradNorm_"
		maxNorm := r.numberValue(fn, "maxNorm", call.Argument(0))
		total, err := z.ClipGradNorm(maxNorm, r.normTypeArg(fn, call.Argument(1)))
		if err != nil {
			r.throw(err)
		}
		return r.vm.ToValue(total)
	})
	r.fn(obj, "noSync", func(call goja.FunctionCall) goja.Value {
		f, ok := goja.AssertFunction(call.Argument(0))
		if !ok {
			r.throwf("zopt.noSync(fn): fn must be a function, got %s", describe(call.Argument(0)))
		}
		z.SetRequireSync(false)
		defer z.SetRequireSync(true)
		v, err := f(goja.Undefined())
		if err != nil {
			panic(err)
		}
		return v
	})
	r.fn(obj, "join", func(call goja.FunctionCall) goja.Value {
		const fn = "zopt.join(model, fn)"
		d := r.ddpOf(fn, call.Argument(0))
		loop, ok := goja.AssertFunction(call.Argument(1))
		if !ok {
			r.throwf("%s: fn must be a function (the training loop), got %s", fn, describe(call.Argument(1)))
		}
		var result goja.Value
		var jsErr error
		err := z.Join(d, func() error {
			result, jsErr = loop(goja.Undefined())
			return jsErr
		})
		if jsErr != nil {
			panic(jsErr)
		}
		if err != nil {
			r.throw(err)
		}
		return result
	})
	r.fn(obj, "close", func(goja.FunctionCall) goja.Value { z.Close(); return goja.Undefined() })
	// PyTorch's attributes: this rank in the optimizer's group, the
	// group's size, the group itself (the dist module for all ranks), and
	// the local optimizer over this rank's shard.
	must(obj.Set("rank", pg.Rank()))
	must(obj.Set("worldSize", pg.Size()))
	must(obj.Set("processGroup", r.groupObjectOf(pg)))
	must(obj.DefineAccessorProperty("optim", r.vm.ToValue(func(goja.FunctionCall) goja.Value {
		return r.localOptimizer(z, pg.Rank())
	}), nil, goja.FLAG_FALSE, goja.FLAG_FALSE)) // not enumerable: computed, and an error under the flat partition
	return obj
}

// groupObjectOf is the script object of a process group: the dist module
// for the group of all ranks, else the object dist.newGroup returned.
func (r *Runtime) groupObjectOf(pg dist.ProcessGroup) goja.Value {
	if pg == r.group && r.worldObject != nil {
		return r.worldObject
	}
	for obj, g := range r.groups {
		if g == pg {
			return obj
		}
	}
	return goja.Null()
}

// localOptimizer is zopt.optim, PyTorch's local optimizer: this rank's
// parameter groups, each with the parameters this rank updates, and its
// state, a Map from each of those parameters to its state ({step,
// exp_avg, ...}). Under the flat partition a rank updates slices, not
// parameters, and there is no such optimizer.
func (r *Runtime) localOptimizer(z *zero.Optimizer, rank int) goja.Value {
	if z.Options().Partition == "flat" {
		r.throwf("zopt.optim: the flat partition updates slices of flat buckets, not whole parameters; its local state is in zopt.stateDict() after consolidateStateDict")
	}
	mapCtor, _ := goja.AssertConstructor(r.vm.Get("Map"))
	state, err := mapCtor(nil)
	if err != nil {
		panic(err)
	}
	set, _ := goja.AssertFunction(state.Get("set"))
	var groups []any
	for _, g := range z.ParamGroups() {
		var mine []any
		for _, p := range g.Params {
			if z.Owner(p) != rank {
				continue
			}
			pv := r.borrow(p)
			mine = append(mine, pv)
			entry := map[string]any{}
			if st := z.State(p); st != nil {
				if !z.Kind().Algorithm().NoStep {
					entry["step"] = st.Step
				}
				for k, v := range st.Scalars {
					entry[k] = v
				}
				for _, t := range st.Tensors() {
					entry[t.Name] = r.borrow(t.Tensor)
				}
			}
			if _, err := set(state, pv, r.vm.ToValue(entry)); err != nil {
				panic(err)
			}
		}
		h := g.Hyper()
		hyper := map[string]any{"params": r.vm.NewArray(mine...)}
		for _, k := range optimizerOptions(z.Kind()) {
			hp, _ := hyperParamNamed(k)
			hyper[k] = hp.get(&h)
		}
		groups = append(groups, hyper)
	}
	return r.vm.ToValue(map[string]any{"paramGroups": groups, "state": state})
}

func mib(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

// ddpOf finds the Go DDP of a DistributedDataParallel model (or of its
// reducer object).
func (r *Runtime) ddpOf(fn string, v goja.Value) *ddp.DDP {
	if obj, ok := v.(*goja.Object); ok {
		red := obj
		if inner, ok := obj.Get("_reducer").(*goja.Object); ok {
			red = inner
		}
		if d, ok := hidden(red, "__ddp").(*ddp.DDP); ok {
			return d
		}
	}
	r.throwf("%s: expects a DistributedDataParallel model, got %s", fn, describe(v))
	return nil
}

// zeroStepHook makes ZeRO's overlap hook (zero.hookWithZeroStep and the
// interleaved one) around its inner hook, for the DDP d registering it.
func (r *Runtime) zeroStepHook(pg dist.ProcessGroup, d *ddp.DDP, state goja.Value, o *goja.Object) ddp.CommHook {
	const fn = "zero.hookWithZeroStep"
	if r.ddpOf(fn, o.Get("reducer")) != d {
		r.throwf("%s: the hook was made for another DistributedDataParallel model", fn)
	}
	var z *zero.Optimizer
	if zo, ok := o.Get("zopt").(*goja.Object); ok {
		if h, ok := hidden(zo, "__optimizer").(*jsOptimizer); ok {
			z, _ = h.opt.(*zero.Optimizer)
		}
	}
	if z == nil {
		r.throwf("%s: the third argument must be a zero.ZeroRedundancyOptimizer, got %s", fn, describe(o.Get("zopt")))
	}
	inner := r.commHook(pg, d, state, o.Get("inner"))
	var opts zero.OverlapOptions
	if oo, ok := o.Get("options").(*goja.Object); ok {
		r.checkKeys(fn, oo, "shardBuckets", "strict")
		opts.ShardBuckets = optBool(oo, "shardBuckets", false)
		opts.Strict = optBool(oo, "strict", false)
	}
	h, err := zero.HookWithZeroSchedule(inner, d, z, r.zeroSchedule(pg, o.Get("schedule").ToObject(r.vm)), opts)
	if err != nil {
		r.throw(err)
	}
	r.steppedInBackward = append(r.steppedInBackward, z)
	return h
}

// zeroSchedule is the Go schedule of a zero.schedule object: a built-in
// (zero.schedules), or the script's functions, called with a context
// whose stepAndBroadcast is the engine's.
func (r *Runtime) zeroSchedule(pg dist.ProcessGroup, o *goja.Object) zero.Schedule {
	switch o.Get("__zeroSchedule").String() {
	case "afterBackward":
		return zero.AfterBackward
	case "interleaved":
		return zero.Interleaved
	case "asReduced":
		return zero.AsReduced
	case "wasm":
		return r.wasmSchedule(pg, o)
	case "commandLine":
		return r.commandLineSchedule(pg)
	}
	name := o.Get("name").String()
	// The object is frozen: its handlers are looked up once.
	handlers := map[string]goja.Callable{}
	for _, ev := range []string{"iterationBegin", "bucketReady", "bucketReduced", "backwardEnd"} {
		if f, ok := goja.AssertFunction(o.Get(ev)); ok {
			handlers[ev] = f
		}
	}
	var ctx *goja.Object // made at the first event, for every one after
	iteration := 0
	call := func(fnName string, c *zero.ScheduleContext, args ...goja.Value) error {
		f := handlers[fnName]
		if f == nil {
			return nil
		}
		if ctx == nil {
			ctx = r.scheduleContext(c)
		}
		if it := c.Iteration(); it != iteration {
			iteration = it
			must(ctx.Set("iteration", it))
		}
		_, err := f(goja.Undefined(), append([]goja.Value{ctx}, args...)...)
		return r.scheduleError(err)
	}
	sf := zero.ScheduleFuncs{Name: name,
		OnIterationBegin: func(c *zero.ScheduleContext) error { return call("iterationBegin", c) },
		OnBucketReady:    func(c *zero.ScheduleContext, i int) error { return call("bucketReady", c, r.vm.ToValue(i)) },
		OnBucketReduced:  func(c *zero.ScheduleContext, i int) error { return call("bucketReduced", c, r.vm.ToValue(i)) },
		OnBackwardEnd:    func(c *zero.ScheduleContext) error { return call("backwardEnd", c) },
	}
	if f, ok := goja.AssertFunction(o.Get("assign")); ok {
		sf.OnAssign = func(buckets []zero.BucketInfo, world int) ([][]int, error) {
			list := make([]any, len(buckets))
			for i, b := range buckets {
				list[i] = map[string]any{"numel": b.Numel, "names": b.Names, "offsets": b.Offsets, "owners": b.Owners}
			}
			v, err := f(goja.Undefined(), r.vm.ToValue(list), r.vm.ToValue(world))
			if err != nil {
				return nil, r.scheduleError(err)
			}
			return r.assignment(v)
		}
	}
	return sf
}

// scheduleError is a script exception in a schedule's function as text,
// its place in the script first: an *Error in the chain would stand for
// the whole, and the schedule, event and bucket the engine puts around it
// would be lost.
func (r *Runtime) scheduleError(err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(r.scriptError(err), &se) && se.Position != "" {
		return fmt.Errorf("%s: %s", se.Position, se.Message)
	}
	return errors.New(r.scriptError(err).Error())
}

// assignment reads what a schedule's assign returned: an array with, for
// each bucket, an array of owner ranks, one per parameter (the engine
// checks the sizes and ranks); undefined or null keeps the engine's.
func (r *Runtime) assignment(v goja.Value) ([][]int, error) {
	if isMissing(v) {
		return nil, nil
	}
	o, ok := v.(*goja.Object)
	if !ok || o.ClassName() != "Array" {
		return nil, fmt.Errorf("assign must return an array (one array of owner ranks per bucket), got %s", describe(v))
	}
	// A length is the script's to forge (a.length = 2**32 - 1): each is
	// bounded before it sizes anything; the engine then checks the
	// buckets and parameters against the model's.
	const maxEntries = 1 << 24
	n := o.Get("length").ToInteger()
	if n < 0 || n > maxEntries {
		return nil, fmt.Errorf("assign returned an array of length %d, not one per bucket", n)
	}
	out := make([][]int, n)
	for i := range out {
		b, ok := o.Get(fmt.Sprint(i)).(*goja.Object)
		if !ok || b.ClassName() != "Array" {
			return nil, fmt.Errorf("assign: bucket %d's owners must be an array of ranks, got %s", i, describe(o.Get(fmt.Sprint(i))))
		}
		m := b.Get("length").ToInteger()
		if m < 0 || m > maxEntries {
			return nil, fmt.Errorf("assign: bucket %d's owners are an array of length %d, not one per parameter", i, m)
		}
		out[i] = make([]int, m)
		for k := range out[i] {
			e := b.Get(fmt.Sprint(k))
			switch n := e.Export().(type) {
			case int64:
				out[i][k] = int(max(min(n, 1<<31), -1)) // the engine names a rank out of range
			default:
				return nil, fmt.Errorf("assign: bucket %d's owner %d must be a rank (an integer), got %s", i, k, describe(e))
			}
		}
	}
	return out, nil
}

// scheduleContext is a schedule's ctx for the script: the queries and the
// actions of zero.ScheduleContext (a context stands for its hook's whole
// life; iteration is updated before every event).
func (r *Runtime) scheduleContext(c *zero.ScheduleContext) *goja.Object {
	ctx := r.vm.NewObject()
	must(ctx.Set("numBuckets", c.NumBuckets()))
	must(ctx.Set("rank", c.Rank()))
	must(ctx.Set("worldSize", c.WorldSize()))
	action := func(name string, act func(int) error) {
		fn := "ctx." + name
		r.fn(ctx, name, func(call goja.FunctionCall) goja.Value {
			if err := act(r.intValue(fn, "bucket", call.Argument(0))); err != nil {
				r.throwf("%s: %v", fn, err)
			}
			return goja.Undefined()
		})
	}
	action("wait", c.Wait)
	action("step", c.Step)
	action("broadcast", c.Broadcast)
	action("allGather", c.AllGather)
	action("stepAndBroadcast", c.StepAndBroadcast)
	r.fn(ctx, "reduced", func(call goja.FunctionCall) goja.Value {
		return r.vm.ToValue(c.Reduced(r.intValue("ctx.reduced", "bucket", call.Argument(0))))
	})
	r.fn(ctx, "bucket", func(call goja.FunctionCall) goja.Value {
		i := r.intValue("ctx.bucket", "bucket", call.Argument(0))
		b, err := c.Bucket(i)
		if err != nil {
			r.throwf("ctx.bucket: %v", err)
		}
		info := r.vm.NewObject()
		must(info.Set("numel", b.Numel))
		must(info.Set("names", r.vm.ToValue(b.Names)))
		must(info.Set("offsets", r.vm.ToValue(b.Offsets)))
		must(info.Set("owners", r.vm.ToValue(b.Owners)))
		// Stage 2: this rank's slice of the bucket, [start, end).
		slice := goja.Null()
		if b.SliceEnd > b.SliceStart {
			slice = r.vm.ToValue(map[string]any{"start": b.SliceStart, "end": b.SliceEnd})
		}
		must(info.Set("slice", slice))
		return info
	})
	return ctx
}

// zeroOptimizerOf finds the Go optimizer of a ZeroRedundancyOptimizer
// object.
func (r *Runtime) zeroOptimizerOf(v goja.Value) (*zero.Optimizer, bool) {
	obj, ok := v.(*goja.Object)
	if !ok {
		return nil, false
	}
	h, ok := hidden(obj, "__optimizer").(*jsOptimizer)
	if !ok {
		return nil, false
	}
	z, ok := h.opt.(*zero.Optimizer)
	return z, ok
}

// refuseSteppedInBackward throws when one of params is stepped inside
// backward by a ZeRO overlap hook: what fn does needs the whole gradient
// before the step (what it computes after backward would come too late,
// the parameters being updated already).
func (r *Runtime) refuseSteppedInBackward(fn, what string, params []*tensor.Tensor) {
	for _, z := range r.steppedInBackward {
		sched, _ := z.StepsInBackward()
		how, instead := "overlapWithDDP", "the overlap hook"
		if z.ShardsGradients() {
			how, instead = "stage 2", "the schedule option"
		}
		for _, p := range params {
			if z.Has(p) {
				r.throwf("%s: %s, but this model's ZeroRedundancyOptimizer steps inside backward (%s, schedule %v): its parameters are updated before backward returns. Use it without %s", fn, what, how, sched, instead)
			}
		}
	}
}
