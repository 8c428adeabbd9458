package dist

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// Options configure an in-process world.
type Options struct {
	// Timeout bounds every wait for the other ranks (DefaultTimeout when
	// zero). On expiry every rank stops with an error naming the
	// collective and the ranks that did not arrive.
	Timeout time.Duration
	// Debug compares the shapes of every rank's tensors too, not only
	// their dtypes and sizes, and names each rank's call in a mismatch.
	Debug bool
	// Net, when set, makes every collective last at least as long as it
	// would on that link (see NetModel).
	Net NetModel
	// Trace, when set, records every collective of every rank: lane
	// trace.Comm (trace.CommLane(group) for subgroups) from the moment the
	// rank's communication queue starts it until it completes, and
	// point-to-point messages on lane trace.P2P. The in-process backend
	// records; NCCL ignores it for now.
	Trace *trace.Recorder
}

// World is an in-process job: Size ranks that run as goroutines of one
// process and communicate through shared memory. Each rank takes its
// handle with Group(rank) and uses it from its own goroutine; every
// handle runs its collectives on a communication queue of its own.
//
// Collectives move data near memory bandwidth without a global lock on
// the data path: an all-reduce has every rank combine its own slice of
// all ranks' buffers (a reduce-scatter) and then copy the slices it lacks
// from their owners (an all-gather), all ranks at once.
type World struct {
	size    int
	timeout time.Duration
	debug   bool
	net     NetModel
	trace   *trace.Recorder
	busy    []atomic.Int64 // per world rank: ns its queues spent running collectives

	abortOnce sync.Once
	aborted   chan struct{}
	abortErr  error
	closed    chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	left    []bool // ranks whose program has ended (Leave)
	rounds  map[roundKey]*round
	groups  map[subgroupKey]*subgroup
	nextID  int
	handles []*group // world-group handles by rank
}

// NewWorld makes an in-process world of size ranks.
func NewWorld(size int, opts Options) (*World, error) {
	if size < 1 {
		return nil, fmt.Errorf("dist: a world needs at least one rank, got %d", size)
	}
	w := &World{
		size:    size,
		timeout: opts.Timeout,
		debug:   opts.Debug,
		net:     opts.Net,
		trace:   opts.Trace,
		busy:    make([]atomic.Int64, size),
		aborted: make(chan struct{}),
		closed:  make(chan struct{}),
		rounds:  map[roundKey]*round{},
		groups:  map[subgroupKey]*subgroup{},
		nextID:  1,
		left:    make([]bool, size),
	}
	if w.timeout <= 0 {
		w.timeout = DefaultTimeout
	}
	all := make([]int, size)
	for i := range all {
		all[i] = i
	}
	for r := range size {
		w.handles = append(w.handles, w.newGroup(0, all, r))
	}
	return w, nil
}

// Size is the number of ranks.
func (w *World) Size() int { return w.size }

// Group returns rank's handle on the group of all ranks.
func (w *World) Group(rank int) ProcessGroup { return w.handles[rank] }

// Abort stops the world: every pending and later collective of every rank
// fails with err (the first Abort wins). A job calls it when one rank
// fails, so that the others never wait for it.
func (w *World) Abort(err error) {
	w.abortOnce.Do(func() {
		w.abortErr = err
		close(w.aborted)
	})
}

// Err is the error the world was aborted with, or nil.
func (w *World) Err() error {
	select {
	case <-w.aborted:
		return w.abortErr
	default:
		return nil
	}
}

// Leave says that rank's program has ended: a collective that still
// waits for it, or that it is later expected in, can never complete, so
// the world is aborted with an error that says so instead of waiting for
// the timeout.
func (w *World) Leave(rank int) {
	w.mu.Lock()
	w.left[rank] = true
	var err error
	for _, r := range w.rounds {
		if err = w.leftBehind(r); err != nil {
			break
		}
	}
	w.mu.Unlock()
	if err != nil {
		w.Abort(err)
	}
}

// leftBehind returns an error when a participant of r has left without
// arriving. Called with w.mu held.
func (w *World) leftBehind(r *round) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.calls {
		if c == nil && w.left[r.ranks[k]] {
			return fmt.Errorf("dist: rank %d ended its program without calling %s", r.ranks[k], describeRound(r))
		}
	}
	return nil
}

// ErrClosed is the error of collectives issued after Close.
var ErrClosed = errors.New("dist: the process group was closed")

// Close aborts what is still pending and stops the communication queues.
func (w *World) Close() {
	w.Abort(ErrClosed)
	w.closeOnce.Do(func() { close(w.closed) })
}

// group is one rank's handle on a group: the world (id 0) or a subgroup.
type group struct {
	w      *World
	id     int
	ranks  []int // world ranks of the members, in group-rank order
	rank   int   // this rank's place in the group
	global int   // this rank in the world

	seq   uint64              // collectives issued so far
	sends map[int]uint64      // point-to-point messages issued, by peer
	recvs map[int]uint64      //
	made  int                 // NewGroup calls so far
	queue chan func()         // the communication queue
	red   map[redKey]*Reducer // reused by the queue goroutine only
}

type redKey struct {
	dt     uint8
	op     ReduceOp
	preMul float64
}

func (w *World) newGroup(id int, ranks []int, rank int) *group {
	g := &group{
		w: w, id: id, ranks: ranks, rank: rank, global: ranks[rank],
		sends: map[int]uint64{}, recvs: map[int]uint64{},
		queue: make(chan func(), 1024),
		red:   map[redKey]*Reducer{},
	}
	go g.loop()
	return g
}

// loop is the communication queue: it runs the group's collectives one
// after another, in the order the rank issued them.
func (g *group) loop() {
	for {
		select {
		case f := <-g.queue:
			f()
		case <-g.w.closed:
			g.drain()
			return
		}
	}
}

// drain runs what is left in the queue (after Close every item fails at
// once).
func (g *group) drain() {
	for {
		select {
		case f := <-g.queue:
			f()
		default:
			return
		}
	}
}

func (g *group) Rank() int { return g.rank }
func (g *group) Size() int { return len(g.ranks) }

// submit queues c as the group's next collective. keep holds the
// releases of the memory c works on; they run when it completes.
func (g *group) submit(c *call, keep []func()) *Work {
	done := func() {
		for _, release := range keep {
			release()
		}
	}
	if err := g.w.Err(); err != nil {
		done()
		return failed(err)
	}
	key := roundKey{group: g.id, seq: g.seq, src: -1, dst: -1}
	if c.kind == opSend || c.kind == opRecv {
		key = g.p2pKey(c)
	} else {
		g.seq++
	}
	c.seq = key.seq
	work := newWork()
	point := c.kind == opSend || c.kind == opRecv
	f := func() {
		start := time.Now()
		err := g.w.run(g, key, c)
		end := time.Now()
		if !point {
			g.w.busy[g.global].Add(int64(end.Sub(start)))
		}
		if g.w.trace != nil {
			g.w.trace.Add(g.traceEvent(c, start, end))
		}
		done()
		work.finish(err)
	}
	if point {
		// Point-to-point messages match by their per-pair number, not by
		// queue order, and must not hold up the queue: a ring of ranks
		// that each send before they receive would otherwise deadlock.
		go f()
		return work
	}
	g.queue <- f
	select {
	case <-g.w.closed:
		g.drain() // the queue's goroutine may have gone
	default:
	}
	return work
}

// CommTime is how long this rank's communication queues (of the group of
// all ranks and of its subgroups) have spent running collectives since the
// world was made: from the moment a queue starts one, waiting for the other
// ranks included, until it completes. Point-to-point messages, which
// bypass the queues, are not counted.
func (g *group) CommTime() time.Duration { return time.Duration(g.w.busy[g.global].Load()) }

// traceNames are the collectives' names in traces, as PyTorch's profiler
// spells them.
var traceNames = [...]string{
	opAllReduce: "all_reduce", opBroadcast: "broadcast", opReduceScatter: "reduce_scatter",
	opAllGather: "all_gather", opAllGatherInto: "all_gather_into", opAllToAll: "all_to_all",
	opBarrier: "barrier", opSend: "send", opRecv: "recv",
	opBroadcastObject: "broadcast_object", opGatherObject: "gather_object",
}

// traceEvent describes the collective c that ran from start to end: its
// bytes as nccl-tests counts them (the gathered buffer for all-gather and
// reduce-scatter) and its sequence number in the group (or, for a message,
// the peer).
func (g *group) traceEvent(c *call, start, end time.Time) trace.Event {
	bytes := int64(c.numel * c.dt.Size())
	switch c.kind {
	case opReduceScatter, opAllGather, opAllGatherInto:
		bytes *= int64(len(g.ranks))
	case opBroadcastObject, opGatherObject:
		bytes = int64(len(c.payload))
	}
	e := trace.Event{Rank: g.global, Lane: trace.CommLane(g.id), Name: traceNames[c.kind], Start: start, End: end,
		Args: [2]trace.Arg{{Key: "bytes", Val: bytes}, {Key: "seq", Val: int64(c.seq)}}}
	if c.kind == opSend || c.kind == opRecv {
		e.Lane = trace.P2P
		e.Args[1] = trace.Arg{Key: "peer", Val: int64(g.ranks[c.root])}
	}
	return e
}

func (g *group) p2pKey(c *call) roundKey {
	if c.kind == opSend {
		k := roundKey{group: g.id, src: g.rank, dst: c.root, seq: g.sends[c.root]}
		g.sends[c.root]++
		return k
	}
	k := roundKey{group: g.id, src: c.root, dst: g.rank, seq: g.recvs[c.root]}
	g.recvs[c.root]++
	return k
}

func (g *group) reducer(c *call) *Reducer {
	pre := c.preMul
	if pre == 0 { // a reduce-scatter's
		pre = 1
	}
	k := redKey{uint8(c.dt), c.op, pre}
	r := g.red[k]
	if r == nil {
		r = NewReducer(c.dt, c.op, len(g.ranks))
		if pre != 1 {
			r.preMultiply(pre)
		}
		g.red[k] = r
	}
	return r
}

// NewGroup implements ProcessGroup.
func (g *group) NewGroup(ranks []int) (ProcessGroup, error) {
	ranks = slices.Clone(ranks)
	slices.Sort(ranks)
	for i, r := range ranks {
		if r < 0 || r >= len(g.ranks) {
			return nil, fmt.Errorf("dist: newGroup: rank %d is not in the group of %d ranks", r, len(g.ranks))
		}
		if i > 0 && ranks[i-1] == r {
			return nil, fmt.Errorf("dist: newGroup: rank %d is listed twice", r)
		}
	}
	if len(ranks) == 0 {
		return nil, errors.New("dist: newGroup: no ranks given")
	}
	key := subgroupKey{parent: g.id, index: g.made}
	g.made++
	global := make([]int, len(ranks))
	for i, r := range ranks {
		global[i] = g.ranks[r]
	}
	g.w.mu.Lock()
	sg := g.w.groups[key]
	if sg == nil {
		sg = &subgroup{id: g.w.nextID, ranks: global}
		g.w.nextID++
		g.w.groups[key] = sg
	}
	g.w.mu.Unlock()
	if !slices.Equal(sg.ranks, global) {
		err := fmt.Errorf("dist: newGroup call %d: rank %d asked for ranks %v, an earlier rank for %v (every rank must pass the same list)",
			key.index, g.global, global, sg.ranks)
		g.w.Abort(err)
		return nil, err
	}
	me := slices.Index(global, g.global)
	if me < 0 {
		return nil, nil
	}
	return g.w.newGroup(sg.id, global, me), nil
}

type subgroupKey struct{ parent, index int }

type subgroup struct {
	id    int
	ranks []int
}

// HostBytes returns t's memory for a collective of a backend that works
// on host memory, and a release: the memory stays alive, even if t is
// released, until the backend calls it once the collective is done with
// the memory (or at once, when it refuses the call after all). It refuses
// a nil, failed, released, strided or non-host tensor, naming it as what
// ("the input"). writable marks t as written, so that autograd refuses
// values saved before.
func HostBytes(what string, t *tensor.Tensor, writable bool) ([]byte, func(), error) {
	if t == nil {
		return nil, nil, fmt.Errorf("%s is nil", what)
	}
	if err := t.Err(); err != nil {
		return nil, nil, err
	}
	if t.Released() {
		return nil, nil, fmt.Errorf("%s was released", what)
	}
	if t.MemoryFreed() {
		return nil, nil, fmt.Errorf("%s has no memory now (its memory was given back, as ZeRO stage 3 does between uses)", what)
	}
	if !t.IsContiguous() {
		return nil, nil, fmt.Errorf("%s must be contiguous (call .contiguous() first), got shape %v strides %v", what, t.Shape(), t.Strides())
	}
	if writable {
		tensor.WritableView(t)
	}
	b, ok := tensor.HostBytes(t)
	if !ok {
		return nil, nil, fmt.Errorf("%s is not in host memory (this backend needs CPU tensors)", what)
	}
	return b, tensor.Retain(t), nil
}
