package zero

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/ddp"
)

// Schedule is a ZeRO step schedule under DDP (HookWithZeroSchedule): it is
// told of one iteration's events and decides when this rank steps each
// bucket and sends its updated parameters back. The engine keeps it
// correct: a bucket is stepped only once its reduction has completed (the
// step waits for it), each bucket at most once per iteration, and every
// bucket the schedule left is stepped, in order, when backward ends.
// Every rank must run the same schedule (its collectives, the broadcasts,
// go in the order of its steps).
type Schedule interface {
	// IterationBegin: the iteration's first bucket is ready (before its
	// BucketReady).
	IterationBegin(c *ScheduleContext) error
	// BucketReady: bucket i's gradients are ready and were handed to the
	// comm hook (in DDP's order, while backward goes on).
	BucketReady(c *ScheduleContext, i int) error
	// BackwardEnd: the last bucket was handed to the comm hook.
	BackwardEnd(c *ScheduleContext) error
}

// ScheduleFuncs makes a Schedule of functions; a nil one does nothing.
type ScheduleFuncs struct {
	Name             string // in errors
	OnIterationBegin func(c *ScheduleContext) error
	OnBucketReady    func(c *ScheduleContext, i int) error
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

func (s ScheduleFuncs) BackwardEnd(c *ScheduleContext) error {
	if s.OnBackwardEnd == nil {
		return nil
	}
	return s.OnBackwardEnd(c)
}

func (s ScheduleFuncs) String() string { return s.Name }

// The built-in schedules, PyTorch's two.
var (
	// AfterBackward is schedule A (hook_with_zero_step): every bucket is
	// stepped, in order, once backward has handed the last one to the
	// comm hook. Suits slow networks: the step runs after all the
	// reductions were launched.
	AfterBackward Schedule = ScheduleFuncs{Name: "afterBackward", OnBackwardEnd: func(c *ScheduleContext) error {
		for k := range c.NumBuckets() {
			if err := c.StepAndBroadcast(k); err != nil {
				return err
			}
		}
		return nil
	}}
	// Interleaved is schedule B (hook_with_zero_step_interleaved): bucket
	// i is stepped as soon as bucket i+1 is ready, the last right after
	// its own, so that reductions, steps and broadcasts interleave with
	// the rest of backward. Suits fast networks.
	Interleaved Schedule = ScheduleFuncs{Name: "interleaved",
		OnBucketReady: func(c *ScheduleContext, i int) error {
			if i > 0 {
				return c.StepAndBroadcast(i - 1)
			}
			return nil
		},
		OnBackwardEnd: func(c *ScheduleContext) error { return c.StepAndBroadcast(c.NumBuckets() - 1) },
	}
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

// StepAndBroadcast waits for bucket i's reduction, steps this rank's
// parameters in it and broadcasts each of its parameters from its owner.
// Bucket i must be ready (its BucketReady came) and not stepped yet in
// this iteration.
func (c *ScheduleContext) StepAndBroadcast(i int) error {
	ov := c.ov
	if _, err := c.Bucket(i); err != nil {
		return err
	}
	switch {
	case ov.done[i]:
		return fmt.Errorf("bucket %d was stepped already in this iteration (each bucket is stepped once)", i)
	case ov.waits[i] == nil:
		return fmt.Errorf("bucket %d is not ready yet: its gradients come later in backward (step a bucket after its bucketReady)", i)
	}
	ov.process(i)
	return ov.errs[i]
}
