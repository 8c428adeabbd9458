package script

import (
	"fmt"
	"math"
	"strconv"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
	"github.com/zeroeng/zeroeng/engine/torchfile"
)

// ioModule is require("zeroeng").io: PyTorch's own files (torch.save),
// safetensors, .npy and idx files.
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
	r.fn(m, "load", func(call goja.FunctionCall) goja.Value {
		const fn = "io.load"
		path := r.pathArg(fn, call.Argument(0))
		obj, err := torchfile.ReadFile(path)
		if err != nil {
			r.throw(err)
		}
		l := &torchLoader{r: r, fn: fn, path: path, made: map[any]goja.Value{}}
		return l.value(obj, "the object")
	})
	r.fn(m, "save", func(call goja.FunctionCall) goja.Value {
		const fn = "io.save"
		if _, first := stringOf(call.Argument(0)); first && isObject(call.Argument(1)) {
			r.throwf("%s: takes (obj, path), the object first, as torch.save does", fn)
		}
		path := r.pathArg(fn, call.Argument(1))
		s := &torchSaver{r: r, fn: fn, made: map[*goja.Object]any{}, onPath: map[*goja.Object]bool{}, tensors: map[*tensor.Tensor]*torchfile.Tensor{}}
		if err := torchfile.WriteFile(path, s.value(call.Argument(0), "the object", 0)); err != nil {
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
	s, ok := stringOf(v)
	if !ok || s == "" {
		r.throwf("%s: expects a file path, got %s", fn, describe(v))
	}
	return s
}

// torchLoader turns what a PyTorch file holds into the script's values:
// dicts into objects (an integer key, as an optimizer's state has, into
// its decimal string), lists and tuples into arrays, None into null, and
// tensors into tensors. What the file shares (tied weights) stays shared:
// one tensor, one object.
type torchLoader struct {
	r        *Runtime
	fn, path string
	made     map[any]goja.Value // *Dict, *List, *Tensor → its value
}

// value converts v, which where names in errors. torchfile bounds how deep
// v nests, so the recursion is bounded too.
func (l *torchLoader) value(v any, where string) goja.Value {
	r := l.r
	switch x := v.(type) {
	case nil:
		return goja.Null()
	case bool, int64, float64, string:
		return r.vm.ToValue(x)
	}
	if made, ok := l.made[v]; ok {
		return made
	}
	var out goja.Value
	switch x := v.(type) {
	case *torchfile.Tensor:
		t := r.rt.FromBytes(x.DType, x.Data, x.Shape...)
		if err := t.Err(); err != nil {
			r.throw(fmt.Errorf("%s: %s: %s: %w", l.fn, l.path, where, err))
		}
		out = r.wrap(t)
	case *torchfile.List:
		items := make([]any, len(x.Items))
		for i, e := range x.Items {
			items[i] = l.value(e, fmt.Sprintf("%s[%d]", where, i))
		}
		out = r.vm.NewArray(items...)
	case *torchfile.Dict:
		obj := r.vm.NewObject()
		seen := make(map[string]bool, len(x.Items))
		for _, it := range x.Items {
			var key string
			switch k := it.Key.(type) {
			case string:
				key = k
			case int64:
				key = strconv.FormatInt(k, 10)
			}
			if seen[key] {
				r.throw(fmt.Errorf("%s: %s: %s has the keys %q and %v, one property of an object", l.fn, l.path, where, key, it.Key))
			}
			seen[key] = true
			// Defined, not set: a key "__proto__" is a property like any
			// other, not the object's prototype.
			must(obj.DefineDataProperty(key, l.value(it.Value, fmt.Sprintf("%s[%q]", where, key)), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE))
		}
		out = obj
	default:
		r.throw(fmt.Errorf("%s: %s: %s is a %T", l.fn, l.path, where, v)) // torchfile returns no other type
	}
	l.made[v] = out
	return out
}

// torchSaver turns a script's value into what a PyTorch file holds:
// objects into dicts (a key that is a whole number, "0", into an int, as
// PyTorch keys an optimizer's state), arrays into lists, whole numbers
// into ints and other numbers into floats, null into None. What the value
// shares (a tensor under two names) stays shared.
type torchSaver struct {
	r       *Runtime
	fn      string
	made    map[*goja.Object]any
	onPath  map[*goja.Object]bool
	tensors map[*tensor.Tensor]*torchfile.Tensor
}

// saveable is the message's list of what io.save writes.
const saveable = "io.save writes tensors, objects, arrays, numbers, strings, booleans and null"

func (s *torchSaver) value(v goja.Value, where string, depth int) any {
	r := s.r
	if depth > torchfile.MaxDepth {
		r.throwRangef("%s: %s: objects nest more than %d deep", s.fn, where, torchfile.MaxDepth)
	}
	if v == nil || goja.IsUndefined(v) {
		r.throwf("%s: %s is undefined; %s", s.fn, where, saveable)
	}
	if goja.IsNull(v) {
		return nil
	}
	obj, ok := v.(*goja.Object)
	if !ok {
		switch x := v.Export().(type) {
		case bool, string, int64:
			return x
		case float64:
			if x == math.Trunc(x) && math.Abs(x) <= 1<<53 {
				return int64(x)
			}
			return x
		}
		r.throwf("%s: %s is %s; %s", s.fn, where, describe(v), saveable)
	}
	if j := asJSTensor(obj); j != nil {
		t := r.live(s.fn, j)
		if ft, ok := s.tensors[t]; ok {
			return ft
		}
		data, err := tensor.SharedBytes(t) // written before the script runs on
		if err != nil {
			r.throw(fmt.Errorf("%s: %s: %w", s.fn, where, err))
		}
		ft := &torchfile.Tensor{DType: t.DType(), Shape: t.Shape(), Data: data}
		s.tensors[t] = ft
		return ft
	}
	if s.onPath[obj] {
		r.throwf("%s: %s contains itself", s.fn, where)
	}
	if made, ok := s.made[obj]; ok {
		return made
	}
	s.onPath[obj] = true
	defer delete(s.onPath, obj)
	var out any
	switch {
	case isFunction(obj.Get("stateDict")):
		r.throwf("%s: %s is a module or an optimizer: save its stateDict()", s.fn, where)
	case isFunction(obj):
		r.throwf("%s: %s is a function; %s", s.fn, where, saveable)
	case isArrayObject(obj):
		n := r.arrayLength(s.fn, where, obj, 16)
		l := &torchfile.List{Items: make([]any, n)}
		for i := range n {
			l.Items[i] = s.value(obj.Get(strconv.Itoa(i)), fmt.Sprintf("%s[%d]", where, i), depth+1)
		}
		out = l
	case obj.ExportType() != objectType:
		r.throwf("%s: %s is %s; %s", s.fn, where, describe(obj), saveable)
	default:
		d := &torchfile.Dict{}
		for _, k := range obj.Keys() {
			var key any = k
			if n, err := strconv.ParseInt(k, 10, 64); err == nil && n >= 0 && strconv.FormatInt(n, 10) == k {
				key = n
			}
			d.Items = append(d.Items, torchfile.Item{Key: key, Value: s.value(obj.Get(k), fmt.Sprintf("%s[%q]", where, k), depth+1)})
		}
		out = d
	}
	s.made[obj] = out
	return out
}
