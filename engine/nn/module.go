// Package nn owns zeroeng's modules: the registry of named parameters,
// buffers and sub-modules that every layer embeds (Base), PyTorch's naming
// of them ("0.weight", "blocks.2.ln1.bias"), state dicts, train/eval mode,
// and the standard layers (Linear, Embedding, LayerNorm, Dropout,
// Sequential, ModuleList and the activations) initialised as PyTorch
// initialises them, draw for draw.
//
// The differentiable math lives in engine/tensor; the functional forms with
// PyTorch's argument conventions live in engine/nn/functional.
package nn

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Module is anything that embeds a Base: its parameters, buffers and
// children are reachable through it.
type Module interface {
	base() *Base
}

// Layer is a module with one input and one output, the kind Sequential
// chains.
type Layer interface {
	Module
	Forward(x *tensor.Tensor) *tensor.Tensor
}

// Base is the registry every module embeds. Its methods walk the module tree
// in registration order, as PyTorch's do.
type Base struct {
	params   []named[*tensor.Tensor]
	buffers  []named[*tensor.Tensor]
	children []named[Module]
	training bool
	typeName string
}

type named[T any] struct {
	name string
	v    T
}

func (b *Base) base() *Base { return b }

// Init must be called by a module's constructor before registering
// anything; typeName is the class name shown in summaries ("Linear").
func (b *Base) Init(typeName string) {
	b.training = true
	b.typeName = typeName
}

// TypeName is the module's class name.
func (b *Base) TypeName() string { return b.typeName }

func checkName(kind, name string, taken func(string) bool) error {
	if name == "" || strings.Contains(name, ".") {
		return fmt.Errorf("nn: %s name %q must be non-empty and contain no '.'", kind, name)
	}
	if taken(name) {
		return fmt.Errorf("nn: attribute %q already exists", name)
	}
	return nil
}

func (b *Base) has(name string) bool {
	for _, p := range b.params {
		if p.name == name {
			return true
		}
	}
	for _, p := range b.buffers {
		if p.name == name {
			return true
		}
	}
	for _, c := range b.children {
		if c.name == name {
			return true
		}
	}
	return false
}

// RegisterParameter adds a parameter: it is made persistent (never released
// by a scope) and a floating-point leaf that requires a gradient.
func (b *Base) RegisterParameter(name string, p *tensor.Tensor) error {
	if err := checkName("parameter", name, b.has); err != nil {
		return err
	}
	if err := p.Err(); err != nil {
		return fmt.Errorf("nn: parameter %q: %w", name, err)
	}
	if err := p.SetRequiresGrad(true); err != nil {
		return fmt.Errorf("nn: parameter %q: %w", name, err)
	}
	p.Persist().SetName(name)
	b.params = append(b.params, named[*tensor.Tensor]{name, p})
	return nil
}

// RegisterBuffer adds a persistent non-parameter tensor (saved in the state
// dict, not trained).
func (b *Base) RegisterBuffer(name string, t *tensor.Tensor) error {
	if err := checkName("buffer", name, b.has); err != nil {
		return err
	}
	if err := t.Err(); err != nil {
		return fmt.Errorf("nn: buffer %q: %w", name, err)
	}
	t.Persist().SetName(name)
	b.buffers = append(b.buffers, named[*tensor.Tensor]{name, t})
	return nil
}

// RegisterModule adds a child module under name.
func (b *Base) RegisterModule(name string, m Module) error {
	if err := checkName("module", name, b.has); err != nil {
		return err
	}
	if m == nil || m.base().typeName == "" {
		return fmt.Errorf("nn: module %q was not initialised (call Base.Init in its constructor)", name)
	}
	b.children = append(b.children, named[Module]{name, m})
	return nil
}

// Child returns the direct child registered under name.
func (b *Base) Child(name string) (Module, bool) {
	for _, c := range b.children {
		if c.name == name {
			return c.v, true
		}
	}
	return nil, false
}

// NamedTensor is a tensor with its dotted name in the module tree.
type NamedTensor struct {
	Name   string
	Tensor *tensor.Tensor
}

// NamedParameters lists every parameter with its dotted name, in
// registration order, each shared parameter once (under its first name), as
// torch's named_parameters().
func (b *Base) NamedParameters() []NamedTensor {
	var out []NamedTensor
	seen := map[*tensor.Tensor]bool{}
	b.walk("", func(prefix string, m *Base) {
		for _, p := range m.params {
			if !seen[p.v] {
				seen[p.v] = true
				out = append(out, NamedTensor{prefix + p.name, p.v})
			}
		}
	})
	return out
}

// Parameters lists every parameter once, in registration order.
func (b *Base) Parameters() []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, p := range b.NamedParameters() {
		out = append(out, p.Tensor)
	}
	return out
}

// NamedBuffers lists every buffer with its dotted name.
func (b *Base) NamedBuffers() []NamedTensor {
	var out []NamedTensor
	b.walk("", func(prefix string, m *Base) {
		for _, p := range m.buffers {
			out = append(out, NamedTensor{prefix + p.name, p.v})
		}
	})
	return out
}

// NamedModules lists the module itself (name "") and every descendant.
func (b *Base) NamedModules() []NamedModule {
	var out []NamedModule
	var rec func(prefix string, m Module)
	rec = func(prefix string, m Module) {
		out = append(out, NamedModule{strings.TrimSuffix(prefix, "."), m})
		for _, c := range m.base().children {
			rec(prefix+c.name+".", c.v)
		}
	}
	rec("", b)
	return out
}

// NamedModule is a module with its dotted name.
type NamedModule struct {
	Name   string
	Module Module
}

func (b *Base) walk(prefix string, visit func(prefix string, m *Base)) {
	visit(prefix, b)
	for _, c := range b.children {
		c.v.base().walk(prefix+c.name+".", visit)
	}
}

// StateDict lists parameters and buffers under their dotted names, in
// PyTorch's order (each module's parameters, then its buffers, then its
// children). The tensors are the module's own: they share its storage and
// must not be released.
func (b *Base) StateDict() []NamedTensor {
	var out []NamedTensor
	b.walk("", func(prefix string, m *Base) {
		for _, p := range m.params {
			out = append(out, NamedTensor{prefix + p.name, p.v})
		}
		for _, p := range m.buffers {
			out = append(out, NamedTensor{prefix + p.name, p.v})
		}
	})
	return out
}

// LoadStateDict copies values into the module's parameters and buffers.
// With strict, keys missing from sd or unknown to the module are an error,
// as in PyTorch. Every shape is checked before anything is copied, so a
// failed load leaves the module unchanged. Values are converted to the
// parameters' types.
func (b *Base) LoadStateDict(sd map[string]*tensor.Tensor, strict bool) error {
	if _, _, err := CopyStateDict(b.StateDict(), sd, strict); err != nil {
		return fmt.Errorf("nn: error(s) in loading state_dict for %s:\n\t%w", b.typeName, err)
	}
	return nil
}

// CopyStateDict copies the tensors of sd into own's by name, as PyTorch's
// load_state_dict: with strict, names missing from sd or unknown in own
// are errors, and every shape must match. Everything is checked before
// anything is copied, so a failed load changes nothing; the error lists
// every problem, one per line, in PyTorch's words. Values are converted
// to the destination's type, without autograd.
func CopyStateDict(own []NamedTensor, sd map[string]*tensor.Tensor, strict bool) (missing, unexpected []string, err error) {
	var mismatched []string
	known := map[string]bool{}
	for _, p := range own {
		known[p.Name] = true
		src, ok := sd[p.Name]
		if !ok {
			missing = append(missing, p.Name)
			continue
		}
		if err := src.Err(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		if !slices.Equal(src.Shape(), p.Tensor.Shape()) {
			mismatched = append(mismatched, fmt.Sprintf("size mismatch for %s: copying a param with shape %v from checkpoint, the shape in current model is %v", p.Name, src.Shape(), p.Tensor.Shape()))
		}
	}
	for name := range sd {
		if !known[name] {
			unexpected = append(unexpected, name)
		}
	}
	sort.Strings(unexpected)
	if err := LoadStateDictError(strict, missing, unexpected, mismatched); err != nil {
		return missing, unexpected, err
	}
	for _, p := range own {
		src, ok := sd[p.Name]
		if !ok {
			continue
		}
		var err error
		p.Tensor.Runtime().NoGrad(func() { err = p.Tensor.CopyFrom(src) })
		if err != nil {
			return missing, unexpected, fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	return missing, unexpected, nil
}

// LoadStateDictError is load_state_dict's error in PyTorch's words, one
// problem a line: the keys the state dict lacks and those it has in excess
// (when strict), then the other problems (size mismatches). It is nil
// when there are none.
func LoadStateDictError(strict bool, missing, unexpected, problems []string) error {
	quote := func(names []string) string {
		q := make([]string, len(names))
		for i, n := range names {
			q[i] = fmt.Sprintf("%q", n)
		}
		return strings.Join(q, ", ")
	}
	var msgs []string
	if strict && len(missing) > 0 {
		msgs = append(msgs, "Missing key(s) in state_dict: "+quote(missing))
	}
	if strict && len(unexpected) > 0 {
		msgs = append(msgs, "Unexpected key(s) in state_dict: "+quote(unexpected))
	}
	if msgs = append(msgs, problems...); len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "\n\t"))
}

// Train sets training mode on the module and every descendant (dropout is
// active in training mode only).
func (b *Base) Train(on bool) {
	b.walk("", func(_ string, m *Base) { m.training = on })
}

// Eval is Train(false).
func (b *Base) Eval() { b.Train(false) }

// Training reports the module's mode.
func (b *Base) Training() bool { return b.training }

// ZeroGrad clears every parameter's gradient: released and set to nil when
// setToNone, zeroed in place otherwise (PyTorch 1.13's default).
func (b *Base) ZeroGrad(setToNone bool) error {
	for _, p := range b.Parameters() {
		if err := ZeroGradOf(p, setToNone); err != nil {
			return err
		}
	}
	return nil
}

// ZeroGradOf clears one parameter's gradient.
func ZeroGradOf(p *tensor.Tensor, setToNone bool) error {
	g := p.Grad()
	if g == nil {
		return nil
	}
	if setToNone {
		return p.SetGrad(nil)
	}
	var err error
	p.Runtime().NoGrad(func() { err = g.Zero() })
	return err
}

// To converts every floating-point parameter and buffer to the
// floating-point dtype dt in place, as PyTorch's module.to(dtype): each
// keeps its identity, so optimizers and hooks made before still hold it,
// and a gradient is converted too. Integer buffers are left alone.
// Training in bfloat16 this way, an optimizer keeps float32 master
// weights (optim.StateDType).
func (b *Base) To(dt tensor.DType) error {
	if !dt.IsFloat() {
		return fmt.Errorf("nn: module.to(%v): only a floating-point dtype converts a module", dt)
	}
	convert := func(kind string, all []NamedTensor) error {
		for _, e := range all {
			if !e.Tensor.DType().IsFloat() {
				continue
			}
			if err := e.Tensor.Retype(dt); err != nil {
				return fmt.Errorf("nn: module.to(%v): %s %q: %w", dt, kind, e.Name, err)
			}
		}
		return nil
	}
	if err := convert("parameter", b.NamedParameters()); err != nil {
		return err
	}
	return convert("buffer", b.NamedBuffers())
}

// NumParameters is the number of trainable scalars.
func (b *Base) NumParameters() int {
	n := 0
	for _, p := range b.Parameters() {
		n += p.Numel()
	}
	return n
}

// Repr prints the module tree like PyTorch's repr.
func Repr(root Module) string {
	var sb strings.Builder
	var rec func(m Module, indent string)
	rec = func(m Module, indent string) {
		mb := m.base()
		sb.WriteString(mb.typeName)
		if d, ok := m.(interface{ describe() string }); ok {
			sb.WriteString("(" + d.describe() + ")")
			return
		}
		if len(mb.children) == 0 {
			sb.WriteString("()")
			return
		}
		sb.WriteString("(\n")
		for _, c := range mb.children {
			sb.WriteString(indent + "  (" + c.name + "): ")
			rec(c.v, indent+"  ")
			sb.WriteString("\n")
		}
		sb.WriteString(indent + ")")
	}
	rec(root, "")
	return sb.String()
}
