package tensor_test

import (
	"fmt"
	"math"
	"slices"
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

// TestEmbeddingEmptyShapes: lookups into rows of width 0, and no lookups at
// all, have gradients of the weight's shape as PyTorch's do (the backward
// once reshaped the output's gradient to [-1, 0], which is ambiguous),
// alone and beside a second use of the weight.
func TestEmbeddingEmptyShapes(t *testing.T) {
	for _, c := range []struct {
		name    string
		v, d    int
		idx     []int64
		idxDims []int
	}{
		{"width 0", 8, 0, []int64{1, 7, 1, 0, 3, 2}, []int{2, 3}},
		{"no lookups", 8, 4, nil, []int{0}},
		{"no lookups, width 0", 8, 0, nil, []int{2, 0}},
	} {
		for _, tied := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s tied=%v", c.name, tied), func(t *testing.T) {
				rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 1)
				w := rt.Randn(tensor.Float32, c.v, c.d).Persist()
				w.SetRequiresGrad(true)
				y := tensor.Embedding(rt.FromInt64s(c.idx, c.idxDims...), w, -1)
				if err := y.Err(); err != nil {
					t.Fatal(err)
				}
				loss := y.SumAll()
				if tied {
					loss = loss.Add(w.SumAll())
				}
				if err := loss.Backward(); err != nil {
					t.Fatal(err)
				}
				g := w.Grad()
				if g == nil || !slices.Equal(g.Shape(), []int{c.v, c.d}) {
					t.Fatalf("weight gradient %v, want shape [%d %d]", g, c.v, c.d)
				}
				want := 0.0
				if tied {
					want = 1
				}
				v, err := g.Float64s()
				if err != nil {
					t.Fatal(err)
				}
				for i, x := range v {
					if x != want {
						t.Fatalf("gradient element %d is %v, want %v", i, x, want)
					}
				}
			})
		}
	}
}
