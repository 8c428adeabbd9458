package optim

import (
	"math"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// tensorStep is one step of RMSprop, Adagrad or Adamax on a contiguous
// parameter p with gradient g, written with tensor ops, so it runs on any
// device: the formulas and the order of operations of PyTorch 1.13's
// single-tensor implementations (torch/optim/rmsprop.py, adagrad.py,
// adamax.py). (SGD and Adam, the optimizers of every large training, have
// fused device kernels instead.)
//
// PyTorch's CPU kernels round each op to the parameter's dtype, except
// that a + alpha·b (add with alpha) and the last multiply-add of
// addcmul, a + (v·b)·c, are fused multiply-adds, rounded once; fma below
// reproduces that for float32. addcdiv, a + (v·b)/c, rounds each op.
func tensorStep(kind Kind, h *ParamGroup, p, g *tensor.Tensor, s *State) (err error) {
	rt := p.Runtime()
	sc := rt.OpenScope()
	defer sc.Close()
	rt.NoGrad(func() { err = tensorUpdate(kind, h, p, g, s) })
	return err
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

func tensorUpdate(kind Kind, h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	if h.Maximize {
		g = g.Neg()
	}
	if h.WeightDecay != 0 {
		g = axpy(g, p, h.WeightDecay) // grad.add(param, alpha=weight_decay)
	}
	switch kind {
	case RMSprop:
		if s.SquareAvg == nil {
			s.SquareAvg = zerosLike(p)
		}
		if h.Momentum > 0 && s.MomentumBuffer == nil {
			s.MomentumBuffer = zerosLike(p)
		}
		if h.Centered && s.GradAvg == nil {
			s.GradAvg = zerosLike(p)
		}
		s.Step++
		// square_avg.mul_(alpha).addcmul_(grad, grad, value=1-alpha)
		sq := fma(g.MulScalar(1-h.Alpha), g, s.SquareAvg.MulScalar(h.Alpha))
		if err := s.SquareAvg.CopyFrom(sq); err != nil {
			return err
		}
		var avg *tensor.Tensor
		if h.Centered {
			// grad_avg.mul_(alpha).add_(grad, alpha=1-alpha);
			// avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
			ga := axpy(s.GradAvg.MulScalar(h.Alpha), g, 1-h.Alpha)
			if err := s.GradAvg.CopyFrom(ga); err != nil {
				return err
			}
			avg = fma(ga.Neg(), ga, sq).Sqrt()
		} else {
			avg = sq.Sqrt()
		}
		avg = avg.AddScalar(h.Eps)
		if h.Momentum > 0 {
			// buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
			buf := s.MomentumBuffer.MulScalar(h.Momentum).Add(g.Div(avg))
			if err := s.MomentumBuffer.CopyFrom(buf); err != nil {
				return err
			}
			return p.CopyFrom(axpy(p, buf, -h.LR))
		}
		// param.addcdiv_(grad, avg, value=-lr)
		return p.CopyFrom(p.Add(g.MulScalar(-h.LR).Div(avg)))

	case Adagrad:
		if s.Sum == nil {
			s.Sum = tensor.ZerosLike(p).AddScalar(h.InitialAccumulatorValue).Persist()
		}
		s.Step++
		clr := h.LR / (1 + float64(s.Step-1)*h.LRDecay)
		// state_sum.addcmul_(grad, grad, value=1); std = state_sum.sqrt().add_(eps)
		sum := fma(g, g, s.Sum)
		if err := s.Sum.CopyFrom(sum); err != nil {
			return err
		}
		std := sum.Sqrt().AddScalar(h.Eps)
		// param.addcdiv_(grad, std, value=-clr)
		return p.CopyFrom(p.Add(g.MulScalar(-clr).Div(std)))

	case Adamax:
		if s.ExpAvg == nil {
			s.ExpAvg, s.ExpInf = zerosLike(p), zerosLike(p)
		}
		s.Step++
		// exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
		m := axpy(s.ExpAvg.MulScalar(h.Beta1), g, 1-h.Beta1)
		if err := s.ExpAvg.CopyFrom(m); err != nil {
			return err
		}
		// exp_inf = amax(exp_inf·beta2, |grad| + eps)
		u := s.ExpInf.MulScalar(h.Beta2).Maximum(g.Abs().AddScalar(h.Eps))
		if err := s.ExpInf.CopyFrom(u); err != nil {
			return err
		}
		clr := h.LR / (1 - math.Pow(h.Beta1, float64(s.Step)))
		// param.addcdiv_(exp_avg, exp_inf, value=-clr)
		return p.CopyFrom(p.Add(m.MulScalar(-clr).Div(u)))
	}
	return nil
}
