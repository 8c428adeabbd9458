package wasm

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
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
	"github.com/zeroeng/zeroeng/internal/hookbuild"
	"github.com/zeroeng/zeroeng/zero"
)

// zeroTraining describes a few iterations of ZeRO stage 1 overlapped with
// DDP (zero.HookWithZeroSchedule, AdamW) on n in-process ranks: a
// three-layer model whose six parameters each have a bucket of their own,
// every rank with its own inputs. Under stage 2 the optimizer reduces the
// gradients itself and runs the schedule over its flat buckets
// (zero.Options.Schedule).
type zeroTraining struct {
	n     int
	steps int
	stage int // 1 or 2; 0 means 1
	// schedule makes the rank's schedule and what to do once the rank is
	// done with it.
	schedule func(rank int, pg dist.ProcessGroup) (zero.Schedule, func(), error)
}

// zeroTrained is what every rank ended with: its parameters after each
// step, what happened in its iterations (the events its schedule was told
// of, "ready 2", and the engine's steps of its buckets, "update 1", in
// their order) and its error.
type zeroTrained struct {
	trained
	events [][]string
}

func (c zeroTraining) run(t *testing.T) zeroTrained {
	t.Helper()
	if c.steps == 0 {
		c.steps = 3
	}
	w, err := dist.NewWorld(c.n, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	out := zeroTrained{trained{params: make([][][]float32, c.n), errs: make([]error, c.n)}, make([][]string, c.n)}
	var wg sync.WaitGroup
	for rank := range c.n {
		wg.Go(func() {
			out.params[rank], out.events[rank], out.errs[rank] = c.rank(w, rank)
			if out.errs[rank] != nil {
				w.Abort(fmt.Errorf("rank %d failed", rank))
			}
		})
	}
	wg.Wait()
	return out
}

func (c zeroTraining) rank(w *dist.World, rank int) ([][]float32, []string, error) {
	pg := w.Group(rank)
	rt := tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), 1)
	g := tensor.NewGenerator(7)
	shapes := [][]int{{16, 12}, {16}, {10, 16}, {10}, {5, 10}, {5}}
	names := []string{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}
	var named []ddp.Param
	var params []*tensor.Tensor
	for i, s := range shapes {
		p := rt.RandnWith(g, dtype.Float32, s...).MulScalar(0.3).Persist()
		if err := p.SetRequiresGrad(true); err != nil {
			return nil, nil, err
		}
		named = append(named, ddp.Param{Name: names[i], Tensor: p})
		params = append(params, p)
	}
	s, done, err := c.schedule(rank, pg)
	if err != nil {
		return nil, nil, err
	}
	if done != nil {
		defer done()
	}
	rec := &recorder{Schedule: s}
	adamW := optim.DefaultAdamW().Group()
	adamW.LR = 1e-2
	if c.stage == 2 {
		// Buckets of 128 elements.
		z, err := zero.New(pg, optim.AdamW, params, adamW, zero.Options{Stage: 2, BucketCapMB: 512.0 / (1 << 20), Schedule: rec})
		if err != nil {
			return nil, nil, err
		}
		defer z.Close()
		return c.loop(rt, rank, params, z, rec)
	}
	d, err := ddp.New(pg, named, ddp.Options{BucketCapMB: 1e-6, FirstBucketCapMB: 1e-6})
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	z, err := zero.New(pg, optim.AdamW, params, adamW, zero.Options{OverlapWithDDP: true})
	if err != nil {
		return nil, nil, err
	}
	defer z.Close()
	opts := zero.OverlapOptions{Trace: func(event string, bucket int, _, _ time.Time) {
		// Updates are told on the rank's goroutine, broadcasts on the
		// communication goroutine (and left out).
		if event == "update" {
			rec.add("update %d", bucket)
		}
	}}
	hook, err := zero.HookWithZeroSchedule(ddp.AllReduceHook(pg), d, z, rec, opts)
	if err != nil {
		return nil, nil, err
	}
	if err := d.RegisterCommHook(hook); err != nil {
		return nil, nil, err
	}
	return c.loop(rt, rank, params, z, rec)
}

// loop runs the training steps, recording the parameters after each.
func (c zeroTraining) loop(rt *tensor.Runtime, rank int, params []*tensor.Tensor, z *zero.Optimizer, rec *recorder) ([][]float32, []string, error) {
	data := tensor.NewGenerator(100 + uint64(rank))
	var history [][]float32
	for range c.steps {
		err := func() error {
			sc := rt.OpenScope()
			defer sc.Close()
			if err := z.ZeroGrad(false); err != nil {
				return err
			}
			x := rt.RandnWith(data, dtype.Float32, 8, 12)
			h := x.Matmul(params[0].T()).Add(params[1]).Tanh()
			h = h.Matmul(params[2].T()).Add(params[3]).Tanh()
			y := h.Matmul(params[4].T()).Add(params[5])
			if err := y.Square().MeanAll().Backward(); err != nil {
				return err
			}
			if err := z.Step(); err != nil {
				return err
			}
			var flat []float32
			for _, p := range params {
				v, err := p.Float32s()
				if err != nil {
					return err
				}
				flat = append(flat, v...)
			}
			history = append(history, flat)
			return nil
		}()
		if err != nil {
			return history, rec.events, err
		}
	}
	return history, rec.events, nil
}

// recorder is a schedule that records the events it passes on.
type recorder struct {
	zero.Schedule
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) IterationBegin(c *zero.ScheduleContext) error {
	r.add("begin %d", c.Iteration())
	return r.Schedule.IterationBegin(c)
}

func (r *recorder) BucketReady(c *zero.ScheduleContext, i int) error {
	r.add("ready %d", i)
	return r.Schedule.BucketReady(c, i)
}

func (r *recorder) BucketReduced(c *zero.ScheduleContext, i int) error {
	r.add("reduced %d", i)
	return r.Schedule.BucketReduced(c, i)
}

func (r *recorder) BackwardEnd(c *zero.ScheduleContext) error {
	r.add("end")
	return r.Schedule.BackwardEnd(c)
}

func (r *recorder) String() string { return fmt.Sprint(r.Schedule) }

// goSchedule makes a training's schedule factory from a Go schedule,
// made afresh for each rank.
func goSchedule(s func() zero.Schedule) func(int, dist.ProcessGroup) (zero.Schedule, func(), error) {
	return func(int, dist.ProcessGroup) (zero.Schedule, func(), error) { return s(), nil, nil }
}

// wasmSchedule makes a training's schedule factory from a compiled
// schedule module; each rank's log goes to logs[rank] when logs is not
// nil, and after is called with the rank's instance before it closes.
func wasmSchedule(m *Module, o ScheduleOptions, logs []*syncBuffer, after func(rank int, s *Schedule)) func(int, dist.ProcessGroup) (zero.Schedule, func(), error) {
	return func(rank int, pg dist.ProcessGroup) (zero.Schedule, func(), error) {
		o := o // the ranks' own
		if logs != nil {
			o.Stdout, o.Stderr = logs[rank], logs[rank]
		}
		s, err := m.NewSchedule(pg, o)
		if err != nil {
			return nil, nil, err
		}
		return s, func() {
			if after != nil {
				after(rank, s)
			}
			s.Close()
		}, nil
	}
}

// lagK is samples/schedules/lag_k.c in Go: bucket i is stepped and sent
// when bucket i+k is ready, the rest at the end of backward.
func lagK(k int) zero.Schedule {
	next := 0
	return zero.ScheduleFuncs{Name: fmt.Sprintf("lag-%d", k),
		OnIterationBegin: func(*zero.ScheduleContext) error { next = 0; return nil },
		OnBucketReady: func(c *zero.ScheduleContext, i int) error {
			for ; i-next >= k; next++ {
				if err := c.StepAndBroadcast(next); err != nil {
					return err
				}
			}
			return nil
		},
		OnBackwardEnd: func(c *zero.ScheduleContext) error {
			for ; next < c.NumBuckets(); next++ {
				if err := c.StepAndBroadcast(next); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// scheduleHeader declares what the schedule modules below share: the
// host functions they call, one page of memory and the ABI marker.
const scheduleHeader = `
  (import "zeroeng" "sched_info" (func $info (param i32) (result i32)))
  (import "zeroeng" "sched_bucket" (func $bucket (param i32 i32) (result i32)))
  (import "zeroeng" "sched_param" (func $param (param i32 i32 i32 i32 i32) (result i32)))
  (import "zeroeng" "sched_wait" (func $wait (param i32) (result i32)))
  (import "zeroeng" "sched_step" (func $step (param i32) (result i32)))
  (import "zeroeng" "sched_broadcast" (func $broadcast (param i32) (result i32)))
  (import "zeroeng" "sched_all_gather" (func $all_gather (param i32) (result i32)))
  (import "zeroeng" "sched_step_and_broadcast" (func $sab (param i32) (result i32)))
  (import "zeroeng" "log" (func $log (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "zeroeng_sched_abi_v1"))
  ;; $buckets is the number of buckets (sched_info at 0).
  (func $buckets (result i32)
    (if (call $info (i32.const 0)) (then unreachable))
    (i32.load (i32.const 0)))
`

func schedule(body string) string { return "(module" + scheduleHeader + body + ")" }

// The WAT schedules of the tests: PyTorch's two, and the interleaved one
// saying each event in its log (as the recorder does).
const (
	interleavedWAT = `
  (func (export "on_bucket_ready") (param $b i32) (result i32)
    (if (i32.gt_s (local.get $b) (i32.const 0)) (then (return (call $sab (i32.sub (local.get $b) (i32.const 1))))))
    (i32.const 0))
  (func (export "on_backward_end") (result i32)
    (call $sab (i32.sub (call $buckets) (i32.const 1))))`
	afterBackwardWAT = `
  (func (export "on_backward_end") (result i32)
    (local $b i32) (local $s i32)
    (block $done (loop $next
      (br_if $done (i32.ge_s (local.get $b) (call $buckets)))
      (local.set $s (call $sab (local.get $b)))
      (if (local.get $s) (then (return (local.get $s))))
      (local.set $b (i32.add (local.get $b) (i32.const 1)))
      (br $next)))
    (i32.const 0))`
	eventsWAT = `
  (data (i32.const 100) "begin ?")
  (data (i32.const 200) "ready ?")
  (data (i32.const 300) "reduced ?")
  (data (i32.const 400) "end")
  ;; $say logs the text of len bytes at $at, its last byte the digit $d.
  (func $say (param $at i32) (param $len i32) (param $d i32) (result i32)
    (i32.store8 (i32.sub (i32.add (local.get $at) (local.get $len)) (i32.const 1)) (i32.add (i32.const 48) (local.get $d)))
    (call $log (local.get $at) (local.get $len)))
  (func (export "on_iteration_begin") (param $it i64) (result i32)
    (call $say (i32.const 100) (i32.const 7) (i32.wrap_i64 (local.get $it))))
  (func (export "on_bucket_ready") (param $b i32) (result i32)
    (if (call $say (i32.const 200) (i32.const 7) (local.get $b)) (then unreachable))
    (if (i32.gt_s (local.get $b) (i32.const 0)) (then (return (call $sab (i32.sub (local.get $b) (i32.const 1))))))
    (i32.const 0))
  (func (export "on_bucket_reduced") (param $b i32) (result i32)
    (call $say (i32.const 300) (i32.const 9) (local.get $b)))
  (func (export "on_backward_end") (result i32)
    (if (call $log (i32.const 400) (i32.const 3)) (then unreachable))
    (call $sab (i32.sub (call $buckets) (i32.const 1))))`
	// queriesWAT is interleaved; before the last bucket's step it keeps
	// sched_info at 4000 and, for each bucket b at 4096 + 128 b,
	// sched_bucket, sched_param of its parameter 0 (the record at +40 and
	// a 32-byte name at +64) and again with a 3-byte name (at +96 and
	// +120).
	queriesWAT = `
  (func (export "on_bucket_ready") (param $b i32) (result i32)
    (if (i32.gt_s (local.get $b) (i32.const 0)) (then (return (call $sab (i32.sub (local.get $b) (i32.const 1))))))
    (i32.const 0))
  (func (export "on_backward_end") (result i32)
    (local $b i32) (local $at i32)
    (if (call $info (i32.const 4000)) (then unreachable))
    (block $done (loop $next
      (br_if $done (i32.ge_s (local.get $b) (call $buckets)))
      (local.set $at (i32.add (i32.const 4096) (i32.mul (local.get $b) (i32.const 128))))
      (if (call $bucket (local.get $b) (local.get $at)) (then unreachable))
      (if (call $param (local.get $b) (i32.const 0) (i32.add (local.get $at) (i32.const 40)) (i32.add (local.get $at) (i32.const 64)) (i32.const 32)) (then unreachable))
      (if (call $param (local.get $b) (i32.const 0) (i32.add (local.get $at) (i32.const 96)) (i32.add (local.get $at) (i32.const 120)) (i32.const 3)) (then unreachable))
      (local.set $b (i32.add (local.get $b) (i32.const 1)))
      (br $next)))
    (call $sab (i32.sub (call $buckets) (i32.const 1))))`
)

func compileSchedule(t *testing.T, name, wat string, cfg Config) *Module {
	t.Helper()
	m, err := CompileSchedule(name+".wasm", hookbuild.WAT(t, schedule(wat)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// equalEvents fails unless every rank saw the same events and steps in
// the same order in both runs.
func equalEvents(t *testing.T, got, want zeroTrained) {
	t.Helper()
	for r := range want.events {
		if !slices.Equal(got.events[r], want.events[r]) {
			t.Fatalf("rank %d's iterations:\n%s\nwant\n%s", r, strings.Join(got.events[r], ", "), strings.Join(want.events[r], ", "))
		}
	}
}

// TestScheduleTrainsAsGo: a schedule in WebAssembly trains bit for bit as
// the same schedule in Go, on 2 and 4 ranks, with its events and the
// engine's steps in the same order: PyTorch's interleaved and
// after-backward schedules in WAT against zero.Interleaved and
// zero.AfterBackward. The interleaved one that logs its events shows
// that the guest is told of each (iteration_begin, bucket_ready in
// order, bucket_reduced after the event that waited, backward_end, the
// rest of bucket_reduced in order) as a Go schedule is.
func TestScheduleTrainsAsGo(t *testing.T) {
	cases := []struct {
		name, wat string
		ref       zero.Schedule
	}{
		{"interleaved", interleavedWAT, zero.Interleaved},
		{"after backward", afterBackwardWAT, zero.AfterBackward},
		{"events", eventsWAT, zero.Interleaved},
	}
	for _, c := range cases {
		m := compileSchedule(t, strings.ReplaceAll(c.name, " ", "_"), c.wat, Config{})
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				want := zeroTraining{n: n, schedule: goSchedule(func() zero.Schedule { return c.ref })}.run(t)
				noErrors(t, want.trained)
				logs := make([]*syncBuffer, n)
				for r := range logs {
					logs[r] = &syncBuffer{}
				}
				got := zeroTraining{n: n, schedule: wasmSchedule(m, ScheduleOptions{}, logs, nil)}.run(t)
				noErrors(t, got.trained)
				equalRuns(t, got.trained, want.trained, 0)
				equalEvents(t, got, want)
				if c.name != "events" {
					return
				}
				for r, log := range logs {
					var said, told []string
					for line := range strings.Lines(log.String()) {
						said = append(said, strings.TrimPrefix(strings.TrimSuffix(line, "\n"), m.Name()+": "))
					}
					for _, e := range want.events[r] {
						if !strings.HasPrefix(e, "update") {
							told = append(told, e)
						}
					}
					if !slices.Equal(said, told) {
						t.Fatalf("rank %d's guest was told\n%s\nthe engine's events are\n%s", r, strings.Join(said, ", "), strings.Join(told, ", "))
					}
				}
			})
		}
	}
	// The interleaved order itself, for the first iteration of six
	// buckets.
	first := "begin 1, ready 0, ready 1, update 0, reduced 0, ready 2, update 1, reduced 1, ready 3, update 2, reduced 2, ready 4, update 3, reduced 3, ready 5, update 4, reduced 4, end, update 5, reduced 5"
	got := zeroTraining{n: 2, steps: 1, schedule: wasmSchedule(compileSchedule(t, "interleaved", interleavedWAT, Config{}), ScheduleOptions{}, nil, nil)}.run(t)
	noErrors(t, got.trained)
	if e := strings.Join(got.events[0], ", "); e != first {
		t.Errorf("interleaved's first iteration:\n%s\nwant\n%s", e, first)
	}
}

// TestScheduleQueries: sched_info, sched_bucket and sched_param describe
// the iteration, the buckets and their parameters as the engine has them.
func TestScheduleQueries(t *testing.T) {
	const n = 2
	m := compileSchedule(t, "queries", queriesWAT, Config{})
	mem := make([][]byte, n)
	res := zeroTraining{n: n, steps: 2, schedule: wasmSchedule(m, ScheduleOptions{}, nil, func(rank int, s *Schedule) {
		mem[rank], _ = s.mod.Memory().Read(4000, 4096+6*128-4000)
		mem[rank] = slices.Clone(mem[rank])
	})}.run(t)
	noErrors(t, res.trained)
	le := binary.LittleEndian
	names := []string{"4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"}
	numels := []uint64{5, 50, 10, 160, 16, 192}
	for rank, b := range mem {
		if b == nil {
			t.Fatalf("rank %d: no memory read", rank)
		}
		if got := [...]uint64{uint64(le.Uint32(b[0:])), uint64(le.Uint32(b[4:])), uint64(le.Uint32(b[8:])), uint64(le.Uint32(b[12:])), le.Uint64(b[16:])}; got != [...]uint64{6, uint64(rank), n, 1, 2} {
			t.Errorf("rank %d: sched_info wrote %v, want [buckets rank world stage iteration] = [6 %d %d 1 2]", rank, got, rank, n)
		}
		for k := range 6 {
			r := b[96+128*k:]
			flags := uint32(0xf) // ready, reduced, stepped, broadcast
			if k == 5 {
				flags = 1 // the last, ready only
			}
			if numel, params, dt, fl, start, end := le.Uint64(r[0:]), le.Uint32(r[8:]), le.Uint32(r[12:]), le.Uint32(r[16:]), le.Uint64(r[24:]), le.Uint64(r[32:]); numel != numels[k] || params != 1 || dt != 0 || fl != flags || start != 0 || end != 0 {
				t.Errorf("rank %d, bucket %d: sched_bucket wrote numel %d, %d parameters, dtype %d, flags %#x, slice [%d, %d); want %d, 1, 0 (float32), %#x, [0, 0)", rank, k, numel, params, dt, fl, start, end, numels[k], flags)
			}
			p := r[40:]
			name := string(r[64 : 64+le.Uint32(p[16:])])
			// Without shardBuckets bucket k belongs to rank k mod n.
			if off, numel, owner := le.Uint64(p[0:]), le.Uint64(p[8:]), le.Uint32(p[20:]); off != 0 || numel != numels[k] || owner != uint32(k%n) || name != names[k] {
				t.Errorf("rank %d, bucket %d: sched_param wrote offset %d, numel %d, owner %d, name %q; want 0, %d, %d, %q", rank, k, off, numel, owner, name, numels[k], k%n, names[k])
			}
			short := r[96:]
			if l, cut := le.Uint32(short[16:]), string(r[120:124]); l != uint32(len(names[k])) || cut != names[k][:3]+"\x00" {
				t.Errorf("rank %d, bucket %d: with a 3-byte name buffer, length %d and bytes %q; want %d and %q", rank, k, l, cut, len(names[k]), names[k][:3])
			}
		}
	}
}

// TestScheduleMisuse: each action the engine refuses fails the event
// that took it with the engine's message, the host function and the
// status, naming the schedule (the module), the event, the rank and the
// iteration, even when the guest ignores the status; queries outside an
// event and bad pointers too.
func TestScheduleMisuse(t *testing.T) {
	cases := []struct {
		name, body string
		want       string
	}{
		{"step before ready", `(func (export "on_bucket_ready") (param $b i32) (result i32) (call $step (i32.add (local.get $b) (i32.const 1))))`,
			"bucketReady(0), rank 0, iteration 1: on_bucket_ready: host call sched_step: ERR_ORDER: bucket 1 is not ready yet"},
		{"step twice, the status ignored", `(func (export "on_backward_end") (result i32) (drop (call $step (i32.const 0))) (drop (call $step (i32.const 0))) (i32.const 0))`,
			"backwardEnd, rank 0, iteration 1: on_backward_end: host call sched_step: ERR_ORDER: bucket 0 was stepped already in this iteration"},
		{"broadcast before step", `(func (export "on_backward_end") (result i32) (call $broadcast (i32.const 0)))`,
			"backwardEnd, rank 0, iteration 1: on_backward_end: host call sched_broadcast: ERR_ORDER: bucket 0 is broadcast before its step"},
		{"broadcast twice", `(func (export "on_bucket_reduced") (param $b i32) (result i32)
			  (drop (call $sab (local.get $b))) (call $broadcast (local.get $b)))
			(func (export "on_backward_end") (result i32) (call $wait (i32.const 0)))`,
			"bucketReduced(0), rank 0, iteration 1: on_bucket_reduced: host call sched_broadcast: ERR_ORDER: bucket 0 was broadcast already in this iteration"},
		{"wait before ready", `(func (export "on_iteration_begin") (param i64) (result i32) (call $wait (i32.const 1)))`,
			"iterationBegin, rank 0, iteration 1: on_iteration_begin: host call sched_wait: ERR_ORDER: bucket 1 is not ready yet"},
		{"all_gather under stage 1", `(func (export "on_bucket_reduced") (param $b i32) (result i32)
			  (drop (call $step (local.get $b))) (call $all_gather (local.get $b)))
			(func (export "on_backward_end") (result i32) (call $wait (i32.const 0)))`,
			"bucketReduced(0), rank 0, iteration 1: on_bucket_reduced: host call sched_all_gather: ERR_INVALID: allGather(0): under stage 1 each parameter is broadcast from its owner"},
		{"a bucket that does not exist", `(func (export "on_backward_end") (result i32) (call $sab (i32.const 99)))`,
			"backwardEnd, rank 0, iteration 1: on_backward_end: host call sched_step_and_broadcast: ERR_INVALID: bucket 99: there are 6 buckets (0 to 5)"},
		{"a negative bucket", `(func (export "on_backward_end") (result i32) (call $bucket (i32.const -1) (i32.const 0)))`,
			"host call sched_bucket: ERR_INVALID: bucket -1: there are 6 buckets"},
		{"a parameter that does not exist", `(func (export "on_backward_end") (result i32) (call $param (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 0)))`,
			"host call sched_param: ERR_INVALID: parameter 1 of bucket 0, which has 1"},
		{"a pointer outside memory", `(func (export "on_backward_end") (result i32) (call $info (i32.const 65530)))`,
			"on_backward_end: host call sched_info: ERR_BOUNDS: guest range [65530, 65554) is outside the 65536 bytes of memory"},
		{"a name outside memory", `(func (export "on_backward_end") (result i32) (call $param (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 65535) (i32.const 64)))`,
			"host call sched_param: ERR_BOUNDS: guest range [65535, 65541)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := strings.ReplaceAll(c.name, " ", "_")
			m := compileSchedule(t, name, c.body, Config{})
			res := zeroTraining{n: 2, schedule: wasmSchedule(m, ScheduleOptions{}, nil, nil)}.run(t)
			for r, err := range res.errs {
				want := strings.ReplaceAll(c.want, "rank 0", fmt.Sprintf("rank %d", r))
				if err == nil || !strings.Contains(err.Error(), "zero: schedule "+name+".wasm, ") || !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: error %v\nwant one naming the schedule %s.wasm and %q", r, err, name, want)
				}
			}
		})
	}
}

// TestScheduleFailures: a trap, a status of the guest's own, the memory
// limit and the time limit each fail the iteration with an error naming
// the schedule, the event, the rank, the iteration and the export, on
// every rank, none hanging; the failed instance is not called again.
func TestScheduleFailures(t *testing.T) {
	cases := []struct {
		name, body string
		cfg        Config
		want       []string
	}{
		{"trap", `(func (export "on_bucket_reduced") (param i32) (result i32) unreachable)`, Config{},
			[]string{"bucketReduced(0), rank R, iteration 1: on_bucket_reduced: trap: wasm error: unreachable"}},
		{"a status of its own", `(func (export "on_backward_end") (result i32) (i32.const 77))`, Config{},
			[]string{"backwardEnd, rank R, iteration 1: on_backward_end: returned status 77"}},
		{"unbounded memory growth", `(func (export "on_iteration_begin") (param i64) (result i32)
			  (loop $more (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
			  unreachable)`, Config{MemoryLimitMB: 16},
			[]string{"iterationBegin, rank R, iteration 1: on_iteration_begin: trap: wasm error: unreachable", "MiB of its 16 MiB limit"}},
		{"infinite loop under a time limit", `(func (export "on_bucket_ready") (param i32) (result i32) (loop $forever (br $forever)) (i32.const 0))`,
			Config{Timeout: 200 * time.Millisecond},
			[]string{"bucketReady(0), rank R, iteration 1: on_bucket_ready: ran past its time limit of 200ms"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := strings.ReplaceAll(c.name, " ", "_")
			m := compileSchedule(t, name, c.body, c.cfg)
			scheds := make([]*Schedule, 2)
			done := make(chan zeroTrained)
			go func() {
				done <- zeroTraining{n: 2, schedule: wasmSchedule(m, ScheduleOptions{}, nil, func(rank int, s *Schedule) { scheds[rank] = s })}.run(t)
			}()
			var res zeroTrained
			select {
			case res = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the ranks hang")
			}
			for r, err := range res.errs {
				for _, w := range append(c.want, "zero: schedule "+name+".wasm, ") {
					if w = strings.ReplaceAll(w, "rank R", fmt.Sprintf("rank %d", r)); err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: error %v\ndoes not contain %q", r, err, w)
					}
				}
				if scheds[r] == nil || scheds[r].Err() == nil {
					t.Errorf("rank %d: the instance did not end", r)
				}
			}
		})
	}
}

// TestScheduleSetup: what fails while an instance is made names the
// module, the export and the rank; a schedule is not a hook and a hook
// not a schedule; a configuration reaches configure.
func TestScheduleSetup(t *testing.T) {
	w, err := dist.NewWorld(1, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pg := w.Group(0)
	// newSchedule takes the subtest's t: hookbuild skips through it when
	// wat2wasm is missing, and a skip through the parent fails the run.
	newSchedule := func(t *testing.T, body string, config []byte) (*Schedule, error) {
		m, err := CompileSchedule("setup.wasm", hookbuild.WAT(t, schedule(interleavedWAT+body)), Config{})
		if err != nil {
			t.Fatal(err)
		}
		return m.NewSchedule(pg, ScheduleOptions{Configuration: config, Stdout: &syncBuffer{}, Stderr: &syncBuffer{}})
	}
	for _, c := range []struct {
		name, body string
		config     []byte
		want       string
	}{
		{"a failed init", `(func (export "init") (param i32 i32) (result i32) (i32.const 5))`, nil,
			"wasm schedule setup.wasm: init (rank 0): returned status 5"},
		{"a query in init", `(func (export "init") (param i32 i32) (result i32) (call $info (i32.const 0)))`, nil,
			"wasm schedule setup.wasm: init (rank 0): host call sched_info: ERR_ORDER: no event in progress"},
		{"a configuration without configure", ``, []byte("{}"),
			"wasm schedule setup.wasm: configure (rank 0): the schedule was given a configuration, but the module exports no configure"},
		{"a trap in _initialize", `(func (export "_initialize") unreachable)`, nil,
			"wasm schedule setup.wasm: _initialize (rank 0): trap: wasm error: unreachable"},
		{"a configure that refuses", `(func (export "alloc") (param i32) (result i32) (i32.const 1024))
			(func (export "configure") (param $p i32) (param $n i32) (result i32)
			  (if (i32.ne (i32.load8_u (local.get $p)) (i32.const 123)) (then (return (i32.const 9))))
			  (local.get $n))`, []byte("[]"),
			"wasm schedule setup.wasm: configure (rank 0): returned status 9"},
		{"a configure that takes it", `(func (export "alloc") (param i32) (result i32) (i32.const 1024))
			(func (export "configure") (param $p i32) (param $n i32) (result i32)
			  (if (i32.ne (i32.load8_u (local.get $p)) (i32.const 123)) (then (return (i32.const 9))))
			  (i32.sub (local.get $n) (i32.const 8)))`, []byte(`{"k": 3}`), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := newSchedule(t, c.body, c.config)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	sched := compileSchedule(t, "interleaved", interleavedWAT, Config{})
	if _, err := sched.NewHook(pg, nil, Options{}); err == nil || !strings.Contains(err.Error(), "wasm hook interleaved.wasm: the module was compiled as a schedule, not a hook") {
		t.Errorf("NewHook of a schedule: %v", err)
	}
	hook, err := Compile("allreduce.wasm", hookbuild.WAT(t, hostile(`(func (export "on_bucket") (param $b i32) (result i32) (call $average (local.get $b)))`)), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hook.NewSchedule(pg, ScheduleOptions{}); err == nil || !strings.Contains(err.Error(), "wasm schedule allreduce.wasm: the module was compiled as a hook, not a schedule") {
		t.Errorf("NewSchedule of a hook: %v", err)
	}
	if s, err := sched.NewSchedule(pg, ScheduleOptions{}); err != nil || s.String() != "interleaved.wasm" {
		t.Errorf("the schedule's name: %v, %v", s, err)
	} else {
		s.Close()
	}
}

// TestScheduleCheck: modules that break the schedule ABI are refused
// before anything runs, each with the reason, by CheckSchedule and
// CompileSchedule alike; a schedule given as a hook and a hook given as a
// schedule are told what they are.
func TestScheduleCheck(t *testing.T) {
	const marker = `(func (export "zeroeng_sched_abi_v1"))`
	const memory = `(memory (export "memory") 1)`
	const ready = `(func (export "on_bucket_ready") (param i32) (result i32) (i32.const 0))`
	cases := []struct {
		name string
		wat  string
		want []string // none for a valid module
	}{
		{"minimal", memory + marker + ready, nil},
		{"every export, and log", `(import "zeroeng" "log" (func (param i32 i32) (result i32)))` + memory + marker + ready +
			`(func (export "_initialize")) (func (export "alloc") (param i32) (result i32) (i32.const 0))
			(func (export "configure") (param i32 i32) (result i32) (i32.const 0)) (func (export "init") (param i32 i32) (result i32) (i32.const 0))
			(func (export "on_iteration_begin") (param i64) (result i32) (i32.const 0)) (func (export "on_bucket_reduced") (param i32) (result i32) (i32.const 0))
			(func (export "on_backward_end") (result i32) (i32.const 0))`, nil},
		{"no marker", memory + ready, []string{"no ABI marker: a zeroeng schedule exports a function named zeroeng_sched_abi_v1"}},
		{"a hook's marker", memory + ready + `(func (export "zeroeng_hook_abi_v1"))`,
			[]string{"no schedule ABI marker: it exports zeroeng_hook_abi_v1, the marker of a zeroeng hook, where a zeroeng schedule exports zeroeng_sched_abi_v1"}},
		{"a program's marker", memory + ready + `(func (export "zeroeng_program_abi_v1"))`,
			[]string{"it exports zeroeng_program_abi_v1, the marker of a zeroeng training program"}},
		{"a later ABI", memory + ready + `(func (export "zeroeng_sched_abi_v2"))`, []string{"built for the schedule ABI v2; this zeroeng implements v1"}},
		{"no events", memory + marker + `(func (export "init") (param i32 i32) (result i32) (i32.const 0))`,
			[]string{"exports none of the events on_iteration_begin, on_bucket_ready, on_bucket_reduced, on_backward_end: a schedule acts in them"}},
		{"an event of the wrong type", memory + marker + `(func (export "on_bucket_ready") (param i64) (result i32) (i32.const 0))`,
			[]string{"export on_bucket_ready has type (i64) -> (i32), want (i32) -> (i32)"}},
		{"iteration_begin of the wrong type", memory + marker + `(func (export "on_iteration_begin") (param i32) (result i32) (i32.const 0))`,
			[]string{"export on_iteration_begin has type (i32) -> (i32), want (i64) -> (i32)"}},
		{"a hook's function", `(import "zeroeng" "all_reduce" (func (param i32 i32) (result i32)))` + memory + marker + ready,
			[]string{"imports zeroeng.all_reduce, a function of the hook ABI (docs/wasm-hook-abi.md), which works only in a hook, not in a schedule"}},
		{"a host function that does not exist", `(import "zeroeng" "sched_sleep" (func (param i32) (result i32)))` + memory + marker + ready,
			[]string{"imports zeroeng.sched_sleep, which this host does not provide (schedule ABI v1)"}},
		{"a schedule function of the wrong type", `(import "zeroeng" "sched_step" (func (param i64) (result i32)))` + memory + marker + ready,
			[]string{"imports zeroeng.sched_step with type (i64) -> (i32), want (i32) -> (i32)"}},
		{"an import from elsewhere", `(import "env" "abort" (func))` + memory + marker + ready,
			[]string{`imports env.abort: a schedule may import only from "zeroeng" and "wasi_snapshot_preview1"`}},
		{"no memory", marker + ready, []string{`no exported memory named "memory"`}},
		{"a command", memory + marker + ready + `(func (export "_start"))`, []string{"exports _start: a schedule is a reactor"}},
		{"configure without alloc", memory + marker + ready + `(func (export "configure") (param i32 i32) (result i32) (i32.const 0))`,
			[]string{"exports configure but not alloc"}},
		{"a start function", memory + marker + ready + `(func $spin (loop $l (br $l))) (start $spin)`,
			[]string{"has a start function (a WebAssembly start section), which would run as each rank instantiates the module, outside the schedule's calls"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wasm := hookbuild.WAT(t, "(module "+c.wat+")")
			info, err := CheckSchedule(c.name+".wasm", wasm)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(info.Problems, "\n")
			if len(c.want) == 0 && got != "" {
				t.Fatalf("problems in a valid module:\n%s", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems\n%s\ndo not mention %q", got, w)
				}
			}
			_, cerr := CompileSchedule(c.name+".wasm", wasm, Config{})
			if (cerr == nil) != (len(c.want) == 0) {
				t.Errorf("CompileSchedule: %v", cerr)
			}
			if cerr != nil && !strings.Contains(cerr.Error(), "wasm schedule "+c.name+".wasm does not follow the zeroeng schedule ABI v1") {
				t.Errorf("CompileSchedule's error does not name the module: %v", cerr)
			}
		})
	}
	// The other way: a schedule, and a schedule's function, in a hook.
	for _, c := range []struct{ name, wat, want string }{
		{"a schedule", `(memory (export "memory") 1) (func (export "zeroeng_sched_abi_v1"))` + ready,
			"no hook ABI marker: it exports zeroeng_sched_abi_v1, the marker of a zeroeng schedule, where a zeroeng hook exports zeroeng_hook_abi_v1"},
		{"a hook calling a schedule's function", `(import "zeroeng" "sched_step" (func (param i32) (result i32)))
			(memory (export "memory") 1) (func (export "zeroeng_hook_abi_v1")) (func (export "on_bucket") (param i32) (result i32) (i32.const 0))`,
			"imports zeroeng.sched_step, a function of the schedule ABI (docs/wasm-schedule-abi.md), which works only in a schedule, not in a hook"},
	} {
		_, err := Compile(c.name+".wasm", hookbuild.WAT(t, "(module "+c.wat+")"), Config{})
		if err == nil || !strings.Contains(err.Error(), "wasm hook "+c.name+".wasm does not follow the zeroeng hook ABI v1") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s as a hook: %v\nwant %q", c.name, err, c.want)
		}
	}
	if _, err := LoadSchedule(filepath.Join(t.TempDir(), "none.wasm"), Config{}); err == nil || !strings.HasPrefix(err.Error(), "wasm schedule: ") {
		t.Errorf("LoadSchedule of a missing file: %v", err)
	}
	if _, err := CompileSchedule("late.wasm", nil, Config{Timeout: time.Second, Trusted: true}); err == nil || !strings.Contains(err.Error(), "wasm schedule: a time limit needs the loop checks") {
		t.Errorf("a time limit on a trusted schedule: %v", err)
	}
}

// TestScheduleSampleLagK: samples/schedules/lag_k.c trains bit for bit as
// the same schedule in Go (lagK), its steps at the same points of each
// iteration, with k from its configuration (2 by default; 1 is the
// interleaved schedule), on 2 ranks; a configuration it does not take
// fails the schedule's creation, saying why in the log.
func TestScheduleSampleLagK(t *testing.T) {
	m, err := CompileSchedule("lag_k.wasm", hookbuild.ScheduleSample(t, "lag_k"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		config string
		ref    func() zero.Schedule
	}{
		{`{"k": 2}`, func() zero.Schedule { return lagK(2) }},
		{"", func() zero.Schedule { return lagK(2) }},
		{`{"k":1}`, func() zero.Schedule { return zero.Interleaved }},
		{` { "k" : 4 } `, func() zero.Schedule { return lagK(4) }},
		{`{"k": 0}`, func() zero.Schedule { return lagK(0) }},
	} {
		t.Run(c.config, func(t *testing.T) {
			want := zeroTraining{n: 2, schedule: goSchedule(c.ref)}.run(t)
			noErrors(t, want.trained)
			var o ScheduleOptions
			if c.config != "" {
				o.Configuration = []byte(c.config)
			}
			logs := []*syncBuffer{{}, {}}
			got := zeroTraining{n: 2, schedule: wasmSchedule(m, o, logs, nil)}.run(t)
			noErrors(t, got.trained)
			equalRuns(t, got.trained, want.trained, 0)
			equalEvents(t, got, want)
			if k := strings.TrimSuffix(strings.TrimPrefix(c.config, `{"k": `), "}"); c.config == `{"k": 2}` && !strings.Contains(logs[0].String(), "lag_k.wasm: lag-"+k+" schedule on 2 ranks") {
				t.Errorf("rank 0's log: %q", logs[0].String())
			}
		})
	}
	w, err := dist.NewWorld(1, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, c := range []struct{ config, want string }{
		{`{"k": 2, "j": 1}`, `unknown key "j" (the one key is k)`},
		{`{"k": -1}`, "k must be a whole number from 0"},
		{`{"k": 1.5}`, "k must be a whole number from 0"},
		{`[2]`, "want a JSON object"},
		{`{"k": 2} x`, "bytes after the JSON object"},
	} {
		var log syncBuffer
		_, err := m.NewSchedule(w.Group(0), ScheduleOptions{Configuration: []byte(c.config), Stdout: &log, Stderr: &log})
		if err == nil || !strings.Contains(err.Error(), "wasm schedule lag_k.wasm: configure (rank 0): returned status 100") || !strings.Contains(log.String(), c.want) {
			t.Errorf("configuration %s: %v, log %q; want status 100 and %q", c.config, err, log.String(), c.want)
		}
	}
}

// TestScheduleStage2: under stage 2 (zero.Options.Schedule: the
// optimizer's flat buckets, each rank stepping its slice and the slices
// all-gathered) a Wasm schedule trains bit for bit as the same schedule in
// Go, with the same events; sched_info says the stage, sched_all_gather
// is the send and sched_broadcast is refused with the engine's message.
func TestScheduleStage2(t *testing.T) {
	const asReducedWAT = `
  (func (export "on_iteration_begin") (param i64) (result i32)
    (if (call $info (i32.const 0)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 12)) (i32.const 2)) (then (return (i32.const 55))))
    (i32.const 0))
  (func (export "on_bucket_reduced") (param $b i32) (result i32)
    (local $s i32)
    (local.set $s (call $step (local.get $b)))
    (if (local.get $s) (then (return (local.get $s))))
    (call $all_gather (local.get $b)))`
	for _, c := range []struct {
		name, wat string
		ref       zero.Schedule
	}{
		{"interleaved", interleavedWAT, zero.Interleaved},
		{"as reduced", asReducedWAT, zero.AsReduced},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := compileSchedule(t, strings.ReplaceAll(c.name, " ", "_"), c.wat, Config{})
			want := zeroTraining{n: 2, stage: 2, schedule: goSchedule(func() zero.Schedule { return c.ref })}.run(t)
			noErrors(t, want.trained)
			got := zeroTraining{n: 2, stage: 2, schedule: wasmSchedule(m, ScheduleOptions{}, nil, nil)}.run(t)
			noErrors(t, got.trained)
			equalRuns(t, got.trained, want.trained, 0)
			equalEvents(t, got, want)
			if len(want.events[0]) < 10 {
				t.Fatalf("too few events: %v", want.events[0])
			}
		})
	}
	for _, c := range []struct{ name, body, want string }{
		{"broadcast", `(func (export "on_bucket_reduced") (param $b i32) (result i32) (drop (call $step (local.get $b))) (call $broadcast (local.get $b)))`,
			"on_bucket_reduced: host call sched_broadcast: ERR_INVALID: broadcast(0): under stage 2 each rank steps a slice of the bucket and the slices are all-gathered"},
		{"all_gather before step", `(func (export "on_bucket_ready") (param $b i32) (result i32) (call $all_gather (local.get $b)))`,
			"on_bucket_ready: host call sched_all_gather: ERR_ORDER: bucket 0 is all-gathered before its step"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := compileSchedule(t, strings.ReplaceAll(c.name, " ", "_"), c.body, Config{})
			res := zeroTraining{n: 2, stage: 2, schedule: wasmSchedule(m, ScheduleOptions{}, nil, nil)}.run(t)
			for r, err := range res.errs {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("rank %d: error %v, want one with %q", r, err, c.want)
				}
			}
		})
	}
}

// TestScheduleInterrupt: Interrupt stops a guest that never returns (the
// job's stop when a rank fails, Ctrl-C) with an error naming the module,
// the event and the export, and an instance made for another group's rank
// refuses the events of this one.
func TestScheduleInterrupt(t *testing.T) {
	m := compileSchedule(t, "forever", `(func (export "on_backward_end") (result i32) (loop $forever (br $forever)) (i32.const 0))`, Config{})
	// The job's stop interrupts every instance, those made after it too
	// (script.Runtime.interruptHooks): here every instance made, again
	// and again from 300 ms on, until the training has returned, so that
	// a rank slow to make its instance (the race detector on a loaded
	// machine) is stopped as well.
	var mu sync.Mutex
	var made []*Schedule
	done := make(chan struct{})
	defer close(done)
	go func() {
		time.Sleep(300 * time.Millisecond)
		for {
			mu.Lock()
			for _, s := range made {
				s.Interrupt()
			}
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	res := zeroTraining{n: 2, steps: 1, schedule: func(rank int, pg dist.ProcessGroup) (zero.Schedule, func(), error) {
		s, err := m.NewSchedule(pg, ScheduleOptions{})
		if err != nil {
			return nil, nil, err
		}
		mu.Lock()
		made = append(made, s)
		mu.Unlock()
		return s, func() { s.Close() }, nil
	}}.run(t)
	for r, err := range res.errs {
		if want := fmt.Sprintf("zero: schedule forever.wasm, backwardEnd, rank %d, iteration 1: on_backward_end: cancelled", r); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: error %v, want %q", r, err, want)
		}
	}

	one, err := dist.NewWorld(1, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	interleaved := compileSchedule(t, "interleaved", interleavedWAT, Config{})
	res = zeroTraining{n: 2, steps: 1, schedule: func(rank int, _ dist.ProcessGroup) (zero.Schedule, func(), error) {
		s, err := interleaved.NewSchedule(one.Group(0), ScheduleOptions{})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}}.run(t)
	if want := "on_bucket_ready: the instance was made for rank 0 of 1, but schedules rank 1 of 2"; res.errs[1] == nil || !strings.Contains(res.errs[1].Error(), want) {
		t.Errorf("rank 1: error %v, want %q", res.errs[1], want)
	}
}
