package optim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Kind is an optimizer algorithm: the number its descriptor registered
// under (see Algorithm). The zero Kind is SGD.
type Kind int

// Algorithm describes one optimizer algorithm, in its own file
// (sgd.go, adam.go, ..., nadam.go): everything the package, the script's
// constructors (optim.NAdam(params, { momentumDecay })), ZeRO, state
// dicts, checkpoints and the docs know of it comes from here.
type Algorithm struct {
	// Kind is its number: the next unused one (kinds are 0, 1, 2, ...;
	// registering one twice, or leaving a gap, panics when the package
	// starts).
	Kind Kind
	// Name is PyTorch's class name ("NAdam"): the script's constructor
	// optim.NAdam, ZeRO's optimizer "nadam" (any case), checkpoints' kind.
	Name string
	// Doc is one line for the API reference.
	Doc string
	// Options are the constructor's hyper-parameters in the order of
	// PyTorch 1.13's signature, under PyTorch's names, with its defaults
	// and checks. The script takes each in camelCase (momentum_decay:
	// momentumDecay).
	Options []Option
	// Switches are PyTorch's implementation switches that its
	// param_groups hold (foreach, capturable, ...), with the values a
	// state dict writes; the script accepts them without effect.
	Switches []Switch
	// Check checks what the options' own checks cannot (SGD's nesterov),
	// after them; nil: nothing more.
	Check func(g *ParamGroup) error
	// Entries lists every state entry the algorithm may keep beside step,
	// tensors of the parameter's shape, under PyTorch's names.
	Entries []string
	// Scalars lists its 0-d state entries beside step (NAdam's
	// mu_product), kept as numbers and written as 0-d float32 tensors.
	Scalars []string
	// Keeps returns the entries a state holds from the first step on
	// under h (required) and those it may hold besides (optional); nil:
	// all of Entries, from the first step.
	Keeps func(h *ParamGroup) (required, optional []string)
	// Deciding names the options Keeps depends on, for messages
	// ("AdamW (amsgrad=false) does not keep ...").
	Deciding []string
	// NonNegative lists the entries that are never negative in any run
	// (second moments, sums), which loads check.
	NonNegative []string
	// NoStep: the state keeps no step count (SGD), and a state without
	// entries is valid at any step.
	NoStep bool
	// Init makes p's state when p joins the optimizer (Adagrad's sum, in
	// the state dict before any step); nil: the first step makes it.
	Init func(g *ParamGroup, p *tensor.Tensor) (*State, error)
	// Step is one update of the contiguous parameter p (float32 or
	// float64: half-precision parameters step through their float32
	// master copy) with the gradient g of its shape and dtype, and its
	// state s (empty before the first step). It makes the entries it
	// needs, advances s.Step, and must leave s as it was when it fails.
	Step func(h *ParamGroup, p, g *tensor.Tensor, s *State) error
}

// Option is one hyper-parameter of an algorithm.
type Option struct {
	// Name is PyTorch's ("weight_decay").
	Name string
	// Default is PyTorch's default: a float64, a bool or a [2]float64
	// (betas); its type is the option's.
	Default any
	// Required: PyTorch has no default (SGD's lr); Default is a
	// placeholder.
	Required bool
	// Check returns an error for a value PyTorch refuses; nil: any.
	Check func(v any) error
	// Doc says what the option does, for the docs' table.
	Doc string
}

// Switch is one of PyTorch's implementation switches.
type Switch struct {
	Name  string
	Value any // what PyTorch's param_groups hold by default (nil: None)
}

var registry []*Algorithm

// Register adds an algorithm; each algorithm's file calls it from its
// init function.
func Register(a *Algorithm) {
	if a.Name == "" || a.Step == nil || a.Kind < 0 {
		panic(fmt.Sprintf("optim: algorithm %d %q has no name, no step or a negative kind", a.Kind, a.Name))
	}
	for int(a.Kind) >= len(registry) {
		registry = append(registry, nil)
	}
	if prev := registry[a.Kind]; prev != nil {
		panic(fmt.Sprintf("optim: %s registers kind %d, which %s has", a.Name, a.Kind, prev.Name))
	}
	for _, b := range registry {
		if b != nil && strings.EqualFold(a.Name, b.Name) {
			panic(fmt.Sprintf("optim: two algorithms are named %s", a.Name))
		}
	}
	for _, o := range a.Options {
		switch o.Default.(type) {
		case float64, bool, [2]float64:
		default:
			panic(fmt.Sprintf("optim: %s's option %s has a default of type %T (float64, bool or [2]float64)", a.Name, o.Name, o.Default))
		}
	}
	registry[a.Kind] = a
}

// Algorithms lists every registered algorithm in Kind order.
func Algorithms() []*Algorithm {
	for i, a := range registry {
		if a == nil {
			panic(fmt.Sprintf("optim: no algorithm registered kind %d (kinds must be 0, 1, 2, ...)", i))
		}
	}
	return slices.Clone(registry)
}

// Kinds lists every optimizer algorithm.
func Kinds() []Kind {
	out := make([]Kind, 0, len(registry))
	for _, a := range Algorithms() {
		out = append(out, a.Kind)
	}
	return out
}

// Algorithm returns kind's descriptor, or nil for an unknown kind.
func (k Kind) Algorithm() *Algorithm {
	if k < 0 || int(k) >= len(registry) {
		return nil
	}
	return registry[k]
}

func (k Kind) String() string {
	if a := k.Algorithm(); a != nil {
		return a.Name
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ParseKind accepts an optimizer's name ("sgd", "adamw", "RMSprop") in any
// case.
func ParseKind(s string) (Kind, error) {
	var names []string
	for _, a := range Algorithms() {
		if strings.EqualFold(s, a.Name) {
			return a.Kind, nil
		}
		names = append(names, strings.ToLower(a.Name))
	}
	return 0, fmt.Errorf("optim: unknown optimizer %q (%s)", s, strings.Join(names, ", "))
}

// Option returns the algorithm's option name, if it has one.
func (a *Algorithm) Option(name string) (Option, bool) {
	for _, o := range a.Options {
		if o.Name == name {
			return o, true
		}
	}
	return Option{}, false
}

// keeps is Keeps, or all of Entries.
func (a *Algorithm) keeps(h *ParamGroup) (required, optional []string) {
	if a.Keeps == nil {
		return slices.Clone(a.Entries), nil
	}
	return a.Keeps(h)
}

// Defaults returns PyTorch's default hyper-parameters for kind (a
// required option, such as SGD's lr, is 0).
func Defaults(kind Kind) ParamGroup {
	var g ParamGroup
	if a := kind.Algorithm(); a != nil {
		for _, o := range a.Options {
			g.set(o.Name, o.Default)
		}
	}
	return g
}

// Validate checks g's hyper-parameters for kind with PyTorch's messages:
// lr and weight_decay first, then the others in the order of the
// signature, then the algorithm's own check.
func (g *ParamGroup) Validate(kind Kind) error {
	a := kind.Algorithm()
	if a == nil {
		return fmt.Errorf("optim: unknown optimizer kind %v", kind)
	}
	first := []string{"lr", "weight_decay"}
	opts := slices.Clone(a.Options)
	slices.SortStableFunc(opts, func(x, y Option) int {
		return boolInt(!slices.Contains(first, x.Name)) - boolInt(!slices.Contains(first, y.Name))
	})
	for _, o := range opts {
		if o.Check == nil {
			continue
		}
		if err := o.Check(g.Get(o.Name)); err != nil {
			return fmt.Errorf("optim: %w", err)
		}
	}
	if a.Check != nil {
		return a.Check(g)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Option values and the checks PyTorch 1.13 makes of them.

// number is an option's value as a float64 (0 for another type).
func number(v any) float64 { f, _ := v.(float64); return f }

// nonNegative refuses a value below 0 (or NaN) with PyTorch's message:
// "invalid <what>: <v>".
func nonNegative(what string) func(any) error {
	return func(v any) error {
		if f := number(v); !(f >= 0) {
			return fmt.Errorf("invalid %s: %v", what, f)
		}
		return nil
	}
}

// betasCheck is PyTorch's check of betas: each in [0, 1).
func betasCheck(v any) error {
	b, _ := v.([2]float64)
	for i, x := range b {
		if !(x >= 0 && x < 1) {
			return fmt.Errorf("invalid beta parameter at index %d: %v", i, x)
		}
	}
	return nil
}

// The options most algorithms share, with PyTorch's checks and docs.

func lrOption(def float64) Option {
	return Option{Name: "lr", Default: def, Check: nonNegative("learning rate"), Doc: "learning rate"}
}

func weightDecayOption(def float64) Option {
	return Option{Name: "weight_decay", Default: def, Check: nonNegative("weight_decay value"), Doc: "L2 penalty (AdamW: decoupled)"}
}

func epsOption(def float64) Option {
	return Option{Name: "eps", Default: def, Check: nonNegative("epsilon value"), Doc: "added to the denominator"}
}

func betasOption() Option {
	return Option{Name: "betas", Default: [2]float64{0.9, 0.999}, Check: betasCheck, Doc: "running-average coefficients"}
}

var maximizeOption = Option{Name: "maximize", Default: false, Doc: "ascend the objective"}

// foreach is PyTorch 1.13's switch of every algorithm (None by default).
var foreach = Switch{Name: "foreach"}

// knownOption finds the option name among every registered algorithm's.
func knownOption(name string) (Option, bool) {
	for _, a := range registry {
		if a == nil {
			continue
		}
		if o, ok := a.Option(name); ok {
			return o, true
		}
	}
	return Option{}, false
}

// knownSwitch tells whether name is an implementation switch of some
// algorithm.
func knownSwitch(name string) bool {
	for _, a := range registry {
		if a == nil {
			continue
		}
		for _, s := range a.Switches {
			if s.Name == name {
				return true
			}
		}
	}
	return false
}

// knownEntry tells whether name is a state entry of some algorithm (or
// master_param).
func knownEntry(name string) bool {
	if name == "master_param" {
		return true
	}
	for _, a := range registry {
		if a != nil && slices.Contains(a.Entries, name) {
			return true
		}
	}
	return false
}

// knownScalar tells whether name is a 0-d state entry of some algorithm.
func knownScalar(name string) bool {
	for _, a := range registry {
		if a != nil && slices.Contains(a.Scalars, name) {
			return true
		}
	}
	return false
}
