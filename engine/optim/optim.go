// Package optim owns zeroeng's optimizers: SGD, Adam and AdamW with
// PyTorch 1.13's update formulas, both in functional form (Update: one step
// over explicit lists of parameters, gradients and state, where a nil
// gradient means "leave this parameter alone" — the form ZeRO shards) and as
// stateful optimizers with parameter groups, zero_grad and state dicts in
// PyTorch's layout; learning-rate schedulers; and gradient-norm clipping.
package optim

import (
	"fmt"
	"math"
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Kind is an optimizer algorithm.
type Kind int

const (
	SGD Kind = iota
	Adam
	AdamW
	RMSprop
	Adagrad
	Adamax
)

// Kinds lists every optimizer algorithm.
var Kinds = []Kind{SGD, Adam, AdamW, RMSprop, Adagrad, Adamax}

func (k Kind) String() string {
	switch k {
	case SGD:
		return "SGD"
	case Adam:
		return "Adam"
	case AdamW:
		return "AdamW"
	case RMSprop:
		return "RMSprop"
	case Adagrad:
		return "Adagrad"
	case Adamax:
		return "Adamax"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ParseKind accepts an optimizer's name ("sgd", "adamw", "RMSprop") in any
// case.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if equalFold(s, k.String()) {
			return k, nil
		}
	}
	return 0, fmt.Errorf("optim: unknown optimizer %q (sgd, adam, adamw, rmsprop, adagrad, adamax)", s)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}

// ParamGroup is a set of parameters with their hyper-parameters: the union
// of what the algorithms use, each reading its own. Extra
// holds any other numeric keys (for schedulers or user code); they travel
// through state dicts.
type ParamGroup struct {
	Params []*tensor.Tensor

	LR          float64
	WeightDecay float64
	Maximize    bool

	// SGD
	Momentum, Dampening float64
	Nesterov            bool

	// Adam, AdamW, Adamax (betas); Eps for RMSprop and Adagrad too
	Beta1, Beta2, Eps float64
	AMSGrad           bool

	// RMSprop (with Momentum)
	Alpha    float64
	Centered bool

	// Adagrad
	LRDecay, InitialAccumulatorValue float64

	// InitialLR is set by the first scheduler attached (initial_lr).
	InitialLR float64
	Extra     map[string]float64
}

// Hyper returns a copy of g's hyper-parameters without its parameters.
func (g *ParamGroup) Hyper() ParamGroup {
	h := *g
	h.Params = nil
	if g.Extra != nil {
		h.Extra = make(map[string]float64, len(g.Extra))
		for k, v := range g.Extra {
			h.Extra[k] = v
		}
	}
	return h
}

// SGDConfig holds torch.optim.SGD's arguments; LR has no default.
type SGDConfig struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov, Maximize                   bool
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

// DefaultAdamax is torch.optim.Adamax's defaults, in an AdamConfig
// (AMSGrad does not apply).
func DefaultAdamax() AdamConfig { return AdamConfig{LR: 2e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8} }

// Defaults returns PyTorch's default hyper-parameters for kind (SGD has no
// default learning rate: 0).
func Defaults(kind Kind) ParamGroup {
	switch kind {
	case Adam:
		return DefaultAdam().Group()
	case AdamW:
		return DefaultAdamW().Group()
	case RMSprop:
		return DefaultRMSprop().Group()
	case Adagrad:
		return DefaultAdagrad().Group()
	case Adamax:
		return DefaultAdamax().Group()
	}
	return ParamGroup{}
}

// Group is the configuration as a parameter group's hyper-parameters.
func (c SGDConfig) Group() ParamGroup {
	return ParamGroup{LR: c.LR, Momentum: c.Momentum, Dampening: c.Dampening, WeightDecay: c.WeightDecay,
		Nesterov: c.Nesterov, Maximize: c.Maximize}
}

// Group is the configuration as a parameter group's hyper-parameters.
func (c AdamConfig) Group() ParamGroup {
	return ParamGroup{LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay,
		AMSGrad: c.AMSGrad, Maximize: c.Maximize}
}

// Validate checks g's hyper-parameters for kind with PyTorch's messages.
func (g *ParamGroup) Validate(kind Kind) error {
	switch {
	case !(g.LR >= 0):
		return fmt.Errorf("optim: invalid learning rate: %v", g.LR)
	case !(g.WeightDecay >= 0):
		return fmt.Errorf("optim: invalid weight_decay value: %v", g.WeightDecay)
	}
	switch kind {
	case SGD:
		if !(g.Momentum >= 0) {
			return fmt.Errorf("optim: invalid momentum value: %v", g.Momentum)
		}
		if g.Nesterov && (g.Momentum <= 0 || g.Dampening != 0) {
			return fmt.Errorf("optim: nesterov momentum requires a momentum and zero dampening")
		}
	case Adam, AdamW, Adamax:
		if !(g.Eps >= 0) {
			return fmt.Errorf("optim: invalid epsilon value: %v", g.Eps)
		}
		if !(g.Beta1 >= 0 && g.Beta1 < 1) {
			return fmt.Errorf("optim: invalid beta parameter at index 0: %v", g.Beta1)
		}
		if !(g.Beta2 >= 0 && g.Beta2 < 1) {
			return fmt.Errorf("optim: invalid beta parameter at index 1: %v", g.Beta2)
		}
	case RMSprop:
		switch {
		case !(g.Eps >= 0):
			return fmt.Errorf("optim: invalid epsilon value: %v", g.Eps)
		case !(g.Momentum >= 0):
			return fmt.Errorf("optim: invalid momentum value: %v", g.Momentum)
		case !(g.Alpha >= 0):
			return fmt.Errorf("optim: invalid alpha value: %v", g.Alpha)
		}
	case Adagrad:
		switch {
		case !(g.LRDecay >= 0):
			return fmt.Errorf("optim: invalid lr_decay value: %v", g.LRDecay)
		case !(g.InitialAccumulatorValue >= 0):
			return fmt.Errorf("optim: invalid initial_accumulator_value value: %v", g.InitialAccumulatorValue)
		case !(g.Eps >= 0):
			return fmt.Errorf("optim: invalid epsilon value: %v", g.Eps)
		}
	default:
		return fmt.Errorf("optim: unknown optimizer kind %v", kind)
	}
	return nil
}

// State is the per-parameter state, in PyTorch's terms: step (every
// algorithm but SGD), exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad),
// momentum_buffer (SGD and RMSprop with momentum), square_avg and grad_avg
// (RMSprop, centered), sum (Adagrad), exp_inf (Adamax). Tensors are
// persistent and live on the parameter's device.
//
// A half-precision (bfloat16, float16) parameter also has master_param:
// its float32 master copy, which the update runs on; the other state
// tensors are float32 too (StateDType). Under ZeRO the state of a slice
// is that slice's, so the master weights are sharded with the rest.
type State struct {
	Step           int64
	ExpAvg         *tensor.Tensor
	ExpAvgSq       *tensor.Tensor
	MaxExpAvgSq    *tensor.Tensor
	MomentumBuffer *tensor.Tensor
	SquareAvg      *tensor.Tensor
	GradAvg        *tensor.Tensor
	Sum            *tensor.Tensor
	ExpInf         *tensor.Tensor
	Master         *tensor.Tensor
}

// StateDType is the dtype of p's state tensors: float32 for a
// half-precision parameter (mixed precision with float32 master weights),
// else p's own.
func StateDType(p *tensor.Tensor) tensor.DType {
	if isHalf(p.DType()) {
		return tensor.Float32
	}
	return p.DType()
}

func isHalf(dt tensor.DType) bool { return dt == tensor.BFloat16 || dt == tensor.Float16 }

// Tensors lists the state tensors with their PyTorch names.
func (s *State) Tensors() []nn.NamedTensor {
	var out []nn.NamedTensor
	for _, e := range []nn.NamedTensor{{Name: "exp_avg", Tensor: s.ExpAvg}, {Name: "exp_avg_sq", Tensor: s.ExpAvgSq},
		{Name: "max_exp_avg_sq", Tensor: s.MaxExpAvgSq}, {Name: "momentum_buffer", Tensor: s.MomentumBuffer},
		{Name: "square_avg", Tensor: s.SquareAvg}, {Name: "grad_avg", Tensor: s.GradAvg}, {Name: "sum", Tensor: s.Sum},
		{Name: "exp_inf", Tensor: s.ExpInf}, {Name: "master_param", Tensor: s.Master}} {
		if e.Tensor != nil {
			out = append(out, e)
		}
	}
	return out
}

// Bytes is the memory the state tensors hold.
func (s *State) Bytes() int64 {
	var n int64
	for _, e := range s.Tensors() {
		n += int64(e.Tensor.Numel() * e.Tensor.DType().Size())
	}
	return n
}

// Release frees the state tensors.
func (s *State) Release() {
	for _, e := range s.Tensors() {
		e.Tensor.Release()
	}
	*s = State{}
}

// dropFailed undoes the state tensors step has just made when making one
// of them failed (out of memory): the state stays as before the step, and
// the failure is returned.
func (s *State) dropFailed() error {
	var first error
	drop := func(ts ...**tensor.Tensor) {
		failed := false
		for _, t := range ts {
			if *t != nil && (*t).Err() != nil {
				failed = true
				if first == nil {
					first = fmt.Errorf("making the optimizer state: %w", (*t).Err())
				}
			}
		}
		if failed {
			for _, t := range ts {
				(*t).Release()
				*t = nil
			}
		}
	}
	drop(&s.ExpAvg, &s.ExpAvgSq)
	drop(&s.MaxExpAvgSq)
	drop(&s.MomentumBuffer)
	return first
}

func zerosLike(p *tensor.Tensor) *tensor.Tensor {
	return tensor.ZerosLike(p).Persist()
}

// Update applies one step of kind with hyper-parameters h to params, given
// grads: a nil gradient skips its parameter (its state does not advance),
// as PyTorch skips parameters whose .grad is None. states[i] is created on
// first use. It runs without recording autograd.
func Update(kind Kind, h *ParamGroup, params, grads []*tensor.Tensor, states []*State) error {
	if len(grads) != len(params) || len(states) != len(params) {
		return fmt.Errorf("optim: %v update: %d parameters, %d gradients, %d states", kind, len(params), len(grads), len(states))
	}
	for i, p := range params {
		g := grads[i]
		if g == nil {
			continue
		}
		if err := p.Err(); err != nil {
			return err
		}
		if err := g.Err(); err != nil {
			return err
		}
		if !slices.Equal(p.Shape(), g.Shape()) || p.DType() != g.DType() {
			return fmt.Errorf("optim: %s: gradient %v %v does not match the parameter %v %v", label(p, i), g.DType(), g.Shape(), p.DType(), p.Shape())
		}
		if states[i] == nil {
			states[i] = &State{}
		}
		if err := step(kind, h, p, g, states[i]); err != nil {
			return fmt.Errorf("optim: %s: %w", label(p, i), err)
		}
	}
	return nil
}

func label(p *tensor.Tensor, i int) string {
	if p.Name() != "" {
		return fmt.Sprintf("parameter %q", p.Name())
	}
	return fmt.Sprintf("parameter %d", i)
}

func step(kind Kind, h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	if isHalf(p.DType()) {
		return masterStep(kind, h, p, g, s)
	}
	dev := p.Device()
	pc, gc := p, g
	var cleanup []*tensor.Tensor
	defer func() {
		for _, t := range cleanup {
			t.Release()
		}
	}()
	contiguous := func(t *tensor.Tensor) *tensor.Tensor {
		if t.IsContiguous() {
			return t
		}
		c := t.Contiguous()
		cleanup = append(cleanup, c)
		return c
	}
	if !p.IsContiguous() {
		return fmt.Errorf("parameters must be contiguous")
	}
	gc = contiguous(g)
	if err := gc.Err(); err != nil {
		return err
	}
	switch kind {
	case SGD:
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
		return dev.SGDStep(tensor.WritableView(pc), tensor.DeviceView(gc), buf, hyper)
	case Adam, AdamW:
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
			Decoupled: kind == AdamW, AMSGrad: h.AMSGrad, Maximize: h.Maximize}
		var vmax device.View
		if h.AMSGrad {
			vmax = tensor.WritableView(s.MaxExpAvgSq)
		}
		return dev.AdamStep(tensor.WritableView(pc), tensor.DeviceView(gc), tensor.WritableView(s.ExpAvg), tensor.WritableView(s.ExpAvgSq), vmax, hyper)
	case RMSprop, Adagrad, Adamax:
		return tensorStep(kind, h, pc, gc, s)
	}
	return fmt.Errorf("unknown optimizer kind %v", kind)
}

// masterStep updates a half-precision parameter through its float32
// master copy, as DeepSpeed's bf16 optimizer and llm.c do: the gradient is
// widened, the update runs in float32 on the master and its state, and the
// parameter becomes the master rounded to nearest-even. Updates smaller
// than half a unit in the last place of the parameter, which a bf16 update
// would lose, accumulate in the master.
func masterStep(kind Kind, h *ParamGroup, p, g *tensor.Tensor, s *State) error {
	if !p.IsContiguous() {
		return fmt.Errorf("parameters must be contiguous")
	}
	rt := p.Runtime()
	if s.Master == nil {
		var m *tensor.Tensor
		rt.NoGrad(func() { m = p.To(tensor.Float32) })
		if err := m.Err(); err != nil {
			return fmt.Errorf("master weights: %w", err)
		}
		s.Master = m.Persist()
	}
	var g32 *tensor.Tensor
	rt.NoGrad(func() { g32 = g.To(tensor.Float32) })
	defer g32.Release()
	if err := step(kind, h, s.Master, g32, s); err != nil {
		return err
	}
	return p.Device().Copy(tensor.WritableView(p), tensor.DeviceView(s.Master))
}
