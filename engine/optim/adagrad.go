package optim

import "github.com/zeroeng/zeroeng/engine/tensor"

// Adagrad is torch.optim.Adagrad, with lr decay, written with tensor ops
// (tensorstep.go). It makes its state when it gets its parameters, as
// PyTorch's does, so its state dict has sum before the first step.
const Adagrad Kind = 4

func init() {
	Register(&Algorithm{
		Kind: Adagrad,
		Name: "Adagrad",
		Doc:  "Adagrad with lr decay.",
		Options: []Option{lrOption(1e-2),
			{Name: "lr_decay", Default: 0.0, Check: nonNegative("lr_decay value"), Doc: "learning-rate decay"},
			weightDecayOption(0),
			{Name: "initial_accumulator_value", Default: 0.0, Check: nonNegative("initial_accumulator_value value"), Doc: "initial sum of squares"},
			epsOption(1e-10), maximizeOption},
		Switches:    []Switch{foreach},
		Entries:     []string{"sum"},
		NonNegative: []string{"sum"},
		Init: func(g *ParamGroup, p *tensor.Tensor) (*State, error) {
			// step 0 and the sum filled with initial_accumulator_value
			sc := p.Runtime().OpenScope()
			sum := tensor.ZerosLike(p).To(StateDType(p)).AddScalar(g.InitialAccumulatorValue).Persist()
			sc.Close()
			if err := sum.Err(); err != nil {
				return nil, err
			}
			return &State{Sum: sum}, nil
		},
		Step: tensorOps(adagradStep),
	})
}

// AdagradConfig holds torch.optim.Adagrad's arguments; start from
// DefaultAdagrad.
type AdagradConfig struct {
	LR, LRDecay, WeightDecay, InitialAccumulatorValue, Eps float64
	Maximize                                               bool
}

// DefaultAdagrad is torch.optim.Adagrad's defaults.
func DefaultAdagrad() AdagradConfig { return AdagradConfig{LR: 1e-2, Eps: 1e-10} }

// Group is the configuration as a parameter group's hyper-parameters.
func (c AdagradConfig) Group() ParamGroup {
	return ParamGroup{LR: c.LR, LRDecay: c.LRDecay, WeightDecay: c.WeightDecay,
		InitialAccumulatorValue: c.InitialAccumulatorValue, Eps: c.Eps, Maximize: c.Maximize}
}

// NewAdagrad is torch.optim.Adagrad(params, ...).
func NewAdagrad(params []*tensor.Tensor, c AdagradConfig) (*Optimizer, error) {
	return New(Adagrad, params, c.Group())
}

// adagradStep is torch/optim/adagrad.py's _single_tensor_adagrad.
func adagradStep(h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	g = decayed(h, p, g, h.Maximize)
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
}
