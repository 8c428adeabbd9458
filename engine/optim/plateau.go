package optim

import (
	"fmt"
	"math"
)

// PlateauOptions are torch.optim.lr_scheduler.ReduceLROnPlateau's
// arguments; start from DefaultPlateau.
type PlateauOptions struct {
	Mode          string  // "min" (the metric should fall) or "max"
	Factor        float64 // the learning rate is multiplied by it, < 1
	Patience      int     // steps without improvement tolerated
	Threshold     float64 // what counts as an improvement
	ThresholdMode string  // "rel" or "abs"
	Cooldown      int     // steps to wait after a reduction
	MinLR         float64 // per-group floor (one for every group)
	Eps           float64 // smaller changes are not made
}

// DefaultPlateau is PyTorch's defaults.
func DefaultPlateau() PlateauOptions {
	return PlateauOptions{Mode: "min", Factor: 0.1, Patience: 10, Threshold: 1e-4, ThresholdMode: "rel", Eps: 1e-8}
}

// Plateau is ReduceLROnPlateau: Step(metric) lowers every group's
// learning rate by Factor once the metric has not improved for more than
// Patience steps, with PyTorch 1.13's rules (relative or absolute
// threshold, cooldown, floor, eps).
type Plateau struct {
	groups          func() []*ParamGroup
	o               PlateauOptions
	best            float64
	numBadEpochs    int
	cooldownCounter int
	lastEpoch       int
}

// NewPlateau makes a ReduceLROnPlateau over o's groups.
func NewPlateau(o LRGroups, opts PlateauOptions) (*Plateau, error) {
	switch {
	case !(opts.Factor < 1):
		return nil, fmt.Errorf("optim: ReduceLROnPlateau factor should be < 1.0, got %v", opts.Factor)
	case opts.Mode != "min" && opts.Mode != "max":
		return nil, fmt.Errorf("optim: ReduceLROnPlateau mode %q is unknown (min or max)", opts.Mode)
	case opts.ThresholdMode != "rel" && opts.ThresholdMode != "abs":
		return nil, fmt.Errorf("optim: ReduceLROnPlateau threshold mode %q is unknown (rel or abs)", opts.ThresholdMode)
	case opts.Patience < 0 || opts.Cooldown < 0:
		return nil, fmt.Errorf("optim: ReduceLROnPlateau patience and cooldown must not be negative")
	}
	p := &Plateau{groups: o.ParamGroups, o: opts}
	p.best = p.worse()
	return p, nil
}

func (p *Plateau) worse() float64 {
	if p.o.Mode == "min" {
		return math.Inf(1)
	}
	return math.Inf(-1)
}

func (p *Plateau) better(a float64) bool {
	t, b := p.o.Threshold, p.best
	switch {
	case p.o.Mode == "min" && p.o.ThresholdMode == "rel":
		return a < b*(1-t)
	case p.o.Mode == "min":
		return a < b-t
	case p.o.ThresholdMode == "rel":
		return a > b*(t+1)
	}
	return a > b+t
}

// Step takes the metric of the step just finished.
func (p *Plateau) Step(metric float64) {
	p.lastEpoch++
	if p.better(metric) {
		p.best, p.numBadEpochs = metric, 0
	} else {
		p.numBadEpochs++
	}
	if p.cooldownCounter > 0 {
		p.cooldownCounter--
		p.numBadEpochs = 0
	}
	if p.numBadEpochs > p.o.Patience {
		for _, g := range p.groups() {
			old := g.LR
			if lr := math.Max(old*p.o.Factor, p.o.MinLR); old-lr > p.o.Eps {
				g.LR = lr
			}
		}
		p.cooldownCounter, p.numBadEpochs = p.o.Cooldown, 0
	}
}

// LastLR returns the groups' learning rates.
func (p *Plateau) LastLR() []float64 {
	var out []float64
	for _, g := range p.groups() {
		out = append(out, g.LR)
	}
	return out
}

// StateDict is the scheduler's position in PyTorch's names.
func (p *Plateau) StateDict() map[string]any {
	return map[string]any{"best": p.best, "num_bad_epochs": p.numBadEpochs, "cooldown_counter": p.cooldownCounter, "last_epoch": p.lastEpoch}
}

// LoadStateDict restores what StateDict saved.
func (p *Plateau) LoadStateDict(m map[string]any) error {
	var v [4]float64
	for i, k := range []string{"best", "num_bad_epochs", "cooldown_counter", "last_epoch"} {
		f, ok := toFloat(m[k])
		if !ok {
			return fmt.Errorf("optim: ReduceLROnPlateau state: %s is %v", k, m[k])
		}
		v[i] = f
	}
	p.best, p.numBadEpochs, p.cooldownCounter, p.lastEpoch = v[0], int(v[1]), int(v[2]), int(v[3])
	return nil
}
