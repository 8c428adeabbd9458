package zero

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestUnscaleAndSkip: under stages 2 and 3 (offloaded too) a loss scaled
// by a power of two and unscaled in the optimizer's slices trains exactly
// as the unscaled loss (clipping after unscaling included); an overflow
// on one rank only makes every rank skip the same step, leaving the
// weights as they were, and the next clean step trains on.
func TestUnscaleAndSkip(t *testing.T) {
	for _, c := range []struct {
		stage   int
		offload bool
	}{{2, false}, {3, false}, {3, true}} {
		t.Run(fmt.Sprintf("stage %d offload %v", c.stage, c.offload), func(t *testing.T) {
			run := func(scale float64, overflowAt int) [][]float64 {
				out := make([][]float64, 2)
				onRanks(t, 2, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
					m := mlp(t, rt)
					opts := Options{Stage: c.stage}
					var owner []int
					if c.stage == 3 {
						opts.Units, owner = layerUnits(m, true)
					}
					if c.offload {
						opts.Offload = tensor.NewRuntime(newRuntime().Device(), 0)
					}
					z, err := New(pg, optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), opts)
					if err != nil {
						return err
					}
					defer z.Close()
					for step := range 3 {
						x := rt.Ones(dtype.Float32, 4, 16).MulScalar(float64(rank + step + 1))
						var y *tensor.Tensor
						if c.stage == 3 {
							if y, err = forwardUnits(z, m, owner, x, nil, nil); err != nil {
								return err
							}
						} else {
							y = m.Forward(x)
						}
						loss := y.Square().SumAll().MulScalar(scale)
						if step == overflowAt && rank == 1 {
							loss = loss.MulScalar(math.Inf(1))
						}
						if err := loss.Backward(); err != nil {
							return err
						}
						inf := false
						if scale != 1 {
							if inf, err = z.UnscaleGrads(1 / scale); err != nil {
								return err
							}
						}
						if inf != (step == overflowAt) {
							return fmt.Errorf("step %d: overflow found %v", step, inf)
						}
						if _, err := z.ClipGradNorm(1e3, 2); err != nil && !inf {
							return err
						}
						if inf {
							err = z.SkipStep()
						} else {
							err = z.Step()
						}
						if err != nil {
							return err
						}
					}
					return z.WithFullParams(false, func() error {
						for _, p := range m.Parameters() {
							v, err := p.Float64s()
							if err != nil {
								return err
							}
							out[rank] = append(out[rank], v...)
						}
						return nil
					})
				})
				return out
			}
			plain := run(1, -1)
			if scaled := run(1024, -1); !slices.Equal(scaled[0], plain[0]) || !slices.Equal(scaled[1], plain[0]) {
				t.Errorf("a loss scaled by 1024 and unscaled trains differently from the plain loss")
			}
			// Overflow at step 1: that step is skipped on both ranks, so the
			// weights are those of steps 0 and 2 (not of 0, 1 and 2).
			skipped := run(1024, 1)
			if !slices.Equal(skipped[0], skipped[1]) {
				t.Fatalf("the ranks disagree after a skipped step")
			}
			if slices.Equal(skipped[0], plain[0]) {
				t.Errorf("the overflowed step was not skipped")
			}
		})
	}
}
