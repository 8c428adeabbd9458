package tensor_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestMulScalarFrom: t.MulScalarFrom(src, s) writes the bits src.MulScalar(s)
// computes, in every float dtype and through a strided output, and refuses
// a source of another shape or dtype, naming both.
func TestMulScalarFrom(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64, tensor.BFloat16, tensor.Float16} {
		for _, s := range []float64{1.0 / 3, 0.5, -7} {
			t.Run(fmt.Sprintf("%v/%g", dt, s), func(t *testing.T) {
				src := rt.Randn(dt, 37, 5).Persist()
				defer src.Release()
				want, err := src.MulScalar(s).Float64s()
				if err != nil {
					t.Fatal(err)
				}
				// A column-major output: the kernel must follow its strides.
				out := rt.Zeros(dt, 5, 37).Persist()
				defer out.Release()
				if err := out.T().MulScalarFrom(src, s); err != nil {
					t.Fatal(err)
				}
				got, err := out.T().Float64s()
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("element %d: %v, MulScalar gives %v", i, got[i], want[i])
					}
				}
			})
		}
	}
	out := rt.Zeros(tensor.Float32, 4).Persist()
	defer out.Release()
	for _, bad := range []*tensor.Tensor{rt.Zeros(tensor.Float32, 5), rt.Zeros(tensor.Float64, 4), rt.Zeros(tensor.Float32, 2, 2)} {
		if err := out.MulScalarFrom(bad, 2); err == nil || !strings.Contains(err.Error(), "mul_out") {
			t.Errorf("source %v %v: error %v, want one naming mul_out and both shapes", bad.DType(), bad.Shape(), err)
		}
	}
}
