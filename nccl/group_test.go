//go:build (darwin || freebsd || linux || netbsd) && (amd64 || arm64)

package nccl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/internal/fake"
)

// testBuffer is device memory of the fake driver (host memory there).
type testBuffer struct {
	p cuda.DevicePtr
	n int
}

func (b *testBuffer) Bytes() int          { return b.n }
func (b *testBuffer) Ptr() cuda.DevicePtr { return b.p }

// testDevice is the part of a CUDA device the process group uses, on the
// fake driver: memory, upload, download and the two streams. It keeps the
// tests of the group independent of package gpu. The embedded
// device.Device is nil: the kernels are not used.
type testDevice struct {
	device.Device
	index   int
	props   *cuda.Device
	ctx     *cuda.Context
	compute *cuda.Stream
	comm    *cuda.Stream

	mu     sync.Mutex
	live   int
	marked map[*testBuffer]bool
}

var _ Device = (*testDevice)(nil)

func (d *testDevice) Kind() device.Kind           { return device.CUDA }
func (d *testDevice) Index() int                  { return d.index }
func (d *testDevice) String() string              { return fmt.Sprintf("cuda:%d", d.index) }
func (d *testDevice) Props() *cuda.Device         { return d.props }
func (d *testDevice) Context() *cuda.Context      { return d.ctx }
func (d *testDevice) ComputeStream() *cuda.Stream { return d.compute }
func (d *testDevice) CommStream() *cuda.Stream    { return d.comm }
func (d *testDevice) MemStats() device.MemStats {
	return device.MemStats{LiveBuffers: int64(d.liveBuffers())}
}
func (d *testDevice) Sync() error { return errors.Join(d.compute.Sync(), d.comm.Sync()) }
func (d *testDevice) ptr(v device.View) cuda.DevicePtr {
	return v.Buf.(*testBuffer).p + cuda.DevicePtr(v.Offset*v.DType.Size())
}

func (d *testDevice) MarkCommUse(b device.Buffer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.marked[b.(*testBuffer)] = true
}

func (d *testDevice) isMarked(b device.Buffer) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.marked[b.(*testBuffer)]
}

func (d *testDevice) liveBuffers() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live
}

func (d *testDevice) Alloc(dt dtype.DType, n int) (device.Buffer, error) {
	size := n * dt.Size()
	p, err := d.ctx.MemAlloc(uint64(max(size, 1)))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.live++
	d.mu.Unlock()
	return &testBuffer{p: p, n: size}, nil
}

func (d *testDevice) Free(b device.Buffer) {
	d.mu.Lock()
	d.live--
	d.mu.Unlock()
	if err := d.ctx.MemFree(b.(*testBuffer).p); err != nil {
		panic(err)
	}
}

func (d *testDevice) Upload(dst device.View, src []byte) error {
	return d.compute.CopyHtoD(d.ptr(dst), src)
}

func (d *testDevice) Download(dst []byte, src device.View) error {
	if !src.Contiguous() {
		return errors.New("testDevice: download of a strided view")
	}
	if err := d.compute.CopyDtoH(dst, d.ptr(src)); err != nil {
		return err
	}
	return d.compute.Sync()
}

// env is the fake CUDA driver with four devices and the fake NCCL.
type env struct {
	cc  *fake.CUDAControl
	nc  *fake.NCCLControl
	drv *cuda.Driver
	lib *Lib
}

func newEnv(t *testing.T) *env {
	t.Helper()
	t.Setenv("FAKECUDA_DEVICES", "4")
	cc := fake.OpenCUDA(t)
	drv, err := cuda.LoadFrom(cc.Path())
	if err != nil {
		t.Fatal(err)
	}
	lib, nc := open(t)
	return &env{cc: cc, nc: nc, drv: drv, lib: lib}
}

// device opens GPU ordinal as the device labelled cuda:index.
func (e *env) device(t *testing.T, ordinal, index int) *testDevice {
	t.Helper()
	props, err := e.drv.Device(ordinal)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := props.RetainPrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	d := &testDevice{index: index, props: props, ctx: ctx, marked: map[*testBuffer]bool{}}
	if d.compute, err = ctx.NewStream(true); err == nil {
		d.comm, err = ctx.NewStream(true)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := errors.Join(d.compute.Destroy(), d.comm.Destroy(), ctx.Release()); err != nil {
			t.Error(err)
		}
	})
	return d
}

// world makes a world of n ranks on GPUs 0..n-1, closed when the test
// ends, and the ranks' runtimes.
func (e *env) world(t *testing.T, n int, opts dist.Options) (*World, []*Group, []*testDevice, []*tensor.Runtime) {
	t.Helper()
	var devs []*testDevice
	var ds []Device
	var rts []*tensor.Runtime
	for r := range n {
		d := e.device(t, r, r)
		devs = append(devs, d)
		ds = append(ds, d)
		rts = append(rts, tensor.NewRuntime(d, 1))
	}
	w, err := NewWorld(e.lib, ds, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	var gs []*Group
	for r := range n {
		gs = append(gs, w.Group(r).(*Group))
	}
	return w, gs, devs, rts
}

// addr is the device address of t's first element.
func addr(t *tensor.Tensor) uint64 {
	v := tensor.DeviceView(t)
	return uint64(v.Buf.(*testBuffer).p) + uint64(v.Offset*v.DType.Size())
}

func f32s(t *testing.T, x *tensor.Tensor) []float32 {
	t.Helper()
	v, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wait(t *testing.T, w *dist.Work) {
	t.Helper()
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
}

// never makes the group's events never pass (the collective does not
// finish) until the returned function is called.
func never(g *Group) (finish func()) {
	var done atomic.Bool
	g.queryEvent = func(*cuda.Event) (bool, error) { return done.Load(), nil }
	return func() { done.Store(true) }
}

// want is c with the communicator and the stream of g's calls.
func (g *Group) want(c fake.NCCLCall) fake.NCCLCall {
	c.Comm = g.comm.Raw()
	c.Stream = g.stream.Handle()
	return c
}

// checkLast compares the fake's last call with want (Calls ignored).
func checkLast(t *testing.T, nc *fake.NCCLControl, want fake.NCCLCall) {
	t.Helper()
	got := nc.Last()
	want.Calls = got.Calls
	if got != want {
		t.Errorf("NCCL received\n%+v\nwant\n%+v", got, want)
	}
}

const none = -1 // an argument the call does not have

func TestOneRankCollectives(t *testing.T) {
	e := newEnv(t)
	_, gs, devs, rts := e.world(t, 1, dist.Options{})
	g, rt := gs[0], rts[0]
	if g.Rank() != 0 || g.Size() != 1 {
		t.Fatalf("rank %d of %d", g.Rank(), g.Size())
	}
	call := func(c fake.NCCLCall) fake.NCCLCall {
		c.Comm, c.Stream = g.comm.Raw(), devs[0].comm.Handle()
		return c
	}

	t.Run("AllReduce of a view", func(t *testing.T) {
		base := rt.FromFloat32s([]float32{1, 2, 3, 4, 5, 6, 7, 8})
		x := base.Narrow(0, 2, 4)
		wait(t, g.AllReduce(x, dist.Sum))
		if addr(x) != addr(base)+8 {
			t.Fatalf("view address %#x, base %#x", addr(x), addr(base))
		}
		checkLast(t, e.nc, call(fake.NCCLCall{Fn: "ncclAllReduce", Send: addr(x), Recv: addr(x), Count: 4, DType: 7, Op: 0, Root: none, Peer: none}))
		if got := f32s(t, base); !slices.Equal(got, []float32{1, 2, 3, 4, 5, 6, 7, 8}) {
			t.Errorf("one rank's all-reduce changed the data: %v", got)
		}
		if !devs[0].isMarked(tensor.DeviceView(x).Buf) {
			t.Error("the tensor's buffer was not marked as used by the communication stream")
		}
	})

	t.Run("types and ops", func(t *testing.T) {
		tests := []struct {
			dt     dtype.DType
			op     dist.ReduceOp
			dtype  int64
			nccOp  int64
			nbytes int
		}{
			{dtype.Float32, dist.Sum, 7, 0, 4},
			{dtype.Float32, dist.Avg, 7, 4, 4},
			{dtype.Float64, dist.Max, 8, 2, 8},
			{dtype.BFloat16, dist.Min, 9, 3, 2},
			{dtype.Float16, dist.Product, 6, 1, 2},
			{dtype.Int64, dist.Sum, 4, 0, 8},
			{dtype.Int32, dist.Product, 2, 1, 4},
			{dtype.Uint8, dist.Max, 1, 2, 1},
			{dtype.Bool, dist.Max, 1, 2, 1},
			{dtype.Bool, dist.Min, 1, 3, 1},
		}
		for _, tt := range tests {
			x := rt.FromBytes(tt.dt, make([]byte, 3*tt.nbytes), 3)
			wait(t, g.AllReduce(x, tt.op))
			checkLast(t, e.nc, call(fake.NCCLCall{Fn: "ncclAllReduce", Send: addr(x), Recv: addr(x), Count: 3, DType: tt.dtype, Op: tt.nccOp, Root: none, Peer: none}))
			x.Release()
		}
	})

	t.Run("Broadcast", func(t *testing.T) {
		x := rt.FromFloat32s([]float32{1, 2})
		wait(t, g.Broadcast(x, 0))
		checkLast(t, e.nc, call(fake.NCCLCall{Fn: "ncclBroadcast", Send: addr(x), Recv: addr(x), Count: 2, DType: 7, Op: none, Root: 0, Peer: none}))
	})

	t.Run("ReduceScatter", func(t *testing.T) {
		in := rt.FromFloat32s([]float32{1, 2, 3, 4})
		out := rt.FromFloat32s([]float32{0, 0, 0, 0})
		wait(t, g.ReduceScatter(out, in, dist.Avg))
		checkLast(t, e.nc, call(fake.NCCLCall{Fn: "ncclReduceScatter", Send: addr(in), Recv: addr(out), Count: 4, DType: 7, Op: 4, Root: none, Peer: none}))
		if got := f32s(t, out); !slices.Equal(got, []float32{1, 2, 3, 4}) {
			t.Errorf("out = %v", got)
		}
	})

	t.Run("AllGather", func(t *testing.T) {
		in := rt.FromFloat32s([]float32{5, 6, 7})
		out := rt.FromFloat32s([]float32{0, 0, 0})
		wait(t, g.AllGather(out, in))
		checkLast(t, e.nc, call(fake.NCCLCall{Fn: "ncclAllGather", Send: addr(in), Recv: addr(out), Count: 3, DType: 7, Op: none, Root: none, Peer: none}))
		if got := f32s(t, out); !slices.Equal(got, []float32{5, 6, 7}) {
			t.Errorf("out = %v", got)
		}
		// In place: the input is block 0 of the output.
		wait(t, g.AllGather(out, out))
	})

	t.Run("AllGatherInto", func(t *testing.T) {
		live := devs[0].liveBuffers()
		in := rt.FromFloat32s([]float32{5, 6, 7})
		out := rt.FromFloat32s([]float32{0, 0, 0})
		wait(t, g.AllGatherInto([]*tensor.Tensor{out}, in))
		got := e.nc.Last()
		if got.Fn != "ncclAllGather" || got.Send != addr(in) || got.Recv == addr(out) || got.Count != 3 || got.DType != 7 {
			t.Errorf("NCCL received %+v: want an all-gather of the input into scratch memory", got)
		}
		if v := f32s(t, out); !slices.Equal(v, []float32{5, 6, 7}) {
			t.Errorf("out = %v", v)
		}
		in.Release()
		out.Release()
		if n := devs[0].liveBuffers(); n != live {
			t.Errorf("%d live buffers, %d before: the scratch was not freed", n, live)
		}
	})

	t.Run("AllToAll", func(t *testing.T) {
		in := rt.FromFloat32s([]float32{1, 2, 3, 4})
		out := rt.FromFloat32s([]float32{0, 0, 0, 0})
		calls := e.nc.Last().Calls
		copies := e.cc.Calls(t, "cuMemcpyDtoDAsync_v2")
		wait(t, g.AllToAll(out, in))
		if got := f32s(t, out); !slices.Equal(got, []float32{1, 2, 3, 4}) {
			t.Errorf("out = %v", got)
		}
		if n := e.nc.Last().Calls; n != calls {
			t.Errorf("%d NCCL calls for one rank's all-to-all, want none (a copy)", n-calls)
		}
		if n := e.cc.Calls(t, "cuMemcpyDtoDAsync_v2") - copies; n != 1 {
			t.Errorf("%d device copies, want 1", n)
		}
	})

	t.Run("Barrier", func(t *testing.T) {
		wait(t, g.Barrier())
		checkLast(t, e.nc, call(fake.NCCLCall{Fn: "ncclAllReduce", Send: g.sptr, Recv: g.sptr, Count: 1, DType: 4, Op: 0, Root: none, Peer: none}))
	})

	t.Run("no elements", func(t *testing.T) {
		x := rt.FromBytes(dtype.Float32, nil, 0)
		calls := e.nc.Last().Calls
		wait(t, g.AllReduce(x, dist.Sum))
		wait(t, g.AllGather(x, x))
		if n := e.nc.Last().Calls; n != calls {
			t.Errorf("%d NCCL calls for empty tensors", n-calls)
		}
	})
}

// TestOrdering checks that a collective waits for the compute stream: an
// event is recorded there and the communication stream waits for it before
// the NCCL call (which does not happen when either fails), and another
// event is recorded after the call.
func TestOrdering(t *testing.T) {
	e := newEnv(t)
	_, gs, _, rts := e.world(t, 1, dist.Options{})
	g, rt := gs[0], rts[0]
	x := rt.FromFloat32s([]float32{1, 2, 3, 4})
	e.cc.Reset()
	wait(t, g.AllReduce(x, dist.Sum))
	for name, want := range map[string]int{"cuEventRecord": 2, "cuStreamWaitEvent": 1} {
		if n := e.cc.Calls(t, name); n != want {
			t.Errorf("%d calls of %s, want %d", n, name, want)
		}
	}
	if n := e.cc.Calls(t, "cuEventQuery"); n < 1 {
		t.Errorf("the completion event was queried %d times", n)
	}

	for _, fn := range []string{"cuEventRecord", "cuStreamWaitEvent"} {
		t.Run(fn, func(t *testing.T) {
			e := newEnv(t)
			w, gs, _, rts := e.world(t, 1, dist.Options{})
			g := gs[0]
			x := rts[0].FromFloat32s([]float32{1, 2, 3, 4})
			calls := e.nc.Last().Calls
			e.cc.Fail(t, fn, int(cuda.ErrorInvalidHandle))
			err := g.AllReduce(x, dist.Sum).Wait()
			want := "nccl: AllReduce of 4 float32 on rank 0 could not be issued: " + fn + ": CUDA_ERROR_INVALID_HANDLE: invalid resource handle; the communicator was aborted"
			if err == nil || err.Error() != want {
				t.Fatalf("error %v\nwant  %s", err, want)
			}
			if n := e.nc.Last().Calls; n != calls {
				t.Errorf("NCCL was called after %s failed", fn)
			}
			if _, _, _, aborts := e.nc.Counts(); aborts != 1 {
				t.Errorf("%d aborts, want 1", aborts)
			}
			later := g.Barrier()
			if !later.IsCompleted() || !errors.Is(later.Err(), err) || !strings.Contains(later.Err().Error(), "nccl: Barrier on rank 0 was not issued: ") {
				t.Errorf("a later call: completed %v, %v", later.IsCompleted(), later.Err())
			}
			if w.Err() != err || g.Err() != err {
				t.Errorf("world error %v, group error %v", w.Err(), g.Err())
			}
		})
	}
}

func TestValidation(t *testing.T) {
	e := newEnv(t)
	_, gs, devs, rts := e.world(t, 1, dist.Options{})
	g, rt := gs[0], rts[0]
	live := devs[0].liveBuffers()
	var made []*tensor.Tensor
	mk := func(x *tensor.Tensor) *tensor.Tensor {
		if x.Err() != nil {
			t.Fatal(x.Err())
		}
		made = append(made, x)
		return x
	}
	f := func(n int) *tensor.Tensor { return mk(rt.FromFloat32s(make([]float32, n))) }
	x := f(4)
	released := f(4)
	released.Release()
	m := mk(rt.FromFloat32s(make([]float32, 6), 2, 3))
	i64 := mk(rt.FromInt64s([]int64{1, 2, 3, 4}))
	b := mk(rt.FromBytes(dtype.Bool, []byte{0, 1}, 2))
	bf := mk(rt.FromBytes(dtype.BFloat16, make([]byte, 8), 4))
	base := f(8)
	other := tensor.NewRuntime(e.device(t, 1, 1), 1).FromFloat32s(make([]float32, 4))
	twin := tensor.NewRuntime(e.device(t, 0, 0), 1).FromFloat32s(make([]float32, 4))
	onCPU := tensor.NewRuntime(cpu.New(cpu.Options{}), 1).FromFloat32s(make([]float32, 4))
	failed := rt.FromFloat32s([]float32{1}, 7)

	tests := []struct {
		name string
		work func() *dist.Work
		want string
	}{
		{"nil", func() *dist.Work { return g.AllReduce(nil, dist.Sum) }, "nccl: AllReduce: the tensor is nil"},
		{"released", func() *dist.Work { return g.AllReduce(released, dist.Sum) }, "nccl: AllReduce: the tensor was released"},
		{"failed tensor", func() *dist.Work { return g.Broadcast(failed, 0) }, "nccl: Broadcast: " + failed.Err().Error()},
		{"strided", func() *dist.Work { return g.AllReduce(mk(m.T()), dist.Sum) },
			"nccl: AllReduce: the tensor must be contiguous (call .contiguous() first), got shape [3 2] strides [1 3]"},
		{"other device", func() *dist.Work { return g.AllReduce(other, dist.Sum) }, "nccl: AllReduce: the tensor is on cuda:1, not on rank 0's device cuda:0"},
		{"another handle", func() *dist.Work { return g.AllReduce(twin, dist.Sum) },
			"nccl: AllReduce: the tensor is on another handle of cuda:0 than rank 0's (tensors of two runtimes cannot be mixed)"},
		{"send to self", func() *dist.Work { return g.Send(onCPU, 0) }, "nccl: Send: rank 0 cannot send to itself"},
		{"cpu tensor", func() *dist.Work { return g.AllGather(x, onCPU) }, "nccl: AllGather: the input is on cpu, not on rank 0's device cuda:0"},
		{"avg of integers", func() *dist.Work { return g.AllReduce(i64, dist.Avg) }, "nccl: AllReduce: reduce op avg needs a floating-point tensor, not int64"},
		{"sum of bools", func() *dist.Work { return g.AllReduce(b, dist.Sum) }, "nccl: AllReduce: reduce op sum is not defined for bool tensors (max and min are)"},
		{"unknown op", func() *dist.Work { return g.AllReduce(x, 9) }, "nccl: AllReduce: unknown reduce op 9"},
		{"root", func() *dist.Work { return g.Broadcast(x, 1) }, "nccl: Broadcast: rank 1 is not in the group of 1 ranks"},
		{"negative root", func() *dist.Work { return g.Broadcast(x, -1) }, "nccl: Broadcast: rank -1 is not in the group of 1 ranks"},
		{"peer", func() *dist.Work { return g.Recv(x, 1) }, "nccl: Recv: rank 1 is not in the group of 1 ranks"},
		{"self", func() *dist.Work { return g.Recv(x, 0) }, "nccl: Recv: rank 0 cannot receive from itself"},
		{"reduce-scatter sizes", func() *dist.Work { return g.ReduceScatter(f(3), x, dist.Sum) },
			"nccl: ReduceScatter: the input has 4 elements, 1 ranks × the output's 3 needed"},
		{"reduce-scatter of bools", func() *dist.Work { return g.ReduceScatter(b, b, dist.Product) },
			"nccl: ReduceScatter: reduce op product is not defined for bool tensors (max and min are)"},
		{"all-gather sizes", func() *dist.Work { return g.AllGather(f(5), x) }, "nccl: AllGather: the output has 5 elements, 1 ranks × the input's 4 needed"},
		{"all-gather types", func() *dist.Work { return g.AllGather(i64, x) }, "nccl: AllGather: the input is float32 and the output int64"},
		{"all-gather overlap", func() *dist.Work { return g.AllGather(mk(base.Narrow(0, 0, 4)), mk(base.Narrow(0, 1, 4))) },
			"nccl: AllGather: the input overlaps the output other than as its block 0 (in place)"},
		{"reduce-scatter overlap", func() *dist.Work {
			return g.ReduceScatter(mk(base.Narrow(0, 2, 4)), mk(base.Narrow(0, 0, 4)), dist.Sum)
		},
			"nccl: ReduceScatter: the output overlaps the input other than as its block 0 (in place)"},
		{"all-to-all overlap", func() *dist.Work { return g.AllToAll(x, x) }, "nccl: AllToAll: the input and the output share memory"},
		{"all-to-all sizes", func() *dist.Work { return g.AllToAll(f(3), x) },
			"nccl: AllToAll: input and output need the same number of elements, a multiple of the 1 ranks; got 4 and 3"},
		{"all-gather-into count", func() *dist.Work { return g.AllGatherInto([]*tensor.Tensor{x, x}, x) }, "nccl: AllGatherInto: 2 output tensors for 1 ranks"},
		{"all-gather-into size", func() *dist.Work { return g.AllGatherInto([]*tensor.Tensor{f(3)}, x) },
			"nccl: AllGatherInto: output 0 is float32 of 3 elements; the input is float32 of 4"},
		{"all-gather-into nil", func() *dist.Work { return g.AllGatherInto([]*tensor.Tensor{nil}, x) }, "nccl: AllGatherInto: output 0 is nil"},
	}
	calls := e.nc.Last().Calls
	for _, tt := range tests {
		w := tt.work()
		if !w.IsCompleted() {
			t.Errorf("%s: the work is pending", tt.name)
			continue
		}
		if err := w.Err(); err == nil || err.Error() != tt.want {
			t.Errorf("%s: error %v\nwant  %s", tt.name, err, tt.want)
		}
	}
	if err := g.Broadcast(failed, 0).Err(); !errors.Is(err, failed.Err()) {
		t.Errorf("a failed tensor's error is not wrapped: %v", err)
	}
	if _, err := g.BroadcastObject(nil, 1); err == nil || err.Error() != "nccl: BroadcastObject: rank 1 is not in the group of 1 ranks" {
		t.Errorf("BroadcastObject to root 1: %v", err)
	}
	if _, err := g.GatherObject(nil, -1); err == nil || err.Error() != "nccl: GatherObject: rank -1 is not in the group of 1 ranks" {
		t.Errorf("GatherObject to root -1: %v", err)
	}

	// Before NCCL 2.10: no bfloat16, no average.
	saved := g.lib
	old := *g.lib
	old.Version = 2804
	g.lib = &old
	for name, tt := range map[string]struct {
		w    *dist.Work
		want string
	}{
		"bfloat16": {g.AllReduce(bf, dist.Max), "nccl: AllReduce: bfloat16 needs NCCL 2.10 or later (this is NCCL 2.8.4)"},
		"avg":      {g.AllReduce(x, dist.Avg), "nccl: AllReduce: reduce op avg needs NCCL 2.10 or later (this is NCCL 2.8.4)"},
	} {
		if err := tt.w.Err(); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %s", name, err, tt.want)
		}
	}
	g.lib = saved
	if versionString(22105) != "2.21.5" || versionString(21003) != "2.10.3" {
		t.Errorf("versions %s, %s", versionString(22105), versionString(21003))
	}

	// Nothing was issued, the group goes on, and nothing is kept alive.
	if n := e.nc.Last().Calls; n != calls {
		t.Errorf("%d NCCL calls for calls that failed their checks", n-calls)
	}
	if err := g.Err(); err != nil {
		t.Errorf("the group failed: %v", err)
	}
	wait(t, g.AllReduce(x, dist.Sum))
	for _, x := range made {
		x.Release()
	}
	if n := devs[0].liveBuffers(); n != live {
		t.Errorf("%d live buffers after releasing everything, %d before", n, live)
	}
}

// TestGroupAsyncError checks that an error NCCL reports in the background
// fails the work in flight with an error naming it, aborts the
// communicator, fails the later works in flight, and that later calls
// fail at once.
func TestGroupAsyncError(t *testing.T) {
	e := newEnv(t)
	w, gs, devs, rts := e.world(t, 1, dist.Options{})
	g, rt := gs[0], rts[0]
	finish := never(g)
	defer finish()
	live := devs[0].liveBuffers()
	x := rt.FromFloat32s([]float32{1, 2, 3, 4})
	y := rt.FromFloat32s([]float32{1, 2})
	first := g.AllReduce(x, dist.Sum)
	second := g.Broadcast(y, 0)
	x.Release()
	y.Release()
	if first.IsCompleted() || second.IsCompleted() || devs[0].liveBuffers() != live+2 {
		t.Fatalf("completed %v %v, %d live buffers (%d before the tensors): the works should hold their memory",
			first.IsCompleted(), second.IsCompleted(), devs[0].liveBuffers(), live)
	}
	e.nc.SetLastError("peer 1 went away")
	e.nc.SetAsyncError(6) // ncclRemoteError
	err := first.Wait()
	want := "nccl: AllReduce of 4 float32 on rank 0 failed: ncclCommGetAsyncError: ncclRemoteError: peer 1 went away; the communicator was aborted"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant  %s", err, want)
	}
	var ne *Error
	if !errors.As(err, &ne) || ne.Result != 6 {
		t.Errorf("the NCCL error is not wrapped: %#v", err)
	}
	err2 := second.Wait()
	if want := "nccl: Broadcast of 2 float32 from rank 0 on rank 0 did not complete: " + err.Error(); err2 == nil || err2.Error() != want || !errors.Is(err2, err) {
		t.Errorf("later work: %v\nwant %s", err2, want)
	}
	if _, _, destroys, aborts := e.nc.Counts(); aborts != 1 || destroys != 0 {
		t.Errorf("%d aborts, %d destroys; want 1, 0", aborts, destroys)
	}
	if n := devs[0].liveBuffers(); n != live {
		t.Errorf("%d live buffers, %d before: the failed works kept their memory", n, live)
	}
	z := rt.FromFloat32s([]float32{1})
	later := g.AllReduce(z, dist.Max)
	if !later.IsCompleted() || !errors.Is(later.Err(), err) ||
		later.Err().Error() != "nccl: AllReduce of 1 float32 on rank 0 was not issued: "+err.Error() {
		t.Errorf("later call: %v", later.Err())
	}
	if _, err := g.BroadcastObject([]byte("x"), 0); !errors.Is(err, first.Err()) {
		t.Errorf("later BroadcastObject: %v", err)
	}
	if w.Err() != err {
		t.Errorf("world error %v", w.Err())
	}
	z.Release()
	if err := w.Close(); err != nil {
		t.Errorf("Close after an abort: %v", err)
	}
	if _, _, destroys, aborts := e.nc.Counts(); aborts != 1 || destroys != 0 {
		t.Errorf("after Close: %d aborts, %d destroys; want 1, 0", aborts, destroys)
	}
}

// TestTimeout checks that a collective that does not finish fails at the
// timeout with an error naming it, and aborts the communicator.
func TestTimeout(t *testing.T) {
	e := newEnv(t)
	_, gs, _, rts := e.world(t, 1, dist.Options{Timeout: 30 * time.Millisecond})
	g := gs[0]
	defer never(g)()
	x := rts[0].FromFloat32s(make([]float32, 1024))
	start := time.Now()
	err := g.AllReduce(x, dist.Sum).Wait()
	took := time.Since(start)
	want := "nccl: AllReduce of 1024 float32 on rank 0 timed out after 30ms; the communicator was aborted"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant  %s", err, want)
	}
	if took < 30*time.Millisecond || took > 10*time.Second {
		t.Errorf("the timeout came after %v", took)
	}
	if _, _, _, aborts := e.nc.Counts(); aborts != 1 {
		t.Errorf("%d aborts, want 1", aborts)
	}
	if err := g.Barrier().Err(); !errors.Is(err, g.Err()) {
		t.Errorf("later call: %v", err)
	}
}

// TestStuckCall checks a call that blocks inside NCCL (as a first
// collective connecting to a rank that never comes does): it is
// registered before it is issued, so it times out; the abort does not
// wait for it beyond abortGrace and aborts the communicator under it.
func TestStuckCall(t *testing.T) {
	e := newEnv(t)
	_, gs, _, _ := e.world(t, 1, dist.Options{Timeout: 20 * time.Millisecond})
	g := gs[0]
	unblock := make(chan struct{})
	works := make(chan *dist.Work)
	go func() {
		works <- g.submit(request{what: "Stuck", issue: func(uintptr) error {
			return g.call(func() error { <-unblock; return nil })
		}})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for g.Err() == nil || !g.commGoneNow() {
		if time.Now().After(deadline) {
			t.Fatal("the stuck call did not time out")
		}
		time.Sleep(time.Millisecond)
	}
	want := "nccl: Stuck on rank 0 timed out after 20ms; the communicator was aborted"
	if err := g.Err(); err.Error() != want {
		t.Errorf("error %v\nwant  %s", err, want)
	}
	if _, _, _, aborts := e.nc.Counts(); aborts != 1 {
		t.Errorf("%d aborts, want 1", aborts)
	}
	if g.comm.Raw() == 0 {
		t.Error("the Comm was changed under a call in progress")
	}
	close(unblock)
	if err := (<-works).Wait(); err == nil || err.Error() != want {
		t.Errorf("the stuck work's error: %v", err)
	}
	if err := g.call(func() error { t.Error("a call after the abort reached NCCL"); return nil }); err != errCallAborted {
		t.Errorf("a call after the abort: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Error(err)
	}
	if _, _, destroys, _ := e.nc.Counts(); destroys != 0 {
		t.Errorf("an aborted communicator was destroyed")
	}
}

func (g *Group) commGoneNow() bool {
	g.commMu.RLock()
	defer g.commMu.RUnlock()
	return g.commGone
}

// TestEventErrors checks that an event not yet passed is polled again,
// and that a CUDA error from the event fails the work.
func TestEventErrors(t *testing.T) {
	e := newEnv(t)
	_, gs, _, rts := e.world(t, 1, dist.Options{})
	g := gs[0]
	x := rts[0].FromFloat32s([]float32{1, 2, 3, 4})
	e.cc.Reset()
	e.cc.Fail(t, "cuEventQuery", int(cuda.ErrorNotReady))
	wait(t, g.AllReduce(x, dist.Sum))
	if n := e.cc.Calls(t, "cuEventQuery"); n < 2 {
		t.Errorf("%d event queries, want at least 2 (not ready, then done)", n)
	}
	e.cc.Fail(t, "cuEventQuery", int(cuda.ErrorIllegalAddress))
	err := g.AllReduce(x, dist.Sum).Wait()
	want := "nccl: AllReduce of 4 float32 on rank 0 failed: cuEventQuery: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered; the communicator was aborted"
	if err == nil || err.Error() != want || !errors.Is(err, cuda.ErrorIllegalAddress) {
		t.Errorf("error %v\nwant  %s", err, want)
	}
}

func TestObjects(t *testing.T) {
	e := newEnv(t)
	_, gs, devs, _ := e.world(t, 1, dist.Options{})
	g := gs[0]
	live := devs[0].liveBuffers()
	for _, payload := range [][]byte{[]byte("hello, ranks"), {}, nil} {
		got, err := g.BroadcastObject(payload, 0)
		if err != nil || !bytes.Equal(got, payload) {
			t.Errorf("BroadcastObject(%q) = %q, %v", payload, got, err)
		}
		all, err := g.GatherObject(payload, 0)
		if err != nil || len(all) != 1 || !bytes.Equal(all[0], payload) {
			t.Errorf("GatherObject(%q) = %q, %v", payload, all, err)
		}
		checkLast(t, e.nc, g.want(fake.NCCLCall{Fn: "ncclAllGather", Send: g.sptr, Recv: g.sptr + 8, Count: 1, DType: 4, Op: none, Root: none, Peer: none}))
	}
	payload := []byte("hello, ranks")
	if _, err := g.BroadcastObject(payload, 0); err != nil {
		t.Fatal(err)
	}
	got := e.nc.Last()
	if got.Fn != "ncclBroadcast" || got.Count != int64(len(payload)) || got.DType != 1 || got.Root != 0 || got.Send != got.Recv {
		t.Errorf("the payload's broadcast: %+v", got)
	}
	if n := devs[0].liveBuffers(); n != live {
		t.Errorf("%d live buffers, %d before", n, live)
	}
}

// TestObjectsTwoRanks checks the calls of the object collectives on two
// ranks. The fake moves no data between ranks, so the lengths the other
// ranks would send are written into the group's memory beforehand.
func TestObjectsTwoRanks(t *testing.T) {
	e := newEnv(t)
	_, gs, devs, _ := e.world(t, 2, dist.Options{})
	put := func(r int, off uint64, vals ...uint64) {
		var b []byte
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		if err := errors.Join(devs[r].comm.CopyHtoD(cuda.DevicePtr(gs[r].sptr+off), b), devs[r].comm.Sync()); err != nil {
			t.Fatal(err)
		}
	}

	// Root 0 receives rank 1's 5 bytes in a group.
	put(0, 8, 3, 5)
	starts, _, _, _ := e.nc.Counts()
	all, err := gs[0].GatherObject([]byte("abc"), 0)
	if err != nil || len(all) != 2 || string(all[0]) != "abc" || len(all[1]) != 5 {
		t.Fatalf("GatherObject on root: %q, %v", all, err)
	}
	got := e.nc.Last()
	if got.Fn != "ncclRecv" || !got.Grouped || got.Peer != 1 || got.Count != 5 || got.DType != 1 || got.Stream != devs[0].comm.Handle() {
		t.Errorf("root's receive: %+v", got)
	}
	if s, e, _, _ := e.nc.Counts(); s != starts+1 || e != starts+1 {
		t.Errorf("%d group starts, %d ends; want %d", s, e, starts+1)
	}
	// Rank 1 sends its 5 bytes to root 0.
	put(1, 8, 3, 5)
	all, err = gs[1].GatherObject([]byte("12345"), 0)
	if err != nil || all != nil {
		t.Fatalf("GatherObject off the root: %q, %v", all, err)
	}
	checkLast(t, e.nc, gs[1].want(fake.NCCLCall{Fn: "ncclSend", Send: e.nc.Last().Send, Count: 5, DType: 1, Op: none, Root: none, Peer: 0}))
	if e.nc.Last().Send == 0 {
		t.Error("rank 1 sent from address 0")
	}
	// A length that does not match the payload is corrupt.
	put(1, 8, 3, 6)
	if _, err := gs[1].GatherObject([]byte("12345"), 0); err == nil || err.Error() != "nccl: GatherObject on rank 1: rank 1's length arrived as 6 bytes" {
		t.Errorf("a wrong length: %v", err)
	}
	// Rank 1 receives a 4-byte payload from root 0.
	put(1, 0, 4)
	if b, err := gs[1].BroadcastObject(nil, 0); err != nil || len(b) != 4 {
		t.Fatalf("BroadcastObject off the root: %q, %v", b, err)
	}
	if got := e.nc.Last(); got.Fn != "ncclBroadcast" || got.Count != 4 || got.Root != 0 || got.Stream != devs[1].comm.Handle() {
		t.Errorf("the payload's broadcast: %+v", got)
	}
	put(1, 0, math.MaxUint64)
	if _, err := gs[1].BroadcastObject(nil, 0); err == nil || !strings.Contains(err.Error(), "rank 0's length arrived as 18446744073709551615 bytes") {
		t.Errorf("a corrupt length: %v", err)
	}
}

func TestTwoRanks(t *testing.T) {
	e := newEnv(t)
	w, gs, devs, rts := e.world(t, 2, dist.Options{})
	if w.Size() != 2 || gs[1].Rank() != 1 || gs[1].Size() != 2 {
		t.Fatalf("world of %d, rank %d of %d", w.Size(), gs[1].Rank(), gs[1].Size())
	}
	for r, g := range gs {
		if dev, err := g.comm.CuDevice(); err != nil || dev != r {
			t.Errorf("rank %d's communicator is on device %d (%v)", r, dev, err)
		}
	}
	x0 := rts[0].FromFloat32s([]float32{1, 2, 3, 4})
	wait(t, gs[0].Send(x0, 1))
	checkLast(t, e.nc, gs[0].want(fake.NCCLCall{Fn: "ncclSend", Send: addr(x0), Count: 4, DType: 7, Op: none, Root: none, Peer: 1}))
	y1 := rts[1].FromFloat32s(make([]float32, 4))
	wait(t, gs[1].Recv(y1, 0))
	got := e.nc.Last()
	if got.Fn != "ncclRecv" || got.Recv != addr(y1) || got.Peer != 0 || got.Count != 4 || got.Stream != devs[1].comm.Handle() || got.Comm != gs[1].comm.Raw() {
		t.Errorf("receive: %+v", got)
	}

	// AllToAll: the own block is copied, the other goes through a group.
	out0 := rts[0].FromFloat32s(make([]float32, 4))
	starts, _, _, _ := e.nc.Counts()
	wait(t, gs[0].AllToAll(out0, x0))
	got = e.nc.Last()
	if got.Fn != "ncclRecv" || !got.Grouped || got.Recv != addr(out0)+8 || got.Count != 2 || got.Peer != 1 {
		t.Errorf("all-to-all's last call: %+v", got)
	}
	if s, _, _, _ := e.nc.Counts(); s != starts+1 {
		t.Errorf("%d groups, want 1", s-starts)
	}
	if v := f32s(t, out0); v[0] != 1 || v[1] != 2 {
		t.Errorf("rank 0's own block: %v", v)
	}

	// Blocks and in-place forms.
	in1 := rts[1].FromFloat32s(make([]float32, 8))
	out1 := rts[1].FromFloat32s(make([]float32, 4))
	wait(t, gs[1].ReduceScatter(out1, in1, dist.Sum))
	checkLast(t, e.nc, gs[1].want(fake.NCCLCall{Fn: "ncclReduceScatter", Send: addr(in1), Recv: addr(out1), Count: 4, DType: 7, Op: 0, Root: none, Peer: none}))
	wait(t, gs[1].ReduceScatter(in1.Narrow(0, 4, 4), in1, dist.Max))
	wait(t, gs[1].AllGather(in1, in1.Narrow(0, 4, 4)))
	checkLast(t, e.nc, gs[1].want(fake.NCCLCall{Fn: "ncclAllGather", Send: addr(in1) + 16, Recv: addr(in1), Count: 4, DType: 7, Op: none, Root: none, Peer: none}))
	if err := gs[1].AllGather(in1, in1.Narrow(0, 0, 4)).Err(); err == nil {
		t.Error("rank 1 gathered in place from block 0")
	}
	wait(t, gs[0].Broadcast(x0, 1))
	checkLast(t, e.nc, gs[0].want(fake.NCCLCall{Fn: "ncclBroadcast", Send: addr(x0), Recv: addr(x0), Count: 4, DType: 7, Op: none, Root: 1, Peer: none}))

	stop := errors.New("stop")
	w.Abort(stop)
	if _, _, _, aborts := e.nc.Counts(); aborts != 2 {
		t.Errorf("%d aborts, want 2", aborts)
	}
	for r, g := range gs {
		if err := g.Barrier().Err(); !errors.Is(err, stop) || err.Error() != fmt.Sprintf("nccl: Barrier on rank %d was not issued: stop", r) {
			t.Errorf("rank %d after Abort: %v", r, err)
		}
	}
	if w.Err() != stop {
		t.Errorf("world error %v", w.Err())
	}
	w.Abort(errors.New("second"))
	if w.Err() != stop {
		t.Errorf("the second Abort won: %v", w.Err())
	}
}

// TestPropagation checks that a rank's failure aborts the other ranks of
// the world.
func TestPropagation(t *testing.T) {
	e := newEnv(t)
	w, gs, _, rts := e.world(t, 2, dist.Options{})
	boom := errors.New("boom")
	gs[0].queryEvent = func(*cuda.Event) (bool, error) { return false, boom }
	defer never(gs[1])()
	w1 := gs[1].AllReduce(rts[1].FromFloat32s(make([]float32, 4)), dist.Sum)
	err0 := gs[0].AllReduce(rts[0].FromFloat32s(make([]float32, 4)), dist.Sum).Wait()
	if want := "nccl: AllReduce of 4 float32 on rank 0 failed: boom; the communicator was aborted"; err0 == nil || err0.Error() != want {
		t.Fatalf("rank 0: %v\nwant     %s", err0, want)
	}
	err1 := w1.Wait()
	if want := "nccl: AllReduce of 4 float32 on rank 1 did not complete: " + err0.Error(); err1 == nil || err1.Error() != want || !errors.Is(err1, boom) {
		t.Errorf("rank 1: %v\nwant     %s", err1, want)
	}
	if _, _, _, aborts := e.nc.Counts(); aborts != 2 {
		t.Errorf("%d aborts, want 2", aborts)
	}
	if w.Err() != err0 {
		t.Errorf("world error %v", w.Err())
	}
}

func TestThen(t *testing.T) {
	e := newEnv(t)
	_, gs, _, rts := e.world(t, 1, dist.Options{})
	g := gs[0]
	finish := never(g)
	var ran atomic.Int32
	w := g.AllReduce(rts[0].FromFloat32s([]float32{1}), dist.Sum)
	next := w.Then(func(err error) error {
		if err != nil {
			return err
		}
		ran.Add(1)
		// A continuation may issue more on its group.
		return g.Barrier().Err()
	})
	time.Sleep(time.Millisecond)
	if ran.Load() != 0 || next.IsCompleted() {
		t.Fatal("the continuation ran before the work completed")
	}
	finish()
	if err := next.Wait(); err != nil || ran.Load() != 1 {
		t.Errorf("continuation: ran %d times, %v", ran.Load(), err)
	}
	bad := g.AllReduce(nil, dist.Sum).Then(func(err error) error {
		ran.Add(1)
		return fmt.Errorf("then: %w", err)
	})
	if err := bad.Err(); err == nil || err.Error() != "then: nccl: AllReduce: the tensor is nil" || ran.Load() != 2 {
		t.Errorf("continuation of a refused call: %v", err)
	}
}

func TestClose(t *testing.T) {
	e := newEnv(t)
	w, gs, devs, rts := e.world(t, 1, dist.Options{})
	g := gs[0]
	x := rts[0].FromFloat32s([]float32{1, 2})
	wait(t, g.AllReduce(x, dist.Sum))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, destroys, aborts := e.nc.Counts(); destroys != 1 || aborts != 0 {
		t.Errorf("%d destroys, %d aborts; want 1, 0", destroys, aborts)
	}
	err := g.AllReduce(x, dist.Sum).Err()
	if !errors.Is(err, dist.ErrClosed) || err.Error() != "nccl: AllReduce of 2 float32 on rank 0 was not issued: dist: the process group was closed" {
		t.Errorf("after Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	x.Release()
	if n := devs[0].liveBuffers(); n != 0 {
		t.Errorf("%d live buffers after Close", n)
	}

	// Closed with a collective in flight: it is aborted.
	e = newEnv(t)
	w, gs, _, rts = e.world(t, 1, dist.Options{})
	defer never(gs[0])()
	pending := gs[0].AllReduce(rts[0].FromFloat32s([]float32{1, 2}), dist.Sum)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pending.Err(); !errors.Is(err, dist.ErrClosed) || err.Error() != "nccl: AllReduce of 2 float32 on rank 0 did not complete: dist: the process group was closed" {
		t.Errorf("pending work after Close: %v", err)
	}
	if _, _, destroys, aborts := e.nc.Counts(); destroys != 0 || aborts != 1 {
		t.Errorf("%d destroys, %d aborts; want 0, 1", destroys, aborts)
	}
}

func TestNewGroup(t *testing.T) {
	e := newEnv(t)
	_, gs, _, _ := e.world(t, 2, dist.Options{})
	for _, ranks := range [][]int{{0}, {0, 1}, {5}} {
		if sub, err := gs[0].NewGroup(ranks); sub != nil || !errors.Is(err, errSubgroups) {
			t.Errorf("NewGroup(%v) = %v, %v", ranks, sub, err)
		}
	}
}

func TestNewGroupFromID(t *testing.T) {
	e := newEnv(t)
	dev := e.device(t, 2, 0)
	id, err := e.lib.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGroupFromID(e.lib, dev, id, 0, 1, dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, n, r := e.nc.LastInit(); got != id || n != 1 || r != 0 {
		t.Errorf("ncclCommInitRank received rank %d of %d", r, n)
	}
	x := tensor.NewRuntime(dev, 1).FromFloat32s([]float32{1, 2, 3})
	wait(t, g.AllReduce(x, dist.Sum))
	checkLast(t, e.nc, g.want(fake.NCCLCall{Fn: "ncclAllReduce", Send: addr(x), Recv: addr(x), Count: 3, DType: 7, Op: 0, Root: none, Peer: none}))
	stop := errors.New("stop")
	g.Abort(stop)
	if err := g.Barrier().Err(); !errors.Is(err, stop) {
		t.Errorf("after Abort: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Error(err)
	}
	if _, _, destroys, aborts := e.nc.Counts(); destroys != 0 || aborts != 1 {
		t.Errorf("%d destroys, %d aborts", destroys, aborts)
	}

	if _, err := NewGroupFromID(e.lib, dev, id, 2, 2, dist.Options{}); err == nil || err.Error() != "nccl: rank 2 of a group of 2 ranks" {
		t.Errorf("rank 2 of 2: %v", err)
	}
	e.nc.Fail("ncclCommInitRank", 2, "socket: no interface")
	_, err = NewGroupFromID(e.lib, dev, id, 0, 2, dist.Options{})
	var ne *Error
	if !errors.As(err, &ne) || err.Error() != "nccl: rank 0 of 2: ncclCommInitRank: ncclSystemError: socket: no interface" {
		t.Errorf("failed init: %v", err)
	}
}

func TestNewWorldErrors(t *testing.T) {
	e := newEnv(t)
	if _, err := NewWorld(e.lib, nil, dist.Options{}); err == nil {
		t.Error("no error for no devices")
	}
	d := e.device(t, 0, 0)
	_, err := NewWorld(e.lib, []Device{d, d}, dist.Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "nccl: communicators of CUDA devices [0 0]: ncclCommInitAll: ncclInvalidUsage: Duplicate GPU") {
		t.Errorf("the same device twice: %v", err)
	}
}
