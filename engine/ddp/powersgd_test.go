package ddp

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/rand"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestRandintIsNumpys: numpy.random.RandomState(s).randint(1_000_000_000)
// is 209652396 for s = 0 and 327741615 for s = 7 (numpy 1.24).
func TestRandintIsNumpys(t *testing.T) {
	for seed, want := range map[uint64]uint32{0: 209652396, 7: 327741615} {
		if got := randint(rand.New(seed), 1_000_000_000); got != want {
			t.Errorf("seed %d: %d, numpy gives %d", seed, got, want)
		}
	}
}

// TestPowerSGDMatchesPyTorch trains with the PowerSGD hook on 2 ranks and
// compares the parameters with PyTorch's after the same training
// (testdata/gen_powersgd.py: torch's powerSGD_hook on gloo): the same
// compression, random Q matrices, error feedback and warm start.
func TestPowerSGDMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/powersgd.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]map[string][]float64
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	configs := map[string]PowerSGDOptions{
		"rank1":             {Rank: 1, StartIter: 2},
		"rank2-cold":        {Rank: 2, StartIter: 2, NoWarmStart: true, Seed: 7},
		"no-error-feedback": {Rank: 1, StartIter: 2, NoErrorFeedback: true},
		"start0":            {Rank: 1, StartIter: -1, NoErrorFeedback: true, NoWarmStart: true},
		// batched_powerSGD_hook.
		"batched-rank1":             {Rank: 1, StartIter: 2},
		"batched-rank2-cold":        {Rank: 2, StartIter: 2, NoWarmStart: true, Seed: 7},
		"batched-no-error-feedback": {Rank: 1, StartIter: 2, NoErrorFeedback: true},
	}
	if len(want) != len(configs) {
		t.Fatalf("the fixture has %d configurations, the test %d", len(want), len(configs))
	}
	for name, opts := range configs {
		batched := strings.HasPrefix(name, "batched-")
		t.Run(name, func(t *testing.T) {
			w, _ := dist.NewWorld(2, dist.Options{})
			defer w.Close()
			got := make([]map[string][]float64, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for rank := range 2 {
				wg.Go(func() {
					got[rank], errs[rank] = trainPowerSGD(w.Group(rank), opts, batched)
				})
			}
			wg.Wait()
			for rank := range 2 {
				if errs[rank] != nil {
					t.Fatalf("rank %d: %v", rank, errs[rank])
				}
				for pname, vals := range want[name] {
					for i, v := range vals {
						if g := got[rank][pname][i]; math.Abs(g-v) > 1e-5 {
							t.Fatalf("rank %d, %s[%d] = %v, PyTorch %v", rank, pname, i, g, v)
						}
					}
				}
			}
		})
	}
}

func trainPowerSGD(pg dist.ProcessGroup, opts PowerSGDOptions, batched bool) (map[string][]float64, error) {
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
	s, err := NewPowerSGD(pg, opts)
	if err != nil {
		return nil, err
	}
	hook := s.Hook()
	if batched {
		hook = s.BatchedHook()
	}
	if err := d.RegisterCommHook(hook); err != nil {
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
	lo := 6 * pg.Rank()
	for range 6 {
		sc := rt.OpenScope()
		if err := opt.ZeroGrad(false); err != nil {
			return nil, err
		}
		loss := tensor.CrossEntropy(model.Forward(x.Narrow(0, lo, 6)), y.Narrow(0, lo, 6), tensor.DefaultCrossEntropy)
		if err := loss.Backward(); err != nil {
			return nil, err
		}
		if err := opt.Step(); err != nil {
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

// TestPowerSGDOptionsAsPyTorch: PowerSGDState's checks.
func TestPowerSGDOptionsAsPyTorch(t *testing.T) {
	tests := []struct {
		opts PowerSGDOptions
		ok   bool
	}{
		{PowerSGDOptions{}, true}, // start 1000
		{PowerSGDOptions{StartIter: 2}, true},
		{PowerSGDOptions{StartIter: 1}, false},
		{PowerSGDOptions{StartIter: -1}, false}, // start 0, error feedback and warm start on
		{PowerSGDOptions{StartIter: -1, NoErrorFeedback: true}, false},
		{PowerSGDOptions{StartIter: -1, NoWarmStart: true}, false},
		{PowerSGDOptions{StartIter: -1, NoErrorFeedback: true, NoWarmStart: true}, true},
		{PowerSGDOptions{StartIter: 1, NoErrorFeedback: true, NoWarmStart: true}, true},
		{PowerSGDOptions{Rank: -1, StartIter: 2}, false},
	}
	for _, tt := range tests {
		err := tt.opts.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%+v: %v", tt.opts, err)
		}
		if _, err2 := NewPowerSGD(nil, tt.opts); (err2 == nil) != tt.ok {
			t.Errorf("NewPowerSGD(%+v): %v", tt.opts, err2)
		}
	}
}
