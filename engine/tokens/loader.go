package tokens

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// LoaderOptions configure a Loader.
type LoaderOptions struct {
	Batch  int // windows per rank per step (B)
	SeqLen int // tokens per window (T); each window reads T+1 tokens
	// Rank and World split every global batch of Batch·World windows:
	// rank r takes windows [r·Batch, (r+1)·Batch) of it.
	Rank, World int
	// Shuffle draws a new window order each epoch from Seed and the
	// epoch number; without it windows come in file order.
	Shuffle bool
	Seed    uint64
	// Vocab, when positive, bounds the ids served below the dataset's
	// Vocab: a model's vocabulary smaller than what the data's format
	// allows (a small model on an llm.c GPT-2 shard whose ids fit it).
	// Every token read is checked against the bound.
	Vocab int
}

// Position is how far a loader is: the epoch (from 0) and the windows of
// it the whole world has consumed. It does not depend on the rank or the
// world size, so a run saved under one world size resumes under another
// (with the same global batch) on the same data.
type Position struct {
	Epoch   int `json:"epoch"`
	Windows int `json:"windows"`
}

// Loader cuts a dataset into windows of SeqLen+1 tokens starting at
// multiples of SeqLen, and serves each rank its Batch windows of every
// global step as (input, target) pairs: the target is the input shifted by
// one token. An epoch is every whole global batch of windows; the windows
// left over are skipped until the next epoch's order brings them in.
//
// A batch's windows are read from the dataset's files when the batch is
// asked for, each with one positioned read per file it spans, straight
// into the loader's buffer: what a loader holds is its batch and the
// epoch's window order (4 bytes a window), whatever the size of the data.
// A Loader is for one goroutine; loaders of the same dataset may run on
// several.
type Loader struct {
	ds      *Dataset
	o       LoaderOptions
	vocab   int // the bound every id is checked against
	windows int
	order   []uint32 // this epoch's window order
	pos     Position
	buf     []int64   // the batch: inputs, then targets
	win     []int64   // one window, T+1 tokens
	scratch []byte    // its bytes as read
	checked []*source // the files checked in this batch
}

// NewLoader makes a loader at the start of epoch 0.
func NewLoader(ds *Dataset, o LoaderOptions) (*Loader, error) {
	if o.World == 0 {
		o.World = 1
	}
	switch {
	case o.Batch < 1 || o.SeqLen < 1:
		return nil, fmt.Errorf("tokens: loader: batch size %d and sequence length %d must be positive", o.Batch, o.SeqLen)
	case o.World < 1 || o.Rank < 0 || o.Rank >= o.World:
		return nil, fmt.Errorf("tokens: loader: rank %d of %d", o.Rank, o.World)
	case o.Vocab < 0:
		return nil, fmt.Errorf("tokens: loader: vocabulary size %d", o.Vocab)
	}
	l := &Loader{ds: ds, o: o, vocab: ds.Vocab, windows: (ds.Len() - 1) / o.SeqLen}
	if o.Vocab > 0 {
		l.vocab = min(o.Vocab, ds.Vocab)
	}
	if ds.Len() < 1 || l.StepsPerEpoch() == 0 {
		return nil, fmt.Errorf("tokens: loader: %s holds %d tokens, %d windows of %d+1, fewer than a global batch of %d×%d ranks",
			ds.Source, ds.Len(), max(l.windows, 0), o.SeqLen, o.Batch, o.World)
	}
	if l.windows > math.MaxUint32 {
		return nil, fmt.Errorf("tokens: loader: %s holds %d windows of %d+1 tokens, more than the 2³²-1 a loader orders: use longer sequences",
			ds.Source, l.windows, o.SeqLen)
	}
	l.buf = make([]int64, 2*o.Batch*o.SeqLen)
	l.win = make([]int64, o.SeqLen+1)
	l.scratch = make([]byte, max(8*(o.SeqLen+1), headCheck))
	l.shuffle()
	return l, nil
}

// StepsPerEpoch is the number of global batches in an epoch.
func (l *Loader) StepsPerEpoch() int { return max(l.windows, 0) / (l.o.Batch * l.o.World) }

// Position is where the next batch comes from.
func (l *Loader) Position() Position { return l.pos }

// SetPosition moves the loader to p (a saved Position).
func (l *Loader) SetPosition(p Position) error {
	global := l.o.Batch * l.o.World
	if p.Epoch < 0 || p.Windows < 0 || p.Windows > l.StepsPerEpoch()*global || p.Windows%global != 0 {
		return fmt.Errorf("tokens: loader: position epoch %d, window %d is not a step boundary of %s (%d steps of %d windows per epoch)",
			p.Epoch, p.Windows, l.ds.Source, l.StepsPerEpoch(), global)
	}
	l.pos = p
	l.shuffle()
	return nil
}

// shuffle computes the current epoch's window order: a Fisher-Yates shuffle
// driven by PCG seeded with (Seed, epoch), so that every rank, and a
// resumed run, draws the same order.
func (l *Loader) shuffle() {
	if l.order == nil {
		l.order = make([]uint32, l.windows)
	}
	for i := range l.order {
		l.order[i] = uint32(i)
	}
	if !l.o.Shuffle {
		return
	}
	rng := rand.NewPCG(l.o.Seed, uint64(l.pos.Epoch))
	for i := len(l.order) - 1; i > 0; i-- {
		j := bounded(rng, uint64(i+1))
		l.order[i], l.order[j] = l.order[j], l.order[i]
	}
}

// bounded is a uniform draw in [0, n) (Lemire's method), written out so
// that the order does not depend on the Go version's rand.IntN.
func bounded(rng *rand.PCG, n uint64) int {
	for {
		hi, lo := bits.Mul64(rng.Uint64(), n)
		if lo >= n || lo >= -n%n {
			return int(hi)
		}
	}
}

// Next returns this rank's next batch as int64 tensors [Batch, SeqLen] on
// rt: the inputs and the targets. At the end of an epoch the next one
// starts with a new order. It reads the batch's windows from the dataset,
// checking each file it reads against what its open found (size, header)
// and every token against the vocabulary: a failure is an error naming
// the file, the byte offset and the loader's step, and the position stays
// at that step.
func (l *Loader) Next(rt *tensor.Runtime) (x, y *tensor.Tensor, err error) {
	global := l.o.Batch * l.o.World
	if l.pos.Windows+global > l.windows {
		l.pos = Position{Epoch: l.pos.Epoch + 1}
		l.shuffle()
	}
	B, T := l.o.Batch, l.o.SeqLen
	xs, ys := l.buf[:B*T], l.buf[B*T:]
	first := l.pos.Windows + l.o.Rank*B
	l.checked = l.checked[:0]
	for b := range B {
		start := int(l.order[first+b]) * T
		if err := l.ds.read(l.win, start, l.vocab, l.scratch, &l.checked); err != nil {
			return nil, nil, fmt.Errorf("%w (loader: epoch %d, step %d)", err, l.pos.Epoch, l.pos.Windows/global)
		}
		copy(xs[b*T:(b+1)*T], l.win[:T])
		copy(ys[b*T:(b+1)*T], l.win[1:])
	}
	l.pos.Windows += global
	return rt.FromInt64s(xs, B, T), rt.FromInt64s(ys, B, T), nil
}
