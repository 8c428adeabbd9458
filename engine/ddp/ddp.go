// Package ddp owns data-parallel gradient synchronisation, PyTorch's
// DistributedDataParallel: parameters broadcast from rank 0, gradients
// grouped into buckets, each bucket handed to a communication hook during
// backward as soon as its last gradient is final, and the reduced
// gradients in place before anything reads them.
//
// Backward never waits for communication. Reading a parameter's gradient
// (the optimizer step does) waits for every bucket's hook and writes the
// reduced values into the gradients (tensor.SetGradPending).
package ddp

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// Param is a parameter and its name in the model ("0.weight").
type Param struct {
	Name   string
	Tensor *tensor.Tensor
}

// Options are DistributedDataParallel's, with PyTorch's defaults.
type Options struct {
	// BucketCapMB caps a bucket's size in MiB (default 25).
	BucketCapMB float64
	// FirstBucketCapMB caps the first bucket (default 1), so that
	// communication starts early in backward.
	FirstBucketCapMB float64
	// GradientAsBucketView makes the gradients views of the buckets:
	// no copy into the bucket before and out of it after communication.
	GradientAsBucketView bool
	// FindUnusedParameters lets parameters get no gradient in a backward
	// pass (they are reduced as zeros); without it that is an error.
	FindUnusedParameters bool
	// StaticGraph says the model uses the same parameters every
	// iteration (static_graph): the parameters unused in the first
	// iteration are reduced as zeros from then on, at the start of each
	// backward pass, with no search, and the buckets are rebuilt after the
	// first iteration. A parameter whose use changes afterwards is an
	// error.
	StaticGraph bool
}

// Bucket is a group of gradients reduced together: Buffer holds them one
// after another, Params[i]'s at Offsets[i] (in elements). Where the
// gradients are reduced in place (see stage) Buffer is allocated only when
// the bucket first needs it; Buckets and the hooks always see it.
type Bucket struct {
	Index   int
	IsLast  bool
	Buffer  *tensor.Tensor
	Params  []*tensor.Tensor
	Names   []string
	Offsets []int
}

// CommHook reduces a bucket across ranks. It runs on the rank's goroutine
// as soon as every gradient of the bucket is in Buffer, starts the
// communication and returns wait, which the DDP calls (on the same
// goroutine) before the gradients are read: wait blocks until the
// reduction is done and returns the reduced bucket, a tensor of Buffer's
// size and dtype (often Buffer itself).
type CommHook func(b *Bucket) (wait func() (*tensor.Tensor, error))

// DDP synchronises the gradients of one rank's replica.
type DDP struct {
	pg     dist.ProcessGroup
	rt     *tensor.Runtime
	params []Param
	opts   Options
	hook   CommHook
	custom bool // a hook was registered (without one, stage divides and the hook only sums)
	// inPlace, without a registered hook, reduces a bucket's gradients
	// where they are, averaged as the bucket path averages them (one
	// pre-multiplied sum), when the group can (the in-process backend):
	// no copy into the bucket and none out of it (see stage).
	inPlace dist.CoalescedAllReducer

	buckets []*bucket
	where   map[*tensor.Tensor]slot
	removes []func()

	sync    bool  // false inside NoSync
	active  bool  // a backward pass has marked gradients ready and not been finalized
	order   []int // parameter indices in the order they became ready (first pass)
	rebuilt bool
	next    int // the next bucket to launch, in index order
	err     error

	joining  bool // inside Join: every synchronised iteration announces itself
	iters    int  // synchronised iterations so far
	joinStep func() error
	// throwOnEarlyEnd: inside Join, a rank that runs out of inputs stops
	// every rank with ErrEarlyTermination instead of shadowing them.
	throwOnEarlyEnd bool

	// staticUnused are the parameters the first iteration did not use,
	// under StaticGraph; staticKnown says the first iteration has ended.
	staticUnused []int
	staticKnown  bool
}

type slot struct{ bucket, pos, param int }

type bucket struct {
	*Bucket
	param   []int // indices into DDP.params
	ready   []bool
	pending int
	wait    func() (*tensor.Tensor, error)
	// left[pos]: the gradient stays where it is until the bucket
	// launches (stage); reduced: the launch reduced the gradients in
	// place, so there is nothing to copy back (unstage).
	left    []bool
	reduced bool
	dt      dtype.DType // the gradients' (Buffer's, once it exists)
	numel   int
}

// New wraps the replica whose parameters are params (in registration
// order) for the group pg: it broadcasts rank 0's parameter values to
// every rank, builds the buckets and registers the gradient-ready hooks.
// Every rank must call it with the same parameters.
func New(pg dist.ProcessGroup, params []Param, opts Options) (*DDP, error) {
	if len(params) == 0 {
		return nil, fmt.Errorf("ddp: the model has no parameters")
	}
	if opts.BucketCapMB == 0 {
		opts.BucketCapMB = 25
	}
	if opts.FirstBucketCapMB == 0 {
		opts.FirstBucketCapMB = 1
	}
	if opts.BucketCapMB < 0 || opts.FirstBucketCapMB < 0 {
		return nil, fmt.Errorf("ddp: bucket caps must be positive, got %v and %v MiB", opts.BucketCapMB, opts.FirstBucketCapMB)
	}
	d := &DDP{pg: pg, rt: params[0].Tensor.Runtime(), params: params, opts: opts, sync: true}
	// Broadcast every parameter from rank 0, as DDP's constructor does.
	var works []*dist.Work
	for _, p := range params {
		if !p.Tensor.IsContiguous() {
			return nil, fmt.Errorf("ddp: parameter %s is not contiguous", p.Name)
		}
		works = append(works, pg.Broadcast(p.Tensor, 0))
	}
	for i, w := range works {
		if err := w.Wait(); err != nil {
			return nil, fmt.Errorf("ddp: broadcasting parameter %s from rank 0: %w", params[i].Name, err)
		}
	}
	if err := d.build(d.initialPlan()); err != nil {
		return nil, err
	}
	// PyTorch 1.13 does not rebuild the buckets of a DDP that looks for
	// unused parameters (it does with a static graph).
	d.rebuilt = opts.FindUnusedParameters && !opts.StaticGraph
	d.hook = allReduceSum(pg)
	d.inPlace, _ = pg.(dist.CoalescedAllReducer)
	for i, p := range params {
		d.removes = append(d.removes, p.Tensor.OnGradReady(func(*tensor.Tensor) { d.ready(i) }))
	}
	return d, nil
}

// Close removes the DDP's hooks; the parameters keep their gradients.
func (d *DDP) Close() {
	for _, r := range d.removes {
		r()
	}
	for _, p := range d.params {
		p.Tensor.SetGradPending(nil)
	}
}

// RegisterCommHook replaces the default reduction, which divides each
// gradient by the number of ranks on its way into the bucket and sums the
// buckets across ranks, as PyTorch's reducer does without a hook. h then
// gets the gradients as they are. It must be called before the first
// backward pass, as in PyTorch.
func (d *DDP) RegisterCommHook(h CommHook) error {
	if d.active || d.order != nil {
		return fmt.Errorf("ddp: registerCommHook must be called before the first backward pass")
	}
	d.hook = h
	d.custom, d.inPlace = true, nil
	for _, b := range d.buckets {
		if err := d.buffer(b).Err(); err != nil {
			return err
		}
	}
	return nil
}

// SetRequireSync turns gradient synchronisation off (NoSync: gradients
// accumulate locally) and back on.
func (d *DDP) SetRequireSync(on bool) { d.sync = on }

// KeepBuckets fixes the bucket plan before the first iteration: the plan
// the rebuild would make for gradients that become ready in reverse
// registration order, kept for good. ZeRO's overlap assigns buckets to
// ranks and needs the plan fixed before the first step, so that it can
// update from the first iteration (PyTorch skips the first updates while
// its buckets settle). Call it before the first backward pass.
func (d *DDP) KeepBuckets() error {
	if d.active {
		return fmt.Errorf("ddp: the bucket plan cannot change during a backward pass")
	}
	d.rebuilt, d.order = true, nil
	if d.opts.FindUnusedParameters && !d.opts.StaticGraph {
		return nil // PyTorch's plan for it is final from the start
	}
	return d.build(d.predictedPlan())
}

// Bucket plans, as PyTorch 1.13's DistributedDataParallel makes them
// (compute_bucket_assignment_by_size). A plan is the buckets in launch
// order, each the indices of its parameters in layout order.
//
//   - At construction, without findUnusedParameters: one bucket of every
//     parameter (one per dtype), in registration order. PyTorch does not
//     guess an order it has not seen; the first iteration reduces
//     everything at the end of backward.
//   - At construction, with findUnusedParameters: buckets filled in
//     registration order up to the caps (the first up to the first cap),
//     then launched in reverse, each keeping registration order inside.
//     PyTorch never rebuilds these.
//   - After the first iteration, without findUnusedParameters: rebuilt in
//     the order the gradients became ready, up to the caps.

// initialPlan is the construction's plan.
func (d *DDP) initialPlan() [][]int {
	reg := make([]int, len(d.params))
	for i := range reg {
		reg[i] = i
	}
	limits := []int64{math.MaxInt64}
	if d.opts.FindUnusedParameters && !d.opts.StaticGraph {
		limits = d.capBytes()
	}
	plan := d.assign(reg, limits, true)
	slices.Reverse(plan)
	return plan
}

// rebuiltPlan is the plan of the buckets rebuilt after the first
// iteration, from the order the gradients became ready.
func (d *DDP) rebuiltPlan(ready []int) [][]int { return d.assign(ready, d.capBytes(), false) }

// predictedPlan is what the rebuild makes for gradients that become ready
// in reverse registration order (bias before weight within a layer, as
// autograd produces them), for users of the buckets that need the final
// plan before the first iteration (KeepBuckets).
func (d *DDP) predictedPlan() [][]int {
	order := make([]int, len(d.params))
	for i := range order {
		order[i] = len(d.params) - 1 - i
	}
	return d.rebuiltPlan(order)
}

// capBytes are the caps of the first bucket and of the others, in bytes.
func (d *DDP) capBytes() []int64 {
	return []int64{int64(d.opts.FirstBucketCapMB * (1 << 20)), int64(d.opts.BucketCapMB * (1 << 20))}
}

// assign groups the parameters order names into buckets as PyTorch's
// compute_bucket_assignment_by_size: one open bucket per dtype, closed as
// soon as its bytes reach its limit (limits[0] for a dtype's first bucket,
// the next limit for each later one, the last limit from then on); the
// closed buckets in the order they closed, then the open ones in the order
// their dtypes first appeared. With sortByMin the buckets are then ordered
// by their smallest parameter index.
func (d *DDP) assign(order []int, limits []int64, sortByMin bool) [][]int {
	type open struct {
		params []int
		bytes  int64
		limit  int // index into limits
	}
	var plan [][]int
	var dtypes []dtype.DType
	acc := map[dtype.DType]*open{}
	for _, i := range order {
		p := d.params[i].Tensor
		dt := p.DType()
		a := acc[dt]
		if a == nil {
			a = &open{}
			acc[dt] = a
			dtypes = append(dtypes, dt)
		}
		a.params = append(a.params, i)
		a.bytes += int64(p.Numel() * dt.Size())
		if a.bytes >= limits[a.limit] {
			plan = append(plan, a.params)
			a.params, a.bytes = nil, 0
			a.limit = min(a.limit+1, len(limits)-1)
		}
	}
	for _, dt := range dtypes {
		if a := acc[dt]; len(a.params) > 0 {
			plan = append(plan, a.params)
		}
	}
	if sortByMin {
		slices.SortStableFunc(plan, func(a, b []int) int { return slices.Min(a) - slices.Min(b) })
	}
	return plan
}

// Buckets returns the current buckets, in launch order. Their buffers and
// parameters are the DDP's; callers must not change them.
func (d *DDP) Buckets() []*Bucket {
	out := make([]*Bucket, len(d.buckets))
	for i, b := range d.buckets {
		d.buffer(b) // an allocation's error travels in the tensor
		out[i] = b.Bucket
	}
	return out
}

// buffer returns b's buffer, allocating it (zeroed) on first use.
func (d *DDP) buffer(b *bucket) *tensor.Tensor {
	if b.Buffer == nil {
		b.Buffer = d.rt.Zeros(b.dt, b.numel).Persist()
	}
	return b.Buffer
}

// BucketBytes is the memory of the buckets that is not also a gradient:
// the bytes a report of parameters, gradients and optimizer state leaves
// out. With GradientAsBucketView a staged gradient is its bucket's view
// and is not counted twice; without it the buckets are a second copy of
// every gradient (PyTorch's reducer keeps both too) and count in full,
// as do buckets whose gradients were set to None; buckets reduced in
// place and never allocated count nothing.
func (d *DDP) BucketBytes() int64 {
	sc := d.rt.OpenScope() // the views below
	defer sc.Close()
	var n int64
	for _, b := range d.buckets {
		if b.Buffer == nil {
			continue
		}
		es := int64(b.Buffer.DType().Size())
		n += int64(b.Buffer.Numel()) * es
		for pos, p := range b.Params {
			if g := p.GradNoSync(); g != nil && tensor.SameMemory(g, b.Buffer.Narrow(0, b.Offsets[pos], p.Numel())) {
				n -= int64(p.Numel()) * es
			}
		}
	}
	return n
}

// SetJoinStep makes every iteration a joined rank shadows end with step,
// run once the shadowed reductions are in the gradients: a sharded
// optimizer (ZeRO) takes part in the others' parameter updates this way.
func (d *DDP) SetJoinStep(step func() error) { d.joinStep = step }

// BucketNames lists the parameter names of every bucket, in bucket order.
func (d *DDP) BucketNames() [][]string {
	out := make([][]string, len(d.buckets))
	for i, b := range d.buckets {
		out[i] = slices.Clone(b.Names)
	}
	return out
}

// build assigns the parameters, taken in order, to buckets: a bucket
// holds one dtype and closes when it reaches its cap (the first bucket's
// cap, then BucketCapMB).
func (d *DDP) build(plan [][]int) error {
	for _, b := range d.buckets {
		if b.Buffer != nil {
			b.Buffer.Release()
		}
	}
	d.buckets = nil
	d.where = map[*tensor.Tensor]slot{}
	for _, cur := range plan {
		dt := d.params[cur[0]].Tensor.DType()
		b := &bucket{Bucket: &Bucket{Index: len(d.buckets)}, param: slices.Clone(cur)}
		n := 0
		for _, i := range cur {
			p := d.params[i]
			b.Params = append(b.Params, p.Tensor)
			b.Names = append(b.Names, p.Name)
			b.Offsets = append(b.Offsets, n)
			n += p.Tensor.Numel()
		}
		b.dt, b.numel = dt, n
		// Without the in-place reduction every iteration needs it.
		if d.inPlace == nil || d.opts.GradientAsBucketView {
			if err := d.buffer(b).Err(); err != nil {
				return err
			}
		}
		b.ready = make([]bool, len(cur))
		b.left = make([]bool, len(cur))
		for pos, i := range cur {
			d.where[d.params[i].Tensor] = slot{b.Index, pos, i}
		}
		d.buckets = append(d.buckets, b)
	}
	d.buckets[len(d.buckets)-1].IsLast = true
	if d.opts.GradientAsBucketView {
		// A gradient that exists becomes its bucket's view now; one that
		// does not yet (before the first backward pass, or after
		// zeroGrad(true)) becomes it when it is first staged, as with
		// PyTorch's reducer (initialize_bucket_views), whose first
		// reduction therefore divides while copying.
		for _, b := range d.buckets {
			for pos, p := range b.Params {
				g := p.GradNoSync()
				if g == nil || g.Err() != nil {
					continue
				}
				flat := b.Buffer.Narrow(0, b.Offsets[pos], p.Numel())
				view := flat.View(p.Shape()...).Persist()
				flat.Release() // the view holds its own reference
				if err := view.CopyFrom(g); err != nil {
					return err
				}
				if err := p.SetGrad(view); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ready is the gradient-ready hook of parameter i: its gradient for this
// backward pass is final.
func (d *DDP) ready(i int) {
	if !d.sync || d.err != nil {
		return
	}
	if !d.active {
		d.start()
	}
	s := d.where[d.params[i].Tensor]
	b := d.buckets[s.bucket]
	if slices.Contains(d.staticUnused, i) {
		d.err = fmt.Errorf("ddp: parameter %s got a gradient, but was unused in the first iteration: with staticGraph the model must use the same parameters every iteration", d.params[i].Name)
		return
	}
	if b.ready[s.pos] {
		d.err = fmt.Errorf("ddp: parameter %s got a gradient twice in one iteration (two backward passes through it without an optimizer step; use noSync to accumulate)", d.params[i].Name)
		return
	}
	if err := d.stage(b, s.pos); err != nil {
		d.err = err
		return
	}
	if !d.rebuilt {
		d.order = append(d.order, i)
	}
	// Once the parameter's other hooks have run: a bucket reduced in
	// place changes the gradient they may read.
	d.rt.AfterGradHooks(d.launchReady)
}

// start begins an iteration: every gradient read from now on waits for
// the reduction.
func (d *DDP) start() {
	d.active = true
	d.next = 0
	d.iters++
	if d.joining {
		// Ranks that have joined learn from this count that an
		// iteration is under way (see Join). Nobody waits for it here,
		// unless an early end must stop every rank.
		one := d.rt.Ones(dtype.Int64, 1)
		w := d.pg.AllReduce(one, dist.Sum)
		if d.throwOnEarlyEnd {
			if err := d.checkNoRankEnded(one, w); err != nil {
				d.err = err
			}
		}
	}
	for _, b := range d.buckets {
		clear(b.ready)
		clear(b.left)
		b.pending = len(b.Params)
		b.wait, b.reduced = nil, false
	}
	for _, p := range d.params {
		p.Tensor.SetGradPending(d.Finalize)
	}
	// A static graph's unused parameters are known: they are reduced as
	// zeros (or their gradient as it is) from the start, so that their
	// buckets launch in order.
	for _, i := range d.staticUnused {
		s := d.where[d.params[i].Tensor]
		if err := d.stage(d.buckets[s.bucket], s.pos); err != nil && d.err == nil {
			d.err = err
		}
	}
}

// stage marks parameter pos's gradient ready and puts it into its bucket
// (nothing to do when the gradient is a view of the bucket). Without a
// registered hook it also divides the gradient by the number of ranks, as
// PyTorch's reducer does (mark_variable_ready_dense): multiplied by the
// reciprocal while it is copied in, one pass instead of a copy and a
// division, or divided in place when it is the bucket's view already.
//
// On a group that reduces tensors in place (dist.CoalescedAllReducer) the
// default reduction averages as it sums (averagesInPlace): each rank's
// value multiplied by the reciprocal before the sum, the roundings of the
// copy's multiplication. The gradient then stays where it is, and when
// the bucket launches its gradients are reduced there: no copy into the
// bucket and none back (a tenth of a two-rank MLP step). A bucket with a
// gradient that cannot stay (none, or of another layout) goes through its
// buffer whole, copied as it is, in the same collective: ranks whose
// buckets differ in that (a parameter unused on some) still meet.
func (d *DDP) stage(b *bucket, pos int) error {
	if d.leaves(b, pos) {
		b.left[pos] = true
	} else if err := d.copyIn(b, pos); err != nil {
		return err
	}
	b.ready[pos] = true
	b.pending--
	return nil
}

// averagesInPlace reports whether bucket b's default reduction is the
// group's pre-multiplied sum (stage): on a group that has it, without a
// hook, without gradientAsBucketView (its gradients are the buckets,
// divided as PyTorch divides them), outside Join (whose joined ranks
// shadow the buckets' plain all-reduces), for float32 and float64 (a
// pre-multiplied sum's types). Every rank decides alike.
func (d *DDP) averagesInPlace(b *bucket) bool {
	return d.inPlace != nil && !d.opts.GradientAsBucketView && !d.joining && (b.dt == dtype.Float32 || b.dt == dtype.Float64)
}

// leaves reports whether parameter pos's gradient can stay where it is
// until its bucket is reduced in place (stage).
func (d *DDP) leaves(b *bucket, pos int) bool {
	if !d.averagesInPlace(b) {
		return false
	}
	p := b.Params[pos]
	g := p.GradNoSync()
	return g != nil && g.Err() == nil && g.IsContiguous() && g.DType() == b.dt && g.Numel() == p.Numel()
}

// copyIn writes parameter pos's gradient into its bucket (stage).
func (d *DDP) copyIn(b *bucket, pos int) error {
	sc := d.rt.OpenScope() // the views below
	defer sc.Close()
	p := b.Params[pos]
	view := d.buffer(b).Narrow(0, b.Offsets[pos], p.Numel())
	defer view.Release()
	g := p.GradNoSync()
	switch {
	case g == nil:
		if err := view.Zero(); err != nil {
			return err
		}
	case tensor.SameMemory(g, view):
		if !d.custom {
			if err := view.DivScalarInPlace(float64(d.pg.Size())); err != nil {
				return fmt.Errorf("ddp: gradient of %s: %w", b.Names[pos], err)
			}
		}
	default:
		bv := view.View(p.Shape()...)
		var err error
		if d.custom || d.averagesInPlace(b) {
			err = bv.CopyFrom(g) // a hook's to reduce, or the reduction averages
		} else {
			err = bv.MulScalarFrom(g, 1/float64(d.pg.Size()))
		}
		if err != nil {
			return fmt.Errorf("ddp: gradient of %s: %w", b.Names[pos], err)
		}
		if d.opts.GradientAsBucketView {
			// A gradient made after zeroGrad(true) (or before the
			// first pass) is a tensor of its own: once copied in, the
			// parameter's .grad becomes the bucket's view and the
			// separate tensor goes back at once, as PyTorch's reducer
			// does (grad = bucket_view in mark_variable_ready), so
			// that every gradient is held once, in its bucket.
			if err := p.SetGrad(bv); err != nil {
				return fmt.Errorf("ddp: gradient of %s: %w", b.Names[pos], err)
			}
		}
	}
	return nil
}

// launch hands bucket b to the reduction. Averaging in place, its
// gradients are reduced where they are when every one stayed there and
// still can (a later hook may have replaced one), else the ones that
// stayed are copied into the buffer and the buffer is reduced; otherwise
// the buffer goes to the hook.
func (d *DDP) launch(b *bucket) error {
	if !d.averagesInPlace(b) {
		b.wait = d.hook(b.Bucket)
		return nil
	}
	runs := make([]*tensor.Tensor, len(b.Params))
	for pos, p := range b.Params {
		if !b.left[pos] || !d.leaves(b, pos) {
			runs = nil
			break
		}
		runs[pos] = p.GradNoSync()
	}
	b.reduced = runs != nil
	if !b.reduced {
		for pos, left := range b.left {
			if left {
				if err := d.copyIn(b, pos); err != nil {
					return err
				}
				b.left[pos] = false
			}
		}
		runs = []*tensor.Tensor{b.Buffer}
	}
	w := d.inPlace.AllReduceCoalesced(runs, dist.Sum, 1/float64(d.pg.Size()))
	var buf *tensor.Tensor // what Finalize copies back: nothing when reduced in place
	if !b.reduced {
		buf = b.Buffer
	}
	b.wait = func() (*tensor.Tensor, error) { return buf, w.Wait() }
	return nil
}

// launchReady hands complete buckets to the hook in index order, so that
// every rank issues its collectives in the same order.
func (d *DDP) launchReady() {
	for d.next < len(d.buckets) && d.buckets[d.next].pending == 0 {
		b := d.buckets[d.next]
		tr, rank := d.rt.Trace()
		start := tr.Now()
		if err := d.launch(b); err != nil && d.err == nil {
			d.err = err
		}
		if tr != nil {
			tr.Add(d.traceEvent(rank, "comm hook", b, start))
		}
		d.next++
	}
}

// traceEvent describes a call about bucket b that began at start and ends
// now, on the trace's hook lane.
func (d *DDP) traceEvent(rank int, name string, b *bucket, start time.Time) trace.Event {
	return trace.Event{Rank: rank, Lane: trace.Hook, Name: name, Start: start, End: time.Now(),
		Args: [2]trace.Arg{{Key: "bucket", Val: int64(b.Index)}, {Key: "bytes", Val: int64(b.numel * b.dt.Size())}}}
}

// Pending reports whether a backward pass's reductions have not been
// finalized yet (Finalize then waits for them).
func (d *DDP) Pending() bool { return d.active }

// Finalize ends the iteration: unused parameters are reduced as zeros (or
// named in an error), every bucket's reduction is waited for and the
// reduced values land in the gradients. Reading any parameter's gradient
// calls it; calling it again does nothing.
func (d *DDP) Finalize() error {
	if !d.active {
		return d.err
	}
	d.active = false
	for _, p := range d.params {
		p.Tensor.SetGradPending(nil)
	}
	if d.err == nil && d.next < len(d.buckets) {
		var unused []string
		for _, b := range d.buckets {
			for pos, ok := range b.ready {
				if !ok {
					unused = append(unused, b.Names[pos])
				}
			}
		}
		firstStatic := d.opts.StaticGraph && !d.staticKnown
		switch {
		case d.opts.StaticGraph && !firstStatic:
			d.err = fmt.Errorf("ddp: parameters %s received no gradient in this backward pass, but were used in the first iteration: with staticGraph the model must use the same parameters every iteration", strings.Join(unused, ", "))
		case !d.opts.FindUnusedParameters && !firstStatic:
			d.err = fmt.Errorf("ddp: parameters %s received no gradient in this backward pass; construct DistributedDataParallel with findUnusedParameters: true if they are unused on purpose", strings.Join(unused, ", "))
		default:
			if firstStatic {
				for _, b := range d.buckets {
					for pos, ok := range b.ready {
						if !ok {
							d.staticUnused = append(d.staticUnused, b.param[pos])
						}
					}
				}
			}
			for _, b := range d.buckets[d.next:] {
				for pos, ok := range b.ready {
					if !ok {
						if err := d.stage(b, pos); err != nil && d.err == nil {
							d.err = err
						}
					}
				}
			}
			if !d.rebuilt {
				for i := range d.params {
					if !slices.Contains(d.order, i) {
						d.order = append(d.order, i)
					}
				}
			}
			d.launchReady()
		}
	}
	for _, b := range d.buckets {
		if b.wait == nil {
			continue
		}
		tr, rank := d.rt.Trace()
		start := tr.Now()
		out, err := b.wait()
		b.wait = nil
		if tr != nil {
			tr.Add(d.traceEvent(rank, "hook wait", b, start))
		}
		if err != nil {
			if d.err == nil {
				d.err = fmt.Errorf("ddp: bucket %d: %w", b.Index, err)
			}
			continue
		}
		if d.err == nil && !b.reduced {
			d.err = d.unstage(b, out)
		}
	}
	if d.err != nil {
		return d.err
	}
	if d.opts.StaticGraph {
		d.staticKnown = true
	}
	if !d.rebuilt && len(d.order) == len(d.params) {
		// Rebuild the buckets once, in the order the gradients became
		// ready, as PyTorch's reducer does after the first iteration
		// (not with findUnusedParameters: neither does PyTorch 1.13).
		d.rebuilt = true
		if plan := d.rebuiltPlan(d.order); !slices.EqualFunc(plan, d.plan(), slices.Equal) {
			d.err = d.build(plan)
		}
		d.order = nil
	}
	return d.err
}

// plan is the current buckets' plan.
func (d *DDP) plan() [][]int {
	var plan [][]int
	for _, b := range d.buckets {
		plan = append(plan, b.param)
	}
	return plan
}

// unstage writes the reduced bucket out into the gradients.
func (d *DDP) unstage(b *bucket, out *tensor.Tensor) error {
	sc := d.rt.OpenScope() // the views below
	defer sc.Close()
	if err := out.Err(); err != nil {
		return err
	}
	if out.Numel() != b.Buffer.Numel() || out.DType() != b.Buffer.DType() {
		return fmt.Errorf("ddp: the comm hook returned %v of %d elements for bucket %d of %v of %d", out.DType(), out.Numel(), b.Index, b.Buffer.DType(), b.Buffer.Numel())
	}
	if !tensor.SameMemory(out, b.Buffer) {
		if err := b.Buffer.CopyFrom(out.View(b.Buffer.Numel())); err != nil {
			return err
		}
	}
	for pos, p := range b.Params {
		view := b.Buffer.Narrow(0, b.Offsets[pos], p.Numel()).View(p.Shape()...)
		g := p.GradNoSync()
		switch {
		case g != nil && tensor.SameMemory(g, view):
			view.Release()
		case g == nil && d.opts.GradientAsBucketView:
			// PyTorch's finalize_bucket_dense: grad = bucket_view_in.
			if err := p.SetGrad(view); err != nil {
				return err
			}
		case g == nil:
			if err := p.SetGrad(view.Contiguous().Clone().Persist()); err != nil {
				return err
			}
			view.Release()
		default:
			err := g.CopyFrom(view)
			view.Release()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Join is DDP's uneven-inputs support (model.join()): fn is this rank's
// training loop over its own data. When fn returns, the rank has run out
// of inputs while others may go on; it then takes part in their
// gradient reductions with zeros (the average stays over all ranks, as
// with PyTorch's divide_by_initial_world_size) until every rank has
// joined, and finally every rank takes the parameters of the rank that
// trained longest (the last to join). Every rank must call Join; it needs
// the default all-reduce hook.
func (d *DDP) Join(fn func() error) error { return d.JoinWith(fn, JoinOptions{}) }

// JoinOptions are PyTorch's Join context's.
type JoinOptions struct {
	// ThrowOnEarlyTermination: the first rank that runs out of inputs
	// stops every rank, each with ErrEarlyTermination (at its next
	// iteration), instead of shadowing the others' iterations.
	ThrowOnEarlyTermination bool
}

// ErrEarlyTermination is what Join returns on every rank when one ran out
// of inputs under ThrowOnEarlyTermination.
var ErrEarlyTermination = errors.New("ddp: join: at least one rank exhausted its inputs; stopping every rank (throwOnEarlyTermination)")

// checkNoRankEnded waits for an iteration's announcement and fails if a
// rank announced that it ended.
func (d *DDP) checkNoRankEnded(count *tensor.Tensor, w *dist.Work) error {
	if err := w.Wait(); err != nil {
		return fmt.Errorf("ddp: join: %w", err)
	}
	n, err := count.Item()
	if err != nil {
		return err
	}
	if int(n) < d.pg.Size() {
		return ErrEarlyTermination
	}
	return nil
}

// JoinWith is Join with options.
func (d *DDP) JoinWith(fn func() error, opts JoinOptions) error {
	if d.custom {
		return fmt.Errorf("ddp: join supports the default all-reduce hook only")
	}
	d.joining, d.throwOnEarlyEnd = true, opts.ThrowOnEarlyTermination
	defer func() { d.joining, d.throwOnEarlyEnd = false, false }()
	if err := fn(); err != nil {
		return err
	}
	if err := d.Finalize(); err != nil {
		return err
	}
	count := d.rt.Zeros(dtype.Int64, 1).Persist()
	defer count.Release()
	if opts.ThrowOnEarlyTermination {
		// Tell the ranks still training, at their next iteration, then
		// stop with them.
		if err := d.pg.AllReduce(count, dist.Sum).Wait(); err != nil {
			return fmt.Errorf("ddp: join: %w", err)
		}
		return ErrEarlyTermination
	}
	for {
		// Every rank still training announces its iteration with a 1.
		if err := count.Zero(); err != nil {
			return err
		}
		if err := d.pg.AllReduce(count, dist.Sum).Wait(); err != nil {
			return fmt.Errorf("ddp: join: %w", err)
		}
		n, err := count.Item()
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		// Shadow the iteration: every bucket's all-reduce, with zeros.
		for _, b := range d.buckets {
			if err := d.buffer(b).Zero(); err != nil {
				return err
			}
			if err := d.pg.AllReduce(b.Buffer, dist.Sum).Wait(); err != nil {
				return fmt.Errorf("ddp: join: bucket %d: %w", b.Index, err)
			}
		}
		if d.joinStep != nil {
			for _, b := range d.buckets {
				if err := d.unstage(b, b.Buffer); err != nil {
					return err
				}
			}
			if err := d.joinStep(); err != nil {
				return fmt.Errorf("ddp: join: %w", err)
			}
		}
	}
	return d.syncFromLastJoiner()
}

// syncFromLastJoiner broadcasts the parameters of the rank that ran the
// most synchronised iterations (the highest such rank) to every rank.
func (d *DDP) syncFromLastJoiner() error {
	sc := d.rt.OpenScope()
	defer sc.Close()
	most := d.rt.FromInt64s([]int64{int64(d.iters)}, 1)
	if err := d.pg.AllReduce(most, dist.Max).Wait(); err != nil {
		return err
	}
	m, err := most.Item()
	if err != nil {
		return err
	}
	me := int64(-1)
	if int64(d.iters) == int64(m) {
		me = int64(d.pg.Rank())
	}
	last := d.rt.FromInt64s([]int64{me}, 1)
	if err := d.pg.AllReduce(last, dist.Max).Wait(); err != nil {
		return err
	}
	root, err := last.Item()
	if err != nil {
		return err
	}
	var works []*dist.Work
	for _, p := range d.params {
		works = append(works, d.pg.Broadcast(p.Tensor, int(root)))
	}
	for _, w := range works {
		if err := w.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// AllReduceHook is PyTorch's allreduce_hook: the bucket divided by the
// number of ranks, then summed across them, in place. A DDP without a
// registered hook computes the average with one pass less, and with a
// multiplication by the reciprocal where this divides, as PyTorch's
// reducer does (see stage; the same bits for a power-of-two world).
func AllReduceHook(pg dist.ProcessGroup) CommHook {
	return func(b *Bucket) func() (*tensor.Tensor, error) {
		// bucket.buffer().div_(world_size): a true division, as PyTorch's
		// CPU kernel divides by a number.
		if err := b.Buffer.DivScalarInPlace(float64(pg.Size())); err != nil {
			return func() (*tensor.Tensor, error) { return nil, err }
		}
		w := pg.AllReduce(b.Buffer, dist.Sum)
		return func() (*tensor.Tensor, error) { return b.Buffer, w.Wait() }
	}
}

// allReduceSum is the reduction of a DDP without a registered hook: the
// gradients were divided on their way into the bucket (stage), so it only
// sums the buckets across ranks, as PyTorch's reducer does then.
func allReduceSum(pg dist.ProcessGroup) CommHook {
	return func(b *Bucket) func() (*tensor.Tensor, error) {
		w := pg.AllReduce(b.Buffer, dist.Sum)
		return func() (*tensor.Tensor, error) { return b.Buffer, w.Wait() }
	}
}

// CompressHook wraps hook so that it communicates the bucket in dt
// (float16 or bfloat16) and decompresses the result: PyTorch's
// fp16_compress_wrapper and bf16_compress_wrapper.
func CompressHook(dt dtype.DType, hook CommHook) CommHook {
	return func(b *Bucket) func() (*tensor.Tensor, error) {
		half := b.Buffer.To(dt).Persist()
		if err := half.Err(); err != nil {
			return func() (*tensor.Tensor, error) { return nil, err }
		}
		compressed := *b
		compressed.Buffer = half
		wait := hook(&compressed)
		return func() (*tensor.Tensor, error) {
			defer half.Release()
			out, err := wait()
			if err != nil {
				return nil, err
			}
			return b.Buffer, b.Buffer.CopyFrom(out)
		}
	}
}

// FP16CompressHook is PyTorch's fp16_compress_hook: the all-reduce hook
// over the bucket in float16.
func FP16CompressHook(pg dist.ProcessGroup) CommHook {
	return CompressHook(dtype.Float16, AllReduceHook(pg))
}

// BF16CompressHook is PyTorch's bf16_compress_hook.
func BF16CompressHook(pg dist.ProcessGroup) CommHook {
	return CompressHook(dtype.BFloat16, AllReduceHook(pg))
}
