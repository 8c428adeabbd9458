package optim

import (
	"fmt"
	"math"
	"slices"
)

// Scheduler adjusts the learning rates of an optimizer's groups once per
// Step, with the semantics of torch.optim.lr_scheduler: construction records
// each group's initial_lr and applies the schedule for step 0; every Step
// advances by one and applies it again.
type Scheduler struct {
	owner     LRGroups
	groups    func() []*ParamGroup
	baseLRs   []float64
	lastEpoch int
	rule      func(epoch int, lr, base float64) float64
	// closed is the schedule's closed form (PyTorch's
	// _get_closed_form_lr), used when a SequentialLR restarts it at step
	// 0; nil where PyTorch has none.
	closed func(epoch int, base float64) float64
	// groupRule replaces rule for schedules that read more of a group than
	// its rate (OneCycleLR), and may fail.
	groupRule func(epoch, i int, g *ParamGroup) (float64, error)
}

// LRGroups is what a scheduler acts on: the param groups of an optimizer or
// of a wrapper around one (ZeRO's sharded optimizer).
type LRGroups interface {
	ParamGroups() []*ParamGroup
}

// ParamGroups implements LRGroups.
func (o *Optimizer) ParamGroups() []*ParamGroup { return o.Groups }

func newScheduler(o LRGroups, rule func(epoch int, lr, base float64) float64) *Scheduler {
	return start(&Scheduler{rule: rule}, o)
}

// start records the groups' initial rates and takes step 0.
func start(s *Scheduler, o LRGroups) *Scheduler {
	s.owner, s.groups, s.lastEpoch = o, o.ParamGroups, -1
	for _, g := range o.ParamGroups() {
		if g.InitialLR == 0 {
			g.InitialLR = g.LR
		}
		s.baseLRs = append(s.baseLRs, g.InitialLR)
	}
	_ = s.Step() // step 0 of every schedule is valid
	return s
}

// Step advances the schedule by one and sets the groups' learning rates.
// It fails only for a schedule with an end (OneCycleLR stepped past its
// total steps), as PyTorch's does.
func (s *Scheduler) Step() error { return s.stepTo(s.lastEpoch+1, false) }

// stepTo sets the rates for step epoch: by the closed form when asked and
// the schedule has one (PyTorch's step(epoch)), else by the chainable rule.
func (s *Scheduler) stepTo(epoch int, closed bool) error {
	s.lastEpoch = epoch
	for i, g := range s.groups() {
		if i >= len(s.baseLRs) {
			continue
		}
		switch {
		case closed && s.closed != nil:
			g.LR = s.closed(epoch, s.baseLRs[i])
		case s.groupRule != nil:
			lr, err := s.groupRule(epoch, i, g)
			if err != nil {
				return err
			}
			g.LR = lr
		default:
			g.LR = s.rule(epoch, g.LR, s.baseLRs[i])
		}
	}
	return nil
}

// LastLR returns the learning rates set by the last Step.
func (s *Scheduler) LastLR() []float64 {
	var out []float64
	for _, g := range s.groups() {
		out = append(out, g.LR)
	}
	return out
}

// LastEpoch is the number of Steps taken since construction.
func (s *Scheduler) LastEpoch() int { return s.lastEpoch }

// SetLastEpoch restores a scheduler's position (checkpoint resume) without
// touching the learning rates.
func (s *Scheduler) SetLastEpoch(e int) { s.lastEpoch = e }

// StateDict is the scheduler's position in PyTorch's layout: last_epoch,
// base_lrs and _last_lr (the learning rates themselves come back with the
// optimizer's state dict).
func (s *Scheduler) StateDict() map[string]any {
	return map[string]any{"last_epoch": s.lastEpoch, "base_lrs": slices.Clone(s.baseLRs), "_last_lr": s.LastLR()}
}

// LoadStateDict restores what StateDict saved, checking it first.
func (s *Scheduler) LoadStateDict(m map[string]any) error {
	epoch, ok := toFloat(m["last_epoch"])
	if !ok || epoch != math.Trunc(epoch) || epoch < -1 {
		return fmt.Errorf("optim: scheduler state: last_epoch is %v, not a step count", m["last_epoch"])
	}
	base, ok := toFloats(m["base_lrs"])
	if !ok || len(base) != len(s.baseLRs) {
		return fmt.Errorf("optim: scheduler state: base_lrs %v, the scheduler has %d groups", m["base_lrs"], len(s.baseLRs))
	}
	s.lastEpoch = int(epoch)
	copy(s.baseLRs, base)
	return nil
}

// NewStepLR multiplies the learning rate by gamma every stepSize steps
// (torch.optim.lr_scheduler.StepLR, in its chainable form: the rate is
// multiplied in place, so the floating-point results match PyTorch's).
func NewStepLR(o LRGroups, stepSize int, gamma float64) (*Scheduler, error) {
	if stepSize <= 0 {
		return nil, fmt.Errorf("optim: StepLR step_size must be positive, got %d", stepSize)
	}
	s := newScheduler(o, func(epoch int, lr, _ float64) float64 {
		if epoch == 0 || epoch%stepSize != 0 {
			return lr
		}
		return lr * gamma
	})
	s.closed = func(epoch int, base float64) float64 {
		return base * math.Pow(gamma, float64(pyFloorDiv(epoch, stepSize)))
	}
	return s, nil
}

// NewExponentialLR multiplies the learning rate by gamma every step
// (torch.optim.lr_scheduler.ExponentialLR, chainable form).
func NewExponentialLR(o LRGroups, gamma float64) (*Scheduler, error) {
	if !(gamma > 0) {
		return nil, fmt.Errorf("optim: ExponentialLR gamma must be positive, got %v", gamma)
	}
	s := newScheduler(o, func(epoch int, lr, _ float64) float64 {
		if epoch == 0 {
			return lr
		}
		return lr * gamma
	})
	s.closed = func(epoch int, base float64) float64 { return base * math.Pow(gamma, float64(epoch)) }
	return s, nil
}

// NewMultiStepLR multiplies the learning rate by gamma at each milestone
// step, by gamma^k at a milestone listed k times
// (torch.optim.lr_scheduler.MultiStepLR).
func NewMultiStepLR(o LRGroups, milestones []int, gamma float64) (*Scheduler, error) {
	count := map[int]int{}
	for i, m := range milestones {
		if i > 0 && m < milestones[i-1] {
			return nil, fmt.Errorf("optim: MultiStepLR milestones must be increasing, got %v", milestones)
		}
		count[m]++
	}
	s := newScheduler(o, func(epoch int, lr, _ float64) float64 {
		k, ok := count[epoch]
		if !ok {
			return lr
		}
		return lr * math.Pow(gamma, float64(k))
	})
	s.closed = func(epoch int, base float64) float64 {
		passed := 0 // bisect_right(sorted milestones, epoch)
		for _, m := range milestones {
			if m <= epoch {
				passed++
			}
		}
		return base * math.Pow(gamma, float64(passed))
	}
	return s, nil
}

// NewLinearLR scales the learning rate by a factor that goes linearly from
// startFactor to endFactor over totalIters steps, constant after
// (torch.optim.lr_scheduler.LinearLR, chainable form).
func NewLinearLR(o LRGroups, startFactor, endFactor float64, totalIters int) (*Scheduler, error) {
	if !(startFactor > 0 && startFactor <= 1) {
		return nil, fmt.Errorf("optim: LinearLR start_factor must be in (0, 1], got %v", startFactor)
	}
	if !(endFactor >= 0 && endFactor <= 1) {
		return nil, fmt.Errorf("optim: LinearLR end_factor must be in [0, 1], got %v", endFactor)
	}
	if totalIters < 1 {
		return nil, fmt.Errorf("optim: LinearLR total_iters must be positive, got %d", totalIters)
	}
	s := newScheduler(o, func(epoch int, lr, _ float64) float64 {
		switch {
		case epoch == 0:
			return lr * startFactor
		case epoch > totalIters:
			return lr
		}
		return lr * (1. + (endFactor-startFactor)/(float64(totalIters)*startFactor+float64(epoch-1)*(endFactor-startFactor)))
	})
	s.closed = func(epoch int, base float64) float64 {
		return base * (startFactor + (endFactor-startFactor)*float64(min(totalIters, epoch))/float64(totalIters))
	}
	return s, nil
}

// NewCosineAnnealingLR anneals the learning rate from its base to etaMin
// along a half cosine over tMax steps and back up over the next tMax
// (torch.optim.lr_scheduler.CosineAnnealingLR, PyTorch 1.13's chainable
// form, which these values follow to the last bit).
func NewCosineAnnealingLR(o LRGroups, tMax int, etaMin float64) (*Scheduler, error) {
	if tMax < 1 {
		return nil, fmt.Errorf("optim: CosineAnnealingLR T_max must be positive, got %d", tMax)
	}
	T := float64(tMax)
	s := newScheduler(o, func(epoch int, lr, base float64) float64 {
		e := float64(epoch)
		switch {
		case epoch == 0:
			return lr
		case pyMod(epoch-1-tMax, 2*tMax) == 0:
			return lr + (base-etaMin)*(1-math.Cos(math.Pi/T))/2
		}
		return (1+math.Cos(math.Pi*e/T))/(1+math.Cos(math.Pi*(e-1)/T))*(lr-etaMin) + etaMin
	})
	s.closed = func(epoch int, base float64) float64 {
		return etaMin + (base-etaMin)*(1+math.Cos(math.Pi*float64(epoch)/T))/2
	}
	return s, nil
}

// pyFloorDiv is Python's a // b.
func pyFloorDiv(a, b int) int { return (a - pyMod(a, b)) / b }

// pyMod is Python's a % b (the sign of b).
func pyMod(a, b int) int {
	m := a % b
	if m != 0 && (m < 0) != (b < 0) {
		m += b
	}
	return m
}

// NewLambdaLR sets each rate to base·factor(step)
// (torch.optim.lr_scheduler.LambdaLR with one function for every group).
func NewLambdaLR(o LRGroups, factor func(step int) float64) *Scheduler {
	return newScheduler(o, func(epoch int, _, base float64) float64 { return base * factor(epoch) })
}

// WarmupCosine is the usual LLM schedule as a LambdaLR factor: linear warm-up
// from 1/warmup to 1 over the first warmup steps, then a cosine decay to
// minRatio at step total, constant after.
//
//	step < warmup:   (step+1)/warmup
//	otherwise:       minRatio + (1−minRatio)·½(1+cos(π·min(1, (step−warmup)/(total−warmup))))
func WarmupCosine(warmup, total int, minRatio float64) func(step int) float64 {
	return func(step int) float64 {
		if step < warmup {
			return float64(step+1) / float64(warmup)
		}
		progress := 1.0
		if total > warmup {
			progress = math.Min(1, float64(step-warmup)/float64(total-warmup))
		}
		return minRatio + (1-minRatio)*0.5*(1+math.Cos(math.Pi*progress))
	}
}

// NewWarmupCosine is NewLambdaLR with WarmupCosine.
func NewWarmupCosine(o LRGroups, warmup, total int, minRatio float64) (*Scheduler, error) {
	if warmup < 0 || total < warmup || minRatio < 0 || minRatio > 1 {
		return nil, fmt.Errorf("optim: warmup-cosine schedule needs 0 <= warmup <= total and 0 <= min_ratio <= 1, got %d, %d, %v", warmup, total, minRatio)
	}
	return NewLambdaLR(o, WarmupCosine(warmup, total, minRatio)), nil
}
