package dist

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// roundKey names one collective of a group: its sequence number, or for
// point-to-point messages the pair and the pair's message number.
type roundKey struct {
	group    int
	seq      uint64
	src, dst int // -1 for collectives
}

// round is the meeting point of the ranks taking part in one collective.
type round struct {
	key   roundKey
	n     int
	ranks []int // world ranks of the participants, for messages

	mu      sync.Mutex
	calls   []*call // by participant; nil until it arrived
	arrived int
	failure error // a mismatch found on arrival
	start   time.Time

	all      latch // everyone arrived
	reduced  latch // everyone combined its slice (all-reduce)
	finished latch // everyone is done reading the others' memory
	left     atomic.Int32
}

type latch struct {
	n  atomic.Int32
	ch chan struct{}
}

func (l *latch) init(n int) {
	l.n.Store(int32(n))
	l.ch = make(chan struct{})
}

func (l *latch) countDown() {
	if l.n.Add(-1) == 0 {
		close(l.ch)
	}
}

// participants returns the round's size, this rank's slot in it and the
// world ranks in slot order.
func (g *group) participants(key roundKey) (n, me int, ranks []int) {
	if key.src < 0 {
		return len(g.ranks), g.rank, g.ranks
	}
	ranks = []int{g.ranks[key.src], g.ranks[key.dst]}
	if g.rank == key.src {
		return 2, 0, ranks
	}
	return 2, 1, ranks
}

// run is one rank's part of the collective c: meet the others, move the
// data, and wait until nobody reads this rank's memory any more.
func (w *World) run(g *group, key roundKey, c *call) error {
	if err := w.Err(); err != nil {
		return err
	}
	n, me, ranks := g.participants(key)
	w.mu.Lock()
	r := w.rounds[key]
	if r == nil {
		r = &round{key: key, n: n, ranks: ranks, calls: make([]*call, n)}
		r.all.init(n)
		r.reduced.init(n)
		r.finished.init(n)
		w.rounds[key] = r
	}
	r.mu.Lock()
	r.calls[me] = c // arrived: counted below, after the checks
	r.mu.Unlock()
	gone := w.leftBehind(r)
	w.mu.Unlock()
	if gone != nil {
		w.Abort(gone)
	}
	defer func() {
		if r.left.Add(1) == int32(n) {
			w.mu.Lock()
			delete(w.rounds, key)
			w.mu.Unlock()
		}
	}()

	deadline := time.Now().Add(w.timeout)
	r.mu.Lock()
	r.arrived++
	if r.failure == nil {
		r.failure = w.check(r, me)
	}
	if r.arrived == n {
		r.start = time.Now()
	}
	r.mu.Unlock()
	r.all.countDown()
	if err := w.await(r, &r.all, deadline, "arrive"); err != nil {
		return err
	}
	if r.failure != nil {
		w.Abort(r.failure)
		return r.failure
	}

	calls := r.calls
	es := c.dt.Size()
	switch c.kind {
	case opAllReduce:
		// Each rank combines its part of everyone's memory into its own,
		// then copies the others' parts from theirs. A coalesced call's
		// memory is several runs: the work goes piece by piece, each
		// piece one run of every rank's.
		spans := make([][][]byte, n)
		for k, o := range calls {
			spans[k] = o.spans()
		}
		lo, hi := Part(c.numel, n, me, es)
		red, total := g.reducer(c), c.numel*es
		eachPiece(spans, lo, hi, func(off int, pieces [][]byte) {
			red.AllReduce(pieces[me], pieces, 0, len(pieces[me]), off, total)
		})
		r.reduced.countDown()
		if err := w.await(r, &r.reduced, deadline, "reduce"); err != nil {
			return err
		}
		for k := range calls {
			if k != me {
				lo, hi := Part(c.numel, n, k, es)
				eachPiece([][][]byte{spans[me], spans[k]}, lo, hi, func(_ int, pieces [][]byte) {
					copy(pieces[0], pieces[1])
				})
			}
		}
	case opBroadcast:
		if me != c.root {
			copy(c.out, calls[c.root].in)
		}
	case opReduceScatter:
		block := c.numel * es
		srcs := make([][]byte, n)
		for k, o := range calls {
			srcs[k] = o.in
		}
		g.reducer(c).Reduce(c.out, srcs, me*block, (me+1)*block)
	case opAllGather:
		block := c.numel * es
		for k, o := range calls {
			copyUnlessSame(c.out[k*block:(k+1)*block], o.in)
		}
	case opAllGatherInto:
		for k, o := range calls {
			copyUnlessSame(c.outs[k], o.in)
		}
	case opAllToAll:
		block := c.numel / n * es
		for k, o := range calls {
			copy(c.out[k*block:(k+1)*block], o.in[me*block:(me+1)*block])
		}
	case opRecv:
		copy(c.out, calls[0].in)
	case opBroadcastObject:
		c.result = [][]byte{bytes.Clone(calls[c.root].payload)}
	case opGatherObject:
		if me == c.root {
			for _, o := range calls {
				c.result = append(c.result, bytes.Clone(o.payload))
			}
		}
	}
	if w.net.Bandwidth > 0 || w.net.Latency > 0 {
		if d := time.Until(r.start.Add(w.net.Cost(c.kind, c.numel*es, n))); d > 0 {
			select {
			case <-time.After(d):
			case <-w.aborted:
				return w.abortErr
			}
		}
	}
	r.finished.countDown()
	return w.await(r, &r.finished, deadline, "finish")
}

// spinYields is how many times a rank yields before it parks in await.
const spinYields = 50

// await waits for l, the world's abort, or the deadline; at the deadline
// it aborts the world with an error that names the ranks not yet there.
func (w *World) await(r *round, l *latch, deadline time.Time, phase string) error {
	// The others are usually a few microseconds away: yield a few times
	// before parking, which costs a wake-up through the scheduler.
	for range spinYields {
		if l.n.Load() <= 0 {
			<-l.ch // closed right after the count reached zero
			return nil
		}
		runtime.Gosched()
	}
	select {
	case <-l.ch:
		return nil
	case <-w.aborted:
		return w.abortErr
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-l.ch:
		return nil
	case <-w.aborted:
		return w.abortErr
	case <-t.C:
	}
	r.mu.Lock()
	var missing, present []string
	for k, c := range r.calls {
		if c == nil {
			missing = append(missing, fmt.Sprint(r.ranks[k]))
		} else {
			present = append(present, fmt.Sprint(r.ranks[k]))
		}
	}
	what := describeRound(r)
	r.mu.Unlock()
	var err error
	if len(missing) > 0 {
		err = fmt.Errorf("dist: %s timed out after %v: rank %s did not call it (ranks %s did)",
			what, w.timeout, strings.Join(missing, ", "), strings.Join(present, ", "))
	} else {
		err = fmt.Errorf("dist: %s timed out after %v in its %s phase", what, w.timeout, phase)
	}
	w.Abort(err)
	return err
}

// describeRound names a collective: "allReduce #17 of group 0".
func describeRound(r *round) string {
	kind := "collective"
	for _, c := range r.calls {
		if c != nil {
			kind = c.kind.String()
			break
		}
	}
	if r.key.src >= 0 {
		return fmt.Sprintf("%s #%d from rank %d to rank %d", kind, r.key.seq, r.ranks[0], r.ranks[1])
	}
	return fmt.Sprintf("%s #%d of group %d", kind, r.key.seq, r.key.group)
}

// check compares the call that arrived in slot me with the first one: a
// mismatch would hang the ranks or move the wrong bytes, so it is an error
// on every rank. Called with r.mu held.
func (w *World) check(r *round, me int) error {
	var first *call
	firstSlot := -1
	for k, c := range r.calls {
		if c != nil && k != me {
			first, firstSlot = c, k
			break
		}
	}
	c := r.calls[me]
	if first == nil {
		return nil
	}
	point := c.kind == opSend || c.kind == opRecv
	same := first.kind == c.kind && first.dt == c.dt && first.op == c.op && first.numel == c.numel && first.root == c.root &&
		first.preMul == c.preMul
	if point {
		same = first.kind != c.kind && first.dt == c.dt && first.numel == c.numel
	}
	if same && w.debug && !point && c.kind != opBarrier && c.kind != opBroadcastObject && c.kind != opGatherObject {
		same = slices.Equal(first.shape, c.shape)
	}
	if same {
		return nil
	}
	return fmt.Errorf("dist: collective #%d of group %d does not match across ranks: rank %d called %s, rank %d called %s",
		c.seq, r.key.group, r.ranks[firstSlot], describeCall(first, w.debug), r.ranks[me], describeCall(c, w.debug))
}

func describeCall(c *call, shapes bool) string {
	var b strings.Builder
	b.WriteString(c.kind.String())
	switch c.kind {
	case opBarrier:
		return b.String()
	case opBroadcastObject, opGatherObject:
		fmt.Fprintf(&b, "(root %d)", c.root)
		return b.String()
	}
	fmt.Fprintf(&b, "(%v", c.dt)
	if shapes {
		fmt.Fprintf(&b, " shape %v", c.shape)
	}
	fmt.Fprintf(&b, ", %d elements", c.numel)
	switch c.kind {
	case opAllReduce, opReduceScatter:
		fmt.Fprintf(&b, ", op %v", c.op)
		if c.preMul != 1 && c.kind == opAllReduce {
			fmt.Fprintf(&b, " pre-multiplied by %v", c.preMul)
		}
	case opBroadcast:
		fmt.Fprintf(&b, ", root %d", c.root)
	}
	b.WriteString(")")
	return b.String()
}

func uintptrOf(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }

// copyUnlessSame copies src to dst unless they are the same memory: a rank
// gathering in place (its input is its own block of the output) must not
// rewrite the block while the other ranks read it.
func copyUnlessSame(dst, src []byte) {
	if len(dst) > 0 && len(src) > 0 && &dst[0] == &src[0] {
		return
	}
	copy(dst, src)
}
