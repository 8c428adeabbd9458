package optim

import (
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The algorithms without a fused device kernel (RMSprop, Adagrad, Adamax,
// NAdam, RAdam) are written with tensor ops, so they run on any device:
// the formulas and the order of operations of PyTorch 1.13's single-tensor
// implementations (torch/optim/rmsprop.py, ...). (SGD and Adam, the
// optimizers of every large training, have fused device kernels instead.)
//
// PyTorch's CPU kernels round each op to the parameter's dtype, except
// that a + alpha·b (add with alpha) and the last multiply-add of
// addcmul, a + (v·b)·c, are fused multiply-adds, rounded once; fma below
// reproduces that for float32. addcdiv, a + (v·b)/c, rounds each op.

// tensorOps makes an Algorithm.Step of an update written with tensor
// ops: it runs in a scope of its own (its temporaries are released when
// it returns) without recording autograd.
func tensorOps(update func(h *ParamGroup, p, g *tensor.Tensor, s *State) error) func(h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	return func(h *ParamGroup, p, g *tensor.Tensor, s *State) (err error) {
		rt := p.Runtime()
		sc := rt.OpenScope()
		defer sc.Close()
		rt.NoGrad(func() { err = update(h, p, g, s) })
		return err
	}
}

// decayed is the gradient an update starts from: negated under maximize,
// plus weight_decay·param (grad.add(param, alpha=weight_decay)).
func decayed(h *ParamGroup, p, g *tensor.Tensor, maximize bool) *tensor.Tensor {
	if maximize {
		g = g.Neg()
	}
	if h.WeightDecay != 0 {
		g = axpy(g, p, h.WeightDecay)
	}
	return g
}

// fma is x·y + z rounded once, as a fused multiply-add: for float32
// tensors the product and the sum are exact or rounded once in float64,
// then rounded to float32 (the two roundings agree with one but in
// vanishingly rare ties); other dtypes compute it with two ops.
func fma(x, y, z *tensor.Tensor) *tensor.Tensor {
	if z.DType() != tensor.Float32 {
		return x.Mul(y).Add(z)
	}
	wide := func(t *tensor.Tensor) *tensor.Tensor { return t.To(tensor.Float64) }
	return wide(x).Mul(wide(y)).Add(wide(z)).To(tensor.Float32)
}

// axpy is a + s·b with one rounding (PyTorch's a.add(b, alpha=s)): s is
// first rounded to a's dtype, as PyTorch's kernel takes it.
func axpy(a, b *tensor.Tensor, s float64) *tensor.Tensor {
	if a.DType() != tensor.Float32 {
		return a.Add(b.MulScalar(s))
	}
	wide := func(t *tensor.Tensor) *tensor.Tensor { return t.To(tensor.Float64) }
	return wide(a).Add(wide(b).MulScalar(float64(float32(s)))).To(tensor.Float32)
}

// commit copies each computed value into its destination (dsts[i] ←
// values[i]) once none of them failed, so that an update lands whole or
// not at all.
func commit(dsts []*tensor.Tensor, values ...*tensor.Tensor) error {
	for _, v := range values {
		if err := v.Err(); err != nil {
			return err
		}
	}
	for i, v := range values {
		if err := dsts[i].CopyFrom(v); err != nil {
			return err
		}
	}
	return nil
}
