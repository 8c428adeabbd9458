package optim

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// SGD is torch.optim.SGD: momentum, dampening, Nesterov and weight decay,
// on each device's fused kernel (device.SGDStep).
const SGD Kind = 0

func init() {
	Register(&Algorithm{
		Kind: SGD,
		Name: "SGD",
		Doc:  "Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.",
		Options: []Option{
			{Name: "lr", Default: 0.0, Required: true, Check: nonNegative("learning rate"), Doc: "learning rate"},
			{Name: "momentum", Default: 0.0, Check: nonNegative("momentum value"), Doc: "momentum factor"},
			{Name: "dampening", Default: 0.0, Doc: "dampening of momentum"},
			weightDecayOption(0),
			{Name: "nesterov", Default: false, Doc: "Nesterov momentum"},
			maximizeOption,
		},
		Switches: []Switch{foreach, {Name: "differentiable", Value: false}},
		Check: func(g *ParamGroup) error {
			if g.Nesterov && (g.Momentum <= 0 || g.Dampening != 0) {
				return fmt.Errorf("optim: nesterov momentum requires a momentum and zero dampening")
			}
			return nil
		},
		Entries: []string{"momentum_buffer"},
		// PyTorch starts momentum_buffer from the gradient when a state
		// lacks it, and so does this package: it is never required.
		Keeps: func(h *ParamGroup) (required, optional []string) {
			if h.Momentum != 0 {
				optional = []string{"momentum_buffer"}
			}
			return nil, optional
		},
		Deciding: []string{"momentum"},
		NoStep:   true,
		Step:     sgdStep,
	})
}

// SGDConfig holds torch.optim.SGD's arguments; LR has no default.
type SGDConfig struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov, Maximize                   bool
}

// Group is the configuration as a parameter group's hyper-parameters.
func (c SGDConfig) Group() ParamGroup {
	return ParamGroup{LR: c.LR, Momentum: c.Momentum, Dampening: c.Dampening, WeightDecay: c.WeightDecay,
		Nesterov: c.Nesterov, Maximize: c.Maximize}
}

// NewSGD is torch.optim.SGD(params, ...).
func NewSGD(params []*tensor.Tensor, c SGDConfig) (*Optimizer, error) {
	return New(SGD, params, c.Group())
}

func sgdStep(h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	hyper := device.SGDHyper{LR: h.LR, Momentum: h.Momentum, Dampening: h.Dampening, WeightDecay: h.WeightDecay,
		Nesterov: h.Nesterov, Maximize: h.Maximize}
	var buf device.View
	if h.Momentum != 0 {
		if s.MomentumBuffer == nil {
			if s.MomentumBuffer = zerosLike(p); s.MomentumBuffer.Err() != nil {
				return s.dropFailed()
			}
			hyper.FirstStep = true
		}
		buf = tensor.WritableView(s.MomentumBuffer)
	}
	return p.Device().SGDStep(tensor.WritableView(p), tensor.DeviceView(g), buf, hyper)
}
