// Package tensor owns the Tensor type of zeroeng: n-dimensional strided views
// over reference-counted device storage, the differentiable ops defined on
// them, and the reverse-mode autograd engine that records and replays those
// ops.
//
// # Errors
//
// Ops never panic on bad input. An op that fails (shapes that do not
// broadcast, an index out of range, a released input) returns a tensor that
// carries the error; every op applied to such a tensor returns it again
// without doing any work, like NaN propagating through arithmetic. The first
// error names the op and the offending values. Err reports it, and every call
// that leaves the tensor world (Item, Float32s, Backward, ...) returns it.
// This keeps model code as readable as PyTorch's while staying explicit.
//
// # Memory
//
// Tensors share storage through views; the storage goes back to its device's
// pool when the last tensor referring to it is released. Training loops open
// a Scope per step: every tensor created while it is open is released when it
// closes, unless it was kept. The autograd graph holds its own references to
// the tensors it saved for backward and drops them when the graph is freed
// after Backward. Parameters, gradients and optimizer state are created
// outside scopes and live until released explicitly.
//
// # Ranks
//
// Every tensor belongs to a Runtime: one device owned by one rank, with that
// rank's grad mode, scopes and random generator. A Runtime is used by one
// goroutine at a time; in-process ranks each have their own.
package tensor

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Re-exported element types, so that most code imports only this package.
type DType = dtype.DType

const (
	Float32  = dtype.Float32
	Float64  = dtype.Float64
	BFloat16 = dtype.BFloat16
	Float16  = dtype.Float16
	Int64    = dtype.Int64
	Int32    = dtype.Int32
	Uint8    = dtype.Uint8
	Bool     = dtype.Bool
)

// storage is a reference-counted device buffer shared by a tensor and its
// views.
type storage struct {
	rt      *Runtime
	buf     device.Buffer
	refs    atomic.Int32
	version atomic.Uint32 // bumped by every in-place write, checked by backward
	// zeroPending defers a zero fill of the whole buffer until the memory is
	// next used (zero_grad followed by backward then costs nothing: the
	// first gradient is moved or copied in instead of added to zeros).
	zeroPending bool
	// inFlight completes an asynchronous operation on the buffer (see
	// SetInFlight); inFlightErr is its failure, which stays: the memory's
	// contents are then unknown.
	inFlight    func() error
	inFlightErr error
	// freed says why the memory is given back (FreeMemory; buf is nil):
	// ops on it fail with this reason. freedVersion is the version at
	// that moment, which RestoreMemory's seal puts back.
	freed        string
	freedVersion uint32
	// lazy, when set, says what the values of a storage without memory
	// are (lazy.go): the first use that needs them makes them.
	lazy *lazyInit
}

// settle waits for the asynchronous operation on the buffer, if any, and
// returns its error (and that of any earlier one).
func (s *storage) settle() error {
	if w := s.inFlight; w != nil {
		s.inFlight = nil
		if err := w(); err != nil && s.inFlightErr == nil {
			s.inFlightErr = err
		}
	}
	return s.inFlightErr
}

// materialize performs a deferred zero fill before the memory is used.
func (s *storage) materialize(dt DType) {
	if !s.zeroPending {
		return
	}
	s.zeroPending = false
	n := s.buf.Bytes() / dt.Size()
	// Fill of a valid dtype does not fail on a working device; a device
	// that fails here fails the op that follows as well.
	_ = s.rt.dev.Fill(device.View{Buf: s.buf, DType: dt, Shape: []int{n}, Strides: []int{1}}, 0)
}

// coversStorage reports whether t is its whole storage, densely packed, so
// that writing every element of t rewrites every byte of the buffer.
func (t *Tensor) coversStorage() bool {
	return t.st.buf != nil && t.off == 0 && t.IsContiguous() && t.Numel()*t.dt.Size() == t.st.buf.Bytes()
}

func (s *storage) release() {
	if n := s.refs.Add(-1); n == 0 {
		if s.buf != nil {
			s.rt.dev.Free(s.buf)
		}
		s.buf = nil
		if s.lazy != nil {
			s.lazy.drop()
			s.lazy = nil
		}
	} else if n < 0 {
		panic("tensor: storage released more often than retained")
	}
}

// Tensor is an n-dimensional strided view of typed device memory, with
// optional autograd state.
type Tensor struct {
	rt      *Runtime
	st      *storage
	dt      dtype.DType
	off     int
	shape   []int
	strides []int
	err     error

	released     atomic.Bool
	requiresGrad bool
	grad         *Tensor
	fn           *node  // the recorded op that produced this tensor
	scope        *Scope // the open scope that releases it, if any
	name         string // parameter name, for messages
	hooks        []gradHook
	gradPending  func() error // see SetGradPending

	// Backward bookkeeping of a leaf, valid during one backward pass.
	pass    uint64
	deps    int
	pending *Tensor
}

// Err returns the first error of the computation that produced t, if any.
func (t *Tensor) Err() error {
	if t == nil {
		return errNil
	}
	return t.err
}

var errNil = fmt.Errorf("tensor: nil tensor")

// Runtime is the runtime t belongs to.
func (t *Tensor) Runtime() *Runtime { return t.rt }

// Device is the device holding t's storage.
func (t *Tensor) Device() device.Device {
	if t.rt == nil {
		return nil
	}
	return t.rt.dev
}

// DType is the element type.
func (t *Tensor) DType() dtype.DType { return t.dt }

// Shape returns a copy of the extents (nil for a tensor that carries an
// error).
func (t *Tensor) Shape() []int { return slices.Clone(t.shape) }

// Strides returns a copy of the strides, in elements.
func (t *Tensor) Strides() []int { return slices.Clone(t.strides) }

// Size returns the extent of dimension dim (negative counts from the end),
// or -1 when dim is out of range.
func (t *Tensor) Size(dim int) int {
	d, ok := normDim(dim, len(t.shape))
	if !ok {
		return -1
	}
	return t.shape[d]
}

// Dim is the number of dimensions.
func (t *Tensor) Dim() int { return len(t.shape) }

// Numel is the number of elements.
func (t *Tensor) Numel() int { return numel(t.shape) }

// Offset is the element offset of the view into its storage.
func (t *Tensor) Offset() int { return t.off }

// IsContiguous reports whether t is densely packed in row-major order.
func (t *Tensor) IsContiguous() bool { return device.IsContiguous(t.shape, t.strides) }

// RequiresGrad reports whether autograd records ops on t.
func (t *Tensor) RequiresGrad() bool { return t.requiresGrad }

// IsLeaf reports whether t was not produced by a recorded op (a parameter,
// an input, or a tensor created in a no-grad region).
func (t *Tensor) IsLeaf() bool { return t.fn == nil }

// GraphConsumed reports whether a backward pass has gone through the op
// that made t and freed it: t is an activation of a finished pass, which
// nothing can backpropagate through any more.
func (t *Tensor) GraphConsumed() bool { return t.fn != nil && t.fn.freed }

// FromConsumedGraph reports whether t was made by recorded ops from a
// tensor whose graph a backward pass consumed (a view or a function of a
// finished pass's activation, as a metric computed after backward). It
// walks t's graph back to its leaves or to the first consumed op.
func (t *Tensor) FromConsumedGraph() bool {
	if t.fn == nil {
		return false
	}
	seen := map[*node]bool{t.fn: true}
	stack := []*node{t.fn}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, e := range n.next {
			switch {
			case e.node == nil || seen[e.node]:
			case e.node.freed:
				return true
			default:
				seen[e.node] = true
				stack = append(stack, e.node)
			}
		}
	}
	return false
}

// Grad is the accumulated gradient of a leaf, or nil. If communication on
// the gradient is pending (SetGradPending), Grad first waits for it; if
// that fails, the returned tensor carries the error.
func (t *Tensor) Grad() *Tensor {
	if sync := t.gradPending; sync != nil {
		t.gradPending = nil
		if err := sync(); err != nil {
			return errTensor(t.rt, err)
		}
	}
	return t.grad
}

// GradNoSync returns the gradient as it is, without running a pending
// sync (the DDP that set it reads the local gradient this way).
func (t *Tensor) GradNoSync() *Tensor { return t.grad }

// SameMemory reports whether a and b are the same elements of the same
// storage: same storage, offset, shape and strides.
func SameMemory(a, b *Tensor) bool {
	return a != nil && b != nil && a.st != nil && a.st == b.st && a.off == b.off &&
		a.Numel() == b.Numel() && (a.IsContiguous() && b.IsContiguous() || slices.Equal(a.strides, b.strides) && slices.Equal(a.shape, b.shape))
}

// SetInFlight marks t's memory (its whole storage, shared with its views)
// as in use by an asynchronous operation that wait completes — a
// collective that writes the parameter, as ZeRO's overlapped step
// broadcasts the updated parameters during backward. The next use of the
// memory on this rank, by any op or read of its elements, waits for it
// first, so that what a script reads after backward (the parameters, to
// print, save or evaluate) never depends on how far the communication got;
// if the operation failed, that use fails with its error, and so does every
// later one. Marking memory that is already in flight waits for both.
func (t *Tensor) SetInFlight(wait func() error) {
	if t == nil || t.st == nil || wait == nil {
		return
	}
	if prev := t.st.inFlight; prev != nil {
		t.st.inFlight = func() error {
			err := prev()
			if err2 := wait(); err == nil {
				err = err2
			}
			return err
		}
		return
	}
	t.st.inFlight = wait
}

// SetGradPending makes the next Grad call run sync first: DDP marks its
// parameters this way while their gradients are being reduced, so that
// whoever reads a gradient (an optimizer step, clipping, the user) reads
// the reduced one. nil clears it.
func (t *Tensor) SetGradPending(sync func() error) { t.gradPending = sync }

// Name is the name given with SetName (a parameter's name in its module).
func (t *Tensor) Name() string { return t.name }

// SetName names t for error messages and state dicts.
func (t *Tensor) SetName(name string) *Tensor { t.name = name; return t }

// Released reports whether Release was called on t.
func (t *Tensor) Released() bool { return t.released.Load() }

// StorageBytes is the size of the memory t holds: its whole buffer, which
// a view shares with the tensor it was taken from (0 once released).
func (t *Tensor) StorageBytes() int {
	if t.released.Load() || t.st == nil || t.st.buf == nil {
		return 0
	}
	return t.st.buf.Bytes()
}

// SetRequiresGrad makes a floating-point leaf record ops for autograd.
func (t *Tensor) SetRequiresGrad(on bool) error {
	if t.err != nil {
		return t.err
	}
	if !t.IsLeaf() {
		return fmt.Errorf("tensor: requires_grad can only be changed on a leaf tensor; use Detach")
	}
	if on && !t.dt.IsFloat() {
		return fmt.Errorf("tensor: only floating-point tensors can require gradients, not %v", t.dt)
	}
	t.requiresGrad = on
	return nil
}

// SetGrad replaces the gradient of a leaf (nil clears it). The tensor must
// match t's shape and dtype; it is kept out of any scope, since gradients
// outlive steps. The previous gradient is released.
func (t *Tensor) SetGrad(g *Tensor) error {
	if t.err != nil {
		return t.err
	}
	if g != nil {
		if g.err != nil {
			return g.err
		}
		if !slices.Equal(g.shape, t.shape) || g.dt != t.dt {
			return fmt.Errorf("tensor: gradient of %s %v %v cannot be set to %v %v", t.label(), t.dt, t.shape, g.dt, g.shape)
		}
		g.unscope()
	}
	if t.grad != nil && t.grad != g {
		t.grad.Release()
	}
	t.grad = g
	return nil
}

// Persist takes t out of the scope that would release it, so that it lives
// until released explicitly (parameters, optimizer state, caches).
func (t *Tensor) Persist() *Tensor {
	t.unscope()
	return t
}

// Release drops t's reference to its storage; the storage returns to the
// device's pool when no other tensor refers to it. Its gradient, which t
// owns (SetGrad), goes with it, as a leaf's .grad dies with the leaf in
// PyTorch. Releasing twice is a no-op; using a released tensor in an op is
// an error.
func (t *Tensor) Release() {
	if t == nil || !t.released.CompareAndSwap(false, true) {
		return
	}
	if g := t.grad; g != nil {
		t.grad = nil
		g.Release()
	}
	if t.st != nil {
		t.st.release()
		t.rt.live.Add(-1)
	}
}

// label names t in error messages.
func (t *Tensor) label() string {
	if t.name != "" {
		return fmt.Sprintf("tensor %q", t.name)
	}
	return "tensor"
}

// view returns the device's description of t. Ops have checked their
// inputs (check), which settled any operation in flight on them and
// reported its failure; the settle here covers the rest.
func (t *Tensor) view() device.View {
	if t.st.lazy != nil { // a path that did not check its inputs
		_ = t.st.realize()
	}
	_ = t.st.settle()
	t.st.materialize(t.dt)
	return device.View{Buf: t.st.buf, DType: t.dt, Offset: t.off, Shape: t.shape, Strides: t.strides}
}

// String formats t like PyTorch's repr: values for small tensors, a summary
// otherwise.
func (t *Tensor) String() string {
	if t == nil {
		return "tensor(nil)"
	}
	if t.err != nil {
		return fmt.Sprintf("tensor(error: %v)", t.err)
	}
	if t.released.Load() {
		return fmt.Sprintf("tensor(released, shape=%v, dtype=%v)", t.shape, t.dt)
	}
	var b strings.Builder
	b.WriteString("tensor(")
	n := t.Numel()
	if n > 1000 {
		fmt.Fprintf(&b, "shape=%v", t.shape)
	} else {
		vals, err := t.Float64s()
		if err != nil {
			return fmt.Sprintf("tensor(error: %v)", err)
		}
		formatNested(&b, vals, t.shape, t.dt)
	}
	if t.dt != Float32 && t.dt != Int64 && t.dt != Bool {
		fmt.Fprintf(&b, ", dtype=torch.%v", t.dt)
	}
	if t.fn != nil {
		fmt.Fprintf(&b, ", grad_fn=<%s>", t.fn.op)
	} else if t.requiresGrad {
		b.WriteString(", requires_grad=True")
	}
	if t.rt.dev.Kind() != device.CPU {
		fmt.Fprintf(&b, ", device='%v'", t.rt.dev)
	}
	b.WriteString(")")
	return b.String()
}

func formatNested(b *strings.Builder, vals []float64, shape []int, dt dtype.DType) {
	format := func(v float64) string {
		switch {
		case dt == Bool:
			if v != 0 {
				return "True"
			}
			return "False"
		case !dt.IsFloat():
			return fmt.Sprintf("%d", int64(v))
		}
		return fmt.Sprintf("%.4f", v)
	}
	if len(shape) == 0 {
		b.WriteString(format(vals[0]))
		return
	}
	var rec func(vals []float64, shape []int)
	rec = func(vals []float64, shape []int) {
		b.WriteString("[")
		if len(shape) == 1 {
			for i, v := range vals {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(format(v))
			}
		} else {
			step := len(vals) / max(1, shape[0])
			for i := 0; i < shape[0]; i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				rec(vals[i*step:(i+1)*step], shape[1:])
			}
		}
		b.WriteString("]")
	}
	rec(vals, shape)
}

func numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// normDim maps a possibly negative dimension into [0, ndim).
func normDim(dim, ndim int) (int, bool) {
	if dim < 0 {
		dim += ndim
	}
	return dim, dim >= 0 && dim < ndim
}

// Retype converts a leaf's data to dt in place of its identity, as
// PyTorch's module.to(dtype) does for each parameter and buffer
// (param.data = param.data.to(dtype)): t keeps its name, autograd flag and
// hooks, and a gradient it holds is converted too. The old storage is
// released. Views of t made before keep the old data.
func (t *Tensor) Retype(dt DType) error {
	if t.err != nil {
		return t.err
	}
	if t.Released() {
		return fmt.Errorf("tensor: retype of a released tensor (%s)", t.label())
	}
	if !t.IsLeaf() {
		return fmt.Errorf("tensor: retype of %s: only leaves (parameters, buffers) change dtype in place", t.label())
	}
	if !dt.Valid() || (t.requiresGrad && !dt.IsFloat()) {
		return fmt.Errorf("tensor: retype of %s to %v: a tensor that requires grad must stay floating-point", t.label(), dt)
	}
	if dt == t.dt {
		return nil
	}
	if t.grad == nil && t.retypeLazy(dt) {
		return nil
	}
	var grad *Tensor
	if g := t.Grad(); g != nil {
		if t.rt.NoGrad(func() { grad = g.To(dt).Persist() }); grad.err != nil {
			return fmt.Errorf("tensor: retype of the gradient of %s: %w", t.label(), grad.err)
		}
	}
	var data *Tensor
	t.rt.NoGrad(func() { data = t.To(dt) })
	defer data.Release()
	if err := data.Err(); err != nil {
		grad.Release()
		return fmt.Errorf("tensor: retype of %s to %v: %w", t.label(), dt, err)
	}
	t.dt = dt
	t.adopt(data)
	if grad != nil {
		t.grad.Release()
		t.grad = grad
	}
	return nil
}

// SetData makes t a view of src's memory, keeping t's identity, autograd
// flag, gradient and hooks: PyTorch's `p.data = src`. src must have t's
// dtype and number of elements; t keeps its shape. ZeRO uses it to turn
// parameters into views of one flat buffer (parameters as bucket view).
// t's previous storage is released.
func (t *Tensor) SetData(src *Tensor) error {
	if t.err != nil {
		return t.err
	}
	if src.err != nil {
		return src.err
	}
	if t.Released() || src.Released() {
		return fmt.Errorf("tensor: SetData on a released tensor")
	}
	if src.dt != t.dt || src.Numel() != t.Numel() || !src.IsContiguous() {
		return fmt.Errorf("tensor: data of %s %v %v cannot be set to %v %v (contiguous: %v)", t.label(), t.dt, t.shape, src.dt, src.shape, src.IsContiguous())
	}
	if src.rt != t.rt {
		return fmt.Errorf("tensor: data of %s cannot come from another runtime", t.label())
	}
	t.adopt(src)
	return nil
}

// adopt makes t a contiguous view of src's storage (of t's dtype, at least
// t's size) and releases t's own.
func (t *Tensor) adopt(src *Tensor) {
	src.st.refs.Add(1)
	old := t.st
	t.st = src.st
	t.off = src.off
	t.strides = device.ContiguousStrides(t.shape)
	if old != nil {
		old.release()
	}
}
