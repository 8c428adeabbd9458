package zero

import (
	"fmt"
	"time"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// OverlapOptions tune the overlap hooks.
type OverlapOptions struct {
	// ShardBuckets lets a bucket's parameters be spread across ranks so
	// that every rank updates about total/N elements; without it bucket i
	// belongs wholly to rank i mod N (PyTorch's shard_buckets).
	ShardBuckets bool
	// Trace, when set, is told of every bucket's "update" (this rank's
	// optimizer step on it) and "broadcast" (from launch until its last
	// broadcast completed; called on the communication goroutine), for
	// timelines.
	Trace func(event string, bucket int, start, end time.Time)
}

// overlap runs the ZeRO step inside a DDP comm hook. Unlike PyTorch's, it
// keeps DDP's first bucket plan (ddp.KeepBuckets) so that the parameters
// are assigned before the first backward pass and updated from the first
// iteration, handles any number of parameter groups, and runs the step on
// the rank's own goroutine, so that it works on every backend.
type overlap struct {
	z         *Optimizer
	d         *ddp.DDP
	inner     ddp.CommHook
	sched     Schedule
	iteration int // backward passes so far (ScheduleContext.Iteration)
	buckets   []*ddp.Bucket
	trace     func(event string, bucket int, start, end time.Time)

	// One backward pass.
	waits []func() (*tensor.Tensor, error)
	outs  []*tensor.Tensor
	done  []bool
	sent  [][]*dist.Work // the broadcasts of each bucket's updated parameters
	errs  []error
}

// HookWithZeroStep is schedule A (PyTorch's hook_with_zero_step): every
// bucket is reduced by hook as usual; when the last bucket's hook runs,
// each bucket in turn is waited for, this rank's parameters in it are
// updated and every parameter of it is broadcast from its owner. The
// returned hook must be registered on d; z must have been made with
// OverlapWithDDP over d's parameters. Suits slow networks: the step runs
// once, after all reductions were launched.
func HookWithZeroStep(hook ddp.CommHook, d *ddp.DDP, z *Optimizer, opts OverlapOptions) (ddp.CommHook, error) {
	return HookWithZeroSchedule(hook, d, z, AfterBackward, opts)
}

// HookWithZeroStepInterleaved is schedule B (PyTorch's
// hook_with_zero_step_interleaved): bucket i's update and broadcasts run
// as soon as bucket i+1 has been handed to hook (and the last bucket's
// right after its own), so that reductions, updates and broadcasts
// interleave with the rest of backward. Suits fast networks.
//
// PyTorch chains the step onto the reduction's future, which runs it on
// the communication thread whenever that completes; here it runs on the
// rank's goroutine at a point every rank reaches in the same order, which
// keeps the collectives in the same order on every rank (the in-process
// and MPI backends need that; NCCL is forgiving, Gloo hangs: pytorch#62300).
func HookWithZeroStepInterleaved(hook ddp.CommHook, d *ddp.DDP, z *Optimizer, opts OverlapOptions) (ddp.CommHook, error) {
	return HookWithZeroSchedule(hook, d, z, Interleaved, opts)
}

// HookWithZeroSchedule is the overlap hook with the step schedule s: the
// two above are it with AfterBackward and Interleaved.
func HookWithZeroSchedule(hook ddp.CommHook, d *ddp.DDP, z *Optimizer, s Schedule, opts OverlapOptions) (ddp.CommHook, error) {
	if s == nil {
		return nil, fmt.Errorf("zero: no schedule")
	}
	if !z.opts.OverlapWithDDP {
		return nil, fmt.Errorf("zero: the overlap hooks need a ZeroRedundancyOptimizer made with overlapWithDDP: true")
	}
	if z.ov != nil {
		return nil, fmt.Errorf("zero: this ZeroRedundancyOptimizer already has an overlap hook")
	}
	if hook == nil {
		return nil, fmt.Errorf("zero: the overlap hooks wrap a comm hook; pass ddp.AllReduceHook for plain averaging")
	}
	buckets := d.Buckets()
	inDDP := map[*tensor.Tensor]bool{}
	for _, b := range buckets {
		for i, p := range b.Params {
			if _, ok := z.groupOf[p]; !ok {
				return nil, fmt.Errorf("zero: DDP parameter %s is not in the ZeroRedundancyOptimizer", b.Names[i])
			}
			inDDP[p] = true
		}
	}
	for _, p := range z.Params() {
		if !inDDP[p] {
			return nil, fmt.Errorf("zero: %s is not a parameter of the DDP", paramLabel(p, z.index[p]))
		}
	}
	if err := d.KeepBuckets(); err != nil {
		return nil, err
	}
	buckets = d.Buckets()
	z.assignBuckets(buckets, opts.ShardBuckets)
	n := len(buckets)
	ov := &overlap{z: z, d: d, inner: hook, sched: s, buckets: buckets, trace: opts.Trace,
		waits: make([]func() (*tensor.Tensor, error), n), outs: make([]*tensor.Tensor, n),
		done: make([]bool, n), sent: make([][]*dist.Work, n), errs: make([]error, n)}
	z.ov = ov
	return ov.hook, nil
}

// assignBuckets makes the owners follow DDP's buckets.
func (z *Optimizer) assignBuckets(buckets []*ddp.Bucket, shard bool) {
	n := z.pg.Size()
	clear(z.owner)
	if !shard {
		for i, b := range buckets {
			for _, p := range b.Params {
				z.owner[p] = i % n
			}
		}
		z.dropForeignState()
		return
	}
	// Each bucket's parameters, largest first, go to the least-loaded
	// rank (ties to the lowest), with one running total per rank across
	// the buckets. PyTorch cuts a bucket into contiguous runs, one per
	// rank, because it sends a rank's run as one broadcast; the updates
	// here go one broadcast per parameter, so the runs need not be
	// contiguous and the balance gets better (the tests show it).
	load := make([]int, n)
	for _, b := range buckets {
		z.assignLargestFirst(b.Params, load)
	}
	z.dropForeignState()
}

// hook is the comm hook registered on the DDP.
func (ov *overlap) hook(b *ddp.Bucket) func() (*tensor.Tensor, error) {
	i := b.Index
	if i == 0 {
		clear(ov.done)
		clear(ov.outs)
		clear(ov.errs)
		for k := range ov.sent {
			ov.sent[k] = nil
		}
	}
	ov.waits[i] = ov.inner(b)
	c := &ScheduleContext{ov: ov}
	if i == 0 {
		ov.iteration++
		if err := ov.sched.IterationBegin(c); err != nil {
			ov.fail(i, fmt.Errorf("zero: schedule %v, iterationBegin, rank %d: %w", ov.sched, ov.z.pg.Rank(), err))
		}
	}
	if err := ov.sched.BucketReady(c, i); err != nil {
		ov.fail(i, fmt.Errorf("zero: schedule %v, bucketReady(%d), rank %d: %w", ov.sched, i, ov.z.pg.Rank(), err))
	}
	if b.IsLast {
		if err := ov.sched.BackwardEnd(c); err != nil {
			ov.fail(i, fmt.Errorf("zero: schedule %v, backwardEnd, rank %d: %w", ov.sched, ov.z.pg.Rank(), err))
		}
		// What the schedule left is stepped now, in order, so that
		// every bucket is stepped once in every iteration.
		for k := range ov.buckets {
			ov.process(k)
		}
	}
	return func() (*tensor.Tensor, error) {
		ov.process(i)
		if err := waitAll(ov.sent[i], fmt.Sprintf("broadcasting the parameters of bucket %d", i)); err != nil && ov.errs[i] == nil {
			ov.errs[i] = err
		}
		return ov.outs[i], ov.errs[i]
	}
}

// fail records a schedule's error as bucket k's (the first one stays):
// DDP's Finalize, which step() and the next use of the gradients wait
// for, returns it. There is no fallback: updates cannot be undone.
func (ov *overlap) fail(k int, err error) {
	if ov.errs[k] == nil {
		ov.errs[k] = err
	}
}

// process waits for bucket k's reduction, updates this rank's parameters
// in it and broadcasts each of its parameters from its owner.
func (ov *overlap) process(k int) {
	if ov.done[k] {
		return
	}
	ov.done[k] = true
	z := ov.z
	out, err := ov.waits[k]()
	ov.waits[k] = nil
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		ov.errs[k] = err
		return
	}
	ov.outs[k] = out
	b := ov.buckets[k]
	if out.Numel() != b.Buffer.Numel() {
		ov.errs[k] = fmt.Errorf("zero: the comm hook returned %d elements for bucket %d of %d", out.Numel(), k, b.Buffer.Numel())
		return
	}
	me := z.pg.Rank()
	sc := z.rt.OpenScope()
	defer sc.Close()
	start := time.Now()
	grads := map[*tensor.Tensor]*tensor.Tensor{}
	byGroup := make([][]*tensor.Tensor, len(z.Groups))
	z.rt.NoGrad(func() {
		flat := out.View(out.Numel())
		for pos, p := range b.Params {
			if z.owner[p] != me {
				continue
			}
			grads[p] = flat.Narrow(0, b.Offsets[pos], p.Numel()).View(p.Shape()...)
			gi := z.groupOf[p]
			byGroup[gi] = append(byGroup[gi], p)
		}
		for gi, params := range byGroup {
			if err = z.update(gi, params, func(p *tensor.Tensor) *tensor.Tensor { return grads[p] }); err != nil {
				return
			}
		}
	})
	if err != nil {
		ov.errs[k] = err
		return
	}
	sending := time.Now()
	if ov.trace != nil {
		ov.trace("update", k, start, sending)
	}
	if tr, rank := z.rt.Trace(); tr != nil {
		// The broadcasts that follow appear on the comm lane, one per
		// parameter, as the communication queue runs them.
		tr.Add(trace.Event{Rank: rank, Lane: trace.Optimizer, Name: "zero update", Start: start, End: sending,
			Args: [2]trace.Arg{{Key: "bucket", Val: int64(k)}}})
	}
	for _, p := range b.Params {
		ov.sent[k] = append(ov.sent[k], z.pg.Broadcast(p, z.owner[p]))
	}
	if ov.trace != nil && len(ov.sent[k]) > 0 {
		last := ov.sent[k][len(ov.sent[k])-1]
		ov.sent[k][len(ov.sent[k])-1] = last.Then(func(err error) error {
			ov.trace("broadcast", k, sending, time.Now())
			return err
		})
	}
	// Whoever uses a parameter next on this rank — the next forward, or a
	// script that reads, prints, saves or evaluates the model right after
	// backward without a step — waits for its broadcast, so that it sees
	// the updated values on every rank whatever the timing. (Reading a
	// gradient already waits for every bucket: DDP's pending sync.)
	for j, p := range b.Params {
		w := ov.sent[k][j]
		p.SetInFlight(func() error {
			if err := w.Wait(); err != nil {
				return fmt.Errorf("zero: broadcasting the updated %s: %w", paramLabel(p, z.index[p]), err)
			}
			return nil
		})
	}
}

// finish is Step under overlap: DDP's Finalize waits for every bucket's
// hook, that is for every update and broadcast of this iteration, and
// returns the first bucket's error.
func (ov *overlap) finish() error { return ov.d.Finalize() }

// Join is DDP's uneven-inputs support with this optimizer: fn is the
// rank's training loop; once it returns, the rank shadows the others'
// iterations, gradient reductions and ZeRO steps alike, so that the
// parameters it owns keep being updated and sent (see ddp.DDP.Join).
func (z *Optimizer) Join(d *ddp.DDP, fn func() error) error {
	return z.JoinWith(d, fn, ddp.JoinOptions{})
}

// JoinWith is Join with PyTorch's Join options.
func (z *Optimizer) JoinWith(d *ddp.DDP, fn func() error, opts ddp.JoinOptions) error {
	if z.ov != nil {
		return fmt.Errorf("zero: join does not support the overlap hooks (DDP's join needs the default all-reduce hook)")
	}
	d.SetJoinStep(z.Step)
	defer d.SetJoinStep(nil)
	return d.JoinWith(fn, opts)
}
