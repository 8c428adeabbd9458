package script

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/rand"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// fn defines a host function of a module: it runs in its own tensor scope
// (see call) and its name prefixes its error messages.
func (r *Runtime) fn(obj *goja.Object, name string, f func(call goja.FunctionCall) goja.Value) {
	r.method(obj, name, func(call goja.FunctionCall) goja.Value {
		return r.call(func() goja.Value { return f(call) })
	})
}

// method sets obj[name] to the Go function f, named name.
func (r *Runtime) method(obj *goja.Object, name string, f func(call goja.FunctionCall) goja.Value) {
	must(obj.Set(name, r.native(name, f)))
}

// native makes f a JavaScript function whose name is name: goja names a Go
// function after its Go symbol ("github.com/zeroeng/zeroeng/script.(*Runtime)
// .fn.func1"), which would show in fn.name, the REPL and stack traces. It
// raises what the readers without a Runtime find wrong (argError) as the
// function's TypeError.
func (r *Runtime) native(name string, f func(call goja.FunctionCall) goja.Value) goja.Value {
	v := r.vm.ToValue(func(call goja.FunctionCall) goja.Value {
		defer r.raiseArgError(name)
		return f(call)
	})
	must(v.(*goja.Object).DefineDataProperty("name", r.vm.ToValue(name), goja.FLAG_FALSE, goja.FLAG_TRUE, goja.FLAG_FALSE))
	return v
}

// generatorOpt returns a generator seeded with options.seed, or the
// runtime's default generator.
func (r *Runtime) generatorOpt(fn string, o *goja.Object) *rand.Generator {
	if v := optValue(o, "seed"); v != nil {
		return rand.New(uint64(r.intValue(fn, "option seed", v)))
	}
	return r.rt.Generator()
}

// shapeAndOptions reads (shape..., {options}) or ([shape], {options}),
// the options checked against known.
func (r *Runtime) shapeAndOptions(fn string, call goja.FunctionCall, known ...string) ([]int, *goja.Object) {
	shape := r.shapeArgs(fn, call, 0)
	var o *goja.Object
	for i := len(call.Arguments) - 1; i >= 0; i-- {
		if o = r.optionsOf(fn, call, i, known...); o != nil {
			break
		}
	}
	return shape, o
}

// requiresGrad applies a factory's requiresGrad option, as PyTorch's
// requires_grad argument: the new tensor is a leaf that autograd tracks.
// Integer and bool tensors cannot require gradients, which is PyTorch's
// error too.
func (r *Runtime) requiresGrad(fn string, o *goja.Object, t *tensor.Tensor) *tensor.Tensor {
	if optBool(o, "requiresGrad", false) {
		if err := t.Err(); err != nil {
			r.throw(err)
		}
		if !t.DType().IsFloat() {
			r.throwf("%s: requiresGrad: only tensors of floating point dtype can require gradients, not %v", fn, t.DType())
		}
		if err := t.SetRequiresGrad(true); err != nil {
			r.throwf("%s: requiresGrad: %v", fn, err)
		}
	}
	return t
}

// tensorList converts an array of tensors.
func (r *Runtime) tensorList(fn string, v goja.Value) []*tensor.Tensor {
	obj, ok := v.(*goja.Object)
	if !ok {
		r.throwf("%s: expected an array of tensors, got %s", fn, describe(v))
	}
	if !isArrayObject(obj) {
		r.throwf("%s: expected an array of tensors, got %s", fn, describe(v))
	}
	out := make([]*tensor.Tensor, r.arrayLength(fn, "the array of tensors", obj, 8))
	for i := range out {
		out[i] = r.unwrap(fn, "element", obj.Get(itoa(i)))
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

// tensorModule is require("zeroeng").tensor.
func (r *Runtime) tensorModule() *goja.Object {
	r.installMethods()
	m := r.vm.NewObject()

	// fromArray(data, shape?, dtype?): nested arrays, a flat array with a
	// shape, or a typed array (shared, not copied, on the CPU).
	fromArray := func(call goja.FunctionCall) goja.Value {
		const fn = "tensor.fromArray"
		data := call.Argument(0)
		var shape []int
		haveShape := false
		dtArg := goja.Value(nil)
		var opts *goja.Object
		for i := 1; i < len(call.Arguments) && i <= 2; i++ {
			a := call.Arguments[i]
			if o := r.optionsOf(fn, call, i, "dtype", "requiresGrad"); o != nil {
				dtArg, opts = optValue(o, "dtype"), o
				continue
			}
			if obj, ok := a.(*goja.Object); ok && isArrayObject(obj) {
				shape, haveShape = r.intList(fn, "shape", obj), true
				continue
			}
			if !isMissing(a) {
				dtArg = a
			}
		}
		if raw, dt, ok := r.typedArrayBytes(data); ok {
			n := len(raw) / dt.Size()
			if !haveShape {
				shape = []int{n}
			}
			want := r.dtypeValue(fn, dtArg, dt)
			t := r.rt.FromHostMemory(dt, raw, shape...)
			if want != dt {
				t = t.To(want)
			}
			return r.wrap(r.requiresGrad(fn, opts, t))
		}
		if r.isTensor(data) {
			// A copy outside the graph, as torch.tensor(t) is
			// t.clone().detach(): a leaf that requiresGrad can make track.
			t := r.unwrap(fn, "data", data).Detach()
			return r.wrap(r.requiresGrad(fn, opts, t.To(r.dtypeValue(fn, dtArg, t.DType())).Clone()))
		}
		vals, inferred := r.float64s(fn, data)
		if !haveShape {
			shape = inferred
		}
		def := dtype.Float32
		switch {
		case allBooleans(data.Export()): // torch.tensor([True, False]) is bool
			def = dtype.Bool
		case isIntegral(vals): // JavaScript cannot tell 1.0 from 1: integers make int64, as torch.tensor([1, 2])
			def = dtype.Int64
		}
		return r.wrap(r.requiresGrad(fn, opts, r.rt.FromValues(r.dtypeValue(fn, dtArg, def), vals, shape...)))
	}
	r.fn(m, "fromArray", fromArray)
	r.fn(m, "tensor", fromArray)

	creator := func(name string, make func(dt dtype.DType, shape []int, o *goja.Object) *tensor.Tensor) {
		r.fn(m, name, func(call goja.FunctionCall) goja.Value {
			fn := "tensor." + name
			keys := []string{"dtype", "requiresGrad"}
			if name == "rand" || name == "randn" {
				keys = append(keys, "seed")
			}
			shape, o := r.shapeAndOptions(fn, call, keys...)
			return r.wrap(r.requiresGrad(fn, o, make(r.dtypeValue(fn, optValue(o, "dtype"), dtype.Float32), shape, o)))
		})
	}
	creator("zeros", func(dt dtype.DType, s []int, _ *goja.Object) *tensor.Tensor { return r.filled(r.rt.Zeros, dt, 0, s...) })
	creator("ones", func(dt dtype.DType, s []int, _ *goja.Object) *tensor.Tensor { return r.filled(r.rt.Ones, dt, 1, s...) })
	creator("empty", func(dt dtype.DType, s []int, _ *goja.Object) *tensor.Tensor { return r.newTensor(dt, s...) })
	creator("rand", func(dt dtype.DType, s []int, o *goja.Object) *tensor.Tensor {
		g := r.generatorOpt("tensor.rand", o)
		if r.lazyInit > 0 {
			return r.lazyRandom(g, tensor.Uniform(0, 1), dt, s...)
		}
		return r.rt.RandWith(g, dt, s...)
	})
	creator("randn", func(dt dtype.DType, s []int, o *goja.Object) *tensor.Tensor {
		g := r.generatorOpt("tensor.randn", o)
		if r.lazyInit > 0 {
			return r.lazyRandom(g, tensor.Normal(0, 1), dt, s...)
		}
		return r.rt.RandnWith(g, dt, s...)
	})
	r.fn(m, "full", func(call goja.FunctionCall) goja.Value {
		shape := r.shapeArgs("tensor.full", call, 0)
		if len(call.Arguments) > 0 {
			if obj, ok := call.Arguments[0].(*goja.Object); !ok || obj == nil {
				r.throwf("tensor.full: the first argument must be the shape (an array)")
			}
		}
		value := r.numberValue("tensor.full", "value", call.Argument(1))
		o := r.optionsOf("tensor.full", call, 2, "dtype", "requiresGrad")
		return r.wrap(r.requiresGrad("tensor.full", o, r.filled(func(dt dtype.DType, s ...int) *tensor.Tensor { return r.rt.Full(dt, value, s...) }, r.dtypeValue("tensor.full", optValue(o, "dtype"), dtype.Float32), value, shape...)))
	})
	// zerosLike(t, { dtype, requiresGrad }) and the others: t's shape, and
	// t's dtype unless dtype says otherwise (torch.zeros_like's keywords).
	like := func(name string, f func(t *tensor.Tensor) *tensor.Tensor, fresh func(dt dtype.DType, s []int) *tensor.Tensor) {
		r.fn(m, name, func(call goja.FunctionCall) goja.Value {
			fn := "tensor." + name
			t := r.unwrap(fn, "input", call.Argument(0))
			o := r.optionsOf(fn, call, 1, "dtype", "requiresGrad")
			if o == nil && !isMissing(call.Argument(1)) {
				r.throwf("%s(input, options): options must be an object { dtype, requiresGrad }, got %s", fn, describe(call.Argument(1)))
			}
			var out *tensor.Tensor
			if dt := r.dtypeValue(fn, optValue(o, "dtype"), t.DType()); dt != t.DType() {
				out = fresh(dt, t.Shape())
			} else {
				out = f(t)
			}
			return r.wrap(r.requiresGrad(fn, o, out))
		})
	}
	like("zerosLike", tensor.ZerosLike, func(dt dtype.DType, s []int) *tensor.Tensor { return r.rt.Zeros(dt, s...) })
	like("onesLike", tensor.OnesLike, func(dt dtype.DType, s []int) *tensor.Tensor { return r.rt.Ones(dt, s...) })
	like("emptyLike", tensor.EmptyLike, func(dt dtype.DType, s []int) *tensor.Tensor { return r.rt.Empty(dt, s...) })
	r.fn(m, "arange", func(call goja.FunctionCall) goja.Value {
		const fn = "tensor.arange"
		var nums []float64
		var o *goja.Object
		for i := range call.Arguments {
			if o = r.optionsOf(fn, call, i, "dtype", "requiresGrad"); o != nil {
				break
			}
			nums = append(nums, r.numberValue(fn, "argument", call.Arguments[i]))
		}
		start, end, step := 0.0, 0.0, 1.0
		switch len(nums) {
		case 1:
			end = nums[0]
		case 2:
			start, end = nums[0], nums[1]
		case 3:
			start, end, step = nums[0], nums[1], nums[2]
		default:
			r.throwf("%s: expects (end), (start, end) or (start, end, step)", fn)
		}
		def := dtype.Int64
		if !isIntegral(nums) {
			def = dtype.Float32
		}
		// The engine lists the values on the host first (see hostAlloc);
		// a range it refuses is left to its message.
		if n := math.Ceil((end - start) / step); n > 0 && n <= maxHostBytes {
			r.hostAlloc(fn, fmt.Sprintf("a range of %d values", int(n)), int(n), 8)
		}
		return r.wrap(r.requiresGrad(fn, o, r.rt.Arange(r.dtypeValue(fn, optValue(o, "dtype"), def), start, end, step)))
	})
	// randint and randperm draw int64 values, then convert them to dtype:
	// PyTorch draws the same numbers for every dtype.
	r.fn(m, "randint", func(call goja.FunctionCall) goja.Value {
		const fn = "tensor.randint"
		low, high := 0, 0
		shapeAt := 2
		if len(call.Arguments) >= 2 && !r.isArray(call.Argument(1)) {
			low, high = r.intValue(fn, "low", call.Argument(0)), r.intValue(fn, "high", call.Argument(1))
		} else {
			high, shapeAt = r.intValue(fn, "high", call.Argument(0)), 1
		}
		shape := r.intList(fn, "shape", call.Argument(shapeAt))
		o := r.optionsOf(fn, call, shapeAt+1, "seed", "dtype", "requiresGrad")
		dt := r.dtypeValue(fn, optValue(o, "dtype"), dtype.Int64)
		g := r.generatorOpt(fn, o)
		n, err := checkShape(shape)
		if err != nil {
			r.throwf("%s: %v", fn, err)
		}
		r.hostAlloc(fn, fmt.Sprintf("a tensor of %d values", n), n, 8)
		vals := make([]int64, n)
		if low >= high {
			r.throwf("%s: low (%d) must be less than high (%d)", fn, low, high)
		}
		if lo, hi, ok := integerRange(dt); ok {
			if int64(low) < lo {
				r.throwf("%s: low %d is out of bounds for %v", fn, low, dt)
			}
			if int64(high)-1 > hi {
				r.throwf("%s: high - 1 = %d is out of bounds for %v", fn, high-1, dt)
			}
		}
		g.RandInt64(vals, int64(low), int64(high))
		return r.wrap(r.requiresGrad(fn, o, r.rt.FromInt64s(vals, shape...).To(dt)))
	})
	r.fn(m, "randperm", func(call goja.FunctionCall) goja.Value {
		const fn = "tensor.randperm"
		o := r.optionsOf(fn, call, 1, "seed", "dtype", "requiresGrad")
		dt := r.dtypeValue(fn, optValue(o, "dtype"), dtype.Int64)
		n := r.intValue(fn, "n", call.Argument(0))
		if n < 0 {
			r.throwf("%s: n must be non-negative, got %d", fn, n)
		}
		// Every value must be exact in dtype, as PyTorch checks (it does not
		// for bfloat16).
		var limit int64 // 0: none
		switch dt {
		case dtype.Bool:
			r.throwf("%s: not implemented for dtype bool", fn)
		case dtype.Float16:
			limit = 1<<11 + 1
		case dtype.Float32:
			limit = 1<<24 + 1
		case dtype.Uint8, dtype.Int32:
			_, hi, _ := integerRange(dt)
			limit = hi + 1
		}
		if limit > 0 && int64(n) > limit {
			r.throwf("%s: n = %d is too large for dtype %v (at most %d)", fn, n, dt, limit)
		}
		r.hostAlloc(fn, fmt.Sprintf("a permutation of %d values", n), n, 8) // drawn on the host
		return r.wrap(r.requiresGrad(fn, o, r.rt.RandpermWith(r.generatorOpt(fn, o), n).To(dt)))
	})
	// linspace(start, end, steps, { dtype, requiresGrad }): float32 unless
	// dtype says otherwise, as torch.linspace.
	r.fn(m, "linspace", func(call goja.FunctionCall) goja.Value {
		const fn = "tensor.linspace"
		start := r.numberValue(fn, "start", call.Argument(0))
		end := r.numberValue(fn, "end", call.Argument(1))
		steps := r.intValue(fn, "steps", call.Argument(2))
		o := r.optionsOf(fn, call, 3, "dtype", "requiresGrad")
		if o == nil && !isMissing(call.Argument(3)) {
			r.throwf("%s(start, end, steps, options): options must be an object { dtype, requiresGrad }, got %s", fn, describe(call.Argument(3)))
		}
		if steps > 0 {
			r.hostAlloc(fn, fmt.Sprintf("a range of %d steps", steps), steps, 8) // computed on the host
		}
		return r.wrap(r.requiresGrad(fn, o, r.rt.Linspace(r.dtypeValue(fn, optValue(o, "dtype"), dtype.Float32), start, end, steps)))
	})
	// eye(n, m?, { dtype, requiresGrad }).
	r.fn(m, "eye", func(call goja.FunctionCall) goja.Value {
		const fn = "tensor.eye"
		n := r.intValue(fn, "n", call.Argument(0))
		cols, optAt := n, 1
		if len(call.Arguments) > 1 && r.options(call, 1) == nil {
			if v := call.Argument(1); !isMissing(v) { // eye(n, null, opts): m = n
				cols = r.intValue(fn, "m", v)
			}
			optAt = 2
		}
		o := r.optionsOf(fn, call, optAt, "dtype", "requiresGrad")
		if o == nil && !isMissing(call.Argument(optAt)) {
			r.throwf("%s(n, m?, options): options must be an object { dtype, requiresGrad }, got %s", fn, describe(call.Argument(optAt)))
		}
		return r.wrap(r.requiresGrad(fn, o, r.rt.Eye(r.dtypeValue(fn, optValue(o, "dtype"), dtype.Float32), n, cols)))
	})
	r.fn(m, "cat", func(call goja.FunctionCall) goja.Value {
		return r.wrap(tensor.Cat(r.tensorList("tensor.cat", call.Argument(0)), r.intArg("tensor.cat", "dim", call, 1, 0)))
	})
	r.fn(m, "stack", func(call goja.FunctionCall) goja.Value {
		return r.wrap(tensor.Stack(r.tensorList("tensor.stack", call.Argument(0)), r.intArg("tensor.stack", "dim", call, 1, 0)))
	})
	r.fn(m, "where", func(call goja.FunctionCall) goja.Value {
		const fn = "tensor.where"
		cond := r.unwrap(fn, "condition", call.Argument(0))
		a := r.tensorOrScalar(fn, call.Argument(1), cond)
		b := r.tensorOrScalar(fn, call.Argument(2), a)
		if !r.isTensor(call.Argument(1)) {
			a = r.tensorOrScalar(fn, call.Argument(1), b)
		}
		return r.wrap(tensor.Where(cond, a, b))
	})
	r.fn(m, "matmul", func(call goja.FunctionCall) goja.Value {
		return r.wrap(r.unwrap("tensor.matmul", "input", call.Argument(0)).Matmul(r.unwrap("tensor.matmul", "other", call.Argument(1))))
	})
	// initialSeed() is the seed the rank's generator was last seeded with
	// (torch.initial_seed()): zeroeng run's --seed until the script
	// reseeds it.
	r.fn(m, "initialSeed", func(goja.FunctionCall) goja.Value {
		return r.vm.ToValue(r.rt.Generator().InitialSeed())
	})
	r.fn(m, "manualSeed", func(call goja.FunctionCall) goja.Value {
		r.rt.ManualSeed(uint64(r.intValue("tensor.manualSeed", "seed", call.Argument(0))))
		return goja.Undefined()
	})
	r.fn(m, "isTensor", func(call goja.FunctionCall) goja.Value { return r.vm.ToValue(r.isTensor(call.Argument(0))) })
	r.fn(m, "isGradEnabled", func(call goja.FunctionCall) goja.Value { return r.vm.ToValue(r.rt.GradEnabled()) })

	// Blocks: noGrad(fn), enableGrad(fn), scope(fn).
	r.method(m, "noGrad", func(call goja.FunctionCall) goja.Value {
		restore := r.rt.SetGradEnabled(false)
		defer restore()
		return r.callBack("tensor.noGrad", call.Argument(0))
	})
	r.method(m, "enableGrad", func(call goja.FunctionCall) goja.Value {
		restore := r.rt.SetGradEnabled(true)
		defer restore()
		return r.callBack("tensor.enableGrad", call.Argument(0))
	})
	r.method(m, "scope", func(call goja.FunctionCall) goja.Value {
		var out goja.Value
		r.life.scope(func() any {
			out = r.callBack("tensor.scope", call.Argument(0))
			return out.Export()
		})
		return out
	})
	r.method(m, "stats", func(call goja.FunctionCall) goja.Value {
		s := r.rt.Stats()
		return r.vm.ToValue(map[string]any{"liveTensors": s.LiveTensors, "liveBytes": s.LiveBytes,
			"peakBytes": s.PeakBytes, "pooledBytes": s.PooledBytes})
	})
	for _, d := range dtype.All {
		must(m.Set(d.String(), d.String()))
	}
	r.functionForms(m)
	return m
}

// functionForms are PyTorch's torch.xxx(t, ...) functions of tensor
// methods: tensor.argmax(t, 1) is t.argmax(1), for the methods that
// torch has as functions and the module has no function of its own for.
var functionForms = []string{
	"abs", "add", "all", "amax", "any", "argmax", "argmin", "argsort", "bmm", "chunk", "clamp", "clip",
	"clone", "cos", "cumprod", "cumsum", "detach", "div", "eq", "erf", "exp", "flatten", "flip", "gather",
	"ge", "gt", "indexSelect", "le", "log", "logSoftmax", "logicalAnd", "logicalNot", "logicalOr", "lt",
	"maskedFill", "max", "maximum", "mean", "min", "minimum", "mm", "mul", "narrow", "ne", "neg", "norm",
	"numel", "permute", "pow", "prod", "reciprocal", "relu", "repeatInterleave", "reshape", "rsqrt", "rsub",
	"scatterAdd", "select", "sigmoid", "sign", "sin", "softmax", "sort", "split", "sqrt", "square",
	"squeeze", "std", "sub", "sum", "t", "tanh", "topk", "transpose", "unbind", "unsqueeze", "var",
}

// functionForms adds functionForms to the tensor module m, each calling
// the method on its first argument with the others.
func (r *Runtime) functionForms(m *goja.Object) {
	for _, name := range functionForms {
		meth, ok := goja.AssertFunction(r.methods[name])
		if !ok || m.Get(name) != nil {
			continue
		}
		fn := "tensor." + name
		r.method(m, name, func(call goja.FunctionCall) goja.Value {
			self := call.Argument(0)
			if asJSTensor(self) == nil {
				r.throwf("%s: expects a tensor first, got %s", fn, describe(self))
			}
			var args []goja.Value
			if len(call.Arguments) > 1 {
				args = call.Arguments[1:]
			}
			v, err := meth(self, args...)
			if err != nil {
				panic(err) // a JavaScript exception: let it continue unwinding
			}
			return v
		})
	}
}

func init() {
	if _, dup := tensorMethods["argmin"]; dup {
		panic("script: tensor method argmin is defined twice")
	}
	tensorMethods["argmin"] = argminMethod
}

// argminMethod is t.argmin(dim?, keepdim?): the argmax of a tensor whose
// order is t's reversed, -t for floating point and ~t (-1 - t, exact
// for every integer) otherwise, so that ties and NaN go as in argmax: the
// first index wins, and NaN is the extreme.
func argminMethod(r *Runtime, _ *jsTensor, t *tensor.Tensor, call goja.FunctionCall) goja.Value {
	const fn = "tensor.argmin"
	var rev *tensor.Tensor
	switch {
	case t.DType().IsFloat():
		rev = t.Neg()
	case t.DType() == dtype.Int64 || t.DType() == dtype.Int32:
		rev = t.RSubScalar(-1)
	default: // uint8 and bool, which have no negatives
		rev = t.To(dtype.Int64).RSubScalar(-1)
	}
	if isMissing(call.Argument(0)) {
		return r.wrap(rev.Reshape(-1).Argmax(0, false))
	}
	return r.wrap(rev.Argmax(r.intValue(fn, "dim", call.Argument(0)), boolArg(call, 1, false)))
}

// callBack calls a script function given to a host function.
func (r *Runtime) callBack(fn string, f goja.Value) goja.Value {
	call, ok := goja.AssertFunction(f)
	if !ok {
		r.throwf("%s: expects a function, got %s", fn, describe(f))
	}
	v, err := call(goja.Undefined())
	if err != nil {
		panic(err) // a JavaScript exception: let it continue unwinding
	}
	return v
}

func (r *Runtime) isArray(v goja.Value) bool {
	obj, ok := v.(*goja.Object)
	return ok && isArrayObject(obj)
}

func checkShape(shape []int) (int, error) {
	if err := tensor.CheckShape(dtype.Int64, shape...); err != nil {
		return 0, err
	}
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n, nil
}

// integerRange is the range of an integer (or bool) dtype; ok is false
// for floating-point types.
func integerRange(dt dtype.DType) (lo, hi int64, ok bool) {
	switch dt {
	case dtype.Int64:
		return math.MinInt64, math.MaxInt64, true
	case dtype.Int32:
		return math.MinInt32, math.MaxInt32, true
	case dtype.Uint8:
		return 0, math.MaxUint8, true
	case dtype.Bool:
		return 0, 1, true
	}
	return 0, 0, false
}

// allBooleans reports whether v (a script value as goja exports it: a
// boolean or nested arrays) holds booleans only, and at least one.
func allBooleans(v any) bool {
	switch x := v.(type) {
	case bool:
		return true
	case []any:
		if len(x) == 0 {
			return false
		}
		for _, e := range x {
			if !allBooleans(e) {
				return false
			}
		}
		return true
	}
	return false
}

// filled is the tensor of tensor.zeros, ones or full: eager's (the
// engine's call, which names itself in errors), or lazy inside zero.init.
func (r *Runtime) filled(eager func(dt dtype.DType, shape ...int) *tensor.Tensor, dt dtype.DType, v float64, shape ...int) *tensor.Tensor {
	if r.lazyInit == 0 {
		return eager(dt, shape...)
	}
	t := r.rt.Lazy(dt, shape...)
	if t.Err() == nil && v != 0 {
		if err := t.Fill(v); err != nil {
			t.Release()
			return r.rt.Failed(err)
		}
	}
	return t
}

// lazyRandom is tensor.rand's or randn's tensor inside zero.init: the fill
// recorded on a lazy tensor, g moved on.
func (r *Runtime) lazyRandom(g *tensor.Generator, f tensor.RandomFill, dt dtype.DType, shape ...int) *tensor.Tensor {
	t := r.rt.Lazy(dt, shape...)
	if t.Err() == nil {
		if err := t.FillRandom(g, f); err != nil {
			t.Release()
			return r.rt.Failed(fmt.Errorf("tensor: %v: %w", f, err))
		}
	}
	return t
}

// torchGradFnNames are the engine's autograd op names whose PyTorch 1.13
// grad_fn is another op's (cross_entropy's is its nll_loss), or one of
// several overloads that the name alone does not tell apart.
var torchGradFnNames = map[string]string{
	"CrossEntropyBackward": "NllLossBackward0",
	"geluTanhBackward":     "GeluBackward0",
	"GeluTanhBackward":     "GeluBackward0",
	"rsub":                 "RsubBackward1", // 1 - t
	"rdiv":                 "MulBackward0",  // 1 / t is t.reciprocal() * 1
	"square":               "PowBackward0",
	"pow":                  "PowBackward0", // t ** 2
	"PowBackward":          "PowBackward1", // t ** u
	"NarrowBackward":       "SliceBackward0",
	"checkpoint":           "CheckpointFunctionBackward",
}

// torchGradFnName is the name PyTorch 1.13 gives the grad_fn that the
// engine records as op: "SumBackward" → "SumBackward0", "relu" →
// "ReluBackward0". PyTorch numbers the overloads of an op: a reduction
// over every element (a 0-d result, scalar) is sum's and prod's overload
// 0 and max's and min's overload 1, a reduction over dims the other; a
// reduction of a 1-d tensor over its one dim is taken for the former.
func torchGradFnName(op string, scalar bool) string {
	if name, ok := torchGradFnNames[op]; ok {
		return name
	}
	switch op {
	case "SumBackward", "ProdBackward":
		if scalar {
			return op + "0"
		}
		return op + "1"
	case "MaxBackward", "MinBackward":
		if scalar {
			return op + "1"
		}
		return op + "0"
	}
	if op == "" || op[len(op)-1] >= '0' && op[len(op)-1] <= '9' {
		return op
	}
	name := strings.ToUpper(op[:1]) + op[1:]
	if !strings.HasSuffix(name, "Backward") {
		name += "Backward"
	}
	return name + "0"
}
