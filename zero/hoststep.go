package zero

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// The offloaded step under stage 3 runs beside the device. Step starts it
// on a goroutine of its own and returns: the host steps the units' slices
// in the order of the units' forwards and sends each back up, and a
// unit's next gather (its forward or a prefetch) waits for that unit's
// slices only. The host thus updates the later units while the device
// already runs the forward of the first ones, and the result is the
// synchronous step's, bit for bit: every value the step reads is fixed
// when Step is called (the gradients are on the host, the
// hyper-parameters are copied, so a scheduler stepping right after Step
// changes the next step only), and nothing reads a slice before it is
// back.
//
// The goroutine alone uses the host runtime, the host copies, the state
// of the pieces and the byte counters until it ends; everything else that
// reads them waits for it first (settle or waitHost): the next Step,
// clipping, the state dicts, WithFullParams, Memory, Offloaded, Close.
// Collectives stay on the rank's goroutine, in the same order on every
// rank: a prefetch that meets a unit still being stepped waits for it
// rather than skipping, which would reorder the all-gathers across ranks.

// testHookHostStep runs on the host step's goroutine before each bucket
// is stepped (tests hold a unit back, or fail it, with it).
var testHookHostStep = func(unit int) error { return nil }

// startHostStep starts stepping every bucket on the host and returns.
func (f *flatLayout) startHostStep() error {
	z := f.z
	// The slices still on the device go down now (normally none: each
	// went down when its reduce-scatter completed).
	for _, b := range f.buckets {
		if err := f.sendDown(b); err != nil {
			return err
		}
	}
	groups := make([]*optim.ParamGroup, len(z.Groups))
	for i, g := range z.Groups {
		c := *g
		c.Extra = maps.Clone(g.Extra)
		groups[i] = &c
	}
	var order []*flatBucket
	units := append([]*Unit(nil), f.order...)
	for _, u := range f.units { // units that never ran forward, last
		if !slices.Contains(units, u) {
			units = append(units, u)
		}
	}
	var signals []chan struct{}
	for _, u := range units {
		for _, b := range u.buckets {
			b.stepped = make(chan struct{})
			order = append(order, b)
			signals = append(signals, b.stepped)
		}
	}
	done := make(chan struct{})
	f.hostDone = done
	rec, rank := z.rt.Trace()
	go func() {
		defer close(done)
		var failed error
		for i, b := range order {
			if failed == nil {
				start := time.Now()
				err := testHookHostStep(b.unit.index)
				if err == nil {
					err = f.offloadStep(b, groups)
				}
				if err != nil {
					failed = fmt.Errorf("zero: the offloaded step of unit %d: %w", b.unit.index, err)
				}
				if rec != nil {
					rec.Add(trace.Event{Rank: rank, Lane: trace.Units, Name: fmt.Sprintf("unit %d host step", b.unit.index), Start: start, End: time.Now()})
				}
			}
			b.stepErr = failed // a bucket after a failed one was not stepped
			close(signals[i])
		}
		f.hostStateBytes.Store(f.countHostBytes())
	}()
	return nil
}

// hostBytes is what the host holds for this rank: the optimizer state and
// the master copies of its slices. While a step runs on the host it is
// what the last step left (a step changes no size), so that a script
// reading its memory each step does not wait for the host; only before
// the first step has ended does it wait.
func (f *flatLayout) hostBytes() int64 {
	if f.hostDone != nil {
		if n := f.hostStateBytes.Load(); n > 0 {
			return n
		}
		f.waitHost()
	}
	return f.countHostBytes()
}

// countHostBytes adds up hostBytes, reading the host copies and state
// (the host step's goroutine, or the rank's when no step runs).
func (f *flatLayout) countHostBytes() int64 {
	var n int64
	for _, b := range f.buckets {
		for _, pc := range b.pieces {
			if pc.state != nil {
				n += pc.state.Bytes()
			}
		}
		if b.host != nil && b.host.param != nil {
			n += int64(b.host.param.Numel() * b.host.param.DType().Size())
		}
	}
	return n
}

// waitStepped waits until bucket b's slice is back from the host step,
// and returns that step's error (once).
func (f *flatLayout) waitStepped(b *flatBucket) error {
	if b.stepped == nil {
		return nil
	}
	<-b.stepped
	b.stepped = nil
	err := b.stepErr
	b.stepErr = nil
	return err
}

// waitHost waits until the host step has ended, leaving its error to
// settle or the next gather.
func (f *flatLayout) waitHost() {
	if f.hostDone != nil {
		<-f.hostDone
	}
}

// settle waits until the host step has ended and returns its error, if
// no gather has returned it already.
func (f *flatLayout) settle() error {
	f.waitHost()
	f.hostDone = nil
	var first error
	for _, b := range f.buckets {
		if err := f.waitStepped(b); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// settle waits for an offloaded step running on the host (see flatLayout.settle).
func (z *Optimizer) settle() error {
	if z.flat == nil {
		return nil
	}
	return z.flat.settle()
}

// waitHost waits for an offloaded step running on the host, leaving its
// error to the next call that can return one.
func (z *Optimizer) waitHost() {
	if z.flat != nil {
		z.flat.waitHost()
	}
}
