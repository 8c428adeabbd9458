package zero

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestStage3ShardsParameters: under stage 3 a rank keeps only its slices:
// the parameters have no memory outside their unit's forward and backward,
// at most one unit is gathered at a time (reshardAfterForward), the device
// holds a fraction of the parameter bytes between steps, and reading a
// parameter outside its unit says why it cannot.
func TestStage3ShardsParameters(t *testing.T) {
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("limitAllGathers=%d", limit), func(t *testing.T) { stage3Run(t, limit) })
	}
}

func stage3Run(t *testing.T, limit int) {
	const n = 2
	onRanks(t, n, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
		{
			rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), 0)
			m := mlp(t, rt)
			units, owner := layerUnits(m, true)
			full := int64(0)
			for _, p := range m.Parameters() {
				full += int64(p.Numel() * 4)
			}
			before := rt.Stats().LiveBytes
			z, err := New(pg, optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), Options{Stage: 3, Units: units, LimitAllGathers: limit})
			if err != nil {
				return err
			}
			defer z.Close()
			// The full parameters (full bytes) went; this rank's slices
			// of the parameters and of the gradients (full/n each) came.
			if got, want := rt.Stats().LiveBytes-before, 2*full/n-full; got > want+64 {
				t.Errorf("rank %d: making the optimizer changed the live bytes by %d, want %d", rank, got, want)
			}
			for _, p := range m.Parameters() {
				if !p.MemoryFreed() {
					t.Errorf("rank %d: a parameter kept its memory", rank)
				}
			}
			if _, err := m.Parameters()[0].Float64s(); err == nil || !strings.Contains(err.Error(), "parameter of zero unit 0, which ZeRO stage 3 shards") {
				t.Errorf("reading a sharded parameter: %v", err)
			}
			maxGathered, prefetched := 0, 0
			gathered := func() int {
				k := 0
				for _, u := range z.flat.units {
					if u.gathered || u.inflight != nil {
						k++
					}
				}
				return k
			}
			for step := range 3 {
				sc := rt.OpenScope()
				x := rt.FromValues(dtype.Float32, make([]float64, 4*16), 4, 16).AddScalar(float64(step + rank))
				x, err := forwardUnits(z, m, owner, x, func(u *Unit) {
					if u.gathered || u.inflight != nil {
						prefetched++
					}
				}, func(*Unit) { maxGathered = max(maxGathered, gathered()) })
				if err != nil {
					return err
				}
				if err := x.SumAll().Backward(); err != nil {
					return err
				}
				if err := z.Step(); err != nil {
					return err
				}
				if g := gathered(); g != 0 {
					t.Errorf("rank %d, step %d: %d units still gathered after the step", rank, step, g)
				}
				sc.Close()
			}
			if maxGathered != limit {
				t.Errorf("rank %d: up to %d units gathered or in flight at once in forward, want %d", rank, maxGathered, limit)
			}
			// From the second step on, every unit but the first is
			// prefetched while the one before it computes.
			if want := (limit - 1) * 2 * (len(units) - 1); prefetched != want {
				t.Errorf("rank %d: %d forwards found their unit prefetched, want %d", rank, prefetched, want)
			}
			if m := z.Memory(); m.OwnedParameters*n > full+int64(4*n*len(units)) {
				t.Errorf("rank %d owns %d parameter bytes of %d", rank, m.OwnedParameters, full)
			}
			// Values written with writeBack are the parameters from
			// then on; without it they are not kept.
			fill := func(v float64, writeBack bool) error {
				return z.WithFullParams(writeBack, func() (err error) {
					rt.NoGrad(func() {
						for _, p := range m.Parameters() {
							if err = p.Fill(v); err != nil {
								return
							}
						}
					})
					return err
				})
			}
			if err := fill(0.5, true); err != nil {
				return err
			}
			if err := fill(7, false); err != nil {
				return err
			}
			return z.WithFullParams(false, func() error {
				for _, p := range m.Parameters() {
					v, err := p.Float64s()
					if err != nil {
						return err
					}
					for _, x := range v {
						if x != 0.5 {
							return fmt.Errorf("a parameter reads %v after a write-back of 0.5", x)
						}
					}
				}
				return nil
			})
		}
	})
}

// TestStage3NeedsUnits: stage 3 without units, or with a parameter in no
// unit or in two, is an error that says what to do.
func TestStage3NeedsUnits(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	m := mlp(t, rt)
	ps := m.Parameters()
	for _, c := range []struct {
		units []UnitSpec
		want  string
	}{
		{nil, "call zero.fullyShard on each block"},
		{[]UnitSpec{{Params: ps[:2]}}, "is in no unit"},
		{[]UnitSpec{{Params: ps}, {Params: ps[:1]}}, "is in units 0 and 1"},
	} {
		_, err := New(w.Group(0), optim.AdamW, ps, optim.DefaultAdamW().Group(), Options{Stage: 3, Units: c.units})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("units %d: %v, want %q", len(c.units), err, c.want)
		}
	}
}

// TestStage3UnitsDisagree: ranks that mark different units fail at once,
// every one of them, naming the unit.
func TestStage3UnitsDisagree(t *testing.T) {
	w, _ := dist.NewWorld(2, dist.Options{})
	defer w.Close()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), 0)
			ps := mlp(t, rt).Parameters()
			units := []UnitSpec{{Params: ps[:2]}, {Params: ps[2:]}}
			if rank == 1 {
				units = []UnitSpec{{Params: ps[:4]}, {Params: ps[4:]}}
			}
			_, errs[rank] = New(w.Group(rank), optim.AdamW, ps, optim.DefaultAdamW().Group(), Options{Stage: 3, Units: units})
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "unit 0 has 4 parameters (1600 elements) on rank 1 and 2 (544 elements) on rank 0") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestOffloadOverlapsBackward: under offload a bucket's gradient slice
// goes down to the host once the in-flight bound retires its
// reduce-scatter, during backward; the step sends the last ones and the
// parameter slices up.
func TestOffloadOverlapsBackward(t *testing.T) {
	onRanks(t, 2, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
		m := mlp(t, rt)
		units, owner := layerUnits(m, false)
		host := tensor.NewRuntime(cpu.New(cpu.Options{Index: 10 + rank}), 0)
		z, err := New(pg, optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), Options{Stage: 3, Units: units, Offload: host})
		if err != nil {
			return err
		}
		defer z.Close()
		x := rt.Ones(dtype.Float32, 4, 16)
		x, err = forwardUnits(z, m, owner, x, nil, nil)
		if err != nil {
			return err
		}
		if err := x.SumAll().Backward(); err != nil {
			return err
		}
		during := z.Offloaded()
		if err := z.Step(); err != nil {
			return err
		}
		if err := z.settle(); err != nil { // the step runs on the host, beside the rank
			return err
		}
		after := z.Offloaded()
		if during.ToHost == 0 || during.ToHost >= after.ToHost || during.ToDevice != 0 || after.ToDevice == 0 {
			return fmt.Errorf("moved %+v by the end of backward, %+v after the step", during, after)
		}
		return nil
	})
}

// layerUnits makes each of the MLP's Linear layers a unit; owner[i] is
// layer i's unit (-1: none).
func layerUnits(m *nn.Sequential, reshard bool) (units []UnitSpec, owner []int) {
	for _, l := range m.Layers {
		owner = append(owner, -1)
		if ps := l.(interface{ Parameters() []*tensor.Tensor }).Parameters(); len(ps) > 0 {
			owner[len(owner)-1] = len(units)
			units = append(units, UnitSpec{Params: ps, ReshardAfterForward: reshard})
		}
	}
	return units, owner
}

// forwardUnits runs the MLP's forward as zero.fullyShard's wrappers do:
// each layer with a unit between its BeforeForward and AfterForward;
// before and after (when set) see each unit around its gather.
func forwardUnits(z *Optimizer, m *nn.Sequential, owner []int, x *tensor.Tensor, before, after func(*Unit)) (*tensor.Tensor, error) {
	for i, l := range m.Layers {
		u := z.Unit(owner[i])
		if u != nil {
			if before != nil {
				before(u)
			}
			if err := u.BeforeForward(); err != nil {
				return nil, err
			}
			if after != nil {
				after(u)
			}
		}
		x = l.Forward(x)
		if u != nil {
			if err := u.AfterForward([]*tensor.Tensor{x}); err != nil {
				return nil, err
			}
		}
	}
	return x, nil
}

// TestOffloadStepBesideForward: under stage 3 the offloaded step runs
// beside the next forward. With unit 1's step held back on the host, Step
// returns and unit 0's forward runs; unit 1's gather waits for its own
// step only. A step failing on the host fails that unit's gather, naming
// it, and leaves nothing waiting.
func TestOffloadStepBesideForward(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
			m := mlp(t, rt)
			units, owner := layerUnits(m, true)
			host := tensor.NewRuntime(cpu.New(cpu.Options{Index: 10}), 0)
			w, _ := dist.NewWorld(1, dist.Options{})
			defer w.Close()
			z, err := New(w.Group(0), optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), Options{Stage: 3, Units: units, Offload: host, LimitAllGathers: 1})
			if err != nil {
				t.Fatal(err)
			}
			// The hook is put back after Close, which waits for the host
			// step still reading it (the race detector saw the restore
			// race the step of the units after unit 1).
			defer func(h func(int) error) { testHookHostStep = h }(testHookHostStep)
			defer z.Close()
			x := rt.Ones(dtype.Float32, 4, 16)
			y, err := forwardUnits(z, m, owner, x, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := y.SumAll().Backward(); err != nil {
				t.Fatal(err)
			}
			held := make(chan struct{})
			testHookHostStep = func(unit int) error {
				if unit == 1 {
					select {
					case <-held:
					case <-time.After(10 * time.Second):
						return errors.New("held for 10 s: Step waits for the host step")
					}
					if fail {
						return errors.New("injected")
					}
				}
				return nil
			}
			if err := z.Step(); err != nil {
				t.Fatal(err)
			}
			// Unit 0's forward runs while unit 1 is held on the host.
			u0 := z.Unit(owner[0])
			if err := u0.BeforeForward(); err != nil {
				t.Fatal(err)
			}
			h := m.Layers[0].Forward(x)
			if err := u0.AfterForward([]*tensor.Tensor{h}); err != nil {
				t.Fatal(err)
			}
			close(held)
			err = z.Unit(1).BeforeForward()
			if fail {
				if err == nil || !strings.Contains(err.Error(), "the offloaded step of unit 1: injected") {
					t.Fatalf("unit 1's gather after its step failed: %v", err)
				}
				if err := z.settle(); err == nil || !strings.Contains(err.Error(), "unit 1") {
					t.Fatalf("the later units were not stepped, yet settle says %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
