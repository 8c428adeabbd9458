package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/device"
)

// Empty returns an uninitialised tensor (torch.empty).
func (rt *Runtime) Empty(dt DType, shape ...int) *Tensor {
	if !dt.Valid() {
		return rt.fail("empty", "invalid dtype %v", dt)
	}
	t, err := rt.empty(dt, shape)
	if err != nil {
		return rt.failErr("empty", err)
	}
	return t
}

// Full returns a tensor filled with value (torch.full).
func (rt *Runtime) Full(dt DType, value float64, shape ...int) *Tensor {
	return rt.full("full", dt, shape, value)
}

// full makes the tensor of Full, Zeros, Ones and Scalar; op names the
// call in its errors.
func (rt *Runtime) full(op string, dt DType, shape []int, value float64) *Tensor {
	if !dt.Valid() {
		return rt.fail(op, "invalid dtype %v", dt)
	}
	t, err := rt.empty(dt, shape)
	if err != nil {
		return rt.failErr(op, err)
	}
	if err := kernel(func() error { return rt.dev.Fill(t.view(), value) }); err != nil {
		t.Release()
		return rt.failErr(op, err)
	}
	return t
}

// Zeros returns a tensor of zeros (torch.zeros).
func (rt *Runtime) Zeros(dt DType, shape ...int) *Tensor { return rt.full("zeros", dt, shape, 0) }

// Ones returns a tensor of ones (torch.ones).
func (rt *Runtime) Ones(dt DType, shape ...int) *Tensor { return rt.full("ones", dt, shape, 1) }

// Scalar returns a 0-dimensional tensor holding v (torch.tensor(v)).
func (rt *Runtime) Scalar(dt DType, v float64) *Tensor { return rt.full("scalar", dt, nil, v) }

// ZerosLike returns zeros of t's shape and type on t's runtime.
func ZerosLike(t *Tensor) *Tensor { return FullLike(t, 0) }

// OnesLike returns ones of t's shape and type.
func OnesLike(t *Tensor) *Tensor { return FullLike(t, 1) }

// FullLike returns a tensor of t's shape and type filled with v. It reads
// only t's shape and type, so t's memory may be given back (FreeMemory).
func FullLike(t *Tensor, v float64) *Tensor {
	rt, bad := checkShapeOnly("full_like", t)
	if bad != nil {
		return bad
	}
	return rt.full("full_like", t.dt, t.shape, v)
}

// EmptyLike returns an uninitialised tensor of t's shape and type.
func EmptyLike(t *Tensor) *Tensor {
	rt, bad := checkShapeOnly("empty_like", t)
	if bad != nil {
		return bad
	}
	return rt.Empty(t.dt, t.shape...)
}

// checkShapeOnly is check for ops that read t's shape and type but not
// its values: a tensor whose memory is given back is fine.
func checkShapeOnly(op string, t *Tensor) (*Runtime, *Tensor) {
	if t != nil && t.err == nil && !t.released.Load() && t.MemoryFreed() {
		return t.rt, nil
	}
	return check(op, t)
}

// Arange returns the values start, start+step, ... below end (above end for
// a negative step), as torch.arange.
func (rt *Runtime) Arange(dt DType, start, end, step float64) *Tensor {
	if step == 0 || math.IsNaN(start+end+step) || math.IsInf(start+end+step, 0) {
		return rt.fail("arange", "invalid range start=%v end=%v step=%v", start, end, step)
	}
	n := int(math.Ceil((end - start) / step))
	if n < 0 {
		return rt.fail("arange", "upper bound and step are inconsistent: start=%v end=%v step=%v", start, end, step)
	}
	if _, err := checkedNumel([]int{n}, Float64); err != nil {
		return rt.failErr("arange", err)
	}
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = start + float64(i)*step
	}
	return rt.fromFloat64s(dt, vals, []int{n})
}

// FromFloat32s copies data into a new float32 tensor of the given shape
// (one dimension of len(data) when shape is empty and len(data) != 1).
func (rt *Runtime) FromFloat32s(data []float32, shape ...int) *Tensor {
	shape, bad := rt.dataShape("from_float32s", len(data), shape)
	if bad != nil {
		return bad
	}
	return rt.FromBytes(Float32, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), 4*len(data)), shape...)
}

// FromFloat64s copies data into a new float64 tensor.
func (rt *Runtime) FromFloat64s(data []float64, shape ...int) *Tensor {
	shape, bad := rt.dataShape("from_float64s", len(data), shape)
	if bad != nil {
		return bad
	}
	return rt.FromBytes(Float64, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), 8*len(data)), shape...)
}

// FromInt64s copies data into a new int64 tensor.
func (rt *Runtime) FromInt64s(data []int64, shape ...int) *Tensor {
	shape, bad := rt.dataShape("from_int64s", len(data), shape)
	if bad != nil {
		return bad
	}
	return rt.FromBytes(Int64, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), 8*len(data)), shape...)
}

// FromValues converts float64 values to a tensor of type dt, as
// torch.tensor(values, dtype=dt).
func (rt *Runtime) FromValues(dt DType, values []float64, shape ...int) *Tensor {
	shape, bad := rt.dataShape("from_values", len(values), shape)
	if bad != nil {
		return bad
	}
	return rt.fromFloat64s(dt, values, shape)
}

func (rt *Runtime) fromFloat64s(dt DType, values []float64, shape []int) *Tensor {
	t := rt.FromBytes(Float64, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(values))), 8*len(values)), shape...)
	if dt == Float64 || t.err != nil {
		return t
	}
	c := t.To(dt)
	t.Release()
	return c
}

func (rt *Runtime) dataShape(op string, n int, shape []int) ([]int, *Tensor) {
	if len(shape) == 0 {
		if n == 1 {
			return nil, nil
		}
		return []int{n}, nil
	}
	if _, err := checkedNumel(shape, Float64); err != nil {
		return nil, rt.failErr(op, err)
	}
	if numel(shape) != n {
		return nil, rt.fail(op, "%d values cannot fill shape %v (%d elements)", n, shape, numel(shape))
	}
	return shape, nil
}

// FromBytes copies little-endian element bytes into a new tensor of type dt
// and the given shape.
func (rt *Runtime) FromBytes(dt DType, data []byte, shape ...int) *Tensor {
	if !dt.Valid() {
		return rt.fail("from_bytes", "invalid dtype %v", dt)
	}
	n, err := checkedNumel(shape, dt)
	if err != nil {
		return rt.failErr("from_bytes", err)
	}
	if want := n * dt.Size(); want != len(data) {
		return rt.fail("from_bytes", "%d bytes for %v of shape %v, which needs %d", len(data), dt, shape, want)
	}
	t, err := rt.empty(dt, shape)
	if err != nil {
		return rt.failErr("from_bytes", err)
	}
	if err := kernel(func() error { return rt.dev.Upload(t.view(), data) }); err != nil {
		t.Release()
		return rt.failErr("from_bytes", err)
	}
	return t
}

// SetBytes writes data, t's elements as little-endian bytes of its dtype,
// into the contiguous tensor t in place (an upload, on a device).
func (t *Tensor) SetBytes(data []byte) error {
	if _, bad := check("set_bytes", t); bad != nil {
		return bad.err
	}
	if !t.IsContiguous() || len(data) != t.Numel()*t.dt.Size() {
		return fmt.Errorf("tensor: set_bytes: %d bytes into a %v tensor of shape %v (contiguous: %v)", len(data), t.dt, t.shape, t.IsContiguous())
	}
	if err := t.checkInPlace("set_bytes"); err != nil {
		return err
	}
	t.st.version.Add(1)
	if err := kernel(func() error { return t.rt.dev.Upload(t.view(), data) }); err != nil {
		return fmt.Errorf("tensor: set_bytes: %w", err)
	}
	return nil
}

// Bytes copies t's elements out as contiguous little-endian bytes of its
// type.
func (t *Tensor) Bytes() ([]byte, error) {
	if _, bad := check("bytes", t); bad != nil {
		return nil, bad.err
	}
	out := make([]byte, t.Numel()*t.dt.Size())
	if err := kernel(func() error { return t.rt.dev.Download(out, t.view()) }); err != nil {
		return nil, fmt.Errorf("tensor: bytes: %w", err)
	}
	return out, nil
}

// Float64s copies t's elements out converted to float64, in row-major order.
func (t *Tensor) Float64s() ([]float64, error) {
	c := t
	if t.err == nil && t.dt != Float64 {
		c = t.To(Float64)
		defer c.Release()
	}
	raw, err := c.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(raw)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return out, nil
}

// Float32s copies t's elements out converted to float32.
func (t *Tensor) Float32s() ([]float32, error) {
	c := t
	if t.err == nil && t.dt != Float32 {
		c = t.To(Float32)
		defer c.Release()
	}
	raw, err := c.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// Int64s copies t's elements out converted to int64 (floats truncate).
func (t *Tensor) Int64s() ([]int64, error) {
	c := t
	if t.err == nil && t.dt != Int64 {
		c = t.To(Int64)
		defer c.Release()
	}
	raw, err := c.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(raw)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return out, nil
}

// Item returns the value of a one-element tensor as float64 (torch's
// .item()).
func (t *Tensor) Item() (float64, error) {
	if _, bad := check("item", t); bad != nil {
		return 0, bad.err
	}
	if t.Numel() != 1 {
		return 0, fmt.Errorf("tensor: item: a tensor with %d elements (shape %v) cannot be converted to a scalar", t.Numel(), t.shape)
	}
	v, err := t.Float64s()
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// To converts t to another element type (differentiable between float
// types). Converting to t's own type returns an alias of t.
func (t *Tensor) To(dt DType) *Tensor {
	rt, bad := check("to", t)
	if bad != nil {
		return bad
	}
	if !dt.Valid() {
		return rt.fail("to", "invalid dtype %v", dt)
	}
	if dt == t.dt {
		return t.viewAs("AliasBackward", t.shape, t.strides)
	}
	out, err := rt.empty(dt, t.shape)
	if err != nil {
		return rt.failErr("to", err)
	}
	if err := kernel(func() error { return rt.dev.Copy(out.view(), t.view()) }); err != nil {
		out.Release()
		return rt.failErr("to", err)
	}
	if dt.IsFloat() && t.dt.IsFloat() {
		if n := out.record("ToCopyBackward", t); n != nil {
			from := t.dt
			n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g.To(from)} }
		}
	}
	return out
}

// Clone returns a contiguous copy of t (differentiable).
func (t *Tensor) Clone() *Tensor {
	rt, bad := check("clone", t)
	if bad != nil {
		return bad
	}
	out, err := rt.empty(t.dt, t.shape)
	if err != nil {
		return rt.failErr("clone", err)
	}
	if err := kernel(func() error { return rt.dev.Copy(out.view(), t.view()) }); err != nil {
		out.Release()
		return rt.failErr("clone", err)
	}
	if n := out.record("CloneBackward", t); n != nil {
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g} }
	}
	return out
}

// Detach returns an alias of t that is not part of the autograd graph.
func (t *Tensor) Detach() *Tensor {
	_, bad := checkView("detach", t)
	if bad != nil {
		return bad
	}
	return t.alias(t.off, t.shape, t.strides)
}

// CopyFrom copies src into t in place (src broadcasts to t's shape and is
// converted to t's type), as t.copy_(src). It is not recorded by autograd;
// t must not require a gradient unless grad mode is off.
func (t *Tensor) CopyFrom(src *Tensor) error {
	if ok, err := t.recordCopy(src); ok {
		return err
	}
	if _, bad := check("copy_", t, src); bad != nil {
		return bad.err
	}
	if err := t.checkInPlace("copy_"); err != nil {
		return err
	}
	sv, err := broadcastView(src, t.shape)
	if err != nil {
		return fmt.Errorf("tensor: copy_: %w", err)
	}
	t.st.version.Add(1)
	if t.coversStorage() {
		t.st.zeroPending = false // every byte is about to be written
	}
	if err := kernel(func() error { return t.rt.dev.Copy(t.view(), sv) }); err != nil {
		return fmt.Errorf("tensor: copy_: %w", err)
	}
	return nil
}

// Fill sets every element of t to v, in place (t.fill_(v)).
func (t *Tensor) Fill(v float64) error {
	if lz, off, ok := t.lazyRange(); ok {
		return t.recordStep("fill_", lz, lazyStep{kind: lazyConst, off: off, value: v})
	}
	if _, bad := check("fill_", t); bad != nil {
		return bad.err
	}
	if err := t.checkInPlace("fill_"); err != nil {
		return err
	}
	t.st.version.Add(1)
	if err := kernel(func() error { return t.rt.dev.Fill(t.view(), v) }); err != nil {
		return fmt.Errorf("tensor: fill_: %w", err)
	}
	return nil
}

// Zero sets every element of t to zero, in place. When t is its whole
// storage the fill is deferred until the memory is next read or written, so
// that zeroing gradients before a backward pass that overwrites them costs
// nothing.
func (t *Tensor) Zero() error {
	if lz, off, ok := t.lazyRange(); ok {
		return t.recordStep("zero_", lz, lazyStep{kind: lazyConst, off: off})
	}
	if _, bad := check("zero_", t); bad != nil {
		return bad.err
	}
	if err := t.checkInPlace("zero_"); err != nil {
		return err
	}
	if !t.coversStorage() {
		return t.Fill(0)
	}
	t.st.version.Add(1)
	t.st.zeroPending = true
	return nil
}

// checkInPlace refuses in-place writes that autograd could not account for.
func (t *Tensor) checkInPlace(op string) error {
	if t.rt.noGrad == 0 && t.requiresGrad {
		if t.fn == nil {
			return fmt.Errorf("tensor: %s: a leaf %s that requires grad is used in an in-place operation; run it under NoGrad", op, t.label())
		}
		return fmt.Errorf("tensor: %s: in-place operations on tensors recorded by autograd are not supported; use the out-of-place op", op)
	}
	return nil
}

// broadcastView returns src's view broadcast to shape (stride 0 on expanded
// dimensions), or an error naming both shapes.
func broadcastView(src *Tensor, shape []int) (v device.View, err error) {
	if slices.Equal(src.shape, shape) {
		return src.view(), nil
	}
	strides, ok := broadcastStrides(src.shape, src.strides, shape)
	if !ok {
		return v, fmt.Errorf("shape %v cannot be broadcast to %v", src.shape, shape)
	}
	v = src.view()
	v.Shape = shape
	v.Strides = strides
	return v, nil
}

// broadcastStrides gives the strides that read a tensor of shape from as if
// it had shape to (numpy broadcasting rules).
func broadcastStrides(from, fromStrides, to []int) ([]int, bool) {
	if len(from) > len(to) {
		return nil, false
	}
	st := make([]int, len(to))
	lead := len(to) - len(from)
	for i := range to {
		if i < lead {
			continue
		}
		f := from[i-lead]
		switch {
		case f == to[i]:
			st[i] = fromStrides[i-lead]
			if f == 1 {
				st[i] = 0
			}
		case f == 1:
			st[i] = 0
		default:
			return nil, false
		}
	}
	return st, true
}

// broadcastShapes is the shape two operands broadcast to.
func broadcastShapes(a, b []int) ([]int, bool) {
	if slices.Equal(a, b) {
		return a, true // shapes are never modified once made, so sharing is safe
	}
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		x, y := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			x = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			y = b[j]
		}
		switch {
		case x == y || y == 1:
			out[i] = x
		case x == 1:
			out[i] = y
		default:
			return nil, false
		}
	}
	return out, true
}
