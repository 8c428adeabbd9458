package disttest

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// dtypes are the element types every backend communicates.
var dtypes = []dtype.DType{dtype.Float32, dtype.Float64, dtype.BFloat16, dtype.Float16, dtype.Int64, dtype.Int32, dtype.Uint8, dtype.Bool}

// chunked is a size that spans several of the in-process backend's
// reduction chunks (4096 elements) and a partial one.
const chunked = 3*4096 + 5

// Cases returns the conformance suite, in the order every rank runs it.
// Under go test -short its large all-reduce has 65539 elements instead
// of 1048579.
func Cases() []Case {
	large := 1<<20 + 3
	if short() {
		large = 1<<16 + 3
	}
	var cs []Case
	for _, dt := range dtypes {
		cs = append(cs, Case{Name: "allReduce/" + dt.String(), Run: allReduce(dt)})
	}
	cs = append(cs,
		Case{Name: "allReduce/large", Run: allReduceLarge(large)},
		Case{Name: "allReduceCoalesced", Run: allReduceCoalesced},
		Case{Name: "broadcast", Run: broadcast},
		Case{Name: "reduceScatter", Run: reduceScatter},
		Case{Name: "reduceScatter/inPlace", Run: reduceScatterInPlace},
		Case{Name: "allGather", Run: allGather},
		Case{Name: "allGather/inPlace", Run: allGatherInPlace},
		Case{Name: "allGatherInto", Run: allGatherInto},
		Case{Name: "allToAll", Run: allToAll},
		Case{Name: "barrier", Run: barrier},
		Case{Name: "sendRecv/pairs", MinRanks: 2, Run: sendRecvPairs},
		Case{Name: "sendRecv/ring", MinRanks: 2, Run: sendRecvRing},
		Case{Name: "broadcastObject", Run: broadcastObject},
		Case{Name: "gatherObject", Run: gatherObject},
		Case{Name: "subgroups", Subgroups: true, Run: subgroups},
		Case{Name: "subgroups/nested", Subgroups: true, Run: nestedSubgroups},
		Case{Name: "async/inFlight", Run: inFlight},
		Case{Name: "releasedWhileInFlight", Run: releasedWhileInFlight},
		Case{Name: "invalidArguments", Run: invalidArguments},
	)
	for i := range cs {
		cs[i].Run = scoped(cs[i].Run)
	}
	return cs
}

// scoped runs a case in a scope of its runtime, so that the tensors it
// made are released when it returns (every collective has completed by
// then).
func scoped(run func(dist.ProcessGroup, *tensor.Runtime) error) func(dist.ProcessGroup, *tensor.Runtime) error {
	return func(pg dist.ProcessGroup, rt *tensor.Runtime) error {
		sc := rt.OpenScope()
		defer sc.Close()
		return run(pg, rt)
	}
}

// reduceSizes are the all-reduce sizes for n ranks: empty, smaller than,
// equal to and not divisible by the number of ranks, and spanning
// several reduction chunks.
func reduceSizes(n int) []int {
	return []int{0, 1, 2, 3, 7, 13*n + 1, 1000, chunked}
}

// allReduce checks every op on dt, with every size of reduceSizes in
// flight at once.
func allReduce(dt dtype.DType) func(dist.ProcessGroup, *tensor.Runtime) error {
	return func(pg dist.ProcessGroup, rt *tensor.Runtime) error {
		c := newChecker(pg)
		n, r := pg.Size(), pg.Rank()
		sizes := reduceSizes(n)
		for _, op := range ops {
			if !reducible(dt, op) {
				continue
			}
			xs := make([]*tensor.Tensor, len(sizes))
			works := make([]*dist.Work, len(sizes))
			for k, size := range sizes {
				xs[k] = rt.FromValues(dt, Values(dt, op, r, size, 0), size)
				works[k] = pg.AllReduce(xs[k], op)
			}
			for k, size := range sizes {
				what := fmt.Sprintf("allReduce %v %v of %d", dt, op, size)
				if c.ok(works[k], what) {
					want, slack := Reduced(dt, op, upTo(n), size, 0)
					c.expect(xs[k], want, slack, what)
				}
			}
		}
		return c.err()
	}
}

// allReduceLarge checks a float32 sum and a bfloat16 average of size
// elements, as DDP reduces its gradient buckets.
func allReduceLarge(size int) func(dist.ProcessGroup, *tensor.Runtime) error {
	return func(pg dist.ProcessGroup, rt *tensor.Runtime) error {
		c := newChecker(pg)
		n, r := pg.Size(), pg.Rank()
		for _, k := range []struct {
			dt dtype.DType
			op dist.ReduceOp
		}{{dtype.Float32, dist.Sum}, {dtype.BFloat16, dist.Avg}} {
			x := rt.FromValues(k.dt, Values(k.dt, k.op, r, size, 0), size)
			what := fmt.Sprintf("allReduce %v %v of %d", k.dt, k.op, size)
			if c.ok(pg.AllReduce(x, k.op), what) {
				want, slack := Reduced(k.dt, k.op, upTo(n), size, 0)
				c.expect(x, want, slack, what)
			}
			x.Release()
		}
		return c.err()
	}
}

// coalescedLengths splits size elements into the tensors rank r passes to
// a coalesced all-reduce: lengths that differ from rank to rank, so that
// the ranks' tensors end at different places, with an empty one among
// them.
func coalescedLengths(r, size int) []int {
	var lengths []int
	for k, left := 0, size; left > 0; k++ {
		n := min(left, ((r+1)*(k+3)*37)%997+1)
		if k == 1 {
			n = 0
		}
		lengths = append(lengths, n)
		left -= n
	}
	return lengths
}

// allReduceCoalesced checks dist.CoalescedAllReducer where the backend
// implements it: the tensors, split differently on every rank, hold bit
// for bit what an all-reduce of one tensor of their elements holds, with
// a pre-multiplier (against each rank's values multiplied first) and
// without one (rank 0 then calls AllReduce instead); invalid lists fail.
func allReduceCoalesced(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	co, ok := pg.(dist.CoalescedAllReducer)
	if !ok {
		return nil
	}
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	split := func(x *tensor.Tensor) []*tensor.Tensor {
		var ts []*tensor.Tensor
		off := 0
		for _, l := range coalescedLengths(r, x.Numel()) {
			ts = append(ts, x.Narrow(0, off, l))
			off += l
		}
		return ts
	}
	for _, size := range []int{1, 13*n + 1, chunked} {
		for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
			// A third, whose products round: the reference multiplies
			// first, then sums one tensor.
			const third = 1.0 / 3
			vals := Values(dt, dist.Sum, r, size, 0)
			for i := range vals {
				vals[i] += 0.1 * float64(i%11)
			}
			ref, x := rt.FromValues(dt, vals, size), rt.FromValues(dt, vals, size)
			what := fmt.Sprintf("allReduceCoalesced %v sum of %d pre-multiplied by 1/3", dt, size)
			if err := ref.MulScalarInPlace(third); err != nil {
				return err
			}
			wr, wc := pg.AllReduce(ref, dist.Sum), co.AllReduceCoalesced(split(x), dist.Sum, third)
			if c.ok(wr, what+" (the reference)") && c.ok(wc, what) {
				want, err := ReadBack(ref)
				if err != nil {
					return err
				}
				c.expect(x, want, nil, what)
			}
		}
		x := rt.FromValues(dtype.Float32, Values(dtype.Float32, dist.Max, r, size, 0), size)
		what := fmt.Sprintf("allReduceCoalesced float32 max of %d, rank 0 calling allReduce", size)
		var w *dist.Work
		if r == 0 {
			w = pg.AllReduce(x, dist.Max)
		} else {
			w = co.AllReduceCoalesced(split(x), dist.Max, 1)
		}
		if c.ok(w, what) {
			want, slack := Reduced(dtype.Float32, dist.Max, upTo(n), size, 0)
			c.expect(x, want, slack, what)
		}
	}
	x := rt.Zeros(dtype.Float32, 8)
	for _, bad := range []struct {
		what   string
		ts     []*tensor.Tensor
		op     dist.ReduceOp
		preMul float64
	}{
		{"allReduceCoalesced of no tensors", nil, dist.Sum, 1},
		{"allReduceCoalesced of overlapping tensors", []*tensor.Tensor{x.Narrow(0, 0, 5), x.Narrow(0, 4, 4)}, dist.Sum, 1},
		{"allReduceCoalesced of the same tensor twice", []*tensor.Tensor{x, x}, dist.Sum, 1},
		{"allReduceCoalesced of float32 and float64", []*tensor.Tensor{x, rt.Zeros(dtype.Float64, 2)}, dist.Sum, 1},
		{"allReduceCoalesced of a non-contiguous tensor", []*tensor.Tensor{rt.Zeros(dtype.Float32, 2, 3).Transpose(0, 1)}, dist.Sum, 1},
		{"allReduceCoalesced max pre-multiplied", []*tensor.Tensor{x}, dist.Max, 0.5},
		{"allReduceCoalesced of int32 pre-multiplied", []*tensor.Tensor{rt.Zeros(dtype.Int32, 2)}, dist.Sum, 0.5},
		{"allReduceCoalesced pre-multiplied by NaN", []*tensor.Tensor{x}, dist.Sum, math.NaN()},
	} {
		c.fails(co.AllReduceCoalesced(bad.ts, bad.op, bad.preMul), bad.what)
	}
	return c.err()
}

// broadcast checks a broadcast from every root, of every dtype and
// several sizes; the root's tensor keeps its values.
func broadcast(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	for root := range n {
		type item struct {
			what string
			x    *tensor.Tensor
			w    *dist.Work
			want []float64
		}
		var items []item
		for _, dt := range dtypes {
			for _, size := range []int{0, 1, 7, 1000} {
				x := rt.FromValues(dt, Values(dt, dist.Sum, r, size, 0), size)
				items = append(items, item{
					what: fmt.Sprintf("broadcast %v of %d from root %d", dt, size, root),
					x:    x, w: pg.Broadcast(x, root), want: Values(dt, dist.Sum, root, size, 0),
				})
			}
		}
		for _, it := range items {
			if c.ok(it.w, it.what) {
				c.expect(it.x, it.want, nil, it.what)
			}
		}
	}
	return c.err()
}

// reduceScatter checks every dtype and op, with blocks of several sizes.
func reduceScatter(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	for _, dt := range dtypes {
		for _, op := range ops {
			if !reducible(dt, op) {
				continue
			}
			sizes := []int{0, 1, 7}
			if dt == dtype.Float32 && op == dist.Sum {
				sizes = append(sizes, 1000, chunked)
			}
			outs := make([]*tensor.Tensor, len(sizes))
			works := make([]*dist.Work, len(sizes))
			for k, size := range sizes {
				in := rt.FromValues(dt, Values(dt, op, r, n*size, 0), n*size)
				outs[k] = rt.Zeros(dt, size)
				works[k] = pg.ReduceScatter(outs[k], in, op)
			}
			for k, size := range sizes {
				what := fmt.Sprintf("reduceScatter %v %v of %d × %d", dt, op, n, size)
				if c.ok(works[k], what) {
					want, slack := Reduced(dt, op, upTo(n), size, r*size)
					c.expect(outs[k], want, slack, what)
				}
			}
		}
	}
	return c.err()
}

// reduceScatterInPlace reduce-scatters a flat gradient into its own
// block Rank(), as ZeRO does.
func reduceScatterInPlace(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	const size = 1001
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Int64} {
		for _, op := range []dist.ReduceOp{dist.Sum, dist.Avg, dist.Max} {
			if !reducible(dt, op) {
				continue
			}
			grad := rt.FromValues(dt, Values(dt, op, r, n*size, 0), n*size)
			own := grad.Narrow(0, r*size, size)
			what := fmt.Sprintf("in-place reduceScatter %v %v of %d × %d", dt, op, n, size)
			if c.ok(pg.ReduceScatter(own, grad, op), what) {
				want, slack := Reduced(dt, op, upTo(n), size, r*size)
				c.expect(own, want, slack, what)
			}
		}
	}
	return c.err()
}

// allGather checks every dtype with blocks of several sizes.
func allGather(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	for _, dt := range dtypes {
		sizes := []int{0, 1, 7, 1000}
		outs := make([]*tensor.Tensor, len(sizes))
		works := make([]*dist.Work, len(sizes))
		for k, size := range sizes {
			in := rt.FromValues(dt, Values(dt, dist.Sum, r, size, 0), size)
			outs[k] = rt.Zeros(dt, n*size)
			works[k] = pg.AllGather(outs[k], in)
		}
		for k, size := range sizes {
			what := fmt.Sprintf("allGather %v of %d × %d", dt, n, size)
			if c.ok(works[k], what) {
				c.expect(outs[k], blocks(dt, upTo(n), size, 0), nil, what)
			}
		}
	}
	return c.err()
}

// allGatherInPlace gathers into a flat buffer whose block Rank() is the
// input, as ZeRO gathers its parameters.
func allGatherInPlace(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	const size = 1001
	for _, dt := range dtypes {
		flat := rt.Zeros(dt, n*size)
		shard := flat.Narrow(0, r*size, size)
		what := fmt.Sprintf("in-place allGather %v of %d × %d", dt, n, size)
		if err := shard.CopyFrom(rt.FromValues(dt, Values(dt, dist.Sum, r, size, 0), size)); err != nil {
			c.errorf("%s: filling the shard: %v", what, err)
		}
		if c.ok(pg.AllGather(flat, shard), what) {
			c.expect(flat, blocks(dt, upTo(n), size, 0), nil, what)
		}
	}
	return c.err()
}

// allGatherInto checks every dtype with several sizes.
func allGatherInto(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	for _, dt := range dtypes {
		for _, size := range []int{0, 1, 7, 1000} {
			in := rt.FromValues(dt, Values(dt, dist.Sum, r, size, 0), size)
			outs := make([]*tensor.Tensor, n)
			for k := range outs {
				outs[k] = rt.Zeros(dt, size)
			}
			what := fmt.Sprintf("allGatherInto %v of %d", dt, size)
			if c.ok(pg.AllGatherInto(outs, in), what) {
				for k, o := range outs {
					c.expect(o, Values(dt, dist.Sum, k, size, 0), nil, fmt.Sprintf("%s, output %d", what, k))
				}
			}
		}
	}
	return c.err()
}

// allToAll checks every dtype with blocks of several sizes: block k of
// rank r's output is block r of rank k's input.
func allToAll(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	for _, dt := range dtypes {
		for _, size := range []int{0, 1, 3, 64} {
			in := rt.FromValues(dt, Values(dt, dist.Sum, r, n*size, 0), n*size)
			out := rt.Zeros(dt, n*size)
			what := fmt.Sprintf("allToAll %v of %d × %d", dt, n, size)
			if c.ok(pg.AllToAll(out, in), what) {
				c.expect(out, blocks(dt, upTo(n), size, r*size), nil, what)
			}
		}
	}
	return c.err()
}

// barrierDelay is how late the last rank comes to the barrier that the
// others must wait for.
const barrierDelay = 100 * time.Millisecond

// barrier checks barriers in flight together, and that a barrier waits
// for a rank that comes late.
func barrier(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	works := []*dist.Work{pg.Barrier(), pg.Barrier(), pg.Barrier()}
	for k, w := range works {
		c.ok(w, fmt.Sprintf("barrier %d", k))
	}
	if n == 1 {
		return c.err()
	}
	// Every rank left the barriers above at about the same time; the
	// others cannot leave the next one before the last rank comes.
	start := time.Now()
	if r == n-1 {
		time.Sleep(barrierDelay)
	}
	if c.ok(pg.Barrier(), "barrier after a late rank") && r != n-1 {
		if d := time.Since(start); d < barrierDelay/2 {
			c.errorf("a barrier completed after %v, before rank %d came to it (%v late)", d, n-1, barrierDelay)
		}
	}
	return c.err()
}

// messages are the tensors of the point-to-point cases.
var messages = []struct {
	dt   dtype.DType
	size int
}{{dtype.Float32, 5}, {dtype.Int64, 1}, {dtype.BFloat16, 1000}, {dtype.Float32, 0}, {dtype.Float64, chunked}, {dtype.Bool, 9}, {dtype.Uint8, 3}}

// message is what rank from sends as message m of round round.
func message(from, round, m int) (dtype.DType, []float64) {
	k := messages[m]
	return k.dt, Values(k.dt, dist.Sum, from, k.size, 1000*round+10*m)
}

// exchange is one rank's side of a round of point-to-point messages.
type exchange struct {
	c     *checker
	pg    dist.ProcessGroup
	rt    *tensor.Runtime
	recvs []func() // check what arrived
	works []*dist.Work
	whats []string
}

// send issues every message of round to dst.
func (e *exchange) send(dst, round int) {
	for m := range messages {
		dt, v := message(e.pg.Rank(), round, m)
		e.works = append(e.works, e.pg.Send(e.rt.FromValues(dt, v, len(v)), dst))
		e.whats = append(e.whats, fmt.Sprintf("send %d of round %d (%v of %d) to rank %d", m, round, dt, len(v), dst))
	}
}

// recv issues the receives of every message of round from src.
func (e *exchange) recv(src, round int) {
	for m := range messages {
		dt, v := message(src, round, m)
		x := e.rt.Zeros(dt, len(v))
		what := fmt.Sprintf("recv %d of round %d (%v of %d) from rank %d", m, round, dt, len(v), src)
		w := e.pg.Recv(x, src)
		e.works = append(e.works, w)
		e.whats = append(e.whats, what)
		e.recvs = append(e.recvs, func() {
			if w.Err() == nil {
				e.c.expect(x, v, nil, what)
			}
		})
	}
}

// wait waits for every message and checks what arrived.
func (e *exchange) wait() {
	for k, w := range e.works {
		e.c.ok(w, e.whats[k])
	}
	for _, check := range e.recvs {
		check()
	}
	e.works, e.whats, e.recvs = nil, nil, nil
}

// sendRecvPairs has even ranks send to the next rank, which receives,
// and then the odd ranks send back; every message of both rounds is in
// flight at once. An all-reduce follows.
func sendRecvPairs(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	e := &exchange{c: c, pg: pg, rt: rt}
	switch {
	case r%2 == 0 && r+1 < n:
		e.send(r+1, 0)
		e.recv(r+1, 1)
	case r%2 == 1:
		e.recv(r-1, 0)
		e.send(r-1, 1)
	}
	e.wait()
	x := rt.FromValues(dtype.Float32, Values(dtype.Float32, dist.Sum, r, 7, 0), 7)
	if c.ok(pg.AllReduce(x, dist.Sum), "allReduce after send and recv") {
		want, _ := Reduced(dtype.Float32, dist.Sum, upTo(n), 7, 0)
		c.expect(x, want, nil, "allReduce after send and recv")
	}
	return c.err()
}

// sendRecvRing passes messages around the ring of ranks, forwards and
// then backwards. Even ranks send before they receive, odd ranks receive
// first: orders that match, as NCCL needs (a ring in which every rank
// sends first would wait there).
func sendRecvRing(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	next, prev := (r+1)%n, (r+n-1)%n
	for round, peers := range [][2]int{{next, prev}, {prev, next}} {
		to, from := peers[0], peers[1]
		e := &exchange{c: c, pg: pg, rt: rt}
		if r%2 == 0 {
			e.send(to, round)
			e.recv(from, round)
		} else {
			e.recv(from, round)
			e.send(to, round)
		}
		e.wait()
	}
	c.ok(pg.Barrier(), "barrier after the ring")
	return c.err()
}

// payload is an object payload of n bytes, different for every seed.
func payload(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7 + 1)
	}
	return b
}

// broadcastObjectSizes are the payloads' sizes by root.
var broadcastObjectSizes = []int{0, 1, 13, 4099}

// broadcastObject broadcasts from every root payloads of several sizes
// (the other ranks pass payloads of their own, which are ignored), then
// a large one.
func broadcastObject(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	check := func(root, size int) {
		mine := payload(100+r, 7)
		if r == root {
			mine = payload(root, size)
		}
		got, err := pg.BroadcastObject(mine, root)
		switch {
		case err != nil:
			c.errorf("broadcastObject of %d bytes from root %d failed: %v", size, root, err)
		case !bytes.Equal(got, payload(root, size)):
			c.errorf("broadcastObject of %d bytes from root %d gave %d bytes %s", size, root, len(got), firstBytes(got))
		}
	}
	for root := range n {
		check(root, broadcastObjectSizes[root%len(broadcastObjectSizes)])
	}
	check(n-1, 1<<16)
	check(0, 0)
	return c.err()
}

// firstBytes shows up to 16 bytes of b.
func firstBytes(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%v...", b[:16])
	}
	return fmt.Sprint(b)
}

// gatherObject gathers on every root payloads of varying sizes, some
// empty.
func gatherObject(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	size := func(k, root int) int { return (k + root) % 3 * 5 }
	for root := range n {
		all, err := pg.GatherObject(payload(r, size(r, root)), root)
		what := fmt.Sprintf("gatherObject on root %d", root)
		switch {
		case err != nil:
			c.errorf("%s failed: %v", what, err)
		case r != root && all != nil:
			c.errorf("%s gave rank %d %d payloads; the ranks but the root get nil", what, r, len(all))
		case r == root && len(all) != n:
			c.errorf("%s gave %d payloads for %d ranks", what, len(all), n)
		case r == root:
			for k, p := range all {
				if want := payload(k, size(k, root)); !bytes.Equal(p, want) {
					c.errorf("%s: rank %d's payload is %d bytes %s, want %d bytes %s", what, k, len(p), firstBytes(p), len(want), firstBytes(want))
					break
				}
			}
		}
	}
	return c.err()
}

// newGroup makes pg's subgroup of list (ranks of pg) on every rank of pg
// and checks that this rank is in it exactly when members (list's ranks in
// increasing order, which number the subgroup's ranks) holds it, at its
// place there. ok is false when the rank cannot go on with the others.
func newGroup(c *checker, pg dist.ProcessGroup, name string, list, members []int) (sub dist.ProcessGroup, ok bool) {
	sub, err := pg.NewGroup(list)
	if err != nil {
		c.errorf("newGroup %s %v: %v", name, list, err)
		return nil, false
	}
	me := slices.Index(members, pg.Rank())
	switch {
	case me < 0 && sub != nil:
		c.errorf("newGroup %s %v gave rank %d of the parent a group; ranks outside get nil", name, list, pg.Rank())
		return nil, true // the rank goes on as one outside
	case me >= 0 && sub == nil:
		c.errorf("newGroup %s %v gave rank %d of the parent nil; it is a member", name, list, pg.Rank())
		return nil, false
	case sub != nil && (sub.Size() != len(members) || sub.Rank() != me):
		c.errorf("newGroup %s %v: rank %d of the parent is rank %d of %d, want rank %d of %d", name, list, pg.Rank(), sub.Rank(), sub.Size(), me, len(members))
		return nil, false
	}
	return sub, true
}

// reversed is a copy of s in reverse order.
func reversed(s []int) []int {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

// halves are the ranks of a group of n in its lower and upper half (the
// upper half is empty for one rank).
func halves(n int) (low, high []int) {
	h := (n + 1) / 2
	all := upTo(n)
	return all[:h], all[h:]
}

// subgroups makes subgroups (the two halves of the group, the even ranks
// listed backwards, every rank listed backwards), checks membership and
// numbering, and runs collectives in them and in the parent group, in
// flight together.
func subgroups(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	low, high := halves(n)
	var evens []int
	for k := 0; k < n; k += 2 {
		evens = append(evens, k)
	}
	lo, ok := newGroup(c, pg, "of the lower half", low, low)
	if !ok {
		return c.err()
	}
	var hi dist.ProcessGroup
	if len(high) > 0 {
		if hi, ok = newGroup(c, pg, "of the upper half", high, high); !ok {
			return c.err()
		}
	}
	ev, ok := newGroup(c, pg, "of the even ranks", reversed(evens), evens)
	if !ok {
		return c.err()
	}
	all, ok := newGroup(c, pg, "of every rank", reversed(upTo(n)), upTo(n))
	if !ok || all == nil {
		return c.err()
	}
	half, members := lo, low
	if r >= len(low) {
		half, members = hi, high
	}

	if half != nil {
		x := rt.FromValues(dtype.Float32, Values(dtype.Float32, dist.Sum, r, 5, 0), 5)
		want, _ := Reduced(dtype.Float32, dist.Sum, members, 5, 0)
		c.later(half.AllReduce(x, dist.Sum), fmt.Sprintf("allReduce in the subgroup of ranks %v", members), x, want)
	}
	y := rt.FromValues(dtype.Float32, Values(dtype.Float32, dist.Max, r, 5, 10), 5)
	want, _ := Reduced(dtype.Float32, dist.Max, upTo(n), 5, 10)
	c.later(pg.AllReduce(y, dist.Max), "allReduce in the parent group among subgroups' collectives", y, want)
	if ev != nil {
		in := rt.FromValues(dtype.Int64, Values(dtype.Int64, dist.Sum, r, 3, 0), 3)
		out := rt.Zeros(dtype.Int64, 3*len(evens))
		c.later(ev.AllGather(out, in), fmt.Sprintf("allGather in the subgroup of ranks %v", evens), out, blocks(dtype.Int64, evens, 3, 0))
	}
	z := rt.FromValues(dtype.BFloat16, Values(dtype.BFloat16, dist.Sum, r, 7, 0), 7)
	c.later(all.Broadcast(z, n-1), "broadcast in the subgroup of every rank", z, Values(dtype.BFloat16, dist.Sum, n-1, 7, 0))
	if half != nil {
		what := fmt.Sprintf("broadcastObject in the subgroup of ranks %v", members)
		got, err := half.BroadcastObject(payload(r, 3+r), half.Size()-1)
		last := members[len(members)-1]
		if err != nil {
			c.errorf("%s failed: %v", what, err)
		} else if !bytes.Equal(got, payload(last, 3+last)) {
			c.errorf("%s gave %v, want rank %d's payload", what, got, last)
		}
	}
	c.settle()
	// The parent goes on after its subgroups' collectives.
	x := rt.FromValues(dtype.Float32, Values(dtype.Float32, dist.Sum, r, 3, 0), 3)
	want, _ = Reduced(dtype.Float32, dist.Sum, upTo(n), 3, 0)
	if c.ok(pg.AllReduce(x, dist.Sum), "allReduce in the parent group after its subgroups'") {
		c.expect(x, want, nil, "allReduce in the parent group after its subgroups'")
	}
	return c.err()
}

// nestedSubgroups makes a subgroup of each half of the group (all of the
// half's ranks but its first), and runs collectives in it, in the half
// and in the whole group, in flight together.
func nestedSubgroups(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	low, high := halves(n)
	lo, ok := newGroup(c, pg, "of the lower half", low, low)
	if !ok {
		return c.err()
	}
	var hi dist.ProcessGroup
	if len(high) > 0 {
		if hi, ok = newGroup(c, pg, "of the upper half", high, high); !ok {
			return c.err()
		}
	}
	half, members := lo, low
	if r >= len(low) {
		half, members = hi, high
	}
	if half == nil {
		return c.err() // newGroup recorded why
	}
	// The inner group: the half's ranks but its first (or its only one).
	local := upTo(len(members))
	if len(local) > 1 {
		local = local[1:]
	}
	var inner []int // world ranks
	for _, k := range local {
		inner = append(inner, members[k])
	}
	sub, ok := newGroup(c, half, fmt.Sprintf("of the subgroup of ranks %v", members), local, local)
	if !ok {
		return c.err()
	}

	if sub != nil {
		a := rt.FromValues(dtype.Float32, Values(dtype.Float32, dist.Sum, r, 9, 0), 9)
		want, _ := Reduced(dtype.Float32, dist.Sum, inner, 9, 0)
		c.later(sub.AllReduce(a, dist.Sum), fmt.Sprintf("allReduce in the nested subgroup of ranks %v", inner), a, want)
	}
	in := rt.FromValues(dtype.Int32, Values(dtype.Int32, dist.Sum, r, 4, 0), 4)
	out := rt.Zeros(dtype.Int32, 4*len(members))
	c.later(half.AllGather(out, in), fmt.Sprintf("allGather in the subgroup of ranks %v", members), out, blocks(dtype.Int32, members, 4, 0))
	b := rt.FromValues(dtype.Float64, Values(dtype.Float64, dist.Min, r, 6, 0), 6)
	want, _ := Reduced(dtype.Float64, dist.Min, upTo(n), 6, 0)
	c.later(pg.AllReduce(b, dist.Min), "allReduce in the parent group among nested subgroups' collectives", b, want)
	if sub != nil {
		d := rt.FromValues(dtype.Float16, Values(dtype.Float16, dist.Sum, r, 5, 0), 5)
		root := len(inner) - 1
		c.later(sub.Broadcast(d, root), fmt.Sprintf("broadcast in the nested subgroup of ranks %v", inner), d, Values(dtype.Float16, dist.Sum, inner[root], 5, 0))
	}
	c.settle()
	return c.err()
}

// inFlight issues rounds of collectives of every kind without waiting,
// each with a continuation, and checks that the continuations run in the
// order the collectives were issued, each after its collective has
// completed, and that every result is right.
func inFlight(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	var (
		mu    sync.Mutex
		order []int
		early []int // continuations that ran before their work completed
	)
	var works, thens []*dist.Work
	var checks []func()
	add := func(w *dist.Work, what string, x *tensor.Tensor, want, slack []float64) {
		k := len(works)
		works = append(works, w)
		thens = append(thens, w.Then(func(err error) error {
			mu.Lock()
			order = append(order, k)
			if !w.IsCompleted() {
				early = append(early, k)
			}
			mu.Unlock()
			return err
		}))
		checks = append(checks, func() {
			if c.ok(thens[k], what) && x != nil {
				c.expect(x, want, slack, what)
			}
		})
	}
	all := upTo(n)
	for round := range 3 {
		f := dtype.Float32
		a := rt.FromValues(f, Values(f, dist.Sum, r, 1000, round), 1000)
		want, _ := Reduced(f, dist.Sum, all, 1000, round)
		add(pg.AllReduce(a, dist.Sum), fmt.Sprintf("round %d: allReduce", round), a, want, nil)

		root := round % n
		b := rt.FromValues(dtype.BFloat16, Values(dtype.BFloat16, dist.Sum, r, 333, round), 333)
		add(pg.Broadcast(b, root), fmt.Sprintf("round %d: broadcast from %d", round, root), b, Values(dtype.BFloat16, dist.Sum, root, 333, round), nil)

		gin := rt.FromValues(dtype.Int32, Values(dtype.Int32, dist.Sum, r, 7, round), 7)
		gout := rt.Zeros(dtype.Int32, 7*n)
		add(pg.AllGather(gout, gin), fmt.Sprintf("round %d: allGather", round), gout, blocks(dtype.Int32, all, 7, round), nil)

		sin := rt.FromValues(f, Values(f, dist.Avg, r, 64*n, round), 64*n)
		sout := rt.Zeros(f, 64)
		want, slack := Reduced(f, dist.Avg, all, 64, round+64*r)
		add(pg.ReduceScatter(sout, sin, dist.Avg), fmt.Sprintf("round %d: reduceScatter", round), sout, want, slack)

		ain := rt.FromValues(dtype.Float64, Values(dtype.Float64, dist.Sum, r, 5*n, round), 5*n)
		aout := rt.Zeros(dtype.Float64, 5*n)
		add(pg.AllToAll(aout, ain), fmt.Sprintf("round %d: allToAll", round), aout, blocks(dtype.Float64, all, 5, round+5*r), nil)

		add(pg.Barrier(), fmt.Sprintf("round %d: barrier", round), nil, nil, nil)

		u := rt.FromValues(dtype.Uint8, Values(dtype.Uint8, dist.Max, r, 17, round), 17)
		want, _ = Reduced(dtype.Uint8, dist.Max, all, 17, round)
		add(pg.AllReduce(u, dist.Max), fmt.Sprintf("round %d: allReduce uint8 max", round), u, want, nil)
	}
	// When the last continuation has run, every earlier one has.
	lastDone := thens[len(thens)-1].Wait() == nil
	mu.Lock()
	got, ranEarly := slices.Clone(order), slices.Clone(early)
	mu.Unlock()
	if lastDone && !slices.Equal(got, upTo(len(works))) {
		c.errorf("the continuations of %d collectives in flight ran in the order %v by the time the last had run; want the order they were issued in", len(works), got)
	}
	if len(ranEarly) > 0 {
		c.errorf("the continuations of collectives %v ran before their collective had completed", ranEarly)
	}
	for _, check := range checks {
		check()
	}
	return c.err()
}

// releasedWhileInFlight releases a tensor (and the view a collective
// uses) right after issuing the collective: its memory must stay the
// collective's until it completes, not be handed to the next tensor.
func releasedWhileInFlight(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	r := pg.Rank()
	const size = 5000
	x := rt.FromValues(dtype.Float32, Values(dtype.Float32, dist.Sum, r, size, 0), size)
	view := x.View(size)
	w := pg.AllReduce(view, dist.Sum)
	view.Release()
	x.Release()
	fresh := rt.Zeros(dtype.Float32, size) // may reuse a freed buffer of that size
	if c.ok(w, "allReduce of a released tensor") {
		c.expect(fresh, make([]float64, size), nil, "a tensor made while an allReduce of a released one was in flight (the collective wrote into reused memory)")
	}
	return c.err()
}

// invalidArguments issues calls with invalid arguments: each must fail
// on the rank that made it, without communicating (the last rank makes
// every call twice, which the others do not wait for), and the group
// must go on.
func invalidArguments(pg dist.ProcessGroup, rt *tensor.Runtime) error {
	c := newChecker(pg)
	n, r := pg.Size(), pg.Rank()
	f32 := dtype.Float32
	x := rt.Zeros(f32, 4, 6)
	calls := []struct {
		what string
		call func() *dist.Work
	}{
		{"allReduce of a non-contiguous tensor", func() *dist.Work { return pg.AllReduce(x.Transpose(0, 1), dist.Sum) }},
		{"allReduce of a nil tensor", func() *dist.Work { return pg.AllReduce(nil, dist.Sum) }},
		{"allReduce avg of int64", func() *dist.Work { return pg.AllReduce(rt.Zeros(dtype.Int64, 4), dist.Avg) }},
		{"allReduce sum of bool", func() *dist.Work { return pg.AllReduce(rt.Zeros(dtype.Bool, 4), dist.Sum) }},
		{"allReduce with an unknown op", func() *dist.Work { return pg.AllReduce(rt.Zeros(f32, 4), dist.Product+1) }},
		{fmt.Sprintf("broadcast from root %d", n), func() *dist.Work { return pg.Broadcast(x, n) }},
		{"broadcast from root -1", func() *dist.Work { return pg.Broadcast(x, -1) }},
		{"broadcast of a non-contiguous tensor", func() *dist.Work { return pg.Broadcast(x.Transpose(0, 1), 0) }},
		{"reduceScatter with mismatched sizes", func() *dist.Work {
			return pg.ReduceScatter(rt.Zeros(f32, 4), rt.Zeros(f32, 4*n+3), dist.Sum)
		}},
		{"reduceScatter of float32 into float64", func() *dist.Work {
			return pg.ReduceScatter(rt.Zeros(dtype.Float64, 4), rt.Zeros(f32, 4*n), dist.Sum)
		}},
		{"reduceScatter of a non-contiguous input", func() *dist.Work {
			return pg.ReduceScatter(rt.Zeros(f32, 6), rt.Zeros(f32, 2*n, 3).Transpose(0, 1), dist.Sum)
		}},
		{"allGather with mismatched sizes", func() *dist.Work { return pg.AllGather(rt.Zeros(f32, 4*n+1), rt.Zeros(f32, 4)) }},
		{"allGather of float32 into float64", func() *dist.Work { return pg.AllGather(rt.Zeros(dtype.Float64, 4*n), rt.Zeros(f32, 4)) }},
		{fmt.Sprintf("allGatherInto with %d outputs", n+1), func() *dist.Work {
			outs := make([]*tensor.Tensor, n+1)
			for k := range outs {
				outs[k] = rt.Zeros(f32, 4)
			}
			return pg.AllGatherInto(outs, rt.Zeros(f32, 4))
		}},
		{"allGatherInto with an output of another dtype", func() *dist.Work {
			outs := make([]*tensor.Tensor, n)
			for k := range outs {
				outs[k] = rt.Zeros(f32, 4)
			}
			outs[n-1] = rt.Zeros(dtype.Int32, 4)
			return pg.AllGatherInto(outs, rt.Zeros(f32, 4))
		}},
		{"allToAll with mismatched sizes", func() *dist.Work { return pg.AllToAll(rt.Zeros(f32, 2*n), rt.Zeros(f32, 4*n)) }},
		{"allToAll of float32 into float64", func() *dist.Work { return pg.AllToAll(rt.Zeros(dtype.Float64, 2*n), rt.Zeros(f32, 2*n)) }},
		{fmt.Sprintf("send to rank %d", n), func() *dist.Work { return pg.Send(x, n) }},
		{"recv from rank -1", func() *dist.Work { return pg.Recv(x, -1) }},
		{"send to itself", func() *dist.Work { return pg.Send(x, r) }},
		{"recv from itself", func() *dist.Work { return pg.Recv(x, r) }},
		{"Then of a failed broadcast", func() *dist.Work {
			return pg.Broadcast(x, n).Then(func(err error) error { return err })
		}},
	}
	if n > 1 {
		calls = append(calls, struct {
			what string
			call func() *dist.Work
		}{fmt.Sprintf("allToAll of %d elements among %d ranks", 2*n+1, n), func() *dist.Work {
			return pg.AllToAll(rt.Zeros(f32, 2*n+1), rt.Zeros(f32, 2*n+1))
		}})
	}
	times := 1
	if r == n-1 {
		times = 2
	}
	for range times {
		for _, k := range calls {
			c.fails(k.call(), k.what)
		}
		if _, err := pg.BroadcastObject([]byte{1}, n); err == nil {
			c.errorf("broadcastObject from root %d succeeded; it must fail", n)
		}
		if _, err := pg.GatherObject([]byte{1}, -1); err == nil {
			c.errorf("gatherObject on root -1 succeeded; it must fail")
		}
	}

	// The group goes on.
	y := rt.FromValues(f32, Values(f32, dist.Sum, r, 10, 0), 10)
	if c.ok(pg.AllReduce(y, dist.Sum), "allReduce after invalid calls") {
		want, _ := Reduced(f32, dist.Sum, upTo(n), 10, 0)
		c.expect(y, want, nil, "allReduce after invalid calls")
	}
	got, err := pg.BroadcastObject(payload(r, 5), 0)
	if err != nil {
		c.errorf("broadcastObject after invalid calls failed: %v", err)
	} else if !bytes.Equal(got, payload(0, 5)) {
		c.errorf("broadcastObject after invalid calls gave %v, want %v", got, payload(0, 5))
	}
	c.ok(pg.Barrier(), "barrier after invalid calls")
	return c.err()
}
