package optim

import (
	"math"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Adam is torch.optim.Adam (L2 weight decay) and AdamW torch.optim.AdamW
// (decoupled weight decay), on each device's fused kernel
// (device.AdamStep).
const (
	Adam  Kind = 1
	AdamW Kind = 2
)

func init() {
	adam := func(kind Kind, name, doc string, weightDecay float64, switches ...Switch) *Algorithm {
		return &Algorithm{
			Kind: kind,
			Name: name,
			Doc:  doc,
			Options: []Option{lrOption(1e-3), betasOption(), epsOption(1e-8), weightDecayOption(weightDecay),
				{Name: "amsgrad", Default: false, Doc: "AMSGrad variant"}, maximizeOption},
			Switches: append([]Switch{foreach}, switches...),
			Entries:  []string{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
			Keeps: func(h *ParamGroup) (required, optional []string) {
				required = []string{"exp_avg", "exp_avg_sq"}
				if h.AMSGrad {
					required = append(required, "max_exp_avg_sq")
				}
				return required, nil
			},
			Deciding:    []string{"amsgrad"},
			NonNegative: []string{"exp_avg_sq", "max_exp_avg_sq"},
			Step: func(h *ParamGroup, p, g *tensor.Tensor, s *State) error {
				return adamStep(kind == AdamW, h, p, g, s)
			},
		}
	}
	Register(adam(Adam, "Adam", "Adam, with L2 weight decay and amsgrad options.", 0,
		Switch{Name: "capturable", Value: false}, Switch{Name: "differentiable", Value: false}, Switch{Name: "fused", Value: false}))
	Register(adam(AdamW, "AdamW", "Adam with decoupled weight decay.", 1e-2, Switch{Name: "capturable", Value: false}))
}

// AdamConfig holds torch.optim.Adam/AdamW's arguments; start from
// DefaultAdam or DefaultAdamW.
type AdamConfig struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	AMSGrad, Maximize                  bool
}

// DefaultAdam is torch.optim.Adam's defaults.
func DefaultAdam() AdamConfig { return AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8} }

// DefaultAdamW is torch.optim.AdamW's defaults (weight decay 1e-2).
func DefaultAdamW() AdamConfig {
	c := DefaultAdam()
	c.WeightDecay = 1e-2
	return c
}

// Group is the configuration as a parameter group's hyper-parameters.
func (c AdamConfig) Group() ParamGroup {
	return ParamGroup{LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay,
		AMSGrad: c.AMSGrad, Maximize: c.Maximize}
}

// NewAdam is torch.optim.Adam(params, ...).
func NewAdam(params []*tensor.Tensor, c AdamConfig) (*Optimizer, error) {
	return New(Adam, params, c.Group())
}

// NewAdamW is torch.optim.AdamW(params, ...).
func NewAdamW(params []*tensor.Tensor, c AdamConfig) (*Optimizer, error) {
	return New(AdamW, params, c.Group())
}

func adamStep(decoupled bool, h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	if s.ExpAvg == nil {
		s.ExpAvg, s.ExpAvgSq = zerosLike(p), zerosLike(p)
	}
	if h.AMSGrad && s.MaxExpAvgSq == nil {
		s.MaxExpAvgSq = zerosLike(p)
	}
	if err := s.dropFailed(); err != nil {
		return err
	}
	s.Step++
	t := float64(s.Step)
	hyper := device.AdamHyper{LR: h.LR, Beta1: h.Beta1, Beta2: h.Beta2, Eps: h.Eps, WeightDecay: h.WeightDecay,
		BiasCorrection1: 1 - math.Pow(h.Beta1, t), BiasCorrection2: 1 - math.Pow(h.Beta2, t),
		Decoupled: decoupled, AMSGrad: h.AMSGrad, Maximize: h.Maximize}
	var vmax device.View
	if h.AMSGrad {
		vmax = tensor.WritableView(s.MaxExpAvgSq)
	}
	return p.Device().AdamStep(tensor.WritableView(p), tensor.DeviceView(g), tensor.WritableView(s.ExpAvg), tensor.WritableView(s.ExpAvgSq), vmax, hyper)
}
