package zero

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Schedule is a ZeRO step schedule under DDP (HookWithZeroSchedule): it is
// told of one iteration's events and decides when this rank waits for
// each bucket's reduction, steps its share of the bucket and sends the
// updated parameters back. The engine keeps it correct: a step waits for
// the bucket's reduction (it never reads a partial gradient), each bucket
// is stepped and sent once per iteration, a send follows its step, and
// what the schedule left when backward ends is done then, in bucket order
// (or is an error, with OverlapOptions.Strict). Every rank must issue the
// sends, which are collectives, in the same order: the engine compares
// the ranks' orders at the end of every iteration.
//
// The events come on the rank's goroutine, one at a time: a schedule's
// actions never run concurrently with another of its events.
type Schedule interface {
	// IterationBegin: the iteration's first bucket is ready (before its
	// BucketReady).
	IterationBegin(c *ScheduleContext) error
	// BucketReady: bucket i's gradients are ready and were handed to the
	// comm hook (in DDP's order, while backward goes on).
	BucketReady(c *ScheduleContext, i int) error
	// BucketReduced: bucket i's reduction has completed and the engine
	// has its result. It comes after the event in which the schedule
	// waited for the bucket (Wait, Step), or, for the buckets nobody
	// waited for, after BackwardEnd, in bucket order, as each completes.
	BucketReduced(c *ScheduleContext, i int) error
	// BackwardEnd: the last bucket was handed to the comm hook.
	BackwardEnd(c *ScheduleContext) error
}

// ScheduleFuncs makes a Schedule of functions; a nil one does nothing.
type ScheduleFuncs struct {
	Name             string // in errors and traces
	OnIterationBegin func(c *ScheduleContext) error
	OnBucketReady    func(c *ScheduleContext, i int) error
	OnBucketReduced  func(c *ScheduleContext, i int) error
	OnBackwardEnd    func(c *ScheduleContext) error
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
// every rank by construction, so no iteration pays for the check.
type builtin struct{ ScheduleFuncs }

// The built-in schedules, PyTorch's two.
var (
	// AfterBackward is schedule A (hook_with_zero_step): every bucket is
	// stepped, in order, once backward has handed the last one to the
	// comm hook. Suits slow networks: the step runs after all the
	// reductions were launched.
	AfterBackward Schedule = builtin{ScheduleFuncs{Name: "afterBackward", OnBackwardEnd: func(c *ScheduleContext) error {
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
	Interleaved Schedule = builtin{ScheduleFuncs{Name: "interleaved",
		OnBucketReady: func(c *ScheduleContext, i int) error {
			if i > 0 {
				return c.StepAndBroadcast(i - 1)
			}
			return nil
		},
		OnBackwardEnd: func(c *ScheduleContext) error { return c.StepAndBroadcast(c.NumBuckets() - 1) },
	}}
)

// ScheduleContext is what a schedule acts through during one iteration.
type ScheduleContext struct{ ov *overlap }

// NumBuckets is the number of DDP's buckets.
func (c *ScheduleContext) NumBuckets() int { return len(c.ov.buckets) }

// Iteration counts the backward passes the schedule has run in, from 1.
func (c *ScheduleContext) Iteration() int { return c.ov.iteration }

// Rank and WorldSize are the process group's.
func (c *ScheduleContext) Rank() int      { return c.ov.z.pg.Rank() }
func (c *ScheduleContext) WorldSize() int { return c.ov.z.pg.Size() }

// Bucket is bucket i (its parameters, their names and offsets).
func (c *ScheduleContext) Bucket(i int) (*ddp.Bucket, error) {
	if i < 0 || i >= len(c.ov.buckets) {
		return nil, fmt.Errorf("bucket %d: there are %d buckets (0 to %d)", i, len(c.ov.buckets), len(c.ov.buckets)-1)
	}
	return c.ov.buckets[i], nil
}

// Owners is the rank that steps and broadcasts each of bucket i's
// parameters, in the bucket's order.
func (c *ScheduleContext) Owners(i int) ([]int, error) {
	b, err := c.Bucket(i)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(b.Params))
	for k, p := range b.Params {
		out[k] = c.ov.z.owner[p]
	}
	return out, nil
}

// Reduced tells whether bucket i's reduction was waited for in this
// iteration.
func (c *ScheduleContext) Reduced(i int) bool {
	return i >= 0 && i < len(c.ov.buckets) && c.ov.reduced[i]
}

// ready checks that bucket i exists and its BucketReady came.
func (c *ScheduleContext) ready(i int) error {
	if _, err := c.Bucket(i); err != nil {
		return err
	}
	if !c.ov.ready[i] {
		return fmt.Errorf("bucket %d is not ready yet: its gradients come later in backward (act on a bucket after its bucketReady)", i)
	}
	return nil
}

// Wait waits for bucket i's reduction (at once if it was waited for
// already). BucketReduced(i) follows the event that waited.
func (c *ScheduleContext) Wait(i int) error {
	if err := c.ready(i); err != nil {
		return err
	}
	c.ov.reduce(i)
	return c.ov.errs[i]
}

// Step waits for bucket i's reduction and runs this rank's optimizer step
// over its parameters in it; the bucket's parameters are sent back by
// Broadcast. Each bucket is stepped once an iteration.
func (c *ScheduleContext) Step(i int) error {
	if err := c.ready(i); err != nil {
		return err
	}
	if c.ov.stepped[i] {
		return fmt.Errorf("bucket %d was stepped already in this iteration (each bucket is stepped once)", i)
	}
	c.ov.step(i)
	return c.ov.errs[i]
}

// Broadcast sends bucket i's updated parameters from their owners to
// every rank (a collective: every rank must broadcast the buckets in the
// same order). The bucket must have been stepped; each bucket is sent
// once an iteration.
func (c *ScheduleContext) Broadcast(i int) error {
	if _, err := c.Bucket(i); err != nil {
		return err
	}
	switch {
	case c.ov.sentDone[i]:
		return fmt.Errorf("bucket %d was broadcast already in this iteration (each bucket is sent once)", i)
	case !c.ov.stepped[i]:
		return fmt.Errorf("bucket %d is broadcast before its step: step(%d) first, or stepAndBroadcast(%d)", i, i, i)
	}
	c.ov.broadcast(i)
	return c.ov.errs[i]
}

// AllGather is stage 2's way of sending a bucket's slices back; under
// stage 1 each parameter is broadcast from its owner, so it is an error
// that says so.
func (c *ScheduleContext) AllGather(i int) error {
	return fmt.Errorf("allGather(%d): under stage 1 each parameter is broadcast from its owner: use broadcast(%d)", i, i)
}

// StepAndBroadcast is Step then Broadcast.
func (c *ScheduleContext) StepAndBroadcast(i int) error {
	if err := c.Step(i); err != nil {
		return err
	}
	return c.Broadcast(i)
}

// StepsInBackward reports whether z's step runs inside backward, in an
// overlap hook, and with which schedule: then nothing can see the whole
// gradient before the step (clipping by the global norm, a GradScaler's
// overflow check, a step closure), and the scripts refuse those.
func (z *Optimizer) StepsInBackward() (Schedule, bool) {
	if z.ov == nil {
		return nil, false
	}
	return z.ov.sched, true
}

// Has tells whether p is one of z's parameters.
func (z *Optimizer) Has(p *tensor.Tensor) bool {
	_, ok := z.groupOf[p]
	return ok
}
