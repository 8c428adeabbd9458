package zero

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

func mlp(t *testing.T, rt *tensor.Runtime) *nn.Sequential {
	t.Helper()
	l1, err := nn.NewLinear(rt, 16, 32, true)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := nn.NewLinear(rt, 32, 32, true)
	l3, _ := nn.NewLinear(rt, 32, 4, true)
	m, err := nn.NewSequential(l1, nn.GELU(""), l2, nn.ReLU(), l3)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPartitionMatchesPyTorch(t *testing.T) {
	// zero-reference.md: on 2 ranks, rank 0 gets 2.weight and rank 1 the rest.
	w, _ := dist.NewWorld(2, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	m := mlp(t, rt)
	z, err := New(w.Group(0), optim.AdamW, m.Parameters(), optim.DefaultAdamW().Group(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for r, shard := range z.Shards() {
		var names []string
		for _, p := range shard {
			for _, np := range m.NamedParameters() {
				if np.Tensor == p {
					names = append(names, np.Name)
				}
			}
		}
		got = append(got, fmt.Sprintf("%d: %s", r, strings.Join(names, " ")))
	}
	want := []string{"0: 2.weight", "1: 0.weight 0.bias 2.bias 4.weight 4.bias"}
	if !slices.Equal(got, want) {
		t.Errorf("shards %q, want %q", got, want)
	}
}

func TestPartitionBalance(t *testing.T) {
	// Sizes [9, 7, 5, 3] × N give every rank the same total, also when the
	// second half arrives with AddParamGroup.
	for n := 1; n <= 4; n++ {
		w, _ := dist.NewWorld(n, dist.Options{})
		rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
		var params []*tensor.Tensor
		for range n {
			for _, size := range []int{9, 7, 5, 3} {
				params = append(params, rt.Zeros(dtype.Float32, size).Persist())
			}
		}
		z, err := New(w.Group(0), optim.SGD, params[:2*n], optim.SGDConfig{LR: 0.1}.Group(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		g := z.Defaults()
		g.Params = params[2*n:]
		if err := z.AddParamGroup(g); err != nil {
			t.Fatal(err)
		}
		for r, shard := range z.Shards() {
			total := 0
			for _, p := range shard {
				total += p.Numel()
			}
			if total != 24 {
				t.Errorf("n=%d: rank %d holds %d elements, want 24", n, r, total)
			}
		}
		w.Close()
	}
}

func TestConstructorErrors(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	if _, err := New(w.Group(0), optim.SGD, nil, optim.SGDConfig{LR: 0.1}.Group(), Options{}); err == nil {
		t.Error("an empty parameter list was accepted")
	}
	mixed := []*tensor.Tensor{rt.Zeros(dtype.Float32, 2), rt.Zeros(dtype.Float64, 2)}
	if _, err := New(w.Group(0), optim.SGD, mixed, optim.SGDConfig{LR: 0.1}.Group(), Options{}); err == nil || !strings.Contains(err.Error(), "one dtype") {
		t.Errorf("mixed dtypes: %v", err)
	}
	if _, err := New(w.Group(0), optim.SGD, mixed[:1], optim.SGDConfig{LR: 0.1}.Group(), Options{Partition: "round-robin"}); err == nil {
		t.Error("an unknown partition was accepted")
	}
}

// trainCase trains the MLP with DDP on n ranks, with ZeRO or the plain
// optimizer, two parameter groups (the last layer at a tenth of the
// learning rate), a StepLR scheduler, 6 steps, and returns rank 0's
// parameters; every rank's must agree.
func trainCase(t *testing.T, n int, kind optim.Kind, hyper optim.ParamGroup, useZero bool) ([][]float64, []Memory) {
	w, _ := dist.NewWorld(n, dist.Options{})
	defer w.Close()
	vals := make([][][]float64, n)
	mems := make([]Memory, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		wg.Go(func() {
			errs[rank] = func() error {
				rt := tensor.NewRuntime(cpu.New(cpu.Options{}), uint64(rank))
				m := mlp(t, rt)
				var named []ddp.Param
				for _, p := range m.NamedParameters() {
					named = append(named, ddp.Param{Name: p.Name, Tensor: p.Tensor})
				}
				d, err := ddp.New(w.Group(rank), named, ddp.Options{})
				if err != nil {
					return err
				}
				defer d.Close()
				params := m.Parameters()
				first, last := params[:4], params[4:]
				var opt interface {
					Step() error
					ZeroGrad(bool) error
					ParamGroups() []*optim.ParamGroup
				}
				var z *Optimizer
				if useZero {
					z, err = New(w.Group(rank), kind, first, hyper, Options{})
					opt = z
				} else {
					var o *optim.Optimizer
					o, err = optim.New(kind, first, hyper)
					opt = o
				}
				if err != nil {
					return err
				}
				g := hyper.Hyper()
				g.LR /= 10
				g.Params = last
				switch o := opt.(type) {
				case *Optimizer:
					err = o.AddParamGroup(g)
				case *optim.Optimizer:
					err = o.AddParamGroup(g)
				}
				if err != nil {
					return err
				}
				sched, err := optim.NewStepLR(opt, 2, 0.5)
				if err != nil {
					return err
				}
				per := 24 / n
				for step := range 6 {
					sc := rt.OpenScope()
					xs := make([]float64, 24*16)
					ys := make([]int64, 24)
					for i := range xs {
						xs[i] = math.Sin(float64(i*3 + step))
					}
					for i := range ys {
						ys[i] = int64((i + step) % 4)
					}
					x, y := rt.FromValues(dtype.Float32, xs, 24, 16), rt.FromInt64s(ys, 24)
					if err := opt.ZeroGrad(false); err != nil {
						return err
					}
					loss := tensor.CrossEntropy(m.Forward(x.Narrow(0, rank*per, per)), y.Narrow(0, rank*per, per), tensor.DefaultCrossEntropy)
					if err := loss.Backward(); err != nil {
						return err
					}
					if err := opt.Step(); err != nil {
						return err
					}
					sched.Step()
					sc.Close()
				}
				for _, p := range params {
					v, err := p.Float64s()
					if err != nil {
						return err
					}
					vals[rank] = append(vals[rank], v)
				}
				if z != nil {
					mems[rank] = z.Memory()
				}
				return nil
			}()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := 1; r < n; r++ {
		for i := range vals[0] {
			if !slices.Equal(vals[r][i], vals[0][i]) {
				t.Fatalf("rank %d's parameter %d differs from rank 0's", r, i)
			}
		}
	}
	return vals[0], mems
}

func TestParityWithDDPAndThePlainOptimizer(t *testing.T) {
	sgd := optim.SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}.Group()
	sgdMax := sgd.Hyper()
	sgdMax.Maximize = true
	adam := optim.DefaultAdam().Group()
	adam.LR = 1e-2
	adamW := optim.DefaultAdamW().Group()
	adamW.LR = 1e-2
	for _, c := range []struct {
		name  string
		kind  optim.Kind
		hyper optim.ParamGroup
	}{
		{"SGD", optim.SGD, sgd}, {"SGD maximize", optim.SGD, sgdMax}, {"Adam", optim.Adam, adam}, {"AdamW", optim.AdamW, adamW},
	} {
		for n := 1; n <= 4; n++ {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				want, _ := trainCase(t, n, c.kind, c.hyper, false)
				got, mems := trainCase(t, n, c.kind, c.hyper, true)
				for i := range want {
					for j := range want[i] {
						if a, b := got[i][j], want[i][j]; math.Abs(a-b) > 1e-6*math.Max(1, math.Abs(b)) {
							t.Fatalf("parameter %d, element %d: ZeRO %v, plain %v", i, j, a, b)
						}
					}
				}
				// Optimizer state per rank: at most its share plus the largest
				// parameter's state.
				var total, largest int64
				for _, m := range mems {
					total += m.State
				}
				largest = 32 * 32 * 4 * 2 // 2.weight's exp_avg and exp_avg_sq (or momentum)
				for r, m := range mems {
					if m.State > total/int64(n)+largest {
						t.Errorf("rank %d holds %d bytes of optimizer state; total %d over %d ranks", r, m.State, total, n)
					}
				}
			})
		}
	}
}
