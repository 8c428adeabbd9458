package zero

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// nadamRun is the toy run of NAdam whose β₁ changes before every step (as
// OneCycleLR's cycle_momentum changes it): mu_product, a number in each
// parameter's state, is then no function of the step count, and a state
// that comes back without it continues differently.
type nadamRun struct{}

func (nadamRun) beta1(step int) float64 { return 0.95 - 0.05*float64(step%4) }

func (r nadamRun) step(rt *tensor.Runtime, ps []*tensor.Tensor, groups []*optim.ParamGroup, step int, do func() error) error {
	if err := setToyGrads(rt, ps, step); err != nil {
		return err
	}
	for _, g := range groups {
		g.Beta1 = r.beta1(step)
	}
	return do()
}

// plain runs the plain optimizer for steps [0, 6): the parameters after
// each step, and the state dict after step 3 (copied).
func (r nadamRun) plain(t *testing.T) (at3, want [][]float64, sd3 *optim.StateDict) {
	t.Helper()
	hyper := optim.Defaults(optim.NAdam)
	hyper.LR = 0.05
	rt := newRuntime()
	ps := toyParams(rt, nil)
	g1, g2 := twoGroups(hyper, ps)
	o, err := optim.New(optim.NAdam, g1.Params, g1)
	if err == nil {
		err = o.AddParamGroup(g2)
	}
	if err != nil {
		t.Fatal(err)
	}
	for step := range 6 {
		if err := r.step(rt, ps, o.Groups, step, o.Step); err != nil {
			t.Fatal(err)
		}
		if step == 2 {
			at3 = values(ps)
			sd3, _ = o.StateDict()
			for _, e := range sd3.State {
				for k, v := range e {
					e[k] = v.Clone().Persist()
				}
			}
		}
	}
	return at3, values(ps), sd3
}

// zero makes a NAdam ZeRO optimizer over the toy parameters (values:
// nil for the starting ones), with other hyper-parameters than the
// plain run's (a load must bring them).
func (nadamRun) zero(pg dist.ProcessGroup, rt *tensor.Runtime, values [][]float64, opts Options) (*Optimizer, []*tensor.Tensor, error) {
	ps := toyParams(rt, values)
	hyper := optim.Defaults(optim.NAdam)
	hyper.LR = 0.05
	if values != nil {
		hyper.LR, hyper.Beta1 = 0.3, 0.5
	}
	g1, g2 := twoGroups(hyper, ps)
	z, err := New(pg, optim.NAdam, g1.Params, g1, opts)
	if err == nil {
		err = z.AddParamGroup(g2)
	}
	return z, ps, err
}

// TestNAdamScalarsConsolidateAndReshard: a NAdam ZeRO optimizer's
// consolidated state dict holds each parameter's mu_product, exactly the
// plain optimizer's, and a load of it under another world size and
// partition continues bit for bit like the plain run; so does a load of
// the plain run's dict.
func TestNAdamScalarsConsolidateAndReshard(t *testing.T) {
	var r nadamRun
	at3, want, plainSD := r.plain(t)
	for k, e := range plainSD.State {
		if e["mu_product"] == nil {
			t.Fatalf("the plain state dict has no mu_product for parameter %d: %v", k, keys(e))
		}
	}
	greedy, flat := Options{}, Options{Partition: "flat"}
	small := Options{Partition: "flat", BucketCapMB: 0.0001}
	for _, c := range []struct {
		first, second Options
		n, m          int
	}{
		{greedy, greedy, 2, 3},
		{flat, flat, 2, 1},
		{small, flat, 2, 3},
		{flat, greedy, 3, 2},
		{greedy, small, 2, 2},
	} {
		t.Run(fmt.Sprintf("%s→%s/%d→%d", layoutName(c.first), layoutName(c.second), c.n, c.m), func(t *testing.T) {
			var consolidated *optim.StateDict
			onRanks(t, c.n, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
				z, ps, err := r.zero(pg, rt, nil, c.first)
				if err != nil {
					return err
				}
				for step := range 3 {
					if err := r.step(rt, ps, z.Groups, step, z.Step); err != nil {
						return err
					}
				}
				if err := z.ConsolidateStateDict(0); err != nil || rank != 0 {
					return err
				}
				sd, err := z.StateDict()
				if err != nil {
					return err
				}
				for k, e := range plainSD.State {
					got, _ := e["mu_product"].Item()
					if e := sd.State[k]["mu_product"]; e == nil {
						return fmt.Errorf("parameter %d: no mu_product in the consolidated dict (%v)", k, keys(sd.State[k]))
					} else if v, _ := e.Item(); v != got {
						return fmt.Errorf("parameter %d: consolidated mu_product %v, the plain run's %v", k, v, got)
					}
				}
				consolidated = sd
				return nil
			})
			for _, from := range []struct {
				name string
				sd   *optim.StateDict
			}{{"consolidated", consolidated}, {"plain", plainSD}} {
				onRanks(t, c.m, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
					z, ps, err := r.zero(pg, rt, at3, c.second)
					if err != nil {
						return err
					}
					// A copy on this rank's runtime: ReadStateDict keeps the
					// dict's runtime, which NAdam's tensor ops refuse to mix.
					if err := z.LoadStateDict(onRuntime(rt, from.sd)); err != nil {
						return err
					}
					for step := 3; step < 6; step++ {
						if err := r.step(rt, ps, z.Groups, step, z.Step); err != nil {
							return fmt.Errorf("from the %s dict: %w", from.name, err)
						}
					}
					return sameExactly(values(ps), want, "after loading the "+from.name+" dict")
				})
			}
		})
	}
}

// TestNAdamScalarsLoadShard: LocalChunks carries each piece's mu_product
// and LoadShard gives it back: the run continues bit for bit. Chunks
// without it (a checkpoint written before chunks carried scalars) still
// load, the step recomputing mu_product from the step count; bad values
// are refused.
func TestNAdamScalarsLoadShard(t *testing.T) {
	var r nadamRun
	_, want, _ := r.plain(t)
	for _, opts := range []Options{{}, {Partition: "flat"}, {Partition: "flat", BucketCapMB: 0.0001}} {
		t.Run(layoutName(opts), func(t *testing.T) {
			onRanks(t, 2, func(rank int, pg dist.ProcessGroup, rt *tensor.Runtime) error {
				z, ps, err := r.zero(pg, rt, nil, opts)
				if err != nil {
					return err
				}
				for step := range 3 {
					if err := r.step(rt, ps, z.Groups, step, z.Step); err != nil {
						return err
					}
				}
				at3 := values(ps)
				chunks, err := z.LocalChunks()
				if err != nil {
					return err
				}
				// Copies: the chunks share the state's memory.
				for i := range chunks {
					chunks[i].Data = slices.Clone(chunks[i].Data)
					for k := range chunks[i].Data {
						chunks[i].Data[k] = slices.Clone(chunks[i].Data[k])
					}
					if _, ok := chunks[i].Scalars["mu_product"]; !ok {
						return fmt.Errorf("chunk %d of parameter %d has no mu_product: %v", i, chunks[i].Index, chunks[i].Scalars)
					}
				}
				groups := optim.MakeStateDict(optim.NAdam, z.Groups, func(*tensor.Tensor) *optim.State { return nil }).ParamGroups
				load := func(chunks []Chunk) (*Optimizer, []*tensor.Tensor, error) {
					z2, ps2, err := r.zero(pg, rt, at3, opts)
					if err != nil {
						return nil, nil, err
					}
					return z2, ps2, z2.LoadShard(groups, chunks)
				}
				// Bad values are refused, naming the entry.
				for _, bad := range []struct {
					scalars map[string]float64
					want    string
				}{
					{map[string]float64{"mu_product": -0.25}, `"mu_product" is -0.25`},
					{map[string]float64{"mu_product": 1.5}, `"mu_product" is 1.5`},
					{map[string]float64{"velocity": 0.5}, `unknown scalar "velocity"`},
				} {
					edited := slices.Clone(chunks)
					edited[0].Scalars = bad.scalars
					if _, _, err := load(edited); err == nil || !strings.Contains(err.Error(), bad.want) {
						return fmt.Errorf("loading chunks with scalars %v: %v, want an error saying %s", bad.scalars, err, bad.want)
					}
				}
				z2, ps2, err := load(chunks)
				if err != nil {
					return err
				}
				for step := 3; step < 6; step++ {
					if err := r.step(rt, ps2, z2.Groups, step, z2.Step); err != nil {
						return err
					}
				}
				if err := sameExactly(values(ps2), want, "after LoadShard"); err != nil {
					return err
				}
				// Without scalars: loads, and continues as recomputed.
				old := slices.Clone(chunks)
				for i := range old {
					old[i].Scalars = nil
				}
				z3, ps3, err := load(old)
				if err != nil {
					return fmt.Errorf("chunks without scalars: %v", err)
				}
				for step := 3; step < 6; step++ {
					if err := r.step(rt, ps3, z3.Groups, step, z3.Step); err != nil {
						return err
					}
				}
				if sameExactly(values(ps3), want, "") == nil {
					return fmt.Errorf("recomputing mu_product under a changed β₁ matched the uninterrupted run: the test shows nothing")
				}
				return nil
			})
		})
	}
}

// onRuntime copies sd's tensors onto rt.
func onRuntime(rt *tensor.Runtime, sd *optim.StateDict) *optim.StateDict {
	out := &optim.StateDict{ParamGroups: sd.ParamGroups, State: map[int]map[string]*tensor.Tensor{}}
	for k, e := range sd.State {
		out.State[k] = map[string]*tensor.Tensor{}
		for name, t := range e {
			v, _ := t.Float64s()
			out.State[k][name] = rt.FromValues(t.DType(), v, t.Shape()...).Persist()
		}
	}
	return out
}

// sameExactly compares parameter values bit for bit.
func sameExactly(got, want [][]float64, when string) error {
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				return fmt.Errorf("parameter %d[%d] = %v %s, the uninterrupted run %v", i, j, got[i][j], when, want[i][j])
			}
		}
	}
	return nil
}
