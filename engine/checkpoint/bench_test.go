package checkpoint

import (
	"fmt"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// gpt2Shapes are the parameter shapes of GPT-2 124M (the output tied to
// wte): 148 tensors, 124.4M values.
func gpt2Shapes() [][]int {
	d := 768
	shapes := [][]int{{50257, d}, {1024, d}}
	for range 12 {
		shapes = append(shapes, []int{d}, []int{d}, []int{3 * d, d}, []int{3 * d}, []int{d, d}, []int{d},
			[]int{d}, []int{d}, []int{4 * d, d}, []int{4 * d}, []int{d, 4 * d}, []int{d})
	}
	return append(shapes, []int{d}, []int{d})
}

// BenchmarkSaveGPT2 saves GPT-2 124M's weights and AdamW state (1.49 GB)
// on one rank, files synced; bench/checkpoint.js is the same through
// the script API, beside PyTorch's torch.save.
func BenchmarkSaveGPT2(b *testing.B) {
	w, st, _ := gpt2State(b)
	defer w.Close()
	dir := b.TempDir()
	b.ResetTimer()
	for i := range b.N {
		if _, err := Save(w.Group(0), dir, int64(i), st, SaveOptions{Keep: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRestoreGPT2 loads what BenchmarkSaveGPT2 saves.
func BenchmarkRestoreGPT2(b *testing.B) {
	w, st, rt := gpt2State(b)
	defer w.Close()
	dir := b.TempDir()
	if _, err := Save(w.Group(0), dir, 1, st, SaveOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, _, err := Restore(w.Group(0), rt, dir, st); err != nil {
			b.Fatal(err)
		}
	}
}

// gpt2State is GPT-2 124M's parameters with AdamW's state after a step,
// on a world of one rank.
func gpt2State(b *testing.B) (*dist.World, *State, *tensor.Runtime) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	var params []*tensor.Tensor
	var named []nn.NamedTensor
	for i, sh := range gpt2Shapes() {
		p := rt.Randn(dtype.Float32, sh...).Persist()
		p.SetRequiresGrad(true)
		p.SetGrad(rt.Ones(dtype.Float32, sh...).Persist())
		params = append(params, p)
		named = append(named, nn.NamedTensor{Name: fmt.Sprintf("p%d", i), Tensor: p})
	}
	opt, err := optim.NewAdamW(params, optim.DefaultAdamW())
	if err != nil {
		b.Fatal(err)
	}
	if err := opt.Step(); err != nil {
		b.Fatal(err)
	}
	w, _ := dist.NewWorld(1, dist.Options{})
	st := &State{Modules: []Module{{Key: "model", Tensors: named}}, Optimizers: []Optimizer{{Key: "optimizer", Opt: opt}}}
	return w, st, rt
}
