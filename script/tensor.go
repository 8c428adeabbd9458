package script

import (
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// jsTensor is a tensor as the script sees it: a goja dynamic object whose
// properties (shape, dtype, grad, ...) and methods are resolved here, so
// that a method call costs a map lookup and no reflection.
type jsTensor struct {
	r   *Runtime
	t   *tensor.Tensor
	obj *goja.Object

	param    bool   // made by nn.Parameter: kept, and listed by modules
	borrowed bool   // owned by the engine (a parameter, a gradient, state)
	owner    int    // the lifetime list that releases it (0: none)
	gen      int    // the generation it was made in
	recorded bool   // made by an op autograd recorded (an activation)
	released string // why it was released, once it has been
}

// wrap hands a new tensor to the script, raising its error as a JavaScript
// exception. The tensor joins the lifetime lists.
func (r *Runtime) wrap(t *tensor.Tensor) goja.Value {
	if err := t.Err(); err != nil {
		r.throw(err)
	}
	j := &jsTensor{r: r, t: t.Persist()}
	j.obj = r.vm.NewDynamicObject(j)
	r.life.track(j)
	r.lastWrapped = j
	return j.obj
}

// borrow hands an engine-owned tensor (parameter, gradient, optimizer state,
// loaded data) to the script; the lifetime lists never release it.
func (r *Runtime) borrow(t *tensor.Tensor) goja.Value {
	if t == nil {
		return goja.Null()
	}
	j := &jsTensor{r: r, t: t, borrowed: true}
	j.obj = r.vm.NewDynamicObject(j)
	return j.obj
}

func (j *jsTensor) releaseWith(why string) {
	if j.released != "" || j.borrowed || j.param {
		return
	}
	j.released = why
	j.owner = 0
	j.t.Release()
}

// isTensor reports whether v is a script tensor.
func (r *Runtime) isTensor(v goja.Value) bool { return asJSTensor(v) != nil }

// asJSTensor returns the tensor handle behind v, or nil when v is not a
// tensor. goja's Export allocates, so hot paths call this once per value
// rather than isTensor and then unwrap; and only a tensor is exported:
// the export of any other object copies it whole (an array of length 4e9,
// which holds nothing, would take 64 GiB).
func asJSTensor(v goja.Value) *jsTensor {
	obj, ok := v.(*goja.Object)
	if !ok || obj.ExportType() != jsTensorType {
		return nil
	}
	j, _ := obj.Export().(*jsTensor)
	return j
}

// unwrap returns the tensor behind v, or raises a clear error: a released
// tensor says when and why it was released.
func (r *Runtime) unwrap(fn, what string, v goja.Value) *tensor.Tensor {
	if j := asJSTensor(v); j != nil {
		return r.live(fn, j)
	}
	r.throwf("%s: %s must be a tensor, got %s", fn, what, describe(v))
	return nil
}

// live checks that j was not released.
func (r *Runtime) live(fn string, j *jsTensor) *tensor.Tensor {
	if j.released != "" {
		r.throwf("%s: the tensor was released %s", fn, j.released)
	}
	if j.t.Released() {
		r.throwf("%s: the tensor was released", fn)
	}
	return j.t
}

// tensorOrScalar returns v as a tensor, or a 0-d tensor when v is a number
// (like a Python scalar, it takes like's type unless a float meets an
// integer tensor).
func (r *Runtime) tensorOrScalar(fn string, v goja.Value, like *tensor.Tensor) *tensor.Tensor {
	if j := asJSTensor(v); j != nil {
		return r.live(fn, j)
	}
	x := r.numberValue(fn, "argument", v)
	dt := like.DType()
	if !dt.IsFloat() && x != math.Trunc(x) {
		dt = dtype.Float32
	}
	if dt == dtype.Bool {
		dt = dtype.Int64
	}
	return r.rt.Scalar(dt, x)
}

// Get implements goja.DynamicObject.
func (j *jsTensor) Get(key string) goja.Value {
	r := j.r
	if m, ok := r.methods[key]; ok {
		return m
	}
	if j.released != "" || j.t.Released() {
		switch key {
		case "shape", "dtype", "device", "ndim", "requiresGrad", "grad", "isLeaf", "T", "mT":
			r.live("tensor."+key, j)
		}
		return nil
	}
	t := j.t
	switch key {
	case "shape":
		return r.vm.ToValue(shapeValues(t.Shape()))
	case "dtype":
		return r.vm.ToValue(t.DType().String())
	case "device":
		return r.vm.ToValue(t.Device().String())
	case "ndim":
		return r.vm.ToValue(t.Dim())
	case "requiresGrad":
		return r.vm.ToValue(t.RequiresGrad())
	case "isLeaf":
		return r.vm.ToValue(t.IsLeaf())
	case "grad":
		return r.borrow(t.Grad())
	case "name":
		return r.vm.ToValue(t.Name())
	case "T":
		return r.call(func() goja.Value { return r.wrap(t.T()) })
	case "mT":
		return r.call(func() goja.Value { return r.wrap(t.MT()) })
	case "isParameter":
		return r.vm.ToValue(j.param)
	}
	return nil
}

func shapeValues(shape []int) []any {
	out := make([]any, len(shape))
	for i, s := range shape {
		out[i] = s
	}
	return out
}

// Set implements goja.DynamicObject: requiresGrad and grad are writable.
func (j *jsTensor) Set(key string, val goja.Value) bool {
	r := j.r
	switch key {
	case "requiresGrad":
		if err := r.live("tensor.requiresGrad", j).SetRequiresGrad(r.toBool("tensor.requiresGrad", "the value", val)); err != nil {
			r.throw(err)
		}
		return true
	case "grad":
		t := r.live("tensor.grad", j)
		var g *tensor.Tensor
		if !isMissing(val) {
			g = r.unwrap("tensor.grad", "the gradient", val).Clone()
		}
		if err := t.SetGrad(g); err != nil {
			r.throw(err)
		}
		return true
	}
	return false
}

// Has implements goja.DynamicObject.
func (j *jsTensor) Has(key string) bool { return j.Get(key) != nil }

// Delete implements goja.DynamicObject.
func (j *jsTensor) Delete(key string) bool { return false }

// Keys implements goja.DynamicObject: what Object.keys and printing see.
func (j *jsTensor) Keys() []string { return []string{"shape", "dtype", "device", "requiresGrad"} }

// call runs a host call in a tensor scope of its own, so that the
// temporaries of composite ops go back to the pool when it returns; results
// that reach the script were taken out of the scope by wrap.
func (r *Runtime) call(f func() goja.Value) goja.Value {
	sc := r.rt.OpenScope()
	defer sc.Close()
	return f()
}

// repr prints t like PyTorch: values for tensors up to 1000 elements,
// summarised with "..." beyond, then the dtype when it is not the default,
// the grad_fn or requires_grad, and the device when it is not the CPU.
func (r *Runtime) repr(t *tensor.Tensor) string {
	if err := t.Err(); err != nil {
		return "tensor(error: " + err.Error() + ")"
	}
	if t.Released() {
		return fmt.Sprintf("tensor(<released>, shape=%v, dtype=%v)", t.Shape(), t.DType())
	}
	var b strings.Builder
	b.WriteString("tensor(")
	vals, err := t.Float64s()
	if err != nil {
		return "tensor(error: " + err.Error() + ")"
	}
	shape := t.Shape()
	summarise := len(vals) > 1000
	// PyTorch chooses the number style from the values it prints.
	format := formatter(t.DType(), shownValues(vals, shape, summarise))
	writeNested(&b, vals, shape, format, summarise, len("tensor("))
	if len(shape) > 0 && len(vals) == 0 {
		fmt.Fprintf(&b, ", size=%v", shapeTuple(shape))
	}
	if d := t.DType(); d != dtype.Float32 && d != dtype.Int64 && d != dtype.Bool {
		fmt.Fprintf(&b, ", dtype=torch.%v", d)
	}
	if dev := t.Device(); dev.String() != "cpu" && !strings.HasPrefix(dev.String(), "cpu:") {
		fmt.Fprintf(&b, ", device='%v'", dev)
	}
	if !t.IsLeaf() {
		b.WriteString(", grad_fn=<" + torchGradFnName(gradFnName(t), t.Dim() == 0) + ">")
	} else if t.RequiresGrad() {
		b.WriteString(", requires_grad=True")
	}
	b.WriteString(")")
	return b.String()
}

func gradFnName(t *tensor.Tensor) string {
	s := t.String()
	if i := strings.Index(s, "grad_fn=<"); i >= 0 {
		rest := s[i+len("grad_fn=<"):]
		if j := strings.IndexByte(rest, '>'); j >= 0 {
			return rest[:j]
		}
	}
	return "Backward"
}

func shapeTuple(shape []int) string {
	parts := make([]string, len(shape))
	for i, s := range shape {
		parts[i] = fmt.Sprint(s)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// formatter picks PyTorch's number style (torch/_tensor_str.py): integers
// for integer tensors; for floats, "1." when every value is integral,
// scientific notation when the nonzero magnitudes span more than 1e3, exceed
// 1e8 or go below 1e-4, and 4 decimals otherwise.
func formatter(dt dtype.DType, vals []float64) func(float64) string {
	switch {
	case dt == dtype.Bool:
		return func(v float64) string {
			if v != 0 {
				return "True"
			}
			return "False"
		}
	case !dt.IsFloat():
		return func(v float64) string { return fmt.Sprintf("%d", int64(v)) }
	}
	lo, hi := math.Inf(1), 0.0
	integral := true
	for _, v := range vals {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			continue
		}
		if a := math.Abs(v); a != 0 {
			lo = math.Min(lo, a)
			hi = math.Max(hi, a)
		}
		if v != math.Trunc(v) {
			integral = false
		}
	}
	var sci bool
	if integral {
		sci = hi > 1e8
	} else {
		sci = hi > 0 && (hi/lo > 1e3 || hi > 1e8 || lo < 1e-4)
	}
	return func(v float64) string {
		switch {
		case math.IsNaN(v):
			return "nan"
		case math.IsInf(v, 1):
			return "inf"
		case math.IsInf(v, -1):
			return "-inf"
		case sci:
			return fmt.Sprintf("%.4e", v)
		case integral:
			return fmt.Sprintf("%.0f.", v)
		}
		return fmt.Sprintf("%.4f", v)
	}
}

// shownIndices lists which of n entries of a dimension are printed: all,
// or with summarise and more than six, the first and last three.
func shownIndices(n int, summarise bool) []int {
	if !summarise || n <= 6 {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	return []int{0, 1, 2, n - 3, n - 2, n - 1}
}

// shownValues returns the values that a print of vals shows.
func shownValues(vals []float64, shape []int, summarise bool) []float64 {
	if !summarise || len(shape) == 0 {
		return vals
	}
	var out []float64
	var walk func(off int, dims []int)
	walk = func(off int, dims []int) {
		step := 1
		for _, d := range dims[1:] {
			step *= d
		}
		for _, i := range shownIndices(dims[0], true) {
			if len(dims) == 1 {
				out = append(out, vals[off+i])
			} else {
				walk(off+i*step, dims[1:])
			}
		}
	}
	walk(0, shape)
	return out
}

// writeNested prints nested brackets, every value right-aligned to the
// widest, as PyTorch does; with summarise, only the first and last three
// entries of each dimension longer than six are shown.
func writeNested(b *strings.Builder, vals []float64, shape []int, format func(float64) string, summarise bool, indent int) {
	if len(shape) == 0 {
		b.WriteString(format(vals[0]))
		return
	}
	width := 0
	for _, v := range shownValues(vals, shape, summarise) {
		width = max(width, len(format(v)))
	}
	var rec func(off int, dims []int, indent int)
	rec = func(off int, dims []int, indent int) {
		n := dims[0]
		step := 1
		for _, d := range dims[1:] {
			step *= d
		}
		idx := shownIndices(n, summarise)
		if len(dims) == 1 {
			writeVector(b, vals[off:off+n], idx, format, width, indent)
			return
		}
		b.WriteByte('[')
		for k, i := range idx {
			if k > 0 {
				b.WriteString(",\n" + strings.Repeat("\n", len(dims)-2) + strings.Repeat(" ", indent+1))
				if i != idx[k-1]+1 {
					b.WriteString("...,\n" + strings.Repeat(" ", indent+1))
				}
			}
			rec(off+i*step, dims[1:], indent+1)
		}
		b.WriteByte(']')
	}
	rec(0, shape, indent)
}

// printWidth is PyTorch's default linewidth (torch.set_printoptions).
const printWidth = 80

// writeVector prints the entries idx of one innermost row, right-aligned to
// width, as PyTorch's _vector_str does: as many per line as fit in 80
// columns after the indent, continued lines indented one past the
// bracket, and " ..." standing (and counting) as one entry where entries
// are left out.
func writeVector(b *strings.Builder, row []float64, idx []int, format func(float64) string, width, indent int) {
	items := make([]string, 0, len(idx)+1)
	for k, i := range idx {
		if k > 0 && i != idx[k-1]+1 {
			items = append(items, " ...")
		}
		s := format(row[i])
		items = append(items, strings.Repeat(" ", max(0, width-len(s)))+s)
	}
	perLine := max(1, (printWidth-indent)/(width+2))
	b.WriteByte('[')
	for start := 0; start < len(items); start += perLine {
		if start > 0 {
			b.WriteString(",\n" + strings.Repeat(" ", indent+1))
		}
		b.WriteString(strings.Join(items[start:min(start+perLine, len(items))], ", "))
	}
	b.WriteByte(']')
}

// typedArrayBytes returns the bytes behind a typed array or ArrayBuffer
// value, and the element type its constructor implies.
func (r *Runtime) typedArrayBytes(v goja.Value) ([]byte, dtype.DType, bool) {
	obj, ok := v.(*goja.Object)
	if !ok || isArrayObject(obj) || obj.ExportType() == objectType {
		return nil, 0, false // not exported: see isArrayObject
	}
	switch x := obj.Export().(type) {
	case []float32:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)), dtype.Float32, true
	case []float64:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 8*len(x)), dtype.Float64, true
	case []int32:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)), dtype.Int32, true
	case []uint8:
		return x, dtype.Uint8, true
	case []int64:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 8*len(x)), dtype.Int64, true
	}
	return nil, 0, false
}
