package tensor

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// Runtime is one rank's handle on a device: the device itself, the rank's
// grad mode, its stack of open scopes, its default random generator and its
// counters. It is used by one goroutine at a time.
type Runtime struct {
	dev    device.Device
	noGrad int
	scope  *Scope
	gen    *Generator

	seq    uint64   // creation order of autograd nodes
	pass   uint64   // backward passes, to mark visited nodes and leaves
	active []uint64 // the passes running now, outermost first (nested by checkpointing)

	autocast *autocastState // the autocast region ops run in (autocast.go); nil outside
	live     atomic.Int64
	lists    [][]*Tensor // tensor lists of closed scopes, kept for reuse

	trace *traceState // nil: the rank's passes are not recorded

	// inGradHooks counts the leaves whose gradient-ready hooks are
	// running; afterGradHooks waits for them (AfterGradHooks).
	inGradHooks    int
	afterGradHooks []func()
}

// traceState is what a recording runtime keeps (behind a pointer, so that
// the Runtime stays as small when it does not record).
type traceState struct {
	rec  *trace.Recorder
	rank int
	// fwdStart and fwdEnd bracket the ops recorded for autograd since the
	// last backward pass: the forward pass it will consume.
	fwdStart, fwdEnd time.Time
}

// NewRuntime returns a runtime on dev, with its default generator seeded
// with seed.
func NewRuntime(dev device.Device, seed uint64) *Runtime {
	rt := &Runtime{dev: dev}
	rt.gen = NewGenerator(seed)
	return rt
}

// Device is the runtime's device.
func (rt *Runtime) Device() device.Device { return rt.dev }

// Generator is the runtime's default random generator (torch's default
// generator of the device).
func (rt *Runtime) Generator() *Generator { return rt.gen }

// ManualSeed reseeds the default generator, as torch.manual_seed.
func (rt *Runtime) ManualSeed(seed uint64) { rt.gen.Seed(seed) }

// Stats describe the tensors and memory a runtime holds.
type Stats struct {
	LiveTensors int64 // tensors created and not yet released
	device.MemStats
}

// Stats reports live tensors and the device's memory counters.
func (rt *Runtime) Stats() Stats {
	return Stats{LiveTensors: rt.live.Load(), MemStats: rt.dev.MemStats()}
}

// ResetPeakMemStats restarts the device's high-water mark (Stats().PeakBytes)
// from the bytes live now, as torch.cuda.reset_peak_memory_stats, on devices
// that support it (the CPU and CUDA devices do).
func (rt *Runtime) ResetPeakMemStats() {
	if d, ok := rt.dev.(device.PeakResetter); ok {
		d.ResetPeakMemStats()
	}
}

// SetTrace makes the runtime record its forward and backward passes as rank
// rank's on rec (nil turns recording off). Components built over the
// runtime (DDP, ZeRO) record on the same recorder through Trace.
func (rt *Runtime) SetTrace(rec *trace.Recorder, rank int) {
	rt.trace = nil
	if rec != nil {
		rt.trace = &traceState{rec: rec, rank: rank}
	}
}

// Trace returns the recorder set by SetTrace (nil when off) and the rank
// to record as.
func (rt *Runtime) Trace() (*trace.Recorder, int) {
	if rt.trace == nil {
		return nil, 0
	}
	return rt.trace.rec, rt.trace.rank
}

// op notes that an op was recorded for autograd: the forward pass the next
// backward consumes runs from the first such op to the last.
func (ts *traceState) op() {
	now := time.Now()
	if ts.fwdStart.IsZero() {
		ts.fwdStart = now
	}
	ts.fwdEnd = now
}

// backward records the forward pass that built the graph (when ops were
// recorded since the last backward) and the backward pass that began at
// start.
func (ts *traceState) backward(start time.Time) {
	if !ts.fwdStart.IsZero() {
		ts.rec.Add(trace.Event{Rank: ts.rank, Lane: trace.Compute, Name: "forward", Start: ts.fwdStart, End: ts.fwdEnd})
		ts.fwdStart, ts.fwdEnd = time.Time{}, time.Time{}
	}
	ts.rec.Add(trace.Event{Rank: ts.rank, Lane: trace.Compute, Name: "backward", Start: start, End: time.Now()})
}

// GradEnabled reports whether ops are recorded for autograd.
func (rt *Runtime) GradEnabled() bool { return rt.noGrad == 0 }

// NoGrad runs fn with autograd recording off (torch.no_grad).
func (rt *Runtime) NoGrad(fn func()) {
	rt.noGrad++
	defer func() { rt.noGrad-- }()
	fn()
}

// SetGradEnabled switches recording on or off until switched back, and
// returns a function that restores the previous state.
func (rt *Runtime) SetGradEnabled(on bool) (restore func()) {
	prev := rt.noGrad
	if on {
		rt.noGrad = 0
	} else {
		rt.noGrad = max(1, rt.noGrad+1)
	}
	return func() { rt.noGrad = prev }
}

// Scope collects the tensors created while it is the innermost open scope
// of its runtime, and releases them when closed.
type Scope struct {
	rt      *Runtime
	parent  *Scope
	tensors []*Tensor
	open    bool
}

// OpenScope opens a scope nested in the current one.
func (rt *Runtime) OpenScope() *Scope {
	s := &Scope{rt: rt, parent: rt.scope, open: true}
	if n := len(rt.lists); n > 0 {
		s.tensors, rt.lists = rt.lists[n-1], rt.lists[:n-1]
	}
	rt.scope = s
	return s
}

// Close releases every tensor still owned by the scope. Scopes close in the
// reverse order they were opened; closing an outer scope closes the inner
// ones first. Closing twice is a no-op.
func (s *Scope) Close() {
	if s == nil || !s.open {
		return
	}
	for s.rt.scope != s && s.rt.scope != nil {
		s.rt.scope.Close()
	}
	for i, t := range s.tensors {
		if t.scope == s {
			t.scope = nil
			t.Release()
		}
		s.tensors[i] = nil
	}
	s.rt.lists = append(s.rt.lists, s.tensors[:0])
	s.tensors = nil
	s.open = false
	s.rt.scope = s.parent
	s.parent = nil
}

// Keep moves tensors out of s into the enclosing scope (or out of every
// scope when s is the outermost), so that they survive s.Close.
func (s *Scope) Keep(ts ...*Tensor) {
	if !s.open {
		return
	}
	for _, t := range ts {
		if t == nil || t.scope != s {
			continue
		}
		t.scope = nil
		if s.parent != nil {
			s.parent.add(t)
		}
	}
}

// Len is the number of tensors the scope would release now.
func (s *Scope) Len() int {
	n := 0
	for _, t := range s.tensors {
		if t.scope == s {
			n++
		}
	}
	return n
}

func (s *Scope) add(t *Tensor) {
	t.scope = s
	s.tensors = append(s.tensors, t)
}

// unscope takes t out of whatever scope holds it; the scope's list keeps a
// stale entry that Close skips.
func (t *Tensor) unscope() { t.scope = nil }

// wrap makes a tensor over storage st, registered in the open scope.
func (rt *Runtime) wrap(st *storage, dt dtype.DType, off int, shape, strides []int) *Tensor {
	t := &Tensor{rt: rt, st: st, dt: dt, off: off, shape: shape, strides: strides}
	rt.live.Add(1)
	if rt.scope != nil {
		rt.scope.add(t)
	}
	return t
}

// empty allocates an uninitialised contiguous tensor.
func (rt *Runtime) empty(dt dtype.DType, shape []int) (*Tensor, error) {
	n, err := checkedNumel(shape, dt)
	if err != nil {
		return nil, err
	}
	buf, err := rt.dev.Alloc(dt, n)
	if err != nil {
		return nil, err
	}
	st := &storage{rt: rt, buf: buf}
	st.refs.Store(1)
	// Shape and strides share one allocation.
	both := make([]int, 2*len(shape))
	sh, strides := both[:len(shape):len(shape)], both[len(shape):]
	copy(sh, shape)
	stride := 1
	for i := len(shape) - 1; i >= 0; i-- {
		strides[i] = stride
		stride *= max(shape[i], 1)
	}
	return rt.wrap(st, dt, 0, sh, strides), nil
}

// maxBytes bounds a single tensor (1 TiB): a shape beyond it is a mistake,
// and asking the Go runtime for it would end the process instead of
// returning an error.
const maxBytes = 1 << 40

// checkedNumel returns the element count of shape, refusing negative
// extents and counts whose bytes overflow or exceed maxBytes.
func checkedNumel(shape []int, dt dtype.DType) (int, error) {
	n := 1
	for _, s := range shape {
		if s < 0 {
			return 0, fmt.Errorf("negative extent in shape %v", shape)
		}
		if s != 0 && n > maxBytes/s {
			return 0, fmt.Errorf("shape %v is too large (more than %d bytes of %v)", shape, maxBytes, dt)
		}
		n *= s
	}
	if n*dt.Size() > maxBytes {
		return 0, fmt.Errorf("shape %v is too large (%d bytes of %v)", shape, n*dt.Size(), dt)
	}
	return n, nil
}

// alias returns a new tensor sharing t's storage with the given layout.
func (t *Tensor) alias(off int, shape, strides []int) *Tensor {
	t.st.refs.Add(1)
	return t.rt.wrap(t.st, t.dt, off, shape, strides)
}

// ref returns an unscoped handle on t's storage and layout, owned by the
// caller (autograd's saved tensors and accumulated gradients).
func (t *Tensor) ref() *Tensor {
	t.st.refs.Add(1)
	t.rt.live.Add(1)
	return &Tensor{rt: t.rt, st: t.st, dt: t.dt, off: t.off, shape: t.shape, strides: t.strides}
}

// fail returns a tensor carrying an error from op.
func (rt *Runtime) fail(op string, format string, args ...any) *Tensor {
	return &Tensor{rt: rt, err: fmt.Errorf("tensor: "+op+": "+format, args...)}
}

// failErr wraps an error from a kernel or an allocation.
func (rt *Runtime) failErr(op string, err error) *Tensor {
	// A device's error often names the op already ("cpu: cross_entropy:
	// target 5 ..."): say it once.
	msg := err.Error()
	for _, dev := range []string{"", "cpu: ", "cuda: "} {
		if strings.HasPrefix(msg, dev+op+": ") {
			return &Tensor{rt: rt, err: fmt.Errorf("tensor: %w", err)}
		}
	}
	return &Tensor{rt: rt, err: fmt.Errorf("tensor: %s: %w", op, err)}
}

// errTensor propagates an earlier error unchanged.
func errTensor(rt *Runtime, err error) *Tensor { return &Tensor{rt: rt, err: err} }

// Failed returns a tensor that carries err: ops on it pass err on, as on
// any failed op's result (for code that wraps ops, such as a forward pass
// with hooks around it).
func (rt *Runtime) Failed(err error) *Tensor { return errTensor(rt, err) }

// check returns the runtime shared by the inputs of op, or a tensor
// carrying the reason they cannot be used together: an earlier error, a nil
// or released input, or inputs from different runtimes.
func check(op string, ts ...*Tensor) (*Runtime, *Tensor) { return checkOperands(op, true, ts...) }

// checkView is check for ops that make a view of their input without
// reading it: a lazy input (lazy.go) stays lazy, its view too.
func checkView(op string, t *Tensor) (*Runtime, *Tensor) { return checkOperands(op, false, t) }

func checkOperands(op string, realize bool, ts ...*Tensor) (*Runtime, *Tensor) {
	var rt *Runtime
	for _, t := range ts {
		if t == nil {
			return nil, &Tensor{err: fmt.Errorf("tensor: %s: nil tensor argument", op)}
		}
		if t.err != nil {
			return t.rt, errTensor(t.rt, t.err)
		}
		if rt == nil {
			rt = t.rt
		} else if t.rt.dev != rt.dev {
			if rt.dev.String() == t.rt.dev.String() {
				return rt, rt.fail(op, "tensors of two different runtimes (ranks) on %v cannot be mixed", rt.dev)
			}
			return rt, rt.fail(op, "expected all tensors to be on the same device, got %v and %v", rt.dev, t.rt.dev)
		}
		if t.released.Load() {
			return rt, rt.fail(op, "use of a released %s", t.label())
		}
		if realize && t.st != nil && t.st.lazy != nil {
			if err := t.st.realize(); err != nil {
				return rt, rt.failErr(op, err)
			}
		}
		if realize && t.st != nil && t.st.buf == nil && t.st.freed != "" { // (a view of absent memory is harmless until read)
			return rt, rt.fail(op, "%s has no memory now: %s", t.label(), t.st.freed)
		}
		if t.st != nil && (t.st.inFlight != nil || t.st.inFlightErr != nil) {
			if err := t.st.settle(); err != nil {
				return rt, rt.failErr(op, fmt.Errorf("%s: %w", t.label(), err))
			}
		}
	}
	return rt, nil
}

// kernel runs a device call, turning an error or a panic in the back end
// into an error (the public API never panics).
func kernel(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error in kernel: %v", r)
		}
	}()
	return f()
}

// errf makes an error for an op that has no runtime to attach it to.
func errf(op, format string, args ...any) error {
	return fmt.Errorf("tensor: "+op+": "+format, args...)
}

// DeviceView describes t's memory for kernels that other engine packages
// run directly on the device (fused optimizer steps, collectives). Use
// WritableView for memory the kernel writes.
func DeviceView(t *Tensor) device.View { return t.view() }

// WritableView is DeviceView for memory a kernel is about to write in place:
// it advances t's storage version, so that autograd refuses to use a saved
// copy of the old values.
func WritableView(t *Tensor) device.View {
	t.st.version.Add(1)
	return t.view()
}

// CheckShape reports whether a tensor of dt and shape can exist (no negative
// extent, at most 1 TiB), for code that sizes host buffers before making a
// tensor.
func CheckShape(dt DType, shape ...int) error {
	_, err := checkedNumel(shape, dt)
	return err
}

// HostBytes returns the bytes of t's elements, shared with t, when t is
// contiguous in host memory; ok is false otherwise (use Bytes for a copy).
// The bytes stay valid until t's storage is released.
func HostBytes(t *Tensor) (b []byte, ok bool) {
	if t.err != nil || t.released.Load() || !t.IsContiguous() || t.st.buf == nil {
		return nil, false
	}
	hb, ok := t.st.buf.(device.HostBuffer)
	if !ok || t.st.settle() != nil {
		return nil, false
	}
	t.st.materialize(t.dt)
	es := t.dt.Size()
	return hb.HostBytes()[t.off*es : (t.off+t.Numel())*es], true
}

// SharedBytes returns t's elements as contiguous little-endian bytes:
// shared with t (no copy) when t is contiguous in host memory, as
// HostBytes, and a copy otherwise (a GPU tensor, a strided view). Writers
// of large files use it to send the elements straight to the file.
func SharedBytes(t *Tensor) ([]byte, error) {
	if b, ok := HostBytes(t); ok {
		return b, nil
	}
	return t.Bytes()
}

// Retain keeps t's memory alive until the returned release is called, even
// if every tensor over it is released meanwhile: asynchronous work
// (collectives on a communication queue) holds its buffers this way.
// release may be called from any goroutine, once.
func Retain(t *Tensor) (release func()) {
	st := t.st
	st.refs.Add(1)
	var once sync.Once
	return func() { once.Do(st.release) }
}

// FromBuffer makes a tensor that owns buf, a buffer of rt's device (made
// by its Alloc, which devices make safe to call from any goroutine): the
// tensor frees it when released. It lets another goroutine fill device
// memory that the rank's goroutine then adopts, counted against the
// device's memory and its limit from the start (DataLoader workers).
func (rt *Runtime) FromBuffer(buf device.Buffer, dt DType, shape ...int) *Tensor {
	n, err := checkedNumel(shape, dt)
	if err == nil && n*dt.Size() > buf.Bytes() {
		err = fmt.Errorf("a buffer of %d bytes for %d elements of %v", buf.Bytes(), n, dt)
	}
	if err != nil {
		rt.dev.Free(buf)
		return rt.failErr("from_buffer", err)
	}
	st := &storage{rt: rt, buf: buf}
	st.refs.Store(1)
	return rt.wrap(st, dt, 0, slices.Clone(shape), device.ContiguousStrides(shape))
}

// FromHostMemory makes a tensor over data (little-endian elements of dt)
// without copying when the device can adopt host memory (the CPU can): the
// tensor and whoever else holds data share it, as torch.from_numpy. On other
// devices, or when data is not aligned to the element size, it copies.
func (rt *Runtime) FromHostMemory(dt DType, data []byte, shape ...int) *Tensor {
	hm, ok := rt.dev.(device.HostMemory)
	n, err := checkedNumel(shape, dt)
	if err != nil {
		return rt.failErr("from_host_memory", err)
	}
	if !ok || n*dt.Size() != len(data) || len(data) == 0 || uintptr(unsafe.Pointer(&data[0]))%uintptr(dt.Size()) != 0 {
		return rt.FromBytes(dt, data, shape...)
	}
	st := &storage{rt: rt, buf: hm.WrapHost(data)}
	st.refs.Store(1)
	return rt.wrap(st, dt, 0, slices.Clone(shape), device.ContiguousStrides(shape))
}
