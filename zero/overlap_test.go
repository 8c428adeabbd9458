package zero

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The overlap matrix of PyTorch's tests: schedule A/B × gradient as
// bucket view × shard buckets, each equal to DDP + the plain optimizer
// from the first iteration on, with two parameter groups.
func TestOverlapMatrix(t *testing.T) {
	adamW := optim.DefaultAdamW().Group()
	adamW.LR = 1e-2
	sgd := optim.SGDConfig{LR: 0.05, Momentum: 0.9}.Group()
	for _, k := range []struct {
		name  string
		kind  optim.Kind
		hyper optim.ParamGroup
	}{{"AdamW", optim.AdamW, adamW}, {"SGD", optim.SGD, sgd}} {
		for _, sched := range []string{"A", "B"} {
			for _, view := range []bool{false, true} {
				for _, shard := range []bool{false, true} {
					for _, n := range []int{1, 2, 3, 4} {
						name := fmt.Sprintf("%s/%s/view=%v/shard=%v/n=%d", k.name, sched, view, shard, n)
						t.Run(name, func(t *testing.T) {
							opts := smallBuckets
							opts.GradientAsBucketView = view
							for _, steps := range []int{1, 5} {
								plain := run{n: n, kind: k.kind, hyper: k.hyper, ddpOpts: opts, steps: steps}
								want := plain.train(t)
								z := plain
								z.zero, z.opts, z.overlap, z.shard = true, Options{OverlapWithDDP: true}, sched, shard
								got := z.train(t)
								closeTo(t, got.params, want.params, fmt.Sprintf("after %d steps", steps))
							}
						})
					}
				}
			}
		}
	}
}

// TestOverlapParametersAfterBackward is PyTorch's overlap test loop: no
// step() at all, the parameters read right after the last backward pass.
// Over a slow emulated link the broadcasts of the updated parameters are
// still in flight then; the read waits for them, so every rank sees the
// updated values, as DDP + the plain optimizer's step gives them.
func TestOverlapParametersAfterBackward(t *testing.T) {
	sgd := optim.SGDConfig{LR: 0.05, Momentum: 0.9}.Group()
	for _, sched := range []string{"A", "B"} {
		for _, shard := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shard=%v", sched, shard), func(t *testing.T) {
				plain := run{n: 2, kind: optim.SGD, hyper: sgd, ddpOpts: smallBuckets, steps: 3}
				want := plain.train(t)
				z := plain
				z.zero, z.opts, z.overlap, z.shard, z.noStep = true, Options{OverlapWithDDP: true}, sched, shard, true
				z.net = dist.NetModel{Latency: 20 * time.Millisecond}
				closeTo(t, z.train(t).params, want.params, "read after the last backward")
			})
		}
	}
}

// TestInFlightFailure: a parameter whose broadcast failed cannot be used:
// every op on it fails with the broadcast's error, and keeps failing.
func TestInFlightFailure(t *testing.T) {
	rt := newRuntime()
	p := rt.Full(tensor.Float32, 1, 4)
	calls := 0
	p.SetInFlight(func() error { calls++; return errors.New("rank 1 failed") })
	for range 2 {
		_, err := p.Add(p).Float64s()
		if err == nil || !strings.Contains(err.Error(), "rank 1 failed") {
			t.Errorf("op on a parameter whose broadcast failed: %v", err)
		}
	}
	if calls != 1 {
		t.Errorf("the broadcast was waited for %d times", calls)
	}
	q := rt.Full(tensor.Float32, 1, 4)
	waited := 0
	q.SetInFlight(func() error { waited++; return nil })
	q.SetInFlight(func() error { waited += 10; return nil })
	if v, err := q.Narrow(0, 1, 2).Float64s(); err != nil || waited != 11 || len(v) != 2 {
		t.Errorf("a view of memory with two operations in flight: %v, %v, waited %d", v, err, waited)
	}
}

func TestOverlapUpdatesFromTheFirstIteration(t *testing.T) {
	adamW := optim.DefaultAdamW().Group()
	before := run{n: 2, kind: optim.AdamW, hyper: adamW, ddpOpts: smallBuckets, steps: 1, zero: true,
		opts: Options{OverlapWithDDP: true}, overlap: "B"}
	got := before.train(t)
	// Parameters after one step differ from the initial ones (AdamW's
	// first step moves every element by about lr).
	rt := newRuntime()
	m := mlp(t, rt)
	for i, p := range m.Parameters() {
		v, _ := p.Float64s()
		if slices.Equal(v, got.params[i]) {
			t.Errorf("parameter %d did not change in the first iteration", i)
		}
	}
}

func TestShardBucketsBalance(t *testing.T) {
	// With shardBuckets the ranks' totals approach total/N; without it
	// whole buckets go round-robin. The buckets are DDP's for the MLP
	// with small caps: [4.bias 4.weight] 132, [2.bias 2.weight] 1056 and
	// [0.bias 0.weight] 544 elements.
	w, rt := world(t, 2)
	defer w.Close()
	m := mlp(t, rt)
	ps := m.Parameters()
	buckets := []*ddp.Bucket{{Params: ps[4:]}, {Params: []*tensor.Tensor{ps[3], ps[2]}}, {Params: []*tensor.Tensor{ps[1], ps[0]}}}
	for _, shard := range []bool{false, true} {
		z, err := New(w.Group(0), optim.SGD, ps, optim.SGDConfig{LR: 0.1}.Group(), Options{OverlapWithDDP: true})
		if err != nil {
			t.Fatal(err)
		}
		z.assignBuckets(buckets, shard)
		totals := z.ShardSizes()
		want := []int{676, 1056}
		if shard {
			// 4.weight → 0, 4.bias → 1, 2.weight → 1, 2.bias → 0,
			// 0.weight → 0, 0.bias → 0.
			want = []int{704, 1028}
		}
		if !slices.Equal(totals, want) {
			t.Errorf("shardBuckets=%v: rank totals %v, want %v", shard, totals, want)
		}
	}
}

func TestOverlapErrors(t *testing.T) {
	w, rt := world(t, 1)
	defer w.Close()
	m := mlp(t, rt)
	var named []ddp.Param
	for _, p := range m.NamedParameters() {
		named = append(named, ddp.Param{Name: p.Name, Tensor: p.Tensor})
	}
	d, err := ddp.New(w.Group(0), named, ddp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := New(w.Group(0), optim.SGD, m.Parameters(), optim.SGDConfig{LR: 0.1}.Group(), Options{})
	if _, err := HookWithZeroStep(ddp.AllReduceHook(w.Group(0)), d, plain, OverlapOptions{}); err == nil {
		t.Error("a hook was made for an optimizer without overlapWithDDP")
	}
	part, _ := New(w.Group(0), optim.SGD, m.Parameters()[:2], optim.SGDConfig{LR: 0.1}.Group(), Options{OverlapWithDDP: true})
	if _, err := HookWithZeroStep(ddp.AllReduceHook(w.Group(0)), d, part, OverlapOptions{}); err == nil {
		t.Error("a hook was made for an optimizer missing DDP parameters")
	}
	ov, _ := New(w.Group(0), optim.SGD, m.Parameters(), optim.SGDConfig{LR: 0.1}.Group(), Options{OverlapWithDDP: true})
	if err := ov.Step(); err == nil {
		t.Error("Step before the hook was made succeeded")
	}
	if _, err := New(w.Group(0), optim.SGD, m.Parameters(), optim.SGDConfig{LR: 0.1}.Group(), Options{OverlapWithDDP: true, Partition: "flat"}); err == nil {
		t.Error("overlap with the flat partition was accepted")
	}
}

// Join with uneven inputs: rank r runs 6-r iterations; the joined ranks
// shadow the others' reductions and ZeRO steps, so the result equals DDP
// with the plain optimizer under join (where rank 0, the last to join,
// sends its parameters to all).
func TestJoinUnevenInputs(t *testing.T) {
	adamW := optim.DefaultAdamW().Group()
	adamW.LR = 1e-2
	for _, opts := range []Options{{}, {Partition: "flat"}} {
		for n := 2; n <= 4; n++ {
			t.Run(fmt.Sprintf("%s/n=%d", layoutName(opts), n), func(t *testing.T) {
				plain := run{n: n, kind: optim.AdamW, hyper: adamW, uneven: true}
				want := plain.train(t)
				z := plain
				z.zero, z.opts = true, opts
				got := z.train(t)
				closeTo(t, got.params, want.params, "join")
			})
		}
	}
}

func TestFirstDifference(t *testing.T) {
	for _, c := range []struct {
		all    []int64
		n      int
		a, r   int
		differ bool
	}{
		{nil, 0, 0, 0, false},
		{[]int64{0, 1, 2, 0, 1, 2}, 3, 0, 0, false},
		{[]int64{0, 1, 2, 0, 2, 1}, 3, 1, 1, true},
		{[]int64{0, 1, 0, 1, 1, 0}, 2, 0, 2, true},
		{[]int64{0, 1, 0, 1, 0, 1, 0, 2}, 2, 1, 3, true},
	} {
		a, r, ok := firstDifference(c.all, c.n)
		if ok != c.differ || a != c.a || r != c.r {
			t.Errorf("firstDifference(%v, %d) = %d, %d, %v, want %d, %d, %v", c.all, c.n, a, r, ok, c.a, c.r, c.differ)
		}
	}
}
