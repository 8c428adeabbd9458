package zero

import (
	"errors"
	"fmt"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// What a stage shards, by name: the rest of the package (and the packages
// above it) asks these rather than comparing stage numbers.
//
//	stage 1: the optimizer state
//	stage 2: the gradients too (ShardsGradients)
//	stage 3: the parameters too (ShardsParameters), in the units of a Plan
//
// Offload (Offloads) keeps the master copy and the state on the host and
// steps there; it needs the gradients sharded.

// ShardsGradients tells whether each rank keeps only its slice of the
// gradients, reduce-scattered into it during backward (stages 2 and 3):
// the optimizer reduces them itself, without DDP, and unscales and clips
// them itself.
func (o Options) ShardsGradients() bool { return o.Stage >= 2 }

// ShardsParameters tells whether each rank keeps only its slice of the
// parameters, gathered around each unit's forward and backward (stage 3).
func (o Options) ShardsParameters() bool { return o.Stage == 3 }

// Offloads tells whether the host keeps the master copy and the state of
// this rank's slices and runs the step (Offload is set).
func (o Options) Offloads() bool { return o.Offload != nil }

// ShardsGradients tells whether the optimizer keeps this rank's slice of
// the gradients (Options.ShardsGradients): then it unscales them
// (UnscaleGrads) and skips steps (SkipStep) itself.
func (z *Optimizer) ShardsGradients() bool { return z.opts.ShardsGradients() }

// ShardsParameters tells whether the optimizer shards the parameters
// (Options.ShardsParameters): they exist whole only while their unit runs.
func (z *Optimizer) ShardsParameters() bool { return z.opts.ShardsParameters() }

// Offloads tells whether the optimizer steps on the host (Options.Offloads).
func (z *Optimizer) Offloads() bool { return z.opts.Offloads() }

// Plan is stage 3's plan: the units, each a module's own parameters, in
// the order they were marked (the blocks first, the model itself last),
// and the unit of each parameter. It is what zero.fullyShard builds for a
// script, for a Go program: mark each unit with FullyShard, make the
// optimizer with Options{Stage: 3, Plan: plan}, and run each unit's
// forward through Forward, which gathers the unit's parameters around it
// once the optimizer exists (and only runs it before). A Plan is used by
// one goroutine, and shards one optimizer.
type Plan struct {
	units  []UnitSpec
	unitOf map[*tensor.Tensor]int
	z      *Optimizer // the optimizer that shards the units, once made
}

// NewPlan returns an empty plan.
func NewPlan() *Plan { return &Plan{unitOf: map[*tensor.Tensor]int{}} }

// ErrPlanSharded is FullyShard's error once the plan's optimizer is made.
var ErrPlanSharded = errors.New("zero: fullyShard: the stage-3 optimizer is made already: mark every unit (each block, then the model) before making it")

// FullyShard marks a unit over those of params that no earlier unit holds
// (a block marked before the model that contains it keeps its own), and
// returns its number. reshardAfterForward frees the gathered parameters
// after the unit's forward (FSDP's default; false keeps them until
// backward, the usual choice for the root).
func (p *Plan) FullyShard(params []*tensor.Tensor, reshardAfterForward bool) (int, error) {
	if p.z != nil {
		return 0, ErrPlanSharded
	}
	if p.unitOf == nil {
		p.unitOf = map[*tensor.Tensor]int{}
	}
	id := len(p.units)
	var own []*tensor.Tensor
	for _, t := range params {
		if _, taken := p.unitOf[t]; !taken {
			p.unitOf[t] = id
			own = append(own, t)
		}
	}
	p.units = append(p.units, UnitSpec{Params: own, ReshardAfterForward: reshardAfterForward})
	return id, nil
}

// Units are the units marked so far, in order (Options.Units).
func (p *Plan) Units() []UnitSpec { return p.units }

// UnitOf is the unit that holds t, if one does.
func (p *Plan) UnitOf(t *tensor.Tensor) (int, bool) {
	u, ok := p.unitOf[t]
	return u, ok
}

// Optimizer is the optimizer that shards the plan's units, or nil before
// it is made.
func (p *Plan) Optimizer() *Optimizer { return p.z }

// Sharded tells whether the plan's optimizer shards any of params.
func (p *Plan) Sharded(params []*tensor.Tensor) bool {
	if p.z == nil {
		return false
	}
	for _, t := range params {
		if _, ok := p.unitOf[t]; ok {
			return true
		}
	}
	return false
}

// Forward runs fn, unit's forward, returning its outputs: once the
// optimizer exists, between the unit's BeforeForward (its parameters
// gathered) and AfterForward (given back, and gathered again when
// backward reaches the outputs); before, fn alone.
func (p *Plan) Forward(unit int, fn func() ([]*tensor.Tensor, error)) ([]*tensor.Tensor, error) {
	if p.z == nil {
		return fn()
	}
	u := p.z.Unit(unit)
	if u == nil {
		return nil, fmt.Errorf("zero: forward: no unit %d (the plan has %d)", unit, len(p.units))
	}
	if err := u.BeforeForward(); err != nil {
		return nil, err
	}
	outs, err := fn()
	if err != nil {
		return nil, err
	}
	if err := u.AfterForward(outs); err != nil {
		return nil, err
	}
	return outs, nil
}
