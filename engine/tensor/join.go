package tensor

import (
	"slices"
)

// Cat concatenates tensors along dim (torch.cat). All share a type and
// every extent but dim's.
func Cat(ts []*Tensor, dim int) *Tensor {
	if len(ts) == 0 {
		return &Tensor{err: errf("cat", "expected a non-empty list of tensors")}
	}
	rt, bad := check("cat", ts...)
	if bad != nil {
		return bad
	}
	first := ts[0]
	d, ok := normDim(dim, max(1, len(first.shape)))
	if !ok || len(first.shape) == 0 {
		return rt.fail("cat", "dimension %d out of range for %d-dimensional tensors", dim, len(first.shape))
	}
	shape := slices.Clone(first.shape)
	shape[d] = 0
	for i, t := range ts {
		if t.dt != first.dt {
			return rt.fail("cat", "tensor %d has dtype %v, expected %v", i, t.dt, first.dt)
		}
		if len(t.shape) != len(first.shape) {
			return rt.fail("cat", "tensor %d has %d dimensions, expected %d", i, len(t.shape), len(first.shape))
		}
		for j := range t.shape {
			if j != d && t.shape[j] != first.shape[j] {
				return rt.fail("cat", "sizes of tensors must match except in dimension %d: tensor %d has shape %v, tensor 0 %v", d, i, t.shape, first.shape)
			}
		}
		shape[d] += t.shape[d]
	}
	out, err := rt.empty(first.dt, shape)
	if err != nil {
		return rt.failErr("cat", err)
	}
	at := 0
	sizes := make([]int, len(ts))
	for i, t := range ts {
		ov := out.view()
		ov.Shape = t.shape
		ov.Offset = at * out.strides[d]
		if err := kernel(func() error { return rt.dev.Copy(ov, t.view()) }); err != nil {
			out.Release()
			return rt.failErr("cat", err)
		}
		sizes[i] = t.shape[d]
		at += t.shape[d]
	}
	if n := out.record("CatBackward", ts...); n != nil {
		n.backward = func(g *Tensor) []*Tensor {
			grads := make([]*Tensor, len(sizes))
			at := 0
			for i, s := range sizes {
				if n.needs(i) {
					grads[i] = g.Narrow(d, at, s)
				}
				at += s
			}
			return grads
		}
	}
	return out
}

// Stack joins tensors of equal shape along a new dimension (torch.stack).
func Stack(ts []*Tensor, dim int) *Tensor {
	if len(ts) == 0 {
		return &Tensor{err: errf("stack", "expected a non-empty list of tensors")}
	}
	rt, bad := check("stack", ts...)
	if bad != nil {
		return bad
	}
	d, ok := normDim(dim, len(ts[0].shape)+1)
	if !ok {
		return rt.fail("stack", "dimension %d out of range for %d-dimensional tensors", dim, len(ts[0].shape))
	}
	us := make([]*Tensor, len(ts))
	for i, t := range ts {
		if !slices.Equal(t.shape, ts[0].shape) {
			return rt.fail("stack", "stack expects each tensor to be equal size, but got %v at entry 0 and %v at entry %d", ts[0].shape, t.shape, i)
		}
		us[i] = t.Unsqueeze(d)
	}
	out := Cat(us, d)
	for _, u := range us {
		u.Release()
	}
	return out
}

// Split cuts t along dim into pieces of size (the last may be smaller), as
// torch.split with an int; the pieces are views.
func (t *Tensor) Split(size, dim int) []*Tensor {
	if _, bad := check("split", t); bad != nil {
		return []*Tensor{bad}
	}
	d, ok := normDim(dim, max(1, len(t.shape)))
	if !ok || len(t.shape) == 0 {
		return []*Tensor{t.rt.fail("split", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))}
	}
	if size <= 0 {
		return []*Tensor{t.rt.fail("split", "split size must be positive, got %d", size)}
	}
	var sizes []int
	for at := 0; at < t.shape[d]; at += size {
		sizes = append(sizes, min(size, t.shape[d]-at))
	}
	if len(sizes) == 0 {
		sizes = []int{0}
	}
	return t.SplitSizes(sizes, d)
}

// SplitSizes cuts t along dim into pieces of the given sizes, which must
// add up to the extent (torch.split with a list).
func (t *Tensor) SplitSizes(sizes []int, dim int) []*Tensor {
	if _, bad := check("split", t); bad != nil {
		return []*Tensor{bad}
	}
	d, ok := normDim(dim, max(1, len(t.shape)))
	if !ok || len(t.shape) == 0 {
		return []*Tensor{t.rt.fail("split", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))}
	}
	total := 0
	for _, s := range sizes {
		if s < 0 {
			return []*Tensor{t.rt.fail("split", "negative split size in %v", sizes)}
		}
		total += s
	}
	if total != t.shape[d] {
		return []*Tensor{t.rt.fail("split", "split sizes %v do not sum to the extent %d of dimension %d", sizes, t.shape[d], dim)}
	}
	out := make([]*Tensor, len(sizes))
	at := 0
	for i, s := range sizes {
		out[i] = t.Narrow(d, at, s)
		at += s
	}
	return out
}

// Chunk cuts t into n pieces of equal size along dim (the last may be
// smaller), as torch.chunk.
func (t *Tensor) Chunk(n, dim int) []*Tensor {
	if _, bad := check("chunk", t); bad != nil {
		return []*Tensor{bad}
	}
	if n <= 0 {
		return []*Tensor{t.rt.fail("chunk", "number of chunks must be positive, got %d", n)}
	}
	d, ok := normDim(dim, max(1, len(t.shape)))
	if !ok || len(t.shape) == 0 {
		return []*Tensor{t.rt.fail("chunk", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))}
	}
	size := max(1, (t.shape[d]+n-1)/n)
	return t.Split(size, d)
}
