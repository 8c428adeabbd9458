package ddp

import (
	"errors"
	"fmt"
	"math"
	"slices"
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

const (
	batch = 24 // divisible by 1, 2, 3 and 4 ranks
	steps = 4
)

// replica is one rank's model and optimizer.
type replica struct {
	rt    *tensor.Runtime
	model *nn.Sequential
	opt   *optim.Optimizer
	extra *tensor.Tensor // a parameter the forward pass never uses
}

func newReplica(t *testing.T, seed uint64, withUnused bool) *replica {
	t.Helper()
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), seed)
	l1, err := nn.NewLinear(rt, 8, 32, true)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := nn.NewLinear(rt, 32, 32, true)
	l3, _ := nn.NewLinear(rt, 32, 4, true)
	model, err := nn.NewSequential(l1, nn.ReLU(), l2, nn.ReLU(), l3)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{rt: rt, model: model}
	params := model.Parameters()
	if withUnused {
		r.extra = rt.Randn(dtype.Float32, 3).Persist()
		if err := r.extra.SetRequiresGrad(true); err != nil {
			t.Fatal(err)
		}
		params = append(params, r.extra)
	}
	r.opt, err = optim.NewAdamW(params, optim.AdamConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *replica) named() []Param {
	var ps []Param
	for _, p := range r.model.NamedParameters() {
		ps = append(ps, Param{p.Name, p.Tensor})
	}
	if r.extra != nil {
		ps = append(ps, Param{"extra", r.extra})
	}
	return ps
}

// data is the global batch: inputs and class labels, the same on every rank.
func data(rt *tensor.Runtime, step int) (x, y *tensor.Tensor) {
	xs := make([]float64, batch*8)
	ys := make([]int64, batch)
	for i := range xs {
		xs[i] = math.Sin(float64(i*7+step*13)) * 2
	}
	for i := range ys {
		ys[i] = int64((i*5 + step) % 4)
	}
	return rt.FromValues(dtype.Float32, xs, batch, 8), rt.FromInt64s(ys, batch)
}

// lossOn is the mean cross-entropy of rows [lo, hi) of the step's batch,
// scaled by scale.
func (r *replica) lossOn(step, lo, hi int, scale float64) *tensor.Tensor {
	x, y := data(r.rt, step)
	loss := tensor.CrossEntropy(r.model.Forward(x.Narrow(0, lo, hi-lo)), y.Narrow(0, lo, hi-lo), tensor.DefaultCrossEntropy)
	if scale != 1 {
		loss = loss.MulScalar(scale)
	}
	return loss
}

func (r *replica) values(t *testing.T) [][]float64 {
	t.Helper()
	var out [][]float64
	for _, p := range r.model.Parameters() {
		v, err := p.Float64s()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// reference trains one replica on the whole batch.
func reference(t *testing.T) [][]float64 {
	r := newReplica(t, 0, false)
	for step := range steps {
		sc := r.rt.OpenScope()
		if err := r.opt.ZeroGrad(false); err != nil {
			t.Fatal(err)
		}
		if err := r.lossOn(step, 0, batch, 1).Backward(); err != nil {
			t.Fatal(err)
		}
		if err := r.opt.Step(); err != nil {
			t.Fatal(err)
		}
		sc.Close()
	}
	return r.values(t)
}

type variant struct {
	name       string
	opts       Options
	hook       func(pg dist.ProcessGroup) CommHook
	accumulate bool    // two micro-batches per step, the first under noSync
	tol        float64 // relative, element by element
	normTol    float64 // when set instead: ‖θ − θ_ref‖ / ‖θ_ref‖ over all parameters (an approximation)
}

// train runs the variant on n ranks and returns every rank's parameters.
func train(t *testing.T, n int, v variant) ([][][]float64, []error) {
	w, err := dist.NewWorld(n, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	vals := make([][][]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		wg.Go(func() {
			// Ranks start from different weights: DDP broadcasts rank 0's.
			r := newReplica(t, uint64(rank), false)
			d, err := New(w.Group(rank), r.named(), v.opts)
			if err != nil {
				errs[rank] = err
				return
			}
			defer d.Close()
			if v.hook != nil {
				if err := d.RegisterCommHook(v.hook(w.Group(rank))); err != nil {
					errs[rank] = err
					return
				}
			}
			per := batch / n
			lo := rank * per
			for step := range steps {
				sc := r.rt.OpenScope()
				if err := r.opt.ZeroGrad(false); err != nil {
					errs[rank] = err
					return
				}
				if v.accumulate {
					half := per / 2
					d.SetRequireSync(false)
					if err := r.lossOn(step, lo, lo+half, float64(half)/float64(per)).Backward(); err != nil {
						errs[rank] = err
						return
					}
					d.SetRequireSync(true)
					if err := r.lossOn(step, lo+half, lo+per, float64(per-half)/float64(per)).Backward(); err != nil {
						errs[rank] = err
						return
					}
				} else if err := r.lossOn(step, lo, lo+per, 1).Backward(); err != nil {
					errs[rank] = err
					return
				}
				if err := r.opt.Step(); err != nil {
					errs[rank] = err
					return
				}
				sc.Close()
			}
			vals[rank] = r.values(t)
		})
	}
	wg.Wait()
	return vals, errs
}

func TestDDPMatchesOneRankOnTheWholeBatch(t *testing.T) {
	want := reference(t)
	variants := []variant{
		{name: "default", tol: 1e-6},
		{name: "gradient as bucket view", opts: Options{GradientAsBucketView: true}, tol: 1e-6},
		// Buckets of about 1 KiB: several buckets, rebuilt after the first step.
		{name: "small buckets", opts: Options{BucketCapMB: 1.0 / 1024, FirstBucketCapMB: 0.5 / 1024}, tol: 1e-6},
		{name: "small buckets as views", opts: Options{BucketCapMB: 1.0 / 1024, FirstBucketCapMB: 0.5 / 1024, GradientAsBucketView: true}, tol: 1e-6},
		{name: "gradient accumulation with noSync", accumulate: true, tol: 1e-6},
		// float16 communication: a few elements whose gradients are near
		// zero may take the other sign under AdamW; the parameters as a whole
		// stay within 0.5% of exact averaging.
		{name: "fp16 compression", hook: FP16CompressHook, normTol: 5e-3},
		{name: "bf16 compression", hook: BF16CompressHook, tol: 2e-2},
		// PowerSGD from the third iteration, rank 4: of the weights only the
		// 32×32 one passes the compression test ((32+32)·4·2 < 32·32), and
		// the parameters land within 2.6% of exact averaging (the same for
		// every n: the compression is linear in the summed gradient).
		{name: "PowerSGD", hook: func(pg dist.ProcessGroup) CommHook {
			s, err := NewPowerSGD(pg, PowerSGDOptions{Rank: 4, StartIter: 2})
			if err != nil {
				t.Fatal(err)
			}
			return s.Hook()
		}, normTol: 0.05},
	}
	for _, v := range variants {
		for _, n := range []int{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s/n=%d", v.name, n), func(t *testing.T) {
				got, errs := train(t, n, v)
				for rank, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", rank, err)
					}
				}
				for rank := range got {
					if v.normTol > 0 {
						var diff, ref float64
						for i := range want {
							for j := range want[i] {
								d := got[rank][i][j] - want[i][j]
								diff += d * d
								ref += want[i][j] * want[i][j]
								if got[rank][i][j] != got[0][i][j] {
									t.Fatalf("rank %d differs from rank 0 in parameter %d", rank, i)
								}
							}
						}
						if r := math.Sqrt(diff / ref); r > v.normTol {
							t.Fatalf("rank %d: relative distance %.4f from one rank on the whole batch", rank, r)
						} else if testing.Verbose() {
							t.Logf("rank %d: relative distance %.4f", rank, r)
						}
						continue
					}
					for i := range want {
						for j := range want[i] {
							a, b := got[rank][i][j], want[i][j]
							if math.Abs(a-b) > v.tol*math.Max(1, math.Abs(b)) {
								t.Fatalf("rank %d, parameter %d, element %d: %v, one rank on the whole batch %v", rank, i, j, a, b)
							}
						}
					}
				}
			})
		}
	}
}

// TestBuckets checks the three plans on an MLP of 8-32-32-4 (registration
// order 0.weight, 0.bias, 2.weight, 2.bias, 4.weight, 4.bias) with a 2 KiB
// first bucket and 4 KiB after; TestBucketLayoutMatchesPyTorch holds them
// to PyTorch's.
func TestBuckets(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	caps := Options{FirstBucketCapMB: 2.0 / 1024, BucketCapMB: 4.0 / 1024}
	for _, tt := range []struct {
		name string
		find bool
		keep bool
		want string
	}{
		// PyTorch's first iteration without findUnusedParameters: one
		// bucket, registration order.
		{"initial", false, false, "[[0.weight 0.bias 2.weight 2.bias 4.weight 4.bias]]"},
		// With it: filled in registration order (0.weight 1 KiB and
		// 0.bias, then 2.weight's 4 KiB pass the first 2 KiB; the rest
		// stays under 4 KiB), launched in reverse.
		{"findUnusedParameters", true, false, "[[2.bias 4.weight 4.bias] [0.weight 0.bias 2.weight]]"},
		// KeepBuckets: the rebuild's plan for reverse registration order:
		// 4.bias, 4.weight, 2.bias, then 2.weight passes 2 KiB.
		{"KeepBuckets", false, true, "[[4.bias 4.weight 2.bias 2.weight] [0.bias 0.weight]]"},
	} {
		r := newReplica(t, 0, false)
		opts := caps
		opts.FindUnusedParameters = tt.find
		d, err := New(w.Group(0), r.named(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if tt.keep {
			if err := d.KeepBuckets(); err != nil {
				t.Fatal(err)
			}
		}
		if got := fmt.Sprint(d.BucketNames()); got != tt.want {
			t.Errorf("%s: buckets %s, want %s", tt.name, got, tt.want)
		}
		d.Close()
	}
}

func TestUnusedParameters(t *testing.T) {
	for _, find := range []bool{false, true} {
		t.Run(fmt.Sprint("findUnusedParameters=", find), func(t *testing.T) {
			w, _ := dist.NewWorld(2, dist.Options{})
			defer w.Close()
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for rank := range 2 {
				wg.Go(func() {
					r := newReplica(t, 0, true)
					d, err := New(w.Group(rank), r.named(), Options{FindUnusedParameters: find})
					if err != nil {
						errs[rank] = err
						return
					}
					defer d.Close()
					if err := r.lossOn(0, rank*12, rank*12+12, 1).Backward(); err != nil {
						errs[rank] = err
						return
					}
					errs[rank] = r.opt.Step()
				})
			}
			wg.Wait()
			for rank, err := range errs {
				if find && err != nil {
					t.Errorf("rank %d: %v", rank, err)
				}
				if !find && (err == nil || !strings.Contains(err.Error(), "parameters extra received no gradient")) {
					t.Errorf("rank %d: error %v, want one naming the unused parameter", rank, err)
				}
			}
		})
	}
}

// TestJoinUnevenInputs: ranks with 3, 5 and 4 batches. Under Join the
// ranks that ran out shadow the others' reductions with zeros, so step k
// uses the sum of the active ranks' gradients divided by 3; at the end
// every rank holds the parameters of the rank that trained longest.
func TestJoinUnevenInputs(t *testing.T) {
	batches := []int{3, 5, 4}
	const per = 8
	// The reference: one replica, step k's loss is the sum over the ranks
	// still active of their mean loss, divided by the 3 ranks.
	ref := newReplica(t, 0, false)
	for step := range 5 {
		sc := ref.rt.OpenScope()
		if err := ref.opt.ZeroGrad(false); err != nil {
			t.Fatal(err)
		}
		var total *tensor.Tensor
		for rank, n := range batches {
			if step < n {
				l := ref.lossOn(step, rank*per, rank*per+per, 1.0/3)
				if total == nil {
					total = l
				} else {
					total = total.Add(l)
				}
			}
		}
		if err := total.Backward(); err != nil {
			t.Fatal(err)
		}
		if err := ref.opt.Step(); err != nil {
			t.Fatal(err)
		}
		sc.Close()
	}
	want := ref.values(t)

	w, _ := dist.NewWorld(3, dist.Options{})
	defer w.Close()
	got := make([][][]float64, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for rank := range 3 {
		wg.Go(func() {
			r := newReplica(t, uint64(rank), false)
			d, err := New(w.Group(rank), r.named(), Options{})
			if err != nil {
				errs[rank] = err
				return
			}
			defer d.Close()
			errs[rank] = d.Join(func() error {
				for step := range batches[rank] {
					sc := r.rt.OpenScope()
					if err := r.opt.ZeroGrad(false); err != nil {
						return err
					}
					if err := r.lossOn(step, rank*per, rank*per+per, 1).Backward(); err != nil {
						return err
					}
					if err := r.opt.Step(); err != nil {
						return err
					}
					sc.Close()
				}
				return nil
			})
			got[rank] = r.values(t)
		})
	}
	wg.Wait()
	for rank := range 3 {
		if errs[rank] != nil {
			t.Fatalf("rank %d: %v", rank, errs[rank])
		}
		for i := range want {
			for j := range want[i] {
				if a, b := got[rank][i][j], want[i][j]; math.Abs(a-b) > 1e-6*math.Max(1, math.Abs(b)) {
					t.Fatalf("rank %d, parameter %d, element %d: %v, reference %v", rank, i, j, a, b)
				}
			}
		}
	}
}

// The buckets rebuilt after the first iteration replace the first ones:
// with gradients as bucket views the rank holds its parameters and one
// bucket copy of them, nothing more (the first buckets used to stay alive
// through the views' intermediate tensors).
func TestRebuildFreesTheFirstBuckets(t *testing.T) {
	w, _ := dist.NewWorld(1, dist.Options{})
	defer w.Close()
	dev := cpu.New(cpu.Options{})
	rt := tensor.NewRuntime(dev, 0)
	l, err := nn.NewLinear(rt, 256, 256, true)
	if err != nil {
		t.Fatal(err)
	}
	var params []Param
	for _, p := range l.NamedParameters() {
		params = append(params, Param{Name: p.Name, Tensor: p.Tensor})
	}
	d, err := New(w.Group(0), params, Options{GradientAsBucketView: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for range 3 {
		sc := rt.OpenScope()
		x := rt.Randn(dtype.Float32, 4, 256)
		if err := tensor.MSELoss(l.Forward(x), x, tensor.ReduceMean).Backward(); err != nil {
			t.Fatal(err)
		}
		if err := d.Finalize(); err != nil {
			t.Fatal(err)
		}
		sc.Close()
	}
	want := int64(2 * (256*256 + 256) * 4)
	if got := dev.MemStats().LiveBytes; got != want {
		t.Errorf("%d bytes live after three iterations, want %d (parameters and one bucket copy)", got, want)
	}
}

// TestStaticGraph: with staticGraph, a parameter unused from the first
// iteration on is tolerated and reduced as zeros (the training is that of
// findUnusedParameters), the buckets are rebuilt after the first
// iteration, and a parameter whose use changes is an error.
func TestStaticGraph(t *testing.T) {
	run := func(opts Options, useExtraAt int) ([][][]float64, [][]string, []error) {
		const n = 2
		w, _ := dist.NewWorld(n, dist.Options{})
		defer w.Close()
		vals := make([][][]float64, n)
		plans := make([][]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for rank := range n {
			wg.Go(func() {
				r := newReplica(t, 0, true)
				d, err := New(w.Group(rank), r.named(), opts)
				if err != nil {
					errs[rank] = err
					return
				}
				defer d.Close()
				plans[rank] = append(plans[rank], fmt.Sprint(d.BucketNames()))
				for step := range 4 {
					sc := r.rt.OpenScope()
					loss := r.lossOn(step, rank*12, rank*12+12, 1)
					if step == useExtraAt {
						loss = loss.Add(r.extra.Sum(nil, false))
					}
					if err := loss.Backward(); err != nil {
						errs[rank] = err
						return
					}
					if err := r.opt.Step(); err != nil {
						errs[rank] = err
						return
					}
					if err := r.opt.ZeroGrad(false); err != nil {
						errs[rank] = err
						return
					}
					sc.Close()
					plans[rank] = append(plans[rank], fmt.Sprint(d.BucketNames()))
				}
				vals[rank] = r.values(t)
			})
		}
		wg.Wait()
		return vals, plans, errs
	}
	small := Options{BucketCapMB: 1.0 / 1024, FirstBucketCapMB: 0.5 / 1024}
	static, find := small, small
	static.StaticGraph = true
	find.FindUnusedParameters = true
	got, plans, errs := run(static, -1)
	want, _, wantErrs := run(find, -1)
	for rank := range errs {
		if errs[rank] != nil || wantErrs[rank] != nil {
			t.Fatalf("rank %d: %v; findUnusedParameters: %v", rank, errs[rank], wantErrs[rank])
		}
	}
	for i := range want[0] {
		if !slices.Equal(got[0][i], want[0][i]) {
			t.Errorf("parameter %d differs from findUnusedParameters' training", i)
		}
	}
	// One bucket of everything first (PyTorch's plan for a static graph),
	// rebuilt in the order of the first iteration, the unused one last.
	if want := "[[0.weight 0.bias 2.weight 2.bias 4.weight 4.bias extra]]"; plans[0][0] != want || plans[0][1] == want ||
		!strings.HasSuffix(plans[0][1], "[extra]]") {
		t.Errorf("bucket plans %v", plans[0])
	}
	_, _, errs = run(static, 2)
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "parameter extra got a gradient, but was unused in the first iteration") {
		t.Errorf("a static graph whose use changes: %v", errs[0])
	}
}

// TestJoinThrowOnEarlyTermination: ranks with 3, 5 and 4 batches; the
// first to run out stops every rank, each with ErrEarlyTermination, at
// the next iteration: nobody hangs, and nobody trains past step 3.
func TestJoinThrowOnEarlyTermination(t *testing.T) {
	batches := []int{3, 5, 4}
	w, _ := dist.NewWorld(3, dist.Options{Timeout: 20 * time.Second})
	defer w.Close()
	errs := make([]error, 3)
	steps := make([]int, 3)
	var wg sync.WaitGroup
	for rank := range 3 {
		wg.Go(func() {
			r := newReplica(t, uint64(rank), false)
			d, err := New(w.Group(rank), r.named(), Options{})
			if err != nil {
				errs[rank] = err
				return
			}
			defer d.Close()
			errs[rank] = d.JoinWith(func() error {
				for step := range batches[rank] {
					sc := r.rt.OpenScope()
					if err := r.lossOn(step, rank*8, rank*8+8, 1).Backward(); err != nil {
						return err
					}
					if err := r.opt.Step(); err != nil {
						return err
					}
					if err := r.opt.ZeroGrad(false); err != nil {
						return err
					}
					steps[rank] = step + 1
					sc.Close()
				}
				return nil
			}, JoinOptions{ThrowOnEarlyTermination: true})
		})
	}
	wg.Wait()
	for rank, err := range errs {
		if !errors.Is(err, ErrEarlyTermination) {
			t.Errorf("rank %d: %v, want ErrEarlyTermination", rank, err)
		}
		if steps[rank] != 3 {
			t.Errorf("rank %d stepped %d times, want 3", rank, steps[rank])
		}
	}
}
