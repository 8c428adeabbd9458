package tensor_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestLinearEmptyFeatures: a linear layer of 0 input features (or 0
// outputs, or 0 rows) gives PyTorch's result — the bias, or zeros — and
// gradients of its operands' shapes, the bias's the sum of the output's
// gradient over the rows; its backward once took the rows to be
// numel / in_features, 0 for 0 features, and failed reshaping.
func TestLinearEmptyFeatures(t *testing.T) {
	for _, c := range []struct {
		x       []int
		in, out int
		bias    bool
	}{
		{[]int{1, 0}, 0, 5, false},
		{[]int{2, 3, 0}, 0, 4, true},
		{[]int{3, 2}, 2, 0, true},
		{[]int{0, 2}, 2, 3, true},
	} {
		t.Run(fmt.Sprintf("x%v_out%d_bias%v", c.x, c.out, c.bias), func(t *testing.T) {
			rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
			x := rt.Randn(tensor.Float32, c.x...).Persist()
			x.SetRequiresGrad(true)
			w := rt.Randn(tensor.Float32, c.out, c.in).Persist()
			w.SetRequiresGrad(true)
			var b *tensor.Tensor
			if c.bias {
				b = rt.Full(tensor.Float32, 2, c.out).Persist()
				b.SetRequiresGrad(true)
			}
			y := tensor.Linear(x, w, b)
			if err := y.Err(); err != nil {
				t.Fatal(err)
			}
			wantShape := append(slices.Clone(c.x[:len(c.x)-1]), c.out)
			if !slices.Equal(y.Shape(), wantShape) {
				t.Fatalf("output shape %v, want %v", y.Shape(), wantShape)
			}
			ys, _ := y.Float64s()
			for i, v := range ys {
				want := 0.0
				if c.bias && c.in == 0 {
					want = 2
				}
				if c.in == 0 && v != want {
					t.Fatalf("output %d is %v, want %v", i, v, want)
				}
			}
			if err := y.SumAll().Backward(); err != nil {
				t.Fatal(err)
			}
			if g := x.Grad(); g == nil || !slices.Equal(g.Shape(), c.x) {
				t.Errorf("input gradient %v, want shape %v", g, c.x)
			}
			if g := w.Grad(); g == nil || !slices.Equal(g.Shape(), []int{c.out, c.in}) {
				t.Errorf("weight gradient %v, want shape [%d %d]", g, c.out, c.in)
			}
			if c.bias {
				rows := 1
				for _, e := range c.x[:len(c.x)-1] {
					rows *= e
				}
				gb, err := b.Grad().Float64s()
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range gb {
					if v != float64(rows) {
						t.Errorf("bias gradient %d is %v, want %d (the rows)", i, v, rows)
					}
				}
			}
		})
	}
}
