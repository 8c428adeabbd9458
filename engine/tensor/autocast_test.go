package tensor_test

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestAutocastMatchesPyTorch: a block of linear layers, GELU, a residual,
// layer norm, a softmax attention and cross-entropy run under
// Autocast(BFloat16) gives the loss and float32 gradients PyTorch gives
// with CUDA autocast's casts (testdata/autocast/gen.py): products in
// bfloat16, softmax, layer norm, the loss and sums in float32, a float32
// residual stream. The tolerances are bfloat16's: the two libraries may
// round a product's last bit differently.
func TestAutocastMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/autocast/autocast.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		X       [][]float64
		Target  []int64
		Weights map[string]any
		Loss    float64
		Grads   map[string]any
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	leaf := func(v any) *tensor.Tensor {
		flat, shape := flatten(v)
		p := rt.FromValues(tensor.Float32, flat, shape...).Persist()
		p.SetRequiresGrad(true)
		return p
	}
	x := leaf(fx.X)
	w := map[string]*tensor.Tensor{}
	for k, v := range fx.Weights {
		w[k] = leaf(v)
	}
	target := rt.FromInt64s(fx.Target, len(fx.Target))
	var loss, logits, r2 *tensor.Tensor
	err = rt.Autocast(tensor.BFloat16, func() error {
		h := tensor.Linear(x, w["w1"], w["b1"]).Gelu("none")
		h = tensor.Linear(h, w["w2"], w["b2"])
		r := x.Add(h)
		n := tensor.LayerNorm(r, []int{16}, w["lnw"], w["lnb"], 1e-5)
		p := n.Matmul(n.T()).Softmax(-1)
		r2 = r.Add(p.Matmul(n))
		logits = tensor.Linear(r2, w["wout"], nil)
		loss = tensor.CrossEntropy(logits, target, tensor.DefaultCrossEntropy).Add(r2.SumAll().MulScalar(1e-3))
		return loss.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if logits.DType() != tensor.BFloat16 || r2.DType() != tensor.Float32 || loss.DType() != tensor.Float32 {
		t.Errorf("types: logits %v (PyTorch bfloat16), residual %v (float32), loss %v (float32)", logits.DType(), r2.DType(), loss.DType())
	}
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	got, _ := loss.Item()
	if math.Abs(got-fx.Loss) > 2e-3*math.Abs(fx.Loss) {
		t.Errorf("loss %v, PyTorch %v", got, fx.Loss)
	}
	params := map[string]*tensor.Tensor{"x": x}
	for k, v := range w {
		params[k] = v
	}
	for name, p := range params {
		if p.Grad() == nil || p.Grad().DType() != tensor.Float32 {
			t.Errorf("%s: gradient %v, want a float32 one", name, p.Grad())
			continue
		}
		g, _ := p.Grad().Float64s()
		want, _ := flatten(fx.Grads[name])
		scale := 0.0
		for _, v := range want {
			scale = max(scale, math.Abs(v))
		}
		for i := range want {
			if math.Abs(g[i]-want[i]) > 2e-2*scale {
				t.Errorf("%s: gradient[%d] %v, PyTorch %v (largest %v)", name, i, g[i], want[i], scale)
				break
			}
		}
	}
}

// TestAutocastScope: outside a region nothing is cast; a weight's cast is
// made once per region and reused; float64 is left alone; backward runs
// without autocast; a region of another type is an error.
func TestAutocastScope(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	w := rt.Ones(tensor.Float32, 4, 4).Persist()
	w.SetRequiresGrad(true)
	x := rt.Ones(tensor.Float32, 2, 4)
	if got := x.Matmul(w).DType(); got != tensor.Float32 {
		t.Errorf("outside autocast: %v", got)
	}
	var y *tensor.Tensor
	if err := rt.Autocast(tensor.Float16, func() error {
		live := rt.Stats().LiveTensors
		a := x.Matmul(w)
		first := rt.Stats().LiveTensors - live
		b := x.Matmul(w) // w's cast is reused: one tensor fewer
		if second := rt.Stats().LiveTensors - live - first; first-second != 1 {
			t.Errorf("the first product under a region made %d tensors, the second %d: want one fewer (the weight's cast reused)", first, second)
		}
		y = a.Add(b).SumAll()
		if d := rt.FromFloat64s([]float64{1, 2}, 1, 2).Matmul(rt.FromFloat64s([]float64{1, 2}, 2, 1)); d.DType() != tensor.Float64 {
			t.Errorf("float64 under autocast: %v", d.DType())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.AutocastType(); ok {
		t.Error("autocast still on after its region")
	}
	if y.DType() != tensor.Float32 {
		t.Errorf("a sum under autocast: %v, want float32", y.DType())
	}
	if err := y.Backward(); err != nil || w.Grad().DType() != tensor.Float32 {
		t.Fatalf("backward: %v, weight gradient %v", err, w.Grad())
	}
	if g, _ := w.Grad().Float64s(); !slices.Equal(g, slices.Repeat([]float64{4}, 16)) {
		t.Errorf("weight gradient %v, want 4 everywhere (two products, two rows)", g)
	}
	if err := rt.Autocast(tensor.Float32, func() error { return nil }); err == nil {
		t.Error("an autocast region of float32 was accepted")
	}
}

// flatten turns nested JSON arrays of numbers into values and a shape.
func flatten(v any) ([]float64, []int) {
	switch x := v.(type) {
	case float64:
		return []float64{x}, nil
	case []any:
		var out []float64
		var inner []int
		for _, e := range x {
			f, s := flatten(e)
			out = append(out, f...)
			inner = s
		}
		return out, append([]int{len(x)}, inner...)
	case [][]float64:
		var out []float64
		for _, row := range x {
			out = append(out, row...)
		}
		return out, []int{len(x), len(x[0])}
	}
	panic("fixture: not numbers")
}
