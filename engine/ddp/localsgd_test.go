package ddp

import (
	"encoding/json"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestPostLocalSGDMatchesPyTorch trains with post-local SGD on 4 ranks in
// subgroups of 2, with a PeriodicModelAverager after each step, and holds
// every rank's parameters (which differ between subgroups between
// averagings) to PyTorch's (testdata/gen_localsgd.py).
func TestPostLocalSGDMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/localsgd.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]map[string][]float64
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	configs := map[string]struct {
		start          int
		postLocal      bool
		period, warmup int
	}{
		"subgroup-allreduce": {2, true, 2, 2},
		"local-only":         {3, false, 3, 1},
	}
	if len(want) != len(configs) {
		t.Fatalf("the fixture has %d configurations, the test %d", len(want), len(configs))
	}
	for name, c := range configs {
		t.Run(name, func(t *testing.T) {
			const n = 4
			w, _ := dist.NewWorld(n, dist.Options{})
			defer w.Close()
			got := make([]map[string][]float64, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for rank := range n {
				wg.Go(func() {
					got[rank], errs[rank] = trainLocalSGD(w.Group(rank), c.start, c.postLocal, c.period, c.warmup)
				})
			}
			wg.Wait()
			for rank := range n {
				if errs[rank] != nil {
					t.Fatalf("rank %d: %v", rank, errs[rank])
				}
				for pname, vals := range want[name][rank] {
					for i, v := range vals {
						if g := got[rank][pname][i]; math.Abs(g-v) > 1e-5 {
							t.Fatalf("rank %d, %s[%d] = %v, PyTorch %v", rank, pname, i, g, v)
						}
					}
				}
			}
			if name == "local-only" && got[0]["0.weight"][0] == got[2]["0.weight"][0] {
				t.Error("the subgroups' parameters are equal after a step without averaging")
			}
		})
	}
}

func trainLocalSGD(pg dist.ProcessGroup, start int, postLocal bool, period, warmup int) (map[string][]float64, error) {
	// Subgroups of two ranks, made in the same order on every rank.
	var sub dist.ProcessGroup
	for i := range pg.Size() / 2 {
		g, err := pg.NewGroup([]int{2 * i, 2*i + 1})
		if err != nil {
			return nil, err
		}
		if g != nil {
			sub = g
		}
	}
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	l1, err := nn.NewLinear(rt, 8, 16, true)
	if err != nil {
		return nil, err
	}
	l2, _ := nn.NewLinear(rt, 16, 4, true)
	model, _ := nn.NewSequential(l1, nn.ReLU(), l2)
	var params []Param
	for _, p := range model.NamedParameters() {
		params = append(params, Param{p.Name, p.Tensor})
	}
	d, err := New(pg, params, Options{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	s, err := NewPostLocalSGD(pg, sub, start, postLocal)
	if err != nil {
		return nil, err
	}
	if err := d.RegisterCommHook(s.Hook()); err != nil {
		return nil, err
	}
	avg, err := NewPeriodicModelAverager(pg, period, warmup)
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewSGD(model.Parameters(), optim.SGDConfig{LR: 0.1})
	if err != nil {
		return nil, err
	}
	xs := make([]float64, 12*8)
	ys := make([]int64, 12)
	for i := range 12 {
		for j := range 8 {
			xs[i*8+j] = float64((i*7+j*3)%11-5) / 4
		}
		ys[i] = int64(i * 5 % 4)
	}
	x, y := rt.FromValues(dtype.Float32, xs, 12, 8), rt.FromInt64s(ys, 12)
	lo := 3 * pg.Rank()
	for range 7 {
		sc := rt.OpenScope()
		if err := opt.ZeroGrad(false); err != nil {
			return nil, err
		}
		loss := tensor.CrossEntropy(model.Forward(x.Narrow(0, lo, 3)), y.Narrow(0, lo, 3), tensor.DefaultCrossEntropy)
		if err := loss.Backward(); err != nil {
			return nil, err
		}
		if err := opt.Step(); err != nil {
			return nil, err
		}
		if err := avg.AverageParameters(model.Parameters()); err != nil {
			return nil, err
		}
		sc.Close()
	}
	out := map[string][]float64{}
	for _, p := range model.NamedParameters() {
		v, err := p.Tensor.Float64s()
		if err != nil {
			return nil, err
		}
		out[p.Name] = v
	}
	return out, nil
}

func TestLocalSGDArguments(t *testing.T) {
	for _, c := range []struct {
		period, warmup int
		ok             bool
	}{{1, 0, true}, {2, 3, true}, {0, 0, false}, {2, -1, false}} {
		if _, err := NewPeriodicModelAverager(nil, c.period, c.warmup); (err == nil) != c.ok {
			t.Errorf("period %d warmup %d: %v", c.period, c.warmup, err)
		}
	}
	if _, err := NewPostLocalSGD(nil, nil, -1, false); err == nil {
		t.Error("a negative start was accepted")
	}
	if _, err := NewPostLocalSGD(nil, nil, 2, true); err == nil {
		t.Error("post-local gradient all-reduce without a subgroup was accepted")
	}
}
