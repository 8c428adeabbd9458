package script

import (
	"errors"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// The script side of ZeRO stage 3. zero.fullyShard(module) (prelude.js)
// records the module's own parameters as a unit and wraps its forward in
// native.zero.beforeForward / afterForward; a ZeroRedundancyOptimizer with
// stage: 3 is then made over the units and shards them (zero/stage3.go).
// Before that optimizer exists the wrappers do nothing: the parameters
// are whole, as FSDP2's are not, but a script marks its units first and
// makes its optimizer next, as in PyTorch.

// nativeStage3 adds the unit functions to native.zero.
func (r *Runtime) nativeStage3(o *goja.Object) {
	r.stage3Natives(o)
	// unit(params, reshardAfterForward) → the unit's number.
	r.fn(o, "unit", func(call goja.FunctionCall) goja.Value {
		const fn = "zero.fullyShard"
		if r.stage3 != nil {
			r.throwf("%s: the stage-3 optimizer is made already: mark every unit (each block, then the model) before making it", fn)
		}
		params := r.tensorList(fn, call.Argument(0))
		if r.unitOf == nil {
			r.unitOf = map[*tensor.Tensor]int{}
		}
		id := len(r.zeroUnits)
		var own []*tensor.Tensor
		for _, p := range params {
			if _, taken := r.unitOf[p]; !taken {
				r.unitOf[p] = id
				own = append(own, p)
			}
		}
		r.zeroUnits = append(r.zeroUnits, zero.UnitSpec{Params: own, ReshardAfterForward: call.Argument(1).ToBoolean()})
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
		if r.stage3 == nil {
			return r.vm.ToValue(false)
		}
		for _, p := range r.tensorList("stateDict", call.Argument(0)) {
			if _, ok := r.unitOf[p]; ok {
				return r.vm.ToValue(true)
			}
		}
		return r.vm.ToValue(false)
	})
	// fullCopies(fn): fn's state dict ({ name: tensor }), read with the
	// whole model gathered, as copies that outlive the gather.
	r.fn(o, "fullCopies", func(call goja.FunctionCall) goja.Value {
		f, _ := goja.AssertFunction(call.Argument(0))
		out := r.vm.NewObject()
		err := r.stage3.WithFullParams(false, func() error {
			v, err := f(goja.Undefined())
			if err != nil {
				return err
			}
			sd := v.ToObject(r.vm)
			for _, k := range sd.Keys() {
				t := r.unwrap("stateDict", k, sd.Get(k))
				must(out.Set(k, r.wrap(t.Detach().Clone())))
			}
			return nil
		})
		r.rethrow(err)
		return out
	})
	// withFullParams(writeBack, fn): fn with the whole model gathered.
	r.fn(o, "withFullParams", func(call goja.FunctionCall) goja.Value {
		f, _ := goja.AssertFunction(call.Argument(1))
		return r.callWithFullParams(r.stage3, call.Argument(0).ToBoolean(), f)
	})
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
	if r.stage3 == nil {
		return nil
	}
	return r.stage3.Unit(int(id.ToInteger()))
}
