package optim_test

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/tensorio"
)

func newRT() *tensor.Runtime { return tensor.NewRuntime(cpu.New(cpu.Options{}), 0) }

type fixture struct {
	t    map[string]*tensor.Tensor
	meta map[string]string
}

func load(t *testing.T, rt *tensor.Runtime) fixture {
	t.Helper()
	ts, meta, err := tensorio.LoadSafetensors(rt, "testdata/optim.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return fixture{tensorio.Map(ts), meta}
}

func closeTo(t *testing.T, name string, got, want *tensor.Tensor, rtol float64) {
	t.Helper()
	if want == nil {
		t.Fatalf("%s: no such fixture tensor", name)
	}
	if got == nil {
		t.Fatalf("%s: missing (PyTorch has %v)", name, want.Shape())
	}
	if !slices.Equal(got.Shape(), want.Shape()) {
		t.Fatalf("%s: shape %v, want %v", name, got.Shape(), want.Shape())
	}
	g, _ := got.Float64s()
	w, _ := want.Float64s()
	for i := range g {
		if math.Abs(g[i]-w[i]) > rtol*math.Max(math.Abs(w[i]), 1e-3) {
			t.Fatalf("%s[%d] = %.9g, PyTorch %.9g", name, i, g[i], w[i])
		}
	}
}

type trajectoryMeta struct {
	Optimizer string           `json:"optimizer"`
	Kwargs    map[string]any   `json:"kwargs"`
	Groups    []map[string]any `json:"groups"`
	Steps     int              `json:"steps"`
	NoGrad    map[string][]int `json:"no_grad"`
	StateDict struct {
		State       map[string]map[string]any `json:"state"`
		ParamGroups []map[string]any          `json:"param_groups"`
	} `json:"state_dict"`
}

// group turns PyTorch keyword arguments into a param group over defaults,
// through the algorithm's options (ParamGroup.Set, by PyTorch's names).
func group(t *testing.T, kind optim.Kind, base optim.ParamGroup, kw map[string]any) optim.ParamGroup {
	t.Helper()
	g := base.Hyper()
	for k, v := range kw {
		if k == "params" {
			continue
		}
		if _, ok := kind.Algorithm().Option(k); !ok {
			t.Fatalf("unknown keyword %q for %v", k, kind)
		}
		if pair, ok := v.([]any); ok {
			v = [2]float64{pair[0].(float64), pair[1].(float64)}
		}
		if err := g.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func TestOptimizersMatchPyTorch(t *testing.T) {
	rt := newRT()
	fx := load(t, rt)
	var names []string
	for k := range fx.meta {
		var kind struct{ Scheduler *string }
		_ = json.Unmarshal([]byte(fx.meta[k]), &kind)
		if !strings.HasPrefix(k, "_") && !strings.HasPrefix(k, "clip") && kind.Scheduler == nil {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	if len(names) < 17 {
		t.Fatalf("only %d trajectories in the fixture", len(names))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			var m trajectoryMeta
			if err := json.Unmarshal([]byte(fx.meta[name]), &m); err != nil {
				t.Fatal(err)
			}
			kind, err := optim.ParseKind(m.Optimizer)
			if err != nil {
				t.Fatal(err)
			}
			base := optim.Defaults(kind)
			params := make([]*tensor.Tensor, 3)
			for j := range params {
				params[j] = fx.t[fmt.Sprintf("%s/p%d/init", name, j)].Clone().Persist()
				if err := params[j].SetRequiresGrad(true); err != nil {
					t.Fatal(err)
				}
			}
			defaults := group(t, kind, base, m.Kwargs)
			var opt *optim.Optimizer
			if m.Groups == nil {
				opt, err = optim.New(kind, params, defaults)
			} else {
				opt, err = optim.New(kind, nil, defaults)
				for _, gm := range m.Groups {
					g := group(t, kind, defaults, gm)
					for _, idx := range gm["params"].([]any) {
						g.Params = append(g.Params, params[int(idx.(float64))])
					}
					if err == nil {
						err = opt.AddParamGroup(g)
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			for s := 1; s <= m.Steps; s++ {
				for j, p := range params {
					g := fx.t[fmt.Sprintf("%s/step%d/p%d/grad", name, s, j)]
					if slices.Contains(m.NoGrad[fmt.Sprint(j)], s) != (g == nil) {
						t.Fatalf("step %d p%d: fixture gradient presence disagrees with no_grad", s, j)
					}
					if g == nil {
						if err := p.SetGrad(nil); err != nil {
							t.Fatal(err)
						}
						continue
					}
					if err := p.SetGrad(g.Clone()); err != nil {
						t.Fatal(err)
					}
				}
				if err := opt.Step(); err != nil {
					t.Fatal(err)
				}
				for j, p := range params {
					prefix := fmt.Sprintf("%s/step%d/p%d/", name, s, j)
					closeTo(t, prefix+"param", p, fx.t[prefix+"param"], 1e-5)
					st := opt.State(p)
					for _, key := range append(slices.Clone(kind.Algorithm().Entries), "master_param") {
						want, ok := fx.t[prefix+key]
						if !ok {
							continue
						}
						var got *tensor.Tensor
						if st != nil {
							got = st.Entry(key)
						}
						closeTo(t, prefix+key, got, want, 1e-5)
					}
					for _, key := range kind.Algorithm().Scalars {
						want, ok := fx.t[prefix+key]
						if !ok {
							continue
						}
						w, _ := want.Item()
						if g, ok := st.Scalars[key]; !ok || g != w {
							t.Fatalf("%s%s = %v (kept: %v), PyTorch %v", prefix, key, g, ok, w)
						}
					}
				}
			}
			checkStateDict(t, opt, &m, fx)
		})
	}
}

// checkStateDict compares the layout and values of the state dict with
// PyTorch's, then reloads it into a fresh optimizer.
func checkStateDict(t *testing.T, opt *optim.Optimizer, m *trajectoryMeta, fx fixture) {
	t.Helper()
	sd, err := opt.StateDict()
	if err != nil {
		t.Fatal(err)
	}
	if len(sd.ParamGroups) != len(m.StateDict.ParamGroups) {
		t.Fatalf("%d param groups, PyTorch %d", len(sd.ParamGroups), len(m.StateDict.ParamGroups))
	}
	for i, want := range m.StateDict.ParamGroups {
		raw, _ := json.Marshal(sd.ParamGroups[i])
		var got map[string]any
		_ = json.Unmarshal(raw, &got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("param group %d:\n got %v\nwant %v", i, got, want)
		}
	}
	for idx, entry := range m.StateDict.State {
		var i int
		fmt.Sscan(idx, &i)
		for key, v := range entry {
			got := sd.State[i][key]
			switch v := v.(type) {
			case nil:
				if got != nil {
					t.Errorf("state %d %s: PyTorch has None", i, key)
				}
			case string:
				if key == "step" {
					gv, _ := got.Item()
					wv, _ := fx.t[v].Item()
					if gv != wv {
						t.Errorf("state %d step %v, PyTorch %v", i, gv, wv)
					}
					continue
				}
				closeTo(t, fmt.Sprintf("state %d %s", i, key), got, fx.t[v], 1e-5)
			}
		}
	}
	// Round trip into a fresh optimizer over fresh parameters.
	rt := opt.Params()[0].Runtime()
	var fresh []*tensor.Tensor
	for _, p := range opt.Params() {
		q := tensor.ZerosLike(p).Persist()
		_ = q.SetRequiresGrad(true)
		fresh = append(fresh, q)
	}
	o2, _ := optim.New(opt.Kind(), nil, opt.Defaults())
	at := 0
	for _, g := range opt.Groups {
		ng := g.Hyper()
		ng.LR = 12345 // overwritten by the load
		ng.Params = fresh[at : at+len(g.Params)]
		at += len(g.Params)
		if err := o2.AddParamGroup(ng); err != nil {
			t.Fatal(err)
		}
	}
	if err := o2.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	_ = rt
	for i, g := range o2.Groups {
		if g.LR != opt.Groups[i].LR {
			t.Errorf("reloaded lr %v, want %v", g.LR, opt.Groups[i].LR)
		}
	}
	for i, p := range fresh {
		a, b := opt.State(opt.Params()[i]), o2.State(p)
		if (a == nil) != (b == nil) || (a != nil && a.Step != b.Step) {
			t.Fatalf("reloaded state %d differs", i)
		}
	}
}

func TestClipGradNormMatchesPyTorch(t *testing.T) {
	rt := newRT()
	fx := load(t, rt)
	for _, tc := range []struct {
		tag      string
		max, typ float64
	}{{"max1", 1, 2}, {"max0.1", 0.1, 2}, {"max10", 10, 2}, {"inf_max1", 1, math.Inf(1)}} {
		params := make([]*tensor.Tensor, 3)
		for j := range params {
			g := fx.t[fmt.Sprintf("clip/in/g%d", j)]
			params[j] = tensor.ZerosLike(g)
			_ = params[j].SetRequiresGrad(true)
			_ = params[j].SetGrad(g.Clone())
		}
		total, err := optim.ClipGradNorm(params, tc.max, tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := fx.t["clip_"+tc.tag+"/total_norm"].Item()
		if math.Abs(total-want) > 1e-6*want {
			t.Errorf("%s: total norm %.9g, PyTorch %.9g", tc.tag, total, want)
		}
		for j, p := range params {
			closeTo(t, fmt.Sprintf("clip_%s/g%d", tc.tag, j), p.Grad(), fx.t[fmt.Sprintf("clip_%s/g%d", tc.tag, j)], 1e-6)
		}
	}
}

func TestSchedulersMatchPyTorch(t *testing.T) {
	rt := newRT()
	fx := load(t, rt)
	p := rt.Zeros(tensor.Float32, 1)
	_ = p.SetRequiresGrad(true)
	mk := func() *optim.Optimizer {
		o, err := optim.NewSGD([]*tensor.Tensor{p}, optim.SGDConfig{LR: 0.1})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, tc := range []struct {
		name  string
		sched func(o *optim.Optimizer) *optim.Scheduler
	}{
		{"steplr", func(o *optim.Optimizer) *optim.Scheduler { s, _ := optim.NewStepLR(o, 2, 0.5); return s }},
		{"warmup_cosine", func(o *optim.Optimizer) *optim.Scheduler { s, _ := optim.NewWarmupCosine(o, 3, 10, 0.1); return s }},
		{"exponentiallr", func(o *optim.Optimizer) *optim.Scheduler { s, _ := optim.NewExponentialLR(o, 0.9); return s }},
		{"multisteplr", func(o *optim.Optimizer) *optim.Scheduler {
			s, _ := optim.NewMultiStepLR(o, []int{2, 5, 5}, 0.5)
			return s
		}},
		{"linearlr", func(o *optim.Optimizer) *optim.Scheduler { s, _ := optim.NewLinearLR(o, 0.25, 0.9, 4); return s }},
		{"cosineannealinglr", func(o *optim.Optimizer) *optim.Scheduler { s, _ := optim.NewCosineAnnealingLR(o, 5, 0.01); return s }},
	} {
		want, _ := fx.t[tc.name+"/lr"].Float64s()
		s := tc.sched(mk())
		got := []float64{s.LastLR()[0]}
		for i := 1; i < len(want); i++ {
			s.Step()
			got = append(got, s.LastLR()[0])
		}
		// Bit for bit, but for cosines: Go's math.Cos and the C library's
		// that Python calls may differ in the last bit.
		tol := 0.0
		if tc.name == "cosineannealinglr" {
			tol = 1e-15
		}
		for i := range want {
			if i >= len(got) || math.Abs(got[i]-want[i]) > tol*math.Abs(want[i]) {
				t.Errorf("%s: %v, PyTorch %v", tc.name, got, want)
				break
			}
		}
	}
}

// TestPlateauMatchesPyTorch: ReduceLROnPlateau's learning rates for a
// sequence of metrics, minimising with a relative threshold and cooldown,
// maximising with an absolute one.
func TestPlateauMatchesPyTorch(t *testing.T) {
	rt := newRT()
	fx := load(t, rt)
	p := rt.Zeros(tensor.Float32, 1)
	_ = p.SetRequiresGrad(true)
	metrics := []float64{1.0, 0.9, 0.95, 0.95, 0.91, 0.96, 0.97, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.4}
	minOpts := optim.DefaultPlateau()
	minOpts.Factor, minOpts.Patience, minOpts.Cooldown, minOpts.MinLR = 0.5, 1, 1, 0.02
	maxOpts := optim.DefaultPlateau()
	maxOpts.Mode, maxOpts.Factor, maxOpts.Patience, maxOpts.Threshold, maxOpts.ThresholdMode = "max", 0.3, 2, 0.05, "abs"
	for name, opts := range map[string]optim.PlateauOptions{"plateau_min": minOpts, "plateau_max_abs": maxOpts} {
		o, _ := optim.NewSGD([]*tensor.Tensor{p}, optim.SGDConfig{LR: 0.1})
		s, err := optim.NewPlateau(o, opts)
		if err != nil {
			t.Fatal(err)
		}
		var got []float64
		for _, m := range metrics {
			s.Step(m)
			got = append(got, s.LastLR()[0])
		}
		want, _ := fx.t[name+"/lr"].Float64s()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, PyTorch %v", name, got, want)
		}
	}
	if _, err := optim.NewPlateau(nil, optim.PlateauOptions{Factor: 1}); err == nil {
		t.Error("factor 1 accepted")
	}
}

func TestValidation(t *testing.T) {
	rt := newRT()
	p := rt.Zeros(tensor.Float32, 2)
	_ = p.SetRequiresGrad(true)
	ps := []*tensor.Tensor{p}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"negative lr", func() error { _, err := optim.NewSGD(ps, optim.SGDConfig{LR: -1}); return err }(), "learning rate"},
		{"nesterov without momentum", func() error { _, err := optim.NewSGD(ps, optim.SGDConfig{LR: 1, Nesterov: true}); return err }(), "nesterov"},
		{"beta", func() error { c := optim.DefaultAdam(); c.Beta1 = 1; _, err := optim.NewAdam(ps, c); return err }(), "beta parameter at index 0"},
		{"eps", func() error { c := optim.DefaultAdamW(); c.Eps = -1; _, err := optim.NewAdamW(ps, c); return err }(), "epsilon"},
		{"duplicate", func() error {
			o, _ := optim.NewAdam(ps, optim.DefaultAdam())
			g := o.Defaults()
			g.Params = ps
			return o.AddParamGroup(g)
		}(), "more than one parameter group"},
		{"int param", func() error {
			_, err := optim.NewSGD([]*tensor.Tensor{rt.Zeros(tensor.Int64, 2)}, optim.SGDConfig{LR: 1})
			return err
		}(), "non-floating-point"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, c.err, c.want)
		}
	}
}

// TestFunctionalUpdateSkipsMissingGradients is the property ZeRO relies on:
// a nil gradient leaves the parameter and its state untouched.
func TestFunctionalUpdateSkipsMissingGradients(t *testing.T) {
	rt := newRT()
	a, b := rt.Ones(tensor.Float32, 3), rt.Ones(tensor.Float32, 3)
	states := make([]*optim.State, 2)
	h := optim.ParamGroup{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	if err := optim.Update(optim.AdamW, &h, []*tensor.Tensor{a, b}, []*tensor.Tensor{rt.Ones(tensor.Float32, 3), nil}, states); err != nil {
		t.Fatal(err)
	}
	if states[1] != nil {
		t.Fatal("state created for a parameter without gradient")
	}
	if v, _ := b.SumAll().Item(); v != 3 {
		t.Fatalf("parameter without gradient changed: %v", v)
	}
	if v, _ := a.SumAll().Item(); v == 3 || states[0].Step != 1 {
		t.Fatalf("parameter with gradient unchanged or step %d", states[0].Step)
	}
}

// TestLoadStateDictRejects checks that a bad dict is refused with a
// message naming the entry, and that nothing changes.
func TestLoadStateDictRejects(t *testing.T) {
	rt := newRT()
	p := rt.Ones(tensor.Float32, 3)
	_ = p.SetRequiresGrad(true)
	o, err := optim.NewAdamW([]*tensor.Tensor{p}, optim.DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	_ = p.SetGrad(rt.Ones(tensor.Float32, 3))
	if err := o.Step(); err != nil {
		t.Fatal(err)
	}
	before, _ := o.State(p).ExpAvg.Float64s()
	for _, tc := range []struct {
		name string
		edit func(sd *optim.StateDict)
		want string
	}{
		{"unknown entry", func(sd *optim.StateDict) { sd.State[0]["velocity"] = rt.Zeros(tensor.Float32, 3) }, `unknown entry "velocity"`},
		{"wrong shape", func(sd *optim.StateDict) { sd.State[0]["exp_avg"] = rt.Zeros(tensor.Float32, 4) }, `"exp_avg" has shape [4]`},
		{"master weights of a float32 parameter", func(sd *optim.StateDict) { sd.State[0]["master_param"] = rt.Zeros(tensor.Float32, 3) },
			"master_param, but the parameter is float32"},
		{"index out of range", func(sd *optim.StateDict) { sd.State[5] = sd.State[0] }, "parameter index 5"},
		{"groups", func(sd *optim.StateDict) { sd.ParamGroups = append(sd.ParamGroups, sd.ParamGroups[0]) }, "number of parameter groups"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sd, _ := o.StateDict()
			tc.edit(sd)
			err := o.LoadStateDict(sd)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if after, _ := o.State(p).ExpAvg.Float64s(); !slices.Equal(after, before) {
				t.Fatal("a rejected dict changed the state")
			}
		})
	}
}

// TestOneCycleAndSequentialMatchPyTorch: ConstantLR, PolynomialLR,
// OneCycleLR (its rates and the momentum it cycles, for Adam's β₁ and
// SGD's momentum, two and three phases) and SequentialLR (each scheduler
// restarted at its milestone by its closed form) give PyTorch 1.13's
// values, to the last bit but for cosines and powers (Go's math library
// and C's may differ in the last bit).
func TestOneCycleAndSequentialMatchPyTorch(t *testing.T) {
	rt := newRT()
	fx := load(t, rt)
	p := rt.Zeros(tensor.Float32, 1)
	_ = p.SetRequiresGrad(true)
	sgd := func(momentum float64) *optim.Optimizer {
		o, err := optim.NewSGD([]*tensor.Tensor{p}, optim.SGDConfig{LR: 0.1, Momentum: momentum})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	adam := func(kind optim.Kind) *optim.Optimizer {
		cfg := optim.DefaultAdam()
		cfg.LR = 0.1
		o, err := optim.New(kind, []*tensor.Tensor{p}, cfg.Group())
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	type stepper interface {
		Step() error
		LastLR() []float64
	}
	must := func(s stepper, err error) stepper {
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	oneCycle := func(o *optim.Optimizer, kind optim.Kind, set func(*optim.OneCycleOptions)) stepper {
		opts := optim.DefaultOneCycle()
		set(&opts)
		return must(optim.NewOneCycleLR(o, kind, opts))
	}
	for _, tc := range []struct {
		name     string
		opt      *optim.Optimizer
		sched    func(o *optim.Optimizer) stepper
		momentum func(g *optim.ParamGroup) float64
	}{
		{"constantlr", sgd(0), func(o *optim.Optimizer) stepper { return must(optim.NewConstantLR(o, 0.4, 3)) }, nil},
		{"polynomiallr", sgd(0), func(o *optim.Optimizer) stepper { return must(optim.NewPolynomialLR(o, 4, 2)) }, nil},
		{"onecycle_cos_adam", adam(optim.Adam), func(o *optim.Optimizer) stepper {
			return oneCycle(o, optim.Adam, func(c *optim.OneCycleOptions) { c.MaxLR, c.TotalSteps = []float64{0.5}, 11 })
		}, func(g *optim.ParamGroup) float64 { return g.Beta1 }},
		{"onecycle_linear_sgd", sgd(0.9), func(o *optim.Optimizer) stepper {
			return oneCycle(o, optim.SGD, func(c *optim.OneCycleOptions) {
				c.MaxLR, c.Epochs, c.StepsPerEpoch, c.AnnealStrategy, c.PctStart = []float64{0.5}, 3, 4, "linear", 0.25
				c.BaseMomentum, c.MaxMomentum, c.DivFactor, c.FinalDivFactor = []float64{0.8}, []float64{0.9}, 10, 100
			})
		}, func(g *optim.ParamGroup) float64 { return g.Momentum }},
		{"onecycle_three_phase_adamw", adam(optim.AdamW), func(o *optim.Optimizer) stepper {
			return oneCycle(o, optim.AdamW, func(c *optim.OneCycleOptions) { c.MaxLR, c.TotalSteps, c.ThreePhase = []float64{0.3}, 13, true })
		}, func(g *optim.ParamGroup) float64 { return g.Beta1 }},
		{"sequential_linear_cosine", sgd(0), func(o *optim.Optimizer) stepper {
			a, _ := optim.NewLinearLR(o, 0.1, 1, 3)
			b, _ := optim.NewCosineAnnealingLR(o, 6, 0.001)
			return must(optim.NewSequentialLR(o, []*optim.Scheduler{a, b}, []int{3}))
		}, nil},
		{"sequential_constant_exp_step", sgd(0), func(o *optim.Optimizer) stepper {
			a, _ := optim.NewConstantLR(o, 0.5, 2)
			b, _ := optim.NewExponentialLR(o, 0.9)
			c, _ := optim.NewStepLR(o, 2, 0.5)
			return must(optim.NewSequentialLR(o, []*optim.Scheduler{a, b, c}, []int{2, 5}))
		}, nil},
	} {
		want, _ := fx.t[tc.name+"/lr"].Float64s()
		var wantMom []float64
		if tc.momentum != nil {
			wantMom, _ = fx.t[tc.name+"/momentum"].Float64s()
		}
		s := tc.sched(tc.opt)
		var got, gotMom []float64
		for i := range want {
			if i > 0 {
				if err := s.Step(); err != nil {
					t.Fatalf("%s: step %d: %v", tc.name, i, err)
				}
			}
			got = append(got, s.LastLR()[0])
			if tc.momentum != nil {
				gotMom = append(gotMom, tc.momentum(tc.opt.Groups[0]))
			}
		}
		close := func(a, b []float64) bool {
			if len(a) != len(b) {
				return false
			}
			for i := range a {
				if math.Abs(a[i]-b[i]) > 1e-15*math.Abs(b[i]) {
					return false
				}
			}
			return true
		}
		if !close(got, want) {
			t.Errorf("%s: rates %v, PyTorch %v", tc.name, got, want)
		}
		if !close(gotMom, wantMom) {
			t.Errorf("%s: momenta %v, PyTorch %v", tc.name, gotMom, wantMom)
		}
		if strings.HasPrefix(tc.name, "onecycle") {
			// PyTorch allows step number total_steps (one past the last
			// one it schedules) and refuses the next.
			if err := s.Step(); err != nil {
				t.Errorf("%s: step %d: %v", tc.name, len(want), err)
			}
			if err := s.Step(); err == nil || !strings.Contains(err.Error(), "total steps") {
				t.Errorf("%s: a step past the total steps: %v, want PyTorch's error", tc.name, err)
			}
		}
	}
}
