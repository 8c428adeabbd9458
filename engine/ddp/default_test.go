package ddp

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/nn"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// defaultFixture is testdata/default.json (testdata/gen_default.py).
type defaultFixture struct {
	World int `json:"world"`
	// Rank 0's gradients after each of two iterations, as float32 bits,
	// by parameter name.
	Copied []map[string][]uint32 `json:"gradient_as_bucket_view=false"`
	Views  []map[string][]uint32 `json:"gradient_as_bucket_view=true"`
}

// TestDefaultReductionMatchesPyTorch holds a DDP without a registered hook
// on 3 ranks to PyTorch's reducer bit for bit: each gradient multiplied by
// the reciprocal of the world size while it is copied into its bucket (a
// true division would round differently on 3 ranks), divided in place when
// it is the bucket's view already (gradientAsBucketView from the second
// iteration), then summed. Without gradientAsBucketView the in-process
// group reduces the gradients where they are (dist.CoalescedAllReducer),
// each multiplied by the reciprocal before the sum: the same bits, checked
// against the bucket path too (the group's in-place reduction hidden).
func TestDefaultReductionMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/default.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx defaultFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ view, inPlace bool }{{false, true}, {false, false}, {true, true}} {
		view := c.view
		want := fx.Copied
		if view {
			want = fx.Views
		}
		t.Run(fmt.Sprintf("gradientAsBucketView=%v/inPlace=%v", view, c.inPlace), func(t *testing.T) {
			got := make([][]map[string][]uint32, fx.World)
			calls := onRanks(t, fx.World, c.inPlace, func(pg dist.ProcessGroup, rank int) (err error) {
				got[rank], err = defaultRun(pg, fx, view)
				return err
			})
			// Two iterations of one bucket (the first plan, then the
			// rebuilt one) on each rank, in place unless the gradients
			// are the buckets' views.
			if want := int32(2 * fx.World); c.inPlace && !view && calls != want {
				t.Errorf("%d reductions in place, want %d", calls, want)
			}
			if view && calls != 0 {
				t.Errorf("%d reductions in place with gradientAsBucketView, want none", calls)
			}
			for it, grads := range want {
				for name, bits := range grads {
					g := got[0][it][name]
					if len(g) != len(bits) {
						t.Fatalf("iteration %d, %s: %d values, want %d", it, name, len(g), len(bits))
					}
					for i := range bits {
						if g[i] != bits[i] {
							t.Errorf("iteration %d, %s[%d] = %g, PyTorch's %g", it, name, i,
								math.Float32frombits(g[i]), math.Float32frombits(bits[i]))
						}
					}
				}
			}
		})
	}
}

// bucketsOnly hides the in-process group's in-place reduction
// (dist.CoalescedAllReducer), so that DDP reduces through its buckets.
type bucketsOnly struct{ dist.ProcessGroup }

// countingInPlace counts the in-place reductions DDP asks of the group.
type countingInPlace struct {
	dist.ProcessGroup
	calls *atomic.Int32
}

func (g countingInPlace) AllReduceCoalesced(ts []*tensor.Tensor, op dist.ReduceOp, preMul float64) *dist.Work {
	g.calls.Add(1)
	return g.ProcessGroup.(dist.CoalescedAllReducer).AllReduceCoalesced(ts, op, preMul)
}

// onRanks runs each of n in-process ranks' part (in a goroutine of its
// own) on its group, with the group's in-place reduction hidden
// (bucketsOnly) or counted (countingInPlace), fails the test with the
// first rank's error, and returns the pre-multiplied sums the ranks asked
// for.
func onRanks(t *testing.T, n int, inPlace bool, part func(pg dist.ProcessGroup, rank int) error) int32 {
	t.Helper()
	w, err := dist.NewWorld(n, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var calls atomic.Int32
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		var pg dist.ProcessGroup = bucketsOnly{w.Group(rank)}
		if inPlace {
			pg = countingInPlace{w.Group(rank), &calls}
		}
		wg.Go(func() { errs[rank] = part(pg, rank) })
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	return calls.Load()
}

// defaultRun trains gen_default.py's model on one rank and returns its
// gradients after each iteration. Its weights and inputs are small dyadic
// numbers, so that the local gradients are exact and only the reduction
// can differ from PyTorch's.
func defaultRun(pg dist.ProcessGroup, fx defaultFixture, view bool) ([]map[string][]uint32, error) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	l1, err := nn.NewLinear(rt, 5, 4, true)
	if err != nil {
		return nil, err
	}
	l2, err := nn.NewLinear(rt, 4, 3, true)
	if err != nil {
		return nil, err
	}
	model, err := nn.NewSequential(l1, nn.ReLU(), l2)
	if err != nil {
		return nil, err
	}
	var params []Param
	var tensors []*tensor.Tensor
	for _, p := range model.NamedParameters() {
		v := make([]float64, p.Tensor.Numel())
		for k := range v {
			v[k] = float64((3*k)%11-5) / 8
		}
		rt.NoGrad(func() { err = p.Tensor.CopyFrom(rt.FromValues(dtype.Float32, v, p.Tensor.Shape()...)) })
		if err != nil {
			return nil, err
		}
		params = append(params, Param{p.Name, p.Tensor})
		tensors = append(tensors, p.Tensor)
	}
	d, err := New(pg, params, Options{GradientAsBucketView: view})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	opt, err := optim.NewSGD(tensors, optim.SGDConfig{LR: 0})
	if err != nil {
		return nil, err
	}
	xs := make([]float64, 30)
	for i := range xs {
		xs[i] = float64((i+pg.Rank())%7-3) / 4
	}
	x := rt.FromValues(dtype.Float32, xs, 6, 5).Persist()
	defer x.Release()
	var out []map[string][]uint32
	for range 2 {
		sc := rt.OpenScope()
		if err := opt.ZeroGrad(false); err != nil {
			return nil, err
		}
		if err := model.Forward(x).Square().Sum(nil, false).Backward(); err != nil {
			return nil, err
		}
		grads := map[string][]uint32{}
		for _, p := range params {
			v, err := p.Tensor.Grad().Float32s()
			if err != nil {
				return nil, err
			}
			for _, f := range v {
				grads[p.Name] = append(grads[p.Name], math.Float32bits(f))
			}
		}
		out = append(out, grads)
		if err := opt.Step(); err != nil {
			return nil, err
		}
		sc.Close()
	}
	return out, nil
}

// TestInPlaceOnlyWhereItHolds: without a hook, DDP on the in-process group
// averages in its pre-multiplied sum, the gradients where they are when
// they all exist: no bucket is allocated. A bucket with a parameter that
// got no gradient (findUnusedParameters; on one rank only, too) goes
// through its buffer in the same collective; a registered hook and Join
// keep the buckets' plain all-reduce. Either way the values are the bucket
// path's, bit for bit (bucketsOnly), over several steps of AdamW on 3
// ranks.
func TestInPlaceOnlyWhereItHolds(t *testing.T) {
	const n = 3
	cases := []struct {
		name      string
		unused    bool
		usedOn    int // the rank that uses the unused parameter after all (-1: none)
		opts      Options
		hook      bool
		join      bool
		coalesced int32 // pre-multiplied sums of every rank, over the steps
		inPlace   bool  // every one on the gradients: no bucket allocated
	}{
		{name: "default", usedOn: -1, coalesced: steps, inPlace: true},
		{name: "zeroed gradients kept", usedOn: -1, coalesced: steps, inPlace: true},
		{name: "comm hook", usedOn: -1, hook: true},
		{name: "unused parameter", unused: true, usedOn: -1, opts: Options{FindUnusedParameters: true}, coalesced: steps},
		{name: "a parameter unused on two ranks of three", unused: true, usedOn: 1, opts: Options{FindUnusedParameters: true}, coalesced: steps},
		{name: "join", usedOn: -1, join: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(inPlace bool) ([][][]float64, int32, []int64) {
				vals := make([][][]float64, n)
				bucketBytes := make([]int64, n)
				calls := onRanks(t, n, inPlace, func(pg dist.ProcessGroup, rank int) error {
					r := newReplica(t, uint64(rank), c.unused)
					d, err := New(pg, r.named(), c.opts)
					if err != nil {
						return err
					}
					defer d.Close()
					if c.hook {
						if err := d.RegisterCommHook(AllReduceHook(pg)); err != nil {
							return err
						}
					}
					per := batch / n
					loop := func() error {
						for step := range steps {
							sc := r.rt.OpenScope()
							if err := r.opt.ZeroGrad(c.name != "zeroed gradients kept"); err != nil {
								return err
							}
							loss := r.lossOn(step, rank*per, (rank+1)*per, 1)
							if rank == c.usedOn {
								loss = loss.Add(r.extra.Sum(nil, false).MulScalar(0.5))
							}
							if err := loss.Backward(); err != nil {
								return err
							}
							if err := r.opt.Step(); err != nil {
								return err
							}
							sc.Close()
						}
						return nil
					}
					if c.join {
						err = d.Join(loop)
					} else {
						err = loop()
					}
					vals[rank] = r.values(t)
					bucketBytes[rank] = d.BucketBytes()
					return err
				})
				return vals, calls, bucketBytes
			}
			want, _, copies := run(false)
			got, calls, kept := run(true)
			if calls != c.coalesced*n {
				t.Errorf("%d pre-multiplied sums, want %d", calls, c.coalesced*n)
			}
			// The buckets are a second copy of the gradients unless every
			// reduction was in place: then they were never allocated.
			for rank := range n {
				if copies[rank] == 0 {
					t.Errorf("rank %d: no bucket memory through the buckets", rank)
				}
				want := copies[rank]
				if c.inPlace {
					want = 0
				}
				if kept[rank] != want {
					t.Errorf("rank %d: %d bytes of buckets, want %d", rank, kept[rank], want)
				}
			}
			for rank := range got {
				for i := range got[rank] {
					for k, v := range got[rank][i] {
						if math.Float64bits(v) != math.Float64bits(want[rank][i][k]) {
							t.Fatalf("rank %d, parameter %d[%d] = %v, through the buckets %v", rank, i, k, v, want[rank][i][k])
						}
					}
				}
			}
		})
	}
}

// TestHooksAfterDDPSeeTheLocalGradient: a gradient-ready hook registered
// after DDP's reads the gradient as backward accumulated it, also when its
// bucket is reduced in place: the bucket launches once the parameter's
// hooks have run (tensor.Runtime.AfterGradHooks). Rank 0's hooks sleep
// before reading, long enough for a reduction launched before them to
// have changed the gradient; rank 1 reaches the collective first.
func TestHooksAfterDDPSeeTheLocalGradient(t *testing.T) {
	const n = 2
	run := func(inPlace bool) [][][]float64 {
		seen := make([][][]float64, n)
		calls := onRanks(t, n, inPlace, func(pg dist.ProcessGroup, rank int) error {
			r := newReplica(t, 0, false)
			d, err := New(pg, r.named(), Options{})
			if err != nil {
				return err
			}
			defer d.Close()
			var hookErr error
			for _, p := range r.named() {
				p.Tensor.OnGradReady(func(p *tensor.Tensor) {
					if rank == 0 {
						time.Sleep(20 * time.Millisecond)
					}
					v, err := p.GradNoSync().Float64s()
					if err != nil && hookErr == nil {
						hookErr = err
					}
					seen[rank] = append(seen[rank], v)
				})
			}
			if err := r.lossOn(0, rank*12, rank*12+12, 1).Backward(); err != nil {
				return err
			}
			if hookErr != nil {
				return hookErr
			}
			return r.opt.Step()
		})
		if inPlace && calls != n {
			t.Fatalf("%d reductions in place, want %d", calls, n)
		}
		return seen
	}
	want, got := run(false), run(true)
	for rank := range got {
		for i := range got[rank] {
			if !slices.Equal(got[rank][i], want[rank][i]) {
				t.Fatalf("rank %d: the hook after DDP's on parameter %d read %v, the local gradient is %v",
					rank, i, got[rank][i][:3], want[rank][i][:3])
			}
		}
	}
}
