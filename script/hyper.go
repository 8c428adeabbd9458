package script

import (
	"slices"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/internal/suggest"
)

// hyperParam is one hyper-parameter of a parameter group under its script
// name (PyTorch's, in camelCase): how to read it from and write it into a
// Go group.
type hyperParam struct {
	name string
	get  func(g *optim.ParamGroup) any
	set  func(r *Runtime, fn string, g *optim.ParamGroup, v goja.Value)
}

func number(name string, field func(g *optim.ParamGroup) *float64) hyperParam {
	return hyperParam{name: name,
		get: func(g *optim.ParamGroup) any { return *field(g) },
		set: func(r *Runtime, fn string, g *optim.ParamGroup, v goja.Value) { *field(g) = r.numberValue(fn, name, v) }}
}

func flag(name string, field func(g *optim.ParamGroup) *bool) hyperParam {
	return hyperParam{name: name,
		get: func(g *optim.ParamGroup) any { return *field(g) },
		set: func(r *Runtime, fn string, g *optim.ParamGroup, v goja.Value) { *field(g) = r.toBool(fn, name, v) }}
}

// hyperParams are every algorithm's hyper-parameters; optimizerOptions
// says which belong to which.
var hyperParams = []hyperParam{
	number("lr", func(g *optim.ParamGroup) *float64 { return &g.LR }),
	number("weightDecay", func(g *optim.ParamGroup) *float64 { return &g.WeightDecay }),
	flag("maximize", func(g *optim.ParamGroup) *bool { return &g.Maximize }),
	number("momentum", func(g *optim.ParamGroup) *float64 { return &g.Momentum }),
	number("dampening", func(g *optim.ParamGroup) *float64 { return &g.Dampening }),
	flag("nesterov", func(g *optim.ParamGroup) *bool { return &g.Nesterov }),
	{name: "betas",
		get: func(g *optim.ParamGroup) any { return []any{g.Beta1, g.Beta2} },
		set: func(r *Runtime, fn string, g *optim.ParamGroup, v goja.Value) {
			b := r.floatList(fn, "betas", v)
			if len(b) != 2 {
				r.throwf("%s: betas must be a pair of numbers", fn)
			}
			g.Beta1, g.Beta2 = b[0], b[1]
		}},
	number("eps", func(g *optim.ParamGroup) *float64 { return &g.Eps }),
	flag("amsgrad", func(g *optim.ParamGroup) *bool { return &g.AMSGrad }),
	number("alpha", func(g *optim.ParamGroup) *float64 { return &g.Alpha }),
	flag("centered", func(g *optim.ParamGroup) *bool { return &g.Centered }),
	number("lrDecay", func(g *optim.ParamGroup) *float64 { return &g.LRDecay }),
	number("initialAccumulatorValue", func(g *optim.ParamGroup) *float64 { return &g.InitialAccumulatorValue }),
	number("initialLr", func(g *optim.ParamGroup) *float64 { return &g.InitialLR }),
}

// implementationSwitches are PyTorch's options that choose an
// implementation, not the result: accepted, without effect.
var implementationSwitches = []string{"foreach", "fused", "capturable", "differentiable"}

// optimizerOptions are the hyper-parameters each algorithm's constructor
// takes, PyTorch 1.13's arguments in camelCase.
var optimizerOptions = map[optim.Kind][]string{
	optim.SGD:     {"lr", "momentum", "dampening", "weightDecay", "nesterov", "maximize"},
	optim.Adam:    {"lr", "betas", "eps", "weightDecay", "amsgrad", "maximize"},
	optim.AdamW:   {"lr", "betas", "eps", "weightDecay", "amsgrad", "maximize"},
	optim.RMSprop: {"lr", "alpha", "eps", "weightDecay", "momentum", "centered", "maximize"},
	optim.Adagrad: {"lr", "lrDecay", "weightDecay", "initialAccumulatorValue", "eps", "maximize"},
	optim.Adamax:  {"lr", "betas", "eps", "weightDecay", "maximize"},
}

// allOptimizerOptions are the keys of every built-in optimizer, once each.
func allOptimizerOptions() []string {
	var out []string
	for _, kind := range optim.Kinds {
		for _, k := range optimizerOptions[kind] {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

func hyperParamNamed(name string) (hyperParam, bool) {
	for _, h := range hyperParams {
		if h.name == name {
			return h, true
		}
	}
	return hyperParam{}, false
}

// groupKeys are the keys of a kind group's script object: its params, its
// hyper-parameters and initialLr (set by a scheduler).
func groupKeys(kind optim.Kind) []string {
	return slices.Concat([]string{"params"}, optimizerOptions[kind], []string{"initialLr"})
}

// groupOptions applies the options object o to g, a group of a kind
// optimizer. The constructor's options (group false) take exactly the
// algorithm's hyper-parameters: any other key is an error naming the key
// meant, as PyTorch raises TypeError for an unexpected keyword. A
// parameter group (group true) may also carry numbers of the user's own
// (PyTorch keeps any key in a group), kept in Extra, unless the key looks
// like a mistake: a hyper-parameter of another algorithm, or a snake_case
// or near spelling of one of this one's.
func (r *Runtime) groupOptions(fn string, kind optim.Kind, g *optim.ParamGroup, o *goja.Object, group bool) {
	if o == nil {
		return
	}
	keys := optimizerOptions[kind]
	allowed := slices.Concat(keys, implementationSwitches)
	if group {
		allowed = append(allowed, "params", "initialLr")
	}
	for _, k := range o.Keys() {
		v := o.Get(k)
		switch {
		case k == "params":
			if !group {
				r.throwf("%s: params is the first argument, not an option", fn)
			}
		case slices.Contains(implementationSwitches, k):
		case slices.Contains(keys, k) || group && k == "initialLr":
			h, _ := hyperParamNamed(k)
			h.set(r, fn, g, v)
		default:
			_, other := hyperParamNamed(k)
			if !group || other || suggest.Closest(k, allowed) != "" {
				msg := "%s: unknown option %q for %v"
				args := []any{fn, k, kind}
				if s := suggest.Closest(k, allowed); s != "" {
					msg += " (did you mean %s?)"
					args = append(args, s)
				}
				r.throwf(msg+"; its options are %s", append(args, strings.Join(keys, ", "))...)
			}
			if g.Extra == nil {
				g.Extra = map[string]float64{}
			}
			g.Extra[k] = r.numberValue(fn, k, v)
		}
	}
}
