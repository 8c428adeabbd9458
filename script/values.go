package script

import (
	"fmt"
	"math"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Conversions between JavaScript arguments and Go values, raising a clear
// TypeError-style message naming the function and the argument on misuse.

func isMissing(v goja.Value) bool { return v == nil || goja.IsUndefined(v) || goja.IsNull(v) }

// hidden is the Go value behind one of the host API's hidden properties
// ("__optimizer", "__ddp"), or nil when o has no such property.
func hidden(o *goja.Object, key string) any {
	v := o.Get(key)
	if v == nil {
		return nil
	}
	return v.Export()
}

// intValue converts an integral number.
func (r *Runtime) intValue(fn, what string, v goja.Value) int {
	if isMissing(v) {
		r.throwf("%s: %s is missing", fn, what)
	}
	f := v.ToFloat()
	if v.ExportType() == nil || math.IsNaN(f) || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		r.throwf("%s: %s must be an integer, got %s", fn, what, describe(v))
	}
	return int(f)
}

// intArg is argument i as an integer, or def when absent.
func (r *Runtime) intArg(fn, what string, call goja.FunctionCall, i, def int) int {
	v := call.Argument(i)
	if isMissing(v) {
		return def
	}
	return r.intValue(fn, what, v)
}

// numberValue converts a number (booleans count as 0/1, as in PyTorch).
func (r *Runtime) numberValue(fn, what string, v goja.Value) float64 {
	switch v.ExportType() {
	case nil:
		r.throwf("%s: %s is missing", fn, what)
	}
	switch x := v.Export().(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	case bool:
		if x {
			return 1
		}
		return 0
	}
	r.throwf("%s: %s must be a number, got %s", fn, what, describe(v))
	return 0
}

// boolArg is argument i as a boolean, or def when absent.
func boolArg(call goja.FunctionCall, i int, def bool) bool {
	v := call.Argument(i)
	if isMissing(v) {
		return def
	}
	return v.ToBoolean()
}

// options returns argument i when it is a plain options object.
// optionsOf is options, checked against the keys fn accepts: an unknown
// key is an error naming it and the key meant (checkKeys). Every options
// object of the host API is read through it.
func (r *Runtime) optionsOf(fn string, call goja.FunctionCall, i int, known ...string) *goja.Object {
	o := r.options(call, i)
	r.checkKeys(fn, o, known...)
	return o
}

func (r *Runtime) options(call goja.FunctionCall, i int) *goja.Object {
	v := call.Argument(i)
	if isMissing(v) {
		return nil
	}
	obj, ok := v.(*goja.Object)
	if !ok || r.isTensor(v) {
		return nil
	}
	if _, isArr := obj.Export().([]any); isArr {
		return nil
	}
	return obj
}

func optValue(o *goja.Object, name string) goja.Value {
	if o == nil {
		return nil
	}
	v := o.Get(name)
	if isMissing(v) {
		return nil
	}
	return v
}

func (r *Runtime) optNumber(fn string, o *goja.Object, name string, def float64) float64 {
	v := optValue(o, name)
	if v == nil {
		return def
	}
	return r.numberValue(fn, "option "+name, v)
}

func (r *Runtime) optInt(fn string, o *goja.Object, name string, def int) int {
	v := optValue(o, name)
	if v == nil {
		return def
	}
	return r.intValue(fn, "option "+name, v)
}

func optFloat(o *goja.Object, name string, def float64) float64 {
	if v := optValue(o, name); v != nil {
		return v.ToFloat()
	}
	return def
}

func optBool(o *goja.Object, name string, def bool) bool {
	v := optValue(o, name)
	if v == nil {
		return def
	}
	return v.ToBoolean()
}

func optString(o *goja.Object, name, def string) string {
	v := optValue(o, name)
	if v == nil {
		return def
	}
	return v.String()
}

// dtypeValue parses "float32", "torch.float32", "float", "long", ...
func (r *Runtime) dtypeValue(fn string, v goja.Value, def dtype.DType) dtype.DType {
	if isMissing(v) {
		return def
	}
	d, ok := dtype.Parse(v.String())
	if !ok {
		r.throwf("%s: unknown dtype %s (float32, float64, bfloat16, float16, int64, int32, uint8, bool)", fn, describe(v))
	}
	return d
}

// intList converts an array of integers (a shape, a list of dims).
func (r *Runtime) intList(fn, what string, v goja.Value) []int {
	obj, ok := v.(*goja.Object)
	if !ok {
		r.throwf("%s: %s must be an array of integers, got %s", fn, what, describe(v))
	}
	n := int(obj.Get("length").ToInteger())
	if n < 0 || n > 64 {
		r.throwf("%s: %s must be an array of at most 64 integers", fn, what)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = r.intValue(fn, fmt.Sprintf("%s[%d]", what, i), obj.Get(fmt.Sprint(i)))
	}
	return out
}

// shapeArgs reads a shape given as one array or as integer arguments from
// position i on, PyTorch's two spellings (t.view(2, 3) and t.view([2, 3])).
func (r *Runtime) shapeArgs(fn string, call goja.FunctionCall, i int) []int {
	if i < len(call.Arguments) {
		if obj, ok := call.Arguments[i].(*goja.Object); ok && !r.isTensor(obj) {
			if _, arr := obj.Export().([]any); arr {
				return r.intList(fn, "shape", obj)
			}
		}
	}
	var out []int
	for j := i; j < len(call.Arguments); j++ {
		if r.options(call, j) != nil {
			break
		}
		out = append(out, r.intValue(fn, fmt.Sprintf("argument %d", j+1), call.Arguments[j]))
	}
	return out
}

// dimsArg reads one dimension or an array of them (nil when absent).
func (r *Runtime) dimsArg(fn string, v goja.Value) []int {
	if isMissing(v) {
		return nil
	}
	if obj, ok := v.(*goja.Object); ok {
		if _, arr := obj.Export().([]any); arr {
			return r.intList(fn, "dim", obj)
		}
	}
	return []int{r.intValue(fn, "dim", v)}
}

// describe names a JavaScript value in an error message.
func describe(v goja.Value) string {
	switch {
	case v == nil || goja.IsUndefined(v):
		return "undefined"
	case goja.IsNull(v):
		return "null"
	}
	switch x := v.Export().(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case *jsTensor:
		return "a tensor"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return v.String()
}

// float64s flattens nested arrays of numbers (and booleans) row-major and
// infers their shape; ragged nesting is an error.
func (r *Runtime) float64s(fn string, v goja.Value) ([]float64, []int) {
	var shape []int
	var data []float64
	var walk func(x any, depth int)
	walk = func(x any, depth int) {
		switch e := x.(type) {
		case []any:
			if depth == len(shape) {
				if len(data) > 0 {
					r.throwf("%s: ragged nested arrays (a list where a number was expected)", fn)
				}
				shape = append(shape, len(e))
			} else if depth > len(shape) || shape[depth] != len(e) {
				r.throwf("%s: ragged nested arrays (expected length %d at depth %d, got %d)", fn, shape[min(depth, len(shape)-1)], depth, len(e))
			}
			for _, c := range e {
				walk(c, depth+1)
			}
		case int64:
			if depth != len(shape) {
				r.throwf("%s: ragged nested arrays (a number where a list was expected)", fn)
			}
			data = append(data, float64(e))
		case float64:
			if depth != len(shape) {
				r.throwf("%s: ragged nested arrays (a number where a list was expected)", fn)
			}
			data = append(data, e)
		case bool:
			if depth != len(shape) {
				r.throwf("%s: ragged nested arrays", fn)
			}
			if e {
				data = append(data, 1)
			} else {
				data = append(data, 0)
			}
		default:
			r.throwf("%s: expected numbers or nested arrays of numbers, got %T", fn, x)
		}
	}
	walk(v.Export(), 0)
	return data, shape
}

// isIntegral reports whether every value is an integer.
func isIntegral(vals []float64) bool {
	for _, v := range vals {
		if v != math.Trunc(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}
