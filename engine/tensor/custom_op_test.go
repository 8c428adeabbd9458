package tensor_test

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestFunction: a custom op's backward gives its inputs' gradients, and
// its result must come from outside autograd.
func TestFunction(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
	x := rt.FromFloat64s([]float64{1, 2, 3}, 3)
	if err := x.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	var out *tensor.Tensor
	rt.NoGrad(func() { out = x.MulScalar(2) })
	y := tensor.Function("Double", out, []*tensor.Tensor{x}, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g.MulScalar(2)}
	})
	if !y.RequiresGrad() || y.IsLeaf() {
		t.Fatal("the custom op's result is not recorded")
	}
	if err := y.Mul(rt.FromFloat64s([]float64{1, 10, 100}, 3)).SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	got, err := x.Grad().Float64s()
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{2, 20, 200}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("gradient %v, want %v", got, want)
	}

	recorded := x.MulScalar(2)
	if err := tensor.Function("Bad", recorded, []*tensor.Tensor{x}, nil).Err(); err == nil || !strings.Contains(err.Error(), "outside autograd") {
		t.Errorf("a recorded result: error %v, want one saying it must be made outside autograd", err)
	}
}
