package ddp

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// PostLocalSGD is the state of PyTorch's post-local SGD hook
// (post_localSGD_hook, PostLocalSGDState): for its first StartIter
// iterations the gradients are averaged over the global group, as usual;
// from then on over the subgroup only (the ranks of a node, by default in
// scripts), or not at all without PostLocalGradientAllreduce, while a
// PeriodicModelAverager averages the parameters over the global group
// every few steps. The global reductions that remain are those of the
// averager: one every period steps instead of one every step.
type PostLocalSGD struct {
	global, sub dist.ProcessGroup
	start       int
	postLocal   bool
	iter        int
}

// NewPostLocalSGD makes the hook's state: gradients averaged over global
// for startIter iterations, then over sub (with postLocalGradientAllreduce)
// or left local.
func NewPostLocalSGD(global, sub dist.ProcessGroup, startIter int, postLocalGradientAllreduce bool) (*PostLocalSGD, error) {
	if startIter < 0 {
		return nil, fmt.Errorf("ddp: post-local SGD: startLocalSGDIter must not be negative, got %d", startIter)
	}
	if postLocalGradientAllreduce && sub == nil {
		return nil, fmt.Errorf("ddp: post-local SGD: the subgroup is missing (this rank must belong to one)")
	}
	return &PostLocalSGD{global: global, sub: sub, start: startIter, postLocal: postLocalGradientAllreduce}, nil
}

// Hook is post_localSGD_hook.
func (s *PostLocalSGD) Hook() CommHook {
	global := AllReduceHook(s.global)
	var local CommHook
	if s.sub != nil {
		local = AllReduceHook(s.sub)
	}
	return func(b *Bucket) func() (*tensor.Tensor, error) {
		if s.iter < s.start {
			if b.IsLast {
				s.iter++
			}
			return global(b)
		}
		if !s.postLocal {
			return func() (*tensor.Tensor, error) { return b.Buffer, nil }
		}
		return local(b)
	}
}

// PeriodicModelAverager is PyTorch's PeriodicModelAverager: after
// WarmupSteps steps, every Period steps, AverageParameters replaces the
// parameters with their average over the group.
type PeriodicModelAverager struct {
	period, warmup, step int
	pg                   dist.ProcessGroup
}

// NewPeriodicModelAverager makes an averager over pg (nil: this rank is
// not in the group, and averaging leaves its parameters alone).
func NewPeriodicModelAverager(pg dist.ProcessGroup, period, warmupSteps int) (*PeriodicModelAverager, error) {
	switch {
	case period <= 0:
		return nil, fmt.Errorf("ddp: PeriodicModelAverager: period must be a positive value, got %d", period)
	case warmupSteps < 0:
		return nil, fmt.Errorf("ddp: PeriodicModelAverager: warmupSteps must be a non-negative number, got %d", warmupSteps)
	}
	return &PeriodicModelAverager{period: period, warmup: warmupSteps, pg: pg}, nil
}

// Step is the number of times AverageParameters was called.
func (a *PeriodicModelAverager) Step() int { return a.step }

// AverageParameters counts a step and, when the step is due, averages
// params over the group: flattened into one buffer, divided by the group's
// size, all-reduced and copied back, as PyTorch's average_parameters does.
func (a *PeriodicModelAverager) AverageParameters(params []*tensor.Tensor) error {
	due := a.step >= a.warmup && (a.step-a.warmup)%a.period == 0
	a.step++
	if !due || a.pg == nil || len(params) == 0 {
		return nil
	}
	rt := params[0].Runtime()
	sc := rt.OpenScope()
	defer sc.Close()
	var err error
	rt.NoGrad(func() {
		flat := make([]*tensor.Tensor, len(params))
		dt := params[0].DType()
		for i, p := range params {
			flat[i] = p.Reshape(p.Numel())
			if p.DType() != dt {
				// Mixed dtypes travel in the widest, as torch.cat promotes.
				dt = tensor.Float64
			}
		}
		for i := range flat {
			flat[i] = flat[i].To(dt)
		}
		buf := tensor.Cat(flat, 0)
		if err = buf.MulScalarInPlace(1 / float64(a.pg.Size())); err != nil {
			return
		}
		if err = a.pg.AllReduce(buf, dist.Sum).Wait(); err != nil {
			err = fmt.Errorf("ddp: averaging parameters: %w", err)
			return
		}
		off := 0
		for _, p := range params {
			if err = p.CopyFrom(buf.Narrow(0, off, p.Numel()).View(p.Shape()...)); err != nil {
				return
			}
			off += p.Numel()
		}
	})
	return err
}
