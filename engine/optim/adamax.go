package optim

import (
	"math"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Adamax is torch.optim.Adamax, Adam with the infinity norm, written with
// tensor ops (tensorstep.go).
const Adamax Kind = 5

func init() {
	Register(&Algorithm{
		Kind:        Adamax,
		Name:        "Adamax",
		Doc:         "Adamax, Adam with the infinity norm.",
		Options:     []Option{lrOption(2e-3), betasOption(), epsOption(1e-8), weightDecayOption(0), maximizeOption},
		Switches:    []Switch{foreach},
		Entries:     []string{"exp_avg", "exp_inf"},
		NonNegative: []string{"exp_inf"},
		Step:        tensorOps(adamaxStep),
	})
}

// DefaultAdamax is torch.optim.Adamax's defaults, in an AdamConfig
// (AMSGrad does not apply).
func DefaultAdamax() AdamConfig { return AdamConfig{LR: 2e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8} }

// NewAdamax is torch.optim.Adamax(params, ...).
func NewAdamax(params []*tensor.Tensor, c AdamConfig) (*Optimizer, error) {
	return New(Adamax, params, c.Group())
}

// adamaxStep is torch/optim/adamax.py's _single_tensor_adamax.
func adamaxStep(h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	g = decayed(h, p, g, h.Maximize)
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
