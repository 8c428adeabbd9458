package optim

import (
	"fmt"
	"math"
	"slices"
)

// NewConstantLR scales the learning rate by factor until step totalIters,
// then restores it (torch.optim.lr_scheduler.ConstantLR, chainable form).
func NewConstantLR(o LRGroups, factor float64, totalIters int) (*Scheduler, error) {
	if factor > 1 || factor < 0 {
		return nil, fmt.Errorf("optim: ConstantLR factor must be between 0 and 1, got %v", factor)
	}
	s := newScheduler(o, func(epoch int, lr, _ float64) float64 {
		switch {
		case epoch == 0:
			return lr * factor
		case epoch != totalIters:
			return lr
		}
		return lr * (1 / factor)
	})
	s.closed = func(epoch int, base float64) float64 {
		f := factor
		if epoch >= totalIters {
			f += 1 - factor
		}
		return base * f
	}
	return s, nil
}

// NewPolynomialLR decays the learning rate to 0 over totalIters steps along
// (1 − step/totalIters)^power (torch.optim.lr_scheduler.PolynomialLR,
// chainable form).
func NewPolynomialLR(o LRGroups, totalIters int, power float64) (*Scheduler, error) {
	if totalIters < 1 {
		return nil, fmt.Errorf("optim: PolynomialLR total_iters must be positive, got %d", totalIters)
	}
	T := float64(totalIters)
	s := newScheduler(o, func(epoch int, lr, _ float64) float64 {
		if epoch == 0 || epoch > totalIters {
			return lr
		}
		e := float64(epoch)
		return lr * math.Pow((1-e/T)/(1-(e-1)/T), power)
	})
	s.closed = func(epoch int, base float64) float64 {
		return base * math.Pow(1-float64(min(totalIters, epoch))/T, power)
	}
	return s, nil
}

// OneCycleOptions are torch.optim.lr_scheduler.OneCycleLR's arguments.
// MaxLR holds one rate for every group or one per group (so do
// BaseMomentum and MaxMomentum).
type OneCycleOptions struct {
	MaxLR                     []float64
	TotalSteps                int // or Epochs × StepsPerEpoch
	Epochs, StepsPerEpoch     int
	PctStart                  float64 // 0.3
	AnnealStrategy            string  // "cos" (default) or "linear"
	CycleMomentum             bool    // true
	BaseMomentum, MaxMomentum []float64
	DivFactor                 float64 // 25
	FinalDivFactor            float64 // 1e4
	ThreePhase                bool
}

// DefaultOneCycle is OneCycleLR's defaults (MaxLR and the length are the
// caller's).
func DefaultOneCycle() OneCycleOptions {
	return OneCycleOptions{PctStart: 0.3, AnnealStrategy: "cos", CycleMomentum: true,
		BaseMomentum: []float64{0.85}, MaxMomentum: []float64{0.95}, DivFactor: 25, FinalDivFactor: 1e4}
}

// NewOneCycleLR is the 1cycle policy (torch.optim.lr_scheduler.OneCycleLR):
// the rate rises from maxLR/divFactor to maxLR over the first pctStart of
// the steps and anneals to maxLR/divFactor/finalDivFactor by the last
// (three phases: back down to the initial rate first), while the momentum
// (β₁ of Adam-like optimizers, momentum of SGD and RMSprop) moves the other
// way between maxMomentum and baseMomentum. kind is the optimizer's, which
// says where its momentum is.
func NewOneCycleLR(o LRGroups, kind Kind, opts OneCycleOptions) (*Scheduler, error) {
	groups := o.ParamGroups()
	total := opts.TotalSteps
	switch {
	case total == 0 && opts.Epochs == 0 && opts.StepsPerEpoch == 0:
		return nil, fmt.Errorf("optim: OneCycleLR: define either total_steps or (epochs and steps_per_epoch)")
	case total < 0:
		return nil, fmt.Errorf("optim: OneCycleLR: expected a positive total_steps, got %d", total)
	case total == 0 && opts.Epochs <= 0:
		return nil, fmt.Errorf("optim: OneCycleLR: expected a positive epochs, got %d", opts.Epochs)
	case total == 0 && opts.StepsPerEpoch <= 0:
		return nil, fmt.Errorf("optim: OneCycleLR: expected a positive steps_per_epoch, got %d", opts.StepsPerEpoch)
	case total == 0:
		total = opts.Epochs * opts.StepsPerEpoch
	}
	if !(opts.PctStart >= 0 && opts.PctStart <= 1) {
		return nil, fmt.Errorf("optim: OneCycleLR: pct_start must be between 0 and 1, got %v", opts.PctStart)
	}
	var anneal func(start, end, pct float64) float64
	switch opts.AnnealStrategy {
	case "cos":
		anneal = func(start, end, pct float64) float64 { return end + (start-end)/2.0*(math.Cos(math.Pi*pct)+1) }
	case "linear":
		anneal = func(start, end, pct float64) float64 { return (end-start)*pct + start }
	default:
		return nil, fmt.Errorf("optim: OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got %q", opts.AnnealStrategy)
	}
	perGroup := func(name string, v []float64) ([]float64, error) {
		switch len(v) {
		case 1:
			return slices.Repeat(v, len(groups)), nil
		case len(groups):
			return v, nil
		}
		return nil, fmt.Errorf("optim: OneCycleLR: expected %d values for %s, got %d", len(groups), name, len(v))
	}
	maxLR, err := perGroup("max_lr", opts.MaxLR)
	if err != nil {
		return nil, err
	}
	// The rates each phase goes between: initial, max, min (per group).
	initial, minLR := make([]float64, len(groups)), make([]float64, len(groups))
	for i, g := range groups {
		initial[i] = maxLR[i] / opts.DivFactor
		minLR[i] = initial[i] / opts.FinalDivFactor
		g.InitialLR = initial[i]
	}
	var baseMom, maxMom []float64
	useBeta1 := false
	if opts.CycleMomentum {
		// PyTorch's rule: β₁ where the optimizer has betas, else its
		// momentum.
		a := kind.Algorithm()
		if a == nil {
			return nil, fmt.Errorf("optim: OneCycleLR: unknown optimizer kind %v", kind)
		}
		_, betas := a.Option("betas")
		_, momentum := a.Option("momentum")
		switch {
		case betas:
			useBeta1 = true
		case momentum:
		default:
			return nil, fmt.Errorf("optim: OneCycleLR: %v has no momentum to cycle; pass cycleMomentum: false", kind)
		}
		if baseMom, err = perGroup("base_momentum", opts.BaseMomentum); err != nil {
			return nil, err
		}
		if maxMom, err = perGroup("max_momentum", opts.MaxMomentum); err != nil {
			return nil, err
		}
	}
	// Each phase: the step it ends at, the rates it goes from and to (0
	// initial, 1 max, 2 min) and the momenta (0 max, 1 base).
	T, pct := float64(total), opts.PctStart
	ends := [][5]float64{{pct*T - 1, 0, 1, 0, 1}, {T - 1, 1, 2, 1, 0}}
	if opts.ThreePhase {
		ends = [][5]float64{{pct*T - 1, 0, 1, 0, 1}, {2*pct*T - 2, 1, 0, 1, 0}, {T - 1, 0, 2, 0, 0}}
	}
	rates := [3][]float64{initial, maxLR, minLR}
	momenta := [2][]float64{maxMom, baseMom}
	s := &Scheduler{}
	s.groupRule = func(epoch, i int, g *ParamGroup) (float64, error) {
		if epoch > total {
			return 0, fmt.Errorf("optim: OneCycleLR: tried to step %d times; the specified number of total steps is %d", epoch+1, total)
		}
		start := 0.0
		e := float64(epoch)
		for k, ph := range ends {
			if e <= ph[0] || k == len(ends)-1 {
				p := (e - start) / (ph[0] - start)
				lr := anneal(rates[int(ph[1])][i], rates[int(ph[2])][i], p)
				if opts.CycleMomentum {
					m := anneal(momenta[int(ph[3])][i], momenta[int(ph[4])][i], p)
					if useBeta1 {
						g.Beta1 = m
					} else {
						g.Momentum = m
					}
				}
				return lr, nil
			}
			start = ph[0]
		}
		panic("unreachable: the last phase always matches")
	}
	if opts.CycleMomentum {
		for i, g := range groups {
			if useBeta1 {
				g.Beta1 = maxMom[i]
			} else {
				g.Momentum = maxMom[i]
			}
		}
	}
	return start(s, o), nil
}

// Sequential runs schedulers one after another, switching at each
// milestone (torch.optim.lr_scheduler.SequentialLR): the scheduler that
// takes over restarts at its step 0, by its closed form where it has one,
// as PyTorch's step(0) does.
type Sequential struct {
	scheds     []*Scheduler
	milestones []int
	lastEpoch  int
	lastLR     []float64
}

// NewSequentialLR chains scheds, every one over o, at milestones (one
// fewer than scheds). Like PyTorch it resets the rates to the initial ones,
// undoes the step each scheduler took when it was made, and takes the
// first scheduler's step 0 again.
func NewSequentialLR(o LRGroups, scheds []*Scheduler, milestones []int) (*Sequential, error) {
	if len(scheds) == 0 {
		return nil, fmt.Errorf("optim: SequentialLR needs at least one scheduler")
	}
	for i, s := range scheds {
		if s.owner != o {
			return nil, fmt.Errorf("optim: SequentialLR: scheduler %d belongs to another optimizer than the one passed in", i)
		}
	}
	if len(milestones) != len(scheds)-1 {
		return nil, fmt.Errorf("optim: SequentialLR expects one milestone fewer than schedulers, got %d schedulers and %d milestones", len(scheds), len(milestones))
	}
	for _, g := range o.ParamGroups() {
		g.LR = g.InitialLR
	}
	for _, s := range scheds {
		s.lastEpoch--
	}
	q := &Sequential{scheds: scheds, milestones: slices.Clone(milestones)}
	if err := scheds[0].Step(); err != nil {
		return nil, err
	}
	q.lastLR = scheds[0].LastLR()
	return q, nil
}

// Step advances by one: the scheduler whose span it is steps, or restarts
// at a milestone.
func (q *Sequential) Step() error {
	q.lastEpoch++
	idx := 0 // bisect_right(milestones, lastEpoch)
	for idx < len(q.milestones) && q.milestones[idx] <= q.lastEpoch {
		idx++
	}
	s := q.scheds[idx]
	var err error
	if idx > 0 && q.milestones[idx-1] == q.lastEpoch {
		err = s.stepTo(0, true)
	} else {
		err = s.Step()
	}
	q.lastLR = s.LastLR()
	return err
}

// LastLR returns the learning rates set by the last Step.
func (q *Sequential) LastLR() []float64 { return slices.Clone(q.lastLR) }

// LastEpoch is the number of Steps taken since construction.
func (q *Sequential) LastEpoch() int { return q.lastEpoch }

// StateDict is PyTorch's layout: last_epoch, _milestones, _last_lr and
// each scheduler's state under _schedulers.
func (q *Sequential) StateDict() map[string]any {
	subs := make([]any, len(q.scheds))
	for i, s := range q.scheds {
		subs[i] = s.StateDict()
	}
	return map[string]any{"last_epoch": q.lastEpoch, "_milestones": slices.Clone(q.milestones), "_last_lr": q.LastLR(), "_schedulers": subs}
}

// LoadStateDict restores what StateDict saved, checking all of it first.
func (q *Sequential) LoadStateDict(m map[string]any) error {
	epoch, ok := toFloat(m["last_epoch"])
	if !ok || epoch != math.Trunc(epoch) || epoch < 0 {
		return fmt.Errorf("optim: SequentialLR state: last_epoch is %v, not a step count", m["last_epoch"])
	}
	subs, ok := m["_schedulers"].([]any)
	if !ok || len(subs) != len(q.scheds) {
		return fmt.Errorf("optim: SequentialLR state: _schedulers must hold the states of its %d schedulers", len(q.scheds))
	}
	restored := make([]*Scheduler, len(q.scheds))
	for i, s := range q.scheds {
		sm, ok := subs[i].(map[string]any)
		if !ok {
			return fmt.Errorf("optim: SequentialLR state: scheduler %d's state is %T, not an object", i, subs[i])
		}
		c := *s
		c.baseLRs = slices.Clone(s.baseLRs)
		if err := c.LoadStateDict(sm); err != nil {
			return fmt.Errorf("optim: SequentialLR state: scheduler %d: %w", i, err)
		}
		restored[i] = &c
	}
	for i, s := range q.scheds {
		*s = *restored[i]
	}
	q.lastEpoch = int(epoch)
	if lr, ok := toFloats(m["_last_lr"]); ok {
		q.lastLR = lr
	}
	return nil
}
