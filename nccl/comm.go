package nccl

import (
	"errors"
	"fmt"
	"unsafe"
)

// Comm is an ncclComm_t: one rank's communicator. Its collectives and
// point-to-point calls enqueue work on the given stream and return; they
// are not safe to call from several goroutines at once, and Abort and
// Destroy must be the last calls.
type Comm struct {
	lib *Lib
	c   uintptr
}

var errClosed = errors.New("nccl: communicator used after Destroy or Abort")

// CommInitRank makes this rank's communicator of nranks
// (ncclCommInitRank), with the id rank 0 got from GetUniqueID. The CUDA
// device current on the calling thread becomes the communicator's. It
// returns when all nranks ranks have called it.
func (l *Lib) CommInitRank(nranks int, id UniqueID, rank int) (*Comm, error) {
	if nranks != int(int32(nranks)) || rank != int(int32(rank)) {
		return nil, fmt.Errorf("nccl: CommInitRank: nranks %d or rank %d does not fit a C int", nranks, rank)
	}
	var c uintptr
	if r := l.commInitRank(&c, int32(nranks), uniqueID{id}, int32(rank)); r != success {
		return nil, l.err("ncclCommInitRank", r, 0)
	}
	return &Comm{lib: l, c: c}, nil
}

// CommInitAll makes the communicators of one process driving several
// devices (ncclCommInitAll): rank i on CUDA device devices[i].
func (l *Lib) CommInitAll(devices []int) ([]*Comm, error) {
	if len(devices) == 0 {
		return nil, errors.New("nccl: CommInitAll: no devices")
	}
	devs := make([]int32, len(devices))
	for i, d := range devices {
		if d != int(int32(d)) {
			return nil, fmt.Errorf("nccl: CommInitAll: device %d does not fit a C int", d)
		}
		devs[i] = int32(d)
	}
	comms := make([]uintptr, len(devices))
	// ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
	if r := call(l.commInitAll, uintptr(unsafe.Pointer(&comms[0])), uintptr(len(devs)), uintptr(unsafe.Pointer(&devs[0]))); r != success {
		return nil, l.err("ncclCommInitAll", r, 0)
	}
	out := make([]*Comm, len(comms))
	for i, c := range comms {
		out[i] = &Comm{lib: l, c: c}
	}
	return out, nil
}

// Raw is the ncclComm_t, 0 after Destroy or Abort.
func (c *Comm) Raw() uintptr { return c.c }

// checkCount checks an element count for a size_t.
func checkCount(fn string, n int) error {
	if n < 0 {
		return fmt.Errorf("nccl: %s: negative count %d", fn, n)
	}
	return nil
}

// AllReduce reduces count elements of send over all ranks with op into
// recv on every rank (ncclAllReduce); send == recv works in place.
func (c *Comm) AllReduce(send, recv uint64, count int, dt DataType, op RedOp, stream uintptr) error {
	if c.c == 0 {
		return errClosed
	}
	if err := checkCount("AllReduce", count); err != nil {
		return err
	}
	// ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff,
	//     size_t count, ncclDataType_t datatype, ncclRedOp_t op,
	//     ncclComm_t comm, cudaStream_t stream)
	if r := call(c.lib.allReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), c.c, stream); r != success {
		return c.lib.err("ncclAllReduce", r, c.c)
	}
	return nil
}

// ReduceScatter reduces send (nranks·recvCount elements) over all ranks
// with op and leaves block i of the result in recv on rank i
// (ncclReduceScatter).
func (c *Comm) ReduceScatter(send, recv uint64, recvCount int, dt DataType, op RedOp, stream uintptr) error {
	if c.c == 0 {
		return errClosed
	}
	if err := checkCount("ReduceScatter", recvCount); err != nil {
		return err
	}
	// ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
	//     size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
	//     ncclComm_t comm, cudaStream_t stream)
	if r := call(c.lib.reduceScatter, uintptr(send), uintptr(recv), uintptr(recvCount), uintptr(dt), uintptr(op), c.c, stream); r != success {
		return c.lib.err("ncclReduceScatter", r, c.c)
	}
	return nil
}

// AllGather gathers sendCount elements from every rank into recv
// (nranks·sendCount elements, rank i's at i·sendCount) on every rank
// (ncclAllGather).
func (c *Comm) AllGather(send, recv uint64, sendCount int, dt DataType, stream uintptr) error {
	if c.c == 0 {
		return errClosed
	}
	if err := checkCount("AllGather", sendCount); err != nil {
		return err
	}
	// ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
	//     size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
	//     cudaStream_t stream)
	if r := call(c.lib.allGather, uintptr(send), uintptr(recv), uintptr(sendCount), uintptr(dt), c.c, stream); r != success {
		return c.lib.err("ncclAllGather", r, c.c)
	}
	return nil
}

// Broadcast copies count elements of send on rank root into recv on every
// rank (ncclBroadcast).
func (c *Comm) Broadcast(send, recv uint64, count int, dt DataType, root int, stream uintptr) error {
	if c.c == 0 {
		return errClosed
	}
	if err := checkCount("Broadcast", count); err != nil {
		return err
	}
	// ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff,
	//     size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
	//     cudaStream_t stream)
	if r := call(c.lib.broadcast, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(root), c.c, stream); r != success {
		return c.lib.err("ncclBroadcast", r, c.c)
	}
	return nil
}

// Send sends count elements of buf to rank peer (ncclSend), which must
// call Recv with the same count and type. Sends and receives that must
// progress together go in one group (GroupStart, GroupEnd).
func (c *Comm) Send(buf uint64, count int, dt DataType, peer int, stream uintptr) error {
	if c.c == 0 {
		return errClosed
	}
	if err := checkCount("Send", count); err != nil {
		return err
	}
	// ncclResult_t ncclSend(const void *sendbuff, size_t count,
	//     ncclDataType_t datatype, int peer, ncclComm_t comm,
	//     cudaStream_t stream)
	if r := call(c.lib.send, uintptr(buf), uintptr(count), uintptr(dt), uintptr(peer), c.c, stream); r != success {
		return c.lib.err("ncclSend", r, c.c)
	}
	return nil
}

// Recv receives count elements from rank peer into buf (ncclRecv).
func (c *Comm) Recv(buf uint64, count int, dt DataType, peer int, stream uintptr) error {
	if c.c == 0 {
		return errClosed
	}
	if err := checkCount("Recv", count); err != nil {
		return err
	}
	// ncclResult_t ncclRecv(void *recvbuff, size_t count,
	//     ncclDataType_t datatype, int peer, ncclComm_t comm,
	//     cudaStream_t stream)
	if r := call(c.lib.recv, uintptr(buf), uintptr(count), uintptr(dt), uintptr(peer), c.c, stream); r != success {
		return c.lib.err("ncclRecv", r, c.c)
	}
	return nil
}

// AsyncError reports an error that NCCL met in the background, for
// example a peer that went away (ncclCommGetAsyncError): nil while there
// is none or an operation is still in progress.
func (c *Comm) AsyncError() error {
	if c.c == 0 {
		return errClosed
	}
	// ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
	var async int32
	if r := call(c.lib.commGetAsyncError, c.c, uintptr(unsafe.Pointer(&async))); r != success {
		return c.lib.err("ncclCommGetAsyncError", r, c.c)
	}
	if async == success || async == inProgress {
		return nil
	}
	return c.lib.err("ncclCommGetAsyncError", async, c.c)
}

// Abort frees the communicator and stops its operations still running on
// the device (ncclCommAbort): the way out after an asynchronous error. A
// later Abort or Destroy does nothing.
func (c *Comm) Abort() error {
	if c.c == 0 {
		return nil
	}
	// ncclResult_t ncclCommAbort(ncclComm_t comm)
	if r := call(c.lib.commAbort, c.c); r != success {
		return c.lib.err("ncclCommAbort", r, c.c)
	}
	c.c = 0
	return nil
}

// Destroy frees the communicator once its operations are done
// (ncclCommDestroy). A later Abort or Destroy does nothing.
func (c *Comm) Destroy() error {
	if c.c == 0 {
		return nil
	}
	// ncclResult_t ncclCommDestroy(ncclComm_t comm)
	if r := call(c.lib.commDestroy, c.c); r != success {
		return c.lib.err("ncclCommDestroy", r, c.c)
	}
	c.c = 0
	return nil
}

// intQuery calls ncclResult_t fn(const ncclComm_t comm, int *out).
func (c *Comm) intQuery(fn uintptr, name string) (int, error) {
	if c.c == 0 {
		return 0, errClosed
	}
	var v int32
	if r := call(fn, c.c, uintptr(unsafe.Pointer(&v))); r != success {
		return 0, c.lib.err(name, r, c.c)
	}
	return int(v), nil
}

// Count is the number of ranks (ncclCommCount).
func (c *Comm) Count() (int, error) { return c.intQuery(c.lib.commCount, "ncclCommCount") }

// UserRank is this communicator's rank (ncclCommUserRank).
func (c *Comm) UserRank() (int, error) { return c.intQuery(c.lib.commUserRank, "ncclCommUserRank") }

// CuDevice is the CUDA device of this communicator (ncclCommCuDevice).
func (c *Comm) CuDevice() (int, error) { return c.intQuery(c.lib.commCuDevice, "ncclCommCuDevice") }
