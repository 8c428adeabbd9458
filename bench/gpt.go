package bench

import (
	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// GPTConfig sizes the `gpt` workload (torch_cpu.py: vocab 512, T 128, d
// 256, 4 layers, 4 heads).
type GPTConfig struct{ Vocab, T, D, Layers, Heads int }

// DefaultGPT is bench/torch_cpu.py's configuration.
var DefaultGPT = GPTConfig{Vocab: 512, T: 128, D: 256, Layers: 4, Heads: 4}

type block struct {
	nn.Base
	ln1, ln2           *nn.LayerNorm
	qkv, proj, fc, out *nn.Linear
	heads              int
}

func newBlock(rt *tensor.Runtime, d, heads int) (*block, error) {
	b := &block{heads: heads}
	b.Init("Block")
	var err error
	// Registration order follows torch_cpu.py's Block.__init__, so that the
	// parameters (and their initial values) come in PyTorch's order.
	mk := []func() error{
		func() error { b.ln1, err = nn.NewLayerNorm(rt, []int{d}, 0, true); return err },
		func() error { b.qkv, err = nn.NewLinear(rt, d, 3*d, true); return err },
		func() error { b.proj, err = nn.NewLinear(rt, d, d, true); return err },
		func() error { b.ln2, err = nn.NewLayerNorm(rt, []int{d}, 0, true); return err },
		func() error { b.fc, err = nn.NewLinear(rt, d, 4*d, true); return err },
		func() error { b.out, err = nn.NewLinear(rt, 4*d, d, true); return err },
	}
	for _, f := range mk {
		if err := f(); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		name string
		m    nn.Module
	}{{"ln1", b.ln1}, {"qkv", b.qkv}, {"proj", b.proj}, {"ln2", b.ln2}, {"fc", b.fc}, {"out", b.out}} {
		if err := b.RegisterModule(c.name, c.m); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Forward is torch_cpu.py's Block.forward with the fused causal attention.
func (b *block) Forward(x *tensor.Tensor) *tensor.Tensor {
	B, T, C := x.Size(0), x.Size(1), x.Size(2)
	hd := C / b.heads
	qkv := b.qkv.Forward(b.ln1.Forward(x)).Split(C, 2)
	heads := func(t *tensor.Tensor) *tensor.Tensor { return t.View(B, T, b.heads, hd).Transpose(1, 2) }
	y := tensor.ScaledDotProductAttention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true)
	y = y.Transpose(1, 2).Contiguous().View(B, T, C)
	x = x.Add(b.proj.Forward(y))
	return x.Add(b.out.Forward(b.fc.Forward(b.ln2.Forward(x)).Gelu("tanh")))
}

// GPT is the `gpt` workload's model: token and position embeddings, pre-LN
// blocks, a final LayerNorm and the output tied to the token embedding.
type GPT struct {
	nn.Base
	wte, wpe *nn.Embedding
	blocks   *nn.ModuleList
	lnf      *nn.LayerNorm
	pos      *tensor.Tensor
}

// NewGPT builds the model on rt.
func NewGPT(rt *tensor.Runtime, c GPTConfig) (*GPT, error) {
	g := &GPT{}
	g.Init("GPT")
	var err error
	if g.wte, err = nn.NewEmbedding(rt, c.Vocab, c.D, -1); err != nil {
		return nil, err
	}
	if g.wpe, err = nn.NewEmbedding(rt, c.T, c.D, -1); err != nil {
		return nil, err
	}
	g.blocks, _ = nn.NewModuleList()
	for i := 0; i < c.Layers; i++ {
		b, err := newBlock(rt, c.D, c.Heads)
		if err != nil {
			return nil, err
		}
		if err := g.blocks.Append(b); err != nil {
			return nil, err
		}
	}
	if g.lnf, err = nn.NewLayerNorm(rt, []int{c.D}, 0, true); err != nil {
		return nil, err
	}
	for _, m := range []struct {
		name string
		m    nn.Module
	}{{"wte", g.wte}, {"wpe", g.wpe}, {"blocks", g.blocks}, {"lnf", g.lnf}} {
		if err := g.RegisterModule(m.name, m.m); err != nil {
			return nil, err
		}
	}
	g.pos = rt.Arange(tensor.Int64, 0, float64(c.T), 1).Persist()
	return g, nil
}

// Forward maps token ids [B, T] to logits [B, T, vocab].
func (g *GPT) Forward(idx *tensor.Tensor) *tensor.Tensor {
	T := idx.Size(1)
	x := g.wte.Forward(idx).Add(g.wpe.Forward(g.pos.Narrow(0, 0, T)))
	for _, b := range g.blocks.Modules {
		x = b.(*block).Forward(x)
	}
	return g.lnf.Forward(x).Matmul(g.wte.Weight.T())
}

// GPTWorkload is the `gpt` train step: AdamW(lr 1e-4), cross entropy over
// B·T tokens.
type GPTWorkload struct {
	RT       *tensor.Runtime
	Model    *GPT
	Opt      *optim.Optimizer
	Idx, Tgt *tensor.Tensor
	cfg      GPTConfig
}

// NewGPTWorkload builds the workload with batch B.
func NewGPTWorkload(c GPTConfig, B int) (*GPTWorkload, error) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	m, err := NewGPT(rt, c)
	if err != nil {
		return nil, err
	}
	cfg := optim.DefaultAdamW()
	cfg.LR = 1e-4
	opt, err := optim.NewAdamW(m.Parameters(), cfg)
	if err != nil {
		return nil, err
	}
	idx := rt.Randint(0, int64(c.Vocab), B, c.T).Persist()
	tgt := rt.Randint(0, int64(c.Vocab), B, c.T).Persist()
	return &GPTWorkload{rt, m, opt, idx, tgt, c}, nil
}

// Step runs one training step and returns the loss.
func (w *GPTWorkload) Step() error {
	sc := w.RT.OpenScope()
	defer sc.Close()
	if err := w.Opt.ZeroGrad(false); err != nil {
		return err
	}
	logits := w.Model.Forward(w.Idx)
	loss := tensor.CrossEntropy(logits.View(-1, w.cfg.Vocab), w.Tgt.View(-1), tensor.DefaultCrossEntropy)
	if err := loss.Backward(); err != nil {
		return err
	}
	return w.Opt.Step()
}

// RunGPT measures the gpt workload.
func RunGPT() (Result, error) {
	w, err := NewGPTWorkload(DefaultGPT, 8)
	if err != nil {
		return Result{}, err
	}
	r, err := measure("gpt", w.RT, w.Step)
	r.TokensPerS = round1(8 * 128 / r.StepMsMedian * 1e3)
	return r, err
}
