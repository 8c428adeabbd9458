package optim

import (
	"math"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// RAdam is torch.optim.RAdam (PyTorch 1.13: no maximize), Adam with the
// variance of its adaptive rate rectified, written with tensor ops
// (tensorstep.go).
const RAdam Kind = 7

func init() {
	Register(&Algorithm{
		Kind:        RAdam,
		Name:        "RAdam",
		Doc:         "RAdam, Adam with a rectified adaptive learning rate.",
		Options:     []Option{lrOption(1e-3), betasOption(), epsOption(1e-8), weightDecayOption(0)},
		Switches:    []Switch{foreach},
		Entries:     []string{"exp_avg", "exp_avg_sq"},
		NonNegative: []string{"exp_avg_sq"},
		Step:        tensorOps(radamStep),
	})
}

// radamStep is torch/optim/radam.py's _single_tensor_radam.
func radamStep(h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	g = decayed(h, p, g, false)
	if s.ExpAvg == nil {
		s.ExpAvg, s.ExpAvgSq = zerosLike(p), zerosLike(p)
	}
	step := float64(s.Step + 1)
	bc1, bc2 := 1-math.Pow(h.Beta1, step), 1-math.Pow(h.Beta2, step)
	// exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
	m := axpy(s.ExpAvg.MulScalar(h.Beta1), g, 1-h.Beta1)
	// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
	v := fma(g.MulScalar(1-h.Beta2), g, s.ExpAvgSq.MulScalar(h.Beta2))
	// bias_corrected_exp_avg = exp_avg / bias_correction1; lr·it
	update := m.DivScalar(bc1).MulScalar(h.LR)
	// the maximum length of the approximated SMA, and its length now
	rhoInf := 2/(1-h.Beta2) - 1
	rhoT := rhoInf - 2*step*math.Pow(h.Beta2, step)/bc2
	if rhoT > 5 {
		// the variance rectification term; adaptive_lr =
		// sqrt(bias_correction2) / exp_avg_sq.sqrt().add_(eps), which
		// PyTorch computes as a reciprocal times the number
		rect := math.Sqrt((rhoT - 4) * (rhoT - 2) * rhoInf / ((rhoInf - 4) * (rhoInf - 2) * rhoT))
		adaptive := v.Sqrt().AddScalar(h.Eps).Reciprocal().MulScalar(math.Sqrt(bc2))
		update = update.Mul(adaptive).MulScalar(rect)
	}
	// param.add_(update, alpha=-1)
	q := p.Sub(update)
	if err := commit([]*tensor.Tensor{s.ExpAvg, s.ExpAvgSq, p}, m, v, q); err != nil {
		return err
	}
	s.Step++
	return nil
}
