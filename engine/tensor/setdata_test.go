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
