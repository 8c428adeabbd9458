package zero

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// onRanks runs fn on every rank of a new world of n and fails on the
// first error.
func onRanks(t *testing.T, n int, fn func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error) {
	t.Helper()
	w, err := dist.NewWorld(n, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r, w.Group(r), newRuntime()) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// toyParams are float32 parameters of sizes 9, 7, 5, 3 and 4×6 with fixed values.
func toyParams(rt *tensor.Runtime, values [][]float64) []*tensor.Tensor {
	return toyParamsOf(rt, values, dtype.Float32)
}

// toyParamsOf are toyParams of dtype dt.
func toyParamsOf(rt *tensor.Runtime, values [][]float64, dt dtype.DType) []*tensor.Tensor {
	shapes := [][]int{{9}, {7}, {5}, {3}, {4, 6}}
	var ps []*tensor.Tensor
	for i, sh := range shapes {
		n := 1
		for _, d := range sh {
			n *= d
		}
		v := make([]float64, n)
		for j := range v {
			v[j] = math.Cos(float64(i*10 + j))
		}
		if values != nil {
			v = values[i]
		}
		p := rt.FromValues(dt, v, sh...).Persist()
		p.SetName(fmt.Sprintf("p%d", i))
		_ = p.SetRequiresGrad(true)
		ps = append(ps, p)
	}
	return ps
}

// setToyGrads gives every parameter the same gradient on every rank (as
// if DDP had averaged them) for the given step.
func setToyGrads(rt *tensor.Runtime, ps []*tensor.Tensor, step int) error {
	for i, p := range ps {
		v := make([]float64, p.Numel())
		for j := range v {
			v[j] = math.Sin(float64(step*7 + i*3 + j))
		}
		if err := p.SetGrad(rt.FromValues(p.DType(), v, p.Shape()...).Persist()); err != nil {
			return err
		}
	}
	return nil
}

func values(ps []*tensor.Tensor) [][]float64 {
	var out [][]float64
	for _, p := range ps {
		v, _ := p.Float64s()
		out = append(out, v)
	}
	return out
}

// twoGroups splits the toy parameters in two groups, the second with a
// tenth of the learning rate.
func twoGroups(hyper optim.ParamGroup, ps []*tensor.Tensor) (optim.ParamGroup, optim.ParamGroup) {
	g1 := hyper.Hyper()
	g1.Params = ps[:3]
	g2 := hyper.Hyper()
	g2.LR /= 10
	g2.Params = ps[3:]
	return g1, g2
}

func TestStateDictConsolidatesAndLoadsUnderAnyWorldSize(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) { consolidateAndResume(t, dt) })
	}
}

// consolidateAndResume checks every layout and world size against the
// plain optimizer on parameters of dtype dt. With bfloat16 the state dict
// carries the float32 master weights (master_param): resuming from it
// continues the plain run exactly.
func consolidateAndResume(t *testing.T, dt dtype.DType) {
	hyper := optim.DefaultAdamW().Group()
	hyper.LR = 0.05
	// The plain optimizer over 6 steps, and its state dict after 3.
	rt := newRuntime()
	ps := toyParamsOf(rt, nil, dt)
	g1, g2 := twoGroups(hyper, ps)
	plain, err := optim.New(optim.AdamW, g1.Params, g1)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.AddParamGroup(g2); err != nil {
		t.Fatal(err)
	}
	var plainSD *optim.StateDict
	var at3 [][]float64
	for step := range 6 {
		if err := setToyGrads(rt, ps, step); err != nil {
			t.Fatal(err)
		}
		if err := plain.Step(); err != nil {
			t.Fatal(err)
		}
		if step == 2 {
			plainSD, _ = plain.StateDict()
			at3 = values(ps)
			// Snapshot: the plain optimizer keeps changing its tensors.
			for _, e := range plainSD.State {
				for k, v := range e {
					e[k] = v.Clone().Persist()
				}
			}
		}
	}
	want := values(ps)
	if dt == dtype.BFloat16 {
		m := plainSD.State[0]["master_param"]
		if m == nil || m.DType() != dtype.Float32 || m.Numel() != ps[0].Numel() {
			t.Fatalf("the state dict of a bfloat16 parameter has no float32 master_param: %v", keys(plainSD.State[0]))
		}
	}

	layouts := []Options{{}, {Partition: "flat"}, {Partition: "flat", ParametersAsBucketView: true, BucketCapMB: 0.0001}, {ParametersAsBucketView: true}}
	for _, first := range layouts {
		for _, second := range layouts {
			for _, sizes := range [][2]int{{2, 3}, {3, 1}, {4, 2}} {
				name := fmt.Sprintf("%s→%s/%d→%d", layoutName(first), layoutName(second), sizes[0], sizes[1])
				t.Run(name, func(t *testing.T) {
					target := sizes[0] - 1
					var consolidated *optim.StateDict
					// Three steps on sizes[0] ranks, consolidated on the last rank.
					onRanks(t, sizes[0], func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
						ps := toyParamsOf(rt, nil, dt)
						g1, g2 := twoGroups(hyper, ps)
						z, err := New(pg, optim.AdamW, g1.Params, g1, first)
						if err != nil {
							return err
						}
						if err := z.AddParamGroup(g2); err != nil {
							return err
						}
						for step := range 3 {
							if err := setToyGrads(rt, ps, step); err != nil {
								return err
							}
							if err := z.Step(); err != nil {
								return err
							}
						}
						if err := z.ConsolidateStateDict(target); err != nil {
							return err
						}
						sd, err := z.StateDict()
						if rank != target {
							if err == nil {
								return fmt.Errorf("stateDict succeeded on a rank that was not the target")
							}
							return nil
						}
						if err != nil {
							return err
						}
						if err := sameStateDict(sd, plainSD); err != nil {
							return err
						}
						consolidated = sd
						return nil
					})
					// Loaded on sizes[1] ranks, three more steps equal the plain run.
					onRanks(t, sizes[1], func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
						ps := toyParamsOf(rt, at3, dt)
						g1, g2 := twoGroups(optim.DefaultAdamW().Group(), ps) // hyper-parameters come from the dict
						z, err := New(pg, optim.AdamW, g1.Params, g1, second)
						if err != nil {
							return err
						}
						if err := z.AddParamGroup(g2); err != nil {
							return err
						}
						if err := z.LoadStateDict(consolidated); err != nil {
							return err
						}
						for step := 3; step < 6; step++ {
							if err := setToyGrads(rt, ps, step); err != nil {
								return err
							}
							if err := z.Step(); err != nil {
								return err
							}
						}
						return sameValues(values(ps), want, "after resuming")
					})
				})
			}
		}
	}
}

func layoutName(o Options) string {
	name := "greedy"
	if o.Partition == "flat" {
		name = "flat"
	}
	if o.ParametersAsBucketView {
		name += "+view"
	}
	return name
}

// sameStateDict compares two state dicts' entries to 1e-6 and their lrs.
func sameStateDict(got, want *optim.StateDict) error {
	if len(got.State) != len(want.State) {
		return fmt.Errorf("state for %d parameters, want %d", len(got.State), len(want.State))
	}
	for k, we := range want.State {
		ge := got.State[k]
		if len(ge) != len(we) {
			return fmt.Errorf("parameter %d: entries %v, want %v", k, keys(ge), keys(we))
		}
		for name, wt := range we {
			a, _ := ge[name].Float64s()
			b, _ := wt.Float64s()
			if len(a) != len(b) {
				return fmt.Errorf("parameter %d %q: %d values, want %d", k, name, len(a), len(b))
			}
			for i := range a {
				if math.Abs(a[i]-b[i]) > 1e-6*math.Max(1, math.Abs(b[i])) {
					return fmt.Errorf("parameter %d %q[%d] = %v, want %v", k, name, i, a[i], b[i])
				}
			}
		}
	}
	for i, wg := range want.ParamGroups {
		if got.ParamGroups[i]["lr"] != wg["lr"] || fmt.Sprint(got.ParamGroups[i]["params"]) != fmt.Sprint(wg["params"]) {
			return fmt.Errorf("group %d: %v, want %v", i, got.ParamGroups[i], wg)
		}
	}
	return nil
}

func keys(m map[string]*tensor.Tensor) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestLoadStateDictRejectsBadDicts(t *testing.T) {
	onRanks(t, 2, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
		ps := toyParams(rt, nil)
		z, err := New(pg, optim.AdamW, ps, optim.DefaultAdamW().Group(), Options{Partition: "flat"})
		if err != nil {
			return err
		}
		plain, _ := optim.New(optim.AdamW, ps[:2], optim.DefaultAdamW().Group())
		sd, _ := plain.StateDict()
		if err := z.LoadStateDict(sd); err == nil {
			return fmt.Errorf("a dict of another optimizer's groups was loaded")
		}
		if err := z.LoadStateDict(nil); err == nil {
			return fmt.Errorf("a nil dict was loaded")
		}
		if err := z.ConsolidateStateDict(5); err == nil {
			return fmt.Errorf("consolidation to rank 5 of 2 succeeded")
		}
		return nil
	})
}

// A ZeRO optimizer over a subgroup (ranks 1 and 3 of 4) keeps those ranks
// in sync and equal to the plain optimizer; the other ranks do not take part.
func TestSubgroup(t *testing.T) {
	hyper := optim.SGDConfig{LR: 0.1, Momentum: 0.9}.Group()
	rt := newRuntime()
	ps := toyParams(rt, nil)
	plain, _ := optim.New(optim.SGD, ps, hyper)
	for step := range 3 {
		_ = setToyGrads(rt, ps, step)
		if err := plain.Step(); err != nil {
			t.Fatal(err)
		}
	}
	want := values(ps)
	onRanks(t, 4, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
		sub, err := pg.NewGroup([]int{1, 3})
		if err != nil || sub == nil {
			return err
		}
		ps := toyParams(rt, nil)
		z, err := New(sub, optim.SGD, ps, hyper, Options{Partition: "flat"})
		if err != nil {
			return err
		}
		for step := range 3 {
			if err := setToyGrads(rt, ps, step); err != nil {
				return err
			}
			if err := z.Step(); err != nil {
				return err
			}
		}
		return sameValues(values(ps), want, "on the subgroup")
	})
}

// sameValues compares parameter values to 1e-6.
func sameValues(got, want [][]float64, when string) error {
	for i := range want {
		for j := range want[i] {
			if math.Abs(got[i][j]-want[i][j]) > 1e-6 {
				return fmt.Errorf("parameter %d[%d] = %v %s, plain %v", i, j, got[i][j], when, want[i][j])
			}
		}
	}
	return nil
}
