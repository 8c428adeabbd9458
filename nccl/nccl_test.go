//go:build darwin || freebsd || linux || netbsd

package nccl

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/zeroeng/zeroeng/gpu/libs"
	"github.com/zeroeng/zeroeng/internal/fake"
)

// open loads the fake NCCL (internal/fake/nccl.c) through the binding,
// with its records reset.
func open(t testing.TB) (*Lib, *fake.NCCLControl) {
	t.Helper()
	c := fake.OpenNCCL(t)
	l, err := LoadFrom(c.Path())
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

// hostBuf is host memory standing for device memory, pinned for the test.
func hostBuf(t testing.TB, n int) ([]byte, uint64) {
	t.Helper()
	b := make([]byte, max(n, 1))
	var p runtime.Pinner
	p.Pin(&b[0])
	t.Cleanup(p.Unpin)
	return b, uint64(uintptr(unsafe.Pointer(&b[0])))
}

func TestLoadFrom(t *testing.T) {
	l, c := open(t)
	if l.Version != 22105 {
		t.Errorf("version %d, want the fake's 22105", l.Version)
	}
	if l.Lib.Path != c.Path() || l.getLastError == 0 {
		t.Errorf("library %s, ncclGetLastError %#x", l.Lib.Path, l.getLastError)
	}
}

// TestLoad checks that Load either finds a real NCCL or says why not.
func TestLoad(t *testing.T) {
	l, err := Load()
	if err != nil {
		var nf *libs.NotFoundError
		if !errors.As(err, &nf) {
			t.Fatalf("Load: %v (%T), want a libs.NotFoundError", err, err)
		}
		t.Logf("no NCCL here: %v", err)
		return
	}
	t.Logf("NCCL %d at %s", l.Version, l.Lib.Path)
}

// TestUniqueID checks the id both ways: ncclGetUniqueId fills the Go
// array, and ncclCommInitRank receives all 128 bytes by value with nranks
// before it and rank after it (in a register on amd64, past the id on the
// stack).
func TestUniqueID(t *testing.T) {
	l, c := open(t)
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range id {
		if b != byte(37*i+11) {
			t.Fatalf("id[%d] = %#x, want the fake's pattern %#x", i, b, byte(37*i+11))
		}
	}
	ids := map[string]UniqueID{"from ncclGetUniqueId": id}
	var mine UniqueID
	for i := range mine {
		mine[i] = byte(255 - 3*i) // distinct, and unlike the fake's
	}
	ids["made in Go"] = mine
	for name, id := range ids {
		t.Run(name, func(t *testing.T) {
			for _, rr := range [][2]int{{4, 3}, {1, 0}, {65536, 65535}} {
				comm, err := l.CommInitRank(rr[0], id, rr[1])
				if err != nil {
					t.Fatal(err)
				}
				got, nranks, rank := c.LastInit()
				if got != id || nranks != rr[0] || rank != rr[1] {
					t.Fatalf("received nranks %d, rank %d, id\n%x\nwant %d, %d,\n%x", nranks, rank, got, rr[0], rr[1], id)
				}
				if n, err := comm.Count(); err != nil || n != rr[0] {
					t.Errorf("Count %d, %v", n, err)
				}
				if r, err := comm.UserRank(); err != nil || r != rr[1] {
					t.Errorf("UserRank %d, %v", r, err)
				}
				if err := comm.Destroy(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	_, err = l.CommInitRank(2, id, 2)
	if err == nil || err.Error() != "ncclCommInitRank: ncclInvalidArgument: Invalid rank requested : 2/2" {
		t.Errorf("rank 2 of 2: %v", err)
	}
}

func TestCommInitAll(t *testing.T) {
	l, c := open(t)
	devices := []int{3, 1, 2, 0}
	comms, err := l.CommInitAll(devices)
	if err != nil {
		t.Fatal(err)
	}
	for i, comm := range comms {
		dev, err1 := comm.CuDevice()
		rank, err2 := comm.UserRank()
		n, err3 := comm.Count()
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		if dev != devices[i] || rank != i || n != len(devices) {
			t.Errorf("comm %d: device %d, rank %d of %d; want %d, %d of %d", i, dev, rank, n, devices[i], i, len(devices))
		}
		if err := comm.Destroy(); err != nil {
			t.Error(err)
		}
	}
	if _, _, destroys, _ := c.Counts(); destroys != len(devices) {
		t.Errorf("%d destroyed, want %d", destroys, len(devices))
	}
	_, err = l.CommInitAll([]int{0, 1, 1})
	const want = "ncclCommInitAll: ncclInvalidUsage: Duplicate GPU detected : rank 1 and rank 2 both on CUDA device 1"
	var e *Error
	if !errors.As(err, &e) || e.Result != 5 || err.Error() != want {
		t.Errorf("duplicate device: %v, want %s", err, want)
	}
	if _, err := l.CommInitAll(nil); err == nil {
		t.Error("no error for no devices")
	}
}

// TestCallArguments checks that each call's arguments reach NCCL exactly,
// on a communicator of 4 ranks (the fake does not touch the buffers).
func TestCallArguments(t *testing.T) {
	l, c := open(t)
	var id UniqueID
	comm, err := l.CommInitRank(4, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Destroy()
	const (
		send   = uint64(0x7f11_2233_4450)
		recv   = uint64(0x7f55_6677_8890)
		stream = uintptr(0x7fff_abcd_1234)
		big    = 1<<33 + 5 // a size_t beyond 32 bits
	)
	tests := []struct {
		run  func() error
		want fake.NCCLCall
	}{
		{func() error { return comm.AllReduce(send, recv, big, Float32, Avg, stream) },
			fake.NCCLCall{Fn: "ncclAllReduce", Send: send, Recv: recv, Count: big, DType: 7, Op: 4, Root: -1, Peer: -1, Stream: stream}},
		{func() error { return comm.AllReduce(send, send, 3, BFloat16, Max, 0) },
			fake.NCCLCall{Fn: "ncclAllReduce", Send: send, Recv: send, Count: 3, DType: 9, Op: 2, Root: -1, Peer: -1, Stream: 0}},
		{func() error { return comm.ReduceScatter(send, recv, 1000, Float16, Sum, stream) },
			fake.NCCLCall{Fn: "ncclReduceScatter", Send: send, Recv: recv, Count: 1000, DType: 6, Op: 0, Root: -1, Peer: -1, Stream: stream}},
		{func() error { return comm.ReduceScatter(send, recv, 7, Int64, Prod, stream) },
			fake.NCCLCall{Fn: "ncclReduceScatter", Send: send, Recv: recv, Count: 7, DType: 4, Op: 1, Root: -1, Peer: -1, Stream: stream}},
		{func() error { return comm.AllGather(send, recv, big, Uint8, stream) },
			fake.NCCLCall{Fn: "ncclAllGather", Send: send, Recv: recv, Count: big, DType: 1, Op: -1, Root: -1, Peer: -1, Stream: stream}},
		{func() error { return comm.Broadcast(send, recv, 12, Float64, 3, stream) },
			fake.NCCLCall{Fn: "ncclBroadcast", Send: send, Recv: recv, Count: 12, DType: 8, Op: -1, Root: 3, Peer: -1, Stream: stream}},
		{func() error { return comm.Broadcast(send, recv, 12, Int32, 0, stream) },
			fake.NCCLCall{Fn: "ncclBroadcast", Send: send, Recv: recv, Count: 12, DType: 2, Op: -1, Root: 0, Peer: -1, Stream: stream}},
		{func() error { return comm.Send(send, 5, Uint32, 2, stream) },
			fake.NCCLCall{Fn: "ncclSend", Send: send, Count: 5, DType: 3, Op: -1, Root: -1, Peer: 2, Stream: stream}},
		{func() error { return comm.Recv(recv, 6, Uint64, 3, stream) },
			fake.NCCLCall{Fn: "ncclRecv", Recv: recv, Count: 6, DType: 5, Op: -1, Root: -1, Peer: 3, Stream: stream}},
		{func() error { return comm.AllReduce(send, recv, 0, Int8, Min, stream) },
			fake.NCCLCall{Fn: "ncclAllReduce", Send: send, Recv: recv, Count: 0, DType: 0, Op: 3, Root: -1, Peer: -1, Stream: stream}},
	}
	for i, tt := range tests {
		if err := tt.run(); err != nil {
			t.Errorf("%s: %v", tt.want.Fn, err)
			continue
		}
		got := c.Last()
		tt.want.Calls = got.Calls
		tt.want.Comm = comm.Raw()
		if got != tt.want {
			t.Errorf("call %d: the fake received\n%+v\nwant\n%+v", i, got, tt.want)
		}
	}
}

// TestOneRankCopies checks data movement with one rank, where each
// collective copies send to recv: the device pointers are the buffers'.
func TestOneRankCopies(t *testing.T) {
	l, _ := open(t)
	comms, err := l.CommInitAll([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	comm := comms[0]
	defer comm.Destroy()
	for name, run := range map[string]func(send, recv uint64) error{
		"AllReduce":     func(s, r uint64) error { return comm.AllReduce(s, r, 4, Float32, Sum, 0) },
		"ReduceScatter": func(s, r uint64) error { return comm.ReduceScatter(s, r, 4, Float32, Sum, 0) },
		"AllGather":     func(s, r uint64) error { return comm.AllGather(s, r, 8, Float16, 0) },
		"Broadcast":     func(s, r uint64) error { return comm.Broadcast(s, r, 2, Float64, 0, 0) },
	} {
		send, ps := hostBuf(t, 16)
		recv, pr := hostBuf(t, 24)
		for i := range send {
			send[i] = byte(i + 1)
		}
		if err := run(ps, pr); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(recv[:16], send) || !slices.Equal(recv[16:], make([]byte, 8)) {
			t.Errorf("%s: recv %v, want %v then zeros", name, recv, send)
		}
	}
}

func TestErrors(t *testing.T) {
	l, c := open(t)
	var id UniqueID
	comm, err := l.CommInitRank(2, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Destroy()
	tests := []struct {
		name        string
		fn, message string // a function the fake fails, with this last error
		result      int
		run         func() error
		want        string
		wantResult  int // 0: an error before any call
	}{
		{name: "invalid type", run: func() error { return comm.AllReduce(1, 2, 4, 42, Sum, 0) },
			want: "ncclAllReduce: ncclInvalidArgument: ncclAllReduce : invalid type 42", wantResult: 4},
		{name: "invalid op", run: func() error { return comm.ReduceScatter(1, 2, 4, Float32, 9, 0) },
			want: "ncclReduceScatter: ncclInvalidArgument: ncclReduceScatter : invalid reduction operation 9", wantResult: 4},
		{name: "invalid root", run: func() error { return comm.Broadcast(1, 2, 4, Float32, 2, 0) },
			want: "ncclBroadcast: ncclInvalidArgument: ncclBroadcast : invalid root 2 (root should be in the 0..2 range)", wantResult: 4},
		{name: "invalid peer", run: func() error { return comm.Send(1, 4, Float32, -1, 0) },
			want: "ncclSend: ncclInvalidArgument: ncclSend : invalid peer -1 (peer should be in the 0..2 range)", wantResult: 4},
		{name: "CUDA failure", fn: "ncclAllGather", result: 1, message: "Cuda failure 'out of memory'",
			run:  func() error { return comm.AllGather(1, 2, 4, Float32, 0) },
			want: "ncclAllGather: ncclUnhandledCudaError: Cuda failure 'out of memory'", wantResult: 1},
		{name: "no last error: the result's description", fn: "ncclRecv", result: 6,
			run:  func() error { return comm.Recv(1, 4, Float32, 1, 0) },
			want: "ncclRecv: ncclRemoteError (remote process exited or there was a network error)", wantResult: 6},
		{name: "unique id", fn: "ncclGetUniqueId", result: 2, message: "socket: no interface",
			run: func() error { _, err := l.GetUniqueID(); return err }, want: "ncclGetUniqueId: ncclSystemError: socket: no interface", wantResult: 2},
		{name: "group start", fn: "ncclGroupStart", result: 5, message: "too deep",
			run: l.GroupStart, want: "ncclGroupStart: ncclInvalidUsage: too deep", wantResult: 5},
		{name: "group end without start", run: l.GroupEnd,
			want: "ncclGroupEnd: ncclInvalidUsage: ncclGroupEnd: not in a group call.", wantResult: 5},
		{name: "count", fn: "ncclCommCount", result: 3, message: "bad comm",
			run: func() error { _, err := comm.Count(); return err }, want: "ncclCommCount: ncclInternalError: bad comm", wantResult: 3},
		{name: "negative count", run: func() error { return comm.AllReduce(1, 2, -1, Float32, Sum, 0) },
			want: "nccl: AllReduce: negative count -1"},
		{name: "result unknown to the package", fn: "ncclBroadcast", result: 12, message: "new",
			run: func() error { return comm.Broadcast(1, 2, 4, Float32, 0, 0) }, want: "ncclBroadcast: ncclResult_t 12: new", wantResult: 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.Reset()
			if tt.fn != "" {
				c.Fail(tt.fn, tt.result, tt.message)
			}
			err := tt.run()
			c.Reset()
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v\nwant  %s", err, tt.want)
			}
			var e *Error
			if errors.As(err, &e) != (tt.wantResult != 0) || (e != nil && e.Result != tt.wantResult) {
				t.Errorf("error %#v, want an *Error with result %d", err, tt.wantResult)
			}
		})
	}
}

func TestAsyncError(t *testing.T) {
	l, c := open(t)
	var id UniqueID
	comm, err := l.CommInitRank(2, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		result int
		want   string // "" for no error
	}{
		{0, ""},
		{7, ""}, // ncclInProgress
		{6, "ncclCommGetAsyncError: ncclRemoteError: peer 0 went away"},
		{1, "ncclCommGetAsyncError: ncclUnhandledCudaError: peer 0 went away"},
	}
	for _, tt := range tests {
		c.SetLastError("peer 0 went away")
		c.SetAsyncError(tt.result)
		err := comm.AsyncError()
		if (err == nil) != (tt.want == "") || (err != nil && err.Error() != tt.want) {
			t.Errorf("async result %d: %v, want %q", tt.result, err, tt.want)
		}
	}
	c.Reset()
	if err := comm.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := comm.Abort(); err != nil {
		t.Errorf("second Abort: %v", err)
	}
	if err := comm.Destroy(); err != nil {
		t.Errorf("Destroy after Abort: %v", err)
	}
	if _, _, destroys, aborts := c.Counts(); destroys != 0 || aborts != 1 {
		t.Errorf("%d destroys, %d aborts; want 0, 1", destroys, aborts)
	}
	for name, err := range map[string]error{
		"AsyncError": comm.AsyncError(),
		"AllReduce":  comm.AllReduce(1, 2, 3, Float32, Sum, 0),
		"Send":       comm.Send(1, 3, Float32, 0, 0),
	} {
		if !errors.Is(err, errClosed) {
			t.Errorf("%s after Abort: %v", name, err)
		}
	}
	if _, err := comm.Count(); !errors.Is(err, errClosed) {
		t.Errorf("Count after Abort: %v", err)
	}
}

// TestGroup checks that the calls between GroupStart and GroupEnd run on
// the thread that started the group (NCCL's group state is per thread),
// however busy the scheduler, and that the counts match.
func TestGroup(t *testing.T) {
	l, c := open(t)
	var id UniqueID
	comm, err := l.CommInitRank(2, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Destroy()
	busy := func() {
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					runtime.Gosched()
				}
			}()
		}
		for range 50 {
			runtime.Gosched()
		}
		wg.Wait()
	}
	const rounds = 20
	for range rounds {
		if err := l.GroupStart(); err != nil {
			t.Fatal(err)
		}
		busy()
		if err := comm.Send(1, 4, Float32, 1, 0); err != nil {
			t.Fatal(err)
		}
		if !c.Last().Grouped {
			t.Fatal("ncclSend ran outside the group: the goroutine changed threads")
		}
		busy()
		if err := comm.Recv(2, 4, Float32, 1, 0); err != nil {
			t.Fatal(err)
		}
		if !c.Last().Grouped {
			t.Fatal("ncclRecv ran outside the group: the goroutine changed threads")
		}
		if err := l.GroupEnd(); err != nil {
			t.Fatal(err)
		}
		if err := comm.AllReduce(1, 2, 4, Float32, Sum, 0); err != nil || c.Last().Grouped {
			t.Fatalf("AllReduce after the group: %v, grouped %v", err, c.Last().Grouped)
		}
	}
	if starts, ends, _, _ := c.Counts(); starts != rounds || ends != rounds {
		t.Errorf("%d group starts, %d ends; want %d", starts, ends, rounds)
	}
}

func TestErrorNames(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Call: "ncclAllReduce", Result: 1, Last: "Cuda failure"}, "ncclAllReduce: ncclUnhandledCudaError: Cuda failure"},
		{&Error{Call: "ncclAllReduce", Result: 8}, "ncclAllReduce: ncclTimeout"},
		{&Error{Call: "ncclAllReduce", Result: 99}, "ncclAllReduce: ncclResult_t 99"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%q, want %q", got, tt.want)
		}
	}
}

// allReduceFunc is ncclAllReduce for purego.RegisterFunc, to compare its
// cost with the binding's purego.SyscallN.
type allReduceFunc func(send, recv uint64, count uint64, dt, op int32, comm, stream uintptr) int32

// BenchmarkAllReduceCall measures the cost of one call into the library on
// the fake (which only records it, with 2 ranks), through the binding and
// through a purego.RegisterFunc wrapper of the same function.
func BenchmarkAllReduceCall(b *testing.B) {
	l, _ := open(b)
	var id UniqueID
	comm, err := l.CommInitRank(2, id, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer comm.Destroy()
	b.Run("binding", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := comm.AllReduce(1, 2, 1024, Float32, Sum, 3); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RegisterFunc", func(b *testing.B) {
		var f allReduceFunc
		purego.RegisterFunc(&f, l.allReduce)
		b.ReportAllocs()
		for b.Loop() {
			if r := f(1, 2, 1024, 7, 0, comm.Raw(), 3); r != 0 {
				b.Fatal(r)
			}
		}
	})
}
