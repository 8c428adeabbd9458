package mpi

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// kind names a collective.
type kind uint8

const (
	kAllReduce kind = iota
	kBroadcast
	kReduceScatter
	kAllGather
	kAllGatherInto
	kAllToAll
	kBarrier
	kSend
	kRecv
	kBroadcastObject
	kGatherObject
	kNewGroup
)

var kindNames = [...]string{
	kAllReduce: "AllReduce", kBroadcast: "Broadcast", kReduceScatter: "ReduceScatter",
	kAllGather: "AllGather", kAllGatherInto: "AllGatherInto", kAllToAll: "AllToAll",
	kBarrier: "Barrier", kSend: "Send", kRecv: "Recv",
	kBroadcastObject: "BroadcastObject", kGatherObject: "GatherObject", kNewGroup: "NewGroup",
}

func (k kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// traceNames are the collectives' names in traces, as the in-process
// backend (and PyTorch's profiler) spells them.
var traceNames = [...]string{
	kAllReduce: "all_reduce", kBroadcast: "broadcast", kReduceScatter: "reduce_scatter",
	kAllGather: "all_gather", kAllGatherInto: "all_gather_into", kAllToAll: "all_to_all",
	kBarrier: "barrier", kSend: "send", kRecv: "recv",
	kBroadcastObject: "broadcast_object", kGatherObject: "gather_object", kNewGroup: "new_group",
}

var _ dist.ProcessGroup = (*Group)(nil)
var _ dist.CommTimer = (*Group)(nil)

// Group is this process's rank of an MPI communicator (MPI_COMM_WORLD, or
// a subgroup's from NewGroup). It implements dist.ProcessGroup and
// dist.CommTimer. Its calls may come from any goroutine (the ranks' order
// is the order in which they are called); their MPI calls are made by the
// world's communication goroutine, and their Works complete on a
// goroutine of the group, in order (a continuation must not wait for a
// later work of the same group).
type Group struct {
	e     *engine
	comm  uintptr // the MPI_Comm
	id    int     // 0 for the world, then 1, 2, … in the order subgroups are made
	rank  int
	size  int
	ranks []int // world ranks of the members, in group-rank order
	// key names the group alike on all its members, in Leave notices:
	// 0 for the world, then a hash of the parent's key and the number of
	// the NewGroup call (of the parent) that made it.
	key uint64

	seq  uint64 // collectives issued (under e.mu)
	made int    // NewGroup calls (under e.mu)
	// Messages issued to (sends) and from (recvs) each member, by group
	// rank (under e.mu; nil until the first).
	sends, recvs []uint64

	// The communication goroutine's own: collectives waiting to be
	// issued, and those in flight, in issue order.
	pending, inflight []*op
	flying            int64 // bytes of the collectives in flight

	cmu        sync.Mutex
	ready      []*op // completed by MPI, to be finished in order
	completing bool  // a completer goroutine is running
	// lingering: the completer lingers once it has nothing to do
	// (Group.linger), since the last one did not wait long for more.
	lingering bool
	doneAt    time.Time // when the last completer returned

	// reducers keeps the Reducers of the group's reductions by dtype and
	// op for reuse (a reduction may run on a goroutine of its own, so
	// several may be taken at once).
	reducers sync.Map // reducerKey → *sync.Pool of *dist.Reducer
}

type reducerKey struct {
	dt dtype.DType
	op dist.ReduceOp
}

// reducer lends a Reducer of the group's size for dt and op; give it back
// with the function returned.
func (g *Group) reducer(dt dtype.DType, op dist.ReduceOp) (*dist.Reducer, func()) {
	k := reducerKey{dt, op}
	p, ok := g.reducers.Load(k)
	if !ok {
		p, _ = g.reducers.LoadOrStore(k, &sync.Pool{New: func() any { return dist.NewReducer(dt, op, g.size) }})
	}
	pool := p.(*sync.Pool)
	r := pool.Get().(*dist.Reducer)
	return r, func() { pool.Put(r) }
}

// Rank implements dist.ProcessGroup.
func (g *Group) Rank() int { return g.rank }

// Size implements dist.ProcessGroup.
func (g *Group) Size() int { return g.size }

// Ranks are the world ranks of the group's members, in group-rank order.
func (g *Group) Ranks() []int { return slices.Clone(g.ranks) }

// CommTime implements dist.CommTimer: how long the process's groups (the
// world's and its subgroups) have held collectives, from the moment one
// is queued until MPI has completed it, waiting for the other ranks
// included. Messages (Send, Recv) are not counted.
func (g *Group) CommTime() time.Duration { return g.e.commTime() }

// where names this rank in errors: "rank 1", or "rank 3 (rank 1 of group
// 2)" in a subgroup.
func (g *Group) where() string {
	if g.id == 0 {
		return fmt.Sprintf("rank %d", g.e.rank)
	}
	return fmt.Sprintf("rank %d (rank %d of group %d)", g.e.rank, g.rank, g.id)
}

// handOver queues ops, which MPI has completed, for the group's
// completer; it reports whether it started one.
func (g *Group) handOver(ops []*op) bool {
	g.cmu.Lock()
	g.ready = append(g.ready, ops...)
	start := !g.completing
	g.completing = true
	if start && !g.lingering && !g.doneAt.IsZero() {
		g.lingering = time.Since(g.doneAt) < idleSpin
	}
	g.cmu.Unlock()
	if start {
		go g.completer()
	}
	return start
}

// completer finishes the group's completed collectives in order, running
// their Works' continuations; it returns when none is left and none has
// come for idleSpin.
func (g *Group) completer() {
	for {
		g.cmu.Lock()
		if len(g.ready) == 0 {
			if !g.lingering {
				g.completing, g.ready, g.doneAt = false, nil, time.Now()
				g.cmu.Unlock()
				return
			}
			g.cmu.Unlock()
			if g.linger() {
				continue
			}
			return
		}
		o := g.ready[0]
		g.ready[0] = nil
		g.ready = g.ready[1:]
		g.cmu.Unlock()
		g.e.finishOp(o)
	}
}

// linger waits for idleSpin, yielding its P (to the goroutines whose
// Works it completed) and its core between looks, for another collective
// of the group to complete: a rank that issues them one at a time has
// the next one done within tens of microseconds, which is then finished
// without starting a goroutine (one started by the communication
// goroutine waits for a free P, which can take tens of microseconds).
// Meanwhile it runs the reductions the communication goroutine offloads.
// It reports whether there is something to finish; if not, the completer
// is done.
func (g *Group) linger() bool {
	e := g.e
	e.lingers(1)
	defer e.lingers(-1)
	until := time.Now().Add(idleSpin)
	for {
		if j := e.takeJob(); j != nil {
			j()
			until = time.Now().Add(idleSpin)
		}
		g.cmu.Lock()
		if len(g.ready) > 0 {
			g.cmu.Unlock()
			return true
		}
		if now := time.Now(); !now.Before(until) {
			g.completing, g.ready, g.doneAt, g.lingering = false, nil, now, false
			g.cmu.Unlock()
			return false
		}
		g.cmu.Unlock()
		runtime.Gosched()
		yield()
	}
}

// desc describes a collective for Options.Debug's check that the ranks'
// calls match: kind, dtype, reduce op, element count, root, then the
// number of dimensions and up to maxDescDims of them.
type desc [6 + maxDescDims]int64

const maxDescDims = 10

func makeDesc(k kind, dt dtype.DType, op dist.ReduceOp, numel, root int, shape []int) desc {
	d := desc{int64(k), int64(dt), int64(op), int64(numel), int64(root), int64(len(shape))}
	for i, s := range shape {
		if i < maxDescDims {
			d[6+i] = int64(s)
		}
	}
	return d
}

func (d desc) String() string {
	k := kind(d[0])
	var b strings.Builder
	b.WriteString(k.String())
	switch k {
	case kBarrier:
		return b.String()
	case kBroadcastObject, kGatherObject:
		fmt.Fprintf(&b, "(root %d)", d[4])
		return b.String()
	}
	fmt.Fprintf(&b, "(%v", dtype.DType(d[1]))
	if n := int(d[5]); n >= 0 && n <= maxDescDims {
		shape := make([]int64, n)
		copy(shape, d[6:6+n])
		fmt.Fprintf(&b, " shape %v", shape)
	}
	fmt.Fprintf(&b, ", %d elements", d[3])
	switch k {
	case kAllReduce, kReduceScatter:
		fmt.Fprintf(&b, ", op %v", dist.ReduceOp(d[2]))
	case kBroadcast:
		fmt.Fprintf(&b, ", root %d", d[4])
	}
	b.WriteString(")")
	return b.String()
}

// newOp makes an op of the group. Unless the caller says otherwise
// (lastColl -1), every stage of it may call MPI collectives.
func (g *Group) newOp(k kind, what string, bytes int, keep ...func()) *op {
	return &op{g: g, kind: k, what: what, bytes: int64(bytes), keep: keep, peer: -1, lastColl: maxStages}
}

// maxStages is more than the stages of any op.
const maxStages = 1 << 20

// submit queues o; with Options.Debug a collective first checks that
// every rank called the same one (d).
func (g *Group) submit(o *op, d *desc) *dist.Work {
	if g.e.debug && d != nil && !o.p2p && g.size > 1 {
		o.stages = append(g.checkStages(*d), o.stages...)
		if o.lastColl >= 0 && o.lastColl < maxStages {
			o.lastColl += 2
		} else if o.lastColl < 0 {
			o.lastColl = 0 // the check's all-gather
		}
	}
	return g.e.submit(o)
}

// checkStages gather every rank's description of a collective and fail
// it on every rank, before any data moves, if they differ.
func (g *Group) checkStages(mine desc) []stage {
	all := make([]desc, g.size)
	e, l := g.e, g.e.lib
	return []stage{
		func(o *op) error {
			var req uintptr
			n := uintptr(len(mine))
			// int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
			//     void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
			rc := call(l.iallgather, uintptr(unsafe.Pointer(&mine[0])), n, l.typeInt64, uintptr(unsafe.Pointer(&all[0][0])), n, l.typeInt64,
				g.comm, uintptr(unsafe.Pointer(&req)))
			return e.posted(o, "MPI_Iallgather", rc, req)
		},
		func(o *op) error {
			for r, d := range all {
				if d != mine {
					return fmt.Errorf("mpi: collective #%d of group %d does not match across ranks: rank %d called %s, rank %d called %s",
						o.seq, g.id, g.ranks[r], d, g.ranks[g.rank], mine)
				}
			}
			return nil
		},
	}
}

// refuse is the Work of a call that fails its checks: nothing is issued
// and the group goes on.
func refuse(k kind, err error) *dist.Work {
	return dist.Failed(fmt.Errorf("mpi: %v: %w", k, err))
}

func (g *Group) checkRoot(k kind, root int) error {
	if root < 0 || root >= g.size {
		return fmt.Errorf("mpi: %v: rank %d is not in the group of %d ranks", k, root, g.size)
	}
	return nil
}

func describe(k kind, dt dtype.DType, n int) string {
	return fmt.Sprintf("%v of %d %v", k, n, dt)
}

// chunkCount is the most elements one MPI call moves (a C int); larger
// all-reduces, broadcasts and messages are split into several calls.
var chunkCount = math.MaxInt32

// chunked calls f on consecutive ranges of n elements of at most
// chunkCount each (once, empty, when n is 0).
func chunked(n int, f func(off, cnt int) error) error {
	if n == 0 {
		return f(0, 0)
	}
	for off := 0; off < n; off += chunkCount {
		if err := f(off, min(chunkCount, n-off)); err != nil {
			return err
		}
	}
	return nil
}

// checkCount refuses a block of more elements than a C int counts.
func checkCount(what string, n int) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("%s of %d elements per rank is more than MPI's int counts allow (%d)", what, n, math.MaxInt32)
	}
	return nil
}

// nothing is where an empty buffer points: MPI may not like NULL.
var nothing [8]byte

// addr is the address of b[off] (of nothing when b is empty). The memory
// stays reachable through the op that uses it.
func addr(b []byte, off int) uintptr {
	if off >= len(b) {
		return uintptr(unsafe.Pointer(&nothing[0]))
	}
	return uintptr(unsafe.Pointer(&b[off]))
}

// cint passes a C int, negative ones included.
func cint(v int) uintptr { return uintptr(uint32(int32(v))) }

// operand returns t's memory for a collective (dist.HostBytes, named "the
// tensor") once check accepts its dtype; on an error nothing is kept.
func operand(t *tensor.Tensor, writable bool, check func(dtype.DType) error) ([]byte, func(), error) {
	b, keep, err := dist.HostBytes("the tensor", t, writable)
	if err != nil {
		return nil, nil, err
	}
	if err := check(t.DType()); err != nil {
		keep()
		return nil, nil, err
	}
	return b, keep, nil
}

func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, a1 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&a[len(a)-1]))
	b0, b1 := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[len(b)-1]))
	return a0 <= b1 && b0 <= a1
}

// tagOf is the tag of the messages of a group's collective seq in phase
// (0: the exchange of parts to reduce, 1: the exchange of reduced parts):
// distinct for every collective that may be in flight at once, and above
// Send and Recv's.
func tagOf(seq uint64, phase int) uintptr { return uintptr(1 + (seq%tagWindow)*2 + uint64(phase)) }

// tagWindow is more than the collectives a group may have in flight, and
// keeps tags below 32767, the least MPI_TAG_UB MPI allows.
const tagWindow = 8192

// offloadBytes is the size from which a reduction runs on a goroutine of
// its own rather than on the communication goroutine.
const offloadBytes = 256 << 10

// scratch returns n bytes aligned for any element type.
func scratch(n int) []byte {
	if n == 0 {
		return nil
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// exchange posts, for every other rank k, a receive from k into recv(k)
// and a send of send(k) to k, with tag; es is the element size. Empty
// parts, which both sides know to be empty, are not sent.
func (g *Group) exchange(o *op, tag uintptr, es int, recv, send func(k int) []byte) error {
	e, l := g.e, g.e.lib
	mt := l.moveType(es)
	// each posts post(k, b, off, cnt) for the chunks of every other
	// rank's part(k).
	each := func(part func(k int) []byte, post func(k int, b []byte, off, cnt int) error) error {
		for k := range g.size {
			if k == g.rank {
				continue
			}
			if b := part(k); len(b) > 0 {
				if err := chunked(len(b)/es, func(off, cnt int) error { return post(k, b, off, cnt) }); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := each(recv, func(k int, b []byte, off, cnt int) error {
		var req uintptr
		rc := call(l.irecv, addr(b, off*es), uintptr(cnt), mt, uintptr(k), tag, g.comm, uintptr(unsafe.Pointer(&req)))
		return e.postedRecv(o, "MPI_Irecv", rc, req, k, int32(cnt), mt)
	})
	if err != nil {
		return err
	}
	return each(send, func(k int, b []byte, off, cnt int) error {
		var req uintptr
		rc := call(l.isend, addr(b, off*es), uintptr(cnt), mt, uintptr(k), tag, g.comm, uintptr(unsafe.Pointer(&req)))
		return e.posted(o, "MPI_Isend", rc, req)
	})
}

// reduceStages add to o the stages of a reduce-scatter of parts (part k
// of this rank's data, for rank k) into dst: every rank sends part k to
// rank k (MPI_Isend, MPI_Irecv), and each combines the parts it received
// in rank order, with its own, with the in-process backend's Reducer.
// The received parts wait in scratch memory taken when the op starts and
// given back once they are reduced.
//
// For an all-reduce, total is the all-reduce's size in bytes and at the
// offset of this rank's part in it: the Reducer then combines the ranks
// in the order of PyTorch's gloo backend (dist.Reducer.AllReduce). A
// reduce-scatter passes total 0: rank order.
func (g *Group) reduceStages(o *op, dt dtype.DType, rop dist.ReduceOp, parts func(k int) []byte, dst []byte, at, total int) {
	n, me, es := g.size, g.rank, dt.Size()
	own := parts(me)
	var recv *scratchBuf
	slot := func(k int) []byte {
		i := k
		if k > me {
			i--
		}
		return recv.b[i*len(own) : (i+1)*len(own)]
	}
	o.stages = append(o.stages,
		func(o *op) error {
			recv = getScratch((n - 1) * len(own))
			return g.exchange(o, tagOf(o.seq, 0), es, slot, parts)
		},
		func(o *op) error {
			reduce := func() {
				srcs := make([][]byte, n)
				for k := range srcs {
					if k == me {
						srcs[k] = own
					} else {
						srcs[k] = slot(k)
					}
				}
				r, done := g.reducer(dt, rop)
				if total > 0 {
					r.AllReduce(dst, srcs, 0, len(dst), at, total)
				} else {
					r.Reduce(dst, srcs, 0, len(dst))
				}
				done()
				recv.put()
			}
			if n*len(own) >= offloadBytes {
				g.e.offload(o, reduce)
			} else {
				reduce()
			}
			return nil
		})
}

// scratchBuf is scratch memory for received parts, aligned for any
// element type, from a pool by power-of-two size.
type scratchBuf struct{ b []byte }

var scratchPools [48]sync.Pool

func getScratch(n int) *scratchBuf {
	c := bits.Len(uint(n))
	if s, ok := scratchPools[c].Get().(*scratchBuf); ok {
		s.b = s.b[:n]
		return s
	}
	return &scratchBuf{scratch(1 << c)[:n]}
}

// put gives s back to its pool.
func (s *scratchBuf) put() { scratchPools[bits.Len(uint(cap(s.b)-1))].Put(s) }

// AllReduce implements dist.ProcessGroup with the in-process backend's
// algorithm and arithmetic, over MPI messages: rank k reduces part k of
// the tensor (the parts of every rank come to it with MPI_Isend and
// MPI_Irecv), then sends it to the others. Every rank moves 2(n-1)/n of
// the tensor, as in a ring, in two steps, and the result is bit for bit
// the in-process backend's (and the same on every rank).
func (g *Group) AllReduce(t *tensor.Tensor, rop dist.ReduceOp) *dist.Work {
	const k = kAllReduce
	b, keep, err := operand(t, true, func(dt dtype.DType) error { return dist.CheckReduce(dt, rop) })
	if err != nil {
		return refuse(k, err)
	}
	dt := t.DType()
	numel, es := t.Numel(), dt.Size()
	what := describe(k, dt, numel)
	seg := max(1, segmentBytes/es)
	if numel <= seg {
		d := makeDesc(k, dt, rop, numel, 0, t.Shape())
		return g.submit(g.allReduceOp(b, dt, rop, what, keep), &d)
	}
	// Segments, each a collective of its own: one's reduction overlaps
	// the next one's messages. The Work completes with the last one.
	nseg := (numel + seg - 1) / seg
	w, complete := dist.NewWork()
	var mu sync.Mutex
	var first error
	left := nseg
	for i := range nseg {
		lo, hi := i*seg, min(numel, (i+1)*seg)
		if i > 0 {
			keep = tensor.Retain(t)
		}
		o := g.allReduceOp(b[lo*es:hi*es], dt, rop, fmt.Sprintf("%s (elements %d to %d)", what, lo, hi), keep)
		d := makeDesc(k, dt, rop, numel, i, t.Shape())
		g.submit(o, &d).Then(func(err error) error {
			mu.Lock()
			if first == nil {
				first = err
			}
			left--
			last, err := left == 0, first
			mu.Unlock()
			if last {
				complete(err)
			}
			return nil
		})
	}
	return w
}

// segmentBytes is the size of the segments a larger all-reduce is cut
// into.
const segmentBytes = 2 << 20

// allReduceOp is the all-reduce of b, as AllReduce describes it.
func (g *Group) allReduceOp(b []byte, dt dtype.DType, rop dist.ReduceOp, what string, keep func()) *op {
	n, me, es := g.size, g.rank, dt.Size()
	numel := len(b) / es
	parts := func(k int) []byte {
		lo, hi := dist.Part(numel, n, k, es)
		return b[lo:hi]
	}
	own := parts(me)
	at, _ := dist.Part(numel, n, me, es)
	o := g.newOp(kAllReduce, what, len(b), keep)
	o.lastColl = -1
	g.reduceStages(o, dt, rop, parts, own, at, len(b))
	o.stages = append(o.stages, func(o *op) error {
		return g.exchange(o, tagOf(o.seq, 1), es, parts, func(int) []byte { return own })
	})
	return o
}

// Broadcast implements dist.ProcessGroup (MPI_Ibcast of the bytes).
func (g *Group) Broadcast(t *tensor.Tensor, root int) *dist.Work {
	const k = kBroadcast
	if err := g.checkRoot(k, root); err != nil {
		return dist.Failed(err)
	}
	b, keep, err := operand(t, g.rank != root, dist.CheckDType)
	if err != nil {
		return refuse(k, err)
	}
	dt := t.DType()
	e, l := g.e, g.e.lib
	n, es := t.Numel(), dt.Size()
	mt := l.moveType(es)
	o := g.newOp(k, fmt.Sprintf("%s from rank %d", describe(k, dt, n), root), len(b), keep)
	o.stages = []stage{func(o *op) error {
		return chunked(n, func(off, cnt int) error {
			var req uintptr
			// int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root,
			//     MPI_Comm comm, MPI_Request *request)
			rc := call(l.ibcast, addr(b, off*es), uintptr(cnt), mt, uintptr(root), g.comm, uintptr(unsafe.Pointer(&req)))
			return e.posted(o, "MPI_Ibcast", rc, req)
		})
	}}
	d := makeDesc(k, dt, 0, n, root, t.Shape())
	return g.submit(o, &d)
}

// ReduceScatter implements dist.ProcessGroup as AllReduce reduces: rank
// r receives block r of every rank's input (MPI_Isend, MPI_Irecv) and
// combines them in rank order.
func (g *Group) ReduceScatter(out, in *tensor.Tensor, op dist.ReduceOp) *dist.Work {
	return g.blocks(kReduceScatter, out, in, op)
}

// AllGather implements dist.ProcessGroup (MPI_Iallgather; in place when
// in is block Rank() of out).
func (g *Group) AllGather(out, in *tensor.Tensor) *dist.Work {
	return g.blocks(kAllGather, out, in, 0)
}

// AllToAll implements dist.ProcessGroup (MPI_Ialltoall).
func (g *Group) AllToAll(out, in *tensor.Tensor) *dist.Work {
	return g.blocks(kAllToAll, out, in, 0)
}

// blocks issues the collectives whose tensors are made of one block per
// rank, with the in-process backend's checks: reduceScatter (in has
// Size() blocks of out's size), allGather (out has Size() blocks of in's
// size) and allToAll (both have Size() blocks, in separate memory).
func (g *Group) blocks(k kind, out, in *tensor.Tensor, rop dist.ReduceOp) *dist.Work {
	ib, keepIn, err := dist.HostBytes("the input", in, false)
	if err != nil {
		return refuse(k, err)
	}
	ob, keepOut, err := dist.HostBytes("the output", out, true)
	if err != nil {
		keepIn()
		return refuse(k, err)
	}
	bad := func(format string, args ...any) *dist.Work {
		keepIn()
		keepOut()
		return refuse(k, fmt.Errorf(format, args...))
	}
	dt := in.DType()
	if dt != out.DType() {
		return bad("the input is %v and the output %v", in.DType(), out.DType())
	}
	if err := dist.CheckDType(dt); err != nil {
		return bad("%v", err)
	}
	e, l := g.e, g.e.lib
	n, es := g.size, dt.Size()
	mt := l.moveType(es)
	var o *op
	d := makeDesc(k, dt, rop, in.Numel(), 0, in.Shape())
	switch k {
	case kReduceScatter:
		if err := dist.CheckReduce(dt, rop); err != nil {
			return bad("%v", err)
		}
		if in.Numel() != n*out.Numel() {
			return bad("the input has %d elements, %d ranks × the output's %d needed", in.Numel(), n, out.Numel())
		}
		d = makeDesc(k, dt, rop, out.Numel(), 0, out.Shape())
		o = g.newOp(k, describe(k, dt, in.Numel()), len(ib), keepIn, keepOut)
		o.lastColl = -1
		blk := len(ob)
		parts := func(k int) []byte { return ib[k*blk : (k+1)*blk] }
		dst := ob
		if own := parts(g.rank); overlap(ib, ob) && !(blk > 0 && &own[0] == &ob[0]) {
			// Reduced in place (ZeRO's own block of a flat gradient)
			// works chunk by chunk; any other overlap goes through scratch.
			dst = scratch(blk)
			o.finish = func() error { copy(ob, dst); return nil }
		}
		g.reduceStages(o, dt, rop, parts, dst, 0, 0)
	case kAllGather:
		if out.Numel() != n*in.Numel() {
			return bad("the output has %d elements, %d ranks × the input's %d needed", out.Numel(), n, in.Numel())
		}
		cnt := in.Numel()
		if err := checkCount("a block", cnt); err != nil {
			return bad("%v", err)
		}
		o = g.newOp(k, describe(k, dt, out.Numel()), len(ob), keepIn, keepOut)
		src, inplace := ib, false
		switch {
		case len(ib) > 0 && &ib[0] == &ob[g.rank*len(ib)]:
			inplace = true // this rank's block is in place already
		case overlap(ib, ob):
			src = append([]byte(nil), ib...) // read before the gather writes over it
		}
		o.stages = []stage{func(o *op) error {
			send := uintptr(inPlace)
			if !inplace {
				send = addr(src, 0)
			}
			var req uintptr
			rc := call(l.iallgather, send, uintptr(cnt), mt, addr(ob, 0), uintptr(cnt), mt, g.comm, uintptr(unsafe.Pointer(&req)))
			return e.posted(o, "MPI_Iallgather", rc, req)
		}}
	case kAllToAll:
		if in.Numel() != out.Numel() || in.Numel()%n != 0 {
			return bad("input and output need the same number of elements, a multiple of the %d ranks; got %d and %d", n, in.Numel(), out.Numel())
		}
		if overlap(ib, ob) {
			return bad("the input and the output share memory")
		}
		cnt := in.Numel() / n
		if err := checkCount("a block", cnt); err != nil {
			return bad("%v", err)
		}
		o = g.newOp(k, describe(k, dt, in.Numel()), len(ib), keepIn, keepOut)
		o.stages = []stage{func(o *op) error {
			var req uintptr
			// int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
			//     void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
			rc := call(l.ialltoall, addr(ib, 0), uintptr(cnt), mt, addr(ob, 0), uintptr(cnt), mt, g.comm, uintptr(unsafe.Pointer(&req)))
			return e.posted(o, "MPI_Ialltoall", rc, req)
		}}
	}
	return g.submit(o, &d)
}

// AllGatherInto implements dist.ProcessGroup: an MPI_Iallgather into
// scratch memory, whose blocks are then copied into the outputs.
func (g *Group) AllGatherInto(outs []*tensor.Tensor, in *tensor.Tensor) *dist.Work {
	const k = kAllGatherInto
	if len(outs) != g.size {
		return refuse(k, fmt.Errorf("%d output tensors for %d ranks", len(outs), g.size))
	}
	ib, keepIn, err := dist.HostBytes("the input", in, false)
	if err != nil {
		return refuse(k, err)
	}
	keep := []func(){keepIn}
	obs := make([][]byte, len(outs))
	for r, t := range outs {
		ob, kp, err := dist.HostBytes(fmt.Sprintf("output %d", r), t, true)
		if err == nil && (t.DType() != in.DType() || t.Numel() != in.Numel()) {
			kp()
			err = fmt.Errorf("output %d is %v of %d elements; the input is %v of %d", r, t.DType(), t.Numel(), in.DType(), in.Numel())
		}
		if err != nil {
			release(keep)
			return refuse(k, err)
		}
		keep = append(keep, kp)
		obs[r] = ob
	}
	dt := in.DType()
	cnt := in.Numel()
	err = dist.CheckDType(dt)
	if err == nil {
		err = checkCount("a block", cnt)
	}
	if err != nil {
		release(keep)
		return refuse(k, err)
	}
	e, l := g.e, g.e.lib
	mt := l.moveType(dt.Size())
	all := getScratch(g.size * len(ib))
	o := g.newOp(k, describe(k, dt, g.size*cnt), len(all.b), keep...)
	o.stages = []stage{func(o *op) error {
		var req uintptr
		rc := call(l.iallgather, addr(ib, 0), uintptr(cnt), mt, addr(all.b, 0), uintptr(cnt), mt, g.comm, uintptr(unsafe.Pointer(&req)))
		return e.posted(o, "MPI_Iallgather", rc, req)
	}}
	o.finish = func() error {
		for r, ob := range obs {
			copy(ob, all.b[r*len(ib):(r+1)*len(ib)])
		}
		all.put()
		return nil
	}
	d := makeDesc(k, dt, 0, cnt, 0, in.Shape())
	return g.submit(o, &d)
}

// Barrier implements dist.ProcessGroup (MPI_Ibarrier).
func (g *Group) Barrier() *dist.Work {
	e, l := g.e, g.e.lib
	o := g.newOp(kBarrier, "Barrier", 0)
	o.stages = []stage{func(o *op) error {
		var req uintptr
		// int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request)
		rc := call(l.ibarrier, g.comm, uintptr(unsafe.Pointer(&req)))
		return e.posted(o, "MPI_Ibarrier", rc, req)
	}}
	d := makeDesc(kBarrier, 0, 0, 0, 0, nil)
	return g.submit(o, &d)
}

// Send implements dist.ProcessGroup (MPI_Isend). Messages do not wait for
// the group's collectives, nor they for messages: each completes as soon
// as MPI has completed it, and messages between a pair of ranks match in
// the order they were issued, as in the in-process backend.
func (g *Group) Send(t *tensor.Tensor, dst int) *dist.Work { return g.p2p(kSend, t, dst) }

// Recv implements dist.ProcessGroup (MPI_Irecv). A message of another
// size than t's fails the Recv.
func (g *Group) Recv(t *tensor.Tensor, src int) *dist.Work { return g.p2p(kRecv, t, src) }

func (g *Group) p2p(k kind, t *tensor.Tensor, peer int) *dist.Work {
	if err := g.checkRoot(k, peer); err != nil {
		return dist.Failed(err)
	}
	if peer == g.rank {
		verb := map[kind]string{kSend: "send to", kRecv: "receive from"}[k]
		return refuse(k, fmt.Errorf("rank %d cannot %s itself", peer, verb))
	}
	b, keep, err := operand(t, k == kRecv, dist.CheckDType)
	if err != nil {
		return refuse(k, err)
	}
	dt := t.DType()
	e, l := g.e, g.e.lib
	n, es := t.Numel(), dt.Size()
	mt := l.moveType(es)
	what := fmt.Sprintf("%s to rank %d", describe(k, dt, n), g.ranks[peer])
	if k == kRecv {
		what = fmt.Sprintf("%s from rank %d", describe(k, dt, n), g.ranks[peer])
	}
	o := g.newOp(k, what, len(b), keep)
	o.p2p, o.peer = true, peer
	o.stages = []stage{func(o *op) error {
		return chunked(n, func(off, cnt int) error {
			var req uintptr
			if k == kSend {
				// int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest,
				//     int tag, MPI_Comm comm, MPI_Request *request)
				rc := call(l.isend, addr(b, off*es), uintptr(cnt), mt, uintptr(peer), tag, g.comm, uintptr(unsafe.Pointer(&req)))
				return e.posted(o, "MPI_Isend", rc, req)
			}
			// int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source,
			//     int tag, MPI_Comm comm, MPI_Request *request)
			rc := call(l.irecv, addr(b, off*es), uintptr(cnt), mt, uintptr(peer), tag, g.comm, uintptr(unsafe.Pointer(&req)))
			return e.postedRecv(o, "MPI_Irecv", rc, req, peer, int32(cnt), mt)
		})
	}}
	return g.submit(o, nil)
}

// gatherInts is the stage that gathers every rank's mine (as long on
// every rank) into all, in rank order: an MPI_Iallgather of int64s, the
// lengths and hashes that GatherObject and NewGroup check.
func (g *Group) gatherInts(mine, all []int64) stage {
	return func(o *op) error {
		e, l := g.e, g.e.lib
		var req uintptr
		rc := call(l.iallgather, uintptr(unsafe.Pointer(&mine[0])), uintptr(len(mine)), l.typeInt64, uintptr(unsafe.Pointer(&all[0])), uintptr(len(mine)), l.typeInt64,
			g.comm, uintptr(unsafe.Pointer(&req)))
		return e.posted(o, "MPI_Iallgather", rc, req)
	}
}

// maxObjectBytes bounds an object payload, as tensors are bounded: a
// larger length is corrupt.
const maxObjectBytes = 1 << 40

// BroadcastObject implements dist.ProcessGroup: root's length (an
// MPI_Ibcast of one int64), then its bytes. It blocks until done; the two
// steps hold back the group's later collectives, which keeps the ranks'
// calls in the same order.
func (g *Group) BroadcastObject(payload []byte, root int) ([]byte, error) {
	const k = kBroadcastObject
	if err := g.checkRoot(k, root); err != nil {
		return nil, err
	}
	e, l := g.e, g.e.lib
	me := g.rank == root
	length := []int64{int64(len(payload))}
	var data []byte
	if me {
		data = payload
	}
	o := g.newOp(k, fmt.Sprintf("%v from rank %d", k, root), 8)
	o.stages = []stage{
		func(o *op) error {
			var req uintptr
			rc := call(l.ibcast, uintptr(unsafe.Pointer(&length[0])), 1, l.typeInt64, uintptr(root), g.comm, uintptr(unsafe.Pointer(&req)))
			return e.posted(o, "MPI_Ibcast", rc, req)
		},
		func(o *op) error {
			n := length[0]
			if n < 0 || n > maxObjectBytes {
				return fmt.Errorf("mpi: %s on %s: rank %d's length arrived as %d bytes", o.what, g.where(), g.ranks[root], n)
			}
			if !me {
				data = make([]byte, n)
			}
			if n == 0 {
				return nil
			}
			e.grow(o, int64(n))
			return chunked(int(n), func(off, cnt int) error {
				var req uintptr
				rc := call(l.ibcast, addr(data, off), uintptr(cnt), l.typeUint8, uintptr(root), g.comm, uintptr(unsafe.Pointer(&req)))
				return e.posted(o, "MPI_Ibcast", rc, req)
			})
		},
	}
	d := makeDesc(k, 0, 0, 0, root, nil)
	if err := g.submit(o, &d).Wait(); err != nil {
		return nil, err
	}
	if me {
		return append([]byte{}, payload...), nil
	}
	return data, nil
}

// GatherObject implements dist.ProcessGroup: every rank's length (an
// MPI_Iallgather of one int64 each, so that every rank knows the sizes),
// then the payloads to root (MPI_Igatherv). It blocks until done, holding
// back the group's later collectives meanwhile.
func (g *Group) GatherObject(payload []byte, root int) ([][]byte, error) {
	const k = kGatherObject
	if err := g.checkRoot(k, root); err != nil {
		return nil, err
	}
	e, l := g.e, g.e.lib
	n := g.size
	mine := []int64{int64(len(payload))}
	lens := make([]int64, n)
	var counts, displs []int32
	var buf []byte
	o := g.newOp(k, fmt.Sprintf("%v to rank %d", k, root), 8*n)
	o.stages = []stage{
		g.gatherInts(mine, lens),
		func(o *op) error {
			var total int64
			for r, v := range lens {
				if v < 0 || v > maxObjectBytes {
					return fmt.Errorf("mpi: %s on %s: rank %d's length arrived as %d bytes", o.what, g.where(), g.ranks[r], v)
				}
				total += v
			}
			if total > math.MaxInt32 {
				return fmt.Errorf("mpi: %s on %s: the payloads add up to %d bytes, more than MPI_Igatherv's int displacements reach (2 GiB)", o.what, g.where(), total)
			}
			counts, displs = make([]int32, n), make([]int32, n)
			for r, v := range lens {
				counts[r] = int32(v)
				if r > 0 {
					displs[r] = displs[r-1] + counts[r-1]
				}
			}
			var rbuf, rcounts, rdispls uintptr
			if g.rank == root {
				buf = make([]byte, total)
				rbuf, rcounts, rdispls = addr(buf, 0), uintptr(unsafe.Pointer(&counts[0])), uintptr(unsafe.Pointer(&displs[0]))
			}
			e.grow(o, int64(total))
			var req uintptr
			// int MPI_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
			//     void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype,
			//     int root, MPI_Comm comm, MPI_Request *request)
			rc := call(l.igatherv, addr(payload, 0), uintptr(len(payload)), l.typeUint8, rbuf, rcounts, rdispls, l.typeUint8,
				uintptr(root), g.comm, uintptr(unsafe.Pointer(&req)))
			return e.posted(o, "MPI_Igatherv", rc, req)
		},
	}
	d := makeDesc(k, 0, 0, 0, root, nil)
	if err := g.submit(o, &d).Wait(); err != nil {
		return nil, err
	}
	if g.rank != root {
		return nil, nil
	}
	out := make([][]byte, n)
	for r := range out {
		a, b := int(displs[r]), int(displs[r]+counts[r])
		out[r] = buf[a:b:b]
	}
	return out, nil
}

// NewGroup implements dist.ProcessGroup: every rank checks that all of
// them passed the same list (an MPI_Iallgather of its length and hash),
// then MPI_Comm_split makes the subgroup's communicator, with the members
// in the order of their ranks here. Ranks outside the list get nil. The
// subgroup shares the world's communication goroutine; its collectives
// are ordered among themselves, independently of this group's.
func (g *Group) NewGroup(ranks []int) (dist.ProcessGroup, error) {
	ranks = slices.Clone(ranks)
	slices.Sort(ranks)
	for i, r := range ranks {
		if r < 0 || r >= g.size {
			return nil, fmt.Errorf("mpi: newGroup: rank %d is not in the group of %d ranks", r, g.size)
		}
		if i > 0 && ranks[i-1] == r {
			return nil, fmt.Errorf("mpi: newGroup: rank %d is listed twice", r)
		}
	}
	if len(ranks) == 0 {
		return nil, fmt.Errorf("mpi: newGroup: no ranks given")
	}
	e, l := g.e, g.e.lib
	e.mu.Lock()
	index := g.made
	g.made++
	e.mu.Unlock()
	global := make([]int, len(ranks))
	h := fnv.New64a()
	for i, r := range ranks {
		global[i] = g.ranks[r]
		fmt.Fprintf(h, "%d,", r)
	}
	me := slices.Index(ranks, g.rank)
	mine := []int64{int64(len(ranks)), int64(h.Sum64())}
	all := make([]int64, 2*g.size)
	var sub *Group
	o := g.newOp(kNewGroup, fmt.Sprintf("NewGroup of ranks %v", ranks), 16*g.size)
	o.stages = []stage{
		g.gatherInts(mine, all),
		func(o *op) error {
			for r := range g.size {
				if all[2*r] != mine[0] || all[2*r+1] != mine[1] {
					return fmt.Errorf("mpi: newGroup call %d: rank %d asked for ranks %v, rank %d for another list (every rank must pass the same list)",
						index, g.ranks[g.rank], global, g.ranks[r])
				}
			}
			id := e.nextID
			e.nextID++
			color, key := undefined, 0
			if me >= 0 {
				color, key = 0, me
			}
			comm := new(uintptr)
			// int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm):
			// collective and blocking, but every rank has just shown that it
			// is here.
			if rc := call(l.commSplit, g.comm, cint(color), cint(key), uintptr(unsafe.Pointer(comm))); rc != success {
				return l.err("MPI_Comm_split", rc)
			}
			if me < 0 {
				return nil
			}
			s, err := e.newGroup(*comm, id, global)
			if err != nil {
				return err
			}
			if s.rank != me || s.size != len(ranks) {
				return fmt.Errorf("mpi: newGroup: MPI_Comm_split made rank %d of %d, not %d of %d", s.rank, s.size, me, len(ranks))
			}
			s.key = subKey(g.key, index)
			sub = s
			return nil
		},
	}
	if err := g.submit(o, nil).Wait(); err != nil {
		return nil, err
	}
	if sub == nil {
		return nil, nil
	}
	return sub, nil
}

// subKey is the key of the group made by the NewGroup call index of the
// group parent.
func subKey(parent uint64, index int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", parent, index)
	return h.Sum64()
}

// newGroup makes the Group of comm, a communicator of the members global
// (world ranks), on the communication goroutine: errors on it are
// returned (MPI_ERRORS_RETURN), not fatal.
func (e *engine) newGroup(comm uintptr, id int, global []int) (*Group, error) {
	l := e.lib
	// int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler)
	if rc := call(l.commSetErrhandler, comm, l.errorsReturn); rc != success {
		return nil, l.err("MPI_Comm_set_errhandler", rc)
	}
	var rank, size int32
	// int MPI_Comm_rank(MPI_Comm comm, int *rank), MPI_Comm_size(MPI_Comm comm, int *size)
	if rc := call(l.commRank, comm, uintptr(unsafe.Pointer(&rank))); rc != success {
		return nil, l.err("MPI_Comm_rank", rc)
	}
	if rc := call(l.commSize, comm, uintptr(unsafe.Pointer(&size))); rc != success {
		return nil, l.err("MPI_Comm_size", rc)
	}
	g := &Group{e: e, comm: comm, id: id, rank: int(rank), size: int(size), ranks: global}
	e.groups = append(e.groups, g)
	return g, nil
}
