package tensor

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/rand"
)

// Tensors built without memory. ZeRO stage 3 trains models that do not fit
// whole on one rank, so the model must not be built whole either (DeepSpeed's
// zero.Init, FSDP2's meta-device construction). A lazy tensor has a shape and
// a type but no memory; the in-place initialisations applied to it (random
// fills, constant fills, a copy from another tensor, a scale, a change of
// type) are recorded as steps, and the generator moves on exactly as the real
// fills would move it, so everything after them draws what it would have
// drawn. Values are made from the steps when needed: a rank makes only its
// slice of a parameter (CopyRangeTo), at the cost of the draws before it and
// no memory beyond the slice; any other use of a lazy tensor makes the whole
// of it first, so a lazy tensor is never read as anything but the values the
// same calls on real memory would have given.

// lazyInit is what the values of a lazy storage are: those of from
// converted to dt (a Retype; zeros without one), then the steps applied in
// order, each to its range of the storage's elements.
type lazyInit struct {
	dt     DType
	numel  int
	from   *storage // a reference this init holds, or nil
	fromDT DType
	steps  []lazyStep
}

type lazyKind uint8

const (
	lazyRandom lazyKind = iota // FillRandom
	lazyConst                  // Fill, Zero
	lazyCopy                   // CopyFrom
	lazyMul                    // MulScalarInPlace
	lazyDiv                    // DivScalarInPlace
	lazySource                 // LazyFrom
)

// A LazySource supplies a lazy tensor's values on demand (LazyFrom): a
// tensor in a file, read only where a rank needs it.
type LazySource interface {
	// ReadElements fills dst with the bytes of elements [lo, lo+k) of the
	// values, k being len(dst) over the element size, in the host's byte
	// order.
	ReadElements(dst []byte, lo int) error
}

// lazyStep is one recorded initialisation of elements [off, off+n).
type lazyStep struct {
	kind   lazyKind
	off, n int
	rng    []byte // lazyRandom: the generator's state before the draws
	fill   RandomFill
	value  float64 // lazyConst, lazyMul, lazyDiv
	// lazyCopy: n contiguous elements (a reference the step holds), and
	// their version when copied, which must not change before they are read.
	src        *Tensor
	srcVersion uint32
	source     LazySource // lazySource
}

// overwrites reports whether the step sets its elements whatever they were.
func (s *lazyStep) overwrites() bool { return s.kind <= lazyCopy || s.kind == lazySource }

// Lazy returns a tensor of dt and shape that has no memory yet: the
// in-place initialisations applied to it (FillRandom, Fill, Zero, CopyFrom,
// MulScalarInPlace, DivScalarInPlace, Retype) are recorded rather than run,
// and the generator of a random fill is moved on as the fill would move it.
// CopyRangeTo makes part of its values; any other use makes all of them
// first, in memory of its own, as if every initialisation had run on it.
// Its elements start as zeros.
func (rt *Runtime) Lazy(dt DType, shape ...int) *Tensor {
	if !dt.Valid() {
		return rt.fail("lazy", "invalid dtype %v", dt)
	}
	n, err := checkedNumel(shape, dt)
	if err != nil {
		return rt.failErr("lazy", err)
	}
	st := &storage{rt: rt, lazy: &lazyInit{dt: dt, numel: n}}
	st.refs.Store(1)
	return rt.wrap(st, dt, 0, append([]int(nil), shape...), device.ContiguousStrides(shape))
}

// LazyFrom returns a lazy tensor (Lazy) whose values are src's: a slice
// of them, or all at first use, is read when needed. A file's tensors are
// made this way where a model is built lazily (zero.init), so that each
// rank reads only its slices of them.
func (rt *Runtime) LazyFrom(dt DType, src LazySource, shape ...int) *Tensor {
	t := rt.Lazy(dt, shape...)
	if t.err == nil {
		t.st.lazy.steps = []lazyStep{{kind: lazySource, n: t.Numel(), source: src}}
	}
	return t
}

// Unallocated returns a tensor of dt and shape whose memory is given back
// from the start, as after FreeMemory(why): RestoreMemory gives it memory.
// ZeRO stage 3 lays a unit's parameters out in such a buffer, whose memory
// exists only while the unit runs.
func (rt *Runtime) Unallocated(dt DType, why string, shape ...int) *Tensor {
	if !dt.Valid() {
		return rt.fail("unallocated", "invalid dtype %v", dt)
	}
	if _, err := checkedNumel(shape, dt); err != nil {
		return rt.failErr("unallocated", err)
	}
	st := &storage{rt: rt, freed: why}
	st.refs.Store(1)
	return rt.wrap(st, dt, 0, append([]int(nil), shape...), device.ContiguousStrides(shape))
}

// IsLazy reports whether t's values are still recorded steps (Lazy).
func (t *Tensor) IsLazy() bool { return t.st != nil && t.st.lazy != nil }

// lazyRange returns the init of t's storage and the first of the storage
// elements t covers, when t is a lazy tensor whose elements are one range of
// its storage (an in-place initialisation of t can then be recorded).
func (t *Tensor) lazyRange() (*lazyInit, int, bool) {
	if t.err != nil || t.released.Load() || t.st == nil || t.st.lazy == nil || !t.IsContiguous() {
		return nil, 0, false
	}
	return t.st.lazy, t.off, true
}

// recordStep appends a step over t's elements, after the checks an in-place
// write makes.
func (t *Tensor) recordStep(op string, lz *lazyInit, s lazyStep) error {
	if err := t.checkInPlace(op); err != nil {
		return err
	}
	s.n = t.Numel()
	lz.steps = append(lz.steps, s)
	t.st.version.Add(1)
	return nil
}

// recordRandom records FillRandom on a lazy t, moving g on; ok is false
// when t cannot record it (the fill then runs on t's values).
func (t *Tensor) recordRandom(g *Generator, f RandomFill) (ok bool, err error) {
	lz, off, ok := t.lazyRange()
	if !ok {
		return false, nil
	}
	if !t.dt.IsFloat() {
		return true, errf(f.String(), "%v is not a floating-point type", t.dt)
	}
	state := g.State()
	if err := f.Advance(g, t.dt, t.Numel()); err != nil {
		return true, err
	}
	return true, t.recordStep(f.String(), lz, lazyStep{kind: lazyRandom, off: off, rng: state, fill: f})
}

// recordCopy records CopyFrom(src) on a lazy t when src has t's number of
// elements, contiguous; ok is false otherwise.
func (t *Tensor) recordCopy(src *Tensor) (ok bool, err error) {
	lz, off, ok := t.lazyRange()
	if !ok || src.err != nil || src.released.Load() || src.Numel() != t.Numel() || !src.IsContiguous() || src.rt != t.rt {
		return false, nil
	}
	if _, bad := checkView("copy_", src); bad != nil { // a lazy source stays lazy: the step reads its range
		return true, bad.err
	}
	flat := src.ref()
	flat.shape, flat.strides = []int{src.Numel()}, []int{1}
	if err := t.recordStep("copy_", lz, lazyStep{kind: lazyCopy, off: off, src: flat, srcVersion: src.st.version.Load()}); err != nil {
		flat.Release()
		return true, err
	}
	return true, nil
}

// retypeLazy is Retype of a lazy t that is its whole storage: the new
// storage's values are the old ones converted.
func (t *Tensor) retypeLazy(dt DType) bool {
	old := t.st
	if old.lazy == nil || t.off != 0 || !t.IsContiguous() || t.Numel() != old.lazy.numel {
		return false
	}
	st := &storage{rt: t.rt, lazy: &lazyInit{dt: dt, numel: t.Numel(), from: old, fromDT: t.dt}}
	st.refs.Store(1)
	t.st, t.dt = st, dt // old's reference moves to the new init
	return true
}

// drop releases what the init holds.
func (lz *lazyInit) drop() {
	if lz.from != nil {
		lz.from.release()
		lz.from = nil
	}
	for i := range lz.steps {
		if s := lz.steps[i].src; s != nil {
			s.Release()
		}
	}
	lz.steps = nil
}

// realize gives a lazy storage memory and its values.
func (s *storage) realize() error {
	lz := s.lazy
	if lz == nil {
		return nil
	}
	buf, err := s.rt.dev.Alloc(lz.dt, lz.numel)
	if err != nil {
		return fmt.Errorf("tensor: making the values of a lazily built tensor of %d elements of %v: %w", lz.numel, lz.dt, err)
	}
	s.buf, s.lazy = buf, nil
	s.refs.Add(1)
	s.rt.live.Add(1)
	whole := &Tensor{rt: s.rt, st: s, dt: lz.dt, shape: []int{lz.numel}, strides: []int{1}}
	err = lz.write(whole, 0)
	whole.Release()
	lz.drop()
	return err
}

// CopyRangeTo copies elements [lo, lo+dst.Numel()) of t, in row-major
// order, into dst (contiguous, of t's type). For a lazy t it makes only
// those values, from its recorded initialisations, with no memory beyond
// dst's; t stays lazy. ZeRO stage 3 makes each rank's slice of a
// parameter built with Lazy this way.
func (t *Tensor) CopyRangeTo(dst *Tensor, lo int) error {
	const op = "copy range"
	if _, bad := check(op, dst); bad != nil {
		return bad.err
	}
	m := dst.Numel()
	switch {
	case t.err != nil:
		return t.err
	case t.released.Load():
		return errf(op, "use of a released %s", t.label())
	case dst.dt != t.dt || !dst.IsContiguous():
		return errf(op, "into a %v tensor (contiguous: %v) from %v", dst.dt, dst.IsContiguous(), t.dt)
	case lo < 0 || m > t.Numel()-lo:
		return errf(op, "elements [%d, %d) of %d", lo, lo+m, t.Numel())
	}
	if lz, off, ok := t.lazyRange(); ok {
		dst.st.version.Add(1)
		flat := dst.alias(dst.off, []int{m}, []int{1})
		defer flat.Release()
		return lz.write(flat, off+lo)
	}
	var src *Tensor
	if t.IsContiguous() {
		src = t.alias(t.off+lo, []int{m}, []int{1})
	} else {
		c := t.Contiguous()
		src = c.alias(c.off+lo, []int{m}, []int{1})
		defer c.Release()
	}
	defer src.Release()
	return dst.View(dst.shape...).CopyFrom(src)
}

// write makes the values of the storage's elements [lo, lo+dst.Numel())
// in dst (flat, contiguous, of lz.dt): the converted source or zeros, then
// every step that reaches the range, from the last that overwrites all of
// it (an initialiser run twice costs its draws only once).
func (lz *lazyInit) write(dst *Tensor, lo int) error {
	m := dst.Numel()
	hi := lo + m
	if m == 0 {
		return nil
	}
	first := -1
	for i := len(lz.steps) - 1; i >= 0; i-- {
		if s := &lz.steps[i]; s.overwrites() && s.off <= lo && hi <= s.off+s.n {
			first = i
			break
		}
	}
	if first < 0 {
		if err := lz.writeBase(dst, lo); err != nil {
			return err
		}
		first = 0
	}
	for i := first; i < len(lz.steps); i++ {
		s := &lz.steps[i]
		a, b := max(lo, s.off), min(hi, s.off+s.n)
		if a >= b {
			continue
		}
		part := dst.alias(dst.off+a-lo, []int{b - a}, []int{1})
		err := s.apply(part, a-s.off)
		part.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// writeBase writes what the elements are before any step: the source's
// values converted, or zeros.
func (lz *lazyInit) writeBase(dst *Tensor, lo int) error {
	if lz.from == nil {
		return dst.Fill(0)
	}
	m := dst.Numel()
	if lz.from.lazy != nil {
		tmp, err := lz.from.rt.empty(lz.fromDT, []int{m})
		if err != nil {
			return err
		}
		defer tmp.Release()
		if err := lz.from.lazy.write(tmp, lo); err != nil {
			return err
		}
		return dst.CopyFrom(tmp)
	}
	lz.from.refs.Add(1)
	src := lz.from.rt.wrap(lz.from, lz.fromDT, lo, []int{m}, []int{1})
	defer src.Release()
	return dst.CopyFrom(src)
}

// apply runs the step on part, its elements [at, at+part.Numel()).
func (s *lazyStep) apply(part *Tensor, at int) error {
	switch s.kind {
	case lazyRandom:
		g := rand.New(0)
		if err := g.SetState(s.rng); err != nil {
			return err
		}
		return part.FillRandomRange(g, s.fill, s.n, at)
	case lazyConst:
		return part.Fill(s.value)
	case lazyCopy:
		if s.src.st.version.Load() != s.srcVersion {
			return fmt.Errorf("tensor: the tensor copied into a lazily built tensor was changed before the copy's values were made (copy what must not change, or make the values first)")
		}
		if s.src.IsLazy() || s.src.st.buf == nil {
			tmp, err := part.rt.empty(s.src.dt, []int{part.Numel()})
			if err != nil {
				return err
			}
			defer tmp.Release()
			if err := s.src.CopyRangeTo(tmp, at); err != nil {
				return err
			}
			return part.CopyFrom(tmp)
		}
		src := s.src.alias(s.src.off+at, []int{part.Numel()}, []int{1})
		defer src.Release()
		return part.CopyFrom(src)
	case lazySource:
		return readSource(part, s.source, at)
	case lazyMul:
		return part.MulScalarInPlace(s.value)
	case lazyDiv:
		return part.DivScalarInPlace(s.value)
	}
	return fmt.Errorf("tensor: unknown lazy step %d", s.kind)
}

// LazyDraws returns the generator states that t's recorded random fills
// start from, in order (nil for a tensor that is not lazy). Ranks that
// build the same model lazily and must start from one rank's values (as a
// broadcast of that rank's parameters would make them) exchange these
// instead of the values: SetLazyDraws.
func (t *Tensor) LazyDraws() [][]byte {
	if !t.IsLazy() {
		return nil
	}
	var out [][]byte
	for lz := t.st.lazy; lz != nil; {
		for _, s := range lz.steps {
			if s.kind == lazyRandom {
				out = append(out, s.rng)
			}
		}
		if lz.from == nil {
			break
		}
		lz = lz.from.lazy
	}
	return out
}

// SetLazyDraws replaces the generator states of t's recorded random fills
// (LazyDraws' order): t's values become those the fills draw from them.
func (t *Tensor) SetLazyDraws(states [][]byte) error {
	mine := t.LazyDraws()
	if len(mine) != len(states) {
		return fmt.Errorf("tensor: %s has %d random initialisations recorded, not %d", t.label(), len(mine), len(states))
	}
	i := 0
	for lz := t.st.lazy; lz != nil; {
		for k := range lz.steps {
			if s := &lz.steps[k]; s.kind == lazyRandom {
				if len(states[i]) != len(s.rng) {
					return fmt.Errorf("tensor: %s: a generator state of %d bytes, not %d", t.label(), len(states[i]), len(s.rng))
				}
				s.rng = states[i]
				i++
			}
		}
		if lz.from == nil {
			break
		}
		lz = lz.from.lazy
	}
	return nil
}

// readSource reads elements [at, at+dst.Numel()) of src into dst: straight
// into host memory, or through a bounded host buffer.
func readSource(dst *Tensor, src LazySource, at int) error {
	if b, ok := HostBytes(dst); ok {
		return src.ReadElements(b, at)
	}
	size := dst.dt.Size()
	chunk := max(1, (1<<20)/size)
	buf := make([]byte, min(chunk, dst.Numel())*size)
	for i := 0; i < dst.Numel(); i += chunk {
		k := min(chunk, dst.Numel()-i)
		if err := src.ReadElements(buf[:k*size], at+i); err != nil {
			return err
		}
		piece := dst.rt.FromHostMemory(dst.dt, buf[:k*size], k)
		part := dst.alias(dst.off+i, []int{k}, []int{1})
		err := part.CopyFrom(piece)
		part.Release()
		piece.Release()
		if err != nil {
			return err
		}
	}
	return nil
}
