package mpi

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/trace"
)

// The states of an op. The communication goroutine issues a queued op;
// the group's completer finishes an op MPI has completed; a failure or an
// abort settles whatever has not been finished, from any goroutine.
const (
	opQueued    int32 = iota // submitted, not issued yet: its memory is still its own
	opIssued                 // MPI may read and write its memory until it completes
	opFinishing              // MPI completed it; the completer is finishing it
	opSettled                // its Work has completed
)

// stage is one step of an op, run on the communication goroutine: it
// starts MPI calls and registers their requests (engine.posted), or
// hands local work to a goroutine (engine.offload). The next stage runs
// when they have all completed. An *Error is a failed MPI call, which
// breaks the world; any other error fails the op alone (the ranks all
// found it, so none of them calls MPI for it).
type stage func(o *op) error

// op is one collective or message on its way through the engine.
type op struct {
	g     *Group
	kind  kind
	what  string // "AllReduce of 4 float32"
	p2p   bool
	peer  int // the other rank of a message, in the group
	seq   uint64
	pseq  uint64 // a message's number among the group's messages of its kind to or from peer
	bytes int64  // what it moves, for the trace and the polling

	stages []stage
	next   int // the stage to run next
	open   int // requests (and offloaded work) of the current stage still in flight
	// lastColl is the last stage that calls an MPI collective (-1: none,
	// messages only). Until it has run, the group's later collectives
	// wait: every rank must call a communicator's collectives in the same
	// order. Messages, matched by their tags, may interleave freely.
	lastColl int
	// finish, when set, runs on the completer once MPI has completed the
	// op without an error, before its Work completes (copies out of
	// scratch memory).
	finish   func() error
	keep     []func() // releases of the tensors' memory
	complete func(error)

	state    atomic.Int32
	deadline time.Time

	// The communication goroutine's own.
	mpiDone    bool
	dropped    bool  // failed by a rank's Leave while MPI had it: MPI may still use its memory
	err        error // why it failed (not an MPI error: those break the world)
	start, end time.Time
}

func release(keep []func()) {
	for _, f := range keep {
		f()
	}
}

// slot is a request in flight and its op; want is the element count a
// receive must get (-1: not checked).
type slot struct {
	o    *op
	peer int // a receive's source, in the group
	want int32
	typ  uintptr
}

// The polling of requests in flight. The communication goroutine calls
// MPI_Testsome back to back while the requests are young (Open MPI moves
// data only inside MPI calls), for spinBase plus the time the bytes in
// flight take at spinRate; then it sleeps between calls, from minPause
// doubling to maxPause, until something completes or a call is queued.
const (
	spinBase = 100 * time.Microsecond
	spinRate = 1 << 30 // bytes a second
	spinMax  = 20 * time.Millisecond
	minPause = 4 * time.Microsecond
	maxPause = 250 * time.Microsecond
	// idleSpin is how long the communication goroutine, and a group's
	// completer, keep looking for more work once they have none, before
	// they park.
	idleSpin = 50 * time.Microsecond
)

// maxInFlight bounds the collectives of one group that are in flight at
// once; later ones wait in the group's queue, in order.
const maxInFlight = 32

// maxFlying bounds the bytes of one group's collectives in flight at once
// (but one collective may always be): large collectives one after
// another move their data faster than side by side.
const maxFlying = 4 << 20

// engine is a world's communication goroutine and the queue that feeds it.
type engine struct {
	lib     *Lib
	rank    int // in MPI_COMM_WORLD
	size    int
	timeout time.Duration
	debug   bool
	trace   *trace.Recorder

	mu       sync.Mutex
	queue    []*op
	live     map[*op]struct{} // submitted, not settled
	err      error            // set: later calls fail at once with it
	failed   bool             // err is a failure (a timeout, an MPI error, Abort), not Close
	stopping bool             // Close: drain, finalise and return
	bell     bell             // rung when a call is queued or the state changes
	exited   chan struct{}
	closeErr error     // MPI_Finalize's, once exited is closed
	kill     func()    // World.Kill's MPI_Abort, for the communication goroutine
	local    []*op     // ops whose offloaded work has finished
	leave    bool      // World.Leave: tell the other ranks
	lastCall time.Time // when the rank last called a collective or a message (status.go)
	// stuck is the error of the first work that failed on another rank's
	// Leave while MPI had it: MPI cannot cancel it, so Close leaves MPI
	// as it is.
	stuck error

	// Offloaded jobs handed to lingering completers (Group.linger).
	hmu       sync.Mutex
	lingering int
	jobs      []func()

	// The communication goroutine's own.
	groups    []*Group
	reqs      []uintptr
	slots     []slot
	indices   []int32
	statuses  []status
	p2p       []*op // messages in flight
	p2pQueue  []*op // messages taken, to start
	notice    notices
	queries   queries
	nextID    int   // the next subgroup's id
	held      int   // collectives queued on the groups or in flight
	flying    int64 // bytes of the ops in flight
	abandoned []*op // failed while in flight: MPI may still use their memory
	broken    bool  // a failure was found on this goroutine
	// spawned: the goroutine started another since it last parked. That
	// one waits on this goroutine's P, from which another thread takes it
	// sooner while this goroutine sleeps in a system call than while it
	// runs: it then parks without lingering.
	spawned bool

	busyNs    atomic.Int64 // time with collectives held, before busySince
	busySince atomic.Int64 // unix ns since when collectives are held; 0 when none
}

func newEngine(lib *Lib, opts dist.Options) *engine {
	e := &engine{
		lib: lib, timeout: opts.Timeout, debug: opts.Debug, trace: opts.Trace,
		live: map[*op]struct{}{}, exited: make(chan struct{}),
		nextID: 1,
	}
	if e.timeout <= 0 {
		e.timeout = dist.DefaultTimeout
	}
	return e
}

func (e *engine) signal() { e.bell.ring() }

// called reports whether the communication goroutine has something new to
// do: calls queued, Close, Kill or a failure.
func (e *engine) called() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue) > 0 || len(e.local) > 0 || e.stopping || e.kill != nil || e.failed || e.leave
}

// submit queues o and returns its Work.
func (e *engine) submit(o *op) *dist.Work {
	w, complete := dist.NewWork()
	o.complete = complete
	e.mu.Lock()
	if err := e.err; err != nil {
		e.mu.Unlock()
		release(o.keep)
		return dist.Failed(fmt.Errorf("mpi: %s on %s was not issued: %w", o.what, o.g.where(), err))
	}
	now := time.Now()
	o.deadline, e.lastCall = now.Add(e.timeout), now
	if o.p2p {
		c := &o.g.recvs
		if o.kind == kSend {
			c = &o.g.sends
		}
		if *c == nil {
			*c = make([]uint64, o.g.size)
		}
		o.pseq = (*c)[o.peer]
		(*c)[o.peer]++
	} else {
		o.seq = o.g.seq
		o.g.seq++
	}
	e.queue = append(e.queue, o)
	e.live[o] = struct{}{}
	e.mu.Unlock()
	e.signal()
	return w
}

// settle completes o's Work with err unless it has completed or is being
// finished. Its memory goes back only if MPI never had it.
func (e *engine) settle(o *op, err error) {
	for {
		s := o.state.Load()
		if s == opFinishing || s == opSettled {
			return
		}
		if o.state.CompareAndSwap(s, opSettled) {
			if s == opQueued {
				release(o.keep)
			}
			o.complete(err)
			return
		}
	}
}

// finishOp completes o, which MPI has completed, on its group's completer.
func (e *engine) finishOp(o *op) {
	if !o.state.CompareAndSwap(opIssued, opFinishing) {
		return // failed meanwhile
	}
	err := o.err
	if err == nil && o.finish != nil {
		err = o.finish()
	}
	e.mu.Lock()
	delete(e.live, o)
	e.mu.Unlock()
	release(o.keep)
	o.state.Store(opSettled)
	o.complete(err)
}

// fail stops the world after a failure found on op at (nil: none): at
// fails with cause, every other unfinished op with an error that wraps
// it, and later calls fail at once. Abort is the same with at nil and
// cause as every op's error. The first failure wins.
func (e *engine) fail(at *op, cause error, wrap bool) {
	e.mu.Lock()
	if e.failed {
		e.mu.Unlock()
		return
	}
	e.err, e.failed = cause, true
	ops := make([]*op, 0, len(e.live))
	for o := range e.live {
		ops = append(ops, o)
	}
	clear(e.live)
	e.mu.Unlock()
	// In issue order, as they would have completed.
	slices.SortFunc(ops, func(a, b *op) int { return a.deadline.Compare(b.deadline) })
	for _, o := range ops {
		err := cause
		if o != at && wrap {
			err = fmt.Errorf("mpi: %s on %s did not complete: %w", o.what, o.g.where(), cause)
		}
		e.settle(o, err)
	}
	e.signal()
}

// stopCalled reports whether Close or Kill was called.
func (e *engine) stopCalled() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopping || e.kill != nil
}

// isFailed reports whether the world failed.
func (e *engine) isFailed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

// loop is the communication goroutine: locked to its OS thread, it
// initialises MPI and makes every MPI call of the process.
func (e *engine) loop(ready chan<- error, init func() error) {
	runtime.LockOSThread()
	defer close(e.exited)
	if err := init(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	var idleSince time.Time // of the requests in flight: since the last completion
	sleeps := 0
	busy := false      // ops were held since the goroutine last parked
	lingering := false // linger before parking (engine.linger)
	for {
		took, stopping := e.intake()
		if e.broken || e.isFailed() {
			e.abandon()
			e.waitStop()
			return
		}
		if e.idle() {
			if e.queries.op != nil {
				e.progress(true) // answer the status queries that came
			}
			if stopping {
				if err := e.stuckErr(); err != nil {
					e.closeErr = e.unfinalised(err)
					return
				}
				e.closeErr = e.finalize()
				return
			}
			// Idle, it still looks for status queries every idlePoll.
			pause := time.Duration(0)
			if e.queries.op != nil {
				pause = idlePoll
			}
			switch {
			case !busy:
				e.bell.wait(pause, e.called)
			case lingering && !e.spawned && e.linger():
			default:
				// Linger next time only if this sleep is short: the
				// rank issues its collectives one at a time.
				parked := time.Now()
				e.bell.wait(pause, e.called)
				lingering = time.Since(parked) < idleSpin
			}
			idleSince, busy, e.spawned = time.Time{}, false, false
			continue
		}
		busy = true
		n := e.progress(false)
		e.issue()
		now := time.Now()
		if e.broken || e.checkDeadlines(now) {
			continue
		}
		if took || n > 0 || idleSince.IsZero() {
			idleSince, sleeps = now, 0
			continue
		}
		if now.Sub(idleSince) < e.spinFor() {
			yield()
			continue
		}
		e.bell.wait(min(minPause<<min(sleeps, 16), maxPause), e.called)
		sleeps++
	}
}

// linger polls the queue, yielding the core between looks, for idleSpin
// after the last op held has completed, before the goroutine parks: a
// rank that issues its collectives one at a time issues the next one
// within microseconds, which is then taken without a futex wake-up. It
// reports whether something was called meanwhile.
func (e *engine) linger() bool {
	until := time.Now().Add(idleSpin)
	for {
		if e.called() {
			return true
		}
		if time.Now().After(until) {
			return false
		}
		yield()
	}
}

// spinFor is how long the goroutine polls without sleeping after the
// last completion: longer while many bytes are in flight, which move
// only while it calls MPI.
func (e *engine) spinFor() time.Duration {
	return min(spinBase+time.Duration(e.flying*int64(time.Second)/spinRate), spinMax)
}

// intake takes the queued ops and issues them: messages start at once,
// collectives join their group's queue; it tells the other ranks when
// World.Leave was called. It reports whether it took any, and whether
// Close was called.
func (e *engine) intake() (took, stopping bool) {
	e.mu.Lock()
	q := e.queue
	e.queue = nil
	stopping = e.stopping
	kill := e.kill
	local := e.local
	e.local = nil
	leave := e.leave
	e.leave = false
	e.mu.Unlock()
	if kill != nil {
		kill()
	}
	if leave {
		e.tellLeft()
	}
	for _, o := range local {
		o.open--
		if o.open == 0 && !e.broken && !o.dropped {
			e.advance(o)
		}
	}
	for _, o := range q {
		if o.p2p {
			e.p2pQueue = append(e.p2pQueue, o)
			continue
		}
		o.g.pending = append(o.g.pending, o)
		e.hold(1)
	}
	e.issue()
	return len(q) > 0 || len(local) > 0, stopping
}

// issue starts the messages taken, then the queued collectives of every
// group, in order, up to maxInFlight each; an op with stages still to
// come holds back the ones after it, whose calls must follow its own on
// every rank. An op that needs a rank that has left without issuing its
// part fails without an MPI call, once the rank's Leave notice has been
// seen (by progress).
func (e *engine) issue() {
	for i, o := range e.p2pQueue {
		e.p2pQueue[i] = nil
		if e.broken {
			continue // abandon settles it
		}
		if r, gone := e.unreachable(o); gone {
			e.dropOp(o, r)
			continue
		}
		if o.state.CompareAndSwap(opQueued, opIssued) {
			e.p2p = append(e.p2p, o)
			e.startOp(o)
		}
	}
	e.p2pQueue = e.p2pQueue[:0]
	for _, g := range e.groups {
		for len(g.pending) > 0 && len(g.inflight) < maxInFlight && !e.broken {
			if n := len(g.inflight); n > 0 && (g.inflight[n-1].blocking() || g.flying+g.pending[0].bytes > maxFlying) {
				break
			}
			o := g.pending[0]
			g.pending = g.pending[1:]
			if r, gone := e.unreachable(o); gone {
				e.dropOp(o, r)
				e.hold(-1)
				continue
			}
			if !o.state.CompareAndSwap(opQueued, opIssued) {
				e.hold(-1) // settled by an abort
				continue
			}
			g.inflight = append(g.inflight, o)
			e.startOp(o)
		}
		e.deliver(g)
	}
}

// blocking reports whether o has started and has collectives still to
// call.
func (o *op) blocking() bool { return !o.mpiDone && o.next <= o.lastColl }

// startOp issues o's first stage.
func (e *engine) startOp(o *op) {
	o.start = time.Now()
	e.flying += o.bytes
	o.g.flying += o.bytes
	e.advance(o)
}

// grow counts n more bytes for o, which learns what it moves as it goes
// (the object calls, after their lengths): in flight too once started.
func (e *engine) grow(o *op, n int64) {
	o.bytes += n
	if !o.start.IsZero() && !o.mpiDone {
		e.flying += n
		o.g.flying += n
	}
}

// advance runs o's next stages while none of them has requests in
// flight; past the last one, o is done.
func (e *engine) advance(o *op) {
	for o.open == 0 && !o.mpiDone && !e.broken && !o.dropped {
		if o.err != nil || o.next == len(o.stages) {
			e.done(o)
			return
		}
		st := o.stages[o.next]
		o.next++
		if err := st(o); err != nil {
			var me *Error
			if errors.As(err, &me) {
				e.breakOn(o, err)
				return
			}
			o.err = err
		}
	}
}

// offload runs fn, a stage's local work (a reduction), on a goroutine of
// its own: the communication goroutine goes on testing the requests of
// the other ops meanwhile. The op's next stage runs when fn has returned.
func (e *engine) offload(o *op, fn func()) {
	o.open++
	job := func() {
		fn()
		e.mu.Lock()
		e.local = append(e.local, o)
		e.mu.Unlock()
		e.bell.ring()
	}
	// A completer that lingers runs it at once: a goroutine started here
	// would wait for a free P (the communication goroutine keeps its
	// own), which the lingering completer holds.
	e.hmu.Lock()
	if len(e.jobs) < e.lingering {
		e.jobs = append(e.jobs, job)
		e.hmu.Unlock()
		return
	}
	e.hmu.Unlock()
	e.spawned = true
	go job()
}

// takeJob returns an offloaded job for a lingering completer (nil: none).
func (e *engine) takeJob() func() {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	if len(e.jobs) == 0 {
		return nil
	}
	j := e.jobs[0]
	e.jobs[0] = nil
	e.jobs = e.jobs[1:]
	return j
}

// lingers counts a completer in or out of the lingering ones; the jobs
// that no lingering completer is left to run get goroutines of their own.
func (e *engine) lingers(d int) {
	e.hmu.Lock()
	e.lingering += d
	var left []func()
	if n := len(e.jobs) - e.lingering; n > 0 {
		left = slices.Clone(e.jobs[len(e.jobs)-n:])
		clear(e.jobs[len(e.jobs)-n:])
		e.jobs = e.jobs[:len(e.jobs)-n]
	}
	e.hmu.Unlock()
	for _, j := range left {
		go j()
	}
}

// posted registers the request of a call that returned rc. want, when
// not negative, is the element count (of type typ) a receive must get.
func (e *engine) posted(o *op, fn string, rc int32, req uintptr) error {
	return e.postedRecv(o, fn, rc, req, -1, -1, 0)
}

// postedRecv registers the request of a receive from peer, which must
// bring want elements of type typ.
func (e *engine) postedRecv(o *op, fn string, rc int32, req uintptr, peer int, want int32, typ uintptr) error {
	if rc != success {
		return e.lib.err(fn, rc)
	}
	if req == e.lib.requestNull {
		return nil // completed at once
	}
	e.reqs = append(e.reqs, req)
	e.slots = append(e.slots, slot{o: o, peer: peer, want: want, typ: typ})
	o.open++
	return nil
}

// done is called when MPI has completed o (or o failed on its own):
// messages complete at once, collectives in their group's order.
func (e *engine) done(o *op) {
	o.mpiDone = true
	o.end = time.Now()
	e.flying -= o.bytes
	o.g.flying -= o.bytes
	e.record(o)
	if o.p2p {
		if i := slices.Index(e.p2p, o); i >= 0 {
			e.p2p = slices.Delete(e.p2p, i, i+1)
		}
		go e.finishOp(o)
		return
	}
	e.deliver(o.g)
}

// deliver hands the group's completed collectives, from the oldest on, to
// its completer.
func (e *engine) deliver(g *Group) {
	n := 0
	for n < len(g.inflight) && g.inflight[n].mpiDone {
		n++
	}
	if n == 0 {
		return
	}
	if g.handOver(g.inflight[:n]) {
		e.spawned = true
	}
	g.inflight = slices.Delete(g.inflight, 0, n)
	e.hold(-n)
}

// hold counts the collectives held by the groups, for CommTime.
func (e *engine) hold(d int) {
	was := e.held
	e.held += d
	switch {
	case was == 0 && e.held > 0:
		e.busySince.Store(time.Now().UnixNano())
	case was > 0 && e.held == 0:
		since := e.busySince.Swap(0)
		e.busyNs.Add(time.Now().UnixNano() - since)
	}
}

// commTime is how long the groups have held collectives.
func (e *engine) commTime() time.Duration {
	busy := e.busyNs.Load()
	if since := e.busySince.Load(); since != 0 {
		busy += time.Now().UnixNano() - since
	}
	return time.Duration(busy)
}

// idle reports whether nothing is queued on the groups or in flight.
func (e *engine) idle() bool { return e.held == 0 && len(e.p2p) == 0 && len(e.p2pQueue) == 0 }

// progress tests the requests in flight (MPI_Testsome, which also moves
// the data of every one of them) and advances the ops whose requests have
// all completed. It returns how many requests completed. The receive of
// Leave notices is tested with the works' requests, not alone: a notice
// matters only to works that wait for MPI.
func (e *engine) progress(poll bool) int {
	n := len(e.reqs)
	if n == 0 || !poll && !slices.ContainsFunc(e.slots, func(s slot) bool { return !e.background(s) }) {
		return 0
	}
	if cap(e.indices) < n {
		e.indices = make([]int32, n)
		e.statuses = make([]status, n)
	}
	e.indices, e.statuses = e.indices[:n], e.statuses[:n]
	var count int32
	// int MPI_Testsome(int incount, MPI_Request reqs[], int *outcount,
	//     int indices[], MPI_Status statuses[])
	rc := call(e.lib.testsome, uintptr(n), uintptr(unsafe.Pointer(&e.reqs[0])), uintptr(unsafe.Pointer(&count)),
		uintptr(unsafe.Pointer(&e.indices[0])), uintptr(unsafe.Pointer(&e.statuses[0])))
	if rc != success && rc != errInStatus {
		e.breakOn(e.slots[0].o, e.lib.err("MPI_Testsome", rc))
		return 0
	}
	if count == undefined || count <= 0 {
		return 0
	}
	var ready []*op
	var notice *status // a Leave notice that arrived
	var queried []int  // the ranks whose status queries arrived
	for k := range int(count) {
		i := e.indices[k]
		s := e.slots[i]
		e.slots[i].o = nil
		st := &e.statuses[k]
		if rc == errInStatus && st.Error != success {
			e.breakOn(s.o, e.lib.err("MPI_Testsome", st.Error))
			return 0
		}
		if s.o == e.notice.op {
			c := *st
			notice = &c
			continue
		}
		if s.o == e.queries.op {
			queried = append(queried, int(st.Source))
			continue
		}
		if p := e.probeOf(s.o); p != nil {
			e.answered(p, s.peer, st)
			continue
		}
		if s.want >= 0 {
			var got int32
			// int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count)
			if rc := call(e.lib.getCount, uintptr(unsafe.Pointer(st)), s.typ, uintptr(unsafe.Pointer(&got))); rc != success {
				e.breakOn(s.o, e.lib.err("MPI_Get_count", rc))
				return 0
			}
			if got != s.want && s.o.err == nil {
				s.o.err = fmt.Errorf("mpi: %s on %s: rank %d sent %d elements, not %d", s.o.what, s.o.g.where(), s.o.g.ranks[s.peer], got, s.want)
			}
		}
		s.o.open--
		if s.o.open == 0 {
			ready = append(ready, s.o)
		}
	}
	// Drop the completed requests, then advance their ops (which may
	// post more).
	j := 0
	for i, s := range e.slots {
		if s.o == nil {
			continue
		}
		e.reqs[j], e.slots[j] = e.reqs[i], s
		j++
	}
	clear(e.slots[j:])
	e.reqs, e.slots = e.reqs[:j], e.slots[:j]
	for _, o := range ready {
		e.advance(o)
	}
	if notice != nil && !e.broken {
		e.noticed(notice)
	}
	for _, r := range queried {
		if !e.broken {
			e.answer(r)
		}
	}
	return int(count)
}

// checkDeadlines fails the oldest op still in flight past its deadline;
// it reports whether the world broke.
func (e *engine) checkDeadlines(now time.Time) bool {
	if e.queries.probe != nil && (e.finishProbe(now) || e.queries.probe != nil) {
		return e.broken
	}
	var late *op
	for _, g := range e.groups {
		if len(g.inflight) > 0 && now.After(g.inflight[0].deadline) {
			late = g.inflight[0]
			break
		}
	}
	for _, o := range e.p2p {
		if late == nil && now.After(o.deadline) {
			late = o
		}
	}
	if late == nil {
		return false
	}
	if e.queries.op != nil {
		// Ask the others what they have called; the error names them.
		e.startProbe(late)
		return false
	}
	e.broken = true
	e.fail(late, fmt.Errorf("mpi: %s on %s timed out after %v; other ranks may have died", late.what, late.g.where(), e.timeout), true)
	return true
}

// breakOn stops the world after an MPI call of o failed: MPI leaves the
// communicator in an undefined state. o is nil (or the notices' own) for
// a call of no op's.
func (e *engine) breakOn(o *op, err error) {
	e.broken = true
	if o == nil || o.g == nil {
		e.fail(nil, fmt.Errorf("mpi: rank %d: %w", e.rank, err), true)
		return
	}
	e.fail(o, fmt.Errorf("mpi: %s on %s failed: %w", o.what, o.g.where(), err), true)
}

// abandon drops every op the goroutine holds after a failure, keeping
// those that were in flight (and the memory their requests use, which
// MPI may still write) reachable for good: MPI cannot cancel a
// collective.
func (e *engine) abandon() {
	e.broken = true
	for _, g := range e.groups {
		e.abandoned = append(e.abandoned, g.inflight...)
		g.inflight, g.pending = nil, nil
	}
	e.abandoned = append(e.abandoned, e.p2p...)
	e.p2p = nil
	clear(e.p2pQueue)
	e.p2pQueue = nil
	e.reqs, e.slots = nil, nil
	if e.held > 0 {
		e.hold(-e.held)
	}
}

// waitStop waits until Close is called, after a failure: no MPI call is
// made any more, and MPI_Finalize would wait for ranks that may be dead.
func (e *engine) waitStop() {
	for {
		e.mu.Lock()
		stopping := e.stopping
		e.queue = nil
		kill := e.kill
		e.mu.Unlock()
		if kill != nil {
			kill()
		}
		if stopping {
			return
		}
		e.bell.wait(0, e.stopCalled)
	}
}

// record adds o to the trace.
func (e *engine) record(o *op) {
	if e.trace == nil || o.err != nil {
		return
	}
	ev := trace.Event{Rank: e.rank, Lane: trace.CommLane(o.g.id), Name: traceNames[o.kind], Start: o.start, End: o.end,
		Args: [2]trace.Arg{{Key: "bytes", Val: o.bytes}, {Key: "seq", Val: int64(o.seq)}}}
	if o.p2p {
		ev.Lane = trace.P2P
		ev.Args[1] = trace.Arg{Key: "peer", Val: int64(o.g.ranks[o.peer])}
	}
	e.trace.Add(ev)
}
