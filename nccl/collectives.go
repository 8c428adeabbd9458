package nccl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/gpu/cuda"
)

// operand is a tensor's device memory for a collective.
type operand struct {
	buf   device.Buffer
	ptr   uint64 // the address of the tensor's first element
	numel int
	bytes int
}

// end is the address just past the operand.
func (a operand) end() uint64 { return a.ptr + uint64(a.bytes) }

// overlap reports whether a and b share memory.
func overlap(a, b operand) bool {
	if a.bytes == 0 || b.bytes == 0 {
		return false
	}
	return a.ptr < b.end() && b.ptr < a.end()
}

// operand checks t for a collective (as the in-process backend does:
// not nil, not failed, not released, contiguous; and on this rank's
// device) and returns its memory and a release that keeps it alive until
// the collective has completed. writable marks t as written, so that
// autograd refuses values saved before.
func (g *Group) operand(what string, t *tensor.Tensor, writable bool) (operand, func(), error) {
	if t == nil {
		return operand{}, nil, fmt.Errorf("%s is nil", what)
	}
	if err := t.Err(); err != nil {
		return operand{}, nil, err
	}
	if t.Released() {
		return operand{}, nil, fmt.Errorf("%s was released", what)
	}
	if !t.IsContiguous() {
		return operand{}, nil, fmt.Errorf("%s must be contiguous (call .contiguous() first), got shape %v strides %v", what, t.Shape(), t.Strides())
	}
	if d := t.Device(); d != device.Device(g.dev) {
		if d != nil && d.String() == g.dev.String() {
			return operand{}, nil, fmt.Errorf("%s is on another handle of %v than rank %d's (tensors of two runtimes cannot be mixed)", what, d, g.rank)
		}
		return operand{}, nil, fmt.Errorf("%s is on %v, not on rank %d's device %v", what, d, g.rank, g.dev)
	}
	var v device.View
	if writable {
		v = tensor.WritableView(t)
	} else {
		v = tensor.DeviceView(t)
	}
	p, err := ptrOf(v.Buf)
	if err != nil {
		return operand{}, nil, fmt.Errorf("%s: %v", what, err)
	}
	es := v.DType.Size()
	a := operand{buf: v.Buf, ptr: uint64(p.Ptr()) + uint64(v.Offset*es), numel: t.Numel(), bytes: t.Numel() * es}
	return a, tensor.Retain(t), nil
}

// refuse is the Work of a call that fails its checks; nothing is issued
// and the group goes on.
func refuse(kind string, err error) *dist.Work {
	return dist.Failed(fmt.Errorf("nccl: %s: %w", kind, err))
}

func (g *Group) checkRoot(kind string, root int) error {
	if root < 0 || root >= g.size {
		return fmt.Errorf("nccl: %s: rank %d is not in the group of %d ranks", kind, root, g.size)
	}
	return nil
}

func describe(kind string, dt dtype.DType, n int) string {
	return fmt.Sprintf("%s of %d %v", kind, n, dt)
}

// NCCL 2.10 added bfloat16 and ncclAvg.
const version210 = 21000

// versionString spells an ncclGetVersion code: "2.21.5".
func versionString(v int) string {
	if v >= 10000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
}

// dataType maps an element type to NCCL's. Bool travels as uint8 (one
// byte, 0 or 1), which reduces correctly with max (or) and min (and).
func (g *Group) dataType(dt dtype.DType) (DataType, error) {
	switch dt {
	case dtype.Float32:
		return Float32, nil
	case dtype.Float64:
		return Float64, nil
	case dtype.Float16:
		return Float16, nil
	case dtype.BFloat16:
		if g.lib.Version < version210 {
			return 0, fmt.Errorf("bfloat16 needs NCCL 2.10 or later (this is NCCL %s)", versionString(g.lib.Version))
		}
		return BFloat16, nil
	case dtype.Int64:
		return Int64, nil
	case dtype.Int32:
		return Int32, nil
	case dtype.Uint8, dtype.Bool:
		return Uint8, nil
	}
	return 0, fmt.Errorf("dtype %v cannot be communicated", dt)
}

// redOp maps a reduce op on dt to NCCL's, with the in-process backend's
// rules: averages need floating point, booleans take only max (or) and
// min (and).
func (g *Group) redOp(dt dtype.DType, op dist.ReduceOp) (RedOp, error) {
	switch {
	case op > dist.Product:
		return 0, fmt.Errorf("unknown reduce op %d", op)
	case dt == dtype.Bool && op != dist.Max && op != dist.Min:
		return 0, fmt.Errorf("reduce op %v is not defined for bool tensors (max and min are)", op)
	case op == dist.Avg && !dt.IsFloat():
		return 0, fmt.Errorf("reduce op avg needs a floating-point tensor, not %v", dt)
	}
	switch op {
	case dist.Sum:
		return Sum, nil
	case dist.Avg:
		if g.lib.Version < version210 {
			return 0, fmt.Errorf("reduce op avg needs NCCL 2.10 or later (this is NCCL %s)", versionString(g.lib.Version))
		}
		return Avg, nil
	case dist.Max:
		return Max, nil
	case dist.Min:
		return Min, nil
	}
	return Prod, nil
}

// reduceTypes is dataType and redOp.
func (g *Group) reduceTypes(dt dtype.DType, op dist.ReduceOp) (DataType, RedOp, error) {
	nt, err := g.dataType(dt)
	if err != nil {
		return 0, 0, err
	}
	rop, err := g.redOp(dt, op)
	return nt, rop, err
}

// AllReduce implements dist.ProcessGroup (ncclAllReduce, in place).
func (g *Group) AllReduce(t *tensor.Tensor, op dist.ReduceOp) *dist.Work {
	const kind = "AllReduce"
	a, keep, err := g.operand("the tensor", t, true)
	if err != nil {
		return refuse(kind, err)
	}
	nt, rop, err := g.reduceTypes(t.DType(), op)
	if err != nil {
		keep()
		return refuse(kind, err)
	}
	return g.submit(request{
		what: describe(kind, t.DType(), a.numel), keep: []func(){keep}, bufs: []device.Buffer{a.buf},
		issue: func(s uintptr) error {
			if a.numel == 0 {
				return nil
			}
			return g.call(func() error { return g.comm.AllReduce(a.ptr, a.ptr, a.numel, nt, rop, s) })
		},
	})
}

// Broadcast implements dist.ProcessGroup (ncclBroadcast, in place).
func (g *Group) Broadcast(t *tensor.Tensor, root int) *dist.Work {
	const kind = "Broadcast"
	if err := g.checkRoot(kind, root); err != nil {
		return dist.Failed(err)
	}
	a, keep, err := g.operand("the tensor", t, g.rank != root)
	if err != nil {
		return refuse(kind, err)
	}
	nt, err := g.dataType(t.DType())
	if err != nil {
		keep()
		return refuse(kind, err)
	}
	return g.submit(request{
		what: fmt.Sprintf("%s from rank %d", describe(kind, t.DType(), a.numel), root),
		keep: []func(){keep}, bufs: []device.Buffer{a.buf},
		issue: func(s uintptr) error {
			if a.numel == 0 {
				return nil
			}
			return g.call(func() error { return g.comm.Broadcast(a.ptr, a.ptr, a.numel, nt, root, s) })
		},
	})
}

// ReduceScatter implements dist.ProcessGroup (ncclReduceScatter).
func (g *Group) ReduceScatter(out, in *tensor.Tensor, op dist.ReduceOp) *dist.Work {
	return g.blocks("ReduceScatter", out, in, op)
}

// AllGather implements dist.ProcessGroup (ncclAllGather).
func (g *Group) AllGather(out, in *tensor.Tensor) *dist.Work {
	return g.blocks("AllGather", out, in, 0)
}

// AllToAll implements dist.ProcessGroup: this rank's own block is copied
// on the communication stream, the others go through a group of
// ncclSend and ncclRecv.
func (g *Group) AllToAll(out, in *tensor.Tensor) *dist.Work {
	return g.blocks("AllToAll", out, in, 0)
}

// blocks issues the collectives whose tensors are made of one block per
// rank, with the in-process backend's checks, and NCCL's rule on memory
// shared by input and output: a reduce-scatter or an all-gather may work
// in place (the small side is block Rank() of the large one), nothing
// else may overlap.
func (g *Group) blocks(kind string, out, in *tensor.Tensor, rop dist.ReduceOp) *dist.Work {
	ia, keepIn, err := g.operand("the input", in, false)
	if err != nil {
		return refuse(kind, err)
	}
	oa, keepOut, err := g.operand("the output", out, true)
	if err != nil {
		keepIn()
		return refuse(kind, err)
	}
	keep := []func(){keepIn, keepOut}
	bad := func(format string, args ...any) *dist.Work {
		release(keep)
		return refuse(kind, fmt.Errorf(format, args...))
	}
	if in.DType() != out.DType() {
		return bad("the input is %v and the output %v", in.DType(), out.DType())
	}
	nt, err := g.dataType(in.DType())
	if err != nil {
		return bad("%v", err)
	}
	n := g.size
	var issue func(s uintptr) error
	switch kind {
	case "ReduceScatter":
		op, err := g.redOp(in.DType(), rop)
		if err != nil {
			return bad("%v", err)
		}
		if in.Numel() != n*out.Numel() {
			return bad("the input has %d elements, %d ranks × the output's %d needed", in.Numel(), n, out.Numel())
		}
		if overlap(ia, oa) && oa.ptr != ia.ptr+uint64(g.rank*oa.bytes) {
			return bad("the output overlaps the input other than as its block %d (in place)", g.rank)
		}
		issue = func(s uintptr) error {
			if oa.numel == 0 {
				return nil
			}
			return g.call(func() error { return g.comm.ReduceScatter(ia.ptr, oa.ptr, oa.numel, nt, op, s) })
		}
	case "AllGather":
		if out.Numel() != n*in.Numel() {
			return bad("the output has %d elements, %d ranks × the input's %d needed", out.Numel(), n, in.Numel())
		}
		if overlap(ia, oa) && ia.ptr != oa.ptr+uint64(g.rank*ia.bytes) {
			return bad("the input overlaps the output other than as its block %d (in place)", g.rank)
		}
		issue = func(s uintptr) error {
			if ia.numel == 0 {
				return nil
			}
			return g.call(func() error { return g.comm.AllGather(ia.ptr, oa.ptr, ia.numel, nt, s) })
		}
	case "AllToAll":
		if in.Numel() != out.Numel() || in.Numel()%n != 0 {
			return bad("input and output need the same number of elements, a multiple of the %d ranks; got %d and %d", n, in.Numel(), out.Numel())
		}
		if overlap(ia, oa) {
			return bad("the input and the output share memory")
		}
		count := in.Numel() / n
		size := uint64(count * in.DType().Size())
		issue = func(s uintptr) error {
			if count == 0 {
				return nil
			}
			me := uint64(g.rank)
			if err := g.stream.CopyDtoD(cuda.DevicePtr(oa.ptr+me*size), cuda.DevicePtr(ia.ptr+me*size), size); err != nil {
				return err
			}
			if n == 1 {
				return nil
			}
			return g.grouped(func() error {
				for r := range n {
					if r == g.rank {
						continue
					}
					off := uint64(r) * size
					if err := g.comm.Send(ia.ptr+off, count, nt, r, s); err != nil {
						return err
					}
					if err := g.comm.Recv(oa.ptr+off, count, nt, r, s); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	return g.submit(request{what: describe(kind, in.DType(), in.Numel()), keep: keep, bufs: []device.Buffer{ia.buf, oa.buf}, issue: issue})
}

// grouped runs fn, calls into NCCL, between ncclGroupStart and
// ncclGroupEnd (which it calls also when fn fails).
func (g *Group) grouped(fn func() error) error {
	return g.call(func() error {
		if err := g.lib.GroupStart(); err != nil {
			return err
		}
		err := fn()
		if end := g.lib.GroupEnd(); err == nil {
			err = end
		}
		return err
	})
}

// AllGatherInto implements dist.ProcessGroup: an ncclAllGather into
// scratch memory, then a copy of each block into its output on the
// communication stream, as PyTorch's NCCL backend does for a list of
// outputs. One all-gather moves the data in a single pipelined ring
// pass; a group of Size() broadcasts would move as much through Size()
// kernels. The copies run at device memory bandwidth, far above the
// network's, and the scratch goes back to the allocator when the work
// completes.
func (g *Group) AllGatherInto(outs []*tensor.Tensor, in *tensor.Tensor) *dist.Work {
	const kind = "AllGatherInto"
	if len(outs) != g.size {
		return refuse(kind, fmt.Errorf("%d output tensors for %d ranks", len(outs), g.size))
	}
	ia, keepIn, err := g.operand("the input", in, false)
	if err != nil {
		return refuse(kind, err)
	}
	keep := []func(){keepIn}
	bufs := []device.Buffer{ia.buf}
	nt, err := g.dataType(in.DType())
	if err != nil {
		keepIn()
		return refuse(kind, err)
	}
	oas := make([]operand, len(outs))
	for r, o := range outs {
		oa, k, err := g.operand(fmt.Sprintf("output %d", r), o, true)
		if err == nil && (o.DType() != in.DType() || o.Numel() != in.Numel()) {
			k()
			err = fmt.Errorf("output %d is %v of %d elements; the input is %v of %d", r, o.DType(), o.Numel(), in.DType(), in.Numel())
		}
		if err != nil {
			release(keep)
			return refuse(kind, err)
		}
		oas[r] = oa
		keep = append(keep, k)
		bufs = append(bufs, oa.buf)
	}
	what := describe(kind, in.DType(), ia.numel)
	if ia.numel == 0 {
		return g.submit(request{what: what, keep: keep, bufs: bufs, issue: func(uintptr) error { return nil }})
	}
	scratch, err := g.dev.Alloc(in.DType(), g.size*ia.numel)
	var sp devicePtr
	if err == nil {
		if sp, err = ptrOf(scratch); err != nil {
			g.dev.Free(scratch)
		}
	}
	if err != nil {
		release(keep)
		return refuse(kind, fmt.Errorf("scratch of %d elements: %w", g.size*ia.numel, err))
	}
	keep = append(keep, func() { g.dev.Free(scratch) })
	bufs = append(bufs, scratch)
	base := uint64(sp.Ptr())
	return g.submit(request{what: what, keep: keep, bufs: bufs, issue: func(s uintptr) error {
		if err := g.call(func() error { return g.comm.AllGather(ia.ptr, base, ia.numel, nt, s) }); err != nil {
			return err
		}
		for r, oa := range oas {
			if err := g.stream.CopyDtoD(cuda.DevicePtr(oa.ptr), cuda.DevicePtr(base+uint64(r*ia.bytes)), uint64(ia.bytes)); err != nil {
				return err
			}
		}
		return nil
	}})
}

// Barrier implements dist.ProcessGroup: an all-reduce of one element of
// the group's own device memory. Like every work of the group it
// completes when the collective has run, which needs every rank.
func (g *Group) Barrier() *dist.Work {
	return g.submit(request{what: "Barrier", bufs: []device.Buffer{g.small}, issue: func(s uintptr) error {
		return g.call(func() error { return g.comm.AllReduce(g.sptr, g.sptr, 1, Int64, Sum, s) })
	}})
}

// Send implements dist.ProcessGroup (ncclSend). See the package
// documentation for the order in which sends and receives must be issued.
func (g *Group) Send(t *tensor.Tensor, dst int) *dist.Work { return g.p2p("Send", t, dst) }

// Recv implements dist.ProcessGroup (ncclRecv).
func (g *Group) Recv(t *tensor.Tensor, src int) *dist.Work { return g.p2p("Recv", t, src) }

func (g *Group) p2p(kind string, t *tensor.Tensor, peer int) *dist.Work {
	if err := g.checkRoot(kind, peer); err != nil {
		return dist.Failed(err)
	}
	if peer == g.rank {
		verb := map[string]string{"Send": "send to", "Recv": "receive from"}[kind]
		return refuse(kind, fmt.Errorf("rank %d cannot %s itself", peer, verb))
	}
	a, keep, err := g.operand("the tensor", t, kind == "Recv")
	if err != nil {
		return refuse(kind, err)
	}
	nt, err := g.dataType(t.DType())
	if err != nil {
		keep()
		return refuse(kind, err)
	}
	what := fmt.Sprintf("%s to rank %d", describe(kind, t.DType(), a.numel), peer)
	if kind == "Recv" {
		what = fmt.Sprintf("%s from rank %d", describe(kind, t.DType(), a.numel), peer)
	}
	return g.submit(request{what: what, keep: []func(){keep}, bufs: []device.Buffer{a.buf}, issue: func(s uintptr) error {
		if a.numel == 0 {
			return nil
		}
		if kind == "Send" {
			return g.call(func() error { return g.comm.Send(a.ptr, a.numel, nt, peer, s) })
		}
		return g.call(func() error { return g.comm.Recv(a.ptr, a.numel, nt, peer, s) })
	}})
}

// maxObjectBytes bounds an object payload, as tensors are bounded: a
// larger length read back from the device is corrupt.
const maxObjectBytes = 1 << 40

// objectBuffer allocates n bytes of device memory for an object
// collective; free returns them once the work has completed.
func (g *Group) objectBuffer(n int) (device.Buffer, uint64, func(), error) {
	b, err := g.dev.Alloc(dtype.Uint8, n)
	if err != nil {
		return nil, 0, nil, err
	}
	p, err := ptrOf(b)
	if err != nil {
		g.dev.Free(b)
		return nil, 0, nil, err
	}
	return b, uint64(p.Ptr()), func() { g.dev.Free(b) }, nil
}

// BroadcastObject implements dist.ProcessGroup: the length, then the
// payload, go through device memory with ncclBroadcast; the host copies
// run on the communication stream. It blocks until done.
func (g *Group) BroadcastObject(payload []byte, root int) ([]byte, error) {
	const kind = "BroadcastObject"
	if err := g.checkRoot(kind, root); err != nil {
		return nil, err
	}
	me := g.rank == root
	lenb := make([]byte, 8)
	if me {
		binary.LittleEndian.PutUint64(lenb, uint64(len(payload)))
	}
	small := cuda.DevicePtr(g.sptr)
	err := g.submit(request{
		what: fmt.Sprintf("%s (the length) from rank %d", kind, root), bufs: []device.Buffer{g.small},
		issue: func(s uintptr) error {
			if me {
				if err := g.stream.CopyHtoD(small, lenb); err != nil {
					return err
				}
			}
			if err := g.call(func() error { return g.comm.Broadcast(g.sptr, g.sptr, 1, Int64, root, s) }); err != nil {
				return err
			}
			if !me {
				return g.stream.CopyDtoH(lenb, small)
			}
			return nil
		},
	}).Wait()
	if err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(lenb)
	if n > maxObjectBytes {
		return nil, fmt.Errorf("nccl: %s on rank %d: rank %d's length arrived as %d bytes", kind, g.rank, root, n)
	}
	if n == 0 {
		if me {
			return bytes.Clone(payload), nil
		}
		return []byte{}, nil
	}
	buf, ptr, free, err := g.objectBuffer(int(n))
	if err != nil {
		return nil, fmt.Errorf("nccl: %s on rank %d: %w", kind, g.rank, err)
	}
	var out []byte
	if !me {
		out = make([]byte, n)
	}
	err = g.submit(request{
		what: fmt.Sprintf("%s of %d bytes from rank %d", kind, n, root), keep: []func(){free}, bufs: []device.Buffer{buf},
		issue: func(s uintptr) error {
			if me {
				if err := g.stream.CopyHtoD(cuda.DevicePtr(ptr), payload); err != nil {
					return err
				}
			}
			if err := g.call(func() error { return g.comm.Broadcast(ptr, ptr, int(n), Uint8, root, s) }); err != nil {
				return err
			}
			if !me {
				return g.stream.CopyDtoH(out, cuda.DevicePtr(ptr))
			}
			return nil
		},
	}).Wait()
	if err != nil {
		return nil, err
	}
	if me {
		return bytes.Clone(payload), nil
	}
	return out, nil
}

// GatherObject implements dist.ProcessGroup: an ncclAllGather of the
// lengths, then each other rank's payload goes to root with ncclSend and
// ncclRecv (root's in one group); the host copies run on the
// communication stream. It blocks until done.
func (g *Group) GatherObject(payload []byte, root int) ([][]byte, error) {
	const kind = "GatherObject"
	if err := g.checkRoot(kind, root); err != nil {
		return nil, err
	}
	n := g.size
	mine := binary.LittleEndian.AppendUint64(nil, uint64(len(payload)))
	lensb := make([]byte, 8*n)
	small := cuda.DevicePtr(g.sptr)
	err := g.submit(request{
		what: fmt.Sprintf("%s (the lengths) to rank %d", kind, root), bufs: []device.Buffer{g.small},
		issue: func(s uintptr) error {
			if err := g.stream.CopyHtoD(small, mine); err != nil {
				return err
			}
			if err := g.call(func() error { return g.comm.AllGather(g.sptr, g.sptr+8, 1, Int64, s) }); err != nil {
				return err
			}
			return g.stream.CopyDtoH(lensb, small+8)
		},
	}).Wait()
	if err != nil {
		return nil, err
	}
	lens := make([]int, n)
	for r := range lens {
		l := binary.LittleEndian.Uint64(lensb[8*r:])
		if l > maxObjectBytes || (r == g.rank && l != uint64(len(payload))) {
			return nil, fmt.Errorf("nccl: %s on rank %d: rank %d's length arrived as %d bytes", kind, g.rank, r, l)
		}
		lens[r] = int(l)
	}
	if g.rank != root {
		if len(payload) == 0 {
			return nil, nil
		}
		buf, ptr, free, err := g.objectBuffer(len(payload))
		if err != nil {
			return nil, fmt.Errorf("nccl: %s on rank %d: %w", kind, g.rank, err)
		}
		return nil, g.submit(request{
			what: fmt.Sprintf("%s of %d bytes to rank %d", kind, len(payload), root), keep: []func(){free}, bufs: []device.Buffer{buf},
			issue: func(s uintptr) error {
				if err := g.stream.CopyHtoD(cuda.DevicePtr(ptr), payload); err != nil {
					return err
				}
				return g.call(func() error { return g.comm.Send(ptr, len(payload), Uint8, root, s) })
			},
		}).Wait()
	}
	offs := make([]int, n+1)
	for r, l := range lens {
		if r == root {
			l = 0
		}
		offs[r+1] = offs[r] + l
	}
	total := offs[n]
	host := make([]byte, total)
	if total > 0 {
		buf, ptr, free, err := g.objectBuffer(total)
		if err != nil {
			return nil, fmt.Errorf("nccl: %s on rank %d: %w", kind, g.rank, err)
		}
		err = g.submit(request{
			what: fmt.Sprintf("%s of %d bytes to rank %d", kind, total, root), keep: []func(){free}, bufs: []device.Buffer{buf},
			issue: func(s uintptr) error {
				err := g.grouped(func() error {
					for r, l := range lens {
						if r == root || l == 0 {
							continue
						}
						if err := g.comm.Recv(ptr+uint64(offs[r]), l, Uint8, r, s); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				return g.stream.CopyDtoH(host, cuda.DevicePtr(ptr))
			},
		}).Wait()
		if err != nil {
			return nil, err
		}
	}
	out := make([][]byte, n)
	for r := range out {
		if r == root {
			out[r] = bytes.Clone(payload)
		} else {
			out[r] = host[offs[r]:offs[r+1]:offs[r+1]]
		}
	}
	return out, nil
}

// errSubgroups is NewGroup's error.
var errSubgroups = errors.New("nccl: subgroups are not supported yet: they need ncclCommSplit, which the binding does not bind")

// NewGroup implements dist.ProcessGroup. It returns an error for every
// list of ranks, the whole group's included: a subgroup needs a
// communicator of its own (ncclCommSplit). Sharing this group's
// communicator would tie the two groups' calls into one sequence, which
// ranks that issue calls on two groups in different orders (valid with
// separate groups) would break.
func (g *Group) NewGroup(ranks []int) (dist.ProcessGroup, error) {
	return nil, errSubgroups
}
