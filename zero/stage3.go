package zero

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// Stage 3: the parameters are sharded too. Each unit (zero.fullyShard on a
// module: a transformer block, then the model for what is left) has its
// parameters laid out in one flat bucket per parameter group, cut into one
// equal slice per rank as in stage 2; a rank keeps only its slice (shard),
// its slice of the gradients and the optimizer state of that slice. The
// parameters stay the tensors the model and the script hold, as views of
// the bucket's buffer, whose memory exists only while the unit runs:
//
//   - before the unit's forward, the slices are all-gathered into freshly
//     allocated memory (Gather);
//   - after it, the memory is given back (ReshardAfterForward, the
//     default) or kept until backward (FSDP's SHARD_GRAD_OP);
//   - when backward reaches the unit's outputs (a pre-backward hook on the
//     ops that made them), the slices are gathered again, into the same
//     storage, so that what autograd saved in forward is valid again;
//   - as each parameter's gradient is final, it is staged into the
//     bucket's gradients, which are reduce-scattered into the owners'
//     slices as in stage 2; when all of a unit's gradients are staged, its
//     parameters' memory is given back.
//
// The step updates each rank's slices of the parameters (shard) in place;
// the next forward's gather sends them. Only the memory of the units in
// flight is ever whole: 16·P/N bytes of state per rank (fp32 parameters,
// gradients and Adam's two moments) plus the gathered units.

// UnitSpec describes one stage-3 unit.
type UnitSpec struct {
	// Params are the unit's own parameters (not those of units inside it).
	Params []*tensor.Tensor
	// ReshardAfterForward frees the gathered parameters after the unit's
	// forward and gathers them again for its backward; false keeps them
	// from forward to backward (FSDP's SHARD_GRAD_OP; the usual choice for
	// the root, whose backward comes first).
	ReshardAfterForward bool
}

// Unit is one stage-3 unit: its buckets (one per parameter group) and
// whether its parameters are gathered.
type Unit struct {
	f        *flatLayout
	index    int
	spec     UnitSpec
	buckets  []*flatBucket
	gathered bool
	removes  []func() // pre-backward hooks of the current forward

	// A gather in flight (a prefetch): its all-gathers, and the seals
	// to apply once they are done (nil: not sealed).
	inflight []*dist.Work
	seals    []func()
	sealed   bool

	// The start of the forward or backward in progress, for the trace.
	fwdStart, bwdStart time.Time
}

// assignUnits records which unit each parameter is in, from opts.Units.
func (f *flatLayout) assignUnits(units []UnitSpec, params []*tensor.Tensor) error {
	f.unitOf = map[*tensor.Tensor]int{}
	for i, spec := range units {
		f.units = append(f.units, &Unit{f: f, index: i, spec: spec})
		for _, p := range spec.Params {
			if j, ok := f.unitOf[p]; ok && j != i {
				return fmt.Errorf("zero: stage 3: a parameter is in units %d and %d (a parameter shared by two units belongs to the one that contains both)", j, i)
			}
			f.unitOf[p] = i
		}
	}
	for i, p := range params {
		if _, ok := f.unitOf[p]; !ok {
			return fmt.Errorf("zero: stage 3: parameter %d (shape %v) is in no unit: call zero.fullyShard on the module that holds it (the model itself last)", i, p.Shape())
		}
	}
	return nil
}

// checkUnitsAgree makes sure every rank marked the same units over the
// same parameters (each unit's parameter count and elements), so that a
// script that differs between ranks fails here, on every rank, naming the
// unit, rather than in a collective later.
func (f *flatLayout) checkUnitsAgree() error {
	pg := f.z.pg
	if pg.Size() == 1 {
		return nil
	}
	type sig struct{ Params, Numel int }
	mine := make([]sig, len(f.units))
	for i, u := range f.units {
		for _, p := range u.spec.Params {
			mine[i].Params++
			mine[i].Numel += p.Numel()
		}
	}
	payload, err := json.Marshal(mine)
	if err != nil {
		return err
	}
	all, err := pg.GatherObject(payload, 0)
	if err != nil {
		return fmt.Errorf("zero: stage 3: comparing the units across ranks: %w", err)
	}
	joined, _ := json.Marshal(all) // nil on the other ranks
	if joined, err = pg.BroadcastObject(joined, 0); err != nil {
		return fmt.Errorf("zero: stage 3: comparing the units across ranks: %w", err)
	}
	var raw [][]byte
	if err := json.Unmarshal(joined, &raw); err != nil {
		return fmt.Errorf("zero: stage 3: comparing the units across ranks: %w", err)
	}
	sigs := make([][]sig, len(raw))
	for r, b := range raw {
		if err := json.Unmarshal(b, &sigs[r]); err != nil {
			return fmt.Errorf("zero: stage 3: comparing the units across ranks: %w", err)
		}
	}
	for r := 1; r < len(sigs); r++ {
		if len(sigs[r]) != len(sigs[0]) {
			return fmt.Errorf("zero: stage 3: rank %d marked %d units and rank 0 %d: every rank must call zero.fullyShard on the same modules", r, len(sigs[r]), len(sigs[0]))
		}
		for i := range sigs[0] {
			if sigs[r][i] != sigs[0][i] {
				return fmt.Errorf("zero: stage 3: unit %d has %d parameters (%d elements) on rank %d and %d (%d elements) on rank 0: every rank must mark the same units over the same model", i, sigs[r][i].Params, sigs[r][i].Numel, r, sigs[0][i].Params, sigs[0][i].Numel)
			}
		}
	}
	return nil
}

// addUnitBuckets lays out group gi's parameters in one bucket per unit,
// in reverse order within a unit (the order backward makes gradients),
// but for a parameter of the bucket cap or more, which gets a bucket of its
// own, as under stage 2: its reduce-scatter then reads its gradient
// itself (takeGrad) rather than a copy beside it — GPT-2's tied embedding,
// whose gradient and its copy were the peak of backward.
func (f *flatLayout) addUnitBuckets(gi int) error {
	z := f.z
	capBytes := int(z.opts.BucketCapMB * (1 << 20))
	for _, u := range f.units {
		var ps []*tensor.Tensor
		params := z.Groups[gi].Params
		for i := len(params) - 1; i >= 0; i-- {
			p := params[i]
			j, ok := f.unitOf[p]
			if !ok {
				return fmt.Errorf("zero: stage 3: %s is in no unit: call zero.fullyShard on the module that holds it", paramLabel(p, z.index[p]))
			}
			if j == u.index {
				ps = append(ps, p)
			}
		}
		var rest []*tensor.Tensor
		for _, p := range ps {
			if p.Numel()*p.DType().Size() < capBytes {
				rest = append(rest, p)
				continue
			}
			b, err := f.newBucket([]*tensor.Tensor{p}, gi, u)
			if err != nil {
				return err
			}
			u.buckets = append(u.buckets, b)
		}
		if len(rest) == 0 {
			continue
		}
		b, err := f.newBucket(rest, gi, u)
		if err != nil {
			return err
		}
		u.buckets = append(u.buckets, b)
	}
	return nil
}

// shardBucket keeps this rank's slice of a new bucket's parameters and
// makes the parameters views of a bucket without memory: from here on they
// exist between their unit's gathers and reshards. The slice is copied
// from each parameter's part in it, so that no rank ever holds the whole
// bucket; a parameter built lazily (zero.init: tensor.Lazy) makes only
// that part of its values.
func (f *flatLayout) shardBucket(b *flatBucket) error {
	z := f.z
	dt := b.params[0].DType()
	b.shard = z.rt.Zeros(dt, b.slice).Persist() // the padding stays zero
	if err := b.shard.Err(); err != nil {
		return fmt.Errorf("zero: stage 3: %w", err)
	}
	for _, pc := range b.pieces {
		dst := b.shard.Narrow(0, pc.in, pc.n)
		err := pc.param.CopyRangeTo(dst, pc.at)
		dst.Release()
		if err != nil {
			return fmt.Errorf("zero: stage 3: %s: %w", paramLabel(pc.param, z.index[pc.param]), err)
		}
	}
	b.buf = z.rt.Unallocated(dt, b.unit.why(), b.numel).Persist()
	if err := b.buf.Err(); err != nil {
		return err
	}
	for i, p := range b.params {
		view := b.buf.Narrow(0, b.offsets[i], p.Numel())
		err := p.SetData(view)
		view.Release()
		if err != nil {
			return fmt.Errorf("zero: stage 3: %w", err)
		}
	}
	return nil
}

func (u *Unit) why() string {
	return fmt.Sprintf("it is a parameter of zero unit %d, which ZeRO stage 3 shards: its values exist only during the unit's forward and backward (read the model's weights with the optimizer's gathered state dict)", u.index)
}

// Unit returns stage 3's unit i, or nil.
func (z *Optimizer) Unit(i int) *Unit {
	if z.flat == nil || i < 0 || i >= len(z.flat.units) {
		return nil
	}
	return z.flat.units[i]
}

// gather all-gathers the unit's parameters into fresh memory and waits
// (nothing to do when they are gathered). sealed says that the values are
// those of the forward pass whose graph backward is about to use.
func (u *Unit) gather(sealed bool) error {
	if err := u.startGather(sealed); err != nil {
		return err
	}
	return u.finishGather()
}

// startGather issues the unit's all-gathers without waiting for them.
func (u *Unit) startGather(sealed bool) error {
	if u.gathered || u.inflight != nil {
		return nil
	}
	z := u.f.z
	for _, b := range u.buckets { // an offloaded step may still run on the host
		if err := u.f.waitStepped(b); err != nil {
			return err
		}
	}
	me := z.pg.Rank()
	sc := z.rt.OpenScope() // the views below; the works keep what they use
	defer sc.Close()
	var seals []func()
	for _, b := range u.buckets {
		seal, err := b.buf.RestoreMemory()
		if err != nil {
			return fmt.Errorf("zero: gathering unit %d: %w", u.index, err)
		}
		seals = append(seals, seal)
		if err := b.buf.Narrow(0, me*b.slice, b.slice).CopyFrom(b.shard); err != nil {
			return fmt.Errorf("zero: gathering unit %d: %w", u.index, err)
		}
	}
	for _, b := range u.buckets {
		u.inflight = append(u.inflight, z.pg.AllGather(b.buf, b.buf.Narrow(0, me*b.slice, b.slice)))
	}
	u.seals, u.sealed = seals, sealed
	return nil
}

// finishGather waits for the unit's all-gathers in flight.
func (u *Unit) finishGather() error {
	if u.inflight == nil {
		return nil
	}
	works := u.inflight
	u.inflight = nil
	if err := waitAll(works, fmt.Sprintf("all-gathering the parameters of unit %d", u.index)); err != nil {
		return err
	}
	if u.sealed {
		for _, s := range u.seals {
			s()
		}
	}
	u.seals = nil
	u.gathered = true
	return nil
}

// reshard gives the unit's gathered memory back.
func (u *Unit) reshard() error {
	if err := u.finishGather(); err != nil {
		return err
	}
	if !u.gathered {
		return nil
	}
	for _, b := range u.buckets {
		if err := b.buf.FreeMemory(u.why()); err != nil {
			return fmt.Errorf("zero: resharding unit %d: %w", u.index, err)
		}
	}
	u.gathered = false
	return nil
}

// BeforeForward gathers the unit's parameters for its forward, and
// prefetches the next unit's (in the order of the first forward).
func (u *Unit) BeforeForward() error {
	f := u.f
	if err := u.gather(false); err != nil {
		return err
	}
	u.fwdStart = time.Now()
	k := f.forwardPosition(u)
	if k+1 < len(f.order) {
		return f.prefetch(f.order[k+1], false)
	}
	return nil
}

// AfterForward ends the unit's forward: the parameters are freed (under
// ReshardAfterForward) and, when autograd recorded the forward, gathered
// again when backward reaches outputs, the tensors the unit returned.
func (u *Unit) AfterForward(outputs []*tensor.Tensor) error {
	u.span("forward", u.fwdStart)
	u.fwdStart = time.Time{}
	for _, r := range u.removes {
		r()
	}
	u.removes = nil
	for _, out := range outputs {
		if out == nil || !out.RequiresGrad() || out.IsLeaf() {
			continue
		}
		remove, err := out.OnBackward(u.beforeBackward)
		if err != nil {
			return fmt.Errorf("zero: unit %d: %w", u.index, err)
		}
		u.removes = append(u.removes, remove)
	}
	if u.spec.ReshardAfterForward {
		return u.reshard()
	}
	return nil
}

// beforeBackward is the pre-backward hook: the values forward used come
// back (sealed), once per pass even when several outputs lead here. A
// gather that fails (out of memory, a failed collective) ends the backward
// pass with its error: the unit's ops would otherwise meet their saved
// tensors without the values.
func (u *Unit) beforeBackward() error {
	f := u.f
	if f.err != nil {
		return f.err
	}
	if err := u.gather(true); err != nil {
		f.err = err
		return err
	}
	u.bwdStart = time.Now()
	// Backward runs the units in reverse forward order: the one before
	// this one comes next.
	if k := slices.Index(f.order, u); k > 0 {
		if err := f.prefetch(f.order[k-1], true); err != nil {
			f.err = err
			return err
		}
	}
	return nil
}

// forwardPosition is u's place in the order of the units' forwards,
// recorded during the first forward pass (every rank runs the same
// model, so the prefetches match across ranks).
func (f *flatLayout) forwardPosition(u *Unit) int {
	if k := slices.Index(f.order, u); k >= 0 {
		return k
	}
	if f.ordered {
		return -1
	}
	f.order = append(f.order, u)
	return len(f.order) - 1
}

// prefetch starts u's gather when fewer than LimitAllGathers units are
// gathered or in flight (sealed: for backward). Units that keep their
// parameters from forward to backward (the root, usually) do not count:
// they are held on purpose, and counting them would stop every prefetch
// inside them.
func (f *flatLayout) prefetch(u *Unit, sealed bool) error {
	limit := f.z.opts.LimitAllGathers
	if limit <= 0 || u.gathered || u.inflight != nil {
		return nil
	}
	busy := 0
	for _, o := range f.units {
		if o.spec.ReshardAfterForward && (o.gathered || o.inflight != nil) {
			busy++
		}
	}
	if busy >= limit {
		return nil
	}
	// The trace shows where the prefetch was issued: when its all-gather
	// runs is up to the scheduler (a comm queue waits for a free core).
	start := time.Now()
	if err := u.startGather(sealed); err != nil {
		return err
	}
	u.span("prefetch", start)
	// Let the comm queue start it now. Its goroutine is ready on this P,
	// but a rank computing without blocking keeps the P for up to a time
	// slice: prefetches started 2.8-4.8 ms (median) into a 10 ms block,
	// and after it ended under load. Yielding starts them within 0.1 ms;
	// on an emulated 1 Gbit/s link gpt.js's stage-3 step went from 270
	// to 229 ms (medians of 3 interleaved runs). DDP's and stage 2's
	// collectives, issued as gradients fill, gained nothing from it.
	runtime.Gosched()
	return nil
}

// backwardDone frees the unit's parameters once every one of its
// gradients is staged (their reduce-scatters may still run: they read the
// gradients, not the parameters).
func (u *Unit) backwardDone() error {
	for _, b := range u.buckets {
		if b.pending != 0 {
			return nil
		}
	}
	u.span("backward", u.bwdStart)
	u.bwdStart = time.Time{}
	return u.reshard()
}

// span records the unit's forward or backward on the trace, when the
// runtime records one.
func (u *Unit) span(what string, start time.Time) {
	rec, rank := u.f.z.rt.Trace()
	if rec == nil || start.IsZero() {
		return
	}
	rec.Add(trace.Event{Rank: rank, Lane: trace.Units, Name: fmt.Sprintf("unit %d %s", u.index, what), Start: start, End: time.Now()})
}

// WithFullParams runs fn with every unit's parameters gathered, then gives
// their memory back (FSDP's summon_full_params): to read, save or load the
// whole model under stage 3. With writeBack, what fn wrote into the
// parameters becomes each rank's slice (a checkpoint loaded into the
// model); every rank must then write the same values. Every rank of the
// group must call it (it gathers). Outside stage 3 it just runs fn.
func (z *Optimizer) WithFullParams(writeBack bool, fn func() error) error {
	if z.flat == nil || len(z.flat.units) == 0 {
		return fn()
	}
	if err := z.settle(); err != nil {
		return err
	}
	sc := z.rt.OpenScope()
	defer sc.Close()
	var was []bool
	for _, u := range z.flat.units {
		was = append(was, u.gathered || u.inflight != nil)
		if err := u.gather(false); err != nil {
			return err
		}
	}
	err := fn()
	me := z.pg.Rank()
	for i, u := range z.flat.units {
		if writeBack && err == nil {
			for _, b := range u.buckets {
				if err = b.shard.CopyFrom(b.buf.Narrow(0, me*b.slice, b.slice)); err != nil {
					break
				}
			}
		}
		if !was[i] {
			if rerr := u.reshard(); err == nil {
				err = rerr
			}
		}
	}
	return err
}
