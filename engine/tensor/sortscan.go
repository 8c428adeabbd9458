package tensor

import (
	"math"
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The ops that work along one dimension a row at a time (cumulative sums
// and products, sorting, top-k, products) and the elementwise sin, cos and
// erf, with PyTorch 1.13's gradients (torch/csrc/autograd/FunctionsManual.cpp:
// cumprod_backward, prod_backward, value_selecting_reduction_backward).

// Sin returns sin(t); integer tensors give float32, as in PyTorch.
func (t *Tensor) Sin() *Tensor {
	return unary("sin", device.Sin, t, 0, true, true, false, func(g, x, _ *Tensor) *Tensor { return g.Mul(x.Cos()) })
}

// Cos returns cos(t).
func (t *Tensor) Cos() *Tensor {
	return unary("cos", device.Cos, t, 0, true, true, false, func(g, x, _ *Tensor) *Tensor { return g.Mul(x.Sin().Neg()) })
}

// Erf returns the error function of t (torch.erf).
func (t *Tensor) Erf() *Tensor {
	return unary("erf", device.Erf, t, 0, true, true, false, func(g, x, _ *Tensor) *Tensor {
		// 2/√π·e^(−x²)·g, in PyTorch's order, the constant rounded to
		// x's type as PyTorch's scalar·tensor rounds it (for bfloat16,
		// 1.125 instead of 1.128).
		return x.Square().Neg().Exp().MulScalar(roundTo(x.dt, 2/math.Sqrt(math.Pi))).Mul(g)
	})
}

// roundTo rounds v to the nearest value of the float type dt.
func roundTo(dt DType, v float64) float64 {
	switch dt {
	case Float32:
		return float64(float32(v))
	case BFloat16:
		return float64(dtype.BF16FromFloat32(float32(v)).Float32())
	case Float16:
		return float64(dtype.F16FromFloat32(float32(v)).Float32())
	}
	return v
}

// alongDim normalises dim for an op along one dimension; a 0-dimensional
// tensor has one dimension of extent 1 there, as in PyTorch (dim 0 or −1).
func (t *Tensor) alongDim(op string, dim int) (int, *Tensor) {
	d, ok := normDim(dim, max(1, len(t.shape)))
	if !ok {
		return 0, t.rt.fail(op, "dimension %d out of range for a %d-dimensional tensor", dim, len(t.shape))
	}
	return d, nil
}

// rowView is t's view for a kernel along one axis: a 0-dimensional tensor
// is given as one element of one dimension.
func (t *Tensor) rowView() device.View {
	v := t.view()
	if len(v.Shape) == 0 {
		v.Shape, v.Strides = []int{1}, []int{1}
	}
	return v
}

// extent is t's extent along dim d (1 for a 0-dimensional tensor).
func (t *Tensor) extent(d int) int {
	if len(t.shape) == 0 {
		return 1
	}
	return t.shape[d]
}

// scanned runs a device scan of t along d into a new tensor of t's type,
// unrecorded (the forward ops record, and backward code uses it directly).
func (t *Tensor) scanned(opName string, op device.ScanOp, d int, reverse bool) *Tensor {
	rt, bad := check(opName, t)
	if bad != nil {
		return bad
	}
	out, err := rt.empty(t.dt, t.shape)
	if err != nil {
		return rt.failErr(opName, err)
	}
	if err := kernel(func() error { return rt.dev.Scan(op, out.rowView(), t.rowView(), d, reverse) }); err != nil {
		out.Release()
		return rt.failErr(opName, err)
	}
	return out
}

// cumulative is torch.cumsum / torch.cumprod without a dtype: integer and
// bool tensors give int64.
func (t *Tensor) cumulative(opName string, op device.ScanOp, dim int) (out *Tensor, d int) {
	if _, bad := check(opName, t); bad != nil {
		return bad, 0
	}
	d, bad := t.alongDim(opName, dim)
	if bad != nil {
		return bad, 0
	}
	src := t
	if !t.dt.IsFloat() && t.dt != Int64 {
		src = t.To(Int64)
		defer src.Release()
	}
	return src.scanned(opName, op, d, false), d
}

// Cumsum returns the running sums of t along dim (torch.cumsum). Floats
// accumulate in float64, each sum rounded to t's type, as PyTorch's CPU
// kernel; integer and bool tensors give int64. Its gradient is the
// running sum of the output's gradient from the end.
func (t *Tensor) Cumsum(dim int) *Tensor {
	out, d := t.cumulative("cumsum", device.CumSum, dim)
	if out.err != nil || !out.dt.IsFloat() {
		return out
	}
	if n := out.record("CumsumBackward", t); n != nil {
		n.backward = func(g *Tensor) []*Tensor {
			if g.Numel() <= 1 || g.extent(d) == 1 {
				return []*Tensor{g}
			}
			return []*Tensor{g.scanned("cumsum_backward", device.CumSum, d, true)}
		}
	}
	return out
}

// Cumprod returns the running products of t along dim (torch.cumprod),
// accumulated as Cumsum's sums. Its gradient is PyTorch's cumprod_backward,
// exact where inputs are zero.
func (t *Tensor) Cumprod(dim int) *Tensor {
	out, d := t.cumulative("cumprod", device.CumProd, dim)
	if out.err != nil || !out.dt.IsFloat() {
		return out
	}
	if n := out.record("CumprodBackward", t); n != nil {
		x, y := n.save(t), n.save(out)
		n.backward = func(g *Tensor) []*Tensor { return []*Tensor{cumprodBackward(g, x, y, d)} }
	}
	return out
}

// cumprodBackward is PyTorch's cumprod_backward outside grad mode, in its
// order of operations. With w = y·g, the gradient of x_k is
// Σ_{j≥k} w_j / x_k before the first zero of its row (z₁); at z₁ it is
// y_{z₁−1}·Σ_{z₁≤j<z₂} g_j·Π_{z₁<i≤j} x_i, z₂ being the second zero (or
// the end); after z₁ it is 0.
func cumprodBackward(g, x, y *Tensor, d int) *Tensor {
	if x.Numel() <= 1 || x.extent(d) == 1 {
		return g
	}
	w := y.Mul(g)
	isZero := x.EqScalar(0)
	zeros, err := isZero.SumAll().Item()
	if err != nil {
		return errTensor(g.rt, err)
	}
	if zeros == 0 {
		return w.scanned("cumprod_backward", device.CumSum, d, true).Div(x)
	}
	rt := g.rt
	zero, one := rt.Scalar(g.dt, 0), rt.Scalar(g.dt, 1)
	seen := isZero.Cumsum(d) // zeros up to and including each position
	before := seen.EqScalar(0)
	grad := Where(before, Where(before, w, zero).scanned("cumprod_backward", device.CumSum, d, true).Div(x), zero)

	first := seen.EqScalar(1) // [z₁, z₂)
	firstIdx := first.To(Int64).Argmax(d, true)
	pos := make([]int, len(x.shape))
	for i := range pos {
		pos[i] = 1
	}
	pos[d] = x.shape[d]
	firstZero := rt.Arange(Int64, 0, float64(x.shape[d]), 1).Reshape(pos...).Eq(firstIdx).LogicalAnd(first)
	between := first.LogicalAnd(firstZero.LogicalNot()) // (z₁, z₂)
	prev := Where(firstIdx.EqScalar(0), one, y.Gather(d, firstIdx.SubScalar(1).Maximum(rt.Scalar(Int64, 0))))
	atZero := Where(between, x, one).scanned("cumprod_backward", device.CumProd, d, false).
		Mul(Where(first, g, zero)).Sum([]int{d}, true).Mul(prev)
	return Where(firstZero, atZero, grad)
}

// ProdAll multiplies every element into a 0-dimensional tensor (torch.prod;
// integer and bool tensors give int64). Floats multiply in float64 and
// round once. Its gradient is PyTorch's prod_backward: g·(result/x)
// without zeros, exact with one zero, and 0 everywhere with several.
func (t *Tensor) ProdAll() *Tensor {
	out := t.prod(nil, false)
	if out.err != nil || !out.dt.IsFloat() {
		return out
	}
	if n := out.record("ProdBackward", t); n != nil {
		x, y := n.save(t), n.save(out)
		n.backward = func(g *Tensor) []*Tensor {
			if len(x.shape) == 0 {
				return []*Tensor{g}
			}
			zeros, err := x.EqScalar(0).SumAll().Item()
			switch {
			case err != nil:
				return []*Tensor{errTensor(g.rt, err)}
			case zeros == 0:
				return []*Tensor{g.Mul(y.Div(x))}
			case zeros > 1:
				return []*Tensor{ZerosLike(x)}
			}
			return []*Tensor{prodSafeZerosBackward(g, x.Reshape(-1), 0).Reshape(x.shape...)}
		}
	}
	return out
}

// Prod multiplies along dim (torch.prod(t, dim, keepdim)), as ProdAll. Its
// gradient is g·(result/x) when t has no zero anywhere, and otherwise, for
// every row, the product of the row's other elements, from exclusive
// running products from both ends, as PyTorch's prod_backward.
func (t *Tensor) Prod(dim int, keepDim bool) *Tensor {
	if _, bad := check("prod", t); bad != nil {
		return bad
	}
	d, bad := t.alongDim("prod", dim)
	if bad != nil {
		return bad
	}
	out := t.prod([]int{dim}, keepDim)
	if out.err != nil || !out.dt.IsFloat() {
		return out
	}
	if n := out.record("ProdBackward", t); n != nil {
		x, y := n.save(t), n.save(out)
		n.backward = func(g *Tensor) []*Tensor {
			if len(x.shape) == 0 {
				return []*Tensor{g}
			}
			keep := slices.Clone(x.shape)
			keep[d] = 1
			gk := g.Reshape(keep...)
			zeros, err := x.EqScalar(0).SumAll().Item()
			if err != nil {
				return []*Tensor{errTensor(g.rt, err)}
			}
			if zeros == 0 {
				return []*Tensor{gk.Mul(y.Reshape(keep...).Div(x))}
			}
			return []*Tensor{prodSafeZerosBackward(gk, x, d)}
		}
	}
	return out
}

// prod reduces with device.Prod, integers as int64.
func (t *Tensor) prod(dims []int, keepDim bool) *Tensor {
	if _, bad := check("prod", t); bad != nil {
		return bad
	}
	src := t
	if !t.dt.IsFloat() && t.dt != Int64 {
		src = t.To(Int64)
		defer src.Release()
	}
	return src.reduce("prod", device.Prod, dims, keepDim)
}

// prodSafeZerosBackward is PyTorch's prod_safe_zeros_backward: g times the
// product of every other element of the row along d, as the exclusive
// running product from the start times the one from the end (cumprod of
// [1, x₀, …, x_{n−2}] and, from the end, of [x₁, …, x_{n−1}, 1]).
func prodSafeZerosBackward(g, x *Tensor, d int) *Tensor {
	n := x.shape[d]
	if x.Numel() == 0 {
		return g.Expand(x.shape...)
	}
	ones := slices.Clone(x.shape)
	ones[d] = 1
	one := g.rt.Ones(x.dt, ones...)
	fromStart := Cat([]*Tensor{one, x.Narrow(d, 0, n-1)}, d).scanned("prod_backward", device.CumProd, d, false)
	fromEnd := Cat([]*Tensor{x.Narrow(d, 1, n-1), one}, d).scanned("prod_backward", device.CumProd, d, true)
	return g.Mul(fromStart.Mul(fromEnd))
}

// sorted sorts t along d without recording: values of t's type and int64
// indices. The device sorts floats and int64; the other integer types and
// bool are sorted as int64 (exactly).
func (t *Tensor) sorted(opName string, d int, descending bool) (values, indices *Tensor) {
	rt := t.rt
	src := t
	if !t.dt.IsFloat() && t.dt != Int64 {
		src = t.To(Int64)
		defer src.Release()
	}
	values, indices = rt.valuesAndIndices(opName, src.dt, t.shape, func(v, i device.View) error {
		return rt.dev.Sort(v, i, src.rowView(), d, descending)
	})
	if values.err != nil {
		return values, indices
	}
	if src != t {
		v := values.To(t.dt)
		values.Release()
		values = v
	}
	return values, indices
}

// selected is topk on a device with a selection kernel: the first k of
// sorted's order along d, without sorting whole rows.
func (t *Tensor) selected(tk device.TopKer, d, k int, largest bool) (values, indices *Tensor) {
	shape := slices.Clone(t.shape)
	shape[d] = k
	return t.rt.valuesAndIndices("topk", t.dt, shape, func(v, i device.View) error {
		return tk.TopK(v, i, t.rowView(), d, k, largest)
	})
}

// valuesAndIndices allocates values (dt) and int64 indices of shape and
// runs the kernel that fills them, releasing both if either step fails.
func (rt *Runtime) valuesAndIndices(opName string, dt DType, shape []int, run func(values, indices device.View) error) (values, indices *Tensor) {
	values, err := rt.empty(dt, shape)
	if err != nil {
		bad := rt.failErr(opName, err)
		return bad, bad
	}
	indices, err = rt.empty(Int64, shape)
	if err == nil {
		err = kernel(func() error { return run(values.rowView(), indices.rowView()) })
		if err != nil {
			indices.Release()
		}
	}
	if err != nil {
		values.Release()
		bad := rt.failErr(opName, err)
		return bad, bad
	}
	return values, indices
}

// selectionBackward records, on values, the backward of an op that picked
// them from t at indices along d: the gradient goes to the picked elements
// (PyTorch's value_selecting_reduction_backward).
func selectionBackward(op string, values, indices, t *Tensor, d int) {
	if !values.dt.IsFloat() {
		return
	}
	if n := values.record(op, t); n != nil {
		idx := n.save(indices)
		in := t.shape
		n.backward = func(g *Tensor) []*Tensor {
			if len(in) == 0 {
				return []*Tensor{g}
			}
			return []*Tensor{g.rt.Zeros(g.dt, in...).scatterAdd(d, idx, g)}
		}
	}
}

// Sort sorts t along dim (torch.sort) and returns the values and their
// int64 positions in t. NaN sorts above every number (last ascending,
// first descending) and equal values keep their order: the result is
// always that of a stable sort, so stable (which PyTorch needs to promise
// it) changes nothing here. The gradient goes back to the sorted elements.
func (t *Tensor) Sort(dim int, descending, stable bool) (values, indices *Tensor) {
	if _, bad := check("sort", t); bad != nil {
		return bad, bad
	}
	d, bad := t.alongDim("sort", dim)
	if bad != nil {
		return bad, bad
	}
	values, indices = t.sorted("sort", d, descending)
	if values.err != nil {
		return values, indices
	}
	selectionBackward("SortBackward", values, indices, t, d)
	return values, indices
}

// Argsort returns the int64 positions that sort t along dim, as Sort's
// indices (torch.argsort).
func (t *Tensor) Argsort(dim int, descending, stable bool) *Tensor {
	if _, bad := check("argsort", t); bad != nil {
		return bad
	}
	d, bad := t.alongDim("argsort", dim)
	if bad != nil {
		return bad
	}
	values, indices := t.sorted("argsort", d, descending)
	if values != indices {
		values.Release()
	}
	return indices
}

// TopK returns the k largest (smallest when largest is false) elements
// along dim and their int64 positions (torch.topk), in sorted order, NaN
// counting as the largest and ties going to the lower position. With
// sorted false PyTorch leaves the order unspecified; it is sorted here
// too. The gradient goes back to the selected elements.
func (t *Tensor) TopK(k, dim int, largest, sorted bool) (values, indices *Tensor) {
	rt, bad := check("topk", t)
	if bad != nil {
		return bad, bad
	}
	d, bad := t.alongDim("topk", dim)
	if bad != nil {
		return bad, bad
	}
	if n := t.extent(d); k < 0 || k > n {
		bad := rt.fail("topk", "k (%d) is out of range for dimension %d of size %d", k, dim, n)
		return bad, bad
	}
	if tk, ok := rt.dev.(device.TopKer); ok && (t.dt.IsFloat() || t.dt == Int64) && len(t.shape) > 0 {
		values, indices = t.selected(tk, d, k, largest)
		if values.err == nil {
			selectionBackward("TopkBackward", values, indices, t, d)
		}
		return values, indices
	}
	all, allIdx := t.sorted("topk", d, largest)
	if all.err != nil {
		return all, allIdx
	}
	defer all.Release()
	defer allIdx.Release()
	if len(t.shape) == 0 {
		values, indices = all.Clone(), allIdx.Clone()
	} else {
		v, i := all.Narrow(d, 0, k), allIdx.Narrow(d, 0, k)
		values, indices = v.Clone(), i.Clone()
		v.Release()
		i.Release()
	}
	if values.err != nil || indices.err != nil {
		bad := errTensor(rt, firstError(values.err, indices.err))
		values.Release()
		indices.Release()
		return bad, bad
	}
	selectionBackward("TopkBackward", values, indices, t, d)
	return values, indices
}
