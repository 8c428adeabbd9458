package gpu

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/kernels"
)

// This file holds the elementwise ops (Copy, Fill, Unary,
// ActivationBackward, Binary, Where) and the launch plumbing that every op
// file shares: kernel names, the argument builder that checks each launch
// against the kernel's declaration, and launch shapes.
//
// The semantics are engine/cpu's; gpu/kernels documents the kernels and
// their numerics. Validation is limited to what decides which kernel runs
// (dtype combinations the CPU rejects are rejected here with the same
// words), since the tensor layer validates shapes.

// Kernel families (gpu/kernels/<family>.cu).
const (
	famElementwise = "elementwise"
	famReduce      = "reduce"
	famNN          = "nn"
	famIndex       = "index"
	famAttention   = "attention"
	famOptim       = "optim"
)

// typeSuffix is the kernel name suffix of a dtype (f32, bf16, b, ...).
func typeSuffix(dt dtype.DType) string {
	switch dt {
	case dtype.Float32:
		return "f32"
	case dtype.Float64:
		return "f64"
	case dtype.BFloat16:
		return "bf16"
	case dtype.Float16:
		return "f16"
	case dtype.Int64:
		return "i64"
	case dtype.Int32:
		return "i32"
	case dtype.Uint8:
		return "u8"
	case dtype.Bool:
		return "b"
	}
	return ""
}

// sizeSuffix names the kernels that move elements of dt's size.
func sizeSuffix(dt dtype.DType) string {
	switch dt.Size() {
	case 1:
		return "s1"
	case 2:
		return "s2"
	case 4:
		return "s4"
	case 8:
		return "s8"
	}
	return ""
}

var (
	floatSuffixes = []string{"f32", "f64", "bf16", "f16"}
	allSuffixes   = []string{"f32", "f64", "bf16", "f16", "i64", "i32", "u8", "b"}
	sizeSuffixes  = []string{"s1", "s2", "s4", "s8"}
)

// nameKey is a kernel name in parts: prefix + suffix, then "_" + suffix2
// when there is one (convert_f32_bf16).
type nameKey struct{ prefix, suffix, suffix2 string }

// names holds every name of kernelsUsed by its parts. It is filled while
// kernelsUsed is built and only read after, so that a launch names its
// kernel without allocating a string.
var names = map[nameKey]string{}

func intern(k nameKey) string {
	n := k.prefix + k.suffix
	if k.suffix2 != "" {
		n += "_" + k.suffix2
	}
	names[k] = n
	return n
}

func kernelNames(prefix string, suffixes ...string) []string {
	out := make([]string, len(suffixes))
	for i, s := range suffixes {
		out[i] = intern(nameKey{prefix, s, ""})
	}
	return out
}

// kname is prefix + suffix, the interned string when the kernel is one of
// kernelsUsed (a name that is not fails at launch).
func kname(prefix, suffix string) string {
	if n, ok := names[nameKey{prefix, suffix, ""}]; ok {
		return n
	}
	return prefix + suffix
}

// kernelsUsed lists, per family, every kernel this package launches. A
// launch of a kernel missing from it fails, so the list stays complete; a
// test can check each entry against kernels.Lookup without a GPU (the
// argument sizes are checked at every launch, see call).
var kernelsUsed = func() map[string][]string {
	var conv []string
	for _, d := range allSuffixes {
		for _, s := range allSuffixes {
			if d != s {
				conv = append(conv, intern(nameKey{"convert_", d, s}))
			}
		}
	}
	nnKernels := []string{"cross_entropy_check"}
	for _, p := range []string{"softmax_", "softmax_bwd_", "layernorm_", "layernorm_bwd_dx_", "layernorm_bwd_dwdb_",
		"layernorm_bwd_finish_", "cross_entropy_", "cross_entropy_bwd_"} {
		nnKernels = append(nnKernels, kernelNames(p, floatSuffixes...)...)
	}
	withI64 := append(slices.Clone(floatSuffixes), "i64")
	return map[string][]string{
		famElementwise: slices.Concat(
			kernelNames("copy_", sizeSuffixes...), conv, kernelNames("fill_", sizeSuffixes...), kernelNames("where_", sizeSuffixes...),
			kernelNames("unary_", withI64...), kernelNames("act_bwd_", floatSuffixes...), kernelNames("binary_", withI64...),
			kernelNames("compare_", "f32", "f64", "bf16", "f16", "i64", "i32", "u8")),
		famReduce: slices.Concat(kernelNames("reduce_rows_", withI64...), kernelNames("reduce_cols_", withI64...),
			kernelNames("reduce_finish_", withI64...), kernelNames("argmax_", withI64...), kernelNames("sumsq_", floatSuffixes...)),
		famNN:        nnKernels,
		famIndex:     slices.Concat([]string{"index_check"}, kernelNames("index_gather_", sizeSuffixes...), kernelNames("index_add_", withI64...)),
		famAttention: []string{"attn_softmax_f32", "attn_softmax_f64", "attn_softmax_bwd_f32", "attn_softmax_bwd_f64"},
		famOptim:     []string{"adam_f32", "adam_f64", "sgd_f32", "sgd_f64"},
	}
}()

// declaration is what the source declares of a kernel that a launch
// checks: its parameter sizes and its __launch_bounds__.
type declaration struct {
	sizes      []int
	maxThreads int
}

// declared maps the kernels in kernelsUsed to their declarations.
var declared = sync.OnceValues(func() (map[kernelKey]declaration, error) {
	m := make(map[kernelKey]declaration)
	for fam, ks := range kernelsUsed {
		for _, k := range ks {
			sig, err := kernels.Lookup(fam, k)
			if err != nil {
				return nil, err
			}
			if sig.MaxThreads == 0 {
				return nil, fmt.Errorf("gpu: kernel %s/%s declares no __launch_bounds__", fam, k)
			}
			m[kernelKey{fam, k}] = declaration{sig.Sizes(), sig.MaxThreads}
		}
	}
	return m, nil
})

// maxParams bounds a kernel's parameter count (adam has 17).
const maxParams = 24

// call packs the arguments of one launch. launch checks them, in number
// and sizes, against the kernel's declaration before anything reaches the
// driver: a mismatch would otherwise be silent memory corruption. A call
// packs into the device's one argument buffer (d.args), so it must be
// launched before the next call is begun.
type call struct {
	d            *Device
	family, name string
	a            *cuda.Args
	sizes        [maxParams]int
	n            int
}

func (d *Device) call(family, name string) *call {
	d.cur = call{d: d, family: family, name: name, a: d.args()}
	return &d.cur
}

func (c *call) push(size int) {
	if c.n < maxParams {
		c.sizes[c.n] = size
	}
	c.n++
}

func (c *call) ptr(p cuda.DevicePtr) { c.a.Ptr(p); c.push(8) }
func (c *call) i32(v int32)          { c.a.I32(v); c.push(4) }
func (c *call) i64(v int64)          { c.a.I64(v); c.push(8) }
func (c *call) f32(v float32)        { c.a.F32(v); c.push(4) }
func (c *call) f64(v float64)        { c.a.F64(v); c.push(8) }
func (c *call) flag(b bool) {
	if b {
		c.i32(1)
	} else {
		c.i32(0)
	}
}
func (c *call) layout(l *kernels.Layout) { c.a.Raw(l.Bytes(), 8); c.push(kernels.LayoutSize) }
func (c *call) reduce(r *kernels.Reduce) { c.a.Raw(r.Bytes(), 8); c.push(kernels.ReduceSize) }

func (c *call) launch(grid, block cuda.Dim3, shared uint32) error {
	want, err := c.declaration()
	if err != nil {
		return err
	}
	if c.n > maxParams || !slices.Equal(c.sizes[:c.n], want.sizes) {
		return fmt.Errorf("gpu: kernel %s/%s: arguments of sizes %v, the kernel declares %v",
			c.family, c.name, c.sizes[:min(c.n, maxParams)], want.sizes)
	}
	// The compiler fitted the kernel's registers to its bound: a bigger
	// block would fail in the driver with LAUNCH_OUT_OF_RESOURCES, and
	// only on a GPU; here it fails on every device, fakes included.
	if threads := int64(block.X) * int64(block.Y) * int64(block.Z); threads > int64(want.maxThreads) {
		return fmt.Errorf("gpu: kernel %s/%s launched with blocks of %d threads, it declares __launch_bounds__(%d)",
			c.family, c.name, threads, want.maxThreads)
	}
	return c.d.launch(c.family, c.name, grid, block, shared, c.a)
}

func (c *call) declaration() (declaration, error) {
	decl, err := declared()
	if err != nil {
		return declaration{}, err
	}
	want, ok := decl[kernelKey{c.family, c.name}]
	if !ok {
		return declaration{}, fmt.Errorf("gpu: kernel %s/%s is not in kernelsUsed", c.family, c.name)
	}
	return want, nil
}

// Launch shapes. Kernels loop over their work (grid-stride), so a grid
// only has to fill the GPU: wavesPerSM blocks of blockSize threads per SM
// cover the 2048 threads an SM holds, twice.
const (
	blockSize  = 256
	wavesPerSM = 16
)

func dim1(n int) cuda.Dim3 { return cuda.Dim3{X: uint32(n), Y: 1, Z: 1} }

// gridFor is the grid of a kernel with one thread per item (n > 0) in
// blocks of blockSize.
func (d *Device) gridFor(n int64) cuda.Dim3 {
	return dim1(d.blocksFor(n, blockSize))
}

// blocksFor is the number of blocks of block threads for n items, one
// item per thread.
func (d *Device) blocksFor(n int64, block int) int {
	return d.capBlocks((n+int64(block)-1)/int64(block), block)
}

// capBlocks limits a grid of blocks of block threads to wavesPerSM blocks
// of blockSize threads per SM (or as many threads in blocks of other
// sizes); the kernels loop over the rest.
func (d *Device) capBlocks(blocks int64, block int) int {
	limit := int64(max(1, d.dev.SMs) * wavesPerSM * blockSize / block)
	return int(max(1, min(blocks, limit)))
}

// layout coalesces a walk of the views over shape (see kernels.NewLayout).
func layoutOf(shape []int, views ...device.View) (kernels.Layout, error) {
	var buf [kernels.MaxOps][]int
	if len(views) > len(buf) {
		return kernels.Layout{}, fmt.Errorf("gpu: %d operands in one layout, at most %d", len(views), len(buf))
	}
	st := buf[:len(views)]
	for i, v := range views {
		st[i] = v.Strides
	}
	return kernels.NewLayout(shape, st...)
}

// optPtr is the address of an optional operand, 0 when absent.
func (d *Device) optPtr(v device.View) cuda.DevicePtr {
	if v.Buf == nil {
		return 0
	}
	return d.ptr(v)
}

// elementwise launches a kernel whose leading parameters are a layout of
// the views over shape and the views' pointers, followed by extra scalars.
func (d *Device) elementwise(name string, shape []int, views []device.View, extra func(c *call)) error {
	l, err := layoutOf(shape, views...)
	if err != nil {
		return err
	}
	if l.Numel == 0 {
		return nil
	}
	c := d.call(famElementwise, name)
	c.layout(&l)
	for _, v := range views {
		c.ptr(d.ptr(v))
	}
	if extra != nil {
		extra(c)
	}
	return c.launch(d.gridFor(l.Numel), dim1(blockSize), 0)
}

// Copy implements device.Device: a strided copy, converting the element
// type as engine/cpu does (through float64: floats to integers truncate
// with NaN → 0 and saturation, anything to bool tests for non-zero).
func (d *Device) Copy(dst, src device.View) error {
	if dst.Numel() == 0 {
		return nil
	}
	name := kname("copy_", sizeSuffix(dst.DType))
	if dst.DType != src.DType {
		ds, ss := typeSuffix(dst.DType), typeSuffix(src.DType)
		if ds == "" || ss == "" {
			return fmt.Errorf("%v: copy of %v into %v", d, src.DType, dst.DType)
		}
		name = names[nameKey{"convert_", ds, ss}]
	}
	return d.elementwise(name, dst.Shape, []device.View{dst, src}, nil)
}

// Fill implements device.Device: the value is converted on the host as a
// Copy would convert it, and its bits are stored.
func (d *Device) Fill(dst device.View, value float64) error {
	if dst.Numel() == 0 {
		return nil
	}
	bits, err := elementBits(dst.DType, value)
	if err != nil {
		return err
	}
	return d.elementwise(kname("fill_", sizeSuffix(dst.DType)), dst.Shape, []device.View{dst}, func(c *call) { c.i64(int64(bits)) })
}

// elementBits is value stored as dt (engine/cpu's store).
func elementBits(dt dtype.DType, value float64) (uint64, error) {
	switch dt {
	case dtype.Float32:
		return uint64(math.Float32bits(float32(value))), nil
	case dtype.Float64:
		return math.Float64bits(value), nil
	case dtype.BFloat16:
		return uint64(dtype.BF16FromFloat32(float32(value))), nil
	case dtype.Float16:
		return uint64(dtype.F16FromFloat32(float32(value))), nil
	case dtype.Int64:
		return uint64(toInt64(value)), nil
	case dtype.Int32:
		return uint64(uint32(int32(toInt64(value)))), nil
	case dtype.Uint8:
		return uint64(uint8(toInt64(value))), nil
	case dtype.Bool:
		if value != 0 {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("gpu: fill of %v", dt)
}

// toInt64 truncates toward zero, NaN → 0, saturating (engine/cpu's).
func toInt64(x float64) int64 {
	switch {
	case x != x:
		return 0
	case x >= math.MaxInt64:
		return math.MaxInt64
	case x <= math.MinInt64:
		return math.MinInt64
	}
	return int64(x)
}

func isFloat(dt dtype.DType) bool {
	return dt == dtype.Float32 || dt == dtype.Float64 || dt == dtype.BFloat16 || dt == dtype.Float16
}

// Unary implements device.Device.
func (d *Device) Unary(op device.UnaryOp, dst, src device.View, s float64) error {
	if dst.Numel() == 0 {
		return nil
	}
	if dst.DType != src.DType {
		return fmt.Errorf("%v: %v of %v into %v", d, op, src.DType, dst.DType)
	}
	views := []device.View{dst, src}
	switch {
	case isFloat(dst.DType):
		return d.elementwise(kname("unary_", typeSuffix(dst.DType)), dst.Shape, views, func(c *call) {
			c.i32(int32(op))
			c.f64(s)
		})
	case dst.DType == dtype.Int64:
		switch op {
		case device.Neg, device.Abs, device.Sign, device.Square, device.Relu:
		case device.AddScalar, device.MulScalar, device.RSubScalar:
			if float64(int64(s)) != s {
				return fmt.Errorf("%v: %v of an int64 tensor by the non-integer %v", d, op, s)
			}
		default:
			return fmt.Errorf("%v: %v is not defined for int64", d, op)
		}
		return d.elementwise("unary_i64", dst.Shape, views, func(c *call) {
			c.i32(int32(op))
			c.i64(int64(s))
		})
	}
	return fmt.Errorf("%v: %v is not defined for %v", d, op, dst.DType)
}

// ActivationBackward implements device.Device.
func (d *Device) ActivationBackward(op device.ActivationOp, dx, dy, saved device.View) error {
	if dx.Numel() == 0 {
		return nil
	}
	if !isFloat(dx.DType) || dy.DType != dx.DType || saved.DType != dx.DType {
		return fmt.Errorf("%v: activation backward of %v", d, dx.DType)
	}
	return d.elementwise(kname("act_bwd_", typeSuffix(dx.DType)), dx.Shape, []device.View{dx, dy, saved},
		func(c *call) { c.i32(int32(op)) })
}

// Binary implements device.Device.
func (d *Device) Binary(op device.BinaryOp, dst, a, b device.View) error {
	if dst.Numel() == 0 {
		return nil
	}
	views := []device.View{dst, a, b}
	opArg := func(c *call) { c.i32(int32(op)) }
	if a.DType != b.DType {
		return fmt.Errorf("%v: %v of %v and %v", d, op, a.DType, b.DType)
	}
	if op.IsComparison() {
		if dst.DType != dtype.Bool {
			return fmt.Errorf("%v: %v must write bool, not %v", d, op, dst.DType)
		}
		sfx := typeSuffix(a.DType)
		if a.DType == dtype.Bool {
			sfx = "u8" // bools compare as their bytes, as on the CPU
		}
		if sfx == "" {
			return fmt.Errorf("%v: %v of %v", d, op, a.DType)
		}
		return d.elementwise(kname("compare_", sfx), dst.Shape, views, opArg)
	}
	if dst.DType != a.DType {
		return fmt.Errorf("%v: %v of %v into %v", d, op, a.DType, dst.DType)
	}
	switch {
	case isFloat(dst.DType):
		return d.elementwise(kname("binary_", typeSuffix(dst.DType)), dst.Shape, views, opArg)
	case dst.DType == dtype.Int64:
		switch op {
		case device.Add, device.Sub, device.Mul, device.Maximum, device.Minimum:
			return d.elementwise("binary_i64", dst.Shape, views, opArg)
		}
		return fmt.Errorf("%v: %v is not defined for int64", d, op)
	}
	return fmt.Errorf("%v: %v is not defined for %v", d, op, dst.DType)
}

// Where implements device.Device.
func (d *Device) Where(dst, cond, a, b device.View) error {
	if dst.Numel() == 0 {
		return nil
	}
	if cond.DType != dtype.Bool {
		return fmt.Errorf("%v: where needs a bool condition, not %v", d, cond.DType)
	}
	if a.DType != dst.DType || b.DType != dst.DType {
		return fmt.Errorf("%v: where of %v and %v into %v", d, a.DType, b.DType, dst.DType)
	}
	return d.elementwise(kname("where_", sizeSuffix(dst.DType)), dst.Shape, []device.View{dst, cond, a, b}, nil)
}
