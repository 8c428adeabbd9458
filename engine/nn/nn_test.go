package nn_test

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/nn/functional"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
)

func newRT(seed uint64) *tensor.Runtime { return tensor.NewRuntime(cpu.New(cpu.Options{}), seed) }

func readmeMLP(t *testing.T, rt *tensor.Runtime) *nn.Sequential {
	t.Helper()
	l1, err := nn.NewLinear(rt, 16, 32, true)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := nn.NewLinear(rt, 32, 32, true)
	l3, _ := nn.NewLinear(rt, 32, 4, true)
	m, err := nn.NewSequential(l1, nn.GELU(""), l2, nn.ReLU(), l3)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fixtures(t *testing.T, rt *tensor.Runtime) (map[string]*tensor.Tensor, map[string]string) {
	t.Helper()
	ts, meta, err := tensorio.LoadSafetensors(rt, "testdata/nn.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return tensorio.Map(ts), meta
}

func assertClose(t *testing.T, name string, got, want *tensor.Tensor, rtol, atol float64) {
	t.Helper()
	if !slices.Equal(got.Shape(), want.Shape()) {
		t.Fatalf("%s: shape %v, want %v", name, got.Shape(), want.Shape())
	}
	g, err := got.Float64s()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	w, _ := want.Float64s()
	for i := range g {
		if math.Abs(g[i]-w[i]) > atol+rtol*math.Abs(w[i]) {
			t.Fatalf("%s[%d] = %.9g, PyTorch %.9g", name, i, g[i], w[i])
		}
	}
}

// TestMLPMatchesPyTorch builds the README's MLP after seeding like
// torch.manual_seed(0): the initial weights are PyTorch's bit for bit, and
// the forward and backward agree to float32 rounding.
func TestMLPMatchesPyTorch(t *testing.T) {
	rt := newRT(0)
	m := readmeMLP(t, rt)
	fx, meta := fixtures(t, rt)
	var names []string
	if err := json.Unmarshal([]byte(meta["names"]), &names); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range m.StateDict() {
		got = append(got, p.Name)
		assertClose(t, "init "+p.Name, p.Tensor, fx["model/"+p.Name], 0, 0)
	}
	if !slices.Equal(got, names) {
		t.Fatalf("state dict names %v, PyTorch %v", got, names)
	}
	// The batch is drawn from the same generator after the model, as in
	// the script.
	x := rt.Randn(tensor.Float32, 8, 16)
	assertClose(t, "randn after init", x, fx["x"], 0, 0)
	logits := m.Forward(x)
	assertClose(t, "logits", logits, fx["logits"], 1e-5, 1e-6)
	loss := tensor.CrossEntropy(logits, fx["y"], tensor.DefaultCrossEntropy)
	assertClose(t, "loss", loss.Reshape(1), fx["loss"], 1e-5, 1e-6)
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.NamedParameters() {
		assertClose(t, "grad "+p.Name, p.Tensor.Grad(), fx["grad/"+p.Name], 1e-5, 1e-6)
	}
}

func TestEmbeddingAndLayerNormInit(t *testing.T) {
	rt := newRT(7)
	fx, _ := fixtures(t, rt)
	e, err := nn.NewEmbedding(rt, 10, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "embedding", e.Weight, fx["embedding/weight"], 0, 0)
	ln, err := nn.NewLayerNorm(rt, []int{3, 4}, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "layernorm weight", ln.Weight, fx["layernorm/weight"], 0, 0)
	assertClose(t, "layernorm bias", ln.Bias, fx["layernorm/bias"], 0, 0)
	// padding_idx rows get no gradient.
	out := e.Forward(rt.FromInt64s([]int64{2, 3, 2}))
	if err := out.SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	g, _ := e.Weight.Grad().Float32s()
	for j := 0; j < 8; j++ {
		if g[2*8+j] != 0 || g[3*8+j] != 1 {
			t.Fatalf("embedding grad rows 2/3: %v / %v", g[16:24], g[24:32])
		}
	}
}

// block is a GPT-style module, to check nested names.
type block struct {
	nn.Base
	ln1 *nn.LayerNorm
	fc  *nn.Linear
}

func newBlock(t *testing.T, rt *tensor.Runtime) *block {
	b := &block{}
	b.Init("Block")
	var err error
	if b.ln1, err = nn.NewLayerNorm(rt, []int{4}, 0, true); err != nil {
		t.Fatal(err)
	}
	if b.fc, err = nn.NewLinear(rt, 4, 4, false); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterModule("ln1", b.ln1); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterModule("fc", b.fc); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNamesStateDictAndModes(t *testing.T) {
	rt := newRT(0)
	blocks, _ := nn.NewModuleList()
	for i := 0; i < 3; i++ {
		if err := blocks.Append(newBlock(t, rt)); err != nil {
			t.Fatal(err)
		}
	}
	type gpt struct{ nn.Base }
	g := &gpt{}
	g.Init("GPT")
	if err := g.RegisterModule("blocks", blocks); err != nil {
		t.Fatal(err)
	}
	drop, _ := nn.NewDropout(rt, 0.5)
	if err := g.RegisterModule("drop", drop); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range g.NamedParameters() {
		names = append(names, p.Name)
	}
	want := []string{"blocks.0.ln1.weight", "blocks.0.ln1.bias", "blocks.0.fc.weight", "blocks.1.ln1.weight",
		"blocks.1.ln1.bias", "blocks.1.fc.weight", "blocks.2.ln1.weight", "blocks.2.ln1.bias", "blocks.2.fc.weight"}
	if !slices.Equal(names, want) {
		t.Fatalf("names %v", names)
	}
	if g.NumParameters() != 3*(4+4+16) {
		t.Fatalf("NumParameters %d", g.NumParameters())
	}
	g.Eval()
	if drop.Training() || blocks.Training() {
		t.Fatal("Eval did not reach every module")
	}
	x := rt.Ones(tensor.Float32, 10)
	if v, _ := drop.Forward(x).SumAll().Item(); v != 10 {
		t.Fatalf("dropout in eval mode changed the input: sum %v", v)
	}
	g.Train(true)
	if v, _ := drop.Forward(x).SumAll().Item(); v == 10 {
		t.Fatal("dropout in training mode kept every element")
	}
	if err := g.RegisterModule("blocks", blocks); err == nil {
		t.Fatal("duplicate name accepted")
	}
	if err := g.RegisterModule("a.b", blocks); err == nil {
		t.Fatal("dotted name accepted")
	}
}

func TestLoadStateDict(t *testing.T) {
	rt := newRT(0)
	m := readmeMLP(t, rt)
	other := readmeMLP(t, rt) // different weights (the generator advanced)
	sd := map[string]*tensor.Tensor{}
	for _, p := range other.StateDict() {
		sd[p.Name] = p.Tensor
	}
	if err := m.LoadStateDict(sd, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.StateDict() {
		assertClose(t, p.Name, p.Tensor, sd[p.Name], 0, 0)
	}

	before, _ := m.StateDict()[0].Tensor.Float32s()
	bad := map[string]*tensor.Tensor{}
	for k, v := range sd {
		bad[k] = v
	}
	bad["0.weight"] = rt.Zeros(tensor.Float32, 5, 5)
	bad["9.weight"] = rt.Zeros(tensor.Float32, 1)
	delete(bad, "4.bias")
	err := m.LoadStateDict(bad, true)
	for _, want := range []string{`Missing key(s) in state_dict: "4.bias"`, `Unexpected key(s) in state_dict: "9.weight"`, "size mismatch for 0.weight"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	after, _ := m.StateDict()[0].Tensor.Float32s()
	if !slices.Equal(before, after) {
		t.Fatal("a failed load changed the parameters")
	}
	// Non-strict loading ignores missing and unexpected keys.
	delete(bad, "0.weight")
	if err := m.LoadStateDict(bad, false); err != nil {
		t.Fatalf("non-strict load: %v", err)
	}
}

func TestZeroGrad(t *testing.T) {
	rt := newRT(0)
	m := readmeMLP(t, rt)
	x := rt.Randn(tensor.Float32, 2, 16)
	if err := m.Forward(x).SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	if err := m.ZeroGrad(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Parameters() {
		if v, _ := p.Grad().Abs().SumAll().Item(); v != 0 {
			t.Fatalf("%s: gradient not zeroed", p.Name())
		}
	}
	if err := m.ZeroGrad(true); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Parameters() {
		if p.Grad() != nil {
			t.Fatalf("%s: gradient not cleared", p.Name())
		}
	}
}

// TestDropoutMatchesPyTorch: after the same seed, the same mask, the same
// scaled outputs and the same gradient as F.dropout(x, 0.3, training=True).
func TestDropoutMatchesPyTorch(t *testing.T) {
	rt := newRT(3)
	fx, _ := fixtures(t, rt)
	x := rt.Randn(tensor.Float32, 64)
	assertClose(t, "x", x, fx["dropout/x"], 0, 0)
	if err := x.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	y := functional.Dropout(x, 0.3, true)
	assertClose(t, "dropout", y, fx["dropout/y"], 0, 0)
	if err := y.SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "dropout grad", x.Grad(), fx["dropout/grad"], 0, 0)
}

// module.to(dtype) converts floating-point parameters and buffers in
// place and leaves integer buffers alone, as PyTorch does.
func TestModuleTo(t *testing.T) {
	rt := newRT(0)
	b := newBlock(t, rt)
	if err := b.RegisterBuffer("scale", rt.Ones(tensor.Float32, 4).Persist()); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterBuffer("count", rt.Zeros(tensor.Int64, 1).Persist()); err != nil {
		t.Fatal(err)
	}
	before := b.Parameters()
	if err := b.To(tensor.BFloat16); err != nil {
		t.Fatal(err)
	}
	for i, p := range b.NamedParameters() {
		if p.Tensor != before[i] || p.Tensor.DType() != tensor.BFloat16 || !p.Tensor.RequiresGrad() {
			t.Errorf("%s: %v, requires_grad %v, same tensor %v", p.Name, p.Tensor.DType(), p.Tensor.RequiresGrad(), p.Tensor == before[i])
		}
	}
	want := map[string]tensor.DType{"scale": tensor.BFloat16, "count": tensor.Int64}
	for _, e := range b.NamedBuffers() {
		if e.Tensor.DType() != want[e.Name] {
			t.Errorf("buffer %s is %v, want %v", e.Name, e.Tensor.DType(), want[e.Name])
		}
	}
	x := rt.Ones(tensor.BFloat16, 2, 4)
	if y := b.fc.Forward(b.ln1.Forward(x)); y.Err() != nil || y.DType() != tensor.BFloat16 {
		t.Fatalf("forward in bfloat16: %v %v", y.DType(), y.Err())
	}
	if err := b.To(tensor.Int32); err == nil || !strings.Contains(err.Error(), "floating-point") {
		t.Fatalf("to(int32): %v", err)
	}
}
