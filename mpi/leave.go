package mpi

import (
	"fmt"
	"slices"
	"unsafe"
)

// The Leave notices. A rank whose script has ended sends every other
// rank, on a communicator of their own (an MPI_Comm_dup of
// MPI_COMM_WORLD, so that they never match the groups' traffic), what it
// issued in each group the two share: its collectives, and its messages
// to and from that rank. Every rank keeps a receive from any rank posted
// there, tested with the works' requests (MPI_Testsome); when a notice
// arrives, the works that need the rank that left, and that it never
// issued, fail at once.

// noticeTag is the tag of the notices, on their communicator.
const noticeTag = 1

// maxNoticeGroups bounds the groups a notice describes (4 int64s each,
// after their count): the works of a group it leaves out, should a rank
// share more with another, fail as if the rank that left had issued none.
const maxNoticeGroups = 1023

// issued is what a rank that left issued in a group it shares with this
// one: collectives, and messages to (sends) and from (recvs) this rank.
type issued struct{ colls, sends, recvs uint64 }

// leaver is a rank that left, and what it issued, by group key.
type leaver struct {
	rank int
	in   map[uint64]issued
}

// notices is the engine's side of Leave, the communication goroutine's
// own.
type notices struct {
	comm  uintptr // the communicator of the notices
	op    *op     // marks the posted receive's slot among the requests
	buf   []int64 // where the receive writes
	heard int     // notices received
	gone  []*leaver
	sent  [][]int64 // this rank's notices, which MPI may still be sending
}

// openNotices makes the notices' communicator and posts the receive of
// the first one, on the communication goroutine, once the world's group
// is made.
func (e *engine) openNotices() error {
	l := e.lib
	var c uintptr
	// int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
	if rc := call(l.commDup, l.commWorld, uintptr(unsafe.Pointer(&c))); rc != success {
		return l.err("MPI_Comm_dup", rc)
	}
	e.notice.comm = c
	if rc := call(l.commSetErrhandler, c, l.errorsReturn); rc != success {
		return l.err("MPI_Comm_set_errhandler", rc)
	}
	e.notice.op = &op{}
	e.notice.buf = make([]int64, 1+4*maxNoticeGroups)
	if err := e.listen(); err != nil {
		return err
	}
	return e.listenQueries()
}

// listen posts the receive of the next notice, unless every other rank
// has sent its own.
func (e *engine) listen() error {
	if e.notice.heard >= e.size-1 {
		return nil
	}
	l, b := e.lib, e.notice.buf
	var req uintptr
	// int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source,
	//     int tag, MPI_Comm comm, MPI_Request *request)
	rc := call(l.irecv, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), l.typeInt64, cint(anySource), noticeTag, e.notice.comm,
		uintptr(unsafe.Pointer(&req)))
	if rc != success {
		return l.err("MPI_Irecv", rc)
	}
	e.reqs = append(e.reqs, req)
	e.slots = append(e.slots, slot{o: e.notice.op, peer: -1, want: -1})
	return nil
}

// closeNotices cancels the posted receive and frees the notices'
// communicator, before MPI_Finalize.
func (e *engine) closeNotices() []error {
	l := e.lib
	var errs []error
	for i, s := range e.slots {
		if !e.background(s) {
			continue
		}
		req := e.reqs[i]
		// int MPI_Cancel(MPI_Request *request); int MPI_Wait(MPI_Request *request, MPI_Status *status):
		// the receive completes, cancelled or with a notice that
		// arrived meanwhile.
		if rc := call(l.cancel, uintptr(unsafe.Pointer(&req))); rc != success {
			errs = append(errs, l.err("MPI_Cancel", rc))
		} else if rc := call(l.wait, uintptr(unsafe.Pointer(&req)), statusIgnore); rc != success {
			errs = append(errs, l.err("MPI_Wait", rc))
		}
	}
	e.reqs, e.slots = nil, nil
	if e.notice.comm != 0 {
		c := e.notice.comm
		if rc := call(l.commFree, uintptr(unsafe.Pointer(&c))); rc != success {
			errs = append(errs, l.err("MPI_Comm_free", rc))
		}
		e.notice.comm = 0
	}
	return errs
}

// tellLeft sends every other rank this rank's notice (World.Leave),
// without waiting for them: each MPI_Isend's request is freed at once,
// and MPI sends the notice on its own (it is small, and the receiver has
// a receive posted for it).
func (e *engine) tellLeft() {
	if e.size < 2 || e.notice.comm == 0 {
		return
	}
	type count struct {
		g            *Group
		seq          uint64
		sends, recvs []uint64
	}
	e.mu.Lock()
	counts := make([]count, len(e.groups))
	for i, g := range e.groups {
		counts[i] = count{g, g.seq, slices.Clone(g.sends), slices.Clone(g.recvs)}
	}
	e.mu.Unlock()
	at := func(c []uint64, k int) int64 {
		if k < len(c) {
			return int64(c[k])
		}
		return 0
	}
	l := e.lib
	for p := range e.size {
		if p == e.rank {
			continue
		}
		msg := []int64{0}
		for _, c := range counts {
			k := slices.Index(c.g.ranks, p)
			if k < 0 || msg[0] == maxNoticeGroups {
				continue
			}
			msg = append(msg, int64(c.g.key), int64(c.seq), at(c.sends, k), at(c.recvs, k))
			msg[0]++
		}
		e.notice.sent = append(e.notice.sent, msg)
		var req uintptr
		rc := call(l.isend, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)), l.typeInt64, uintptr(p), noticeTag, e.notice.comm,
			uintptr(unsafe.Pointer(&req)))
		if rc != success {
			e.breakOn(nil, fmt.Errorf("telling rank %d that this rank has left: %w", p, l.err("MPI_Isend", rc)))
			return
		}
		// int MPI_Request_free(MPI_Request *request)
		if rc := call(l.requestFree, uintptr(unsafe.Pointer(&req))); rc != success {
			e.breakOn(nil, l.err("MPI_Request_free", rc))
			return
		}
	}
}

// noticed reads the notice the posted receive got (st), posts the next
// receive and fails the works that need the rank that left.
func (e *engine) noticed(st *status) {
	l := e.lib
	var n int32
	if rc := call(l.getCount, uintptr(unsafe.Pointer(st)), l.typeInt64, uintptr(unsafe.Pointer(&n))); rc != success {
		e.breakOn(nil, l.err("MPI_Get_count", rc))
		return
	}
	lv := &leaver{rank: int(st.Source), in: map[uint64]issued{}}
	msg := e.notice.buf[:max(0, min(int(n), len(e.notice.buf)))]
	if len(msg) > 0 {
		for i := range int(min(max(msg[0], 0), int64((len(msg)-1)/4))) {
			m := msg[1+4*i:]
			lv.in[uint64(m[0])] = issued{uint64(m[1]), uint64(m[2]), uint64(m[3])}
		}
	}
	e.notice.heard++
	if err := e.listen(); err != nil {
		e.breakOn(nil, err)
		return
	}
	if lv.rank < 0 || lv.rank >= e.size || lv.rank == e.rank || slices.ContainsFunc(e.notice.gone, func(g *leaver) bool { return g.rank == lv.rank }) {
		return
	}
	e.notice.gone = append(e.notice.gone, lv)
	e.dropUnreachable()
}

// unreachable reports whether o needs a rank that has left and that
// never issued its part of o, and which.
func (e *engine) unreachable(o *op) (int, bool) {
	if len(e.notice.gone) == 0 {
		return 0, false
	}
	g := o.g
	if o.p2p {
		r := g.ranks[o.peer]
		for _, lv := range e.notice.gone {
			if lv.rank != r {
				continue
			}
			in := lv.in[g.key]
			if o.kind == kSend && o.pseq >= in.recvs || o.kind == kRecv && o.pseq >= in.sends {
				return r, true
			}
		}
		return 0, false
	}
	for _, lv := range e.notice.gone {
		if g.id != 0 && !slices.Contains(g.ranks, lv.rank) {
			continue
		}
		if o.seq >= lv.in[g.key].colls {
			return lv.rank, true
		}
	}
	return 0, false
}

// dropUnreachable fails the queued and in-flight works that need a rank
// that has left and that it never issued. Those MPI had cannot be
// cancelled: their requests are dropped (MPI may still use their memory,
// which is never given back), and the engine is stuck: Close will leave
// MPI as it is.
func (e *engine) dropUnreachable() {
	drop := func(ops []*op, coll bool) []*op {
		kept := ops[:0]
		for _, o := range ops {
			if r, gone := e.unreachable(o); gone {
				e.dropOp(o, r)
				if coll {
					e.hold(-1)
				}
				continue
			}
			kept = append(kept, o)
		}
		clear(ops[len(kept):])
		return kept
	}
	for _, g := range e.groups {
		g.pending = drop(g.pending, true)
		g.inflight = drop(g.inflight, true)
		e.deliver(g)
	}
	e.p2pQueue = drop(e.p2pQueue, false)
	e.p2p = drop(e.p2p, false)
	var stuck error
	j := 0
	for i, s := range e.slots {
		if s.o.dropped {
			if stuck == nil {
				stuck = s.o.err
			}
			continue
		}
		e.reqs[j], e.slots[j] = e.reqs[i], s
		j++
	}
	clear(e.slots[j:])
	e.reqs, e.slots = e.reqs[:j], e.slots[:j]
	if stuck != nil {
		e.mu.Lock()
		if e.stuck == nil {
			e.stuck = stuck
		}
		e.mu.Unlock()
	}
}

// dropOp fails o, which needs rank r, which has left without issuing its
// part.
func (e *engine) dropOp(o *op, r int) {
	what := "collective"
	if o.p2p {
		what = "message"
	}
	err := fmt.Errorf("mpi: %s on %s: rank %d has finished its script; this %s can never complete", o.what, o.g.where(), r, what)
	e.mu.Lock()
	delete(e.live, o)
	e.mu.Unlock()
	switch {
	case o.state.Load() == opQueued:
		e.settle(o, err) // never issued: its memory goes back
	case o.mpiDone:
		// MPI completed its part here; it waited for the group's
		// earlier collectives.
		if o.state.CompareAndSwap(opIssued, opSettled) {
			release(o.keep)
			o.complete(err)
		}
	default:
		o.dropped, o.err = true, err
		e.flying -= o.bytes
		o.g.flying -= o.bytes
		e.abandoned = append(e.abandoned, o)
		e.settle(o, err)
	}
}

// stuckErr is the error of the first work that failed on a Leave while
// MPI had it, or nil.
func (e *engine) stuckErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stuck
}

// unfinalised is Close's error when a work that failed on a Leave keeps
// MPI from being finalised.
func (e *engine) unfinalised(err error) error {
	return fmt.Errorf("mpi: closing rank %d: MPI_Finalize was not called, since MPI cannot cancel a work that can never complete: %w", e.rank, err)
}

// Leave says that this process's rank (local 0, the only one it holds)
// has finished its script without an error; the job calls it before
// Close, and the rank issues nothing after it. Every other rank is told
// at once, with a message that Leave does not wait for: there, every
// work that needs this rank and that this rank never issued (a
// collective of a group that contains it, a message to or from it) fails
// as soon as the message arrives, or at once when issued later, with an
// error that names it ("mpi: AllReduce of 4 float32 on rank 0: rank 1 has
// finished its script; this collective can never complete"), instead of
// at its timeout. The works this rank did issue complete as usual, and
// so do the works of groups without it.
func (w *World) Leave(local int) {
	if local != 0 {
		return
	}
	w.leaveOnce.Do(func() {
		e := w.e
		e.mu.Lock()
		e.leave = true
		e.mu.Unlock()
		e.signal()
	})
}
