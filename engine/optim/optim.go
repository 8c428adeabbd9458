// Package optim owns zeroeng's optimizers: SGD, Adam, AdamW, RMSprop,
// Adagrad, Adamax, NAdam and RAdam with PyTorch 1.13's update formulas,
// defaults and state names, each described by one Algorithm in its own
// file (sgd.go, adam.go, ...) that everything else derives from; both in
// functional form (Update: one step over explicit lists of parameters,
// gradients and state, where a nil gradient means "leave this parameter
// alone" — the form ZeRO shards) and as stateful optimizers with parameter
// groups, zero_grad and state dicts in PyTorch's layout; learning-rate
// schedulers; and gradient-norm clipping.
package optim

import (
	"fmt"
	"slices"

	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// ParamGroup is a set of parameters with their hyper-parameters: the union
// of what the algorithms use, each reading its own (Get reads any by
// PyTorch's name). An option of an algorithm that has no field here
// (NAdam's momentum_decay) lives in Opts. Extra holds any other numeric
// keys (for schedulers or user code); they travel through state dicts.
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

	// Opts holds the options without a field above, under PyTorch's
	// names: float64, bool or [2]float64 values.
	Opts map[string]any

	// InitialLR is set by the first scheduler attached (initial_lr).
	InitialLR float64
	Extra     map[string]float64
}

// fields are the options that have a field of ParamGroup.
var fields = map[string]struct {
	num  func(g *ParamGroup) *float64
	flag func(g *ParamGroup) *bool
}{
	"lr":                        {num: func(g *ParamGroup) *float64 { return &g.LR }},
	"weight_decay":              {num: func(g *ParamGroup) *float64 { return &g.WeightDecay }},
	"maximize":                  {flag: func(g *ParamGroup) *bool { return &g.Maximize }},
	"momentum":                  {num: func(g *ParamGroup) *float64 { return &g.Momentum }},
	"dampening":                 {num: func(g *ParamGroup) *float64 { return &g.Dampening }},
	"nesterov":                  {flag: func(g *ParamGroup) *bool { return &g.Nesterov }},
	"eps":                       {num: func(g *ParamGroup) *float64 { return &g.Eps }},
	"amsgrad":                   {flag: func(g *ParamGroup) *bool { return &g.AMSGrad }},
	"alpha":                     {num: func(g *ParamGroup) *float64 { return &g.Alpha }},
	"centered":                  {flag: func(g *ParamGroup) *bool { return &g.Centered }},
	"lr_decay":                  {num: func(g *ParamGroup) *float64 { return &g.LRDecay }},
	"initial_accumulator_value": {num: func(g *ParamGroup) *float64 { return &g.InitialAccumulatorValue }},
}

// Get returns the hyper-parameter name (PyTorch's) of g: a float64, a
// bool or, for betas, a [2]float64; nil when no algorithm has it.
func (g *ParamGroup) Get(name string) any {
	if name == "betas" {
		return [2]float64{g.Beta1, g.Beta2}
	}
	if f, ok := fields[name]; ok {
		if f.num != nil {
			return *f.num(g)
		}
		return *f.flag(g)
	}
	if v, ok := g.Opts[name]; ok {
		return v
	}
	if o, ok := knownOption(name); ok {
		return o.Default
	}
	return nil
}

// Float is the number option name of g (0 if it is not one).
func (g *ParamGroup) Float(name string) float64 { return number(g.Get(name)) }

// Set sets the hyper-parameter name (PyTorch's) of g to v, which must have
// the option's type (float64, bool, [2]float64).
func (g *ParamGroup) Set(name string, v any) error {
	o, ok := knownOption(name)
	if !ok {
		return fmt.Errorf("optim: no optimizer has the option %q", name)
	}
	if fmt.Sprintf("%T", v) != fmt.Sprintf("%T", o.Default) {
		return fmt.Errorf("optim: option %q is a %T, not %T", name, o.Default, v)
	}
	g.set(name, v)
	return nil
}

func (g *ParamGroup) set(name string, v any) {
	if name == "betas" {
		b := v.([2]float64)
		g.Beta1, g.Beta2 = b[0], b[1]
		return
	}
	if f, ok := fields[name]; ok {
		if f.num != nil {
			*f.num(g) = v.(float64)
		} else {
			*f.flag(g) = v.(bool)
		}
		return
	}
	if g.Opts == nil {
		g.Opts = map[string]any{}
	}
	g.Opts[name] = v
}

// Hyper returns a copy of g's hyper-parameters without its parameters.
func (g *ParamGroup) Hyper() ParamGroup {
	h := *g
	h.Params = nil
	if g.Opts != nil {
		h.Opts = make(map[string]any, len(g.Opts))
		for k, v := range g.Opts {
			h.Opts[k] = v
		}
	}
	if g.Extra != nil {
		h.Extra = make(map[string]float64, len(g.Extra))
		for k, v := range g.Extra {
			h.Extra[k] = v
		}
	}
	return h
}

// State is the per-parameter state, in PyTorch's terms: step (every
// algorithm but SGD), exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad),
// momentum_buffer (SGD and RMSprop with momentum), square_avg and grad_avg
// (RMSprop, centered), sum (Adagrad), exp_inf (Adamax), and any other
// entry an algorithm declares (StateField finds each by name); 0-d
// entries beside step (NAdam's mu_product) are numbers in Scalars.
// Tensors are persistent and live on the parameter's device.
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

	// Scalars holds the 0-d entries beside step (Algorithm.Scalars).
	Scalars map[string]float64

	// more holds the entries of an algorithm without a field above.
	more map[string]*slot
}

type slot struct{ t *tensor.Tensor }

// Entry returns the state tensor name (nil if s has none).
func (s *State) Entry(name string) *tensor.Tensor {
	if f, ok := stateField(s, name); ok {
		return *f
	}
	return nil
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
	names := make([]string, 0, len(s.more))
	for name, sl := range s.more {
		if sl.t != nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		out = append(out, nn.NamedTensor{Name: name, Tensor: s.more[name].t})
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
	a := kind.Algorithm()
	if a == nil {
		return fmt.Errorf("unknown optimizer kind %v", kind)
	}
	if isHalf(p.DType()) {
		return masterStep(kind, h, p, g, s)
	}
	if !p.IsContiguous() {
		return fmt.Errorf("parameters must be contiguous")
	}
	gc := g
	if !g.IsContiguous() {
		gc = g.Contiguous()
		defer gc.Release()
	}
	if err := gc.Err(); err != nil {
		return err
	}
	return a.Step(h, p, gc, s)
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
