package nn

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zeroeng/zeroeng/engine/rand"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Linear is y = x·Wᵀ + b with weight [out, in] and bias [out]
// (torch.nn.Linear), initialised as PyTorch does from the runtime's
// generator (kaiming-uniform weight, uniform bias).
type Linear struct {
	Base
	Weight, Bias *tensor.Tensor
	In, Out      int
}

// NewLinear makes a Linear layer on rt; bias may be false.
func NewLinear(rt *tensor.Runtime, in, out int, bias bool) (*Linear, error) {
	if err := tensor.CheckShape(tensor.Float32, out, in); err != nil {
		return nil, fmt.Errorf("nn: Linear(%d, %d): %w", in, out, err)
	}
	l := &Linear{In: in, Out: out}
	l.Init("Linear")
	w := make([]float32, in*out)
	var b []float32
	if bias {
		b = make([]float32, out)
	}
	rand.LinearInit(rt.Generator(), w, b, in, out)
	l.Weight = rt.FromFloat32s(w, out, in)
	if err := l.RegisterParameter("weight", l.Weight); err != nil {
		return nil, err
	}
	if bias {
		l.Bias = rt.FromFloat32s(b, out)
		if err := l.RegisterParameter("bias", l.Bias); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Forward implements Layer.
func (l *Linear) Forward(x *tensor.Tensor) *tensor.Tensor { return tensor.Linear(x, l.Weight, l.Bias) }

func (l *Linear) describe() string {
	return fmt.Sprintf("in_features=%d, out_features=%d, bias=%s", l.In, l.Out, pyBool(l.Bias != nil))
}

// Embedding is a lookup table [num, dim] (torch.nn.Embedding), initialised
// from N(0, 1) as PyTorch does; rows at PaddingIdx (when >= 0) start at zero
// and get no gradient.
type Embedding struct {
	Base
	Weight     *tensor.Tensor
	Num, Dim   int
	PaddingIdx int64
}

// NewEmbedding makes an Embedding; paddingIdx < 0 means none (negative
// indices in PyTorch's sense are not supported: pass the row number).
func NewEmbedding(rt *tensor.Runtime, num, dim int, paddingIdx int64) (*Embedding, error) {
	if err := tensor.CheckShape(tensor.Float32, num, dim); err != nil {
		return nil, fmt.Errorf("nn: Embedding(%d, %d): %w", num, dim, err)
	}
	if paddingIdx >= int64(num) {
		return nil, fmt.Errorf("nn: Embedding: padding_idx %d must be within num_embeddings %d", paddingIdx, num)
	}
	e := &Embedding{Num: num, Dim: dim, PaddingIdx: paddingIdx}
	e.Init("Embedding")
	w := make([]float32, num*dim)
	rand.EmbeddingInit(rt.Generator(), w, num, dim)
	if paddingIdx >= 0 {
		clear(w[int(paddingIdx)*dim : int(paddingIdx+1)*dim])
	}
	e.Weight = rt.FromFloat32s(w, num, dim)
	if err := e.RegisterParameter("weight", e.Weight); err != nil {
		return nil, err
	}
	return e, nil
}

// Forward implements Layer: indices of any shape give indices.shape + [dim].
func (e *Embedding) Forward(idx *tensor.Tensor) *tensor.Tensor {
	return tensor.Embedding(idx, e.Weight, e.PaddingIdx)
}

func (e *Embedding) describe() string { return fmt.Sprintf("%d, %d", e.Num, e.Dim) }

// LayerNorm normalises over the trailing Shape dimensions
// (torch.nn.LayerNorm); weight starts at ones and bias at zeros.
type LayerNorm struct {
	Base
	Weight, Bias *tensor.Tensor
	Shape        []int
	Eps          float64
}

// NewLayerNorm makes a LayerNorm; eps is PyTorch's 1e-5 by default (pass
// 0 for it), affine adds the weight and bias.
func NewLayerNorm(rt *tensor.Runtime, shape []int, eps float64, affine bool) (*LayerNorm, error) {
	if eps == 0 {
		eps = 1e-5
	}
	l := &LayerNorm{Shape: append([]int(nil), shape...), Eps: eps}
	l.Init("LayerNorm")
	if affine {
		l.Weight = rt.Ones(tensor.Float32, shape...)
		l.Bias = rt.Zeros(tensor.Float32, shape...)
		if err := l.RegisterParameter("weight", l.Weight); err != nil {
			return nil, err
		}
		if err := l.RegisterParameter("bias", l.Bias); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Forward implements Layer.
func (l *LayerNorm) Forward(x *tensor.Tensor) *tensor.Tensor {
	return tensor.LayerNorm(x, l.Shape, l.Weight, l.Bias, l.Eps)
}

func (l *LayerNorm) describe() string {
	shape := strings.Trim(strings.ReplaceAll(fmt.Sprint(l.Shape), " ", ", "), "[]")
	if len(l.Shape) == 1 {
		shape += ","
	}
	return fmt.Sprintf("(%s), eps=%g, elementwise_affine=%s", shape, l.Eps, pyBool(l.Weight != nil))
}

// Dropout zeroes elements with probability P in training mode
// (torch.nn.Dropout), drawing from the runtime's generator.
type Dropout struct {
	Base
	P  float64
	rt *tensor.Runtime
}

// NewDropout makes a Dropout layer.
func NewDropout(rt *tensor.Runtime, p float64) (*Dropout, error) {
	if p < 0 || p > 1 {
		return nil, fmt.Errorf("nn: dropout probability has to be between 0 and 1, but got %v", p)
	}
	d := &Dropout{P: p, rt: rt}
	d.Init("Dropout")
	return d, nil
}

// Forward implements Layer.
func (d *Dropout) Forward(x *tensor.Tensor) *tensor.Tensor {
	return tensor.Dropout(x, d.P, d.training, d.rt.Generator())
}

func (d *Dropout) describe() string { return fmt.Sprintf("p=%g, inplace=False", d.P) }

// pyBool spells a boolean as Python prints it, for reprs that match
// PyTorch's.
func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// Activation is a parameter-free elementwise layer.
type Activation struct {
	Base
	fn   func(*tensor.Tensor) *tensor.Tensor
	desc string
}

func newActivation(name, desc string, fn func(*tensor.Tensor) *tensor.Tensor) *Activation {
	a := &Activation{fn: fn, desc: desc}
	a.Init(name)
	return a
}

// Forward implements Layer.
func (a *Activation) Forward(x *tensor.Tensor) *tensor.Tensor { return a.fn(x) }

func (a *Activation) describe() string { return a.desc }

// ReLU, GELU, SiLU, Tanh and Sigmoid are the activation layers.
func ReLU() *Activation { return newActivation("ReLU", "", (*tensor.Tensor).Relu) }

// GELU takes approximate "none" (default when "") or "tanh".
func GELU(approximate string) *Activation {
	if approximate == "" {
		approximate = "none"
	}
	desc := ""
	if approximate != "none" {
		desc = fmt.Sprintf("approximate='%s'", approximate)
	}
	return newActivation("GELU", desc, func(x *tensor.Tensor) *tensor.Tensor { return x.Gelu(approximate) })
}
func SiLU() *Activation    { return newActivation("SiLU", "", (*tensor.Tensor).Silu) }
func Tanh() *Activation    { return newActivation("Tanh", "", (*tensor.Tensor).Tanh) }
func Sigmoid() *Activation { return newActivation("Sigmoid", "", (*tensor.Tensor).Sigmoid) }

// Sequential chains layers; they are named "0", "1", ... as in PyTorch.
type Sequential struct {
	Base
	Layers []Layer
}

// NewSequential chains layers.
func NewSequential(layers ...Layer) (*Sequential, error) {
	s := &Sequential{}
	s.Init("Sequential")
	for _, l := range layers {
		if err := s.Append(l); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Append adds a layer at the end.
func (s *Sequential) Append(l Layer) error {
	if err := s.RegisterModule(strconv.Itoa(len(s.Layers)), l); err != nil {
		return err
	}
	s.Layers = append(s.Layers, l)
	return nil
}

// Forward implements Layer.
func (s *Sequential) Forward(x *tensor.Tensor) *tensor.Tensor {
	for _, l := range s.Layers {
		x = l.Forward(x)
	}
	return x
}

// ModuleList holds modules named "0", "1", ... (torch.nn.ModuleList).
type ModuleList struct {
	Base
	Modules []Module
}

// NewModuleList makes a ModuleList.
func NewModuleList(ms ...Module) (*ModuleList, error) {
	l := &ModuleList{}
	l.Init("ModuleList")
	for _, m := range ms {
		if err := l.Append(m); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Append adds a module at the end.
func (l *ModuleList) Append(m Module) error {
	if err := l.RegisterModule(strconv.Itoa(len(l.Modules)), m); err != nil {
		return err
	}
	l.Modules = append(l.Modules, m)
	return nil
}
