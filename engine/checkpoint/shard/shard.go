// Package shard holds the plain types in which a sharded optimizer (ZeRO's,
// zero.Optimizer) hands its state to engine/checkpoint and takes it back:
// a rank's chunks of optimizer state, the partition they were cut under,
// and a load in progress. It sits below both, as database/sql/driver sits
// below database/sql and its drivers: checkpoint finds a sharded
// optimizer by asserting the interface checkpoint.ShardedOptimizer, whose
// methods name only these types and the engine's, so a new sharded
// optimizer needs no edit in checkpoint and checkpoint never imports the
// package that implements it.
package shard

import (
	"errors"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Chunk is what one rank holds of one parameter's optimizer state: all of
// it (greedy partition), or the piece inside the rank's slice (flat
// partition). Consolidation sends a rank's chunks to the target rank;
// checkpoints write each rank's chunks to its own file.
type Chunk struct {
	Index int // the parameter's global index
	At    int // first element, in the flattened parameter
	Step  int64
	// Scalars are the state's 0-d entries beside Step, by name
	// (optim.State.Scalars: NAdam's mu_product), the same in every
	// chunk of a parameter; nil when it keeps none, and in checkpoints
	// written before chunks carried them.
	Scalars map[string]float64
	N       int      // elements in each entry
	Names   []string // "exp_avg", ...
	Data    [][]byte // each entry's N elements in optim.StateDType, little-endian
}

// Layout is how a sharded optimizer cuts its state, as a checkpoint's
// manifest records it: the partition ("greedy" or "flat" for ZeRO) and the
// ZeRO stage (1, 2 or 3; 0 for none). A checkpoint reads a rank's own file
// back only under the same partition and world size.
type Layout struct {
	Partition string
	Stage     int
}

// Load is a load of a rank's shard in two steps, for a reader that fills
// the state tensors itself (a checkpoint, read from its files straight
// into them): the optimizer's BeginLoadShard checks the chunks and makes
// the tensors, the reader fills each Entry, then Commit installs them or
// Abort frees them. The optimizer changes only at Commit.
type Load interface {
	// Entry is the tensor that entry k of chunk ci is to be read into:
	// of the state's dtype, contiguous, with the piece's elements.
	Entry(ci, k int) *tensor.Tensor
	// Commit gives the optimizer the loaded hyper-parameters and state.
	Commit() error
	// Abort frees what BeginLoadShard made; the optimizer is as it was.
	Abort()
}

// ErrOtherLayout is BeginLoadShard's answer to chunks saved under another
// world size or partition: they are not exactly this rank's pieces. A
// checkpoint then reads the parts of every rank's chunks that overlap the
// rank's own.
var ErrOtherLayout = errors.New("zero: the chunks were saved under another partition")
