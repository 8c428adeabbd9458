package tensor

import (
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
)

// reduceDims normalises dims (nil or empty means every dimension) and
// returns the keepdim shape and the final shape.
func (t *Tensor) reduceDims(op string, dims []int, keepDim bool) (reduced []bool, keep, final []int, bad *Tensor) {
	nd := len(t.shape)
	reduced = make([]bool, nd)
	if len(dims) == 0 {
		for i := range reduced {
			reduced[i] = true
		}
	}
	for _, d := range dims {
		if nd == 0 && (d == 0 || d == -1) {
			continue
		}
		i, ok := normDim(d, nd)
		if !ok {
			return nil, nil, nil, t.rt.fail(op, "dimension %d out of range for a %d-dimensional tensor", d, nd)
		}
		if reduced[i] {
			return nil, nil, nil, t.rt.fail(op, "dimension %d appears more than once in %v", d, dims)
		}
		reduced[i] = true
	}
	keep = slices.Clone(t.shape)
	for i := range keep {
		if reduced[i] {
			keep[i] = 1
		} else {
			final = append(final, t.shape[i])
		}
	}
	if keepDim {
		final = keep
	}
	return reduced, keep, final, nil
}

// reducedCount is the number of elements each output of a reduction over
// dims combines.
func (t *Tensor) reducedCount(op string, dims []int) (int, *Tensor) {
	reduced, _, _, bad := t.reduceDims(op, dims, false)
	if bad != nil {
		return 0, bad
	}
	count := 1
	for i, r := range reduced {
		if r {
			count *= t.shape[i]
		}
	}
	return count, nil
}

func (t *Tensor) reduce(opName string, op device.ReduceOp, dims []int, keepDim bool) *Tensor {
	rt, bad := check(opName, t)
	if bad != nil {
		return bad
	}
	_, keep, final, bad := t.reduceDims(opName, dims, keepDim)
	if bad != nil {
		return bad
	}
	src := t
	if op == device.Sum && !t.dt.IsFloat() && t.dt != Int64 {
		src = t.To(Int64) // integer and bool sums are int64, as in PyTorch
		defer src.Release()
	}
	out, err := rt.empty(src.dt, keep)
	if err != nil {
		return rt.failErr(opName, err)
	}
	if err := kernel(func() error { return rt.dev.Reduce(op, out.view(), src.view()) }); err != nil {
		out.Release()
		return rt.failErr(opName, err)
	}
	if !keepDim {
		out.shape, out.strides = final, device.ContiguousStrides(final)
	}
	return out
}

// Sum sums over dims (every dimension when dims is empty), keeping them as
// extent 1 when keepDim is set (torch.sum).
func (t *Tensor) Sum(dims []int, keepDim bool) *Tensor {
	if t != nil && t.rt != nil {
		t = t.rt.fullPrecision(t) // a sum in float32 under autocast
	}
	out := t.reduce("sum", device.Sum, dims, keepDim)
	if out.err != nil || !out.dt.IsFloat() {
		return out
	}
	if n := out.record("SumBackward", t); n != nil {
		in := t.shape
		_, keep, _, _ := t.reduceDims("sum", dims, keepDim)
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{g.Reshape(keep...).Expand(in...)} }
	}
	return out
}

// SumAll sums every element into a 0-dimensional tensor.
func (t *Tensor) SumAll() *Tensor { return t.Sum(nil, false) }

// Mean averages over dims (every dimension when dims is empty).
func (t *Tensor) Mean(dims []int, keepDim bool) *Tensor {
	if _, bad := check("mean", t); bad != nil {
		return bad
	}
	if !t.dt.IsFloat() {
		return t.rt.fail("mean", "could not infer output dtype: input dtype must be floating point, got %v", t.dt)
	}
	count, bad := t.reducedCount("mean", dims)
	if bad != nil {
		return bad
	}
	s := t.Sum(dims, keepDim)
	out := s.MulScalar(1 / float64(count))
	s.Release()
	return out
}

// MeanAll averages every element.
func (t *Tensor) MeanAll() *Tensor { return t.Mean(nil, false) }

// Var is the variance over dims with the given correction (1 is PyTorch's
// default, the unbiased estimator; 0 the biased one).
func (t *Tensor) Var(dims []int, correction int, keepDim bool) *Tensor {
	if _, bad := check("var", t); bad != nil {
		return bad
	}
	if !t.dt.IsFloat() {
		return t.rt.fail("var", "input dtype must be floating point, got %v", t.dt)
	}
	count, bad := t.reducedCount("var", dims)
	if bad != nil {
		return bad
	}
	mean := t.Mean(dims, true)
	dev := t.Sub(mean)
	sq := dev.Square()
	s := sq.Sum(dims, keepDim)
	out := s.MulScalar(1 / float64(max(0, count-correction)))
	for _, x := range []*Tensor{mean, dev, sq, s} {
		x.Release()
	}
	return out
}

// Std is the square root of Var.
func (t *Tensor) Std(dims []int, correction int, keepDim bool) *Tensor {
	v := t.Var(dims, correction, keepDim)
	out := v.Sqrt()
	v.Release()
	return out
}

// MaxAll is the largest element; its gradient is shared evenly by every
// element equal to it, as PyTorch's max() backward.
func (t *Tensor) MaxAll() *Tensor { return t.extremeAll("max", device.Max) }

// MinAll is the smallest element.
func (t *Tensor) MinAll() *Tensor { return t.extremeAll("min", device.Min) }

func (t *Tensor) extremeAll(opName string, op device.ReduceOp) *Tensor {
	out := t.reduce(opName, op, nil, false)
	if out.err != nil {
		return out
	}
	if n := out.record("MaxBackward", t); n != nil {
		x, y := n.save(t), n.save(out)
		n.backward = func(g *Tensor) []*Tensor {
			mask := x.Eq(y).To(x.dt)
			count := mask.SumAll()
			return []*Tensor{mask.Mul(g.Div(count))}
		}
	}
	return out
}

// Amax is the maximum over dims (gradient shared evenly among ties).
func (t *Tensor) Amax(dims []int, keepDim bool) *Tensor {
	out := t.reduce("amax", device.Max, dims, keepDim)
	if out.err != nil {
		return out
	}
	if n := out.record("AmaxBackward", t); n != nil {
		_, keep, _, _ := t.reduceDims("amax", dims, keepDim)
		x, y := n.save(t), n.save(out)
		n.backward = func(g *Tensor) []*Tensor {
			mask := x.Eq(y.Reshape(keep...)).To(x.dt)
			count := mask.Sum(dims, true)
			return []*Tensor{mask.Mul(g.Reshape(keep...).Div(count))}
		}
	}
	return out
}

// Max returns the maximum along dim and its int64 index (the first one
// among ties), as torch.max(t, dim, keepdim). The gradient goes to the
// selected element.
func (t *Tensor) Max(dim int, keepDim bool) (values, indices *Tensor) {
	rt, bad := check("max", t)
	if bad != nil {
		return bad, bad
	}
	if len(t.shape) == 0 {
		v := t.Clone()
		return v, rt.Zeros(Int64)
	}
	d, ok := normDim(dim, len(t.shape))
	if !ok {
		bad := rt.fail("max", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
		return bad, bad
	}
	if t.shape[d] == 0 {
		bad := rt.fail("max", "cannot reduce over dimension %d of size 0", dim)
		return bad, bad
	}
	keep := slices.Clone(t.shape)
	keep[d] = 1
	values, err := rt.empty(t.dt, keep)
	if err != nil {
		return rt.failErr("max", err), nil
	}
	indices, err = rt.empty(Int64, keep)
	if err != nil {
		values.Release()
		return rt.failErr("max", err), nil
	}
	if err := kernel(func() error { return rt.dev.ArgMax(values.view(), indices.view(), t.view(), d) }); err != nil {
		values.Release()
		indices.Release()
		bad := rt.failErr("max", err)
		return bad, bad
	}
	if !keepDim {
		final := slices.Delete(slices.Clone(keep), d, d+1)
		values.shape, values.strides = final, device.ContiguousStrides(final)
		indices.shape, indices.strides = slices.Clone(final), device.ContiguousStrides(final)
	}
	if n := values.record("MaxBackward", t); n != nil {
		idx := n.save(indices)
		in := t.shape
		n.backward = func(g *Tensor) []*Tensor {
			gi := g.Reshape(keep...)
			z := g.rt.Zeros(g.dt, in...)
			return []*Tensor{z.scatterAdd(d, idx.Reshape(keep...), gi)}
		}
	}
	return values, indices
}

// Min returns the minimum along dim and its index.
func (t *Tensor) Min(dim int, keepDim bool) (values, indices *Tensor) {
	n := t.Neg()
	v, i := n.Max(dim, keepDim)
	out := v.Neg()
	n.Release()
	v.Release()
	return out, i
}

// Argmax returns the int64 index of the maximum along dim.
func (t *Tensor) Argmax(dim int, keepDim bool) *Tensor {
	v, i := t.Max(dim, keepDim)
	if v != i {
		v.Release()
	}
	return i
}
