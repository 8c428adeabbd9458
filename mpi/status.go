package mpi

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"
)

// The status queries. MPI cannot say which rank a collective waits for,
// so when one times out the rank asks the other members of its group, on
// the notices' communicator, what they have called: every rank keeps a
// receive of queries posted, and its communication goroutine answers
// from wherever it is — waiting in a collective, or idle (it then looks
// every idlePoll) — with how many collectives it has called in each
// group and how long ago it last called anything. After probeWait the
// timeout's error names the ranks that have not called the collective,
// and those that did not answer (stopped with SIGSTOP, or a process that
// hangs outside the engine), as the in-process backend names them.

const (
	queryTag  = 2
	answerTag = 3
	// probeWait is how long a rank whose collective timed out waits for
	// the others' answers.
	probeWait = 2 * time.Second
	// idlePoll is how often an idle communication goroutine looks for
	// queries.
	idlePoll = 100 * time.Millisecond
)

// queries is the engine's side of the status queries, the communication
// goroutine's own.
type queries struct {
	op      *op     // marks the posted query receive's slot
	buf     []int64 // where it writes (the query carries nothing else)
	answers [][]int64
	// probe is the open probe of a timed-out collective, if any; retired
	// are those whose collective completed meanwhile, whose answers'
	// receives may still be posted.
	probe   *probe
	retired []*probe
}

// probe asks the members of a late collective's group what they have
// called.
type probe struct {
	late     *op
	deadline time.Time
	op       *op             // marks the answers' receives
	bufs     map[int][]int64 // by world rank
	answered map[int][]int64
	waiting  int
	sent     [][]int64
}

// listenQueries posts the receive of the next query.
func (e *engine) listenQueries() error {
	if e.size < 2 {
		return nil
	}
	if e.queries.op == nil {
		e.queries.op = &op{}
		e.queries.buf = make([]int64, 1)
	}
	l := e.lib
	var req uintptr
	rc := call(l.irecv, uintptr(unsafe.Pointer(&e.queries.buf[0])), 1, l.typeInt64, cint(anySource), queryTag, e.notice.comm,
		uintptr(unsafe.Pointer(&req)))
	if rc != success {
		return l.err("MPI_Irecv", rc)
	}
	e.reqs = append(e.reqs, req)
	e.slots = append(e.slots, slot{o: e.queries.op, peer: -1, want: -1})
	return nil
}

// background reports whether s is one of the engine's own receives
// (notices, queries, answers) rather than a work's.
func (e *engine) background(s slot) bool {
	return s.o != nil && (s.o == e.notice.op || s.o == e.queries.op || e.probeOf(s.o) != nil)
}

// probeOf returns the probe whose answers' receives o marks.
func (e *engine) probeOf(o *op) *probe {
	if p := e.queries.probe; p != nil && p.op == o {
		return p
	}
	for _, p := range e.queries.retired {
		if p.op == o {
			return p
		}
	}
	return nil
}

// answer sends rank src what this rank has called, and posts the receive
// of the next query.
func (e *engine) answer(src int) {
	e.mu.Lock()
	idle := time.Duration(0)
	if t := e.lastCall; !t.IsZero() {
		idle = time.Since(t)
	}
	msg := []int64{int64(idle), 0}
	for _, g := range e.groups {
		if msg[1] == maxNoticeGroups {
			break
		}
		msg = append(msg, int64(g.key), int64(g.seq))
		msg[1]++
	}
	e.mu.Unlock()
	l := e.lib
	e.queries.answers = append(e.queries.answers, msg)
	var req uintptr
	if rc := call(l.isend, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)), l.typeInt64, uintptr(src), answerTag, e.notice.comm,
		uintptr(unsafe.Pointer(&req))); rc != success {
		e.breakOn(nil, fmt.Errorf("answering rank %d's status query: %w", src, l.err("MPI_Isend", rc)))
		return
	}
	if rc := call(l.requestFree, uintptr(unsafe.Pointer(&req))); rc != success {
		e.breakOn(nil, l.err("MPI_Request_free", rc))
		return
	}
	if err := e.listenQueries(); err != nil {
		e.breakOn(nil, err)
	}
}

// startProbe asks the other members of late's group what they have
// called; the engine fails late once they have answered or probeWait has
// passed (finishProbe).
func (e *engine) startProbe(late *op) {
	p := &probe{late: late, deadline: time.Now().Add(probeWait), op: &op{}, bufs: map[int][]int64{}, answered: map[int][]int64{}}
	e.queries.probe = p
	l := e.lib
	for _, r := range late.g.ranks {
		if r == e.rank {
			continue
		}
		q := []int64{int64(e.rank)}
		p.sent = append(p.sent, q)
		var req uintptr
		if rc := call(l.isend, uintptr(unsafe.Pointer(&q[0])), 1, l.typeInt64, uintptr(r), queryTag, e.notice.comm,
			uintptr(unsafe.Pointer(&req))); rc != success {
			continue // it then does not answer, and is named so
		}
		call(l.requestFree, uintptr(unsafe.Pointer(&req)))
		buf := make([]int64, 2+2*maxNoticeGroups)
		if rc := call(l.irecv, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), l.typeInt64, uintptr(r), answerTag, e.notice.comm,
			uintptr(unsafe.Pointer(&req))); rc != success {
			continue
		}
		p.bufs[r] = buf
		p.waiting++
		e.reqs = append(e.reqs, req)
		e.slots = append(e.slots, slot{o: p.op, peer: r, want: -1})
	}
}

// answered records the answer of rank r to probe p.
func (e *engine) answered(p *probe, r int, st *status) {
	var n int32
	if rc := call(e.lib.getCount, uintptr(unsafe.Pointer(st)), e.lib.typeInt64, uintptr(unsafe.Pointer(&n))); rc != success {
		return
	}
	if buf, ok := p.bufs[r]; ok {
		p.answered[r] = buf[:max(0, min(int(n), len(buf)))]
	}
	p.waiting--
	if p.waiting == 0 {
		e.queries.retired = slices.DeleteFunc(e.queries.retired, func(q *probe) bool { return q == p })
	}
}

// finishProbe fails the probe's collective, once every member answered
// or probeWait passed, with what the answers say; it reports whether it
// did. The answers' receives still posted stay posted: the world is
// broken and MPI_Finalize is not called.
func (e *engine) finishProbe(now time.Time) bool {
	p := e.queries.probe
	late := p.late
	if late.mpiDone || late.state.Load() == opSettled {
		// It completed meanwhile: a rank was slow, not gone.
		e.queries.probe = nil
		if p.waiting > 0 {
			e.queries.retired = append(e.queries.retired, p)
		}
		return false
	}
	if p.waiting > 0 && now.Before(p.deadline) {
		return false
	}
	var behind, silent []string
	for _, r := range late.g.ranks {
		if r == e.rank {
			continue
		}
		msg, ok := p.answered[r]
		if !ok {
			silent = append(silent, fmt.Sprint(r))
			continue
		}
		idle := time.Duration(msg[0])
		called := uint64(0)
		if len(msg) >= 2 {
			for i := range int(min(max(msg[1], 0), int64((len(msg)-2)/2))) {
				if uint64(msg[2+2*i]) == late.g.key {
					called = uint64(msg[3+2*i])
				}
			}
		}
		if called <= late.seq {
			behind = append(behind, fmt.Sprintf("rank %d has not called it (it called %d of the group's collectives before it; its last call of any kind was %s ago)", r, called, idle.Round(100*time.Millisecond)))
		}
	}
	why := behind
	if len(silent) > 0 {
		slices.Sort(silent)
		why = append(why, fmt.Sprintf("rank %s did not answer within %s (its process died, was stopped by SIGSTOP, or hangs outside zeroeng)", strings.Join(silent, ", "), probeWait))
	}
	if len(why) == 0 {
		why = append(why, "every rank has called it; the network or MPI did not deliver")
	}
	e.queries.probe = nil
	e.broken = true
	e.fail(late, fmt.Errorf("mpi: %s on %s timed out after %v: %s", late.what, late.g.where(), e.timeout, strings.Join(why, "; ")), true)
	return true
}
