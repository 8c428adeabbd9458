package script

import (
	"fmt"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/tensorio"
)

// ioModule is require("zeroeng").io: safetensors, .npy and idx files.
// Loaded tensors are the script's like any other (see lifetime.go): data
// loaded during setup lives to the end of the script.
func (r *Runtime) ioModule() *goja.Object {
	m := r.vm.NewObject()
	r.fn(m, "loadSafetensors", func(call goja.FunctionCall) goja.Value {
		path := r.pathArg("io.loadSafetensors", call.Argument(0))
		load := tensorio.LoadSafetensors
		if r.lazyInit > 0 { // inside zero.init: each rank reads only what it needs
			load = tensorio.OpenSafetensorsLazy
		}
		ts, meta, err := load(r.rt, path)
		if err != nil {
			r.throw(err)
		}
		obj := r.vm.NewObject()
		for _, n := range ts {
			must(obj.Set(n.Name, r.wrap(n.Tensor)))
		}
		if len(meta) > 0 {
			metaObj := r.vm.ToValue(meta)
			must(obj.DefineDataProperty("__metadata__", metaObj, goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE))
		}
		return obj
	})
	r.fn(m, "saveSafetensors", func(call goja.FunctionCall) goja.Value {
		const fn = "io.saveSafetensors"
		path := r.pathArg(fn, call.Argument(0))
		obj, ok := call.Argument(1).(*goja.Object)
		if !ok {
			r.throwf("%s: expects an object of tensors (a state dict), got %s", fn, describe(call.Argument(1)))
		}
		var named []tensorio.Named
		for _, k := range obj.Keys() {
			named = append(named, tensorio.Named{Name: k, Tensor: r.unwrap(fn, fmt.Sprintf("tensor %q", k), obj.Get(k))})
		}
		var meta map[string]string
		if mo, ok := call.Argument(2).(*goja.Object); ok {
			meta = map[string]string{}
			for _, k := range mo.Keys() {
				meta[k] = mo.Get(k).String()
			}
		}
		if err := tensorio.SaveSafetensors(path, named, meta); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
	r.fn(m, "loadNpy", func(call goja.FunctionCall) goja.Value {
		t, err := tensorio.LoadNpy(r.rt, r.pathArg("io.loadNpy", call.Argument(0)))
		if err != nil {
			r.throw(err)
		}
		return r.wrap(t)
	})
	r.fn(m, "saveNpy", func(call goja.FunctionCall) goja.Value {
		const fn = "io.saveNpy"
		if err := tensorio.SaveNpy(r.pathArg(fn, call.Argument(0)), r.unwrap(fn, "tensor", call.Argument(1))); err != nil {
			r.throw(err)
		}
		return goja.Undefined()
	})
	r.fn(m, "loadIdx", func(call goja.FunctionCall) goja.Value {
		t, err := tensorio.LoadIdx(r.rt, r.pathArg("io.loadIdx", call.Argument(0)))
		if err != nil {
			r.throw(err)
		}
		return r.wrap(t)
	})
	return m
}

func (r *Runtime) pathArg(fn string, v goja.Value) string {
	s, ok := v.Export().(string)
	if !ok || s == "" {
		r.throwf("%s: expects a file path, got %s", fn, describe(v))
	}
	return s
}
