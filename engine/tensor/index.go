package tensor

import (
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
)

// indexOperand checks that index holds integers and returns it as int64.
func indexOperand(op string, index *Tensor) (*Tensor, *Tensor) {
	switch index.dt {
	case Int64:
		return index, nil
	case Int32, Uint8:
		return index.To(Int64), nil
	}
	return nil, index.rt.fail(op, "index must be an integer tensor, not %v", index.dt)
}

// IndexSelect picks the slices of dimension dim at the positions in the 1-D
// integer tensor index (torch.index_select).
func (t *Tensor) IndexSelect(dim int, index *Tensor) *Tensor {
	rt, bad := check("index_select", t, index)
	if bad != nil {
		return bad
	}
	d, ok := normDim(dim, max(1, len(t.shape)))
	if !ok || len(t.shape) == 0 {
		return rt.fail("index_select", "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
	}
	if len(index.shape) > 1 {
		return rt.fail("index_select", "index must be 1-dimensional, got shape %v", index.shape)
	}
	idx, bad := indexOperand("index_select", index)
	if bad != nil {
		return bad
	}
	if idx != index {
		defer idx.Release()
	}
	k := idx.Numel()
	iv := idx.view()
	iv.Shape, iv.Strides = []int{k}, []int{1}
	if len(idx.shape) == 1 {
		iv.Strides = []int{idx.strides[0]}
	}
	shape := slices.Clone(t.shape)
	shape[d] = k
	out, err := rt.empty(t.dt, shape)
	if err != nil {
		return rt.failErr("index_select", err)
	}
	if err := kernel(func() error { return rt.dev.IndexSelect(out.view(), t.view(), iv, d) }); err != nil {
		out.Release()
		return rt.failErr("index_select", err)
	}
	if n := out.record("IndexSelectBackward", t); n != nil {
		saved := n.save(idx)
		in := t.shape
		n.backward = func(g *Tensor) []*Tensor {
			z := g.rt.Zeros(g.dt, in...)
			return []*Tensor{z.indexAdd(d, saved, g)}
		}
	}
	return out
}

// indexAdd adds src's slices into t at index along dim, in place, without
// recording; t must be freshly made (backward code).
func (t *Tensor) indexAdd(dim int, index, src *Tensor) *Tensor {
	rt, bad := check("index_add", t, index, src)
	if bad != nil {
		return bad
	}
	iv := index.view()
	iv.Shape = []int{index.Numel()}
	if len(index.shape) == 1 {
		iv.Strides = []int{index.strides[0]}
	} else {
		iv.Strides = []int{1}
	}
	if err := kernel(func() error { return rt.dev.IndexAdd(t.view(), src.view(), iv, dim) }); err != nil {
		return rt.failErr("index_add", err)
	}
	return t
}

// Embedding looks up rows of weight [V, D] at the integer indices of any
// shape, giving indices.shape + [D] (torch.nn.functional.embedding). The
// gradient of weight accumulates the rows' gradients; rows equal to
// paddingIdx (when paddingIdx >= 0) get none, as PyTorch's padding_idx.
func Embedding(indices, weight *Tensor, paddingIdx int64) *Tensor {
	rt, bad := check("embedding", indices, weight)
	if bad != nil {
		return bad
	}
	if len(weight.shape) != 2 {
		return rt.fail("embedding", "weight must be 2-dimensional [num_embeddings, embedding_dim], got shape %v", weight.shape)
	}
	idx, bad := indexOperand("embedding", indices)
	if bad != nil {
		return bad
	}
	if idx != indices {
		defer idx.Release()
	}
	flat := idx.Reshape(-1)
	defer flat.Release()
	var rows *Tensor
	rt.NoGrad(func() { rows = weight.IndexSelect(0, flat) })
	if rows.err != nil {
		return errTensor(rt, rows.err)
	}
	shape := append(slices.Clone(idx.shape), weight.shape[1])
	rows.shape, rows.strides = shape, device.ContiguousStrides(shape)
	if n := rows.record("EmbeddingBackward", nil, weight); n != nil {
		saved := n.save(flat)
		ws := weight.shape
		// The lookups' count, not −1: with rows of width 0 a −1 would be
		// ambiguous (PyTorch's embedding of width 0 has a gradient too).
		lookups := flat.Numel()
		n.backward = func(g *Tensor) []*Tensor {
			g2 := g.Reshape(lookups, ws[1])
			src := g2
			if paddingIdx >= 0 {
				keep := saved.NeScalar(float64(paddingIdx)).To(g.dt).Unsqueeze(1)
				src = g2.Mul(keep)
			}
			z := g.rt.Zeros(g.dt, ws...)
			return []*Tensor{nil, z.indexAdd(0, saved, src.Contiguous())}
		}
		n.into = func(g *Tensor, _ int, acc *Tensor) error {
			return embeddingGradInto(acc, g.Reshape(lookups, ws[1]), saved, paddingIdx)
		}
	}
	return rows
}

// embeddingGradInto adds an embedding's gradient into acc, the gradient
// its weight accumulates, without the dense gradient backward would make
// (all zeros but the looked-up rows: GPT-2's tied 147 MiB embedding). The
// values are acc + dense bit for bit: each looked-up row's contributions
// are summed from zero in the order of the indices, as the dense index_add
// does, into a compact buffer of the distinct rows; acc takes 0 (what the
// dense gradient adds to the other rows: it turns a -0 into +0), then each
// distinct row its sum, once.
func embeddingGradInto(acc, g, indices *Tensor, paddingIdx int64) error {
	rt := acc.rt
	idx, err := indices.Int64s()
	if err != nil {
		return err
	}
	slot := make([]int64, len(idx))
	at := map[int64]int64{}
	var distinct []int64
	for i, r := range idx {
		s, ok := at[r]
		if !ok {
			s = int64(len(distinct))
			at[r] = s
			distinct = append(distinct, r)
		}
		slot[i] = s
	}
	src := g
	if paddingIdx >= 0 {
		keep := indices.NeScalar(float64(paddingIdx)).To(g.dt).Unsqueeze(1)
		src = g.Mul(keep)
	}
	sums := rt.Zeros(g.dt, len(distinct), g.shape[1]).indexAdd(0, rt.FromInt64s(slot, len(slot)), src.Contiguous())
	if sums.err != nil {
		return sums.err
	}
	if err := acc.addInPlace(rt.Scalar(acc.dt, 0)); err != nil {
		return err
	}
	return acc.indexAdd(0, rt.FromInt64s(distinct, len(distinct)), sums).err
}

// checkGatherShapes validates torch.gather / scatter_add shape rules: index
// has t's rank and no larger extent than other except along dim.
func checkGatherShapes(op string, t, index *Tensor, other []int, dim int) (int, *Tensor) {
	nd := len(t.shape)
	d, ok := normDim(dim, max(1, nd))
	if !ok {
		return 0, t.rt.fail(op, "dimension %d out of range for a %d-dimensional tensor", dim, nd)
	}
	if len(index.shape) != nd || len(other) != nd {
		return 0, t.rt.fail(op, "index (shape %v) must have as many dimensions as the tensor (shape %v)", index.shape, t.shape)
	}
	for i := range index.shape {
		if i != d && index.shape[i] > other[i] {
			return 0, t.rt.fail(op, "index shape %v is larger than %v in dimension %d", index.shape, other, i)
		}
	}
	return d, nil
}

// Gather picks, along dim, the elements at index (torch.gather): out has
// index's shape and out[i][j] = t[index[i][j]][j] for dim 0.
func (t *Tensor) Gather(dim int, index *Tensor) *Tensor {
	rt, bad := check("gather", t, index)
	if bad != nil {
		return bad
	}
	idx, bad := indexOperand("gather", index)
	if bad != nil {
		return bad
	}
	if idx != index {
		defer idx.Release()
	}
	d, bad := checkGatherShapes("gather", t, idx, t.shape, dim)
	if bad != nil {
		return bad
	}
	out, err := rt.empty(t.dt, idx.shape)
	if err != nil {
		return rt.failErr("gather", err)
	}
	if err := kernel(func() error { return rt.dev.Gather(out.view(), t.view(), idx.view(), d) }); err != nil {
		out.Release()
		return rt.failErr("gather", err)
	}
	if n := out.record("GatherBackward", t); n != nil {
		saved := n.save(idx)
		in := t.shape
		n.backward = func(g *Tensor) []*Tensor {
			return []*Tensor{g.rt.Zeros(g.dt, in...).scatterAdd(d, saved, g)}
		}
	}
	return out
}

// scatterAdd adds src into t at index along dim, in place, unrecorded.
func (t *Tensor) scatterAdd(dim int, index, src *Tensor) *Tensor {
	rt, bad := check("scatter_add", t, index, src)
	if bad != nil {
		return bad
	}
	if err := kernel(func() error { return rt.dev.ScatterAdd(t.view(), src.view(), index.view(), dim) }); err != nil {
		return rt.failErr("scatter_add", err)
	}
	return t
}

// ScatterAdd returns a copy of t with src added at index along dim
// (torch.scatter_add); differentiable in t and src.
func (t *Tensor) ScatterAdd(dim int, index, src *Tensor) *Tensor {
	rt, bad := check("scatter_add", t, index, src)
	if bad != nil {
		return bad
	}
	idx, bad := indexOperand("scatter_add", index)
	if bad != nil {
		return bad
	}
	if idx != index {
		defer idx.Release()
	}
	d, bad := checkGatherShapes("scatter_add", t, idx, src.shape, dim)
	if bad != nil {
		return bad
	}
	// Every index element reads src at its own position: along dim too
	// (PyTorch: index no larger than src in any dimension).
	if len(idx.shape) > 0 && idx.shape[d] > src.shape[d] {
		return rt.fail("scatter_add", "index shape %v is larger than src's %v in dimension %d", idx.shape, src.shape, d)
	}
	for i := range idx.shape {
		if i != d && idx.shape[i] > t.shape[i] {
			return rt.fail("scatter_add", "index shape %v is larger than the tensor's %v in dimension %d", idx.shape, t.shape, i)
		}
	}
	if src.dt != t.dt {
		return rt.fail("scatter_add", "src dtype %v does not match the tensor's %v", src.dt, t.dt)
	}
	var out *Tensor
	rt.NoGrad(func() { out = t.Clone() })
	if out.err != nil {
		return out
	}
	if r := out.scatterAdd(d, idx, src); r.err != nil {
		out.Release()
		return r
	}
	if n := out.record("ScatterAddBackward", t, src); n != nil {
		saved := n.save(idx)
		srcShape := src.shape
		n.backward = func(g *Tensor) []*Tensor {
			var gs *Tensor
			if n.needs(1) {
				// src may be larger than index: its extra elements were not
				// scattered and get no gradient.
				gs = g.Gather(d, saved)
				if !slices.Equal(gs.shape, srcShape) {
					idxShape := saved.shape
					gs = embed(gs, srcShape, func(z *Tensor) *Tensor {
						for i, e := range idxShape {
							z = z.Narrow(i, 0, e)
						}
						return z
					})
				}
			}
			return []*Tensor{g, gs}
		}
	}
	return out
}
