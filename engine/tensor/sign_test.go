package tensor_test

import (
	"math"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestSignAsPyTorch: sign is PyTorch's (0 < x) − (x < 0), so +0 for NaN
// and for −0, and abs's gradient (g·sign x) is 0 at NaN, as torch 1.13's
// (torch.sign(nan) is 0; x.abs().backward() leaves 0 there).
func TestSignAsPyTorch(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	x := rt.FromFloat64s([]float64{math.NaN(), math.Copysign(0, -1), 0, 2, -3}, 5).Persist()
	x.SetRequiresGrad(true)
	s, err := x.Sign().Float64s()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{0, 0, 0, 1, -1} {
		if s[i] != want || (want == 0 && math.Signbit(s[i])) {
			t.Errorf("sign(%v) = %v, want %v", []float64{math.NaN(), -0.0, 0, 2, -3}[i], s[i], want)
		}
	}
	if err := x.Abs().SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	g, _ := x.Grad().Float64s()
	if g[0] != 0 || g[3] != 1 || g[4] != -1 {
		t.Errorf("abs's gradient %v, want 0 at NaN, ±1 elsewhere", g)
	}
}

// TestZeroDimPromotion: a 0-dimensional operand takes part in type
// promotion like a number (torch.result_type): it changes the result's
// type only when it is of a higher category; gradients come back in each
// operand's own type.
func TestZeroDimPromotion(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	a := rt.FromValues(tensor.Float32, []float64{1, 2}, 2).Persist()
	a.SetRequiresGrad(true)
	s := rt.FromValues(tensor.Float64, []float64{3}).Persist()
	s.SetRequiresGrad(true)
	y := a.Mul(s)
	if y.DType() != tensor.Float32 {
		t.Fatalf("float32 [2] · float64 0-d: %v, PyTorch float32", y.DType())
	}
	if err := y.SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	if a.Grad().DType() != tensor.Float32 || s.Grad().DType() != tensor.Float64 {
		t.Errorf("gradients %v and %v, want each operand's type", a.Grad().DType(), s.Grad().DType())
	}
	if g, _ := s.Grad().Item(); g != 3 {
		t.Errorf("gradient of the 0-d factor %v, want 3", g)
	}
	for _, c := range []struct {
		a, b  tensor.DType
		bZero bool
		want  tensor.DType
	}{
		{tensor.Int32, tensor.Float64, true, tensor.Float64}, // a higher category wins
		{tensor.Float16, tensor.Int64, true, tensor.Float16},
		{tensor.Float32, tensor.Float64, false, tensor.Float64}, // both dimensioned: ordinary promotion
		{tensor.Int64, tensor.Int32, true, tensor.Int64},
	} {
		x := rt.Zeros(c.a, 2)
		var z *tensor.Tensor
		if c.bZero {
			z = rt.Zeros(c.b)
		} else {
			z = rt.Zeros(c.b, 2)
		}
		if got := x.Add(z).DType(); got != c.want {
			t.Errorf("%v [2] + %v (0-d %v): %v, want %v", c.a, c.b, c.bZero, got, c.want)
		}
	}
}
