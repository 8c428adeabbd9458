package wasm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// hostFunc is a host function of the ABI: it reads its arguments from
// stack and returns the status the guest sees. A failure goes through
// h.fail, which records it for the export call in progress.
type hostFunc struct {
	sig signature
	fn  func(h *Hook, mem api.Memory, stack []uint64) Status
}

var hostFuncs map[string]hostFunc

// hostSignatures are the types of the host functions, for the checks of
// abi.go.
var hostSignatures = map[string]signature{}

func init() {
	p := func(ts ...api.ValueType) []api.ValueType { return ts }
	hostFuncs = map[string]hostFunc{
		"bucket_info":    {sig(p(i32, i32), i32), (*Hook).bucketInfo},
		"bucket_param":   {sig(p(i32, i32, i32, i32, i32), i32), (*Hook).bucketParam},
		"tensor_new":     {sig(p(i32, i64, i32), i32), (*Hook).tensorNew},
		"tensor_free":    {sig(p(i32), i32), (*Hook).tensorFree},
		"tensor_info":    {sig(p(i32, i32), i32), (*Hook).tensorInfo},
		"tensor_read":    {sig(p(i32, i64, i32, i32), i32), (*Hook).tensorRead},
		"tensor_write":   {sig(p(i32, i64, i32, i32), i32), (*Hook).tensorWrite},
		"all_reduce":     {sig(p(i32, i32), i32), (*Hook).allReduce},
		"broadcast":      {sig(p(i32, i32), i32), (*Hook).broadcast},
		"reduce_scatter": {sig(p(i32, i32, i32), i32), (*Hook).reduceScatter},
		"all_gather":     {sig(p(i32, i32), i32), (*Hook).allGather},
		"copy":           {sig(p(i32, i32), i32), (*Hook).copyTensor},
		"scale":          {sig(p(i32, f64), i32), (*Hook).scale},
		"sign":           {sig(p(i32, i32), i32), (*Hook).sign},
		"norm":           {sig(p(i32, f64, i32), i32), (*Hook).norm},
		"topk":           {sig(p(i32, i64, i32, i32), i32), (*Hook).topk},
		"scatter_add":    {sig(p(i32, i32, i32), i32), (*Hook).scatterAdd},
		"log":            {sig(p(i32, i32), i32), (*Hook).log},
	}
	for name, f := range hostFuncs {
		hostSignatures[name] = f.sig
	}
}

type hookKey struct{}

// instantiateHost makes the "zeroeng" module on rt. Its hook functions
// find the calling rank's Hook in the context of the call, its schedule
// functions the calling Schedule, the program functions (registered by
// the scripting layer) their instance. A function of one kind called by
// an instance of the other (which the load-time checks refuse) fails
// with ERR_INVALID.
func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(hostModule)
	names := map[string]signature{}
	for name, f := range hostFuncs {
		names[name] = f.sig
	}
	for name, f := range scheduleFuncs {
		if s, ok := names[name]; ok && !s.equal(f.sig) {
			return fmt.Errorf("host function %s has the type %s for hooks but %s for schedules", name, s, f.sig)
		}
		names[name] = f.sig
	}
	for name, sig := range names {
		hf, forHooks := hostFuncs[name]
		sf, forSchedules := scheduleFuncs[name]
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			var in *instance
			var st Status
			if h, ok := ctx.Value(hookKey{}).(*Hook); ok {
				in = &h.instance
				if forHooks {
					st = hf.fn(h, mod.Memory(), stack)
				} else {
					st = in.fail(name, ErrInvalid, "a function of the schedule ABI, which a hook cannot call")
				}
			} else if s, ok := ctx.Value(scheduleKey{}).(*Schedule); ok {
				in = &s.instance
				if forSchedules {
					st = sf.fn(s, mod.Memory(), stack)
				} else {
					st = in.fail(name, ErrInvalid, "a function of the hook ABI, which a schedule cannot call")
				}
			} else {
				stack[0] = uint64(ErrInvalid)
				if forHooks && OutsideHook != nil {
					stack[0] = uint64(OutsideHook(ctx, mod, name))
				}
				return
			}
			if st != OK && in.callErr == nil {
				in.callErr = fmt.Errorf("host call %s: %v", name, st)
			}
			stack[0] = uint64(st)
		}), sig.params, sig.results).Export(name)
	}
	for name, f := range programHostFuncs() {
		if _, ok := scheduleFuncs[name]; ok {
			return fmt.Errorf("program host function %s is a schedule host function", name)
		}
		b.NewFunctionBuilder().WithGoModuleFunction(f.Fn, f.Params, f.Results).Export(name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// fail records why a host call failed (the first failure of an export
// call is the one reported) and returns its status.
func (in *instance) fail(fn string, st Status, format string, args ...any) Status {
	if in.callErr == nil {
		in.callErr = fmt.Errorf("host call %s: %v: %s", fn, st, fmt.Sprintf(format, args...))
	}
	return st
}

func u32(v uint64) uint32 { return uint32(v) }

// guest returns the guest bytes [ptr, ptr+n), shared with its memory.
func (in *instance) guest(fn string, mem api.Memory, ptr, n uint32) ([]byte, Status) {
	b, ok := mem.Read(ptr, n)
	if !ok {
		return nil, in.fail(fn, ErrBounds, "guest range [%d, %d) is outside the %d bytes of memory", ptr, uint64(ptr)+uint64(n), mem.Size())
	}
	return b, OK
}

// tensorArg returns the live handle h, first waiting for the collectives
// pending on it (reads and writes see their result).
func (h *Hook) tensorArg(fn string, v uint64) (*handle, Status) {
	hd, ok := h.handles[u32(v)]
	if !ok {
		return nil, h.fail(fn, ErrHandle, "%d is not a live handle", u32(v))
	}
	if err := hd.settle(); err != nil {
		return nil, h.fail(fn, ErrComm, "waiting for a collective on handle %d: %v", u32(v), err)
	}
	return hd, OK
}

func (h *Hook) bucketArg(fn string, v uint64) (*bucketCall, Status) {
	hd, ok := h.handles[u32(v)]
	if !ok || hd.bucket == nil {
		return nil, h.fail(fn, ErrHandle, "%d is not the handle of a bucket in flight", u32(v))
	}
	return hd.bucket, OK
}

func (h *Hook) bucketInfo(mem api.Memory, s []uint64) Status {
	const fn = "bucket_info"
	bc, st := h.bucketArg(fn, s[0])
	if st != OK {
		return st
	}
	out, st := h.guest(fn, mem, u32(s[1]), 40)
	if st != OK {
		return st
	}
	b := bc.b
	var flags uint32
	if b.IsLast {
		flags |= 1
	}
	le := binary.LittleEndian
	le.PutUint32(out[0:], uint32(b.Index))
	le.PutUint32(out[4:], flags)
	le.PutUint64(out[8:], uint64(b.Buffer.Numel()))
	le.PutUint32(out[16:], dtypeToABI(b.Buffer.DType()))
	le.PutUint32(out[20:], uint32(len(b.Params)))
	le.PutUint64(out[24:], uint64(h.step))
	le.PutUint32(out[32:], uint32(h.pg.Rank()))
	le.PutUint32(out[36:], uint32(h.pg.Size()))
	return OK
}

func (h *Hook) bucketParam(mem api.Memory, s []uint64) Status {
	const fn = "bucket_param"
	bc, st := h.bucketArg(fn, s[0])
	if st != OK {
		return st
	}
	i := int(int32(u32(s[1])))
	if i < 0 || i >= len(bc.b.Params) {
		return h.fail(fn, ErrInvalid, "parameter %d of a bucket of %d", i, len(bc.b.Params))
	}
	out, st := h.guest(fn, mem, u32(s[2]), 24)
	if st != OK {
		return st
	}
	name := bc.b.Names[i]
	nameCap := min(uint32(len(name)), u32(s[4]))
	dst, st := h.guest(fn, mem, u32(s[3]), nameCap)
	if st != OK {
		return st
	}
	le := binary.LittleEndian
	le.PutUint64(out[0:], uint64(bc.b.Offsets[i]))
	le.PutUint64(out[8:], uint64(bc.b.Params[i].Numel()))
	le.PutUint32(out[16:], uint32(len(name)))
	le.PutUint32(out[20:], 0)
	copy(dst, name)
	return OK
}

func (h *Hook) tensorNew(mem api.Memory, s []uint64) Status {
	const fn = "tensor_new"
	dt, ok := dtypeFromABI(u32(s[0]))
	if !ok {
		return h.fail(fn, ErrInvalid, "unknown dtype code %d", u32(s[0]))
	}
	numel := int64(s[1])
	if numel < 0 {
		return h.fail(fn, ErrInvalid, "negative element count %d", numel)
	}
	out, st := h.guest(fn, mem, u32(s[2]), 4)
	if st != OK {
		return st
	}
	bytes := numel * int64(dt.Size())
	if limit := int64(h.m.cfg.memoryLimitMB()) << 20; int64(h.ownedBytes)+bytes > limit {
		return h.fail(fn, ErrNoMem, "%d more bytes would take the hook's host tensors past its limit of %d MiB", bytes, limit>>20)
	}
	t := h.rt.Zeros(dt, int(numel)).Persist()
	if err := t.Err(); err != nil {
		return h.fail(fn, ErrNoMem, "%v", err)
	}
	id := h.add(&handle{t: t, bytes: int(bytes)})
	h.ownedBytes += int(bytes)
	binary.LittleEndian.PutUint32(out, id)
	return OK
}

func (h *Hook) tensorFree(_ api.Memory, s []uint64) Status {
	const fn = "tensor_free"
	hd, st := h.tensorArg(fn, s[0])
	if st != OK {
		return st
	}
	if hd.bucket != nil {
		return h.fail(fn, ErrHandle, "handle %d is a bucket, which the host owns", u32(s[0]))
	}
	h.free(u32(s[0]), hd)
	return OK
}

func (h *Hook) tensorInfo(mem api.Memory, s []uint64) Status {
	const fn = "tensor_info"
	hd, ok := h.handles[u32(s[0])]
	if !ok {
		return h.fail(fn, ErrHandle, "%d is not a live handle", u32(s[0]))
	}
	out, st := h.guest(fn, mem, u32(s[1]), 16)
	if st != OK {
		return st
	}
	binary.LittleEndian.PutUint32(out[0:], dtypeToABI(hd.t.DType()))
	binary.LittleEndian.PutUint32(out[4:], 0)
	binary.LittleEndian.PutUint64(out[8:], uint64(hd.t.Numel()))
	return OK
}

// transfer reads the arguments (handle, byte_offset, ptr, len) of
// tensor_read and tensor_write: the tensor, the offset in its bytes and
// the guest's bytes, both ranges checked.
func (h *Hook) transfer(fn string, mem api.Memory, s []uint64) (hd *handle, off int64, guest []byte, st Status) {
	if hd, st = h.tensorArg(fn, s[0]); st != OK {
		return
	}
	off, n := int64(s[1]), u32(s[3])
	size := int64(hd.t.Numel() * hd.t.DType().Size())
	if off < 0 || off > size || int64(n) > size-off {
		// Not as a range: off+n may overflow.
		return nil, 0, nil, h.fail(fn, ErrBounds, "%d bytes at offset %d are outside the tensor's %d bytes", n, off, size)
	}
	guest, st = h.guest(fn, mem, u32(s[2]), n)
	return
}

func (h *Hook) tensorRead(mem api.Memory, s []uint64) Status {
	const fn = "tensor_read"
	hd, off, dst, st := h.transfer(fn, mem, s)
	if st != OK {
		return st
	}
	if src, ok := tensor.HostBytes(hd.t); ok {
		copy(dst, src[off:])
		return OK
	}
	all, err := hd.t.Bytes()
	if err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	copy(dst, all[off:])
	return OK
}

func (h *Hook) tensorWrite(mem api.Memory, s []uint64) Status {
	const fn = "tensor_write"
	hd, off, src, st := h.transfer(fn, mem, s)
	if st != OK {
		return st
	}
	n := uint32(len(src))
	if dst, ok := tensor.HostBytes(hd.t); ok {
		copy(dst[off:], src)
		return OK
	}
	// A device tensor: write whole elements through a staging tensor.
	es := int64(hd.t.DType().Size())
	if off%es != 0 || int64(n)%es != 0 {
		return h.fail(fn, ErrBounds, "bytes [%d, %d) do not cover whole %v elements", off, off+int64(n), hd.t.DType())
	}
	sc := h.rt.OpenScope()
	defer sc.Close()
	staged := h.rt.FromBytes(hd.t.DType(), src, int(int64(n)/es))
	if err := hd.t.Narrow(0, int(off/es), int(int64(n)/es)).CopyFrom(staged); err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	return OK
}

func (h *Hook) reduceOp(fn string, v uint64) (dist.ReduceOp, Status) {
	if int(u32(v)) >= len(abiOps) {
		return 0, h.fail(fn, ErrInvalid, "unknown reduce op %d", u32(v))
	}
	return abiOps[u32(v)], OK
}

// collective records the work of a collective on the handles it uses and
// on the export call in progress.
func (h *Hook) collective(name string, w *dist.Work, hds ...*handle) Status {
	for _, hd := range hds {
		hd.pending = append(hd.pending, w)
	}
	h.works = append(h.works, issued{name, w})
	return OK
}

func (h *Hook) allReduce(_ api.Memory, s []uint64) Status {
	const fn = "all_reduce"
	hd, st := h.tensorArg(fn, s[0])
	if st != OK {
		return st
	}
	op, st := h.reduceOp(fn, s[1])
	if st != OK {
		return st
	}
	return h.collective(fn, h.pg.AllReduce(hd.t, op), hd)
}

func (h *Hook) broadcast(_ api.Memory, s []uint64) Status {
	const fn = "broadcast"
	hd, st := h.tensorArg(fn, s[0])
	if st != OK {
		return st
	}
	root := int(int32(u32(s[1])))
	if root < 0 || root >= h.pg.Size() {
		return h.fail(fn, ErrInvalid, "root %d of %d ranks", root, h.pg.Size())
	}
	return h.collective(fn, h.pg.Broadcast(hd.t, root), hd)
}

func (h *Hook) reduceScatter(_ api.Memory, s []uint64) Status {
	const fn = "reduce_scatter"
	out, in, st := h.blocks(fn, s, "in", false)
	if st != OK {
		return st
	}
	op, st := h.reduceOp(fn, s[2])
	if st != OK {
		return st
	}
	return h.collective(fn, h.pg.ReduceScatter(out.t, in.t, op), out, in)
}

func (h *Hook) allGather(_ api.Memory, s []uint64) Status {
	const fn = "all_gather"
	out, in, st := h.blocks(fn, s, "out", true)
	if st != OK {
		return st
	}
	return h.collective(fn, h.pg.AllGather(out.t, in.t), out, in)
}

// blocks returns the operands out and in of reduce_scatter and
// all_gather: the same dtype, and the whole one (out when outWhole)
// holding a block of the other's size per rank.
func (h *Hook) blocks(fn string, s []uint64, wholeName string, outWhole bool) (out, in *handle, st Status) {
	if out, st = h.tensorArg(fn, s[0]); st != OK {
		return
	}
	if in, st = h.tensorArg(fn, s[1]); st != OK {
		return
	}
	if out.t.DType() != in.t.DType() {
		return nil, nil, h.fail(fn, ErrDType, "out is %v, in is %v", out.t.DType(), in.t.DType())
	}
	whole, part := in, out
	if outWhole {
		whole, part = out, in
	}
	if whole.t.Numel() != part.t.Numel()*h.pg.Size() {
		return nil, nil, h.fail(fn, ErrSize, "%s has %d elements, want %d ranks × %d", wholeName, whole.t.Numel(), h.pg.Size(), part.t.Numel())
	}
	return out, in, OK
}

// pair returns the handles dst and src of a two-operand primitive, with
// equal element counts.
func (h *Hook) pair(fn string, s []uint64) (dst, src *handle, st Status) {
	if dst, st = h.tensorArg(fn, s[0]); st != OK {
		return
	}
	if src, st = h.tensorArg(fn, s[1]); st != OK {
		return
	}
	if dst.t.Numel() != src.t.Numel() {
		st = h.fail(fn, ErrSize, "dst has %d elements, src %d", dst.t.Numel(), src.t.Numel())
	}
	return
}

func (h *Hook) copyTensor(_ api.Memory, s []uint64) Status {
	const fn = "copy"
	dst, src, st := h.pair(fn, s)
	if st != OK {
		return st
	}
	if dst.t.DType().IsFloat() != src.t.DType().IsFloat() {
		return h.fail(fn, ErrDType, "between %v and %v", src.t.DType(), dst.t.DType())
	}
	if err := dst.t.CopyFrom(src.t); err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	return OK
}

func (h *Hook) scale(_ api.Memory, s []uint64) Status {
	const fn = "scale"
	hd, st := h.tensorArg(fn, s[0])
	if st != OK {
		return st
	}
	if !hd.t.DType().IsFloat() {
		return h.fail(fn, ErrDType, "a %v tensor", hd.t.DType())
	}
	if err := hd.t.MulScalarInPlace(math.Float64frombits(s[1])); err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	return OK
}

func (h *Hook) sign(_ api.Memory, s []uint64) Status {
	const fn = "sign"
	dst, src, st := h.pair(fn, s)
	if st != OK {
		return st
	}
	if dst.t.DType() != src.t.DType() {
		return h.fail(fn, ErrDType, "dst is %v, src is %v", dst.t.DType(), src.t.DType())
	}
	sc := h.rt.OpenScope()
	defer sc.Close()
	if err := dst.t.CopyFrom(src.t.Sign()); err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	return OK
}

func (h *Hook) norm(mem api.Memory, s []uint64) Status {
	const fn = "norm"
	hd, st := h.tensorArg(fn, s[0])
	if st != OK {
		return st
	}
	p := math.Float64frombits(s[1])
	if p != 1 && p != 2 && !math.IsInf(p, 1) {
		return h.fail(fn, ErrInvalid, "p = %v; the ABI has p = 1, 2 and +inf", p)
	}
	if !hd.t.DType().IsFloat() {
		return h.fail(fn, ErrDType, "a %v tensor", hd.t.DType())
	}
	out, st := h.guest(fn, mem, u32(s[2]), 8)
	if st != OK {
		return st
	}
	// torch.norm's formula, the one gradient clipping uses.
	v := 0.0
	if hd.t.Numel() > 0 {
		var err error
		if v, err = optim.GradNorm([]*tensor.Tensor{hd.t}, p); err != nil {
			return h.fail(fn, ErrInvalid, "%v", err)
		}
	}
	binary.LittleEndian.PutUint64(out, math.Float64bits(v))
	return OK
}

func (h *Hook) topk(_ api.Memory, s []uint64) Status {
	const fn = "topk"
	src, st := h.tensorArg(fn, s[0])
	if st != OK {
		return st
	}
	k := int64(s[1])
	vals, st := h.tensorArg(fn, s[2])
	if st != OK {
		return st
	}
	idx, st := h.tensorArg(fn, s[3])
	if st != OK {
		return st
	}
	switch {
	case k < 0 || k > int64(src.t.Numel()):
		return h.fail(fn, ErrInvalid, "k = %d of %d elements", k, src.t.Numel())
	case !src.t.DType().IsFloat():
		return h.fail(fn, ErrDType, "a %v tensor", src.t.DType())
	case vals.t.DType() != src.t.DType() || idx.t.DType() != dtype.Int64:
		return h.fail(fn, ErrDType, "values must be %v and indices int64, got %v and %v", src.t.DType(), vals.t.DType(), idx.t.DType())
	case int64(vals.t.Numel()) != k || int64(idx.t.Numel()) != k:
		return h.fail(fn, ErrSize, "values and indices must hold k = %d elements, got %d and %d", k, vals.t.Numel(), idx.t.Numel())
	}
	x, err := src.t.Float32s()
	if err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	top := topKByMagnitude(x, int(k))
	sel := make([]float32, len(top))
	ind := make([]int64, len(top))
	for i, j := range top {
		sel[i], ind[i] = x[j], int64(j)
	}
	sc := h.rt.OpenScope()
	defer sc.Close()
	if err := vals.t.CopyFrom(h.rt.FromFloat32s(sel, len(sel))); err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	if err := idx.t.CopyFrom(h.rt.FromInt64s(ind, len(ind))); err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	return OK
}

func (h *Hook) scatterAdd(_ api.Memory, s []uint64) Status {
	const fn = "scatter_add"
	dst, st := h.tensorArg(fn, s[0])
	if st != OK {
		return st
	}
	idx, st := h.tensorArg(fn, s[1])
	if st != OK {
		return st
	}
	vals, st := h.tensorArg(fn, s[2])
	if st != OK {
		return st
	}
	switch {
	case idx.t.DType() != dtype.Int64:
		return h.fail(fn, ErrDType, "indices are %v, want int64", idx.t.DType())
	case vals.t.DType() != dst.t.DType():
		return h.fail(fn, ErrDType, "values are %v, dst %v", vals.t.DType(), dst.t.DType())
	case vals.t.Numel() != idx.t.Numel():
		return h.fail(fn, ErrSize, "%d indices and %d values", idx.t.Numel(), vals.t.Numel())
	}
	ind, err := idx.t.Int64s()
	if err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	for i, j := range ind {
		if j < 0 || j >= int64(dst.t.Numel()) {
			return h.fail(fn, ErrInvalid, "index %d (at %d) is outside the %d elements of dst", j, i, dst.t.Numel())
		}
	}
	sc := h.rt.OpenScope()
	defer sc.Close()
	if err := dst.t.CopyFrom(dst.t.ScatterAdd(0, idx.t, vals.t)); err != nil {
		return h.fail(fn, ErrInvalid, "%v", err)
	}
	return OK
}

// log is a function of both ABIs.
func (in *instance) log(mem api.Memory, s []uint64) Status {
	const fn = "log"
	b, st := in.guest(fn, mem, u32(s[0]), u32(s[1]))
	if st != OK {
		return st
	}
	in.stdout.line(b)
	return OK
}
