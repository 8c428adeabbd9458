package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestTiedEmbeddingGradient: the gradient of a weight used by a lookup and
// by a product (a tied embedding, as GPT-2's), where the lookup's part is
// added in place into the product's, is bit for bit the sum of the two
// dense gradients, with repeated indices, a padding row, -0 entries and in
// bfloat16; and backward holds the weight's gradient once, not a dense
// lookup gradient beside it.
func TestTiedEmbeddingGradient(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		for _, pad := range []int64{-1, 3} {
			t.Run(fmt.Sprintf("%v pad=%d", dt, pad), func(t *testing.T) {
				// tied: one weight for both uses; else two leaves of the same
				// values, whose gradients are summed as dense tensors: what
				// the tied weight's accumulation would do without the
				// lookup's in-place addition.
				grads := func(tied bool) ([]float64, int64) {
					rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
					w := rt.Randn(tensor.Float32, 500, 64).To(dt).Persist()
					w.SetRequiresGrad(true)
					w2 := w
					if !tied {
						w2 = w.Detach().Clone().Persist()
						w2.SetRequiresGrad(true)
					}
					idx := rt.FromInt64s([]int64{5, 3, 5, 7, 5, 3, 499, 0}, 2, 4)
					x := rt.Randn(tensor.Float32, 2, 4, 64).To(dt)
					// A column of x that is -0 gives -0 entries in the
					// product's part of the gradient.
					col := x.Narrow(2, 0, 1)
					if err := col.Fill(math.Copysign(0, -1)); err != nil {
						t.Fatal(err)
					}
					h := tensor.Embedding(idx, w2, pad)
					logits := tensor.Linear(x, w, nil) // [2, 4, 500]: the weight's other use, whose backward runs first
					loss := h.Square().SumAll().Add(logits.SumAll())
					rt.ResetPeakMemStats()
					before := rt.Stats().LiveBytes
					if err := loss.Backward(); err != nil {
						t.Fatal(err)
					}
					peak := rt.Stats().PeakBytes - before
					g := w.Grad()
					if !tied {
						g = g.Add(w2.Grad())
					}
					v, err := g.Float64s()
					if err != nil {
						t.Fatal(err)
					}
					return v, peak
				}
				a, peakA := grads(true)
				b, _ := grads(false)
				for i := range a {
					if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
						t.Fatalf("element %d: %v with the lookup's gradient added into the product's, %v as two dense gradients summed", i, a[i], b[i])
					}
				}
				// (In bfloat16 the product's backward widens to float32 and
				// dominates the peak: the memory is checked in float32.)
				if dense := int64(500 * 64 * dt.Size()); dt == tensor.Float32 && peakA >= 2*dense {
					t.Errorf("backward peaked %d bytes above the start; the weight's gradient is %d", peakA, dense)
				}
			})
		}
	}
}
