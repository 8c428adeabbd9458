package tensor

import (
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
)

// Views share storage with their input; their backward maps the gradient
// back to the input's layout. Shape and stride slices are never modified
// after a tensor is made, so views may share them.

// inferShape resolves one -1 extent and checks the element count.
func (t *Tensor) inferShape(op string, shape []int) ([]int, *Tensor) {
	out := slices.Clone(shape)
	infer := -1
	known := 1
	for i, s := range out {
		switch {
		case s == -1 && infer < 0:
			infer = i
		case s < 0:
			return nil, t.rt.fail(op, "invalid shape %v", shape)
		case s != 0 && known > maxBytes/s:
			return nil, t.rt.fail(op, "shape %v is invalid for input of size %d", shape, t.Numel())
		default:
			known *= s
		}
	}
	n := t.Numel()
	if infer >= 0 {
		if known == 0 || n%known != 0 {
			return nil, t.rt.fail(op, "shape %v is invalid for input of size %d", shape, n)
		}
		out[infer] = n / known
	} else if known != n {
		return nil, t.rt.fail(op, "shape %v is invalid for input of size %d", shape, n)
	}
	return out, nil
}

// viewStrides finds strides that address t's elements in row-major order
// under newShape without copying (ATen's computeStride), if they exist.
func viewStrides(old, oldStrides, newShape []int) ([]int, bool) {
	if len(old) == 0 || numel(old) == 0 {
		return device.ContiguousStrides(newShape), true
	}
	st := make([]int, len(newShape))
	viewD := len(newShape) - 1
	chunkBase := oldStrides[len(oldStrides)-1]
	tensorNumel, viewNumel := 1, 1
	for d := len(old) - 1; d >= 0; d-- {
		tensorNumel *= old[d]
		if d == 0 || (old[d-1] != 1 && oldStrides[d-1] != tensorNumel*chunkBase) {
			for viewD >= 0 && (viewNumel < tensorNumel || newShape[viewD] == 1) {
				st[viewD] = viewNumel * chunkBase
				viewNumel *= newShape[viewD]
				viewD--
			}
			if viewNumel != tensorNumel {
				return nil, false
			}
			if d > 0 {
				chunkBase = oldStrides[d-1]
				tensorNumel, viewNumel = 1, 1
			}
		}
	}
	return st, viewD == -1
}

// Reshape returns t with a new shape (one extent may be -1), as a view when
// the strides allow it and as a copy otherwise (torch.reshape).
func (t *Tensor) Reshape(shape ...int) *Tensor {
	if _, bad := check("reshape", t); bad != nil {
		return bad
	}
	ns, bad := t.inferShape("reshape", shape)
	if bad != nil {
		return bad
	}
	if st, ok := viewStrides(t.shape, t.strides, ns); ok {
		return t.viewAs("ViewBackward", ns, st)
	}
	c := t.Contiguous()
	out := c.viewAs("ViewBackward", ns, device.ContiguousStrides(ns))
	return out
}

// View is Reshape that refuses to copy (torch's Tensor.view).
func (t *Tensor) View(shape ...int) *Tensor {
	if _, bad := checkView("view", t); bad != nil {
		return bad
	}
	ns, bad := t.inferShape("view", shape)
	if bad != nil {
		return bad
	}
	st, ok := viewStrides(t.shape, t.strides, ns)
	if !ok {
		return t.rt.fail("view", "view size %v is not compatible with input tensor's size %v and stride %v (at least one dimension spans across two contiguous subspaces); use Reshape", ns, t.shape, t.strides)
	}
	return t.viewAs("ViewBackward", ns, st)
}

func (t *Tensor) viewAs(op string, shape, strides []int) *Tensor {
	out := t.alias(t.off, shape, strides)
	if n := out.record(op, t); n != nil {
		in := t.shape
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g.Reshape(in...)} }
	}
	return out
}

// Flatten merges dimensions start..end (inclusive, negative from the end).
func (t *Tensor) Flatten(start, end int) *Tensor {
	if _, bad := checkView("flatten", t); bad != nil {
		return bad
	}
	if len(t.shape) == 0 {
		return t.Reshape(1)
	}
	s, ok1 := normDim(start, len(t.shape))
	e, ok2 := normDim(end, len(t.shape))
	if !ok1 || !ok2 || s > e {
		return t.rt.fail("flatten", "dimensions %d..%d out of range for a %d-dimensional tensor", start, end, len(t.shape))
	}
	shape := slices.Clone(t.shape[:s])
	shape = append(shape, numel(t.shape[s:e+1]))
	shape = append(shape, t.shape[e+1:]...)
	return t.Reshape(shape...)
}

// Transpose swaps two dimensions.
func (t *Tensor) Transpose(dim0, dim1 int) *Tensor {
	if _, bad := checkView("transpose", t); bad != nil {
		return bad
	}
	if len(t.shape) == 0 && (dim0 == 0 || dim0 == -1) && (dim1 == 0 || dim1 == -1) {
		return t.viewAs("TransposeBackward", t.shape, t.strides)
	}
	a, ok1 := normDim(dim0, len(t.shape))
	b, ok2 := normDim(dim1, len(t.shape))
	if !ok1 || !ok2 {
		return t.rt.fail("transpose", "dimensions (%d, %d) out of range for a %d-dimensional tensor", dim0, dim1, len(t.shape))
	}
	shape, strides := slices.Clone(t.shape), slices.Clone(t.strides)
	shape[a], shape[b] = shape[b], shape[a]
	strides[a], strides[b] = strides[b], strides[a]
	out := t.alias(t.off, shape, strides)
	if n := out.record("TransposeBackward", t); n != nil {
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g.Transpose(a, b)} }
	}
	return out
}

// T transposes a 2-D tensor (a tensor of fewer dimensions is returned as
// is).
func (t *Tensor) T() *Tensor {
	if t.err == nil && len(t.shape) < 2 {
		return t.Transpose(0, 0)
	}
	if t.err == nil && len(t.shape) > 2 {
		return t.rt.fail("t", "expects a tensor with at most 2 dimensions, got %d; use Transpose or MT", len(t.shape))
	}
	return t.Transpose(0, 1)
}

// MT transposes the last two dimensions (torch's Tensor.mT).
func (t *Tensor) MT() *Tensor { return t.Transpose(-2, -1) }

// Permute reorders the dimensions.
func (t *Tensor) Permute(dims ...int) *Tensor {
	if _, bad := checkView("permute", t); bad != nil {
		return bad
	}
	nd := len(t.shape)
	if len(dims) != nd {
		return t.rt.fail("permute", "%d dimensions given for a %d-dimensional tensor", len(dims), nd)
	}
	perm := make([]int, nd)
	seen := make([]bool, nd)
	for i, d := range dims {
		p, ok := normDim(d, nd)
		if !ok || seen[p] {
			return t.rt.fail("permute", "invalid permutation %v of %d dimensions", dims, nd)
		}
		seen[p] = true
		perm[i] = p
	}
	shape, strides := make([]int, nd), make([]int, nd)
	inv := make([]int, nd)
	for i, p := range perm {
		shape[i], strides[i] = t.shape[p], t.strides[p]
		inv[p] = i
	}
	out := t.alias(t.off, shape, strides)
	if n := out.record("PermuteBackward", t); n != nil {
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g.Permute(inv...)} }
	}
	return out
}

// Unsqueeze inserts a dimension of extent 1 at dim (in [-ndim-1, ndim]).
func (t *Tensor) Unsqueeze(dim int) *Tensor {
	if _, bad := checkView("unsqueeze", t); bad != nil {
		return bad
	}
	d, ok := normDim(dim, len(t.shape)+1)
	if !ok {
		return t.rt.fail("unsqueeze", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
	}
	stride := 1
	if d < len(t.shape) {
		stride = t.shape[d] * t.strides[d]
	}
	shape := slices.Insert(slices.Clone(t.shape), d, 1)
	strides := slices.Insert(slices.Clone(t.strides), d, stride)
	return t.viewAs("UnsqueezeBackward", shape, strides)
}

// Squeeze removes the given dimensions if their extent is 1, or every
// dimension of extent 1 when none are given.
func (t *Tensor) Squeeze(dims ...int) *Tensor {
	if _, bad := checkView("squeeze", t); bad != nil {
		return bad
	}
	drop := make([]bool, len(t.shape))
	if len(dims) == 0 {
		for i, s := range t.shape {
			drop[i] = s == 1
		}
	}
	for _, dim := range dims {
		if len(t.shape) == 0 && (dim == 0 || dim == -1) {
			continue
		}
		d, ok := normDim(dim, len(t.shape))
		if !ok {
			return t.rt.fail("squeeze", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
		}
		drop[d] = t.shape[d] == 1
	}
	var shape, strides []int
	for i := range t.shape {
		if !drop[i] {
			shape = append(shape, t.shape[i])
			strides = append(strides, t.strides[i])
		}
	}
	if len(dims) > 0 {
		// PyTorch's squeeze(dim), overload 1 (squeeze() is 0).
		return t.viewAs("SqueezeBackward1", shape, strides)
	}
	return t.viewAs("SqueezeBackward", shape, strides)
}

// Narrow returns length elements of dimension dim starting at start
// (negative start counts from the end).
func (t *Tensor) Narrow(dim, start, length int) *Tensor {
	if _, bad := checkView("narrow", t); bad != nil {
		return bad
	}
	d, ok := normDim(dim, len(t.shape))
	if !ok {
		return t.rt.fail("narrow", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
	}
	ext := t.shape[d]
	if start < 0 {
		start += ext
	}
	if start < 0 || length < 0 || start+length > ext {
		return t.rt.fail("narrow", "start %d with length %d is out of range for dimension %d of size %d", start, length, dim, ext)
	}
	shape := slices.Clone(t.shape)
	shape[d] = length
	out := t.alias(t.off+start*t.strides[d], shape, t.strides)
	if n := out.record("NarrowBackward", t); n != nil {
		in := t.shape
		n.backward = func(g *Tensor) []*Tensor {
			return []*Tensor{embed(g, in, func(z *Tensor) *Tensor { return z.Narrow(d, start, length) })}
		}
		// The pieces of a split (q, k and v out of one projection) each
		// add into the gradient the first one made, rather than each
		// making one the size of the whole of zeros.
		n.into = func(g *Tensor, _ int, acc *Tensor) error {
			return addIntoRegion(acc, g, d, start, length)
		}
	}
	return out
}

// addIntoRegion adds g into acc's region [start, start+length) of
// dimension d, with the values acc + embed(g) has: the region gains g, and
// the rest gains zeros, which changes nothing but a -0 into +0.
func addIntoRegion(acc, g *Tensor, d, start, length int) error {
	zero := acc.rt.Scalar(acc.dt, 0)
	for _, r := range [][2]int{{0, start}, {start + length, acc.shape[d] - start - length}} {
		if r[1] > 0 {
			if err := acc.Narrow(d, r[0], r[1]).addInPlace(zero); err != nil {
				return err
			}
		}
	}
	return acc.Narrow(d, start, length).addInPlace(g)
}

// embed returns zeros of shape with g written into the region that region
// selects (the backward of narrow, select and slicing).
func embed(g *Tensor, shape []int, region func(*Tensor) *Tensor) *Tensor {
	z := g.rt.Zeros(g.dt, shape...)
	if z.err != nil {
		return z
	}
	r := region(z)
	if err := r.CopyFrom(g); err != nil {
		return errTensor(g.rt, err)
	}
	return z
}

// Select removes dimension dim, keeping index (negative counts from the
// end).
func (t *Tensor) Select(dim, index int) *Tensor {
	if _, bad := checkView("select", t); bad != nil {
		return bad
	}
	d, ok := normDim(dim, len(t.shape))
	if !ok {
		return t.rt.fail("select", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
	}
	ext := t.shape[d]
	i := index
	if i < 0 {
		i += ext
	}
	if i < 0 || i >= ext {
		return t.rt.fail("select", "index %d is out of bounds for dimension %d with size %d", index, dim, ext)
	}
	shape := slices.Delete(slices.Clone(t.shape), d, d+1)
	strides := slices.Delete(slices.Clone(t.strides), d, d+1)
	out := t.alias(t.off+i*t.strides[d], shape, strides)
	if n := out.record("SelectBackward", t); n != nil {
		in := t.shape
		n.backward = func(g *Tensor) []*Tensor {
			return []*Tensor{embed(g, in, func(z *Tensor) *Tensor { return z.Select(d, i) })}
		}
		n.into = func(g *Tensor, _ int, acc *Tensor) error {
			return addIntoRegion(acc, g.Unsqueeze(d), d, i, 1)
		}
	}
	return out
}

// Expand broadcasts t to a larger shape without copying (-1 keeps an
// extent); new dimensions are added in front.
func (t *Tensor) Expand(shape ...int) *Tensor {
	if _, bad := checkView("expand", t); bad != nil {
		return bad
	}
	if len(shape) < len(t.shape) {
		return t.rt.fail("expand", "the number of sizes provided (%d) must be at least the number of dimensions (%d)", len(shape), len(t.shape))
	}
	ns := slices.Clone(shape)
	lead := len(ns) - len(t.shape)
	for i := range ns {
		if ns[i] == -1 {
			if i < lead {
				return t.rt.fail("expand", "-1 is not allowed for a new leading dimension in %v", shape)
			}
			ns[i] = t.shape[i-lead]
		}
		if ns[i] < 0 {
			return t.rt.fail("expand", "invalid shape %v", shape)
		}
	}
	strides, ok := broadcastStrides(t.shape, t.strides, ns)
	if !ok {
		return t.rt.fail("expand", "the expanded size %v must match the existing size %v at non-singleton dimensions", shape, t.shape)
	}
	out := t.alias(t.off, ns, strides)
	if n := out.record("ExpandBackward", t); n != nil {
		in := t.shape
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g.sumTo(in)} }
	}
	return out
}

// ExpandAs expands t to other's shape.
func (t *Tensor) ExpandAs(other *Tensor) *Tensor {
	if other.err != nil {
		return errTensor(other.rt, other.err)
	}
	return t.Expand(other.shape...)
}

// dense returns t when it is contiguous, else a contiguous copy made
// outside autograd, and the function that releases that copy (nothing for
// t itself): the operand a device kernel reads.
func dense(t *Tensor) (*Tensor, func()) {
	if t.IsContiguous() {
		return t, func() {}
	}
	var c *Tensor
	t.rt.NoGrad(func() { c = t.Clone() })
	return c, c.Release
}

// Contiguous returns t if it is contiguous (as an alias) and a contiguous
// copy otherwise.
func (t *Tensor) Contiguous() *Tensor {
	if _, bad := check("contiguous", t); bad != nil {
		return bad
	}
	if t.IsContiguous() {
		out := t.alias(t.off, t.shape, t.strides)
		if n := out.record("AliasBackward", t); n != nil {
			n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g} }
		}
		return out
	}
	return t.Clone()
}
