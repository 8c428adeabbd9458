package optim

import "github.com/zeroeng/zeroeng/engine/tensor"

// RMSprop is torch.optim.RMSprop, optionally centered and with momentum,
// written with tensor ops (tensorstep.go).
const RMSprop Kind = 3

func init() {
	Register(&Algorithm{
		Kind: RMSprop,
		Name: "RMSprop",
		Doc:  "RMSprop, optionally centered and with momentum.",
		Options: []Option{lrOption(1e-2),
			{Name: "alpha", Default: 0.99, Check: nonNegative("alpha value"), Doc: "smoothing constant"},
			epsOption(1e-8), weightDecayOption(0),
			{Name: "momentum", Default: 0.0, Check: nonNegative("momentum value"), Doc: "momentum factor"},
			{Name: "centered", Default: false, Doc: "centered RMSprop"},
			maximizeOption},
		Switches: []Switch{foreach, {Name: "differentiable", Value: false}},
		Entries:  []string{"square_avg", "momentum_buffer", "grad_avg"},
		Keeps: func(h *ParamGroup) (required, optional []string) {
			required = []string{"square_avg"}
			if h.Momentum > 0 {
				required = append(required, "momentum_buffer")
			}
			if h.Centered {
				required = append(required, "grad_avg")
			}
			return required, nil
		},
		Deciding:    []string{"momentum", "centered"},
		NonNegative: []string{"square_avg"},
		Step:        tensorOps(rmspropStep),
	})
}

// RMSpropConfig holds torch.optim.RMSprop's arguments; start from
// DefaultRMSprop.
type RMSpropConfig struct {
	LR, Alpha, Eps, WeightDecay, Momentum float64
	Centered, Maximize                    bool
}

// DefaultRMSprop is torch.optim.RMSprop's defaults.
func DefaultRMSprop() RMSpropConfig { return RMSpropConfig{LR: 1e-2, Alpha: 0.99, Eps: 1e-8} }

// Group is the configuration as a parameter group's hyper-parameters.
func (c RMSpropConfig) Group() ParamGroup {
	return ParamGroup{LR: c.LR, Alpha: c.Alpha, Eps: c.Eps, WeightDecay: c.WeightDecay, Momentum: c.Momentum,
		Centered: c.Centered, Maximize: c.Maximize}
}

// NewRMSprop is torch.optim.RMSprop(params, ...).
func NewRMSprop(params []*tensor.Tensor, c RMSpropConfig) (*Optimizer, error) {
	return New(RMSprop, params, c.Group())
}

// rmspropStep is torch/optim/rmsprop.py's _single_tensor_rmsprop.
func rmspropStep(h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	g = decayed(h, p, g, h.Maximize)
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
}
