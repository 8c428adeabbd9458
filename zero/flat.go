package zero

import (
	"fmt"
	"sync/atomic"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// flatLayout is the flat partition: each group's parameters, in reverse
// order (the order backward produces their gradients), are laid out one
// after another in buckets of at most BucketCapMB; a bucket is padded to a
// multiple of the world size and cut into one equal slice per rank. A
// rank updates the parts of the parameters inside its slice ("pieces",
// each with its own optimizer state) and the slices are all-gathered: one
// collective per bucket and a balance no whole-parameter partition gets.
type flatLayout struct {
	z       *Optimizer
	buckets []*flatBucket

	// Stage 2: the gradients are reduce-scattered bucket by bucket during
	// backward, launched in bucket order as buckets fill.
	where   map[*tensor.Tensor][2]int // parameter → bucket, position
	removes []func()
	sync    bool // false while gradients accumulate locally (SetRequireSync)
	active  bool // a backward pass has staged gradients not yet stepped on
	reduced bool // ClipGradNorm or UnscaleGrads already finished the pass this step
	clipped bool // ClipGradNorm ran this step
	next    int  // the next bucket to launch
	err     error
	// sched runs Options.Schedule: it steps and all-gathers the buckets
	// during backward, told of their launches (schedule.go).
	sched *flatSchedule

	// Stage 3 (stage3.go): the units and which one each parameter is in;
	// the order of their forwards, recorded in the first step (ordered
	// once that step is done).
	units   []*Unit
	unitOf  map[*tensor.Tensor]int
	order   []*Unit
	ordered bool

	inflight []*flatBucket // launched reduce-scatters, oldest first (bound)

	// Offload under stage 3: closed when the step running on the host
	// has ended (nil: none runs).
	hostDone       chan struct{}
	hostStateBytes atomic.Int64 // hostBytes as the last host step left it
}

type flatBucket struct {
	index   int // in flatLayout.buckets
	params  []*tensor.Tensor
	offsets []int // of each parameter in the bucket, in elements
	numel   int   // padded to a multiple of the world size
	slice   int   // numel / world size
	buf     *tensor.Tensor
	pieces  []*piece // this rank's

	// Stage 3: the unit the bucket belongs to, and this rank's slice of
	// the parameters, kept while buf's memory is given back.
	unit  *Unit
	shard *tensor.Tensor

	// Offload: the host's master copy of this rank's slice (offload.go);
	// under stage 3, while the host steps the slice, a channel closed
	// when it is back on the device, with the step's error (hoststep.go).
	host    *offloaded
	stepped chan struct{}
	stepErr error

	// Stage 2.
	ready     []bool
	pending   int
	launched  bool           // its reduce-scatter was issued in this pass
	fresh     bool           // its one parameter had no gradient when this pass began (takeGrad)
	grads     *tensor.Tensor // the full gradients, from backward to their reduce-scatter
	gradShard *tensor.Tensor // this rank's slice of the averaged gradients
	scatter   *dist.Work
}

// piece is the part of one parameter inside one rank's slice of a bucket.
type piece struct {
	param *tensor.Tensor
	group int
	at    int // offset in the flattened parameter
	n     int
	in    int // offset in the rank's slice
	state *optim.State
}

// addGroup lays out group gi's parameters in new buckets: under stage 3
// one per unit that has parameters of the group, whatever its size.
func (f *flatLayout) addGroup(gi int) error {
	if f.units != nil {
		return f.addUnitBuckets(gi)
	}
	z := f.z
	params := z.Groups[gi].Params
	capBytes := int(z.opts.BucketCapMB * (1 << 20))
	var cur []*tensor.Tensor
	bytes := 0
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		if _, err := f.newBucket(cur, gi, nil); err != nil {
			return err
		}
		cur, bytes = nil, 0
		return nil
	}
	for i := len(params) - 1; i >= 0; i-- {
		p := params[i]
		size := p.Numel() * p.DType().Size()
		if size >= capBytes {
			// A parameter of the cap's size or more gets a bucket of
			// its own (DeepSpeed closes a bucket before a gradient that
			// would overflow it): in a bucket with others, their
			// staged gradients would wait in a buffer of its size for
			// its gradient, which in a tied embedding is final only at
			// the end of backward; alone, it is also all-gathered
			// straight into the parameter.
			if err := flush(); err != nil {
				return err
			}
		}
		cur = append(cur, p)
		bytes += size
		if bytes >= capBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// newBucket lays params out one after another in a new bucket of group
// gi (of unit u under stage 3), padded to a multiple of the world size, and
// attaches it.
func (f *flatLayout) newBucket(params []*tensor.Tensor, gi int, u *Unit) (*flatBucket, error) {
	z := f.z
	n := z.pg.Size()
	b := &flatBucket{index: len(f.buckets), params: params, unit: u}
	total := 0
	for _, p := range params {
		b.offsets = append(b.offsets, total)
		total += p.Numel()
	}
	b.slice = (total + n - 1) / n
	b.numel = b.slice * n
	b.pieces = b.piecesOf(z.pg.Rank())
	for _, pc := range b.pieces {
		pc.group = gi
	}
	if err := f.attach(b); err != nil {
		return nil, err
	}
	f.buckets = append(f.buckets, b)
	return b, nil
}

// piecesOf cuts rank r's slice of the bucket at parameter boundaries.
func (b *flatBucket) piecesOf(r int) []*piece {
	lo, hi := r*b.slice, (r+1)*b.slice
	var out []*piece
	for i, p := range b.params {
		start, end := b.offsets[i], b.offsets[i]+p.Numel()
		s, e := max(start, lo), min(end, hi)
		if s < e {
			out = append(out, &piece{param: p, at: s - start, n: e - s, in: s - lo})
		}
	}
	return out
}

// attach gives a new bucket its buffers: the flat parameter buffer the
// parameters become views of (ParametersAsBucketView), and under stage 2
// the gradient slice and the gradient-ready hooks.
func (f *flatLayout) attach(b *flatBucket) error {
	z := f.z
	sc := z.rt.OpenScope() // the views below
	defer sc.Close()
	dt := b.params[0].DType()
	if z.opts.ShardsParameters() {
		if err := f.shardBucket(b); err != nil {
			return err
		}
	} else if z.opts.ParametersAsBucketView {
		b.buf = z.rt.Zeros(dt, b.numel).Persist()
		if err := b.buf.Err(); err != nil {
			return err
		}
		for i, p := range b.params {
			view := b.buf.Narrow(0, b.offsets[i], p.Numel())
			err := view.View(p.Shape()...).CopyFrom(p)
			if err == nil {
				err = p.SetData(view)
			}
			view.Release()
			if err != nil {
				return fmt.Errorf("zero: parameters as bucket view: %w", err)
			}
		}
	}
	if z.opts.ShardsGradients() {
		b.gradShard = z.rt.Zeros(dt, b.slice).Persist()
		b.ready = make([]bool, len(b.params))
		if f.where == nil {
			f.where = map[*tensor.Tensor][2]int{}
		}
		bi := len(f.buckets)
		for i, p := range b.params {
			f.where[p] = [2]int{bi, i}
			f.removes = append(f.removes, p.OnGradReady(f.ready))
		}
	}
	return nil
}

// ready is stage 2's gradient-ready hook: p's gradient for this backward
// pass is final. It moves into the bucket (p's own gradient is dropped,
// so that the full gradients do not outlive their reduce-scatter), and
// full buckets are launched.
func (f *flatLayout) ready(p *tensor.Tensor) {
	if !f.sync || f.err != nil {
		return
	}
	if !f.active {
		f.start(p)
	}
	w := f.where[p]
	b := f.buckets[w[0]]
	if b.ready[w[1]] {
		f.err = fmt.Errorf("zero: %s got a gradient twice before a step (use setRequireSync(false) to accumulate gradients locally)", paramLabel(p, f.z.index[p]))
		return
	}
	if f.takeGrad(b, p) {
		b.ready[w[1]] = true
		b.pending--
	} else if err := f.stage(b, w[1], p.GradNoSync()); err != nil {
		f.err = err
		return
	}
	if err := p.SetGrad(nil); err != nil {
		f.err = err
		return
	}
	f.launchReady()
	if f.err == nil && b.unit != nil && b.pending == 0 {
		f.err = b.unit.backwardDone()
	}
}

// retire waits for bucket b's reduce-scatter, if one is in flight (a
// failure fails the pass), and gives back its full gradients; under
// offload the slice, final now, goes down to the host while backward goes
// on (offload.go). Retiring a bucket twice does nothing more.
func (f *flatLayout) retire(b *flatBucket) {
	if b.scatter != nil {
		if err := b.scatter.Wait(); err != nil && f.err == nil {
			f.err = fmt.Errorf("zero: reduce-scattering gradients: %w", err)
		}
		b.scatter = nil
	}
	b.grads.Release()
	b.grads = nil
	if f.z.opts.Offloads() && f.err == nil {
		f.err = f.sendDown(b)
	}
}

func (f *flatLayout) start(first *tensor.Tensor) {
	f.active = true
	f.next = 0
	f.inflight = f.inflight[:0]
	for _, b := range f.buckets {
		b.launched = false
		clear(b.ready)
		b.pending = len(b.params)
		// Whether the gradient is this pass's alone (takeGrad): the
		// parameter whose hook starts the pass has one already, made
		// now or before; it is not told apart and never taken.
		p := b.params[0]
		b.fresh = len(b.params) == 1 && p != first && p.GradNoSync() == nil
	}
}

// takeGradients turns takeGrad on (tests compare with the copy).
var takeGradients = true

// takeGrad makes parameter p's gradient its bucket's staging buffer
// instead of copying it there, when nothing else can see the difference:
// stages 2 and 3, a bucket of p alone without padding, and a gradient this
// backward pass made from none (b.fresh: ZeRO dropped the last one, no
// pass accumulated under noSync and nobody set one since), which autograd
// hands over contiguous and shared with nobody (a gradient another tensor
// still refers to is copied before it becomes .grad), so dividing it in
// place and reduce-scattering it changes nothing anyone holds and gives
// the copy's values bit for bit. The gradient stays alive through a view
// of it; p's own reference goes with SetGrad(nil).
func (f *flatLayout) takeGrad(b *flatBucket, p *tensor.Tensor) bool {
	g := p.GradNoSync()
	if !takeGradients || !b.fresh || b.grads != nil || g == nil || g.Err() != nil || p.Numel() != b.numel || g.DType() != p.DType() ||
		!g.IsContiguous() || g.Offset() != 0 || g.StorageBytes() != g.Numel()*g.DType().Size() {
		return false
	}
	flat := g.View(-1).Persist()
	if flat.Err() != nil {
		return false
	}
	b.grads = flat
	return true
}

// stage copies parameter i's gradient (nil: zeros) into the bucket.
func (f *flatLayout) stage(b *flatBucket, i int, g *tensor.Tensor) error {
	sc := f.z.rt.OpenScope() // the views below
	defer sc.Close()
	if b.grads == nil {
		b.grads = f.z.rt.Zeros(b.params[0].DType(), b.numel).Persist()
	}
	p := b.params[i]
	view := b.grads.Narrow(0, b.offsets[i], p.Numel())
	defer view.Release()
	var err error
	if g != nil {
		err = view.View(p.Shape()...).CopyFrom(g)
	} else {
		err = view.Zero()
	}
	if err != nil {
		return fmt.Errorf("zero: gradient of %s: %w", paramLabel(p, f.z.index[p]), err)
	}
	b.ready[i] = true
	b.pending--
	return nil
}

// launchReady reduce-scatters full buckets in bucket order, so that every
// rank issues the same collectives in the same order. The gradients are
// divided by the world size first, as DDP's all-reduce hook does.
//
// With a schedule (stage 2), its IterationBegin comes before bucket 0 is
// launched, BucketReady(i) after bucket i is, and BackwardEnd and the end
// of the iteration after the last one (flatSchedule).
//
// Under stage 3 a bucket is a unit's, and backward finishes the units in
// the reverse of their forward order, which construction does not know:
// each full bucket is launched as soon as it is full, in bucket order
// among those full at that moment. Every rank runs the same backward, so
// the same buckets fill at the same points and the order still matches.
func (f *flatLayout) launchReady() {
	z := f.z
	for i, b := range f.buckets {
		if b.launched || b.pending != 0 {
			if f.units == nil && !b.launched {
				return // stage 2: strictly in bucket order
			}
			continue
		}
		if f.sched != nil && i == 0 {
			f.sched.begin()
		}
		if err := b.grads.MulScalarInPlace(1 / float64(z.pg.Size())); err != nil {
			f.err = err
			return
		}
		b.scatter = z.pg.ReduceScatter(b.gradShard, b.grads, dist.Sum)
		b.launched = true
		f.next = max(f.next, i+1)
		f.inflight = append(f.inflight, b)
		if f.sched != nil {
			f.sched.launched(i)
		}
		f.bound()
		if f.sched != nil && i == len(f.buckets)-1 {
			f.sched.end()
		}
	}
}

// maxScattering bounds the reduce-scatters in flight during backward: a
// launch waits for the oldest beyond it, whose full gradients then go back
// (and, under offload, its slice goes down to the host), so that memory
// stays at a few buckets' gradients however long backward is.
const maxScattering = 2

// bound waits for the oldest reduce-scatters while more than maxScattering
// are in flight, and gives back their full gradients (retire). A schedule
// is told of each (BucketReduced) right after, unless it waited for it
// already.
//
// The bound, never a reduce-scatter seen completed, decides when a
// bucket's gradients go back, so that the events come at the same point on
// every rank and the memory of backward is the same whatever the timing:
// exactly maxScattering buckets' gradients in flight and the one filling.
// Freeing a bucket whose reduce-scatter happened to be done already (as
// this once did) made the peak depend on how fast the other ranks were: a
// rank slowed by a loaded machine peaked a bucket lower, and a memory cap
// (--max-memory) measured on such a run failed on the next one.
func (f *flatLayout) bound() {
	for len(f.inflight) > maxScattering {
		b := f.inflight[0]
		f.inflight = f.inflight[1:]
		if f.sched != nil {
			f.sched.wait(b.index)
		} else {
			f.retire(b)
		}
	}
	if f.sched != nil {
		f.sched.tell()
	}
}

// SetRequireSync turns stage 2's gradient reduction off (gradients
// accumulate in the parameters' .grad over several backward passes) and
// back on: the next backward pass then reduces the accumulated gradients.
// It is DDP's noSync for an optimizer that reduces gradients itself.
func (z *Optimizer) SetRequireSync(on bool) {
	if z.flat != nil {
		z.flat.sync = on
	}
}

// Close removes stage 2's gradient hooks and frees the optimizer's
// buffers; the parameters keep their values.
func (z *Optimizer) Close() {
	if f := z.flat; f != nil {
		f.waitHost()
		for _, r := range f.removes {
			r()
		}
		f.removes = nil
		if f.sched != nil {
			_ = f.sched.finish() // the all-gathers write the parameters
		}
		for _, b := range f.buckets {
			if b.scatter != nil {
				_ = b.scatter.Wait()
			}
			b.grads.Release()
			b.gradShard.Release()
			b.grads, b.gradShard = nil, nil
		}
	}
}

// step is the flat partition's Step: each rank updates its pieces with
// their gradients (stage 1: the parameters' gradients, averaged by DDP;
// stage 2: its slice of the reduce-scattered gradients), then every
// bucket's slices are all-gathered, bucket by bucket so that one bucket's
// all-gather runs while the next is updated.
//
// The slices are gathered in place when the parameters are views of the
// bucket (ParametersAsBucketView) or the bucket is one parameter without
// padding; otherwise through a scratch buffer of the bucket's size, one at
// a time: the previous bucket's gather is finished (copied back into its
// parameters, its buffer freed) only after the next bucket is updated,
// just before that bucket's own buffer is made. So the step never holds a
// second copy of the model, only one bucket's.
func (f *flatLayout) step() (err error) {
	z := f.z
	if f.sched != nil && f.sched.inEvent > 0 {
		return fmt.Errorf("zero: step() inside an event of schedule %v: a schedule steps through its context (step(i), allGather(i)), and step() comes after backward", f.sched.sched)
	}
	if err := f.settle(); err != nil {
		return err
	}
	sc := z.rt.OpenScope()
	defer sc.Close()
	if z.opts.ShardsGradients() {
		f.clipped = false
		if f.reduced {
			f.reduced = false
		} else if err := f.finishPass(); err != nil {
			if f.sched != nil {
				_ = f.sched.finish() // its all-gathers are waited for all the same
			}
			return err
		}
	}
	if f.sched != nil {
		// The schedule stepped and all-gathered every bucket when the
		// last one was launched (in backward, or in finishPass above).
		return f.sched.finish()
	}
	if z.opts.ShardsParameters() && z.opts.Offloads() {
		return f.startHostStep()
	}
	var inflight []*gathering // oldest first
	var gerr error            // the first gather's failure
	finishAll := func() {
		for _, g := range inflight {
			if err := g.finish(); err != nil && gerr == nil {
				gerr = err
			}
		}
		inflight = inflight[:0]
	}
	z.rt.NoGrad(func() {
		defer finishAll()
		for _, b := range f.buckets {
			if err = f.update(b); err != nil {
				return
			}
			if b.shard != nil {
				continue // stage 3: the next gather sends the slices
			}
			g := f.inPlaceGather(b)
			if g == nil {
				finishAll() // its scratch buffer goes back first
				if g, err = f.scratchGather(b); err != nil {
					return
				}
			}
			inflight = append(inflight, g)
		}
	})
	if err == nil {
		err = gerr
	}
	return err
}

// gathering is one bucket's all-gather of the updated slices in flight,
// and, when the parameters are separate tensors, the scratch buffer it
// gathers into and copies back from.
type gathering struct {
	b       *flatBucket
	work    *dist.Work
	scratch *tensor.Tensor
	in      *tensor.Tensor // this rank's slice of scratch

	// wait's: finish ran (or runs), and its error.
	done bool
	err  error
}

// wait finishes the gathering once, with gradients off (it writes the
// parameters), and returns finish's error every time. Under a schedule
// both the parameters' next use (their in-flight mark) and Step call it;
// a call during finish's own writes to the parameters, which wait for
// their marks, returns at once.
func (g *gathering) wait(rt *tensor.Runtime) error {
	if !g.done {
		g.done = true
		rt.NoGrad(func() { g.err = g.finish() })
	}
	return g.err
}

// finish waits for the all-gather, copies the parameters out of the
// scratch buffer and frees it.
func (g *gathering) finish() error {
	err := g.work.Wait()
	if err != nil {
		err = fmt.Errorf("zero: all-gathering the updated parameters: %w", err)
	}
	if g.scratch == nil {
		return err
	}
	defer func() {
		g.in.Release()
		g.scratch.Release()
	}()
	if err != nil {
		return err
	}
	b := g.b
	sc := g.scratch.Runtime().OpenScope() // the views below
	defer sc.Close()
	for i, p := range b.params {
		if err := p.View(-1).CopyFrom(g.scratch.Narrow(0, b.offsets[i], p.Numel())); err != nil {
			return err
		}
	}
	return nil
}

// update updates this rank's pieces of bucket b (on the host under
// offload).
func (f *flatLayout) update(b *flatBucket) error {
	z := f.z
	if z.opts.Offloads() {
		// The host steps the slice and sends it back.
		return f.offloadStep(b, z.Groups)
	}
	sc := z.rt.OpenScope() // the views below
	defer sc.Close()
	for _, pc := range b.pieces {
		var g *tensor.Tensor
		if z.opts.ShardsGradients() {
			g = b.gradShard.Narrow(0, pc.in, pc.n)
		} else {
			full := pc.param.Grad()
			if full == nil {
				continue
			}
			if err := full.Err(); err != nil {
				return err
			}
			g = full.Reshape(-1).Narrow(0, pc.at, pc.n)
		}
		var p *tensor.Tensor
		if b.shard != nil {
			p = b.shard.Narrow(0, pc.in, pc.n) // stage 3: the next gather sends it
		} else {
			p = pc.param.View(-1).Narrow(0, pc.at, pc.n)
		}
		states := []*optim.State{pc.state}
		if err := optim.Update(z.kind, z.Groups[pc.group], []*tensor.Tensor{p}, []*tensor.Tensor{g}, states); err != nil {
			return fmt.Errorf("zero: %s: %w", paramLabel(pc.param, z.index[pc.param]), err)
		}
		pc.state = states[0]
	}
	return nil
}

// inPlaceGather starts the all-gather of bucket b's slices straight into
// the parameters' memory when that memory is the bucket's layout: the
// parameters view the bucket's buffer (ParametersAsBucketView), or the
// bucket is one parameter without padding. Otherwise it returns nil.
func (f *flatLayout) inPlaceGather(b *flatBucket) *gathering {
	z := f.z
	sc := z.rt.OpenScope() // the views below (the collective holds the memory)
	defer sc.Close()
	me := z.pg.Rank()
	flat := b.buf
	if flat == nil {
		if p := b.params[0]; len(b.params) == 1 && p.Numel() == b.numel {
			flat = p.View(-1)
		} else {
			return nil
		}
	}
	return &gathering{b: b, work: z.pg.AllGather(flat, flat.Narrow(0, me*b.slice, b.slice))}
}

// scratchGather starts the all-gather of bucket b's slices into a scratch
// buffer of the bucket's size, this rank's pieces copied in; finish copies
// the parameters out.
func (f *flatLayout) scratchGather(b *flatBucket) (*gathering, error) {
	z := f.z
	sc := z.rt.OpenScope() // the views below
	defer sc.Close()
	g := &gathering{b: b, scratch: z.rt.Empty(b.params[0].DType(), b.numel).Persist()}
	g.in = g.scratch.Narrow(0, z.pg.Rank()*b.slice, b.slice).Persist()
	for _, pc := range b.pieces {
		if err := g.in.Narrow(0, pc.in, pc.n).CopyFrom(pc.param.View(-1).Narrow(0, pc.at, pc.n)); err != nil {
			g.in.Release()
			g.scratch.Release()
			return nil, err
		}
	}
	g.work = z.pg.AllGather(g.scratch, g.in)
	return g, nil
}

// finishPass ends stage 2's backward pass: parameters that got no
// gradient are reduced as zeros, every reduce-scatter is waited for and
// the full gradients freed.
func (f *flatLayout) finishPass() error {
	if !f.active {
		if f.err != nil {
			return f.err
		}
		return fmt.Errorf("zero: step without a backward pass since the last step (stage 2 reduces the gradients as backward produces them)")
	}
	f.active = false
	if f.err == nil {
		for _, b := range f.buckets {
			if b.launched {
				continue
			}
			for i, ok := range b.ready {
				if !ok && f.err == nil {
					f.err = f.stage(b, i, nil)
				}
			}
		}
		f.launchReady()
	}
	for _, b := range f.buckets {
		f.retire(b)
	}
	for _, u := range f.units {
		if err := u.reshard(); err != nil && f.err == nil {
			f.err = err
		}
	}
	if len(f.order) > 0 {
		f.ordered = true
	}
	err := f.err
	f.err = nil
	return err
}

// memory adds the flat partition's bytes to m.
func (f *flatLayout) memory(m *Memory) {
	for _, b := range f.buckets {
		es := int64(b.params[0].DType().Size())
		m.OwnedParameters += int64(b.slice) * es
		if b.shard != nil {
			m.Parameters += int64(b.slice) * es
		}
		if b.gradShard != nil {
			m.Gradients += int64(b.gradShard.Numel()) * es
		}
		if b.grads != nil {
			m.Gradients += int64(b.grads.Numel()) * es
		}
		if f.z.opts.Offloads() {
			continue // the host's bytes are counted below
		}
		for _, pc := range b.pieces {
			if pc.state != nil {
				m.State += pc.state.Bytes()
			}
		}
	}
	if f.z.opts.Offloads() {
		m.HostState = f.hostBytes()
	}
}
