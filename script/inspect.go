package script

// The REPL's and console's short forms of the engine's objects: modules
// and optimizers print as PyTorch prints them, futures as Node prints a
// promise, and any object can choose its own form with Node's
// util.inspect.custom symbol.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dop251/goja"
)

// inspectCustom prints obj with its method under
// Symbol.for("nodejs.util.inspect.custom"), called with the depth left: a
// string it returns is printed as it is, any other value inspected.
func (r *Runtime) inspectCustom(obj *goja.Object, depth int) (string, bool) {
	if r.inspectSym == nil {
		v, err := r.vm.RunString(`Symbol.for("nodejs.util.inspect.custom")`)
		if err != nil {
			return "", false
		}
		r.inspectSym = v.(*goja.Symbol)
	}
	f, ok := goja.AssertFunction(obj.GetSymbol(r.inspectSym))
	if !ok {
		return "", false
	}
	v, err := f(obj, r.vm.ToValue(depth))
	if err != nil {
		panic(err) // Inspect reports it
	}
	if s, ok := stringOf(v); ok {
		return s, true
	}
	if o, ok := v.(*goja.Object); ok && o == obj {
		return "", false
	}
	return r.inspect(v, depth), true
}

// inspectFuture prints a future as Node prints a promise: Future {
// <pending> } until its collective completed, then Future { value } (or
// the error it failed with). Printing never waits.
func (r *Runtime) inspectFuture(f *futureState, depth int) (s string) {
	if !f.done() {
		return "Future { <pending> }"
	}
	defer func() {
		if p := recover(); p != nil {
			s = fmt.Sprintf("Future { <failed: %v> }", p)
		}
	}()
	v := f.wait()
	if v == nil || goja.IsUndefined(v) {
		return "Future { <completed> }"
	}
	return "Future { " + strings.ReplaceAll(r.inspect(v, depth-1), "\n", "\n  ") + " }"
}

// optimizerRepr prints an optimizer as PyTorch's Optimizer.__repr__ does:
//
//	AdamW (
//	Parameter Group 0
//	    betas: (0.9, 0.999)
//	    lr: 0.001
//	)
//
// with every option of every group (groups: the paramGroups array), in
// sorted order, and Python's spelling of the values.
func (r *Runtime) optimizerRepr(name string, groups goja.Value) string {
	var b strings.Builder
	b.WriteString(name + " (")
	if arr, ok := groups.(*goja.Object); ok {
		n := int(arr.Get("length").ToInteger())
		for i := range n {
			g, ok := arr.Get(strconv.Itoa(i)).(*goja.Object)
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "\nParameter Group %d", i)
			keys := slices.DeleteFunc(g.Keys(), func(k string) bool { return k == "params" })
			slices.Sort(keys)
			for _, k := range keys {
				v := g.Get(k)
				if k == "initialLr" && v.ToFloat() == 0 {
					continue // set by a scheduler (PyTorch shows initial_lr only then)
				}
				fmt.Fprintf(&b, "\n    %s: %s", k, pyRepr(v))
			}
		}
	}
	b.WriteString("\n)")
	return b.String()
}

// pyRepr spells a JavaScript value as Python's repr would: True, None,
// tuples for arrays, 1e-08.
func pyRepr(v goja.Value) string {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return "None"
	}
	if o, ok := v.(*goja.Object); ok && o.ClassName() == "Array" {
		n := int(o.Get("length").ToInteger()) // an array's: 0 to 2^32-1
		if hostRoom(n, 16) != nil {
			return fmt.Sprintf("<an array of length %d>", n) // a.length = 4e9: no room to list it
		}
		parts := make([]string, n)
		for i := range n {
			parts[i] = pyRepr(o.Get(strconv.Itoa(i)))
		}
		if n == 1 {
			return "(" + parts[0] + ",)"
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}
	switch x := v.Export().(type) {
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return "'" + x + "'"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return pyFloat(x)
	}
	return v.String()
}

// pyFloat is Python's repr of a float, where the value is integral printed
// as the integer the script most likely wrote (0, not 0.0).
func pyFloat(x float64) string {
	switch {
	case math.IsNaN(x):
		return "nan"
	case math.IsInf(x, 0):
		if x > 0 {
			return "inf"
		}
		return "-inf"
	case x == math.Trunc(x) && math.Abs(x) < 1e16:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	if a := math.Abs(x); a < 1e-4 || a >= 1e16 {
		// Python: shortest digits, exponent with at least two digits.
		s := strconv.FormatFloat(x, 'e', -1, 64)
		mant, exp, _ := strings.Cut(s, "e")
		sign := exp[0]
		digits := strings.TrimLeft(exp[1:], "0")
		if len(digits) < 2 {
			digits = strings.Repeat("0", 2-len(digits)) + digits
		}
		if sign == '+' {
			return mant + "e+" + digits
		}
		return mant + "e-" + digits
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}
