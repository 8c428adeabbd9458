// Package nccl binds NVIDIA's collective communication library, NCCL
// (libnccl.so.2), at run time: communicators and the collectives and
// point-to-point calls that the engine's distributed training uses.
//
// The binding (lib.go, comm.go, errors.go) only binds: it takes device
// pointers as uint64 (CUdeviceptr) and streams as uintptr (CUstream), so
// that it does not depend on the CUDA driver binding, and leaves buffers,
// streams and the exchange of the unique id to its callers. The library is
// found by gpu/libs (Spec; the wheels' folder is nvidia/nccl/lib) and
// called with purego, so the binary builds without cgo and without NCCL.
// Every call's ncclResult_t is checked: a failure is an *Error naming the
// call and the result, with ncclGetLastError's message
// ("ncclAllReduce: ncclUnhandledCudaError: Cuda failure 'out of memory'").
//
// NCCL keeps its group state per OS thread (thread_local in group.cc):
// GroupStart locks the calling goroutine to its thread until GroupEnd, so
// the calls between them must come from that goroutine.
//
// The C signatures and enumeration values bound here are those of nccl.h
// (NCCL 2.x).
//
// # Process groups
//
// Group implements dist.ProcessGroup on a communicator and a rank's CUDA
// device (Device, which gpu.Device implements): World makes the ranks of
// one process, one per GPU (ncclCommInitAll); NewGroupFromID makes one
// rank of a job of several processes (ncclCommInitRank). Tensors must be
// contiguous and on the rank's device; bool travels as uint8 (max and
// min only), bfloat16 and avg need NCCL 2.10.
//
// Streams and events. A collective records an event on the device's
// compute stream and makes its communication stream wait for it, so that
// it sees every kernel queued before it; then, with the device's context
// current on a locked OS thread, it queues the NCCL call on the
// communication stream and records a completion event after it. The
// memory it uses is marked for the allocator (Device.MarkCommUse, so that
// it is not handed out again before the communication stream is past it)
// and kept alive (tensor.Retain) until the work completes; outputs are
// marked as written (tensor.WritableView).
//
// Completion. One watcher goroutine per group, running while works are in
// flight, polls the head work's completion event (cuEventQuery: a few
// yields, then sleeps from 4µs doubling to 1ms) and ncclCommGetAsyncError,
// and completes the works in order; a Work's continuations run on it and
// must not wait for a later work of the same group. Work.Wait blocks the
// host until the collective has run: nothing makes the compute stream
// wait for the communication stream, so kernels queued after Wait see
// the result because the host saw it first. The cost is the polling
// interval at each Wait (the watcher notices completion at most 1ms late,
// less for short collectives), and no overlap is lost: the compute stream
// keeps running while the collective is in flight, and a data-parallel
// step waits only at the end of its backward pass.
//
// Timeouts and aborts. A work still running at its deadline
// (dist.Options.Timeout from when it was issued, dist.DefaultTimeout when
// zero), an asynchronous NCCL error, a CUDA error of its event, or a
// failure to issue it, aborts the communicator (ncclCommAbort) and fails
// that work with an error naming it, its rank and the cause ("nccl:
// AllReduce of 1048576 float32 on rank 1 timed out after 10s; the
// communicator was aborted"); the later works in flight fail with an error
// that wraps it, and later calls fail at once. A work counts from before
// its call into NCCL, so a call that blocks inside NCCL (connecting to a
// rank that never comes) times out too: the abort waits up to 200ms for
// the call to return, then aborts the communicator under it, as NCCL
// allows from another thread. In a World the ranks share their fate: one
// rank's failure, or World.Abort, aborts every communicator. Calls that
// fail their checks (a nil or strided tensor, a wrong size) issue
// nothing and leave the group usable, as in the in-process backend.
//
// NCCL does not check that the ranks' calls match: a mismatch hangs until
// the timeout, or moves the wrong bytes. Send and Recv are queued in
// order with the group's other calls on one stream, so the ranks must
// issue them in matching orders: a ring in which every rank sends before
// it receives waits until the timeout (use AllToAll for exchanges).
// Subgroups (NewGroup) need ncclCommSplit and are not supported yet.
package nccl

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/zeroeng/zeroeng/gpu/libs"
)

// Spec describes NCCL for gpu/libs.
var Spec = libs.Spec{
	Name:    "NCCL",
	Sonames: []string{"libnccl.so.2", "libnccl.so"},
	Symbol:  "ncclCommInitRank",
}

// DataType is an ncclDataType_t.
type DataType int32

const (
	Int8       DataType = 0  // ncclInt8, ncclChar
	Uint8      DataType = 1  // ncclUint8
	Int32      DataType = 2  // ncclInt32, ncclInt
	Uint32     DataType = 3  // ncclUint32
	Int64      DataType = 4  // ncclInt64
	Uint64     DataType = 5  // ncclUint64
	Float16    DataType = 6  // ncclFloat16, ncclHalf
	Float32    DataType = 7  // ncclFloat32, ncclFloat
	Float64    DataType = 8  // ncclFloat64, ncclDouble
	BFloat16   DataType = 9  // ncclBfloat16 (NCCL 2.10)
	Float8E4M3 DataType = 10 // ncclFloat8e4m3 (recent NCCL only)
	Float8E5M2 DataType = 11 // ncclFloat8e5m2 (recent NCCL only)
)

// RedOp is an ncclRedOp_t.
type RedOp int32

const (
	Sum  RedOp = 0 // ncclSum
	Prod RedOp = 1 // ncclProd
	Max  RedOp = 2 // ncclMax
	Min  RedOp = 3 // ncclMin
	Avg  RedOp = 4 // ncclAvg (NCCL 2.10)
)

// UniqueID is an ncclUniqueId: NCCL_UNIQUE_ID_BYTES (128) opaque bytes that
// rank 0 makes with GetUniqueID and every rank passes to CommInitRank.
type UniqueID [128]byte

// uniqueID is the C struct { char internal[128]; }, which ncclCommInitRank
// takes by value.
type uniqueID struct{ Internal UniqueID }

// Lib is a loaded NCCL.
type Lib struct {
	Lib *libs.Library
	// Version is ncclGetVersion's code: 10000·major + 100·minor + patch
	// since NCCL 2.9 (22105 for 2.21.5), 1000·major + 100·minor + patch
	// before.
	Version int

	getErrorString, getLastError                               uintptr // getLastError 0 before NCCL 2.13
	getUniqueID, commInitAll, commDestroy, commAbort           uintptr
	commGetAsyncError, commCount, commCuDevice, commUserRank   uintptr
	groupStart, groupEnd                                       uintptr
	allReduce, broadcast, reduceScatter, allGather, send, recv uintptr

	// ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks,
	//     ncclUniqueId commId, int rank): the id is a 128-byte struct
	// passed by value (on the stack on amd64, by a hidden copy's address
	// on arm64), which purego.RegisterFunc lays out.
	commInitRank func(comm *uintptr, nranks int32, id uniqueID, rank int32) int32
}

// Load finds NCCL (gpu/libs) and binds it, once per process; later calls
// return the same Lib or the same error. It needs no GPU.
func Load() (*Lib, error) { return load() }

// LoadFrom loads and binds the library at path, without caching.
func LoadFrom(path string) (*Lib, error) { return loadFrom(path) }

var load, loadFrom = libs.Loaders(Spec, bind)

func bind(lib *libs.Library) (l *Lib, err error) {
	l = &Lib{Lib: lib}
	syms := lib.Symbols()
	var getVersion, commInitRank uintptr
	syms.Need(&getVersion, "ncclGetVersion")
	syms.Need(&l.getErrorString, "ncclGetErrorString")
	syms.Need(&l.getUniqueID, "ncclGetUniqueId")
	syms.Need(&commInitRank, "ncclCommInitRank")
	syms.Need(&l.commInitAll, "ncclCommInitAll")
	syms.Need(&l.commDestroy, "ncclCommDestroy")
	syms.Need(&l.commAbort, "ncclCommAbort")
	syms.Need(&l.commGetAsyncError, "ncclCommGetAsyncError")
	syms.Need(&l.commCount, "ncclCommCount")
	syms.Need(&l.commCuDevice, "ncclCommCuDevice")
	syms.Need(&l.commUserRank, "ncclCommUserRank")
	syms.Need(&l.groupStart, "ncclGroupStart")
	syms.Need(&l.groupEnd, "ncclGroupEnd")
	syms.Need(&l.allReduce, "ncclAllReduce")
	syms.Need(&l.broadcast, "ncclBroadcast")
	syms.Need(&l.reduceScatter, "ncclReduceScatter")
	syms.Need(&l.allGather, "ncclAllGather")
	syms.Need(&l.send, "ncclSend")
	syms.Need(&l.recv, "ncclRecv")
	if err := syms.Err(); err != nil {
		return nil, err
	}
	l.getLastError = syms.Optional("ncclGetLastError")
	defer func() {
		// purego panics where it cannot pass a struct by value (32-bit
		// platforms); NCCL does not exist there either.
		if r := recover(); r != nil {
			l, err = nil, fmt.Errorf("nccl: binding ncclCommInitRank: %v", r)
		}
	}()
	registerFunc(&l.commInitRank, commInitRank)

	// ncclResult_t ncclGetVersion(int *version)
	var v int32
	if r := call(getVersion, uintptr(unsafe.Pointer(&v))); r != success {
		return nil, l.err("ncclGetVersion", r, 0)
	}
	l.Version = int(v)
	return l, nil
}

// GetUniqueID makes the id of a new communicator (ncclGetUniqueId), on the
// rank that then sends it to the others.
func (l *Lib) GetUniqueID() (UniqueID, error) {
	// ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
	var id UniqueID
	if r := call(l.getUniqueID, uintptr(unsafe.Pointer(&id))); r != success {
		return UniqueID{}, l.err("ncclGetUniqueId", r, 0)
	}
	return id, nil
}

// GroupStart starts a group of calls (ncclGroupStart), which NCCL runs
// together at GroupEnd. NCCL's group state belongs to the OS thread, so
// GroupStart locks the calling goroutine to its thread (counted, as
// runtime.LockOSThread is) and GroupEnd unlocks it: the calls of the group
// and its GroupEnd must come from the same goroutine.
func (l *Lib) GroupStart() error {
	runtime.LockOSThread()
	// ncclResult_t ncclGroupStart(void)
	if r := call(l.groupStart); r != success {
		runtime.UnlockOSThread()
		return l.err("ncclGroupStart", r, 0)
	}
	return nil
}

// GroupEnd ends the group that GroupStart started (ncclGroupEnd), which
// enqueues its calls, and unlocks the goroutine from its thread, also when
// NCCL reports an error.
func (l *Lib) GroupEnd() error {
	defer runtime.UnlockOSThread()
	// ncclResult_t ncclGroupEnd(void)
	if r := call(l.groupEnd); r != success {
		return l.err("ncclGroupEnd", r, 0)
	}
	return nil
}
