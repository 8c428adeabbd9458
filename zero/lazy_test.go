package zero

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// initMLP gives the MLP's parameters GPT-2's initialisation (normal
// matrices, zero biases, the last layer scaled) on memory, or recorded on
// lazy tensors (what zero.init makes), from rt's generator.
func initMLP(t *testing.T, rt *tensor.Runtime, m *nn.Sequential, lazy bool) {
	t.Helper()
	for i, p := range m.Parameters() {
		if lazy {
			lz := rt.Lazy(p.DType(), p.Shape()...)
			if err := p.SetData(lz); err != nil {
				t.Fatal(err)
			}
			lz.Release()
		}
		var err error
		rt.NoGrad(func() {
			if p.Dim() == 1 {
				err = p.Zero()
				return
			}
			if err = p.FillRandom(rt.Generator(), tensor.Normal(0, 0.2)); err == nil && i == len(m.Parameters())-2 {
				err = p.MulScalarInPlace(0.5)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if p.IsLazy() != lazy {
			t.Fatalf("parameter %d lazy: %v", i, p.IsLazy())
		}
	}
}

// TestStage3BuildsLazyModels: a model whose parameters were built lazily
// (never whole on any rank) trains under stage 3 exactly as the same model
// built on memory: the same values after three steps, bit for bit, on 2
// and 3 ranks, with and without offload. Making the optimizer makes only
// each rank's slices. Ranks that seeded their generators differently start
// from rank 0's values, as the broadcast of eager parameters makes them.
func TestStage3BuildsLazyModels(t *testing.T) {
	for _, c := range []struct {
		ranks   int
		offload string
		seeds   bool
	}{{2, "", false}, {3, "", false}, {2, "cpu", false}, {3, "", true}} {
		t.Run(fmt.Sprintf("ranks=%d offload=%q rank seeds=%v", c.ranks, c.offload, c.seeds), func(t *testing.T) {
			train := func(lazy bool) [][][]float64 {
				out := make([][][]float64, c.ranks)
				onRanks(t, c.ranks, func(rank int, pg dist.ProcessGroup, _ *tensor.Runtime) error {
					seed := uint64(3)
					if c.seeds {
						seed += uint64(rank)
					}
					rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), seed)
					m := mlp(t, rt)
					initMLP(t, rt, m, lazy)
					units, owner := layerUnits(m, true)
					rt.ResetPeakMemStats()
					before := rt.Stats().LiveBytes
					opts := Options{Stage: 3, Units: units}
					if c.offload != "" {
						opts.Offload = tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), 0)
					}
					z, err := New(pg, optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), opts)
					if err != nil {
						return err
					}
					defer z.Close()
					if lazy {
						// Each rank's slices of the parameters and the gradients,
						// and their padding: nothing whole.
						slices := int64(0)
						for _, b := range z.flat.buckets {
							slices += int64(2 * b.slice * 4)
						}
						if grown := rt.Stats().PeakBytes - before; grown > slices {
							t.Errorf("rank %d: making the optimizer over a lazy model took %d bytes at its peak, its slices %d", rank, grown, slices)
						}
					}
					for step := range 3 {
						sc := rt.OpenScope()
						x := rt.FromValues(dtype.Float32, make([]float64, 4*16), 4, 16).AddScalar(float64(step + rank))
						y, err := forwardUnits(z, m, owner, x, nil, nil)
						if err != nil {
							return err
						}
						if err := y.Square().SumAll().Backward(); err != nil {
							return err
						}
						if err := z.Step(); err != nil {
							return err
						}
						sc.Close()
					}
					return z.WithFullParams(false, func() error {
						for _, p := range m.Parameters() {
							v, err := p.Float64s()
							if err != nil {
								return err
							}
							out[rank] = append(out[rank], v)
						}
						return nil
					})
				})
				return out
			}
			eager, lazy := train(false), train(true)
			for r := range lazy {
				for i := range lazy[r] {
					if !slices.Equal(lazy[r][i], eager[0][i]) {
						t.Fatalf("rank %d, parameter %d after 3 steps: built lazily %v, on memory (rank 0) %v", r, i, lazy[r][i][:3], eager[0][i][:3])
					}
				}
			}
		})
	}
}

// TestStage3GatherOutOfMemoryInBackward: a unit that cannot be gathered
// again for backward (the device is full) fails the backward pass with
// the out-of-memory error, naming the unit, rather than with what the
// ops below it would meet (their saved tensors without values).
func TestStage3GatherOutOfMemoryInBackward(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{MaxMemory: 1 << 20}), 0)
	m := mlp(t, rt)
	units, owner := layerUnits(m, true)
	z, err := New(w.Group(0), optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), Options{Stage: 3, Units: units})
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	x := rt.FromValues(dtype.Float32, make([]float64, 4*16), 4, 16)
	y, err := forwardUnits(z, m, owner, x, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	left := (1 << 20) - rt.Stats().LiveBytes
	filler := rt.Empty(dtype.Float32, int(left/4)-16) // room for no unit
	defer filler.Release()
	err = y.SumAll().Backward()
	if err == nil || !strings.Contains(err.Error(), "out of memory") || !strings.Contains(err.Error(), "unit 2") {
		t.Fatalf("backward: %v", err)
	}
}
