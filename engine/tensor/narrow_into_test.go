package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestViewGradientsAddInto: the gradient of a tensor read through several
// views (q, k and v split out of one projection; overlapping narrows;
// selected rows), where each view's gradient is added into the region it
// covers, is bit for bit the sum of the views' dense gradients in the
// order backward reaches them, with -0 entries and in bfloat16; and
// backward holds one gradient the size of the tensor beside the views'
// own, not one per view.
func TestViewGradientsAddInto(t *testing.T) {
	negZero := math.Copysign(0, -1)
	views := []struct {
		name  string
		shape []int
		cut   func(x *tensor.Tensor) []*tensor.Tensor
	}{
		{"split", []int{4, 96, 64}, func(x *tensor.Tensor) []*tensor.Tensor { return x.Split(32, 1) }},
		{"overlapping narrows", []int{70, 500}, func(x *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{x.Narrow(0, 0, 40), x.Narrow(0, 20, 50), x.Narrow(1, 100, 200)}
		}},
		{"select", []int{30, 50, 80}, func(x *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{x.Select(1, 0), x.Select(1, 49), x.Select(-1, 3), x.Select(1, 0)}
		}},
	}
	for _, v := range views {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
			t.Run(fmt.Sprintf("%s/%v", v.name, dt), func(t *testing.T) {
				var pieceBytes int64 // the views' gradients, all made before the first reaches x
				// shared: every view of one leaf; else each view of a leaf
				// of its own, whose dense gradients are summed here.
				grads := func(shared bool) ([]float64, int64) {
					rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
					x := rt.Randn(tensor.Float32, v.shape...).To(dt).Persist()
					x.SetRequiresGrad(true)
					n := len(v.cut(x.Detach()))
					leaves := make([]*tensor.Tensor, n)
					var pieces []*tensor.Tensor
					for i := range leaves {
						leaves[i] = x
						if !shared {
							leaves[i] = x.Detach().Clone().Persist()
							leaves[i].SetRequiresGrad(true)
						}
						pieces = append(pieces, v.cut(leaves[i])[i])
					}
					loss := rt.Zeros(dt)
					pieceBytes = 0
					for _, p := range pieces {
						pieceBytes += int64(p.Numel() * dt.Size())
						// Weights with -0 entries: the view's gradient is
						// the weight, -0 included.
						w := rt.Randn(tensor.Float32, p.Shape()...).To(dt)
						if err := w.Narrow(0, 0, 1).Fill(negZero); err != nil {
							t.Fatal(err)
						}
						loss = loss.Add(p.Mul(w).SumAll())
					}
					rt.ResetPeakMemStats()
					before := rt.Stats().LiveBytes
					if err := loss.Backward(); err != nil {
						t.Fatal(err)
					}
					peak := rt.Stats().PeakBytes - before
					// Backward reaches the later views first.
					g := leaves[n-1].Grad()
					if !shared {
						for i := n - 2; i >= 0; i-- {
							g = g.Add(leaves[i].Grad())
						}
					}
					vals, err := g.Float64s()
					if err != nil {
						t.Fatal(err)
					}
					return vals, peak
				}
				a, peak := grads(true)
				b, _ := grads(false)
				for i := range a {
					if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
						t.Fatalf("element %d: %v added into one gradient, %v as the views' dense gradients summed", i, a[i], b[i])
					}
				}
				dense := int64(dt.Size())
				for _, e := range v.shape {
					dense *= int64(e)
				}
				if dt == tensor.Float32 && peak > dense+pieceBytes {
					t.Errorf("backward peaked %d bytes above the start; the gradient is %d and the views' gradients %d", peak, dense, pieceBytes)
				}
			})
		}
	}
}
