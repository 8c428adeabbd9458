package optim

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Optimizer is a stateful optimizer over parameter groups, like
// torch.optim.Optimizer: Step reads each parameter's .grad.
type Optimizer struct {
	kind     Kind
	defaults ParamGroup
	Groups   []*ParamGroup
	state    map[*tensor.Tensor]*State
}

// New makes an optimizer of kind whose first group holds params with the
// hyper-parameters of defaults. params may be empty when groups are added
// with AddParamGroup.
func New(kind Kind, params []*tensor.Tensor, defaults ParamGroup) (*Optimizer, error) {
	defaults.Params = nil
	if err := defaults.Validate(kind); err != nil {
		return nil, err
	}
	o := &Optimizer{kind: kind, defaults: defaults, state: map[*tensor.Tensor]*State{}}
	if len(params) > 0 {
		g := defaults.Hyper()
		g.Params = params
		if err := o.AddParamGroup(g); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Kind is the optimizer's algorithm.
func (o *Optimizer) Kind() Kind { return o.kind }

// Defaults returns a copy of the defaults, to start a new group from.
func (o *Optimizer) Defaults() ParamGroup { return o.defaults.Hyper() }

// AddParamGroup adds a group; its parameters must be floating-point leaves
// that are in no other group.
func (o *Optimizer) AddParamGroup(g ParamGroup) error {
	if len(g.Params) == 0 {
		return fmt.Errorf("optim: optimizer got an empty parameter list")
	}
	if err := g.Validate(o.kind); err != nil {
		return err
	}
	seen := map[*tensor.Tensor]bool{}
	for _, og := range o.Groups {
		for _, p := range og.Params {
			seen[p] = true
		}
	}
	for i, p := range g.Params {
		if p == nil {
			return fmt.Errorf("optim: parameter %d is nil", i)
		}
		if err := p.Err(); err != nil {
			return err
		}
		if !p.DType().IsFloat() || !p.IsLeaf() {
			return fmt.Errorf("optim: can't optimize a non-leaf or non-floating-point tensor (%s)", label(p, i))
		}
		if seen[p] {
			return fmt.Errorf("optim: some parameters appear in more than one parameter group (%s)", label(p, i))
		}
		seen[p] = true
	}
	if init := o.kind.Algorithm().Init; init != nil {
		// The state made when the parameters join (Adagrad's), in the
		// state dict before any step.
		for _, p := range g.Params {
			s, err := init(&g, p)
			if err != nil {
				return err
			}
			o.state[p] = s
		}
	}
	ng := g
	ng.Params = append([]*tensor.Tensor(nil), g.Params...)
	o.Groups = append(o.Groups, &ng)
	return nil
}

// Step updates every parameter that has a gradient.
func (o *Optimizer) Step() error {
	for _, g := range o.Groups {
		grads := make([]*tensor.Tensor, len(g.Params))
		states := make([]*State, len(g.Params))
		for i, p := range g.Params {
			grads[i] = p.Grad()
			states[i] = o.state[p]
		}
		if err := Update(o.kind, g, g.Params, grads, states); err != nil {
			return err
		}
		for i, p := range g.Params {
			if states[i] != nil {
				o.state[p] = states[i]
			}
		}
	}
	return nil
}

// ZeroGrad clears the gradients: to nil when setToNone, else zeroed in place
// (PyTorch 1.13's default).
func (o *Optimizer) ZeroGrad(setToNone bool) error {
	for _, g := range o.Groups {
		for _, p := range g.Params {
			if err := nn.ZeroGradOf(p, setToNone); err != nil {
				return err
			}
		}
	}
	return nil
}

// State returns p's state, or nil before its first update.
func (o *Optimizer) State(p *tensor.Tensor) *State { return o.state[p] }

// StateBytes is the memory held by the optimizer state.
func (o *Optimizer) StateBytes() int64 {
	var n int64
	for _, s := range o.state {
		n += s.Bytes()
	}
	return n
}

// Params lists every parameter in group order (the order of state-dict
// indices).
func (o *Optimizer) Params() []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, g := range o.Groups {
		out = append(out, g.Params...)
	}
	return out
}

// StateDict is an optimizer's state in PyTorch's layout: State is keyed by
// the parameter's index in group order, each entry maps "step",
// "exp_avg", ... to tensors; ParamGroups hold the hyper-parameters under
// PyTorch's names with "params" listing indices.
type StateDict struct {
	State       map[int]map[string]*tensor.Tensor
	ParamGroups []map[string]any
}

// StateDict snapshots the optimizer: the tensors are the optimizer's own
// (shared, not copied), except "step", a new 0-d float32 tensor as in
// PyTorch 1.13.
func (o *Optimizer) StateDict() (*StateDict, error) {
	return MakeStateDict(o.kind, o.Groups, func(p *tensor.Tensor) *State { return o.state[p] }), nil
}

// MakeStateDict builds the state dict of a kind optimizer over groups, in
// PyTorch's layout, from each parameter's state (nil: none yet). The state
// tensors are shared, not copied. ZeroRedundancyOptimizer builds its
// consolidated dict with it.
func MakeStateDict(kind Kind, groups []*ParamGroup, stateOf func(*tensor.Tensor) *State) *StateDict {
	sd := &StateDict{State: map[int]map[string]*tensor.Tensor{}}
	idx := 0
	for _, g := range groups {
		ids := make([]int, len(g.Params))
		for i, p := range g.Params {
			ids[i] = idx
			if s := stateOf(p); s != nil {
				entry := map[string]*tensor.Tensor{}
				if a := kind.Algorithm(); a == nil || !a.NoStep {
					entry["step"] = p.Runtime().Scalar(tensor.Float32, float64(s.Step)).Persist()
				}
				for name, v := range s.Scalars {
					entry[name] = p.Runtime().Scalar(tensor.Float32, v).Persist()
				}
				for _, t := range s.Tensors() {
					entry[t.Name] = t.Tensor
				}
				sd.State[idx] = entry
			}
			idx++
		}
		sd.ParamGroups = append(sd.ParamGroups, groupToMap(kind, g, ids))
	}
	return sd
}

// groupToMap writes a group's hyper-parameters under the names PyTorch 1.13
// uses for kind: its options and its implementation switches (which
// zeroeng does not act on) with PyTorch's default values.
func groupToMap(kind Kind, g *ParamGroup, ids []int) map[string]any {
	m := map[string]any{"params": ids}
	if a := kind.Algorithm(); a != nil {
		for _, o := range a.Options {
			v := g.Get(o.Name)
			if b, ok := v.([2]float64); ok {
				v = []float64{b[0], b[1]}
			}
			m[o.Name] = v
		}
		for _, s := range a.Switches {
			m[s.Name] = s.Value
		}
	}
	if g.InitialLR != 0 {
		m["initial_lr"] = g.InitialLR
	}
	for k, v := range g.Extra {
		m[k] = v
	}
	return m
}

// applyMap sets a group's hyper-parameters from a state-dict map: the
// options of any algorithm by their names, initial_lr, and any other
// number into Extra.
func applyMap(g *ParamGroup, m map[string]any) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		switch {
		case k == "params" || knownSwitch(k):
		case k == "initial_lr":
			f, ok := toFloat(v)
			if !ok {
				return fmt.Errorf("optim: param group key %q: %v is not a number", k, v)
			}
			g.InitialLR = f
		default:
			o, ok := knownOption(k)
			if !ok {
				if f, ok := toFloat(v); ok {
					if g.Extra == nil {
						g.Extra = map[string]float64{}
					}
					g.Extra[k] = f
				}
				continue
			}
			switch o.Default.(type) {
			case float64:
				f, ok := toFloat(v)
				if !ok {
					return fmt.Errorf("optim: param group key %q: %v is not a number", k, v)
				}
				g.set(k, f)
			case bool:
				b, ok := v.(bool)
				if !ok {
					return fmt.Errorf("optim: param group key %q: %v is not a boolean", k, v)
				}
				g.set(k, b)
			case [2]float64:
				pair, ok := toFloats(v)
				if !ok || len(pair) != 2 {
					return fmt.Errorf("optim: param group key %q: %v is not a pair of numbers", k, v)
				}
				g.set(k, [2]float64{pair[0], pair[1]})
			}
		}
	}
	return nil
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

func toFloats(v any) ([]float64, bool) {
	switch x := v.(type) {
	case []float64:
		return x, true
	case []any:
		out := make([]float64, len(x))
		for i, e := range x {
			f, ok := toFloat(e)
			if !ok {
				return nil, false
			}
			out[i] = f
		}
		return out, true
	}
	return nil, false
}

func toInts(v any) ([]int, bool) {
	switch x := v.(type) {
	case []int:
		return x, true
	case []any:
		out := make([]int, len(x))
		for i, e := range x {
			f, ok := toFloat(e)
			if !ok || f != float64(int(f)) {
				return nil, false
			}
			out[i] = int(f)
		}
		return out, true
	case []float64:
		out := make([]int, len(x))
		for i, f := range x {
			if f != float64(int(f)) {
				return nil, false
			}
			out[i] = int(f)
		}
		return out, true
	}
	return nil, false
}

// LoadStateDict restores hyper-parameters and state from sd, which must
// have the same group structure (as in PyTorch). State tensors are copied
// into tensors owned by the optimizer; everything is validated before
// anything changes.
func (o *Optimizer) LoadStateDict(sd *StateDict) error {
	hyper, states, err := ReadStateDict(o.kind, o.Groups, sd)
	if err != nil {
		return err
	}
	for i := range o.Groups {
		ps := o.Groups[i].Params
		*o.Groups[i] = hyper[i]
		o.Groups[i].Params = ps
	}
	params := o.Params()
	for k, s := range states {
		p := params[k]
		if old := o.state[p]; old != nil {
			old.Release()
		}
		o.state[p] = s
	}
	return nil
}

// ReadStateDict checks sd against the groups of a kind optimizer (same
// group structure, state shapes matching the parameters, known entries)
// and returns each group's hyper-parameters and each parameter's state by
// global index, in new tensors of the parameter's dtype that the caller
// owns. Nothing is returned unless everything is valid.
func ReadStateDict(kind Kind, groups []*ParamGroup, sd *StateDict) ([]ParamGroup, map[int]*State, error) {
	if kind.Algorithm() == nil {
		return nil, nil, fmt.Errorf("optim: unknown optimizer kind %v", kind)
	}
	if len(sd.ParamGroups) != len(groups) {
		return nil, nil, fmt.Errorf("optim: loaded state dict has a different number of parameter groups (%d, optimizer has %d)", len(sd.ParamGroups), len(groups))
	}
	var params []*tensor.Tensor
	for _, g := range groups {
		params = append(params, g.Params...)
	}
	newGroups := make([]ParamGroup, len(groups))
	for i, m := range sd.ParamGroups {
		ids, ok := toInts(m["params"])
		if !ok {
			return nil, nil, fmt.Errorf("optim: param group %d: \"params\" is not a list of indices", i)
		}
		if len(ids) != len(groups[i].Params) {
			return nil, nil, fmt.Errorf("optim: loaded state dict contains a parameter group that doesn't match the size of optimizer's group %d (%d vs %d)", i, len(ids), len(groups[i].Params))
		}
		g := groups[i].Hyper()
		if err := applyMap(&g, m); err != nil {
			return nil, nil, fmt.Errorf("%w (group %d)", err, i)
		}
		if err := g.Validate(kind); err != nil {
			return nil, nil, fmt.Errorf("%w (group %d)", err, i)
		}
		newGroups[i] = g
	}
	keys := make([]int, 0, len(sd.State))
	for k := range sd.State {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	groupOf := make([]int, 0, len(params))
	for i, g := range groups {
		for range g.Params {
			groupOf = append(groupOf, i)
		}
	}
	for _, k := range keys {
		if k < 0 || k >= len(params) {
			return nil, nil, fmt.Errorf("optim: state for parameter index %d, but the optimizer has %d parameters", k, len(params))
		}
		p := params[k]
		var names []string
		var step float64
		for name, t := range sd.State[k] {
			if t == nil {
				return nil, nil, fmt.Errorf("optim: state %d %q is missing", k, name)
			}
			if err := t.Err(); err != nil {
				return nil, nil, fmt.Errorf("optim: state %d %q: %w", k, name, err)
			}
			if name == "step" {
				if t.Numel() != 1 {
					return nil, nil, fmt.Errorf("optim: state %d: step must hold one number, has shape %v", k, t.Shape())
				}
				v, err := t.Item()
				if err != nil {
					return nil, nil, fmt.Errorf("optim: state %d: step: %w", k, err)
				}
				if v != math.Trunc(v) || v < 0 || v > 1<<53 {
					return nil, nil, fmt.Errorf("optim: state %d: step is %v, not a count of steps", k, v)
				}
				step = v
				continue
			}
			if slices.Contains(kind.Algorithm().Scalars, name) {
				if t.Numel() != 1 {
					return nil, nil, fmt.Errorf("optim: state %d: %s must hold one number, has shape %v", k, name, t.Shape())
				}
				v, err := t.Item()
				if err != nil {
					return nil, nil, fmt.Errorf("optim: state %d: %s: %w", k, name, err)
				}
				if err := CheckStateScalars(kind, map[string]float64{name: v}); err != nil {
					return nil, nil, fmt.Errorf("optim: state %d: %w", k, err)
				}
				continue
			}
			if _, ok := stateField(&State{}, name); !ok {
				return nil, nil, fmt.Errorf("optim: state %d: unknown entry %q for %v", k, name, kind)
			}
			names = append(names, name)
			if name == "master_param" && !isHalf(p.DType()) {
				return nil, nil, fmt.Errorf("optim: state %d has master_param, but the parameter is %v (master weights are kept for bfloat16 and float16 parameters)", k, p.DType())
			}
			if fmt.Sprint(t.Shape()) != fmt.Sprint(p.Shape()) {
				return nil, nil, fmt.Errorf("optim: state %d %q has shape %v, the parameter %v", k, name, t.Shape(), p.Shape())
			}
		}
		sort.Strings(names)
		if err := CheckStateNames(kind, &newGroups[groupOf[k]], isHalf(p.DType()), int64(step), names); err != nil {
			return nil, nil, fmt.Errorf("optim: state %d: %w", k, err)
		}
	}
	states := map[int]*State{}
	for _, k := range keys {
		p := params[k]
		s := &State{}
		for name, t := range sd.State[k] {
			if name == "step" || slices.Contains(kind.Algorithm().Scalars, name) {
				v, err := t.Item()
				if err != nil {
					return nil, nil, err
				}
				if name == "step" {
					s.Step = int64(v)
				} else {
					if s.Scalars == nil {
						s.Scalars = map[string]float64{}
					}
					s.Scalars[name] = v
				}
				continue
			}
			field, _ := stateField(s, name)
			src := t
			if t.Runtime() != p.Runtime() {
				// A dict made on another runtime (another in-process
				// rank's): its bytes, on the parameter's.
				b, err := t.Bytes()
				if err != nil {
					s.Release()
					for _, o := range states {
						o.Release()
					}
					return nil, nil, fmt.Errorf("optim: state %d %q: %w", k, name, err)
				}
				src = p.Runtime().FromBytes(t.DType(), b, t.Shape()...)
			}
			c := src.To(StateDType(p)).Clone()
			if src != t {
				src.Release()
			}
			if err := c.Err(); err != nil {
				s.Release()
				for _, o := range states {
					o.Release()
				}
				return nil, nil, err
			}
			*field = c.Persist()
		}
		states[k] = s
	}
	return newGroups, states, nil
}

// StateField returns the field of s that holds the state entry name
// ("exp_avg", "momentum_buffer", ...).
func StateField(s *State, name string) (**tensor.Tensor, bool) { return stateField(s, name) }

func stateField(s *State, name string) (**tensor.Tensor, bool) {
	switch name {
	case "exp_avg":
		return &s.ExpAvg, true
	case "exp_avg_sq":
		return &s.ExpAvgSq, true
	case "max_exp_avg_sq":
		return &s.MaxExpAvgSq, true
	case "momentum_buffer":
		return &s.MomentumBuffer, true
	case "square_avg":
		return &s.SquareAvg, true
	case "grad_avg":
		return &s.GradAvg, true
	case "sum":
		return &s.Sum, true
	case "exp_inf":
		return &s.ExpInf, true
	case "master_param":
		return &s.Master, true
	}
	if !knownEntry(name) {
		return nil, false
	}
	// An entry of an algorithm that has no field of its own.
	if s.more == nil {
		s.more = map[string]*slot{}
	}
	sl := s.more[name]
	if sl == nil {
		sl = &slot{}
		s.more[name] = sl
	}
	return &sl.t, true
}
