package script

import (
	"slices"
	"strconv"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// nativeOptim installs the optimizers, one constructor per algorithm of
// engine/optim's registry (optim.SGD, optim.Adam, ..., optim.NAdam; their
// names in native.optim.algorithms, which prelude.js exports), their live
// parameter groups, state dicts and the learning-rate schedulers.
func (r *Runtime) nativeOptim(native *goja.Object) {
	o := r.vm.NewObject()
	must(native.Set("optim", o))
	var names []any
	for _, kind := range optim.Kinds() {
		kind := kind
		r.fn(o, kind.String(), func(call goja.FunctionCall) goja.Value { return r.newOptimizer(kind, call) })
		names = append(names, kind.String())
	}
	must(o.Set("algorithms", r.vm.NewArray(names...)))
	sched := r.vm.NewObject()
	must(o.Set("lrScheduler", sched))
	r.fn(sched, "StepLR", func(call goja.FunctionCall) goja.Value {
		const fn = "optim.lrScheduler.StepLR"
		opt := r.optimizerArg(fn, call.Argument(0))
		ops := r.optionsOf(fn, call, 1, "stepSize", "gamma")
		if ops != nil && optValue(ops, "stepSize") == nil {
			r.throwf("%s: stepSize is required (PyTorch's step_size has no default)", fn)
		}
		stepSize := r.optInt(fn, ops, "stepSize", 0)
		if ops == nil {
			stepSize = r.intValue(fn, "stepSize", call.Argument(1))
		}
		gamma := r.optNumber(fn, ops, "gamma", 0.1)
		if ops == nil && !isMissing(call.Argument(2)) {
			gamma = r.numberValue(fn, "gamma", call.Argument(2))
		}
		s, err := optim.NewStepLR(opt, stepSize, gamma)
		if err != nil {
			r.throw(err)
		}
		return r.schedulerObject(s)
	})
	r.fn(sched, "LambdaLR", func(call goja.FunctionCall) goja.Value {
		const fn = "optim.lrScheduler.LambdaLR"
		opt := r.optimizerArg(fn, call.Argument(0))
		f, ok := goja.AssertFunction(call.Argument(1))
		if !ok {
			r.throwf("%s: lrLambda must be a function, got %s", fn, describe(call.Argument(1)))
		}
		s := optim.NewLambdaLR(opt, func(step int) float64 {
			v, err := f(goja.Undefined(), r.vm.ToValue(step))
			if err != nil {
				panic(err)
			}
			return r.numberValue(fn, "lrLambda's result", v)
		})
		return r.schedulerObject(s)
	})
	// The other schedulers of torch.optim.lr_scheduler, with options
	// objects of PyTorch's arguments in camelCase (T_max: TMax).
	newSched := func(name string, keys []string, required []string, make func(fn string, opt optim.LRGroups, ops *goja.Object) (*optim.Scheduler, error)) {
		r.fn(sched, name, func(call goja.FunctionCall) goja.Value {
			fn := "optim.lrScheduler." + name
			opt := r.optimizerArg(fn, call.Argument(0))
			ops := r.optionsOf(fn, call, 1, keys...)
			for _, k := range required {
				if optValue(ops, k) == nil {
					r.throwf("%s(optimizer, { %s }): %s is required", fn, strings.Join(keys, ", "), k)
				}
			}
			s, err := make(fn, opt, ops)
			if err != nil {
				r.throw(err)
			}
			return r.schedulerObject(s)
		})
	}
	newSched("ExponentialLR", []string{"gamma"}, []string{"gamma"}, func(fn string, opt optim.LRGroups, ops *goja.Object) (*optim.Scheduler, error) {
		return optim.NewExponentialLR(opt, r.optNumber(fn, ops, "gamma", 0))
	})
	newSched("MultiStepLR", []string{"milestones", "gamma"}, []string{"milestones"}, func(fn string, opt optim.LRGroups, ops *goja.Object) (*optim.Scheduler, error) {
		var milestones []int
		if err := r.vm.ExportTo(optValue(ops, "milestones"), &milestones); err != nil {
			r.throwf("%s: milestones must be an array of step numbers, got %s", fn, describe(optValue(ops, "milestones")))
		}
		return optim.NewMultiStepLR(opt, milestones, r.optNumber(fn, ops, "gamma", 0.1))
	})
	newSched("LinearLR", []string{"startFactor", "endFactor", "totalIters"}, nil, func(fn string, opt optim.LRGroups, ops *goja.Object) (*optim.Scheduler, error) {
		return optim.NewLinearLR(opt, r.optNumber(fn, ops, "startFactor", 1.0/3), r.optNumber(fn, ops, "endFactor", 1), r.optInt(fn, ops, "totalIters", 5))
	})
	newSched("CosineAnnealingLR", []string{"TMax", "etaMin"}, []string{"TMax"}, func(fn string, opt optim.LRGroups, ops *goja.Object) (*optim.Scheduler, error) {
		return optim.NewCosineAnnealingLR(opt, r.optInt(fn, ops, "TMax", 0), r.optNumber(fn, ops, "etaMin", 0))
	})
	newSched("ConstantLR", []string{"factor", "totalIters"}, nil, func(fn string, opt optim.LRGroups, ops *goja.Object) (*optim.Scheduler, error) {
		return optim.NewConstantLR(opt, r.optNumber(fn, ops, "factor", 1.0/3), r.optInt(fn, ops, "totalIters", 5))
	})
	newSched("PolynomialLR", []string{"totalIters", "power"}, nil, func(fn string, opt optim.LRGroups, ops *goja.Object) (*optim.Scheduler, error) {
		return optim.NewPolynomialLR(opt, r.optInt(fn, ops, "totalIters", 5), r.optNumber(fn, ops, "power", 1))
	})
	newSched("OneCycleLR", []string{"maxLr", "totalSteps", "epochs", "stepsPerEpoch", "pctStart", "annealStrategy", "cycleMomentum",
		"baseMomentum", "maxMomentum", "divFactor", "finalDivFactor", "threePhase"}, []string{"maxLr"},
		func(fn string, opt optim.LRGroups, ops *goja.Object) (*optim.Scheduler, error) {
			d := optim.DefaultOneCycle()
			perGroup := func(key string, def []float64) []float64 {
				v := optValue(ops, key)
				if v == nil {
					return def
				}
				if obj, ok := v.(*goja.Object); ok && r.isArray(obj) {
					return r.floatList(fn, key, obj)
				}
				return []float64{r.numberValue(fn, key, v)}
			}
			o := optim.OneCycleOptions{MaxLR: perGroup("maxLr", nil), TotalSteps: r.optInt(fn, ops, "totalSteps", 0),
				Epochs: r.optInt(fn, ops, "epochs", 0), StepsPerEpoch: r.optInt(fn, ops, "stepsPerEpoch", 0),
				PctStart: r.optNumber(fn, ops, "pctStart", d.PctStart), AnnealStrategy: optString(ops, "annealStrategy", d.AnnealStrategy),
				CycleMomentum: optBool(ops, "cycleMomentum", d.CycleMomentum), BaseMomentum: perGroup("baseMomentum", d.BaseMomentum),
				MaxMomentum: perGroup("maxMomentum", d.MaxMomentum), DivFactor: r.optNumber(fn, ops, "divFactor", d.DivFactor),
				FinalDivFactor: r.optNumber(fn, ops, "finalDivFactor", d.FinalDivFactor), ThreePhase: optBool(ops, "threePhase", false)}
			return optim.NewOneCycleLR(opt, opt.(scriptOptimizer).Kind(), o)
		})
	// SequentialLR(optimizer, { schedulers, milestones }): schedulers made
	// by optim.lrScheduler over the same optimizer.
	r.fn(sched, "SequentialLR", func(call goja.FunctionCall) goja.Value {
		const fn = "optim.lrScheduler.SequentialLR"
		opt := r.optimizerArg(fn, call.Argument(0))
		ops := r.optionsOf(fn, call, 1, "schedulers", "milestones")
		list, ok := optValue(ops, "schedulers").(*goja.Object)
		if !ok || !r.isArray(list) {
			r.throwf("%s(optimizer, { schedulers, milestones }): schedulers must be an array of schedulers, got %s", fn, describe(optValue(ops, "schedulers")))
		}
		var scheds []*optim.Scheduler
		for i := range int(list.Get("length").ToInteger()) {
			v := list.Get(strconv.Itoa(i))
			obj, _ := v.(*goja.Object)
			var s *optim.Scheduler
			if obj != nil {
				s, _ = hidden(obj, "__scheduler").(*optim.Scheduler)
			}
			if s == nil {
				r.throwf("%s: schedulers[%d] is %s, not a scheduler of optim.lrScheduler (StepLR, LinearLR, ...; not ReduceLROnPlateau or SequentialLR)", fn, i, describe(v))
			}
			scheds = append(scheds, s)
		}
		var milestones []int
		if err := r.vm.ExportTo(optValue(ops, "milestones"), &milestones); err != nil || optValue(ops, "milestones") == nil {
			r.throwf("%s(optimizer, { schedulers, milestones }): milestones must be an array of step numbers, got %s", fn, describe(optValue(ops, "milestones")))
		}
		q, err := optim.NewSequentialLR(opt, scheds, milestones)
		if err != nil {
			r.throw(err)
		}
		return r.schedulerObject(q)
	})
	// ReduceLROnPlateau(optimizer, opts): step(metric) takes the metric
	// (a number or a one-element tensor), as PyTorch's step(metrics).
	r.fn(sched, "ReduceLROnPlateau", func(call goja.FunctionCall) goja.Value {
		const fn = "optim.lrScheduler.ReduceLROnPlateau"
		opt := r.optimizerArg(fn, call.Argument(0))
		ops := r.optionsOf(fn, call, 1, "mode", "factor", "patience", "threshold", "thresholdMode", "cooldown", "minLr", "eps")
		d := optim.DefaultPlateau()
		o := optim.PlateauOptions{Mode: optString(ops, "mode", d.Mode), Factor: r.optNumber(fn, ops, "factor", d.Factor),
			Patience: r.optInt(fn, ops, "patience", d.Patience), Threshold: r.optNumber(fn, ops, "threshold", d.Threshold),
			ThresholdMode: optString(ops, "thresholdMode", d.ThresholdMode), Cooldown: r.optInt(fn, ops, "cooldown", d.Cooldown),
			MinLR: r.optNumber(fn, ops, "minLr", d.MinLR), Eps: r.optNumber(fn, ops, "eps", d.Eps)}
		p, err := optim.NewPlateau(opt, o)
		if err != nil {
			r.throw(err)
		}
		obj := r.vm.NewObject()
		r.fn(obj, "step", func(call goja.FunctionCall) goja.Value {
			v := call.Argument(0)
			if j := asJSTensor(v); j != nil {
				m, err := r.live("ReduceLROnPlateau.step", j).Item()
				if err != nil {
					r.throwf("ReduceLROnPlateau.step: metrics must be a number or a one-element tensor: %v", err)
				}
				p.Step(m)
			} else {
				p.Step(r.numberValue("ReduceLROnPlateau.step", "metrics", v))
			}
			return goja.Undefined()
		})
		r.fn(obj, "getLastLr", func(goja.FunctionCall) goja.Value { return r.vm.ToValue(toAnyFloats(p.LastLR())) })
		r.fn(obj, "stateDict", func(goja.FunctionCall) goja.Value { return r.vm.ToValue(p.StateDict()) })
		r.fn(obj, "loadStateDict", func(call goja.FunctionCall) goja.Value {
			o, ok := call.Argument(0).(*goja.Object)
			if !ok {
				r.throwf("ReduceLROnPlateau.loadStateDict: expects a state dict, got %s", describe(call.Argument(0)))
			}
			m, _ := o.Export().(map[string]any)
			if err := p.LoadStateDict(m); err != nil {
				r.throw(err)
			}
			return goja.Undefined()
		})
		return obj
	})
	r.fn(sched, "WarmupCosine", func(call goja.FunctionCall) goja.Value {
		const fn = "optim.lrScheduler.WarmupCosine"
		opt := r.optimizerArg(fn, call.Argument(0))
		ops := r.optionsOf(fn, call, 1, "warmup", "total", "minRatio")
		if optValue(ops, "total") == nil {
			// Without it the schedule would end at step 0: lr·minRatio
			// (0 by default) from the first step.
			r.throwf("%s(optimizer, { warmup, total, minRatio }): total is required (the step at which the cosine reaches minRatio·lr)", fn)
		}
		s, err := optim.NewWarmupCosine(opt, r.optInt(fn, ops, "warmup", 0), r.optInt(fn, ops, "total", 0), r.optNumber(fn, ops, "minRatio", 0))
		if err != nil {
			r.throw(err)
		}
		return r.schedulerObject(s)
	})
}

// scriptOptimizer is what the script face of an optimizer works with: the
// plain optimizers and ZeroRedundancyOptimizer have it.
type scriptOptimizer interface {
	Kind() optim.Kind
	Defaults() optim.ParamGroup
	AddParamGroup(optim.ParamGroup) error
	ParamGroups() []*optim.ParamGroup
	Step() error
	ZeroGrad(setToNone bool) error
	StateDict() (*optim.StateDict, error)
	LoadStateDict(*optim.StateDict) error
}

// jsOptimizer ties a Go optimizer to its script object.
type jsOptimizer struct {
	opt    scriptOptimizer
	obj    *goja.Object
	groups *goja.Object // the live paramGroups array
}

func (r *Runtime) optimizerArg(fn string, v goja.Value) scriptOptimizer {
	if obj, ok := v.(*goja.Object); ok {
		if h, ok := hidden(obj, "__optimizer").(*jsOptimizer); ok {
			return h.opt
		}
	}
	if obj, ok := v.(*goja.Object); ok && !isMissing(obj.Get("paramGroups")) {
		r.throwf("%s: takes zeroeng's built-in optimizers (optim.SGD, optim.AdamW, ..., or zero.ZeroRedundancyOptimizer over one of them), not one written in JavaScript (optim.Optimizer)", fn)
	}
	r.throwf("%s: expects an optimizer, got %s", fn, describe(v))
	return nil
}

func (r *Runtime) floatList(fn, what string, v goja.Value) []float64 {
	obj, ok := v.(*goja.Object)
	if !ok {
		r.throwf("%s: %s must be an array of numbers", fn, what)
	}
	n := r.arrayLength(fn, what, obj, 8)
	out := make([]float64, n)
	for i := range out {
		out[i] = r.numberValue(fn, what, obj.Get(strconv.Itoa(i)))
	}
	return out
}

// newOptimizer is optim.SGD/Adam/...(params, options): params is an array
// of tensors, or of groups {params, ...options}.
func (r *Runtime) newOptimizer(kind optim.Kind, call goja.FunctionCall) goja.Value {
	fn := "optim." + kind.String()
	defaults := defaultGroup(kind)
	ops := r.options(call, 1)
	r.requireOptions(fn, kind, ops, "")
	r.groupOptions(fn, kind, &defaults, ops, false)
	opt, err := optim.New(kind, nil, defaults)
	if err != nil {
		r.throw(err)
	}
	r.addParams(fn, opt, call.Argument(0))
	return r.optimizerObject(opt)
}

// addParams adds an optimizer's params argument: an array of tensors (one
// group with the defaults) or of groups {params, ...options}.
func (r *Runtime) addParams(fn string, opt scriptOptimizer, v goja.Value) {
	list, ok := v.(*goja.Object)
	if !ok || !r.isArray(list) {
		r.throwf("%s: params must be an array of tensors or of parameter groups, got %s", fn, describe(v))
	}
	n := int(list.Get("length").ToInteger())
	if n == 0 {
		r.throwRangef("%s: optimizer got an empty parameter list", fn)
	}
	if r.isTensor(list.Get("0")) {
		g := opt.Defaults()
		g.Params = r.tensorList(fn, list)
		if err := opt.AddParamGroup(g); err != nil {
			r.throw(err)
		}
		return
	}
	for i := 0; i < n; i++ {
		r.addGroup(fn, opt, list.Get(strconv.Itoa(i)))
	}
}

func (r *Runtime) addGroup(fn string, opt scriptOptimizer, v goja.Value) {
	gobj, ok := v.(*goja.Object)
	if !ok || r.isArray(v) {
		r.throwf("%s: a parameter group must be an object {params, ...}, got %s", fn, describe(v))
	}
	g := opt.Defaults()
	g.Params = r.tensorList(fn+" group params", gobj.Get("params"))
	r.groupOptions(fn, opt.Kind(), &g, gobj, true)
	if err := opt.AddParamGroup(g); err != nil {
		r.throw(err)
	}
}

// optimizerStep is optimizer.step([closure]) as PyTorch's: a closure, a
// function that clears the gradients, re-evaluates the model and returns
// the loss, is called with gradients enabled before the update, and its
// value is what step returns; without one, step returns undefined. Any
// other argument is an error, not an ignored value.
func (r *Runtime) optimizerStep(fn string, call goja.FunctionCall, step func() error) goja.Value {
	if len(call.Arguments) > 1 {
		r.throwf("%s: takes at most one argument, a closure, got %d", fn, len(call.Arguments))
	}
	loss := goja.Undefined()
	if c := call.Argument(0); !isMissing(c) {
		closure, ok := goja.AssertFunction(c)
		if !ok {
			r.throwf("%s: the closure must be a function that returns the loss, got %s", fn, describe(c))
		}
		restore := r.rt.SetGradEnabled(true)
		v, err := closure(goja.Undefined())
		restore()
		if err != nil {
			panic(err) // a JavaScript exception: let it continue unwinding
		}
		loss = v
	}
	start := r.opts.Trace.Now()
	err := step()
	r.traceAdd(trace.Optimizer, "optimizer step", start)
	if err != nil {
		r.throw(err)
	}
	return loss
}

// optimizerObject builds the script face of an optimizer.
func (r *Runtime) optimizerObject(opt scriptOptimizer) *goja.Object {
	h := &jsOptimizer{opt: opt, obj: r.vm.NewObject()}
	obj := h.obj
	must(obj.DefineDataProperty("__optimizer", r.vm.ToValue(h), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE))
	h.groups = r.vm.NewArray()
	for _, g := range opt.ParamGroups() {
		must(h.groups.Set(strconv.Itoa(int(h.groups.Get("length").ToInteger())), r.groupObject(opt.Kind(), g)))
	}
	must(obj.Set("paramGroups", h.groups))
	must(obj.Set("kind", opt.Kind().String()))
	r.fn(obj, "step", func(call goja.FunctionCall) goja.Value {
		return r.optimizerStep("optimizer.step", call, opt.Step)
	})
	r.fn(obj, "memory", func(goja.FunctionCall) goja.Value { return r.vm.ToValue(optimizerMemory(opt)) })
	r.fn(obj, "zeroGrad", func(call goja.FunctionCall) goja.Value {
		setToNone := false
		if o := r.optionsOf("optimizer.zeroGrad", call, 0, "setToNone"); o != nil {
			setToNone = optBool(o, "setToNone", false)
		} else {
			setToNone = boolArg(call, 0, false)
		}
		if err := opt.ZeroGrad(setToNone); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
	r.fn(obj, "addParamGroup", func(call goja.FunctionCall) goja.Value {
		r.addGroup("optimizer.addParamGroup", opt, call.Argument(0))
		groups := opt.ParamGroups()
		must(h.groups.Set(strconv.Itoa(len(groups)-1), r.groupObject(opt.Kind(), groups[len(groups)-1])))
		return goja.Undefined()
	})
	r.fn(obj, "stateDict", func(call goja.FunctionCall) goja.Value {
		sd, err := opt.StateDict()
		if err != nil {
			r.throw(err)
		}
		state := r.vm.NewObject()
		for idx, entry := range sd.State {
			e := r.vm.NewObject()
			for k, t := range entry {
				if k == "step" {
					must(e.Set(k, r.wrap(t)))
					continue
				}
				must(e.Set(k, r.borrow(t)))
			}
			must(state.Set(strconv.Itoa(idx), e))
		}
		groups := make([]any, len(sd.ParamGroups))
		for i, g := range sd.ParamGroups {
			groups[i] = g
		}
		out := r.vm.NewObject()
		must(out.Set("state", state))
		must(out.Set("param_groups", groups))
		return out
	})
	r.fn(obj, "loadStateDict", func(call goja.FunctionCall) goja.Value {
		const fn = "optimizer.loadStateDict"
		sdObj, ok := call.Argument(0).(*goja.Object)
		if !ok {
			r.throwf("%s: expects a state dict, got %s", fn, describe(call.Argument(0)))
		}
		sd := &optim.StateDict{State: map[int]map[string]*tensor.Tensor{}}
		if st, ok := sdObj.Get("state").(*goja.Object); ok {
			for _, k := range st.Keys() {
				idx, err := strconv.Atoi(k)
				if err != nil {
					r.throwf("%s: state key %q is not a parameter index", fn, k)
				}
				entry := map[string]*tensor.Tensor{}
				eobj := st.Get(k).ToObject(r.vm)
				for _, name := range eobj.Keys() {
					v := eobj.Get(name)
					if isMissing(v) {
						continue
					}
					if r.isTensor(v) {
						entry[name] = r.unwrap(fn, name, v)
					} else {
						entry[name] = r.rt.Scalar(tensor.Float32, r.numberValue(fn, name, v))
					}
				}
				sd.State[idx] = entry
			}
		}
		pg, ok := sdObj.Get("param_groups").(*goja.Object)
		if !ok {
			r.throwf("%s: the state dict has no param_groups", fn)
		}
		for _, g := range pg.Export().([]any) {
			m, ok := g.(map[string]any)
			if !ok {
				r.throwf("%s: param_groups must hold objects", fn)
			}
			sd.ParamGroups = append(sd.ParamGroups, m)
		}
		if err := opt.LoadStateDict(sd); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
	if plain, ok := opt.(*optim.Optimizer); ok {
		r.fn(obj, "stateBytes", func(call goja.FunctionCall) goja.Value { return r.vm.ToValue(plain.StateBytes()) })
	}
	return obj
}

// groupObject is a live view of a parameter group: reading and writing
// lr, betas, ... reads and writes the Go group, so schedulers written in
// JavaScript work as in PyTorch.
func (r *Runtime) groupObject(kind optim.Kind, g *optim.ParamGroup) goja.Value {
	return r.vm.NewDynamicObject(&jsGroup{r: r, kind: kind, g: g})
}

type jsGroup struct {
	r    *Runtime
	kind optim.Kind
	g    *optim.ParamGroup
}

func (j *jsGroup) Get(key string) goja.Value {
	r, g := j.r, j.g
	if key == "params" {
		vals := make([]any, len(g.Params))
		for i, p := range g.Params {
			vals[i] = r.borrow(p)
		}
		return r.vm.NewArray(vals...)
	}
	if slices.Contains(groupKeys(j.kind), key) {
		h, _ := hyperParamNamed(key)
		if b, ok := h.get(g).([]any); ok {
			return r.vm.NewArray(b...)
		}
		return r.vm.ToValue(h.get(g))
	}
	if v, ok := g.Extra[key]; ok {
		return r.vm.ToValue(v)
	}
	return nil
}

func (j *jsGroup) Set(key string, val goja.Value) bool {
	if key == "params" {
		j.r.throwf("paramGroup.params cannot be replaced; use optimizer.addParamGroup")
	}
	o := j.r.vm.NewObject()
	must(o.Set(key, val))
	h := j.g.Hyper()
	j.r.groupOptions("paramGroup."+key, j.kind, &h, o, true)
	params := j.g.Params
	*j.g = h
	j.g.Params = params
	return true
}

func (j *jsGroup) Has(key string) bool    { return j.Get(key) != nil }
func (j *jsGroup) Delete(key string) bool { return false }
func (j *jsGroup) Keys() []string {
	keys := groupKeys(j.kind)
	for k := range j.g.Extra {
		keys = append(keys, k)
	}
	return keys
}

// schedulerObject builds the script face of a scheduler.
// lrSchedule is what a script's scheduler object drives: an
// optim.Scheduler or an optim.Sequential of them.
type lrSchedule interface {
	Step() error
	LastLR() []float64
	LastEpoch() int
	StateDict() map[string]any
	LoadStateDict(map[string]any) error
}

func (r *Runtime) schedulerObject(s lrSchedule) goja.Value {
	obj := r.vm.NewObject()
	if one, ok := s.(*optim.Scheduler); ok { // SequentialLR finds it here
		must(obj.DefineDataProperty("__scheduler", r.vm.ToValue(one), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE))
	}
	r.fn(obj, "step", func(call goja.FunctionCall) goja.Value {
		if err := s.Step(); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
	r.fn(obj, "getLastLr", func(call goja.FunctionCall) goja.Value { return r.vm.ToValue(toAnyFloats(s.LastLR())) })
	// stateDict and loadStateDict carry the schedule's position through
	// checkpoints, in PyTorch's layout (last_epoch, base_lrs, _last_lr;
	// SequentialLR's with each scheduler's under _schedulers).
	r.fn(obj, "stateDict", func(call goja.FunctionCall) goja.Value {
		return r.vm.ToValue(plainJSON(s.StateDict()))
	})
	r.fn(obj, "loadStateDict", func(call goja.FunctionCall) goja.Value {
		o, ok := call.Argument(0).(*goja.Object)
		if !ok {
			r.throwf("scheduler.loadStateDict: expects a state dict, got %s", describe(call.Argument(0)))
		}
		m, _ := o.Export().(map[string]any)
		if err := s.LoadStateDict(m); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
	must(obj.DefineAccessorProperty("lastEpoch", r.vm.ToValue(func(goja.FunctionCall) goja.Value { return r.vm.ToValue(s.LastEpoch()) }), nil, goja.FLAG_FALSE, goja.FLAG_TRUE))
	return obj
}

// plainJSON turns a state dict's Go slices into the []any that goja
// presents as arrays (and JSON.stringify writes as such), nested maps too.
func plainJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plainJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plainJSON(e)
		}
		return out
	case []float64:
		return toAnyFloats(x)
	case []int:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	}
	return v
}

func toAnyFloats(fs []float64) []any {
	out := make([]any, len(fs))
	for i, f := range fs {
		out[i] = f
	}
	return out
}
