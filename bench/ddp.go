package bench

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/zero"
)

// DDPResult is the line of the data-parallel workloads, in torch_cpu.py's
// form for ddp2.
type DDPResult struct {
	Workload     string  `json:"workload"`
	World        int     `json:"world"`
	Threads      int     `json:"threads"` // the process's kernel threads, shared by the ranks
	StepMsMedian float64 `json:"step_ms_median"`
	StepMsMin    float64 `json:"step_ms_min"`
	SamplesPerS  float64 `json:"samples_per_s"`
	Optimizer    string  `json:"optimizer"`
	Net          string  `json:"net,omitempty"`
	// Timeline is rank 0's last timed step, in milliseconds from its start.
	Timeline []Event `json:"timeline,omitempty"`
}

// Event is one interval of a step's timeline.
type Event struct {
	What    string  `json:"what"`
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
}

// DDPConfig is one data-parallel run of the mlp model.
type DDPConfig struct {
	Workload string
	World    int
	Batch    int // per rank
	// Variant is the optimizer: "zero" (ZeroRedundancyOptimizer(AdamW),
	// greedy partition, step after backward), "replicated" (AdamW on
	// every rank), "flat" (the flat partition with parameters as bucket
	// view), "stage2" (no DDP; gradients reduce-scattered), "overlap-a" or
	// "overlap-b" (the step inside DDP's backward, schedule A or B).
	Variant  string
	Net      string // dist.ParseNetModel's form; "" is the bare in-process backend
	Timeline bool
}

// RunDDP runs c on in-process ranks and times rank 0's steps.
func RunDDP(c DDPConfig) (DDPResult, error) {
	res, err := ddpResult(c)
	if err != nil {
		return res, err
	}
	opts := dist.Options{}
	if c.Net != "" {
		var err error
		if opts.Net, err = dist.ParseNetModel(c.Net); err != nil {
			return res, err
		}
	}
	w, err := dist.NewWorld(c.World, opts)
	if err != nil {
		return res, err
	}
	defer w.Close()
	defer blas.AddCallers(c.World - 1)() // the ranks multiply at the same time
	errs := make([]error, c.World)
	var wg sync.WaitGroup
	for rank := range c.World {
		wg.Go(func() {
			if err := runDDPRank(c, w.Group(rank), &res); err != nil {
				errs[rank] = err
				w.Abort(err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	res.SamplesPerS = round1(float64(c.World*c.Batch) / res.StepMsMedian * 1e3)
	return res, nil
}

// ddpResult starts c's result line.
func ddpResult(c DDPConfig) (DDPResult, error) {
	res := DDPResult{Workload: c.Workload, World: c.World, Threads: parallel.Threads(), Net: c.Net}
	switch c.Variant {
	case "zero":
		res.Optimizer = "ZeroRedundancyOptimizer(AdamW)"
	case "replicated":
		res.Optimizer = "AdamW (replicated)"
	case "flat":
		res.Optimizer = "ZeroRedundancyOptimizer(AdamW), flat partition, parameters as bucket view"
	case "stage2":
		res.Optimizer = "ZeroRedundancyOptimizer(AdamW), stage 2 (no DDP)"
	case "overlap-a", "overlap-b":
		res.Optimizer = "ZeroRedundancyOptimizer(AdamW), step overlapped with backward, schedule " + map[string]string{"overlap-a": "A", "overlap-b": "B"}[c.Variant]
	default:
		return res, fmt.Errorf("bench: unknown variant %q", c.Variant)
	}
	return res, nil
}

// timeline collects one step's events (from the rank's goroutine and the
// communication goroutine).
type timeline struct {
	mu     sync.Mutex
	t0     time.Time
	events []Event
}

func (tl *timeline) add(what string, start, end time.Time) {
	if tl == nil {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	ms := func(t time.Time) float64 { return float64(t.Sub(tl.t0).Microseconds()) / 1e3 }
	tl.events = append(tl.events, Event{what, ms(start), ms(end)})
}

func (tl *timeline) reset() {
	tl.mu.Lock()
	tl.t0, tl.events = time.Now(), nil
	tl.mu.Unlock()
}

// RunDDPRank runs c's rank pg.Rank() of a job of several processes (an MPI
// job: `mpirun -np 2 zeroeng bench ddp2`) and returns rank 0's timing.
func RunDDPRank(c DDPConfig, pg dist.ProcessGroup) (DDPResult, error) {
	res, err := ddpResult(c)
	if err != nil {
		return res, err
	}
	res.World = pg.Size()
	if err := runDDPRank(c, pg, &res); err != nil {
		return res, err
	}
	res.SamplesPerS = round1(float64(res.World*c.Batch) / res.StepMsMedian * 1e3)
	return res, nil
}

func runDDPRank(c DDPConfig, pg dist.ProcessGroup, res *DDPResult) error {
	rank := pg.Rank()
	job, err := newMLPOn(tensor.NewRuntime(cpu.New(cpu.Options{Index: rank}), uint64(rank)), c.Batch)
	if err != nil {
		return err
	}
	var tl *timeline
	if c.Timeline && rank == 0 {
		tl = &timeline{}
	}
	cfg := optim.DefaultAdamW()
	cfg.LR = 1e-4
	params := job.Model.Parameters()
	var d *ddp.DDP
	if c.Variant != "stage2" {
		var named []ddp.Param
		for _, p := range job.Model.NamedParameters() {
			named = append(named, ddp.Param{Name: p.Name, Tensor: p.Tensor})
		}
		if d, err = ddp.New(pg, named, ddp.Options{}); err != nil {
			return err
		}
		defer d.Close()
	}
	var z *zero.Optimizer
	switch c.Variant {
	case "zero":
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{})
	case "flat":
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{Partition: "flat", ParametersAsBucketView: true})
	case "stage2":
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{Stage: 2})
	case "overlap-a", "overlap-b":
		z, err = zero.New(pg, optim.AdamW, params, cfg.Group(), zero.Options{OverlapWithDDP: true})
		if err != nil {
			return err
		}
		wrap := zero.HookWithZeroStep
		if c.Variant == "overlap-b" {
			wrap = zero.HookWithZeroStepInterleaved
		}
		var hook ddp.CommHook
		hook, err = wrap(tracedAllReduce(pg, tl), d, z, zero.OverlapOptions{ShardBuckets: true, Trace: func(ev string, b int, s, e time.Time) {
			tl.add(fmt.Sprintf("%s %d", ev, b), s, e)
		}})
		if err == nil {
			err = d.RegisterCommHook(hook)
		}
	}
	if err != nil {
		return err
	}
	if z != nil {
		job.Opt = z
		defer z.Close()
	}
	if d != nil && tl != nil && c.Variant != "overlap-a" && c.Variant != "overlap-b" {
		if err := d.RegisterCommHook(tracedAllReduce(pg, tl)); err != nil {
			return err
		}
	}
	step := job.Step
	if tl != nil {
		step = func() error { return tracedStep(job, tl) }
	}
	median, minimum, err := Timed(step)
	if err != nil {
		return err
	}
	if rank == 0 {
		res.StepMsMedian, res.StepMsMin = median, minimum
		if tl != nil {
			res.Timeline = tl.events
			slices.SortStableFunc(res.Timeline, func(a, b Event) int { return cmp.Compare(a.StartMs, b.StartMs) })
		}
	}
	return nil
}

// tracedAllReduce averages each bucket as DDP does without a hook (times
// 1/world, summed) with its all-reduce recorded (from launch to
// completion, on the communication goroutine).
func tracedAllReduce(pg dist.ProcessGroup, tl *timeline) ddp.CommHook {
	if tl == nil {
		return ddp.AllReduceHook(pg)
	}
	return func(b *ddp.Bucket) func() (*tensor.Tensor, error) {
		if err := b.Buffer.MulScalarInPlace(1 / float64(pg.Size())); err != nil {
			return func() (*tensor.Tensor, error) { return nil, err }
		}
		start := time.Now()
		w := pg.AllReduce(b.Buffer, dist.Sum).Then(func(err error) error {
			tl.add(fmt.Sprintf("allreduce %d", b.Index), start, time.Now())
			return err
		})
		return func() (*tensor.Tensor, error) { return b.Buffer, w.Wait() }
	}
}

// tracedStep is MLP.Step with forward, backward and the optimizer step
// recorded.
func tracedStep(job *MLP, tl *timeline) error {
	tl.reset()
	sc := job.RT.OpenScope()
	defer sc.Close()
	if err := job.Opt.ZeroGrad(false); err != nil {
		return err
	}
	t := time.Now()
	loss := tensor.MSELoss(job.Model.Forward(job.X), job.Y, tensor.ReduceMean)
	if err := loss.Err(); err != nil {
		return err
	}
	tl.add("forward", t, time.Now())
	t = time.Now()
	if err := loss.Backward(); err != nil {
		return err
	}
	tl.add("backward", t, time.Now())
	t = time.Now()
	err := job.Opt.Step()
	tl.add("step (after backward)", t, time.Now())
	return err
}
