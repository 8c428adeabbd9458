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

// camelCase is a PyTorch option's name as scripts write it:
// weight_decay is weightDecay, momentum_decay momentumDecay.
func camelCase(name string) string {
	parts := strings.Split(name, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// optionParam is the script face of an algorithm's option: its camelCase
// name, read and written through the group by PyTorch's name, as the
// option's type says (a number, a boolean, a pair of numbers).
func optionParam(o optim.Option) hyperParam {
	name := camelCase(o.Name)
	h := hyperParam{name: name, get: func(g *optim.ParamGroup) any {
		v := g.Get(o.Name)
		if b, ok := v.([2]float64); ok {
			return []any{b[0], b[1]}
		}
		return v
	}}
	switch o.Default.(type) {
	case float64:
		h.set = func(r *Runtime, fn string, g *optim.ParamGroup, v goja.Value) {
			must(g.Set(o.Name, r.numberValue(fn, name, v)))
		}
	case bool:
		h.set = func(r *Runtime, fn string, g *optim.ParamGroup, v goja.Value) {
			must(g.Set(o.Name, r.toBool(fn, name, v)))
		}
	case [2]float64:
		h.set = func(r *Runtime, fn string, g *optim.ParamGroup, v goja.Value) {
			b := r.floatList(fn, name, v)
			if len(b) != 2 {
				r.throwf("%s: %s must be a pair of numbers", fn, name)
			}
			must(g.Set(o.Name, [2]float64{b[0], b[1]}))
		}
	}
	return h
}

// hyperParams are every algorithm's hyper-parameters (engine/optim's
// registry), once each, and initialLr (set by schedulers);
// optimizerOptions says which belong to which.
var hyperParams = func() []hyperParam {
	var out []hyperParam
	seen := map[string]bool{}
	for _, a := range optim.Algorithms() {
		for _, o := range a.Options {
			if !seen[o.Name] {
				seen[o.Name] = true
				out = append(out, optionParam(o))
			}
		}
	}
	return append(out, hyperParam{name: "initialLr",
		get: func(g *optim.ParamGroup) any { return g.InitialLR },
		set: func(r *Runtime, fn string, g *optim.ParamGroup, v goja.Value) {
			g.InitialLR = r.numberValue(fn, "initialLr", v)
		}})
}()

// implementationSwitches are PyTorch's options that choose an
// implementation, not the result (foreach, fused, ...): accepted, without
// effect.
var implementationSwitches = func() []string {
	var out []string
	for _, a := range optim.Algorithms() {
		for _, s := range a.Switches {
			if !slices.Contains(out, s.Name) {
				out = append(out, s.Name)
			}
		}
	}
	return out
}()

// optimizerOptions are the hyper-parameters kind's constructor takes,
// PyTorch 1.13's arguments in camelCase.
func optimizerOptions(kind optim.Kind) []string {
	var out []string
	if a := kind.Algorithm(); a != nil {
		for _, o := range a.Options {
			out = append(out, camelCase(o.Name))
		}
	}
	return out
}

// requireOptions throws for an option of kind that PyTorch requires (SGD's
// lr) and ops lacks; what follows the message names the optimizer where
// the function does not ("for sgd").
func (r *Runtime) requireOptions(fn string, kind optim.Kind, ops *goja.Object, what string) {
	for _, o := range kind.Algorithm().Options {
		if o.Required && optValue(ops, camelCase(o.Name)) == nil {
			r.throwf("%s: %s is required%s", fn, camelCase(o.Name), what)
		}
	}
}

// allOptimizerOptions are the keys of every built-in optimizer, once each.
func allOptimizerOptions() []string {
	var out []string
	for _, kind := range optim.Kinds() {
		for _, k := range optimizerOptions(kind) {
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
	return slices.Concat([]string{"params"}, optimizerOptions(kind), []string{"initialLr"})
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
	keys := optimizerOptions(kind)
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
