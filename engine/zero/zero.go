// Package zero owns ZeRO sharding: the ZeroRedundancyOptimizer (stage 1),
// which partitions the optimizer state across the ranks of a process
// group, updates only this rank's shard and sends every updated parameter
// from its owner to the others.
//
// shared/docs/zero-reference.md states the behaviour reproduced here.
package zero

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Options configure the optimizer.
type Options struct {
	// Partition is "greedy" (the default, PyTorch's): whole parameters,
	// largest first, each to the least-loaded rank.
	Partition string
}

// Optimizer is ZeroRedundancyOptimizer: the parameter groups and their
// hyper-parameters are global (schedulers act on them through
// ParamGroups), the state exists only for the parameters this rank owns.
type Optimizer struct {
	pg       dist.ProcessGroup
	kind     optim.Kind
	defaults optim.ParamGroup
	opts     Options

	// Groups are the global parameter groups, every parameter in each.
	Groups []*optim.ParamGroup

	owner map[*tensor.Tensor]int
	state map[*tensor.Tensor]*optim.State
}

// New makes a ZeroRedundancyOptimizer of kind over params, whose first
// group has the hyper-parameters of defaults, sharded over pg. Every rank
// of pg must call it with the same parameters (in the same order).
func New(pg dist.ProcessGroup, kind optim.Kind, params []*tensor.Tensor, defaults optim.ParamGroup, opts Options) (*Optimizer, error) {
	switch opts.Partition {
	case "", "greedy":
	default:
		return nil, fmt.Errorf("zero: unknown partition %q (greedy)", opts.Partition)
	}
	if len(params) == 0 {
		return nil, fmt.Errorf("zero: ZeroRedundancyOptimizer expects at least one parameter")
	}
	defaults.Params = nil
	if err := defaults.Validate(kind); err != nil {
		return nil, err
	}
	z := &Optimizer{pg: pg, kind: kind, defaults: defaults, opts: opts, state: map[*tensor.Tensor]*optim.State{}}
	g := defaults.Hyper()
	g.Params = params
	if err := z.AddParamGroup(g); err != nil {
		return nil, err
	}
	return z, nil
}

// Kind is the wrapped optimizer's algorithm.
func (z *Optimizer) Kind() optim.Kind { return z.kind }

// Defaults returns a copy of the defaults, to start a new group from.
func (z *Optimizer) Defaults() optim.ParamGroup { return z.defaults.Hyper() }

// ParamGroups implements optim.LRGroups: schedulers change the global
// groups' learning rates, which the next Step uses.
func (z *Optimizer) ParamGroups() []*optim.ParamGroup { return z.Groups }

// AddParamGroup adds a group and partitions every parameter again
// (add_param_group); state already built stays with its parameters.
func (z *Optimizer) AddParamGroup(g optim.ParamGroup) error {
	// The plain optimizer checks the group (non-empty, floating-point
	// leaves, no parameter twice); ZeRO keeps the same rules.
	check, err := optim.New(z.kind, nil, z.defaults)
	if err != nil {
		return err
	}
	for _, og := range z.Groups {
		if err := check.AddParamGroup(*og); err != nil {
			return err
		}
	}
	if err := check.AddParamGroup(g); err != nil {
		return fmt.Errorf("zero: %w", err)
	}
	dt := g.Params[0].DType()
	if len(z.Groups) > 0 {
		dt = z.Groups[0].Params[0].DType()
	}
	if slices.ContainsFunc(g.Params, func(p *tensor.Tensor) bool { return p.DType() != dt }) {
		return fmt.Errorf("zero: ZeroRedundancyOptimizer expects parameters of one dtype (%v)", dt)
	}
	ng := g
	ng.Params = slices.Clone(g.Params)
	z.Groups = append(z.Groups, &ng)
	z.partition()
	return nil
}

// partition assigns every parameter to a rank, PyTorch's way: one running
// size per rank across all groups; within a group the parameters, largest
// first (a stable sort), each go to the rank with the smallest total, ties
// to the lowest rank. Parameters are never split.
func (z *Optimizer) partition() {
	n := z.pg.Size()
	sizes := make([]int, n)
	z.owner = map[*tensor.Tensor]int{}
	for _, g := range z.Groups {
		sorted := slices.Clone(g.Params)
		slices.SortStableFunc(sorted, func(a, b *tensor.Tensor) int { return cmp.Compare(b.Numel(), a.Numel()) })
		for _, p := range sorted {
			r := 0
			for k := 1; k < n; k++ {
				if sizes[k] < sizes[r] {
					r = k
				}
			}
			z.owner[p] = r
			sizes[r] += p.Numel()
		}
	}
	// State of parameters this rank no longer owns goes.
	for p := range z.state {
		if z.owner[p] != z.pg.Rank() {
			delete(z.state, p)
		}
	}
}

// Owner is the rank that updates p.
func (z *Optimizer) Owner(p *tensor.Tensor) int { return z.owner[p] }

// Shards lists each rank's parameters, in group order.
func (z *Optimizer) Shards() [][]*tensor.Tensor {
	out := make([][]*tensor.Tensor, z.pg.Size())
	for _, g := range z.Groups {
		for _, p := range g.Params {
			out[z.owner[p]] = append(out[z.owner[p]], p)
		}
	}
	return out
}

// Step updates this rank's shard (each parameter with a gradient), then
// every parameter is broadcast from its owner, so that all ranks hold the
// same values.
func (z *Optimizer) Step() error {
	me := z.pg.Rank()
	for _, g := range z.Groups {
		var params, grads []*tensor.Tensor
		var states []*optim.State
		for _, p := range g.Params {
			if z.owner[p] == me {
				params = append(params, p)
				grads = append(grads, p.Grad())
				states = append(states, z.state[p])
			}
		}
		if err := optim.Update(z.kind, g, params, grads, states); err != nil {
			return err
		}
		for i, p := range params {
			if states[i] != nil {
				z.state[p] = states[i]
			}
		}
	}
	return z.syncParameters()
}

// syncParameters broadcasts every parameter from its owner.
func (z *Optimizer) syncParameters() error {
	var works []*dist.Work
	for _, g := range z.Groups {
		for _, p := range g.Params {
			works = append(works, z.pg.Broadcast(p, z.owner[p]))
		}
	}
	var first error
	for _, w := range works {
		if err := w.Wait(); err != nil && first == nil {
			first = fmt.Errorf("zero: sending updated parameters: %w", err)
		}
	}
	return first
}

// ZeroGrad clears the gradients of every parameter: to nil when
// setToNone, else zeroed in place.
func (z *Optimizer) ZeroGrad(setToNone bool) error {
	for _, g := range z.Groups {
		for _, p := range g.Params {
			if err := nn.ZeroGradOf(p, setToNone); err != nil {
				return err
			}
		}
	}
	return nil
}

// State returns p's optimizer state on this rank (nil when another rank
// owns p, or before its first update).
func (z *Optimizer) State(p *tensor.Tensor) *optim.State { return z.state[p] }

// Memory is what one rank holds, in bytes.
type Memory struct {
	Parameters int64 `json:"parameters"`
	Gradients  int64 `json:"gradients"`
	State      int64 `json:"optimizerState"`
	// OwnedParameters are the bytes of the parameters this rank updates.
	OwnedParameters int64 `json:"ownedParameters"`
}

// Memory reports this rank's bytes of parameters, gradients and
// optimizer state.
func (z *Optimizer) Memory() Memory {
	var m Memory
	me := z.pg.Rank()
	for _, g := range z.Groups {
		for _, p := range g.Params {
			b := int64(p.Numel() * p.DType().Size())
			m.Parameters += b
			if gr := p.GradNoSync(); gr != nil {
				m.Gradients += int64(gr.Numel() * gr.DType().Size())
			}
			if z.owner[p] == me {
				m.OwnedParameters += b
			}
		}
	}
	for _, s := range z.state {
		m.State += s.Bytes()
	}
	return m
}
