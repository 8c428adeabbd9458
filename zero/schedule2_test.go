package zero

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
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// schedRun trains the MLP with ZeRO and a step schedule on n in-process
// ranks: under stage 2 with Options.Schedule (sched nil: plain stage 2,
// stepping after backward), under stage 1 with HookWithZeroSchedule over
// DDP. Two parameter groups (the last layer at a tenth of the learning
// rate), AdamW, a global batch of 24 split across the ranks.
type schedRun struct {
	n      int
	stage  int // 2 (the default) or 1
	sched  Schedule
	strict bool
	steps  int
	capMB  float64 // stage 2's bucket cap (default 0.001: five buckets)
	view   bool    // ParametersAsBucketView: the all-gathers land in place
	// accumulate runs a backward pass under SetRequireSync(false) on half
	// of each batch before the synchronised one on the other half.
	accumulate bool
	// readAfterBackward reads the parameters right after each backward
	// pass, before Step (over a slow link, so that the all-gathers are
	// still in flight).
	readAfterBackward bool
	net               dist.NetModel
	// hook, when set, runs on every rank after each backward pass, before
	// Step; its error ends the run.
	hook func(z *Optimizer) error
	// stepErr, when set, is told of Step's error (0-based step); the run
	// goes on when it returns nil.
	stepErr func(step int, err error) error
}

type schedResult struct {
	steps         [][][]float64 // rank 0's parameters after each step
	afterBackward [][][]float64 // rank 0's, read after each backward pass
	errs          []error       // each rank's
}

func (c schedRun) train(t *testing.T) schedResult {
	t.Helper()
	if c.steps == 0 {
		c.steps = 4
	}
	if c.stage == 0 {
		c.stage = 2
	}
	if c.capMB == 0 {
		c.capMB = 0.001
	}
	w, err := dist.NewWorld(c.n, dist.Options{Net: c.net})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res := make([]schedResult, c.n)
	var wg sync.WaitGroup
	for rank := range c.n {
		wg.Go(func() { res[rank] = c.rank(t, w, rank) })
	}
	wg.Wait()
	out := schedResult{steps: res[0].steps, afterBackward: res[0].afterBackward}
	for r := range c.n {
		out.errs = append(out.errs, res[r].errs...)
		if len(res[r].errs) > 0 {
			continue
		}
		for s := range res[r].steps {
			if !equalParams(res[r].steps[s], res[0].steps[s]) {
				t.Fatalf("rank %d's parameters differ from rank 0's after step %d", r, s)
			}
		}
	}
	return out
}

func (c schedRun) rank(t *testing.T, w *dist.World, rank int) (res schedResult) {
	fail := func(err error) schedResult {
		res.errs = []error{fmt.Errorf("rank %d: %w", rank, err)}
		return res
	}
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	m := mlp(t, rt)
	pg := w.Group(rank)
	params := m.Parameters()
	adamW := optim.DefaultAdamW().Group()
	adamW.LR = 1e-2
	opts := Options{Stage: 2, BucketCapMB: c.capMB, ParametersAsBucketView: c.view, Schedule: c.sched, StrictSchedule: c.strict}
	var d *ddp.DDP
	if c.stage == 1 {
		var named []ddp.Param
		for _, p := range m.NamedParameters() {
			named = append(named, ddp.Param{Name: p.Name, Tensor: p.Tensor})
		}
		var err error
		if d, err = ddp.New(pg, named, smallBuckets); err != nil {
			return fail(err)
		}
		defer d.Close()
		opts = Options{OverlapWithDDP: true}
	}
	z, err := New(pg, optim.AdamW, params[:4], adamW, opts)
	if err != nil {
		return fail(err)
	}
	defer z.Close()
	g := adamW.Hyper()
	g.LR /= 10
	g.Params = params[4:]
	if err := z.AddParamGroup(g); err != nil {
		return fail(err)
	}
	if c.stage == 1 {
		hook, err := HookWithZeroSchedule(ddp.AllReduceHook(pg), d, z, c.sched, OverlapOptions{Strict: c.strict})
		if err == nil {
			err = d.RegisterCommHook(hook)
		}
		if err != nil {
			return fail(err)
		}
	}
	read := func() ([][]float64, error) {
		var out [][]float64
		for _, p := range params {
			v, err := p.Float64s()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	per := 24 / c.n
	for step := range c.steps {
		sc := rt.OpenScope()
		xs := make([]float64, 24*16)
		ys := make([]int64, 24)
		for i := range xs {
			xs[i] = math.Sin(float64(i*3 + step))
		}
		for i := range ys {
			ys[i] = int64((i + step) % 4)
		}
		x, y := rt.FromValues(dtype.Float32, xs, 24, 16).Narrow(0, rank*per, per), rt.FromInt64s(ys, 24).Narrow(0, rank*per, per)
		if err := z.ZeroGrad(true); err != nil {
			return fail(err)
		}
		backward := func(x, y *tensor.Tensor, scale float64) error {
			return tensor.CrossEntropy(m.Forward(x), y, tensor.DefaultCrossEntropy).MulScalar(scale).Backward()
		}
		if c.accumulate {
			half := per / 2
			z.SetRequireSync(false)
			err := backward(x.Narrow(0, 0, half), y.Narrow(0, 0, half), 0.5)
			z.SetRequireSync(true)
			if err == nil {
				err = backward(x.Narrow(0, half, per-half), y.Narrow(0, half, per-half), 0.5)
			}
			if err != nil {
				return fail(err)
			}
		} else if err := backward(x, y, 1); err != nil {
			return fail(err)
		}
		if c.readAfterBackward {
			v, err := read()
			if err != nil {
				return fail(err)
			}
			res.afterBackward = append(res.afterBackward, v)
		}
		if c.hook != nil {
			if err := c.hook(z); err != nil {
				return fail(err)
			}
		}
		if err := z.Step(); err != nil {
			if c.stepErr != nil {
				err = c.stepErr(step, err)
			}
			if err != nil {
				return fail(err)
			}
		}
		v, err := read()
		if err != nil {
			return fail(err)
		}
		res.steps = append(res.steps, v)
		sc.Close()
	}
	return res
}

func equalParams(a, b [][]float64) bool {
	return slices.EqualFunc(a, b, func(x, y []float64) bool { return slices.Equal(x, y) })
}

func (r schedResult) err(t *testing.T) {
	t.Helper()
	if len(r.errs) > 0 {
		t.Fatal(errors.Join(r.errs...))
	}
}

// The user schedules of the tests: each leaves the engine the same
// arithmetic, so each trains bit for bit as plain stage 2.
var userSchedules = []Schedule{
	// Waits for bucket i-1 when bucket i is ready, steps and all-gathers
	// each bucket when told it was reduced (checking it was).
	ScheduleFuncs{Name: "wait, step and gather",
		OnBucketReady: func(c *ScheduleContext, i int) error {
			if i > 0 {
				return c.Wait(i - 1)
			}
			return nil
		},
		OnBucketReduced: func(c *ScheduleContext, i int) error {
			if !c.Reduced(i) {
				return fmt.Errorf("bucket %d told reduced before it was", i)
			}
			if err := c.Step(i); err != nil {
				return err
			}
			return c.AllGather(i)
		}},
	// Steps each bucket as reduced; the all-gathers are left to the end.
	ScheduleFuncs{Name: "steps as reduced", OnBucketReduced: func(c *ScheduleContext, i int) error { return c.Step(i) }},
	// Does nothing: every bucket is stepped and gathered at the end.
	ScheduleFuncs{Name: "nothing"},
	// Steps and gathers everything, last bucket first, at BackwardEnd.
	ScheduleFuncs{Name: "last first", OnBackwardEnd: func(c *ScheduleContext) error {
		for k := c.NumBuckets() - 1; k >= 0; k-- {
			if err := c.StepAndBroadcast(k); err != nil {
				return err
			}
		}
		return nil
	}},
}

// TestStage2SchedulesMatchPlainStage2: under stage 2 every schedule, the
// built-ins and the users', trains bit for bit as plain stage 2 (the
// step after backward) on 1 to 4 ranks, over several steps of AdamW and
// five buckets, gathered through scratch buffers or in place
// (ParametersAsBucketView), and with gradients accumulated over a
// no-sync pass first; the parameters read right after backward, before
// Step, are already those.
func TestStage2SchedulesMatchPlainStage2(t *testing.T) {
	scheds := append([]Schedule{AsReduced, AfterBackward, Interleaved}, userSchedules...)
	for _, variant := range []struct {
		name string
		run  schedRun
	}{
		{"scratch", schedRun{}},
		{"in place", schedRun{view: true}},
		{"accumulated", schedRun{accumulate: true}},
		{"one bucket", schedRun{capMB: 25}},
	} {
		for n := 1; n <= 4; n++ {
			plain := variant.run
			plain.n = n
			want := plain.train(t)
			want.err(t)
			for _, s := range scheds {
				t.Run(fmt.Sprintf("%s/%v/n=%d", variant.name, s, n), func(t *testing.T) {
					c := plain
					c.sched, c.readAfterBackward = s, true
					got := c.train(t)
					got.err(t)
					for step := range want.steps {
						if !equalParams(got.steps[step], want.steps[step]) {
							t.Fatalf("step %d: the parameters differ from plain stage 2's", step)
						}
						// Every parameter got a gradient: everything was
						// stepped and gathered by the end of backward.
						if !equalParams(got.afterBackward[step], want.steps[step]) {
							t.Fatalf("step %d: the parameters read after backward differ from plain stage 2's after its step", step)
						}
					}
				})
			}
		}
	}
}

// TestStage2ScheduleParametersAfterBackward: with a schedule the
// parameters are updated during backward, so a script reading them right
// after backward, before Step, reads the updated values (it waits for the
// all-gathers still in flight over a slow link): plain stage 2's after
// its step.
func TestStage2ScheduleParametersAfterBackward(t *testing.T) {
	for _, s := range []Schedule{AsReduced, Interleaved, userSchedules[0]} {
		for _, view := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/view=%v", s, view), func(t *testing.T) {
				want := schedRun{n: 2, steps: 3, view: view}.train(t)
				want.err(t)
				got := schedRun{n: 2, steps: 3, view: view, sched: s, readAfterBackward: true, net: dist.NetModel{Latency: 2 * time.Millisecond}}.train(t)
				got.err(t)
				for step := range want.steps {
					if !equalParams(got.afterBackward[step], want.steps[step]) {
						t.Fatalf("step %d: the parameters read after backward are not plain stage 2's after its step", step)
					}
				}
			})
		}
	}
}

// TestStage2ScheduleEvents: the events come in the documented order: a
// bucket's BucketReduced right after the bound on the reduce-scatters in
// flight waited for it (two in flight: when bucket i+2 was launched), the
// rest after BackwardEnd; a bucket the schedule waits for itself is told
// after the event that waited, once.
func TestStage2ScheduleEvents(t *testing.T) {
	var mu sync.Mutex
	seen := map[int][]string{}
	record := func(c *ScheduleContext, e string) {
		mu.Lock()
		defer mu.Unlock()
		seen[c.Rank()] = append(seen[c.Rank()], fmt.Sprintf("%d:%s", c.Iteration(), e))
	}
	s := ScheduleFuncs{Name: "recorder",
		OnIterationBegin: func(c *ScheduleContext) error { record(c, "begin"); return nil },
		OnBucketReady: func(c *ScheduleContext, i int) error {
			record(c, fmt.Sprintf("ready(%d)", i))
			if i == 4 {
				return c.Wait(3) // told right after this event
			}
			return nil
		},
		OnBucketReduced: func(c *ScheduleContext, i int) error { record(c, fmt.Sprintf("reduced(%d)", i)); return nil },
		OnBackwardEnd:   func(c *ScheduleContext) error { record(c, "end"); return nil },
	}
	schedRun{n: 2, steps: 2, sched: s}.train(t).err(t)
	var want []string
	for it := 1; it <= 2; it++ {
		for _, e := range []string{"begin", "ready(0)", "ready(1)", "ready(2)", "reduced(0)", "ready(3)", "reduced(1)",
			"ready(4)", "reduced(3)", "reduced(2)", "end", "reduced(4)"} {
			want = append(want, fmt.Sprintf("%d:%s", it, e))
		}
	}
	for r := range 2 {
		if !slices.Equal(seen[r], want) {
			t.Errorf("rank %d's events\n%v\nwant\n%v", r, seen[r], want)
		}
	}
}

// TestStage1AsReduced: under stage 1 AsReduced steps and broadcasts each
// bucket as its reduction is waited for after backward, in bucket order:
// bit for bit the after-backward schedule.
func TestStage1AsReduced(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			want := schedRun{n: n, stage: 1, sched: AfterBackward}.train(t)
			want.err(t)
			got := schedRun{n: n, stage: 1, sched: AsReduced, readAfterBackward: true}.train(t)
			got.err(t)
			for step := range want.steps {
				if !equalParams(got.steps[step], want.steps[step]) || !equalParams(got.afterBackward[step], want.steps[step]) {
					t.Fatalf("step %d: asReduced differs from afterBackward", step)
				}
			}
		})
	}
}

// TestStage2ScheduleErrors: a schedule's mistakes and error are Step's
// errors naming the schedule, the event, the bucket, the rank and the
// iteration; the engine still does what the schedule left, so that the
// parameters stay those of plain stage 2.
func TestStage2ScheduleErrors(t *testing.T) {
	boom := errors.New("no step today")
	for _, c := range []struct {
		sched  Schedule
		strict bool
		want   string
		order  bool // the error is the order check's
	}{
		{ScheduleFuncs{Name: "broadcaster", OnBucketReduced: func(c *ScheduleContext, i int) error {
			if err := c.Step(i); err != nil {
				return err
			}
			return c.Broadcast(i)
		}}, false, "schedule broadcaster, bucketReduced(0), rank %d, iteration 1: broadcast(0): under stage 2 each rank steps a slice of the bucket and the slices are all-gathered: use allGather(0)", false},
		{ScheduleFuncs{Name: "boom", OnBucketReduced: func(c *ScheduleContext, i int) error {
			if c.Iteration() == 1 && i == 1 {
				return boom
			}
			return nil
		}}, false, "schedule boom, bucketReduced(1), rank %d, iteration 1: no step today", false},
		{ScheduleFuncs{Name: "lazy"}, true, "schedule lazy (strict), rank %d, iteration 1: bucket(s) [0 1 2 3 4] were not stepped and all-gathered", false},
		{ScheduleFuncs{Name: "early", OnBucketReady: func(c *ScheduleContext, i int) error {
			if i == 0 {
				return c.Step(1)
			}
			return nil
		}}, false, "schedule early, bucketReady(0), rank %d, iteration 1: bucket 1 is not ready yet", false},
		{ScheduleFuncs{Name: "twice", OnBackwardEnd: func(c *ScheduleContext) error {
			if err := c.Step(0); err != nil {
				return err
			}
			return c.Step(0)
		}}, false, "bucket 0 was stepped already in this iteration", false},
		{ScheduleFuncs{Name: "unstepped", OnBackwardEnd: func(c *ScheduleContext) error { return c.AllGather(2) }}, false,
			"schedule unstepped, backwardEnd, rank %d, iteration 1: bucket 2 is all-gathered before its step: step(2) first", false},
		{ScheduleFuncs{Name: "sent twice", OnBucketReduced: func(c *ScheduleContext, i int) error {
			if err := c.StepAndBroadcast(i); err != nil {
				return err
			}
			if i == 0 {
				return c.AllGather(0)
			}
			return nil
		}}, false, "bucket 0 was all-gathered already in this iteration", false},
		{ScheduleFuncs{Name: "far", OnBackwardEnd: func(c *ScheduleContext) error { return c.Wait(99) }}, false, "bucket 99: there are 5 buckets (0 to 4)", false},
		{ScheduleFuncs{Name: "by rank", OnBackwardEnd: func(c *ScheduleContext) error {
			for k := range c.NumBuckets() {
				if c.Rank() == 1 {
					k = c.NumBuckets() - 1 - k
				}
				if err := c.StepAndBroadcast(k); err != nil {
					return err
				}
			}
			return nil
		}}, false, "all-gather", true},
		// Buckets 0 and 2 are the same size (the biases of the first two
		// layers): swapped on rank 1, their all-gathers match and move
		// the wrong bytes, which the order check finds.
		{ScheduleFuncs{Name: "swapped", OnBackwardEnd: func(c *ScheduleContext) error {
			order := []int{0, 1, 2, 3, 4}
			if c.Rank() == 1 {
				order = []int{2, 1, 0, 3, 4}
			}
			for _, k := range order {
				if err := c.StepAndBroadcast(k); err != nil {
					return err
				}
			}
			return nil
		}}, false, "schedule swapped, iteration 1: the ranks all-gathered the buckets in different orders: all-gather #1 was bucket 0 on rank 0 but bucket 2 on rank 1", true},
	} {
		t.Run(fmt.Sprint(c.sched), func(t *testing.T) {
			got := schedRun{n: 2, steps: 1, sched: c.sched, strict: c.strict}.train(t)
			if len(got.errs) != 2 {
				t.Fatalf("errors %v, want one on each rank", got.errs)
			}
			for r, err := range got.errs {
				want := c.want
				if strings.Contains(want, "%d") {
					want = fmt.Sprintf(want, r)
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: error %v, want one with %q", r, err, want)
				}
				if c.order && !strings.Contains(err.Error(), "order") {
					t.Errorf("rank %d: error %v does not name the order of the all-gathers", r, err)
				}
				if testing.Verbose() {
					t.Log(err)
				}
			}
		})
	}
	// The engine did what the schedule left: after a failed iteration
	// the parameters are still plain stage 2's, and the next Step
	// succeeds.
	plain := schedRun{n: 2, steps: 3}.train(t)
	plain.err(t)
	got := schedRun{n: 2, steps: 3, sched: ScheduleFuncs{Name: "once", OnBucketReady: func(c *ScheduleContext, i int) error {
		if c.Iteration() == 2 && i == 2 {
			return boom
		}
		return nil
	}}, stepErr: func(step int, err error) error {
		if step == 1 && strings.Contains(err.Error(), "schedule once, bucketReady(2), rank ") && strings.Contains(err.Error(), "iteration 2: no step today") {
			return nil
		}
		return err
	}}.train(t)
	got.err(t)
	for step := range plain.steps {
		if !equalParams(got.steps[step], plain.steps[step]) {
			t.Fatalf("step %d: the parameters differ from plain stage 2's", step)
		}
	}
}

// TestScheduleOptionRefusals: Options.Schedule is stage 2's; what needs
// the whole gradient before the step is refused with one, since the
// parameters are updated during backward.
func TestScheduleOptionRefusals(t *testing.T) {
	w, rt := world(t, 1)
	defer w.Close()
	p := rt.Zeros(dtype.Float32, 4).Persist()
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Schedule: AsReduced}, "a schedule under stage 1 runs in the DDP comm hook"},
		{Options{Stage: 1, OverlapWithDDP: true, Schedule: AsReduced}, "a schedule under stage 1 runs in the DDP comm hook"},
		{Options{Stage: 3, Units: []UnitSpec{{Params: []*tensor.Tensor{p}}}, Schedule: AsReduced}, "stage 3 keeps its built-in order"},
		{Options{Stage: 2, Offload: newRuntime(), Schedule: AsReduced}, "a schedule with offload"},
		{Options{Stage: 2, StrictSchedule: true}, "strictSchedule without a schedule"},
	} {
		if _, err := New(w.Group(0), optim.SGD, []*tensor.Tensor{p}, optim.SGDConfig{LR: 0.1}.Group(), c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one with %q", c.opts, err, c.want)
		}
	}

	for _, c := range []struct {
		name string
		do   func(z *Optimizer) error
		want string
	}{
		{"clip", func(z *Optimizer) error { _, err := z.ClipGradNorm(1, 2); return err },
			"zero: clipGradNorm: clipping needs the norm of the whole gradient before the step, but this ZeroRedundancyOptimizer steps inside backward (stage 2, schedule interleaved)"},
		{"unscale", func(z *Optimizer) error { _, err := z.UnscaleGrads(0.5); return err }, "zero: unscaleGrads: a GradScaler checks the whole gradient"},
		{"skip", func(z *Optimizer) error { return z.SkipStep() }, "zero: skipStep: a step cannot be skipped"},
		{"add a group", func(z *Optimizer) error {
			g := z.Defaults()
			g.Params = []*tensor.Tensor{newRuntime().Zeros(dtype.Float32, 3)}
			return z.AddParamGroup(g)
		}, "addParamGroup between a backward pass and its step"},
		{"steps in backward", func(z *Optimizer) error {
			if s, ok := z.StepsInBackward(); !ok || s != Interleaved {
				return fmt.Errorf("StepsInBackward: %v, %v", s, ok)
			}
			return errors.New("reported")
		}, "reported"},
		{"bucket info", func(z *Optimizer) error {
			// The context a schedule gets: five buckets, this rank's
			// slice of each, no owner of whole parameters.
			c := z.flat.sched.ctx
			if c.NumBuckets() != 5 || c.Iteration() != 1 || c.WorldSize() != 2 {
				return fmt.Errorf("context: %d buckets, iteration %d, %d ranks", c.NumBuckets(), c.Iteration(), c.WorldSize())
			}
			b, err := c.Bucket(4) // the last layer's bias and weight, 132 elements
			if err != nil {
				return err
			}
			r := c.Rank()
			if b.Numel != 132 || b.SliceStart != 66*r || b.SliceEnd != 66*(r+1) || !slices.Equal(b.Offsets, []int{0, 4}) ||
				!slices.Equal(b.Owners, []int{-1, -1}) || !slices.Equal(b.Names, []string{"bias", "weight"}) || len(b.Params) != 2 {
				return fmt.Errorf("bucket 4: %+v", b)
			}
			if owners, err := c.Owners(4); err != nil || !slices.Equal(owners, b.Owners) {
				return fmt.Errorf("owners %v, %v", owners, err)
			}
			if _, err := c.Bucket(5); err == nil {
				return errors.New("bucket 5 of 5 was found")
			}
			if !c.Reduced(4) || c.Reduced(5) || c.Reduced(-1) {
				return errors.New("reduced")
			}
			return errors.New("reported")
		}, "reported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := schedRun{n: 2, steps: 1, sched: Interleaved, hook: c.do}.train(t)
			if len(got.errs) != 2 {
				t.Fatalf("errors %v, want one on each rank", got.errs)
			}
			for _, err := range got.errs {
				if !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %v, want one with %q", err, c.want)
				}
			}
		})
	}
}

// TestStage2ScheduleUnusedParameter: a parameter that gets no gradient
// holds its bucket, and those after it, until Step, which reduces its
// gradient as zeros: their events, and the end of the iteration, come
// there. The buckets before it are stepped during backward, and the
// result is plain stage 2's, bit for bit.
func TestStage2ScheduleUnusedParameter(t *testing.T) {
	train := func(sched Schedule) (after, stepped [][]float64, events []string) {
		w, err := dist.NewWorld(2, dist.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		afters, steps := make([][][]float64, 2), make([][][]float64, 2)
		evs := make([][]string, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for rank := range 2 {
			wg.Go(func() {
				errs[rank] = func() error {
					rt := newRuntime()
					var params []*tensor.Tensor
					for i := range 3 {
						vals := make([]float64, 8)
						for j := range vals {
							vals[j] = float64(i+1) * math.Cos(float64(j))
						}
						p := rt.FromValues(dtype.Float32, vals, 8).Persist()
						if err := p.SetRequiresGrad(true); err != nil {
							return err
						}
						params = append(params, p)
					}
					var s Schedule
					if sched != nil {
						s = ScheduleFuncs{Name: "recorder",
							OnIterationBegin: sched.IterationBegin,
							OnBucketReady:    func(c *ScheduleContext, i int) error { return sched.BucketReady(c, i) },
							OnBucketReduced:  func(c *ScheduleContext, i int) error { return sched.BucketReduced(c, i) },
							OnBackwardEnd: func(c *ScheduleContext) error {
								evs[rank] = append(evs[rank], "backwardEnd")
								return sched.BackwardEnd(c)
							}}
					}
					adamW := optim.DefaultAdamW().Group()
					adamW.LR = 1e-2
					// One bucket per parameter, p2's first.
					z, err := New(w.Group(rank), optim.AdamW, params, adamW, Options{Stage: 2, BucketCapMB: 1e-6, Schedule: s})
					if err != nil {
						return err
					}
					defer z.Close()
					x := rt.FromValues(dtype.Float32, []float64{1, 2, 3, 4, 5, 6, 7, 8}, 8)
					if err := params[0].Mul(x).Sum(nil, false).Add(params[2].Mul(x).Mul(x).Sum(nil, false)).Backward(); err != nil {
						return err
					}
					evs[rank] = append(evs[rank], "backward returned")
					for _, p := range params {
						v, err := p.Float64s()
						if err != nil {
							return err
						}
						afters[rank] = append(afters[rank], v)
					}
					if err := z.Step(); err != nil {
						return err
					}
					for _, p := range params {
						v, err := p.Float64s()
						if err != nil {
							return err
						}
						steps[rank] = append(steps[rank], v)
					}
					return nil
				}()
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		return afters[0], steps[0], evs[0]
	}
	before, want, _ := train(nil)
	eager := ScheduleFuncs{Name: "eager", OnBucketReady: func(c *ScheduleContext, i int) error { return c.StepAndBroadcast(i) }}
	for _, c := range []struct {
		sched   Schedule
		updated int // the parameters updated when backward returns: p2 (bucket 0) or none
	}{{eager, 1}, {AsReduced, 0}, {Interleaved, 0}} {
		after, got, events := train(c.sched)
		if !equalParams(got, want) {
			t.Errorf("%v: the parameters differ from plain stage 2's", c.sched)
		}
		// Bucket 0 (p2) can be stepped in backward; p1 and p0 are in
		// Step.
		if !equalParams(after[3-c.updated:], want[3-c.updated:]) || !equalParams(after[:3-c.updated], before[:3-c.updated]) {
			t.Errorf("%v: after backward, %d parameters should be updated", c.sched, c.updated)
		}
		if !slices.Equal(events, []string{"backward returned", "backwardEnd"}) {
			t.Errorf("%v: events %v: the iteration should end in Step", c.sched, events)
		}
	}
}
