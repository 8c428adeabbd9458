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
	// Prefetch, when positive, is how many batches a goroutine of the
	// loader reads ahead of the one Next hands over, so that the reads
	// happen while the step computes (Close ends it). The batches, their
	// order and their errors are those without it: a batch that fails is
	// reported by the Next that reaches it.
	Prefetch int
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
	windows int
	pos     Position
	rd      *batchReader // reads the batches when nothing prefetches
	buf     []int64      // the batch: inputs, then targets
	ahead   *prefetcher  // with Prefetch: the goroutine reading ahead, from pos
}

// batchReader reads a loader's batches: the window order of the epoch it
// is in, and the buffers of one window. The loader has one, and its
// prefetcher another, for the epoch it reads ahead in.
type batchReader struct {
	ds      *Dataset
	o       LoaderOptions
	vocab   int // the bound every id is checked against
	windows int
	epoch   int
	order   []uint32 // epoch's window order; nil until the first read
	win     []int64  // one window, T+1 tokens
	scratch []byte   // its bytes as read
	checked []*source
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
	case o.Prefetch < 0 || o.Prefetch > maxPrefetch:
		return nil, fmt.Errorf("tokens: loader: prefetch %d: batches read ahead, 0 to %d", o.Prefetch, maxPrefetch)
	}
	l := &Loader{ds: ds, o: o, windows: (ds.Len() - 1) / o.SeqLen}
	if ds.Len() < 1 || l.StepsPerEpoch() == 0 {
		return nil, fmt.Errorf("tokens: loader: %s holds %d tokens, %d windows of %d+1, fewer than a global batch of %d×%d ranks",
			ds.Source, ds.Len(), max(l.windows, 0), o.SeqLen, o.Batch, o.World)
	}
	if l.windows > math.MaxUint32 {
		return nil, fmt.Errorf("tokens: loader: %s holds %d windows of %d+1 tokens, more than the 2³²-1 a loader orders: use longer sequences",
			ds.Source, l.windows, o.SeqLen)
	}
	l.buf = make([]int64, 2*o.Batch*o.SeqLen)
	l.rd = l.newReader()
	return l, nil
}

// maxPrefetch bounds Prefetch: batches held in memory ahead of the step.
const maxPrefetch = 1024

func (l *Loader) newReader() *batchReader {
	o := l.o
	r := &batchReader{ds: l.ds, o: o, vocab: l.ds.Vocab, windows: l.windows}
	if o.Vocab > 0 {
		r.vocab = min(o.Vocab, l.ds.Vocab)
	}
	r.win = make([]int64, o.SeqLen+1)
	r.scratch = make([]byte, max(8*(o.SeqLen+1), headCheck))
	return r
}

// StepsPerEpoch is the number of global batches in an epoch.
func (l *Loader) StepsPerEpoch() int { return max(l.windows, 0) / (l.o.Batch * l.o.World) }

// Position is where the next batch comes from.
func (l *Loader) Position() Position { return l.pos }

// SetPosition moves the loader to p (a saved Position); batches read
// ahead from the old position are dropped.
func (l *Loader) SetPosition(p Position) error {
	global := l.o.Batch * l.o.World
	if p.Epoch < 0 || p.Windows < 0 || p.Windows > l.StepsPerEpoch()*global || p.Windows%global != 0 {
		return fmt.Errorf("tokens: loader: position epoch %d, window %d is not a step boundary of %s (%d steps of %d windows per epoch)",
			p.Epoch, p.Windows, l.ds.Source, l.StepsPerEpoch(), global)
	}
	l.stopAhead()
	l.pos = p
	return nil
}

// Close ends the goroutine reading ahead, if any. The loader can go on:
// its next Next reads (and, with Prefetch, starts reading ahead) again.
func (l *Loader) Close() { l.stopAhead() }

// shuffle makes epoch's window order: a Fisher-Yates shuffle driven by
// PCG seeded with (Seed, epoch), so that every rank, and a resumed run,
// draws the same order.
func (r *batchReader) shuffle(epoch int) {
	if r.order == nil {
		r.order = make([]uint32, r.windows)
	} else if r.epoch == epoch {
		return
	}
	r.epoch = epoch
	for i := range r.order {
		r.order[i] = uint32(i)
	}
	if !r.o.Shuffle {
		return
	}
	rng := rand.NewPCG(r.o.Seed, uint64(epoch))
	for i := len(r.order) - 1; i > 0; i-- {
		j := bounded(rng, uint64(i+1))
		r.order[i], r.order[j] = r.order[j], r.order[i]
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

// read reads this rank's batch at p into dst (inputs, then targets): at
// the end of an epoch, the first batch of the next. It returns the
// position the batch was read at. It checks each file it reads against
// what its open found (size, header) and every token against the
// vocabulary: a failure names the file, the byte offset and the step.
func (r *batchReader) read(p Position, dst []int64) (Position, error) {
	global := r.o.Batch * r.o.World
	if p.Windows+global > r.windows {
		p = Position{Epoch: p.Epoch + 1}
	}
	r.shuffle(p.Epoch)
	B, T := r.o.Batch, r.o.SeqLen
	xs, ys := dst[:B*T], dst[B*T:]
	first := p.Windows + r.o.Rank*B
	r.checked = r.checked[:0]
	for b := range B {
		start := int(r.order[first+b]) * T
		if err := r.ds.read(r.win, start, r.vocab, r.scratch, &r.checked); err != nil {
			return p, fmt.Errorf("%w (loader: epoch %d, step %d)", err, p.Epoch, p.Windows/global)
		}
		copy(xs[b*T:(b+1)*T], r.win[:T])
		copy(ys[b*T:(b+1)*T], r.win[1:])
	}
	return p, nil
}

// Next returns this rank's next batch as int64 tensors [Batch, SeqLen] on
// rt: the inputs and the targets. At the end of an epoch the next one
// starts with a new order. A batch that cannot be read (see
// batchReader.read) is an error, and the position stays at that step.
func (l *Loader) Next(rt *tensor.Runtime) (x, y *tensor.Tensor, err error) {
	if l.o.Prefetch == 0 {
		at, err := l.rd.read(l.pos, l.buf)
		return l.advance(rt, at, l.buf, err)
	}
	if l.ahead == nil {
		l.ahead = startPrefetch(l.newReader(), l.pos, l.o.Prefetch, len(l.buf))
	}
	b := <-l.ahead.out
	x, y, err = l.advance(rt, b.at, b.data, b.err)
	if err != nil {
		// The goroutine stopped at the failed batch; the next Next reads
		// it again.
		l.stopAhead()
	} else {
		l.ahead.free <- b.data
	}
	return x, y, err
}

// advance moves the loader past the batch read at at into data (or to
// at, when it failed) and makes its tensors.
func (l *Loader) advance(rt *tensor.Runtime, at Position, data []int64, err error) (x, y *tensor.Tensor, _ error) {
	l.pos = at
	if err != nil {
		return nil, nil, err
	}
	B, T := l.o.Batch, l.o.SeqLen
	l.pos.Windows += B * l.o.World
	return rt.FromInt64s(data[:B*T], B, T), rt.FromInt64s(data[B*T:], B, T), nil
}

// prefetcher is a goroutine reading a loader's batches ahead, in order,
// from a position: each batch (or the error that stops it) goes to out,
// in buffers that come back through free, so that at most ahead batches
// wait and one more is being read.
type prefetcher struct {
	out  chan prefetched
	free chan []int64
	stop chan struct{}
	done chan struct{}
}

type prefetched struct {
	at   Position
	data []int64
	err  error
}

func startPrefetch(r *batchReader, from Position, ahead, size int) *prefetcher {
	pf := &prefetcher{out: make(chan prefetched, ahead), free: make(chan []int64, ahead+1),
		stop: make(chan struct{}), done: make(chan struct{})}
	for range ahead + 1 {
		pf.free <- make([]int64, size)
	}
	go func() {
		defer close(pf.done)
		global := r.o.Batch * r.o.World
		p := from
		for {
			var buf []int64
			select {
			case buf = <-pf.free:
			case <-pf.stop:
				return
			}
			at, err := r.read(p, buf)
			select {
			case pf.out <- prefetched{at: at, data: buf, err: err}:
			case <-pf.stop:
				return
			}
			if err != nil {
				return
			}
			p = at
			p.Windows += global
		}
	}()
	return pf
}

// stopAhead ends the goroutine reading ahead and drops what it read.
func (l *Loader) stopAhead() {
	if l.ahead == nil {
		return
	}
	close(l.ahead.stop)
	<-l.ahead.done
	l.ahead = nil
}
