package script

import (
	"fmt"
	"math"
	"math/big"
	"reflect"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/internal/hostmem"
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

// intValue converts an integral number. Only a number (or a BigInt) is
// one: a string such as "3" is an error naming its type, not 3, since
// JavaScript's own conversions would take "3", "0x10", true and [5] for
// integers and a mistake in a script would run on silently.
func (r *Runtime) intValue(fn, what string, v goja.Value) int {
	if isMissing(v) {
		r.throwf("%s: %s is missing", fn, what)
	}
	f, ok := numberOf(v)
	if !ok {
		r.throwf("%s: %s must be an integer, got %s", fn, what, typeOf(v))
	}
	if math.IsNaN(f) || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		r.throwf("%s: %s must be an integer, got %s", fn, what, describe(v))
	}
	return int(f)
}

// numberOf is v's value when v is a number or a BigInt; ok is false for
// every other type (strings, booleans, objects), which JavaScript would
// convert.
func numberOf(v goja.Value) (f float64, ok bool) {
	if _, isObj := v.(*goja.Object); isObj || v == nil {
		return 0, false
	}
	switch x := v.Export().(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, true
	}
	return 0, false
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
	if isMissing(v) {
		r.throwf("%s: %s is missing", fn, what)
	}
	if f, ok := numberOf(v); ok {
		return f
	}
	if b, ok := boolOf(v); ok {
		if b {
			return 1
		}
		return 0
	}
	r.throwf("%s: %s must be a number, got %s", fn, what, describe(v))
	return 0
}

// boolArg is argument i as a boolean, or def when absent. Only true and
// false are booleans (see boolValue).
func boolArg(call goja.FunctionCall, i int, def bool) bool {
	v := call.Argument(i)
	if isMissing(v) {
		return def
	}
	return boolValue(fmt.Sprintf("argument %d", i+1), v)
}

// boolValue is v, which must be true or false: JavaScript's truthiness
// would make "no", "false" and 0.0001 true, and a flag a script got wrong
// would silently be on. Its callers have no Runtime (the free option
// readers), so it raises an argError, which native turns into the
// script's TypeError.
func boolValue(what string, v goja.Value) bool {
	if b, ok := boolOf(v); ok {
		return b
	}
	panic(argError(fmt.Sprintf("%s must be a boolean (true or false), got %s", what, typeOf(v))))
}

// toBool is boolValue raising its error at once, naming fn: for a value
// read outside a host function (a property's setter) or where fn says
// more than the function's name.
func (r *Runtime) toBool(fn, what string, v goja.Value) bool {
	b, ok := boolOf(v)
	if !ok {
		r.throwf("%s: %s must be a boolean (true or false), got %s", fn, what, typeOf(v))
	}
	return b
}

// stringOf is v's value when v is a string. An object is never exported
// to find out (see isArrayObject).
func stringOf(v goja.Value) (s string, ok bool) {
	if v == nil || isObject(v) {
		return "", false
	}
	s, ok = v.Export().(string)
	return s, ok
}

// boolOf is v's value when v is a boolean.
func boolOf(v goja.Value) (b, ok bool) {
	if v == nil || isObject(v) {
		return false, false
	}
	b, ok = v.Export().(bool)
	return b, ok
}

// argError is a misuse of the host API found by a reader that has no
// Runtime at hand to raise it: boolValue and optFloat serve code that calls
// them without one. The reader panics with it, and native, which makes
// every host function, raises it in the script as the TypeError throwf
// would, prefixed with the function's name.
type argError string

// raiseArgError is deferred by every host function (native): it turns an
// argError into the script's TypeError and lets any other panic go on.
func (r *Runtime) raiseArgError(name string) {
	p := recover()
	if p == nil {
		return
	}
	if e, ok := p.(argError); ok {
		r.throwf("%s: %s", name, string(e))
	}
	panic(p)
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
	if !ok || r.isTensor(v) || isArrayObject(obj) {
		return nil
	}
	return obj
}

// arrayType is what goja exports a JavaScript array as.
var arrayType = reflect.TypeFor[[]any]()

// isArrayObject reports whether obj is an array. It asks for the type goja
// would export obj as, not for the export: exporting an array allocates
// its whole length, and a.length = 4e9 is an array of no elements whose
// export would take 64 GiB.
func isArrayObject(obj *goja.Object) bool { return obj.ExportType() == arrayType }

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

// optFloat is the number option name (booleans count as 0/1, as in
// numberValue); another type is an error raised by native (see argError).
func optFloat(o *goja.Object, name string, def float64) float64 {
	v := optValue(o, name)
	if v == nil {
		return def
	}
	if f, ok := numberOf(v); ok {
		return f
	}
	if b, ok := boolOf(v); ok {
		if b {
			return 1
		}
		return 0
	}
	panic(argError(fmt.Sprintf("option %s must be a number, got %s", name, typeOf(v))))
}

// optBool is the boolean option name: true or false, nothing else (see
// boolValue).
func optBool(o *goja.Object, name string, def bool) bool {
	v := optValue(o, name)
	if v == nil {
		return def
	}
	return boolValue("option "+name, v)
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

// Lists whose length a script chooses (a dataset's length, a batch size,
// an array's length, a tensor's element count computed on the host) are
// checked before they are made: past the memory available Go ends the
// process with "fatal error: runtime: out of memory" and a trace of
// hundreds of lines, and past its largest slice with "makeslice: len out
// of range", where the script should get an error it can read. They live
// in the host's memory, not on the device, so they are checked against
// the memory available (hostmem) as the CPU device checks its buffers, not
// against --max-memory, which bounds the device's.

// maxHostBytes bounds one such list whatever the machine (1 TiB, the
// engine's bound on one tensor): past it the length is a mistake.
const maxHostBytes = 1 << 40

// hostCheckFrom is the smallest list checked against the memory available:
// reading /proc/meminfo costs microseconds, nothing next to filling 64 MiB.
const hostCheckFrom = 64 << 20

// hostRoom returns an error when n elements of size bytes cannot be
// allocated: more than maxHostBytes, or than the memory available.
func hostRoom(n, size int) error {
	bytes := int64(n) * int64(size) // n ≤ 2^53 (intValue) and size is small: no overflow
	if bytes < hostCheckFrom {
		return nil
	}
	if err := hostmem.Check(bytes); err != nil {
		return err
	}
	if bytes > maxHostBytes { // where the memory available is unknown
		return fmt.Errorf("needs %s, more than the %s one list may take", hostmem.Size(bytes), hostmem.Size(maxHostBytes))
	}
	return nil
}

// hostAlloc raises a RangeError when the list of n elements of size bytes
// that what (a phrase: "the permutation of a dataset of 8 samples") needs
// cannot be allocated.
func (r *Runtime) hostAlloc(fn, what string, n, size int) {
	if err := hostRoom(n, size); err != nil {
		r.throwRangef("%s: %s %v", fn, what, err)
	}
}

// arrayLength is the length of the array (or array-like) obj, whose
// elements fn copies into a Go list of size bytes each: a whole number
// (0 when obj has none), and a list that fits (hostAlloc). A JavaScript
// array's length says nothing of its memory: a.length = 4e9 is an array
// of no elements.
func (r *Runtime) arrayLength(fn, what string, obj *goja.Object, size int) int {
	v := obj.Get("length")
	if isMissing(v) {
		return 0
	}
	n := r.intValue(fn, what+".length", v)
	if n < 0 {
		r.throwRangef("%s: %s.length is negative (%d)", fn, what, n)
	}
	r.hostAlloc(fn, fmt.Sprintf("%s of length %d:", what, n), n, size)
	return n
}

// intList converts an array of integers (a shape, a list of dims).
func (r *Runtime) intList(fn, what string, v goja.Value) []int {
	obj, ok := v.(*goja.Object)
	if !ok {
		r.throwf("%s: %s must be an array of integers, got %s", fn, what, describe(v))
	}
	n := r.arrayLength(fn, what, obj, 0)
	if n > 64 {
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
		if obj, ok := call.Arguments[i].(*goja.Object); ok && isArrayObject(obj) {
			return r.intList(fn, "shape", obj)
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
	if obj, ok := v.(*goja.Object); ok && isArrayObject(obj) {
		return r.intList(fn, "dim", obj)
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
	if obj, ok := v.(*goja.Object); ok {
		// Named without exporting it (see isArrayObject); a function's
		// String is its source.
		switch {
		case asJSTensor(obj) != nil:
			return "a tensor"
		case isArrayObject(obj):
			return "an array"
		case isFunction(obj):
			return "a function"
		case obj.ExportType() == objectType:
			return "an object"
		}
		return v.String()
	}
	if s, ok := stringOf(v); ok {
		return fmt.Sprintf("%q", s)
	}
	return v.String()
}

// objectType is what goja exports a plain JavaScript object as.
var objectType = reflect.TypeFor[map[string]any]()

// typeOf names v's type, and its value when it has one to show, for an
// error about a value of the wrong type: a string ("3"), a boolean (true).
func typeOf(v goja.Value) string {
	if isMissing(v) || isObject(v) {
		return describe(v)
	}
	switch v.Export().(type) {
	case string:
		return "a string (" + describe(v) + ")"
	case bool:
		return "a boolean (" + describe(v) + ")"
	case int64, float64:
		return "a number (" + describe(v) + ")"
	case *big.Int:
		return "a BigInt (" + describe(v) + "n)"
	}
	return describe(v) // a symbol
}

// isObject reports whether v is an object (arrays and functions included).
func isObject(v goja.Value) bool {
	_, ok := v.(*goja.Object)
	return ok
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
	// The export copies each array whole, for its length and not its
	// elements (see isArrayObject): the lengths along the first elements,
	// the shape of a rectangular nesting, must fit first. (Each number
	// takes 16 bytes exported and 8 in data.)
	count := 1
	for x := v; count > 0; {
		obj, ok := x.(*goja.Object)
		if !ok || !isArrayObject(obj) {
			break
		}
		n := r.arrayLength(fn, "data", obj, 0)
		if n > 0 && count > (1<<53)/n {
			r.throwRangef("%s: data of more than 2^53 numbers (arrays of lengths past what they hold?)", fn)
		}
		count *= n
		x = obj.Get("0")
	}
	r.hostAlloc(fn, fmt.Sprintf("data of %d numbers:", count), count, 24)
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
