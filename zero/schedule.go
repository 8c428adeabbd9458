package zero

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// Schedule is a ZeRO step schedule: it is told of one iteration's events
// and decides when this rank waits for each bucket's reduction, steps its
// share of the bucket and sends the updated parameters back. It runs
// under stage 1 inside a DDP comm hook (HookWithZeroSchedule: DDP's
// buckets, all-reduced; each parameter stepped by its owner and
// broadcast) and under stage 2 inside the optimizer's own gradient
// reduction (Options.Schedule: the flat partition's buckets,
// reduce-scattered; each rank steps its slice and the slices are
// all-gathered). The engine keeps it correct: a step waits for the
// bucket's reduction (it never reads a partial gradient), each bucket is
// stepped and sent once per iteration, a send follows its step, and what
// the schedule left when backward ends is done then, in bucket order (or
// is an error, with OverlapOptions.Strict or Options.StrictSchedule).
// Every rank must issue the sends, which are collectives, in the same
// order: the engine compares the ranks' orders at the end of every
// iteration.
//
// The events come on the rank's goroutine, one at a time: a schedule's
// actions never run concurrently with another of its events.
type Schedule interface {
	// IterationBegin: the iteration's first bucket is ready (stage 1:
	// before its BucketReady; stage 2: before its reduce-scatter is
	// launched).
	IterationBegin(c *ScheduleContext) error
	// BucketReady: bucket i's gradients are ready and were handed to the
	// comm hook (stage 1, in DDP's order) or their reduce-scatter was
	// launched (stage 2, in bucket order), while backward goes on.
	BucketReady(c *ScheduleContext, i int) error
	// BucketReduced: bucket i's reduction has completed and the engine
	// has its result. It comes after the event in which the schedule
	// waited for the bucket (Wait, Step); under stage 2, also right after
	// the bound on the reduce-scatters in flight waited for it (when
	// bucket i+2 is launched); for the buckets nobody waited for, after
	// BackwardEnd, in bucket order, as each completes.
	BucketReduced(c *ScheduleContext, i int) error
	// BackwardEnd: the last bucket was handed to the comm hook (stage 1)
	// or its reduce-scatter was launched (stage 2).
	BackwardEnd(c *ScheduleContext) error
}

// Assigner is a Schedule that decides which rank steps and broadcasts
// each parameter under stage 1 (HookWithZeroSchedule calls it once, after
// the engine's own assignment, which it gets in BucketInfo.Owners): the
// result holds, for every bucket, one owner rank per parameter, in the
// bucket's order; nil keeps the engine's. Every rank must return the same
// assignment (checked: one all-gather when the hook is made). Under stage
// 2 every rank steps a slice of every bucket, and an assignment is an
// error.
type Assigner interface {
	Assign(buckets []BucketInfo, worldSize int) ([][]int, error)
}

// assigns tells whether s decides the owners (an Assigner that is not a
// ScheduleFuncs without OnAssign).
func assigns(s Schedule) Assigner {
	switch s := s.(type) {
	case ScheduleFuncs:
		if s.OnAssign == nil {
			return nil
		}
	case *builtin:
		return nil
	}
	a, _ := s.(Assigner)
	return a
}

// ScheduleFuncs makes a Schedule of functions; a nil one does nothing.
type ScheduleFuncs struct {
	Name             string // in errors and traces
	OnAssign         func(buckets []BucketInfo, worldSize int) ([][]int, error)
	OnIterationBegin func(c *ScheduleContext) error
	OnBucketReady    func(c *ScheduleContext, i int) error
	OnBucketReduced  func(c *ScheduleContext, i int) error
	OnBackwardEnd    func(c *ScheduleContext) error
}

func (s ScheduleFuncs) Assign(buckets []BucketInfo, worldSize int) ([][]int, error) {
	if s.OnAssign == nil {
		return nil, nil
	}
	return s.OnAssign(buckets, worldSize)
}

func (s ScheduleFuncs) IterationBegin(c *ScheduleContext) error {
	if s.OnIterationBegin == nil {
		return nil
	}
	return s.OnIterationBegin(c)
}

func (s ScheduleFuncs) BucketReady(c *ScheduleContext, i int) error {
	if s.OnBucketReady == nil {
		return nil
	}
	return s.OnBucketReady(c, i)
}

func (s ScheduleFuncs) BucketReduced(c *ScheduleContext, i int) error {
	if s.OnBucketReduced == nil {
		return nil
	}
	return s.OnBucketReduced(c, i)
}

func (s ScheduleFuncs) BackwardEnd(c *ScheduleContext) error {
	if s.OnBackwardEnd == nil {
		return nil
	}
	return s.OnBackwardEnd(c)
}

func (s ScheduleFuncs) String() string { return s.Name }

// builtin marks the engine's own schedules: their orders are the same on
// every rank by construction, so no iteration pays for the check. They
// are pointers, so that a Schedule can be compared with them.
type builtin struct{ ScheduleFuncs }

// The built-in schedules: PyTorch's two, and AsReduced below.
var (
	// AfterBackward is schedule A (hook_with_zero_step): every bucket is
	// stepped, in order, once backward has handed the last one to the
	// comm hook (stage 2: launched the last one's reduce-scatter).
	// Suits slow networks: the step runs after all the reductions were
	// launched.
	AfterBackward Schedule = &builtin{ScheduleFuncs{Name: "afterBackward", OnBackwardEnd: func(c *ScheduleContext) error {
		for k := range c.NumBuckets() {
			if err := c.StepAndBroadcast(k); err != nil {
				return err
			}
		}
		return nil
	}}}
	// Interleaved is schedule B (hook_with_zero_step_interleaved): bucket
	// i is stepped as soon as bucket i+1 is ready, the last right after
	// its own, so that reductions, steps and broadcasts interleave with
	// the rest of backward. Suits fast networks.
	Interleaved Schedule = &builtin{ScheduleFuncs{Name: "interleaved",
		OnBucketReady: func(c *ScheduleContext, i int) error {
			if i > 0 {
				return c.StepAndBroadcast(i - 1)
			}
			return nil
		},
		OnBackwardEnd: func(c *ScheduleContext) error { return c.StepAndBroadcast(c.NumBuckets() - 1) },
	}}
)

// AsReduced steps and sends each bucket as soon as its reduction was
// waited for: under stage 2 each rank's slice of bucket i is stepped and
// all-gathered right after the in-flight bound (or a wait) retired its
// reduce-scatter, while the rest of backward goes on (DeepSpeed's stage 2
// steps only after backward); the buckets nobody waited for follow at the
// end of backward, in bucket order. Under stage 1 (HookWithZeroSchedule)
// the reductions are waited for after backward ends, so it steps and
// broadcasts each bucket as its reduction completes, in bucket order.
var AsReduced Schedule = &builtin{ScheduleFuncs{Name: "asReduced",
	OnBucketReduced: func(c *ScheduleContext, i int) error { return c.StepAndBroadcast(i) },
}}

// ScheduleContext is what a schedule acts through during one iteration:
// under stage 1 (HookWithZeroSchedule) over DDP's buckets, each parameter
// stepped by its owner and broadcast; under stage 2 (Options.Schedule)
// over the flat partition's buckets, each rank stepping its slice and the
// slices all-gathered. Its methods are the same for both.
type ScheduleContext struct{ s scheduleStage }

// scheduleStage is one stage's side of a ScheduleContext: overlap (stage
// 1) and flatSchedule (stage 2) implement it.
type scheduleStage interface {
	schedNumBuckets() int
	schedIteration() int
	schedGroup() dist.ProcessGroup
	schedBucket(i int) (BucketInfo, error)
	schedStage() int
	// schedState is bucket i's progress in this iteration.
	schedState(i int) BucketState
	// The work of the actions, once ScheduleContext has checked that the
	// schedule may do it: wait for bucket i's reduction, step this rank's
	// part of it, send it (broadcast under stage 1, all-gather under 2).
	schedWait(i int) error
	schedStep(i int) error
	schedSend(i int) error
}

// BucketState is how far one bucket is in the iteration: its BucketReady
// came, its reduction was waited for, this rank stepped it, it was sent.
type BucketState struct {
	Ready, Reduced, Stepped, Sent bool
}

// ErrOutOfOrder is what an action the rules refuse wraps (a bucket acted
// on before its BucketReady, stepped or sent twice, sent before its
// step), and ErrOtherStage what the other stage's send wraps: nothing was
// done. Any other error of an action is the failure of its work.
var (
	ErrOutOfOrder = errors.New("zero: a schedule action out of order")
	ErrOtherStage = errors.New("zero: the other stage's send")
)

// actionError is a refused action: its message, and the kind it wraps.
type actionError struct {
	kind error
	msg  string
}

func (e *actionError) Error() string { return e.msg }
func (e *actionError) Unwrap() error { return e.kind }

func refused(kind error, format string, args ...any) error {
	return &actionError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// BucketInfo describes one bucket of a schedule's iteration
// (ScheduleContext.Bucket). The slices are copies: changing them changes
// nothing in the engine.
type BucketInfo struct {
	// Numel is the bucket's size in elements: DDP's bucket buffer under
	// stage 1; the flat bucket, padded to a multiple of the world size,
	// under stage 2.
	Numel int
	// Params are the bucket's parameters in its order, Names their names
	// (under stage 2 a parameter without a name is named by its index in
	// the optimizer's groups), Offsets where each starts in the bucket,
	// in elements.
	Params  []*tensor.Tensor
	Names   []string
	Offsets []int
	// Owners is, for each parameter, the rank that steps and broadcasts
	// it under stage 1; -1 under stage 2, where every rank steps its slice
	// of the bucket (see SliceStart).
	Owners []int
	// SliceStart and SliceEnd bound, under stage 2, this rank's slice of
	// the bucket (elements [SliceStart, SliceEnd), Numel/WorldSize of
	// them): the part of its parameters this rank steps and all-gathers.
	// Both are 0 under stage 1.
	SliceStart, SliceEnd int
}

// NumBuckets is the number of buckets: DDP's under stage 1, the flat
// partition's under stage 2.
func (c *ScheduleContext) NumBuckets() int { return c.s.schedNumBuckets() }

// Iteration counts the backward passes the schedule has run in, from 1
// (under stage 2, the passes that reduce gradients: not those that
// accumulate them under SetRequireSync(false)).
func (c *ScheduleContext) Iteration() int { return c.s.schedIteration() }

// Stage is the ZeRO stage the schedule runs under: 1 (HookWithZeroSchedule,
// DDP's buckets, Broadcast) or 2 (Options.Schedule, the flat partition's
// buckets, AllGather).
func (c *ScheduleContext) Stage() int { return c.s.schedStage() }

// Rank and WorldSize are the process group's.
func (c *ScheduleContext) Rank() int      { return c.s.schedGroup().Rank() }
func (c *ScheduleContext) WorldSize() int { return c.s.schedGroup().Size() }

// Bucket describes bucket i: its size, parameters, their names, offsets
// and owners, and under stage 2 this rank's slice (BucketInfo).
func (c *ScheduleContext) Bucket(i int) (BucketInfo, error) { return c.s.schedBucket(i) }

// Owners is the rank that steps and broadcasts each of bucket i's
// parameters, in the bucket's order (BucketInfo.Owners: -1 for each under
// stage 2, where every rank steps a slice of the bucket).
func (c *ScheduleContext) Owners(i int) ([]int, error) {
	b, err := c.s.schedBucket(i)
	if err != nil {
		return nil, err
	}
	return b.Owners, nil
}

// State is bucket i's progress in this iteration.
func (c *ScheduleContext) State(i int) (BucketState, error) {
	if err := checkBucket(i, c.s.schedNumBuckets()); err != nil {
		return BucketState{}, err
	}
	return c.s.schedState(i), nil
}

// Reduced tells whether bucket i's reduction (stage 2: reduce-scatter)
// was waited for in this iteration.
func (c *ScheduleContext) Reduced(i int) bool {
	st, err := c.State(i)
	return err == nil && st.Reduced
}

// ready checks that bucket i exists and its BucketReady came.
func (c *ScheduleContext) ready(i int) (BucketState, error) {
	st, err := c.State(i)
	if err == nil && !st.Ready {
		later := "its gradients come later in backward"
		if c.Stage() == 2 {
			later = "its reduce-scatter is launched later in backward"
		}
		err = refused(ErrOutOfOrder, "bucket %d is not ready yet: %s (act on a bucket after its bucketReady)", i, later)
	}
	return st, err
}

// Wait waits for bucket i's reduction (at once if it was waited for
// already). BucketReduced(i) follows the event that waited.
func (c *ScheduleContext) Wait(i int) error {
	if _, err := c.ready(i); err != nil {
		return err
	}
	return c.s.schedWait(i)
}

// Step waits for bucket i's reduction and runs this rank's optimizer step
// over its part of the bucket: under stage 1 its parameters in it, under
// stage 2 its slice. The result is sent by Broadcast (stage 1) or
// AllGather (stage 2). Each bucket is stepped once an iteration.
func (c *ScheduleContext) Step(i int) error {
	st, err := c.ready(i)
	if err != nil {
		return err
	}
	if st.Stepped {
		return refused(ErrOutOfOrder, "bucket %d was stepped already in this iteration (each bucket is stepped once)", i)
	}
	return c.s.schedStep(i)
}

// Broadcast is stage 1's send: it sends bucket i's updated parameters
// from their owners to every rank (a collective: every rank must
// broadcast the buckets in the same order). The bucket must have been
// stepped; each bucket is sent once an iteration. Under stage 2 the
// slices are all-gathered instead, and it is an error that says so.
func (c *ScheduleContext) Broadcast(i int) error {
	if c.Stage() != 1 {
		return refused(ErrOtherStage, "broadcast(%d): under stage 2 each rank steps a slice of the bucket and the slices are all-gathered: use allGather(%d) (or stepAndBroadcast(%d), which all-gathers under stage 2)", i, i, i)
	}
	return c.send(i)
}

// AllGather is stage 2's send: it launches the all-gather of bucket i's
// updated slices (a collective: every rank must all-gather the buckets in
// the same order); whoever uses one of the bucket's parameters next waits
// for it. The bucket must have been stepped; each bucket is sent once an
// iteration. Under stage 1 each parameter is broadcast from its owner,
// and it is an error that says so.
func (c *ScheduleContext) AllGather(i int) error {
	if c.Stage() != 2 {
		return refused(ErrOtherStage, "allGather(%d): under stage 1 each parameter is broadcast from its owner: use broadcast(%d)", i, i)
	}
	return c.send(i)
}

// send is the stage's send of bucket i, after its step, once.
func (c *ScheduleContext) send(i int) error {
	st, err := c.ready(i)
	if err != nil {
		return err
	}
	sent := "broadcast"
	if c.Stage() == 2 {
		sent = "all-gathered"
	}
	switch {
	case st.Sent:
		return refused(ErrOutOfOrder, "bucket %d was %s already in this iteration (each bucket is sent once)", i, sent)
	case !st.Stepped:
		return refused(ErrOutOfOrder, "bucket %d is %s before its step: step(%d) first, or stepAndBroadcast(%d)", i, sent, i, i)
	}
	return c.s.schedSend(i)
}

// StepAndBroadcast is Step, then the stage's send: Broadcast under stage
// 1, AllGather under stage 2.
func (c *ScheduleContext) StepAndBroadcast(i int) error {
	if err := c.Step(i); err != nil {
		return err
	}
	return c.send(i)
}

// checkBucket checks that i is one of n buckets.
func checkBucket(i, n int) error {
	if i < 0 || i >= n {
		return fmt.Errorf("bucket %d: there are %d buckets (0 to %d)", i, n, n-1)
	}
	return nil
}

// StepsInBackward reports whether z's step runs inside backward, in an
// overlap hook (stage 1) or by a stage-2 schedule (Options.Schedule), and
// with which schedule: then nothing can see the whole gradient before the
// step (clipping by the global norm, a GradScaler's overflow check, a
// step closure), and the scripts refuse those.
func (z *Optimizer) StepsInBackward() (Schedule, bool) {
	switch {
	case z.ov != nil:
		return z.ov.sched, true
	case z.flat != nil && z.flat.sched != nil:
		return z.flat.sched.sched, true
	}
	return nil, false
}

// Has tells whether p is one of z's parameters.
func (z *Optimizer) Has(p *tensor.Tensor) bool {
	_, ok := z.groupOf[p]
	return ok
}

// flatSchedule runs a Schedule under stage 2 (Options.Schedule). The flat
// layout reduce-scatters the buckets during backward as it always does,
// launched in bucket order as buckets fill, at most maxScattering in
// flight; it tells the schedule of each launch and of each reduce-scatter
// the bound on those in flight waits for, and the schedule steps this
// rank's slices and all-gathers them while backward goes on. Step then
// only waits for the all-gathers.
//
// The events come on the rank's goroutine, never inside another handler:
//   - IterationBegin, just before bucket 0's reduce-scatter is launched;
//   - BucketReady(i), right after bucket i's reduce-scatter is launched;
//   - BucketReduced(i), after the event in which the schedule waited for
//     bucket i (Wait, Step), or right after the bound waited for it (once
//     BucketReady came for bucket i+maxScattering);
//   - BackwardEnd, once the last bucket was launched (after its
//     BucketReady and the bound); the end of the iteration follows (end).
//
// The buckets are launched from the gradient-ready hooks, so all of this
// happens inside backward when every parameter gets a gradient. When some
// do not, the buckets from the first of them on are launched in Step
// (their missing gradients reduced as zeros), and their events, the end
// of the iteration included, come there, before Step returns.
//
// The collectives come in the same order on every rank: the launches and
// the bound's waits come at the same points of every rank's backward, and
// so do the events and what a schedule whose choices do not depend on the
// rank does in them; a user schedule's order of all-gathers is compared
// across the ranks at the end of each iteration (orderCheck), as under
// stage 1.
//
// Memory: an all-gather into the parameters' own memory (the parameters
// view the bucket, ParametersAsBucketView, or the bucket is one parameter
// without padding) needs none; otherwise it gathers into a scratch buffer
// of the bucket's size, and at most one such buffer exists at a time: the
// previous scratch gather is finished (waited for, its parameters copied
// out, its buffer freed) before the next one is made, as in the step
// after backward. The parameters of a bucket whose all-gather is in
// flight are marked so (tensor.SetInFlight): their next use (the next
// forward, or a script reading them right after backward) waits for it.
type flatSchedule struct {
	f          *flatLayout
	sched      Schedule
	strict     bool
	iteration  int // the passes it ran in (ScheduleContext.Iteration)
	inEvent    int // handlers running (Step refuses to run inside one)
	ctx        *ScheduleContext
	orderCheck *orderCheck // user schedules on more than one rank

	// One backward pass, sized to the buckets at IterationBegin.
	began   bool   // IterationBegin came, finish did not yet
	ready   []bool // its reduce-scatter was launched (BucketReady)
	reduced []bool // its reduce-scatter was waited for
	stepped []bool
	sent    []bool // its all-gather was launched
	gathers []*gathering
	toTell  []int   // the buckets waited for whose BucketReduced has not come yet
	sends   []int64 // the order of the all-gathers (orderCheck)
	err     error   // the pass's first error: a handler's, a step's, an all-gather's
}

// newFlatSchedule attaches s to stage 2's layout f.
func newFlatSchedule(f *flatLayout, s Schedule, strict bool) *flatSchedule {
	fs := &flatSchedule{f: f, sched: s, strict: strict}
	fs.ctx = &ScheduleContext{s: fs}
	if _, ok := s.(*builtin); !ok && f.z.pg.Size() > 1 {
		fs.orderCheck = &orderCheck{}
	}
	return fs
}

// begin starts an iteration, just before bucket 0's reduce-scatter is
// launched.
func (s *flatSchedule) begin() {
	n := len(s.f.buckets)
	for _, v := range []*[]bool{&s.ready, &s.reduced, &s.stepped, &s.sent} {
		*v = slices.Grow((*v)[:0], n)[:n]
		clear(*v)
	}
	s.gathers = slices.Grow(s.gathers[:0], n)[:n]
	clear(s.gathers)
	s.toTell, s.sends, s.err = s.toTell[:0], s.sends[:0], nil
	s.began = true
	s.iteration++
	s.event("iterationBegin", -1, s.sched.IterationBegin)
}

// launched follows the launch of bucket i's reduce-scatter.
func (s *flatSchedule) launched(i int) {
	s.ready[i] = true
	s.event("bucketReady", i, func(c *ScheduleContext) error { return s.sched.BucketReady(c, i) })
}

// end follows the launch of the last bucket: BackwardEnd; then the
// reduce-scatters nobody waited for are waited for in bucket order, each
// told to the schedule as it completes; then what the schedule left is
// stepped and all-gathered, in bucket order (an error under Strict, once
// done, so that every rank's collectives still match), and the order
// check is launched.
func (s *flatSchedule) end() {
	s.event("backwardEnd", -1, s.sched.BackwardEnd)
	for k := range s.ready {
		if !s.reduced[k] {
			s.wait(k)
			s.tell()
		}
	}
	var left []int
	for k := range s.ready {
		if !s.stepped[k] || !s.sent[k] {
			left = append(left, k)
		}
		if !s.stepped[k] {
			_ = s.step(k) // its error is the pass's
		}
		if !s.sent[k] {
			_ = s.gather(k)
		}
	}
	if s.strict && len(left) > 0 {
		s.fail(fmt.Errorf("zero: schedule %v (strict), rank %d, iteration %d: bucket(s) %v were not stepped and all-gathered by the end of backward",
			s.sched, s.f.z.pg.Rank(), s.iteration, left))
	}
	if s.orderCheck != nil {
		s.orderCheck.start(s.f.z, s.sends)
	}
}

// event calls one of the schedule's handlers (bucket -1: an event of the
// iteration), then tells it of the buckets waited for meanwhile.
func (s *flatSchedule) event(name string, bucket int, handler func(*ScheduleContext) error) {
	s.call(name, bucket, func() error { return handler(s.ctx) })
	s.tell()
}

// tell delivers BucketReduced for the buckets waited for, in that order
// (including those the handlers it calls wait for).
func (s *flatSchedule) tell() {
	for len(s.toTell) > 0 {
		k := s.toTell[0]
		s.toTell = s.toTell[1:]
		s.call("bucketReduced", k, func() error { return s.sched.BucketReduced(s.ctx, k) })
	}
}

// call runs a handler, traces it and keeps its error, naming the
// schedule, the event, the bucket, the rank and the iteration.
func (s *flatSchedule) call(name string, bucket int, fn func() error) {
	start := time.Now()
	s.inEvent++
	err := fn()
	s.inEvent--
	label := name
	if bucket >= 0 {
		label = fmt.Sprintf("%s(%d)", name, bucket)
	}
	s.f.z.traceSchedule(label, bucket, start)
	if err != nil {
		s.fail(fmt.Errorf("zero: schedule %v, %s, rank %d, iteration %d: %w", s.sched, label, s.f.z.pg.Rank(), s.iteration, err))
	}
}

// fail keeps the pass's first error, which Step returns. There is no
// fallback: updates cannot be undone, and the iteration goes on so that
// the ranks' collectives still match.
func (s *flatSchedule) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// wait waits for bucket k's reduce-scatter (frees its full gradients);
// the schedule is told after the event in progress.
func (s *flatSchedule) wait(k int) {
	if s.reduced[k] {
		return
	}
	s.reduced[k] = true
	start := time.Now()
	s.f.retire(s.f.buckets[k])
	s.f.z.traceSchedule(fmt.Sprintf("wait(%d)", k), k, start)
	s.toTell = append(s.toTell, k)
}

// step waits for bucket k's reduce-scatter and updates this rank's
// pieces of it. A failed reduce-scatter fails the whole pass (f.err):
// nothing is updated then.
func (s *flatSchedule) step(k int) error {
	s.stepped[k] = true
	s.wait(k)
	f, z := s.f, s.f.z
	if f.err != nil {
		return f.err
	}
	start := time.Now()
	var err error
	z.rt.NoGrad(func() { err = f.update(f.buckets[k]) })
	end := time.Now()
	if tr, rank := z.rt.Trace(); tr != nil {
		tr.Add(trace.Event{Rank: rank, Lane: trace.Optimizer, Name: "zero update", Start: start, End: end,
			Args: [2]trace.Arg{{Key: "bucket", Val: int64(k)}}})
		tr.Add(trace.Event{Rank: rank, Lane: trace.Schedule, Name: fmt.Sprintf("step(%d)", k), Start: start, End: end,
			Args: [2]trace.Arg{{Key: "bucket", Val: int64(k)}}})
	}
	if err != nil {
		s.fail(err)
	}
	return err
}

// gather launches the all-gather of bucket k's slices (even after a
// failed step: the other ranks wait for this collective) and marks its
// parameters in flight.
func (s *flatSchedule) gather(k int) error {
	s.sent[k] = true
	s.sends = append(s.sends, int64(k))
	f, z, b := s.f, s.f.z, s.f.buckets[k]
	start := time.Now()
	var g *gathering
	var err error
	z.rt.NoGrad(func() {
		if g = f.inPlaceGather(b); g == nil {
			s.finishScratch() // its scratch buffer goes back first
			g, err = f.scratchGather(b)
		}
	})
	s.f.z.traceSchedule(fmt.Sprintf("allGather(%d)", k), k, start)
	if err != nil {
		err = fmt.Errorf("zero: all-gathering the updated parameters of bucket %d: %w", k, err)
		s.fail(err)
		return err
	}
	s.gathers[k] = g
	// Whoever uses a parameter next on this rank waits for the gather
	// (and the copy out of the scratch buffer): the next forward, or a
	// script that reads, prints, saves or evaluates the model right
	// after backward.
	wait := func() error { return g.wait(z.rt) }
	if b.buf != nil {
		b.buf.SetInFlight(wait) // the parameters view it
	} else {
		for _, p := range b.params {
			p.SetInFlight(wait)
		}
	}
	return nil
}

// finishScratch finishes the all-gathers in flight through a scratch
// buffer.
func (s *flatSchedule) finishScratch() {
	for _, g := range s.gathers {
		if g != nil && g.scratch != nil {
			if err := g.wait(s.f.z.rt); err != nil {
				s.fail(err)
			}
		}
	}
}

// finish is Step under a schedule, once the pass is over: it waits for
// every all-gather of the iteration and the order check, and returns the
// iteration's first error (the order check's first: when the ranks'
// orders differ, a mismatched all-gather is its consequence).
func (s *flatSchedule) finish() error {
	var gerr error
	for k, g := range s.gathers {
		if g == nil {
			continue
		}
		if err := g.wait(s.f.z.rt); err != nil && gerr == nil {
			gerr = err
		}
		s.gathers[k] = nil
	}
	err := s.err
	if s.orderCheck != nil && s.orderCheck.work != nil {
		if oerr := s.orderCheck.finish(s.f.z, s.sched, s.iteration, s.sends, allGathers); oerr != nil {
			err = oerr
		}
	}
	if err == nil {
		err = gerr
	}
	s.err, s.began = nil, false
	return err
}

// The schedule's context under stage 2 (ScheduleContext).

func (s *flatSchedule) schedNumBuckets() int          { return len(s.f.buckets) }
func (s *flatSchedule) schedIteration() int           { return s.iteration }
func (s *flatSchedule) schedGroup() dist.ProcessGroup { return s.f.z.pg }

func (s *flatSchedule) schedBucket(i int) (BucketInfo, error) {
	if err := checkBucket(i, len(s.f.buckets)); err != nil {
		return BucketInfo{}, err
	}
	z, b := s.f.z, s.f.buckets[i]
	info := BucketInfo{Numel: b.numel, Params: slices.Clone(b.params), Offsets: slices.Clone(b.offsets),
		Owners: make([]int, len(b.params)), SliceStart: z.pg.Rank() * b.slice, SliceEnd: (z.pg.Rank() + 1) * b.slice}
	for k, p := range b.params {
		name := p.Name()
		if name == "" {
			name = fmt.Sprint(z.index[p])
		}
		info.Names = append(info.Names, name)
		info.Owners[k] = -1
	}
	return info, nil
}

func (s *flatSchedule) schedStage() int { return 2 }

func (s *flatSchedule) schedState(i int) BucketState {
	if !s.began || i >= len(s.ready) {
		return BucketState{}
	}
	return BucketState{Ready: s.ready[i], Reduced: s.reduced[i], Stepped: s.stepped[i], Sent: s.sent[i]}
}

func (s *flatSchedule) schedWait(i int) error {
	s.wait(i)
	return s.f.err
}

func (s *flatSchedule) schedStep(i int) error { return s.step(i) }
func (s *flatSchedule) schedSend(i int) error { return s.gather(i) }
