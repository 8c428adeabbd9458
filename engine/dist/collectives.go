package dist

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// opKind names a collective.
type opKind uint8

const (
	opAllReduce opKind = iota
	opBroadcast
	opReduceScatter
	opAllGather
	opAllGatherInto
	opAllToAll
	opBarrier
	opSend
	opRecv
	opBroadcastObject
	opGatherObject
)

var opNames = [...]string{
	opAllReduce: "allReduce", opBroadcast: "broadcast", opReduceScatter: "reduceScatter",
	opAllGather: "allGather", opAllGatherInto: "allGatherInto", opAllToAll: "allToAll",
	opBarrier: "barrier", opSend: "send", opRecv: "recv",
	opBroadcastObject: "broadcastObject", opGatherObject: "gatherObject",
}

func (k opKind) String() string { return opNames[k] }

// call is one rank's side of a collective.
type call struct {
	kind  opKind
	seq   uint64
	dt    dtype.DType
	op    ReduceOp
	root  int // broadcast and object root; peer of send and recv
	numel int // elements of the tensor the collective is sized by
	shape []int
	// preMul scales every rank's values before an all-reduce sums them
	// (1 for none; 0 for the collectives that do not reduce).
	preMul float64

	in, out []byte   // in aliases out where the collective is in place
	runs    [][]byte // a coalesced all-reduce's tensors (out is nil)
	outs    [][]byte // AllGatherInto
	payload []byte   // object collectives
	result  [][]byte // object collectives: what this rank receives
}

func (g *group) fail(kind opKind, format string, args ...any) *Work {
	return failed(fmt.Errorf("dist: %v: "+format, append([]any{kind}, args...)...))
}

func (g *group) checkRoot(kind opKind, root int) error {
	if root < 0 || root >= len(g.ranks) {
		return fmt.Errorf("dist: %v: rank %d is not in the group of %d ranks", kind, root, len(g.ranks))
	}
	return nil
}

// AllReduce implements ProcessGroup.
func (g *group) AllReduce(t *tensor.Tensor, op ReduceOp) *Work {
	b, keep, err := HostBytes("the tensor", t, true)
	if err != nil {
		return g.fail(opAllReduce, "%v", err)
	}
	if err := CheckReduce(t.DType(), op); err != nil {
		keep()
		return g.fail(opAllReduce, "%v", err)
	}
	return g.submit(&call{kind: opAllReduce, dt: t.DType(), op: op, preMul: 1, numel: t.Numel(), shape: t.Shape(), in: b, out: b}, []func(){keep})
}

// AllReduceCoalesced implements CoalescedAllReducer.
func (g *group) AllReduceCoalesced(ts []*tensor.Tensor, op ReduceOp, preMul float64) *Work {
	c, keep, err := coalesced(ts, op, preMul)
	if err != nil {
		return g.fail(opAllReduce, "%v", err)
	}
	return g.submit(c, keep)
}

// coalesced checks a coalesced all-reduce's tensors and makes its call:
// one run of bytes a tensor, none overlapping another (it would be
// combined twice), with the releases of their memory.
func coalesced(ts []*tensor.Tensor, op ReduceOp, preMul float64) (*call, []func(), error) {
	if len(ts) == 0 {
		return nil, nil, errors.New("no tensors to reduce")
	}
	c := &call{kind: opAllReduce, dt: ts[0].DType(), op: op, preMul: preMul}
	var keep []func()
	fail := func(err error) (*call, []func(), error) {
		for _, f := range keep {
			f()
		}
		return nil, nil, err
	}
	for i, t := range ts {
		b, k, err := HostBytes(fmt.Sprintf("tensor %d", i), t, true)
		if err != nil {
			return fail(err)
		}
		keep = append(keep, k)
		if t.DType() != c.dt {
			return fail(fmt.Errorf("tensor %d is %v, tensor 0 %v: a coalesced all-reduce needs one dtype", i, t.DType(), c.dt))
		}
		c.runs = append(c.runs, b)
		c.numel += t.Numel()
	}
	if err := CheckReduce(c.dt, op); err != nil {
		return fail(err)
	}
	if preMul != 1 && (op != Sum || (c.dt != dtype.Float32 && c.dt != dtype.Float64)) {
		return fail(fmt.Errorf("a pre-multiplied all-reduce needs op sum and float32 or float64, not %v of %v", op, c.dt))
	}
	if math.IsNaN(preMul) || math.IsInf(preMul, 0) {
		return fail(fmt.Errorf("pre-multiplier %v is not finite", preMul))
	}
	byStart := slices.Clone(c.runs)
	slices.SortFunc(byStart, func(a, b []byte) int { return cmp.Compare(startOf(a), startOf(b)) })
	for i := 1; i < len(byStart); i++ {
		if overlap(byStart[i-1], byStart[i]) {
			return fail(errors.New("two of the tensors share memory"))
		}
	}
	c.shape = []int{c.numel}
	return c, keep, nil
}

// startOf is where b starts in memory (0 when empty).
func startOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptrOf(&b[0])
}

// spans are the memory a rank's all-reduce combines, one run after
// another: its tensor's bytes, or its coalesced tensors'.
func (c *call) spans() [][]byte {
	if c.runs != nil {
		return c.runs
	}
	return [][]byte{c.out}
}

// eachPiece calls f for the pieces of bytes [lo, hi) of buffers laid out as
// runs (one list of runs a buffer, each buffer as long): f gets a piece's
// offset and each buffer's bytes of it, cut wherever any buffer's run ends,
// so that every one is a single run.
func eachPiece(bufs [][][]byte, lo, hi int, f func(off int, pieces [][]byte)) {
	type cursor struct{ run, start int } // the run holding lo, and where it starts
	at := make([]cursor, len(bufs))
	pieces := make([][]byte, len(bufs))
	for off := lo; off < hi; {
		end := hi
		for k, runs := range bufs {
			cur := &at[k]
			for off >= cur.start+len(runs[cur.run]) {
				cur.start += len(runs[cur.run])
				cur.run++
			}
			end = min(end, cur.start+len(runs[cur.run]))
		}
		for k, runs := range bufs {
			cur := at[k]
			pieces[k] = runs[cur.run][off-cur.start : end-cur.start]
		}
		f(off, pieces)
		off = end
	}
}

// Broadcast implements ProcessGroup.
func (g *group) Broadcast(t *tensor.Tensor, root int) *Work {
	if err := g.checkRoot(opBroadcast, root); err != nil {
		return failed(err)
	}
	b, keep, err := HostBytes("the tensor", t, g.rank != root)
	if err != nil {
		return g.fail(opBroadcast, "%v", err)
	}
	return g.submit(&call{kind: opBroadcast, dt: t.DType(), root: root, numel: t.Numel(), shape: t.Shape(), in: b, out: b}, []func(){keep})
}

// ReduceScatter implements ProcessGroup.
func (g *group) ReduceScatter(out, in *tensor.Tensor, op ReduceOp) *Work {
	return g.blocks(opReduceScatter, out, in, op)
}

// AllGather implements ProcessGroup.
func (g *group) AllGather(out, in *tensor.Tensor) *Work {
	return g.blocks(opAllGather, out, in, 0)
}

// AllToAll implements ProcessGroup.
func (g *group) AllToAll(out, in *tensor.Tensor) *Work {
	return g.blocks(opAllToAll, out, in, 0)
}

// blocks issues the collectives whose tensors are made of one block per
// rank: reduceScatter (in has Size blocks of out's size), allGather (out
// has Size blocks of in's size) and allToAll (both have Size blocks).
func (g *group) blocks(kind opKind, out, in *tensor.Tensor, op ReduceOp) *Work {
	ib, keepIn, err := HostBytes("the input", in, false)
	if err != nil {
		return g.fail(kind, "%v", err)
	}
	ob, keepOut, err := HostBytes("the output", out, true)
	if err != nil {
		keepIn()
		return g.fail(kind, "%v", err)
	}
	keep := []func(){keepIn, keepOut}
	bad := func(format string, args ...any) *Work {
		for _, f := range keep {
			f()
		}
		return g.fail(kind, format, args...)
	}
	if in.DType() != out.DType() {
		return bad("the input is %v and the output %v", in.DType(), out.DType())
	}
	n := len(g.ranks)
	c := &call{kind: kind, dt: in.DType(), op: op, in: ib, out: ob, shape: in.Shape()}
	switch kind {
	case opReduceScatter:
		if err := CheckReduce(in.DType(), op); err != nil {
			return bad("%v", err)
		}
		if in.Numel() != n*out.Numel() {
			return bad("the input has %d elements, %d ranks × the output's %d needed", in.Numel(), n, out.Numel())
		}
		c.numel = out.Numel()
	case opAllGather:
		if out.Numel() != n*in.Numel() {
			return bad("the output has %d elements, %d ranks × the input's %d needed", out.Numel(), n, in.Numel())
		}
		c.numel = in.Numel()
	case opAllToAll:
		if in.Numel() != out.Numel() || in.Numel()%n != 0 {
			return bad("input and output need the same number of elements, a multiple of the %d ranks; got %d and %d", n, in.Numel(), out.Numel())
		}
		if overlap(ib, ob) {
			return bad("the input and the output share memory")
		}
		c.numel = in.Numel()
	}
	return g.submit(c, keep)
}

// AllGatherInto implements ProcessGroup.
func (g *group) AllGatherInto(outs []*tensor.Tensor, in *tensor.Tensor) *Work {
	if len(outs) != len(g.ranks) {
		return g.fail(opAllGatherInto, "%d output tensors for %d ranks", len(outs), len(g.ranks))
	}
	ib, keepIn, err := HostBytes("the input", in, false)
	if err != nil {
		return g.fail(opAllGatherInto, "%v", err)
	}
	keep := []func(){keepIn}
	c := &call{kind: opAllGatherInto, dt: in.DType(), numel: in.Numel(), shape: in.Shape(), in: ib}
	for r, o := range outs {
		ob, k, err := HostBytes(fmt.Sprintf("output %d", r), o, true)
		if err == nil && (o.DType() != in.DType() || o.Numel() != in.Numel()) {
			k()
			err = fmt.Errorf("output %d is %v of %d elements; the input is %v of %d", r, o.DType(), o.Numel(), in.DType(), in.Numel())
		}
		if err != nil {
			for _, f := range keep {
				f()
			}
			return g.fail(opAllGatherInto, "%v", err)
		}
		keep = append(keep, k)
		c.outs = append(c.outs, ob)
	}
	return g.submit(c, keep)
}

// Barrier implements ProcessGroup.
func (g *group) Barrier() *Work { return g.submit(&call{kind: opBarrier}, nil) }

// Send implements ProcessGroup.
func (g *group) Send(t *tensor.Tensor, dst int) *Work { return g.p2p(opSend, t, dst) }

// Recv implements ProcessGroup.
func (g *group) Recv(t *tensor.Tensor, src int) *Work { return g.p2p(opRecv, t, src) }

func (g *group) p2p(kind opKind, t *tensor.Tensor, peer int) *Work {
	if err := g.checkRoot(kind, peer); err != nil {
		return failed(err)
	}
	if peer == g.rank {
		return g.fail(kind, "rank %d cannot %v to itself", peer, kind)
	}
	b, keep, err := HostBytes("the tensor", t, kind == opRecv)
	if err != nil {
		return g.fail(kind, "%v", err)
	}
	return g.submit(&call{kind: kind, dt: t.DType(), root: peer, numel: t.Numel(), shape: t.Shape(), in: b, out: b}, []func(){keep})
}

// BroadcastObject implements ProcessGroup.
func (g *group) BroadcastObject(payload []byte, root int) ([]byte, error) {
	if err := g.checkRoot(opBroadcastObject, root); err != nil {
		return nil, err
	}
	c := &call{kind: opBroadcastObject, root: root, payload: payload}
	if err := g.submit(c, nil).Wait(); err != nil {
		return nil, err
	}
	return c.result[0], nil
}

// GatherObject implements ProcessGroup.
func (g *group) GatherObject(payload []byte, root int) ([][]byte, error) {
	if err := g.checkRoot(opGatherObject, root); err != nil {
		return nil, err
	}
	c := &call{kind: opGatherObject, root: root, payload: payload}
	if err := g.submit(c, nil).Wait(); err != nil {
		return nil, err
	}
	return c.result, nil
}

func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := &a[0], &b[0]
	aEnd, bEnd := &a[len(a)-1], &b[len(b)-1]
	return !(uintptrOf(aEnd) < uintptrOf(b0) || uintptrOf(bEnd) < uintptrOf(a0))
}
