package script

import (
	"fmt"
	"math"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// ampModule is require("zeroeng").amp, torch.amp's mixed precision:
//
//	amp.autocast(dtype | { dtype, enabled }, fn) → fn's result
//	amp.GradScaler({ initScale, growthFactor, backoffFactor, growthInterval, enabled })
//
// autocast runs fn with engine/tensor's Autocast (matrix products and
// attention in the low precision, softmax, norms, losses and sums in
// float32, weights float32). Its dtype defaults to PyTorch's for the
// device: bfloat16 on a CPU, float16 on a GPU. GradScaler is
// torch.cuda.amp.GradScaler for float16's narrow range: the loss scaled up
// before backward, the gradients unscaled before the step, a step with an
// infinite or NaN gradient skipped and the scale backed off, grown again
// after growthInterval clean steps. Under ZeRO stages 2 and 3 the
// optimizer unscales its gradient slices itself and every rank skips the
// same steps.
func (r *Runtime) ampModule() *goja.Object {
	m := r.vm.NewObject()
	r.fn(m, "autocast", func(call goja.FunctionCall) goja.Value {
		const fn = "amp.autocast"
		dt, enabled := dtype.BFloat16, true
		if r.rt.Device().Kind() == device.CUDA {
			dt = dtype.Float16
		}
		arg := call.Argument(0)
		if _, ok := arg.(*goja.Object); ok && !isFunction(arg) {
			ops := r.optionsOf(fn, call, 0, "dtype", "enabled")
			dt = r.dtypeValue(fn, optValue(ops, "dtype"), dt)
			enabled = optBool(ops, "enabled", true)
		} else if !isMissing(arg) {
			dt = r.dtypeValue(fn, arg, dt)
		}
		body := call.Argument(1)
		if !isFunction(body) {
			r.throwf("%s(dtype, fn): fn must be a function, got %s", fn, describe(body))
		}
		var out goja.Value
		run := func() error { out = r.callBack(fn, body); return nil }
		var err error
		if enabled {
			if dt != dtype.BFloat16 && dt != dtype.Float16 {
				r.throwf("%s: dtype must be bfloat16 or float16, got %v", fn, dt)
			}
			err = r.rt.Autocast(dt, run)
		} else {
			err = r.rt.WithoutAutocast(run)
		}
		if err != nil {
			r.throw(err)
		}
		return out
	})
	r.fn(m, "GradScaler", func(call goja.FunctionCall) goja.Value {
		const fn = "amp.GradScaler"
		ops := r.optionsOf(fn, call, 0, "initScale", "growthFactor", "backoffFactor", "growthInterval", "enabled")
		s := &gradScaler{r: r, scale: float32(r.optNumber(fn, ops, "initScale", 65536)),
			growth: r.optNumber(fn, ops, "growthFactor", 2), backoff: r.optNumber(fn, ops, "backoffFactor", 0.5),
			interval: r.optInt(fn, ops, "growthInterval", 2000), enabled: optBool(ops, "enabled", true),
			per: map[scriptOptimizer]*scalerStage{}}
		switch {
		case !(s.growth > 1):
			r.throwf("%s: growthFactor must be above 1.0, got %v", fn, s.growth)
		case !(s.backoff < 1):
			r.throwf("%s: backoffFactor must be below 1.0, got %v", fn, s.backoff)
		case s.interval <= 0:
			r.throwf("%s: growthInterval must be a positive integer, got %d", fn, s.interval)
		case !(s.scale > 0):
			r.throwf("%s: initScale must be positive, got %v", fn, s.scale)
		}
		return s.object()
	})
	return m
}

// gradScaler is one amp.GradScaler: the scale (a float32, as PyTorch's
// scale tensor), its growth schedule and, per optimizer, where the
// current step stands.
type gradScaler struct {
	r               *Runtime
	scale           float32
	growth, backoff float64
	interval        int
	tracker         int // clean steps since the scale last changed
	enabled         bool
	updates         int  // update()s so far: the steps, for messages
	skippedInRow    int  // steps skipped one after another, up to now
	warned          bool // the warning that every step is skipped was given
	per             map[scriptOptimizer]*scalerStage
}

// scalerStage is an optimizer's state between two update()s.
type scalerStage struct {
	unscaled, stepped bool
	foundInf          bool
}

func (s *gradScaler) object() goja.Value {
	r := s.r
	obj := r.vm.NewObject()
	r.fn(obj, "scale", func(call goja.FunctionCall) goja.Value {
		v := call.Argument(0)
		if !s.enabled {
			return v
		}
		return s.scaleValue(v)
	})
	r.fn(obj, "unscale_", func(call goja.FunctionCall) goja.Value {
		if s.enabled {
			s.unscale("GradScaler.unscale_", r.optimizerArg("GradScaler.unscale_", call.Argument(0)))
		}
		return goja.Undefined()
	})
	r.fn(obj, "step", func(call goja.FunctionCall) goja.Value {
		const fn = "GradScaler.step"
		optObj, _ := call.Argument(0).(*goja.Object)
		opt := r.optimizerArg(fn, call.Argument(0))
		args := call.Arguments[1:]
		if !s.enabled {
			return r.callMethod(optObj, "step", args...)
		}
		st := s.stage(opt)
		if st.stepped {
			r.throwf("%s: step() has already been called since the last update()", fn)
		}
		if !st.unscaled {
			s.unscale(fn, opt)
		}
		st.stepped = true
		if st.foundInf { // skipped: an infinite or NaN gradient
			if z, ok := shardedGrads(opt); ok {
				if err := z.SkipStep(); err != nil {
					r.throw(err)
				}
			}
			return goja.Undefined()
		}
		return r.callMethod(optObj, "step", args...)
	})
	r.fn(obj, "update", func(call goja.FunctionCall) goja.Value {
		if !s.enabled {
			return goja.Undefined()
		}
		if v := call.Argument(0); !isMissing(v) {
			s.scale = float32(r.numberValue("GradScaler.update", "newScale", v))
		} else {
			s.update()
		}
		s.per = map[scriptOptimizer]*scalerStage{}
		return goja.Undefined()
	})
	r.fn(obj, "getScale", func(goja.FunctionCall) goja.Value {
		if !s.enabled {
			return r.vm.ToValue(1.0)
		}
		return r.vm.ToValue(float64(s.scale))
	})
	r.fn(obj, "isEnabled", func(goja.FunctionCall) goja.Value { return r.vm.ToValue(s.enabled) })
	// stateDict and loadStateDict: PyTorch's keys, so a checkpoint resumes
	// with the same scale and growth count.
	r.fn(obj, "stateDict", func(goja.FunctionCall) goja.Value {
		if !s.enabled {
			return r.vm.ToValue(map[string]any{})
		}
		return r.vm.ToValue(map[string]any{"scale": float64(s.scale), "growth_factor": s.growth, "backoff_factor": s.backoff,
			"growth_interval": s.interval, "_growth_tracker": s.tracker})
	})
	r.fn(obj, "loadStateDict", func(call goja.FunctionCall) goja.Value {
		const fn = "GradScaler.loadStateDict"
		o, ok := call.Argument(0).(*goja.Object)
		if !ok {
			r.throwf("%s: expects a state dict, got %s", fn, describe(call.Argument(0)))
		}
		if !s.enabled {
			return goja.Undefined()
		}
		num := func(k string) float64 {
			v := o.Get(k)
			if isMissing(v) {
				r.throwf("%s: the state dict has no %q (not a GradScaler's?)", fn, k)
			}
			return r.numberValue(fn, k, v)
		}
		scale, growth, backoff, interval, tracker := num("scale"), num("growth_factor"), num("backoff_factor"), num("growth_interval"), num("_growth_tracker")
		if !(scale > 0) || interval != math.Trunc(interval) || interval <= 0 || tracker != math.Trunc(tracker) || tracker < 0 {
			r.throwf("%s: invalid state (scale %v, growth_interval %v, _growth_tracker %v)", fn, scale, interval, tracker)
		}
		s.scale, s.growth, s.backoff, s.interval, s.tracker = float32(scale), growth, backoff, int(interval), int(tracker)
		return goja.Undefined()
	})
	return obj
}

// scaleValue multiplies a tensor, or the tensors of an array, by the
// scale (in the tensor's type, as PyTorch multiplies by its float32 scale
// tensor).
func (s *gradScaler) scaleValue(v goja.Value) goja.Value {
	r := s.r
	if j := asJSTensor(v); j != nil {
		t := r.live("GradScaler.scale", j)
		if !t.DType().IsFloat() {
			r.throwf("GradScaler.scale: expects floating-point outputs, got %v", t.DType())
		}
		sc := r.rt.OpenScope()
		defer sc.Close()
		return r.wrap(t.Mul(r.rt.FromValues(tensor.Float32, []float64{float64(s.scale)})))
	}
	if obj, ok := v.(*goja.Object); ok && r.isArray(obj) {
		n := r.arrayLength("GradScaler.scale", "the outputs", obj, 16)
		out := make([]any, n)
		for i := range n {
			out[i] = s.scaleValue(obj.Get(fmt.Sprint(i)))
		}
		return r.vm.NewArray(out...)
	}
	r.throwf("GradScaler.scale: expects a tensor or an array of tensors, got %s", describe(v))
	return nil
}

// shardingOptimizer is what the scaler asks of an optimizer that shards
// (ZeRO's, *zero.Optimizer): its parameters, to refuse one that steps
// inside backward, and, when it keeps its own slices of the gradients
// rather than the parameters' (ShardsGradients: stages 2 and 3), the
// unscale and the skipped step it does itself, agreeing across ranks.
type shardingOptimizer interface {
	Params() []*tensor.Tensor
	ShardsGradients() bool
	UnscaleGrads(inv float64) (foundInf bool, err error)
	SkipStep() error
}

// shardedGrads is opt as an optimizer whose gradients live in its slices
// rather than on the parameters.
func shardedGrads(opt scriptOptimizer) (shardingOptimizer, bool) {
	z, ok := opt.(shardingOptimizer)
	return z, ok && z.ShardsGradients()
}

func (s *gradScaler) stage(opt scriptOptimizer) *scalerStage {
	st := s.per[opt]
	if st == nil {
		st = &scalerStage{}
		s.per[opt] = st
	}
	return st
}

// unscale divides the optimizer's gradients by the scale (multiplying by
// its float32 reciprocal, as PyTorch) and records whether any is infinite
// or NaN.
func (s *gradScaler) unscale(fn string, opt scriptOptimizer) {
	r := s.r
	st := s.stage(opt)
	switch {
	case st.unscaled:
		r.throwf("%s: unscale_() has already been called on this optimizer since the last update()", fn)
	case st.stepped:
		r.throwf("%s: unscale_() is being called after step()", fn)
	}
	if z, ok := opt.(shardingOptimizer); ok {
		r.refuseSteppedInBackward(fn, "a GradScaler checks the whole gradient for inf and NaN before the step (and unscales it)", z.Params())
	}
	inv := float64(float32(1 / float64(s.scale)))
	if z, ok := shardedGrads(opt); ok {
		// ZeRO stages 2 and 3: the gradients are the optimizer's slices;
		// it unscales them and agrees with every rank on an overflow.
		found, err := z.UnscaleGrads(inv)
		if err != nil {
			r.throw(err)
		}
		st.foundInf, st.unscaled = found, true
		return
	}
	sc := r.rt.OpenScope()
	defer sc.Close()
	// 0·g sums to 0 for finite gradients and to NaN otherwise: one running
	// total on the device, read once (not a host sync per parameter).
	var flag *tensor.Tensor
	for _, g := range opt.ParamGroups() {
		for _, p := range g.Params {
			grad := p.Grad()
			if grad == nil {
				continue
			}
			if err := grad.Err(); err != nil {
				r.throw(err)
			}
			if err := grad.MulScalarInPlace(inv); err != nil {
				r.throw(err)
			}
			z := grad.MulScalar(0).Sum(nil, false).To(tensor.Float32)
			if flag == nil {
				flag = z
			} else {
				flag = flag.Add(z)
			}
		}
	}
	if flag != nil {
		v, err := flag.Item()
		if err != nil {
			r.throw(err)
		}
		st.foundInf = v != 0
	}
	st.unscaled = true
}

// update is torch._amp_update_scale_: back off after a step with an
// infinite gradient, grow after interval clean steps (in float32).
func (s *gradScaler) update() {
	found := false
	for _, st := range s.per {
		found = found || st.foundInf
	}
	s.updates++
	if found {
		s.scale = float32(float64(s.scale) * s.backoff)
		s.tracker = 0
		s.skippedInRow++
		if s.skippedInRow >= s.interval && !s.warned {
			// A backoff per step for a whole growth interval: no scale
			// gives finite gradients, so the run is not training (NaN in
			// the model or its inputs, a learning rate that diverged).
			// Once, not every step.
			s.warned = true
			s.r.checkpointWarn(fmt.Sprintf("amp.GradScaler: the last %d steps (growthInterval) were all skipped for infinite or NaN gradients, up to step %d; the scale is now %g: the gradients are not finite at any scale (NaN in the model or its inputs, or a diverged learning rate?)",
				s.skippedInRow, s.updates, s.scale))
		}
		return
	}
	s.skippedInRow = 0
	if s.tracker+1 == s.interval {
		if grown := float32(float64(s.scale) * s.growth); !math.IsInf(float64(grown), 0) {
			s.scale = grown
		}
		s.tracker = 0
		return
	}
	s.tracker++
}
