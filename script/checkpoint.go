package script

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/checkpoint"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// StopRequest is a graceful stop shared by the ranks of a job (SIGTERM,
// a scheduler's preemption notice): ranks whose script runs a checkpoint
// Manager finish their step, save a checkpoint and exit 0 from the
// manager's next save call.
type StopRequest struct {
	requested atomic.Bool
	handlers  atomic.Int32
}

// Request asks for the stop and reports whether a script can honour it
// (one has a checkpoint Manager); without one the caller interrupts the
// job instead.
func (s *StopRequest) Request() bool {
	s.requested.Store(true)
	return s.handlers.Load() > 0
}

// Requested reports whether a stop was asked for.
func (s *StopRequest) Requested() bool { return s != nil && s.requested.Load() }

// checkpointModule is require("zeroeng").checkpoint:
//
//	checkpoint.save(dir, step, state, { keep, consolidated })   → the checkpoint's folder
//	checkpoint.load(dir, state)                   → { step, path, worldSize } or null
//	checkpoint.latest(dir)                        → the newest checkpoint's folder or null
//	checkpoint.Manager(dir, { state, every, keep, consolidated }) → load(), save(step, { force }), stopRequested
//
// state maps names to what is saved: modules (model.safetensors, with
// their stateDict names; under ZeRO stage 3 each rank's slices, and
// model.safetensors too with consolidated), optimizers (plain, or ZeRO
// with one shard per rank), objects with stateDict()/loadStateDict()
// (schedulers, token loaders: their JSON state), and plain JSON values,
// which load() puts back into state. save and load are collective: every
// rank calls them.
func (r *Runtime) checkpointModule() *goja.Object {
	m := r.vm.NewObject()
	r.fn(m, "save", func(call goja.FunctionCall) goja.Value {
		const fn = "checkpoint.save"
		dir := r.pathArg(fn, call.Argument(0))
		step := r.intValue(fn, "step", call.Argument(1))
		ops := r.optionsOf(fn, call, 3, "keep", "consolidated")
		opts := checkpoint.SaveOptions{Keep: r.optInt(fn, ops, "keep", 0), Consolidated: optBool(ops, "consolidated", false), Warn: r.checkpointWarn}
		return r.vm.ToValue(r.saveCheckpoint(fn, dir, step, call.Argument(2), opts))
	})
	r.fn(m, "load", func(call goja.FunctionCall) goja.Value {
		const fn = "checkpoint.load"
		return r.loadCheckpoint(fn, r.pathArg(fn, call.Argument(0)), call.Argument(1), false)
	})
	r.fn(m, "latest", func(call goja.FunctionCall) goja.Value {
		p, err := checkpoint.Latest(r.pathArg("checkpoint.latest", call.Argument(0)))
		if err != nil {
			r.throw(err)
		}
		if p == "" {
			return goja.Null()
		}
		return r.vm.ToValue(p)
	})
	r.fn(m, "Manager", func(call goja.FunctionCall) goja.Value {
		return r.checkpointManager(call)
	})
	return m
}

// checkpointManager makes checkpoint.Manager(dir, { state, every, keep,
// consolidated }).
func (r *Runtime) checkpointManager(call goja.FunctionCall) goja.Value {
	const fn = "checkpoint.Manager"
	dir := r.pathArg(fn, call.Argument(0))
	// Unknown keys first: { stat: ... } is a misspelled state, not a
	// missing one.
	ops := r.optionsOf(fn, call, 1, "state", "every", "keep", "consolidated")
	state := optValue(ops, "state")
	if _, ok := state.(*goja.Object); !ok {
		r.throwf("%s: options.state must be the object of what to save ({ model, optimizer, ... }), got %s", fn, describe(state))
	}
	every := r.optInt(fn, ops, "every", 0)
	keep := r.optInt(fn, ops, "keep", 0)
	if every < 0 || keep < 0 {
		r.throwRangef("%s: every and keep must not be negative", fn)
	}
	saveOpts := checkpoint.SaveOptions{Keep: keep, Consolidated: optBool(ops, "consolidated", false), Warn: r.checkpointWarn}
	if r.group == nil || r.group.Rank() == 0 {
		// The folder is this job's from now on: a second job that tries
		// to use it fails here, not after an hour of training.
		if err := checkpoint.Lock(dir); err != nil {
			r.throw(err)
		}
	}
	if stop := r.opts.Stop; stop != nil {
		stop.handlers.Add(1)
		r.closers = append(r.closers, func() { stop.handlers.Add(-1) })
	}
	obj := r.vm.NewObject()
	must(obj.Set("dir", dir))
	r.fn(obj, "load", func(goja.FunctionCall) goja.Value {
		// A resume goes on from the newest intact checkpoint.
		return r.loadCheckpoint("Manager.load", dir, state, true)
	})
	r.fn(obj, "save", func(call goja.FunctionCall) goja.Value {
		const fn = "Manager.save"
		step := r.intValue(fn, "step", call.Argument(0))
		force := optBool(r.optionsOf(fn, call, 1, "force"), "force", false)
		stop := r.agreeStop(fn)
		if !force && !stop && (every == 0 || step%every != 0) {
			return goja.Null()
		}
		path := r.saveCheckpoint(fn, dir, step, state, saveOpts)
		if stop {
			if r.opts.Rank == 0 {
				fmt.Fprintf(r.opts.Stderr, "%szeroeng: stop requested: saved %s after step %d; exiting\n", r.opts.Prefix, path, step)
			}
			panic(r.vm.NewGoError(&ExitError{Code: 0}))
		}
		return r.vm.ToValue(path)
	})
	must(obj.DefineAccessorProperty("stopRequested", r.vm.ToValue(func(goja.FunctionCall) goja.Value {
		return r.vm.ToValue(r.opts.Stop.Requested())
	}), nil, goja.FLAG_FALSE, goja.FLAG_TRUE))
	return obj
}

// agreeStop tells whether any rank has seen the stop request, the same
// answer on every rank (they may notice it at different steps).
func (r *Runtime) agreeStop(fn string) bool {
	local := 0.0
	if r.opts.Stop.Requested() {
		local = 1
	}
	if r.group.Size() == 1 {
		return local == 1
	}
	t := r.rt.FromValues(tensor.Float32, []float64{local}, 1)
	defer t.Release()
	r.inCollective.Add(1)
	err := r.group.AllReduce(t, dist.Max).Wait()
	r.inCollective.Add(-1)
	if err != nil {
		r.throwf("%s: %v", fn, err)
	}
	v, err := t.Item()
	if err != nil {
		r.throw(err)
	}
	return v == 1
}

// checkpointParts sorts the script's state object into what
// engine/checkpoint saves; stateful are the objects saved through their
// stateDict() (schedulers, loaders) and values the keys of plain JSON
// values.
func (r *Runtime) checkpointParts(fn string, v goja.Value, forLoad bool) (st *checkpoint.State, stateful map[string]*goja.Object, values []string) {
	obj, ok := v.(*goja.Object)
	if !ok || r.isTensor(v) || r.isArray(v) {
		r.throwf("%s: expects the object of what to save ({ model, optimizer, scheduler, loader, ... }), got %s", fn, describe(v))
	}
	moduleClass := r.zeroengModule().Get("nn").ToObject(r.vm).Get("Module").ToObject(r.vm)
	st = &checkpoint.State{JSON: map[string]json.RawMessage{}}
	stateful = map[string]*goja.Object{}
	gen := r.rt.Generator()
	if forLoad {
		st.SetRNG = gen.SetState
	} else {
		st.RNG = gen.State()
	}
	for _, key := range obj.Keys() {
		val := obj.Get(key)
		o, isObj := val.(*goja.Object)
		switch {
		case goja.IsUndefined(val):
		case isObj && o.Get("__optimizer") != nil && !goja.IsUndefined(o.Get("__optimizer")):
			st.Optimizers = append(st.Optimizers, checkpoint.Optimizer{Key: key, Opt: r.optimizerArg(fn, o)})
		case isObj && r.vm.InstanceOf(o, moduleClass):
			mod := checkpoint.Module{Key: key, Tensors: r.moduleTensors(fn, key, o)}
			if z := r.stage3(); z != nil {
				for _, n := range mod.Tensors {
					if _, ok := r.zeroPlan().UnitOf(n.Tensor); ok {
						// Each rank saves and loads its own slices.
						mod.Sharded = z
						break
					}
				}
			}
			st.Modules = append(st.Modules, mod)
		case isObj && isFunction(o.Get("stateDict")) && isFunction(o.Get("loadStateDict")):
			stateful[key] = o
			if !forLoad {
				sd := r.callMethod(o, "stateDict")
				st.JSON[key] = r.jsonValue(fn, key, sd)
			}
		case isObj && r.isTensor(val):
			r.throwf("%s: %q is a tensor; save tensors inside a module, or as plain numbers", fn, key)
		default:
			values = append(values, key)
			if !forLoad {
				st.JSON[key] = r.jsonValue(fn, key, val)
			}
		}
	}
	return st, stateful, values
}

// moduleTensors lists a module's stateDict() in its order.
func (r *Runtime) moduleTensors(fn, key string, module *goja.Object) []nn.NamedTensor {
	// The tensors themselves (under ZeRO stage 3 stateDict() returns
	// gathered copies; the checkpoint reads and writes the slices of the
	// parameters it names).
	method := "stateDict"
	if isFunction(module.Get("_rawStateDict")) {
		method = "_rawStateDict"
	}
	sd, ok := r.callMethod(module, method).(*goja.Object)
	if !ok {
		r.throwf("%s: %s.stateDict() did not return an object", fn, key)
	}
	var out []nn.NamedTensor
	for _, name := range sd.Keys() {
		out = append(out, nn.NamedTensor{Name: name, Tensor: r.unwrap(fn, fmt.Sprintf("%s.stateDict()[%q]", key, name), sd.Get(name))})
	}
	return out
}

// callMethod calls o[name](...args); the script's own exception passes
// through with its stack.
func (r *Runtime) callMethod(o *goja.Object, name string, args ...goja.Value) goja.Value {
	f, _ := goja.AssertFunction(o.Get(name))
	v, err := f(o, args...)
	if err != nil {
		panic(err)
	}
	return v
}

func (r *Runtime) jsonValue(fn, key string, v goja.Value) json.RawMessage {
	s, err := r.jsonCall("stringify", v)
	if err != nil || goja.IsUndefined(s) {
		r.throwf("%s: %q cannot be saved: it is not JSON (%s)", fn, key, describe(v))
	}
	return json.RawMessage(s.String())
}

func isFunction(v goja.Value) bool {
	_, ok := goja.AssertFunction(v)
	return ok
}

// saveCheckpoint saves state as step under dir on every rank.
func (r *Runtime) saveCheckpoint(fn, dir string, step int, state goja.Value, opts checkpoint.SaveOptions) string {
	if step < 0 {
		r.throwRangef("%s: step must not be negative, got %d", fn, step)
	}
	st, _, _ := r.checkpointParts(fn, state, false)
	start := r.opts.Trace.Now()
	r.inCollective.Add(1)
	path, err := checkpoint.Save(r.group, dir, int64(step), st, opts)
	r.inCollective.Add(-1)
	r.traceAdd(trace.User, "checkpoint save", start)
	if err != nil {
		r.throw(err)
	}
	return path
}

// checkpointWarn prints what a save has to say beside its result (a
// checkpoint of NaN parameters, and the finite one kept), on rank 0 where
// the save commits, as a load's skipped checkpoints are printed.
func (r *Runtime) checkpointWarn(msg string) {
	fmt.Fprintf(r.opts.Stderr, "%szeroeng: %s\n", r.opts.Prefix, msg)
}

// loadCheckpoint restores the newest checkpoint under dir into state and
// returns { step, path, worldSize }, or null when there is none.
func (r *Runtime) loadCheckpoint(fn, dir string, state goja.Value, newestIntact bool) goja.Value {
	st, stateful, values := r.checkpointParts(fn, state, true)
	start := r.opts.Trace.Now()
	r.inCollective.Add(1)
	var m *checkpoint.Manifest
	var path string
	var skipped []checkpoint.Skipped
	var err error
	if newestIntact {
		m, path, skipped, err = checkpoint.RestoreNewestIntact(r.group, r.rt, dir, st)
	} else {
		m, path, err = checkpoint.Restore(r.group, r.rt, dir, st)
	}
	r.inCollective.Add(-1)
	r.traceAdd(trace.User, "checkpoint load", start)
	if r.opts.Rank == 0 {
		for _, s := range skipped {
			msg := fmt.Sprintf("%szeroeng: checkpoint: skipped %s, which is damaged: %v", r.opts.Prefix, s.Path, s.Err)
			if err == nil && path != "" {
				msg += "; resuming from " + filepath.Base(path)
			}
			fmt.Fprintln(r.opts.Stderr, msg)
		}
	}
	if err != nil {
		r.throw(err)
	}
	if m == nil {
		return goja.Null()
	}
	obj := state.(*goja.Object)
	for key, o := range stateful {
		raw, ok := m.State[key]
		if !ok {
			r.throwf("%s: %s holds no state for %q", fn, path, key)
		}
		r.callMethod(o, "loadStateDict", r.parseJSON(fn, path, key, raw))
	}
	for _, key := range values {
		if raw, ok := m.State[key]; ok {
			must(obj.Set(key, r.parseJSON(fn, path, key, raw)))
		}
	}
	return r.vm.ToValue(map[string]any{"step": m.Step, "path": path, "worldSize": m.WorldSize})
}

func (r *Runtime) parseJSON(fn, path, key string, raw json.RawMessage) goja.Value {
	v, err := r.jsonCall("parse", r.vm.ToValue(string(raw)))
	if err != nil {
		r.throwf("%s: %s: the state of %q: %v", fn, path, key, err)
	}
	return v
}
