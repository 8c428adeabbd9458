package tensor_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

func TestSetData(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	flat := rt.FromFloat32s([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 8).Persist()
	p := rt.Zeros(tensor.Float32, 2, 3).Persist()
	if err := p.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetData(flat.Narrow(0, 2, 6)); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Float32s(); !slices.Equal(got, []float32{3, 4, 5, 6, 7, 8}) {
		t.Fatalf("p = %v", got)
	}
	// Writes through the parameter land in the flat buffer and back.
	var err error
	rt.NoGrad(func() { err = p.MulScalarInPlace(2) })
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := flat.Float32s(); !slices.Equal(got, []float32{1, 2, 6, 8, 10, 12, 14, 16}) {
		t.Fatalf("flat = %v", got)
	}
	if !slices.Equal(p.Shape(), []int{2, 3}) || !p.RequiresGrad() {
		t.Fatalf("p lost its shape or requires_grad: %v %v", p.Shape(), p.RequiresGrad())
	}
	// The buffer outlives its own handle while p refers to it.
	flat.Release()
	if got, _ := p.Float32s(); got[0] != 6 {
		t.Fatalf("p after the flat handle was released = %v", got)
	}

	for _, tc := range []struct {
		name string
		src  *tensor.Tensor
		want string
	}{
		{"wrong size", rt.Zeros(tensor.Float32, 5), "cannot be set"},
		{"wrong dtype", rt.Zeros(tensor.Float64, 6), "cannot be set"},
		{"not contiguous", rt.Zeros(tensor.Float32, 3, 2).Transpose(0, 1), "contiguous: false"},
	} {
		if err := p.SetData(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestRetype(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	leaf := func() *tensor.Tensor {
		p := rt.FromFloat32s([]float32{1, 2.5, -3, 1.00390625}, 2, 2).Persist()
		p.SetName("w")
		_ = p.SetRequiresGrad(true)
		return p
	}
	for _, tc := range []struct {
		name    string
		make    func() *tensor.Tensor
		to      tensor.DType
		want    []float32 // after converting back to float32
		wantErr string
	}{
		{"bfloat16 rounds to nearest even", leaf, tensor.BFloat16, []float32{1, 2.5, -3, 1}, ""},
		{"float16 keeps these", leaf, tensor.Float16, []float32{1, 2.5, -3, 1.00390625}, ""},
		{"float64", leaf, tensor.Float64, []float32{1, 2.5, -3, 1.00390625}, ""},
		{"same dtype", leaf, tensor.Float32, []float32{1, 2.5, -3, 1.00390625}, ""},
		{"integer for a parameter", leaf, tensor.Int64, nil, "must stay floating-point"},
		{"not a leaf", func() *tensor.Tensor { return leaf().MulScalar(2) }, tensor.BFloat16, nil, "only leaves"},
		{"released", func() *tensor.Tensor { p := leaf(); p.Release(); return p }, tensor.BFloat16, nil, "released"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.make()
			if p.IsLeaf() {
				_ = p.SetGrad(rt.FromFloat32s([]float32{0.5, 1, 1.5, 2}, 2, 2))
			}
			err := p.Retype(tc.to)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.DType() != tc.to || !slices.Equal(p.Shape(), []int{2, 2}) || !p.RequiresGrad() || p.Name() != "w" {
				t.Fatalf("after retype: %v %v requires_grad=%v name=%q", p.DType(), p.Shape(), p.RequiresGrad(), p.Name())
			}
			if got, _ := p.To(tensor.Float32).Float32s(); !slices.Equal(got, tc.want) {
				t.Fatalf("values %v, want %v", got, tc.want)
			}
			if g := p.Grad(); g == nil || g.DType() != tc.to {
				t.Fatalf("gradient not converted: %v", g)
			}
			// Backward now accumulates in the new dtype.
			_ = p.SetGrad(nil)
			if err := p.SumAll().Backward(); err != nil {
				t.Fatal(err)
			}
			if g := p.Grad(); g == nil || g.DType() != tc.to {
				t.Fatalf("gradient after backward: %v", g)
			}
		})
	}
}
