package optim

import (
	"math"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// NAdam is torch.optim.NAdam (PyTorch 1.13: no maximize), Adam with
// Nesterov momentum, written with tensor ops (tensorstep.go). Its state
// keeps mu_product, the product of the momentum coefficients μ₁…μₜ, a 0-d
// float32 tensor in PyTorch, here a number rounded to float32 as
// PyTorch's is at each step. It travels with the state everywhere the
// step count does: state dicts (a 0-d tensor), ZeRO's chunks and
// resharding (shard.Chunk.Scalars), checkpoints (each chunk's "scalars").
const NAdam Kind = 6

func init() {
	Register(&Algorithm{
		Kind: NAdam,
		Name: "NAdam",
		Doc:  "NAdam, Adam with Nesterov momentum.",
		Options: []Option{lrOption(2e-3), betasOption(), epsOption(1e-8), weightDecayOption(0),
			{Name: "momentum_decay", Default: 4e-3, Check: nonNegative("momentum_decay value"), Doc: "NAdam's momentum decay ψ"}},
		Switches:    []Switch{foreach},
		Entries:     []string{"exp_avg", "exp_avg_sq"},
		Scalars:     []string{"mu_product"},
		NonNegative: []string{"exp_avg_sq"},
		Step:        tensorOps(nadamStep),
	})
	// Each μ is in [0, 1) (β₁ in [0, 1), ψ ≥ 0), so is their product;
	// it reaches 0 in float32 after some hundred steps, as PyTorch's.
	scalarRanges["mu_product"] = scalarRange{0, 1, "the product of NAdam's momentum coefficients μ₁…μₜ"}
}

// nadamMu is μₜ = β₁(1 − ½·0.96^(t·ψ)).
func nadamMu(h *ParamGroup, t float64) float64 {
	return h.Beta1 * (1. - 0.5*math.Pow(0.96, t*h.Float("momentum_decay")))
}

// nadamStep is torch/optim/nadam.py's _single_tensor_nadam.
func nadamStep(h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	g = decayed(h, p, g, false)
	if s.ExpAvg == nil {
		s.ExpAvg, s.ExpAvgSq = zerosLike(p), zerosLike(p)
	}
	muProduct, ok := s.Scalars["mu_product"]
	if !ok {
		// Only a state from a checkpoint written before chunks carried
		// their scalars (or a state dict without mu_product) lacks it:
		// the product of the steps so far under the current β₁ and ψ,
		// exact unless they changed during the run (a scheduler cycling
		// β₁), as such a checkpoint has no better value.
		muProduct = 1
		for i := int64(1); i <= s.Step; i++ {
			muProduct = float64(float32(muProduct) * float32(nadamMu(h, float64(i))))
		}
	}
	step := float64(s.Step + 1)
	bc2 := 1 - math.Pow(h.Beta2, step)
	mu, muNext := nadamMu(h, step), nadamMu(h, step+1)
	// mu_product *= mu; mu_product_next = mu_product * mu * mu_next, in
	// float32 as PyTorch's 0-d tensors
	muProduct = float64(float32(muProduct) * float32(mu))
	muProductNext := float64(float32(float32(muProduct)*float32(mu)) * float32(muNext))
	// exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
	m := axpy(s.ExpAvg.MulScalar(h.Beta1), g, 1-h.Beta1)
	// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
	v := fma(g.MulScalar(1-h.Beta2), g, s.ExpAvgSq.MulScalar(h.Beta2))
	// denom = exp_avg_sq.div(bias_correction2).sqrt().add_(eps)
	denom := v.DivScalar(bc2).Sqrt().AddScalar(h.Eps)
	// param.addcdiv_(grad, denom, value=-lr*(1-mu)/(1-mu_product))
	// param.addcdiv_(exp_avg, denom, value=-lr*mu_next/(1-mu_product_next))
	q := p.Add(g.MulScalar(-h.LR * (1. - mu) / (1. - muProduct)).Div(denom))
	q = q.Add(m.MulScalar(-h.LR * muNext / (1. - muProductNext)).Div(denom))
	if err := commit([]*tensor.Tensor{s.ExpAvg, s.ExpAvgSq, p}, m, v, q); err != nil {
		return err
	}
	if s.Scalars == nil {
		s.Scalars = map[string]float64{}
	}
	s.Step++
	s.Scalars["mu_product"] = muProduct
	return nil
}
