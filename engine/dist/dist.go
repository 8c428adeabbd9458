// Package dist owns communication between ranks: the ProcessGroup
// interface that every backend implements (the in-process one here, whose
// ranks are goroutines of one process; NCCL's in nccl/, over GPUs; MPI's
// in mpi/, one rank per process), reduce operations, asynchronous work
// handles, collective timeouts and the consistency checks that turn a
// mismatched call into an error instead of corrupted data or a hang.
// Everything above it (ddp, zero, the hooks, the script API) talks to a
// ProcessGroup only, and runs unchanged on every backend.
//
// Every collective is asynchronous: it is queued on the rank's
// communication queue and returns a *Work at once, so that computation on
// the rank's own goroutine overlaps it. The tensors a collective reads and
// writes must not be touched until its Work completes; the collective
// keeps their memory alive until then even if they are released.
package dist

import (
	"fmt"
	"strings"
	"time"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// ReduceOp combines the values of all ranks.
type ReduceOp uint8

const (
	Sum ReduceOp = iota
	Avg          // the sum divided by the number of ranks
	Max
	Min
	Product
)

var reduceOpNames = [...]string{Sum: "sum", Avg: "avg", Max: "max", Min: "min", Product: "product"}

func (op ReduceOp) String() string {
	if int(op) < len(reduceOpNames) {
		return reduceOpNames[op]
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(op))
}

// ParseReduceOp reads "sum", "avg", "max", "min" or "product" (any case).
func ParseReduceOp(s string) (ReduceOp, error) {
	for i, name := range reduceOpNames {
		if strings.EqualFold(s, name) {
			return ReduceOp(i), nil
		}
	}
	return 0, fmt.Errorf("dist: unknown reduce op %q (sum, avg, max, min or product)", s)
}

// ProcessGroup is a set of ranks that communicate. Rank and Size are this
// rank's place in the group. Tensors must be contiguous and in memory the
// backend can reach; every rank of the group must call the same
// collectives in the same order with matching tensors (same dtype and
// element count; ReduceScatter's input and AllGather's output hold Size
// times the other side).
type ProcessGroup interface {
	Rank() int
	Size() int

	// AllReduce combines t across ranks, in place on every rank.
	AllReduce(t *tensor.Tensor, op ReduceOp) *Work
	// Broadcast copies root's t into every other rank's t.
	Broadcast(t *tensor.Tensor, root int) *Work
	// ReduceScatter combines in across ranks and leaves block Rank() of
	// the result (in holds Size() blocks of out's size) in out.
	ReduceScatter(out, in *tensor.Tensor, op ReduceOp) *Work
	// AllGather writes every rank's in into block r of out.
	AllGather(out, in *tensor.Tensor) *Work
	// AllGatherInto writes rank r's in into outs[r].
	AllGatherInto(outs []*tensor.Tensor, in *tensor.Tensor) *Work
	// AllToAll sends block r of in to rank r, and writes the block that
	// rank r sent to this rank into block r of out.
	AllToAll(out, in *tensor.Tensor) *Work
	// Barrier completes when every rank has reached it.
	Barrier() *Work
	// Send hands t to rank dst; the matching Recv on dst copies it.
	Send(t *tensor.Tensor, dst int) *Work
	// Recv fills t with what rank src sends.
	Recv(t *tensor.Tensor, src int) *Work

	// BroadcastObject returns root's payload on every rank; GatherObject
	// returns every rank's payload, in rank order, on root (nil on the
	// others). They carry small metadata (encoded by the caller) and
	// block until done.
	BroadcastObject(payload []byte, root int) ([]byte, error)
	GatherObject(payload []byte, root int) ([][]byte, error)

	// NewGroup makes a subgroup of ranks (given as ranks of this group).
	// Every rank of this group must call it, in the same order, with the
	// same list; ranks outside the list get a nil group. The subgroup
	// numbers its members in increasing order of their rank in this
	// group, whatever the order of the list.
	NewGroup(ranks []int) (ProcessGroup, error)
}

// CommTimer is implemented by process groups that count how long the
// rank's communication queues were busy (the in-process backend).
type CommTimer interface {
	CommTime() time.Duration
}

// CoalescedAllReducer is implemented by process groups that all-reduce a
// list of tensors in place without packing them into one buffer (the
// in-process backend, whose ranks read each other's memory): the result is
// that of AllReduce on the tensors' elements laid one tensor after another,
// the same combination in the same order, bit for bit. preMul multiplies
// every rank's values before they are summed (NCCL's PreMulSum; 1 for
// none): DDP averages its gradients that way, as PyTorch's reducer divides
// each gradient on its way into the bucket. Every rank must pass tensors of
// the same dtype and the same total size (their split may differ, and a
// rank may call AllReduce on one tensor of that size instead) and the same
// op and preMul; preMul other than 1 needs Sum and float32 or float64.
type CoalescedAllReducer interface {
	AllReduceCoalesced(ts []*tensor.Tensor, op ReduceOp, preMul float64) *Work
}

// DefaultTimeout bounds how long a collective waits for the other ranks,
// as PyTorch's default process-group timeout does.
const DefaultTimeout = 10 * time.Minute
