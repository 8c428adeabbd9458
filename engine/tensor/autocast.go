package tensor

import "fmt"

// Autocast is mixed precision as torch.autocast does it on a GPU: inside
// the region the ops that gain from a lower precision and tolerate it —
// matrix products (Matmul, Linear) and attention — cast their float32
// inputs to the region's type (bfloat16 or float16), while the ops that
// need float32's range or accumulation — softmax, log-softmax, layer norm,
// the losses (cross-entropy, MSE) and sums — cast low-precision inputs up
// to float32. Every other op runs in its inputs' type, promoted as usual
// (float32 + bfloat16 is float32), so a residual stream of float32 stays
// float32. The weights stay float32: their casts are recorded by autograd,
// so gradients reach them in float32; a weight's cast is made once per
// region and reused (PyTorch's cast cache). Backward runs without
// autocast, each op's gradient in the type its forward used.
type autocastState struct {
	dt    DType
	cache map[*Tensor]castEntry
}

type castEntry struct {
	cast    *Tensor
	version uint32
}

// Autocast runs fn with autocast to dt (BFloat16 or Float16).
func (rt *Runtime) Autocast(dt DType, fn func() error) error {
	if dt != BFloat16 && dt != Float16 {
		return fmt.Errorf("tensor: autocast: the type is bfloat16 or float16, got %v", dt)
	}
	return rt.withAutocast(&autocastState{dt: dt, cache: map[*Tensor]castEntry{}}, fn)
}

// WithoutAutocast runs fn with autocast off (torch.autocast(enabled=False)
// inside a region).
func (rt *Runtime) WithoutAutocast(fn func() error) error { return rt.withAutocast(nil, fn) }

// AutocastType is the type of the autocast region fn runs in, and false
// outside any.
func (rt *Runtime) AutocastType() (DType, bool) {
	if rt.autocast == nil {
		return 0, false
	}
	return rt.autocast.dt, true
}

func (rt *Runtime) withAutocast(s *autocastState, fn func() error) error {
	prev := rt.autocast
	rt.autocast = s
	defer func() {
		rt.autocast = prev
		if s != nil {
			for _, e := range s.cache {
				e.cast.Release()
			}
		}
	}()
	return fn()
}

// lowPrecision is t cast to the region's type when autocast is on and t
// is float32; otherwise t itself.
func (rt *Runtime) lowPrecision(t *Tensor) *Tensor {
	s := rt.autocast
	if s == nil || t == nil || t.err != nil || t.dt != Float32 {
		return t
	}
	// A weight (a leaf that requires a gradient) is cast once per region,
	// as long as it is not written in place meanwhile.
	cacheable := t.fn == nil && t.requiresGrad && rt.noGrad == 0
	if cacheable {
		if e, ok := s.cache[t]; ok && e.version == t.st.version.Load() {
			return e.cast
		}
	}
	c := t.To(s.dt)
	if cacheable && c.err == nil {
		if old, ok := s.cache[t]; ok {
			old.cast.Release()
		}
		c.Persist() // the region's, released when it ends
		s.cache[t] = castEntry{c, t.st.version.Load()}
	}
	return c
}

// fullPrecision is t cast to float32 when autocast is on and t is
// bfloat16 or float16; otherwise t itself.
func (rt *Runtime) fullPrecision(t *Tensor) *Tensor {
	if rt.autocast == nil || t == nil || t.err != nil || (t.dt != BFloat16 && t.dt != Float16) {
		return t
	}
	return t.To(Float32)
}
