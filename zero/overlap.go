package zero

import (
	"fmt"
	"slices"
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
	// Strict makes it an error for a schedule to leave a bucket unstepped
	// or unsent when backward ends (the engine still does it, so that the
	// ranks stay in step, and fails the iteration naming the buckets).
	Strict bool
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
	strict    bool
	iteration int // backward passes so far (ScheduleContext.Iteration)
	buckets   []*ddp.Bucket
	trace     func(event string, bucket int, start, end time.Time)

	// One backward pass.
	waits    []func() (*tensor.Tensor, error)
	ready    []bool // its BucketReady came
	reduced  []bool // its reduction was waited for
	stepped  []bool
	sentDone []bool // its broadcasts were issued
	outs     []*tensor.Tensor
	sent     [][]*dist.Work // the broadcasts of each bucket's updated parameters
	errs     []error
	// toTell are the buckets waited for whose BucketReduced has not come
	// yet; sends is the order of the buckets' broadcasts (collectives),
	// compared across ranks at the end of the iteration (orderCheck).
	toTell     []int
	sends      []int64
	orderCheck *orderCheck
	orderErr   error
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
	ov := &overlap{z: z, d: d, inner: hook, sched: s, strict: opts.Strict, buckets: buckets, trace: opts.Trace,
		waits: make([]func() (*tensor.Tensor, error), n), ready: make([]bool, n), reduced: make([]bool, n),
		stepped: make([]bool, n), sentDone: make([]bool, n), outs: make([]*tensor.Tensor, n),
		sent: make([][]*dist.Work, n), errs: make([]error, n)}
	if _, ok := s.(*builtin); !ok && z.pg.Size() > 1 {
		ov.orderCheck = &orderCheck{}
	}
	if a := assigns(s); a != nil {
		if err := ov.assign(a); err != nil {
			z.assignBuckets(buckets, opts.ShardBuckets) // back to the engine's
			return nil, fmt.Errorf("zero: schedule %v, assign, rank %d: %w", s, z.pg.Rank(), err)
		}
	}
	z.ov = ov
	return ov.hook, nil
}

// assign lets the schedule decide the owners (Assigner): its assignment
// is checked, compared across the ranks (every rank makes the hook at the
// same point of its script, so the all-gather is matched) and applied.
func (ov *overlap) assign(a Assigner) error {
	z := ov.z
	infos := make([]BucketInfo, len(ov.buckets))
	for i := range ov.buckets {
		infos[i], _ = ov.schedBucket(i)
	}
	owners, err := a.Assign(infos, z.pg.Size())
	var flat []int64
	if err == nil && owners != nil {
		flat, err = checkAssignment(owners, infos, z.pg.Size())
	}
	// Every rank takes part in the comparison, whatever its own outcome,
	// so that a rank that failed does not leave the others waiting: the
	// first value says whether the rank has an assignment (1), failed (-1)
	// or keeps the engine's (0).
	status := int64(0)
	switch {
	case err != nil:
		status = -1
	case owners != nil:
		status = 1
	}
	n := 1
	for _, b := range infos {
		n += len(b.Params)
	}
	mine := make([]int64, n)
	mine[0] = status
	copy(mine[1:], flat)
	if z.pg.Size() > 1 {
		t := z.rt.FromInt64s(mine).Persist()
		all := z.rt.Empty(tensor.Int64, n*z.pg.Size()).Persist()
		defer t.Release()
		defer all.Release()
		if werr := z.pg.AllGather(all, t).Wait(); werr != nil {
			return fmt.Errorf("comparing the ranks' assignments: %w", werr)
		}
		got, rerr := all.Int64s()
		if rerr != nil {
			return rerr
		}
		if err != nil {
			return err
		}
		for r := range z.pg.Size() {
			if got[r*n] < 0 {
				return fmt.Errorf("rank %d's assignment failed", r)
			}
		}
		if k, r, ok := firstDifference(got, n); ok {
			if k == 0 {
				return fmt.Errorf("rank 0 and rank %d disagree on whether to assign the parameters (every rank must return the same assignment)", r)
			}
			b, p := paramAt(infos, k-1)
			return fmt.Errorf("bucket %d's parameter %s is owned by rank %d on rank 0 but by rank %d on rank %d (every rank must return the same assignment)",
				b, infos[b].Names[p], got[k], got[r*n+k], r)
		}
	}
	if err != nil || owners == nil {
		return err
	}
	for i, b := range ov.buckets {
		for k, p := range b.Params {
			z.owner[p] = owners[i][k]
		}
	}
	z.dropForeignState()
	return nil
}

// checkAssignment checks an Assigner's result against the buckets and
// flattens it.
func checkAssignment(owners [][]int, infos []BucketInfo, world int) ([]int64, error) {
	if len(owners) != len(infos) {
		return nil, fmt.Errorf("%d owner lists for %d buckets (one list per bucket)", len(owners), len(infos))
	}
	var flat []int64
	for i, b := range infos {
		if len(owners[i]) != len(b.Params) {
			return nil, fmt.Errorf("bucket %d has %d parameters, got %d owners", i, len(b.Params), len(owners[i]))
		}
		for k, r := range owners[i] {
			if r < 0 || r >= world {
				return nil, fmt.Errorf("bucket %d's parameter %s: owner %d is not a rank (0 to %d)", i, b.Names[k], r, world-1)
			}
			flat = append(flat, int64(r))
		}
	}
	return flat, nil
}

// paramAt finds the bucket and position of the k-th parameter in bucket
// order.
func paramAt(infos []BucketInfo, k int) (bucket, pos int) {
	for i, b := range infos {
		if k < len(b.Params) {
			return i, k
		}
		k -= len(b.Params)
	}
	return len(infos) - 1, 0
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
		ov.reset()
		ov.iteration++
	}
	ov.waits[i] = ov.inner(b)
	ov.ready[i] = true
	if i == 0 {
		ov.event("iterationBegin", -1, ov.sched.IterationBegin)
	}
	ov.event("bucketReady", i, func(c *ScheduleContext) error { return ov.sched.BucketReady(c, i) })
	if b.IsLast {
		ov.event("backwardEnd", -1, ov.sched.BackwardEnd)
		ov.endIteration()
	}
	return func() (*tensor.Tensor, error) {
		// Every bucket was stepped and sent by the last bucket's hook
		// (unless DDP never called it); this waits for the sends.
		if !ov.stepped[i] {
			ov.step(i)
		}
		if !ov.sentDone[i] {
			ov.broadcast(i)
		}
		if err := waitAll(ov.sent[i], fmt.Sprintf("broadcasting the parameters of bucket %d", i)); err != nil && ov.errs[i] == nil {
			ov.errs[i] = err
		}
		// The order check's error comes first: when the ranks' orders
		// differ, a broadcast's mismatch is its consequence.
		if ov.orderCheck != nil && ov.orderCheck.work != nil {
			ov.orderErr = ov.orderCheck.finish(ov.z, ov.sched, ov.iteration, ov.sends, broadcasts)
		}
		if ov.orderErr != nil {
			return nil, ov.orderErr
		}
		return ov.outs[i], ov.errs[i]
	}
}

// reset starts an iteration.
func (ov *overlap) reset() {
	for _, s := range [][]bool{ov.ready, ov.reduced, ov.stepped, ov.sentDone} {
		clear(s)
	}
	clear(ov.outs)
	clear(ov.errs)
	clear(ov.waits)
	for k := range ov.sent {
		ov.sent[k] = nil
	}
	ov.toTell, ov.sends, ov.orderErr = ov.toTell[:0], ov.sends[:0], nil
}

// event calls one of the schedule's handlers (bucket -1: an event of the
// iteration), then tells it of the buckets whose reductions were waited
// for meanwhile, in that order. A handler's error fails the bucket it
// was about (the last bucket for the iteration's events), naming the
// schedule, the event, the bucket and the rank.
func (ov *overlap) event(name string, bucket int, handler func(*ScheduleContext) error) {
	c := &ScheduleContext{s: ov}
	ov.call(name, bucket, func() error { return handler(c) })
	ov.tell(c)
}

// tell delivers BucketReduced for the buckets waited for, in that order
// (including those the handlers it calls wait for).
func (ov *overlap) tell(c *ScheduleContext) {
	for len(ov.toTell) > 0 {
		k := ov.toTell[0]
		ov.toTell = ov.toTell[1:]
		ov.call("bucketReduced", k, func() error { return ov.sched.BucketReduced(c, k) })
	}
}

func (ov *overlap) call(name string, bucket int, fn func() error) {
	start := time.Now()
	err := fn()
	label := name
	if bucket >= 0 {
		label = fmt.Sprintf("%s(%d)", name, bucket)
	}
	ov.traceSpan(label, bucket, start)
	if err == nil {
		return
	}
	k := bucket
	if k < 0 {
		k = len(ov.buckets) - 1
	}
	ov.fail(k, fmt.Errorf("zero: schedule %v, %s, rank %d, iteration %d: %w", ov.sched, label, ov.z.pg.Rank(), ov.iteration, err))
}

// traceSpan records a schedule event or action on the rank's schedule lane.
func (ov *overlap) traceSpan(name string, bucket int, start time.Time) {
	ov.z.traceSchedule(name, bucket, start)
}

// traceSchedule records a schedule event or action, from start until now,
// on the rank's schedule lane (bucket -1: an event of the iteration).
func (z *Optimizer) traceSchedule(name string, bucket int, start time.Time) {
	tr, rank := z.rt.Trace()
	if tr == nil {
		return
	}
	e := trace.Event{Rank: rank, Lane: trace.Schedule, Name: name, Start: start, End: time.Now()}
	if bucket >= 0 {
		e.Args[0] = trace.Arg{Key: "bucket", Val: int64(bucket)}
	}
	tr.Add(e)
}

// endIteration follows BackwardEnd: the reductions nobody waited for are
// waited for in bucket order, each told to the schedule as it completes;
// then what the schedule left is done, in bucket order (an error under
// Strict, once done, so that every rank's collectives still match), and
// the order check is launched.
func (ov *overlap) endIteration() {
	c := &ScheduleContext{s: ov}
	for k := range ov.buckets {
		if !ov.reduced[k] {
			ov.reduce(k)
			ov.tell(c)
		}
	}
	var left []int
	for k := range ov.buckets {
		if !ov.stepped[k] || !ov.sentDone[k] {
			left = append(left, k)
		}
		if !ov.stepped[k] {
			ov.step(k)
		}
		if !ov.sentDone[k] {
			ov.broadcast(k)
		}
	}
	if ov.strict && len(left) > 0 {
		ov.fail(left[0], fmt.Errorf("zero: schedule %v (strict), rank %d, iteration %d: bucket(s) %v were not stepped and broadcast by the end of backward",
			ov.sched, ov.z.pg.Rank(), ov.iteration, left))
	}
	if ov.orderCheck != nil {
		ov.orderCheck.start(ov.z, ov.sends)
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

// reduce waits for bucket k's reduction and keeps its result; the
// schedule is told after the event in progress.
func (ov *overlap) reduce(k int) {
	if ov.reduced[k] {
		return
	}
	ov.reduced[k] = true
	start := time.Now()
	out, err := ov.waits[k]()
	ov.waits[k] = nil
	ov.traceSpan(fmt.Sprintf("wait(%d)", k), k, start)
	ov.toTell = append(ov.toTell, k)
	if err == nil {
		err = out.Err()
	}
	if err == nil && out.Numel() != ov.buckets[k].Buffer.Numel() {
		err = fmt.Errorf("zero: the comm hook returned %d elements for bucket %d of %d", out.Numel(), k, ov.buckets[k].Buffer.Numel())
	}
	if err != nil {
		ov.fail(k, err)
		return
	}
	ov.outs[k] = out
}

// step waits for bucket k's reduction and updates this rank's parameters
// in it.
func (ov *overlap) step(k int) {
	ov.stepped[k] = true
	ov.reduce(k)
	if ov.errs[k] != nil {
		return
	}
	z := ov.z
	out, b := ov.outs[k], ov.buckets[k]
	me := z.pg.Rank()
	sc := z.rt.OpenScope()
	defer sc.Close()
	start := time.Now()
	grads := map[*tensor.Tensor]*tensor.Tensor{}
	byGroup := make([][]*tensor.Tensor, len(z.Groups))
	var err error
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
	end := time.Now()
	if err != nil {
		ov.fail(k, err)
	}
	if ov.trace != nil {
		ov.trace("update", k, start, end)
	}
	if tr, rank := z.rt.Trace(); tr != nil {
		tr.Add(trace.Event{Rank: rank, Lane: trace.Optimizer, Name: "zero update", Start: start, End: end,
			Args: [2]trace.Arg{{Key: "bucket", Val: int64(k)}}})
		tr.Add(trace.Event{Rank: rank, Lane: trace.Schedule, Name: fmt.Sprintf("step(%d)", k), Start: start, End: end,
			Args: [2]trace.Arg{{Key: "bucket", Val: int64(k)}}})
	}
}

// broadcast sends each of bucket k's parameters from its owner (even
// after a failed step: the other ranks wait for these collectives).
func (ov *overlap) broadcast(k int) {
	ov.sentDone[k] = true
	ov.sends = append(ov.sends, int64(k))
	z := ov.z
	b := ov.buckets[k]
	sending := time.Now()
	// The broadcasts appear on the comm lane, one per parameter, as the
	// communication queue runs them.
	for _, p := range b.Params {
		ov.sent[k] = append(ov.sent[k], z.pg.Broadcast(p, z.owner[p]))
	}
	ov.traceSpan(fmt.Sprintf("broadcast(%d)", k), k, sending)
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

// The schedule's context under stage 1 (ScheduleContext).

func (ov *overlap) schedNumBuckets() int          { return len(ov.buckets) }
func (ov *overlap) schedIteration() int           { return ov.iteration }
func (ov *overlap) schedGroup() dist.ProcessGroup { return ov.z.pg }

func (ov *overlap) schedBucket(i int) (BucketInfo, error) {
	if err := checkBucket(i, len(ov.buckets)); err != nil {
		return BucketInfo{}, err
	}
	b := ov.buckets[i]
	info := BucketInfo{Numel: b.Buffer.Numel(), Params: slices.Clone(b.Params), Names: slices.Clone(b.Names),
		Offsets: slices.Clone(b.Offsets), Owners: make([]int, len(b.Params))}
	for k, p := range b.Params {
		info.Owners[k] = ov.z.owner[p]
	}
	return info, nil
}

func (ov *overlap) schedStage() int { return 1 }

func (ov *overlap) schedState(i int) BucketState {
	return BucketState{Ready: ov.ready[i], Reduced: ov.reduced[i], Stepped: ov.stepped[i], Sent: ov.sentDone[i]}
}

func (ov *overlap) schedWait(i int) error {
	ov.reduce(i)
	return ov.errs[i]
}

func (ov *overlap) schedStep(i int) error {
	ov.step(i)
	return ov.errs[i]
}

func (ov *overlap) schedSend(i int) error {
	ov.broadcast(i)
	return ov.errs[i]
}

// orderCheck compares the order of every rank's sends in one iteration
// (stage 1's broadcasts, stage 2's all-gathers): a schedule whose order
// depends on the rank would otherwise pair one rank's send of a bucket
// with another's of a different bucket, which moves the wrong bytes when
// their sizes (and roots) agree. One all-gather of the order per
// iteration, overlapped with the sends it follows (user schedules only:
// the built-ins agree by construction).
type orderCheck struct {
	mine, all *tensor.Tensor
	work      *dist.Work
}

// sendKind names a stage's sends in the order check's errors.
type sendKind struct{ verb, noun string } // "broadcast the buckets", "broadcast #2"

var (
	broadcasts = sendKind{"broadcast", "broadcast"}
	allGathers = sendKind{"all-gathered", "all-gather"}
)

// start launches the all-gather of this rank's order of sends.
func (oc *orderCheck) start(z *Optimizer, sends []int64) {
	oc.mine = z.rt.FromInt64s(sends).Persist()
	oc.all = z.rt.Empty(tensor.Int64, len(sends)*z.pg.Size()).Persist()
	oc.work = z.pg.AllGather(oc.all, oc.mine)
}

// finish waits for the all-gather and names the first send where two
// ranks differ.
func (oc *orderCheck) finish(z *Optimizer, sched Schedule, iteration int, sends []int64, kind sendKind) error {
	if oc.work == nil {
		return nil
	}
	defer func() {
		oc.mine.Release()
		oc.all.Release()
		oc.work, oc.mine, oc.all = nil, nil, nil
	}()
	if err := oc.work.Wait(); err != nil {
		// A send that did not match (different sizes or roots) fails the
		// queue, this all-gather included: this rank's order is what can
		// be said.
		return fmt.Errorf("zero: schedule %v, iteration %d: a collective failed after rank %d %s the buckets in the order %v "+
			"(when the ranks' orders differ, their %ss do not match: a schedule's choices must not depend on the rank): %w",
			sched, iteration, z.pg.Rank(), kind.verb, sends, kind.noun, err)
	}
	all, err := oc.all.Int64s()
	if err != nil {
		return err
	}
	if a, r, ok := firstDifference(all, len(sends)); ok {
		return fmt.Errorf("zero: schedule %v, iteration %d: the ranks %s the buckets in different orders: "+
			"%s #%d was bucket %d on rank 0 but bucket %d on rank %d (every rank must issue the same collectives in the same order; "+
			"a schedule's choices must not depend on the rank)", sched, iteration, kind.verb, kind.noun, a+1, all[a], all[r*len(sends)+a], r)
	}
	return nil
}

// firstDifference finds, in every rank's n actions one after another,
// the first action a where a rank r differs from rank 0.
func firstDifference(all []int64, n int) (a, r int, ok bool) {
	if n == 0 {
		return 0, 0, false
	}
	for a := range n {
		for r := 1; r < len(all)/n; r++ {
			if all[r*n+a] != all[a] {
				return a, r, true
			}
		}
	}
	return 0, 0, false
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
