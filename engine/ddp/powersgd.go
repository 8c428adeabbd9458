package ddp

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/rand"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// PowerSGDOptions are torch.distributed.algorithms.ddp_comm_hooks.
// powerSGD_hook.PowerSGDState's, with its defaults where zero.
type PowerSGDOptions struct {
	// Rank of the low-rank approximation (matrix_approximation_rank,
	// default 1).
	Rank int
	// StartIter is the number of iterations that use plain all-reduce
	// before compression starts (start_powerSGD_iter, default 1000;
	// negative for 0, compressing from the first iteration).
	StartIter int
	// MinCompressionRate: a gradient matrix n×m is compressed only when
	// (n+m)·rank·rate < n·m (min_compression_rate, default 2).
	MinCompressionRate float64
	// NoErrorFeedback turns off error feedback (use_error_feedback=False).
	NoErrorFeedback bool
	// NoWarmStart draws new random Q matrices every iteration instead of
	// reusing the last ones (warm_start=False).
	NoWarmStart bool
	// Seed seeds the generator that initialises the Q matrices, the same
	// on every rank (random_seed, default 0).
	Seed uint64
	// Epsilon is added to the norms in the orthogonalisation
	// (orthogonalization_epsilon, default 0).
	Epsilon float64
}

// PowerSGD is the state of a PowerSGD hook: per bucket, the error of the
// last compression and the P and Q matrices, and the iteration count.
type PowerSGD struct {
	pg   dist.ProcessGroup
	opts PowerSGDOptions
	rng  *rand.Generator
	iter int

	errors map[int]*tensor.Tensor
	ps, qs map[int]*tensor.Tensor

	// Elements before and after compression, over all buckets so far
	// (PowerSGDState's compression statistics).
	NumelBefore, NumelAfter int64
}

// Validate rejects what PyTorch's PowerSGDState rejects: error feedback or
// warm start from the first or second iteration. Both keep per-bucket
// state across iterations, and DDP rebuilds its buckets after the first,
// so that state would be laid out for buckets that no longer exist.
func (o PowerSGDOptions) Validate() error {
	if o.Rank < 0 {
		return fmt.Errorf("ddp: PowerSGD: matrixApproximationRank must be positive, got %d", o.Rank)
	}
	if o.MinCompressionRate < 0 {
		return fmt.Errorf("ddp: PowerSGD: minCompressionRate must not be negative, got %v", o.MinCompressionRate)
	}
	if start := o.StartIter; start != 0 && start <= 1 && (!o.NoErrorFeedback || !o.NoWarmStart) {
		if start < 0 {
			start = 0
		}
		return fmt.Errorf("ddp: PowerSGD: startPowerSGDIter must be > 1 when useErrorFeedback or warmStart is on (got %d): "+
			"DDP rebuilds its buckets after the first iteration, and PowerSGD can only keep state for them from the second on", start)
	}
	return nil
}

// NewPowerSGD makes the state of a PowerSGD hook over pg; options that
// Validate rejects are an error.
func NewPowerSGD(pg dist.ProcessGroup, opts PowerSGDOptions) (*PowerSGD, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Rank == 0 {
		opts.Rank = 1
	}
	switch {
	case opts.StartIter == 0:
		opts.StartIter = 1000
	case opts.StartIter < 0:
		opts.StartIter = 0
	}
	if opts.MinCompressionRate == 0 {
		opts.MinCompressionRate = 2
	}
	return &PowerSGD{
		pg: pg, opts: opts, rng: rand.New(opts.Seed),
		errors: map[int]*tensor.Tensor{}, ps: map[int]*tensor.Tensor{}, qs: map[int]*tensor.Tensor{},
	}, nil
}

// Hook is PowerSGD's comm hook (powerSGD_hook): for its first StartIter
// iterations the averaged all-reduce; then each gradient matrix M (n×m,
// reshaped from the gradient) that compression makes smaller is replaced
// by P·Qᵀ, with P = M·Q all-reduced and orthogonalised and Q = Mᵀ·P
// all-reduced and averaged, while the other gradients are all-reduced as
// they are. With error feedback, what the approximation lost is added to
// the next iteration's gradients.
func (s *PowerSGD) Hook() CommHook {
	allReduce := AllReduceHook(s.pg)
	return func(b *Bucket) func() (*tensor.Tensor, error) {
		if s.iter < s.opts.StartIter {
			if b.IsLast {
				s.iter++
			}
			return allReduce(b)
		}
		wait, err := s.compress(b)
		if err != nil {
			return func() (*tensor.Tensor, error) { return nil, err }
		}
		return wait
	}
}

type lowRank struct {
	m, p, q *tensor.Tensor // M (n×m, a view of the bucket), P (n×r), Q (m×r)
}

func (s *PowerSGD) compress(b *Bucket) (func() (*tensor.Tensor, error), error) {
	rt := b.Buffer.Runtime()
	buf := b.Buffer
	n := float64(s.pg.Size())
	var snapshot *tensor.Tensor
	if !s.opts.NoErrorFeedback {
		if e := s.errors[b.Index]; e != nil {
			if err := buf.AddInPlace(e); err != nil {
				return nil, err
			}
		} else {
			s.errors[b.Index] = rt.Zeros(buf.DType(), buf.Numel()).Persist()
		}
		snapshot = buf.Clone().Persist()
	}
	// The hook may run inside a scope that ends before wait is called (a
	// host call during backward): what wait uses is kept out of scopes and
	// released by wait.
	var held []*tensor.Tensor
	hold := func(t *tensor.Tensor) *tensor.Tensor {
		held = append(held, t.Persist())
		return t
	}
	// Sort the gradients into matrices worth compressing and the rest.
	var mats []lowRank
	var rest []*tensor.Tensor
	var pSize, qSize int
	for i, p := range b.Params {
		g := hold(buf.Narrow(0, b.Offsets[i], p.Numel()))
		rows := 1
		if p.Dim() > 0 {
			rows = p.Shape()[0]
		}
		cols := p.Numel() / max(rows, 1)
		r := min(rows, cols, s.opts.Rank)
		before, after := int64(rows*cols), int64((rows+cols)*r)
		s.NumelBefore += before
		if float64(after)*s.opts.MinCompressionRate < float64(before) {
			mats = append(mats, lowRank{m: hold(g.View(rows, cols))})
			pSize += rows * r
			qSize += cols * r
			s.NumelAfter += after
		} else {
			rest = append(rest, g)
			s.NumelAfter += before
		}
	}
	// The gradients that stay uncompressed travel as one flat tensor.
	var flat *tensor.Tensor
	if len(rest) > 0 {
		flat = tensor.Cat(rest, 0).Persist()
	} else {
		flat = rt.Zeros(buf.DType(), 0).Persist()
	}
	randomize := s.opts.NoWarmStart || s.ps[b.Index] == nil
	if randomize {
		if s.ps[b.Index] != nil {
			s.ps[b.Index].Release()
			s.qs[b.Index].Release()
		}
		s.ps[b.Index] = rt.Zeros(buf.DType(), pSize).Persist()
		s.qs[b.Index] = rt.Zeros(buf.DType(), qSize).Persist()
	}
	pMem, qMem := s.ps[b.Index], s.qs[b.Index]
	pi, qi := 0, 0
	for k := range mats {
		rows, cols := mats[k].m.Shape()[0], mats[k].m.Shape()[1]
		r := min(rows, cols, s.opts.Rank)
		mats[k].p = hold(pMem.Narrow(0, pi, rows*r).View(rows, r))
		mats[k].q = hold(qMem.Narrow(0, qi, cols*r).View(cols, r))
		pi += rows * r
		qi += cols * r
	}
	if randomize {
		// PyTorch seeds a forked torch generator with
		// numpy.random.RandomState(seed).randint(1_000_000_000): the same
		// on every rank.
		g := tensor.NewGenerator(uint64(randint(s.rng, 1_000_000_000)))
		for _, l := range mats {
			if err := l.q.CopyFrom(rt.RandnWith(g, buf.DType(), l.q.Shape()...)); err != nil {
				return nil, err
			}
			if err := orthogonalize(l.q, s.opts.Epsilon); err != nil {
				return nil, err
			}
		}
	} else {
		for _, l := range mats {
			if err := orthogonalize(l.q, s.opts.Epsilon); err != nil {
				return nil, err
			}
		}
	}
	for _, l := range mats {
		if err := l.p.CopyFrom(l.m.Matmul(l.q)); err != nil {
			return nil, err
		}
	}
	// Both all-reduces start now; the rest waits for the gradients to be read.
	flatWork := s.pg.AllReduce(flat, dist.Sum)
	pWork := s.pg.AllReduce(pMem, dist.Sum)
	return func() (*tensor.Tensor, error) {
		sc := rt.OpenScope()
		defer sc.Close()
		defer func() {
			for _, t := range held {
				t.Release()
			}
		}()
		defer flat.Release()
		if snapshot != nil {
			defer snapshot.Release()
		}
		if err := flatWork.Wait(); err != nil {
			return nil, err
		}
		if err := flat.MulScalarInPlace(1 / n); err != nil {
			return nil, err
		}
		off := 0
		for _, g := range rest {
			if err := g.CopyFrom(flat.Narrow(0, off, g.Numel())); err != nil {
				return nil, err
			}
			off += g.Numel()
		}
		if err := pWork.Wait(); err != nil {
			return nil, err
		}
		for _, l := range mats {
			if err := orthogonalize(l.p, s.opts.Epsilon); err != nil {
				return nil, err
			}
			if err := l.q.CopyFrom(l.m.Transpose(0, 1).Matmul(l.p)); err != nil {
				return nil, err
			}
		}
		if err := s.pg.AllReduce(qMem, dist.Sum).Wait(); err != nil {
			return nil, err
		}
		if err := qMem.MulScalarInPlace(1 / n); err != nil {
			return nil, err
		}
		for _, l := range mats {
			if err := l.m.CopyFrom(l.p.Matmul(l.q.Transpose(0, 1))); err != nil {
				return nil, err
			}
		}
		if snapshot != nil {
			if err := s.errors[b.Index].CopyFrom(snapshot.Sub(buf)); err != nil {
				return nil, err
			}
		}
		if s.opts.NoWarmStart {
			// warm_start=False: new random matrices next time.
			pMem.Release()
			qMem.Release()
			delete(s.ps, b.Index)
			delete(s.qs, b.Index)
		}
		if b.IsLast {
			s.iter++
		}
		return buf, nil
	}, nil
}

// BatchedHook is batched_powerSGD_hook: for its first StartIter
// iterations the averaged all-reduce; then each bucket as a whole, padded
// with zeros to the smallest square (side ⌈√n⌉), is the matrix M replaced
// by P·Qᵀ, with P = M·Q all-reduced and orthogonalised and Q = Mᵀ·P
// all-reduced and averaged. Coarser than Hook (one approximation for all
// the bucket's gradients, which need not be matrices) and cheaper: two
// small all-reduces a bucket. Error feedback and warm start as in Hook.
// A state serves one of the two hooks.
func (s *PowerSGD) BatchedHook() CommHook {
	allReduce := AllReduceHook(s.pg)
	return func(b *Bucket) func() (*tensor.Tensor, error) {
		if s.iter < s.opts.StartIter {
			if b.IsLast {
				s.iter++
			}
			return allReduce(b)
		}
		wait, err := s.compressBatched(b)
		if err != nil {
			return func() (*tensor.Tensor, error) { return nil, err }
		}
		return wait
	}
}

func (s *PowerSGD) compressBatched(b *Bucket) (func() (*tensor.Tensor, error), error) {
	rt := b.Buffer.Runtime()
	buf := b.Buffer
	total := buf.Numel()
	side := int(math.Ceil(math.Sqrt(float64(total))))
	r := s.opts.Rank
	s.NumelBefore += int64(total)
	s.NumelAfter += int64(2 * side * r)
	// The bucket padded with zeros to side², kept with the state until
	// wait has written the result back.
	padded := rt.Zeros(buf.DType(), side*side).Persist()
	if err := padded.Narrow(0, 0, total).CopyFrom(buf); err != nil {
		padded.Release()
		return nil, err
	}
	var snapshot *tensor.Tensor
	if !s.opts.NoErrorFeedback {
		if e := s.errors[b.Index]; e != nil {
			if e.Numel() != padded.Numel() {
				padded.Release()
				return nil, fmt.Errorf("ddp: PowerSGD: bucket %d changed size (%d elements, its error feedback has %d)", b.Index, padded.Numel(), e.Numel())
			}
			if err := padded.AddInPlace(e); err != nil {
				padded.Release()
				return nil, err
			}
		} else {
			s.errors[b.Index] = rt.Zeros(buf.DType(), side*side).Persist()
		}
		snapshot = padded.Clone().Persist()
	}
	m := padded.View(side, side).Persist()
	if s.opts.NoWarmStart || s.ps[b.Index] == nil {
		if s.ps[b.Index] != nil {
			s.ps[b.Index].Release()
			s.qs[b.Index].Release()
		}
		// P needs no values (M·Q overwrites it); Q is drawn as PyTorch
		// draws it, from a generator seeded by the state's RandomState.
		s.ps[b.Index] = rt.Zeros(buf.DType(), side, r).Persist()
		g := tensor.NewGenerator(uint64(randint(s.rng, 1_000_000_000)))
		s.qs[b.Index] = rt.RandnWith(g, buf.DType(), side, r).Persist()
	}
	p, q := s.ps[b.Index], s.qs[b.Index]
	release := func() {
		m.Release()
		padded.Release()
		if snapshot != nil {
			snapshot.Release()
		}
	}
	if err := orthogonalize(q, s.opts.Epsilon); err != nil {
		release()
		return nil, err
	}
	sc := rt.OpenScope()
	err := p.CopyFrom(m.Matmul(q))
	sc.Close()
	if err != nil {
		release()
		return nil, err
	}
	pWork := s.pg.AllReduce(p, dist.Sum)
	n := float64(s.pg.Size())
	return func() (*tensor.Tensor, error) {
		defer release()
		sc := rt.OpenScope()
		defer sc.Close()
		if err := pWork.Wait(); err != nil {
			return nil, err
		}
		if err := orthogonalize(p, s.opts.Epsilon); err != nil {
			return nil, err
		}
		if err := q.CopyFrom(m.Transpose(0, 1).Matmul(p)); err != nil {
			return nil, err
		}
		if err := s.pg.AllReduce(q, dist.Sum).Wait(); err != nil {
			return nil, err
		}
		if err := q.MulScalarInPlace(1 / n); err != nil {
			return nil, err
		}
		if err := m.CopyFrom(p.Matmul(q.Transpose(0, 1))); err != nil {
			return nil, err
		}
		if snapshot != nil {
			if err := s.errors[b.Index].CopyFrom(snapshot.Sub(padded)); err != nil {
				return nil, err
			}
		}
		if s.opts.NoWarmStart {
			p.Release()
			q.Release()
			delete(s.ps, b.Index)
			delete(s.qs, b.Index)
		}
		if err := buf.CopyFrom(padded.Narrow(0, 0, total)); err != nil {
			return nil, err
		}
		if b.IsLast {
			s.iter++
		}
		return buf, nil
	}, nil
}

// randint is numpy's legacy RandomState.randint(high) for high ≤ 2³²: the
// generator's next 32-bit words, masked to the smallest power of two above
// high−1, until one is below high. engine/rand's MT19937 seeded with s is
// numpy's RandomState(s).
func randint(g *rand.Generator, high uint32) uint32 {
	mask := uint32(1)
	for mask < high-1 {
		mask = mask<<1 | 1
	}
	for {
		if v := g.Uint32() & mask; v < high {
			return v
		}
	}
}

// orthogonalize makes the columns of the n×r matrix m orthonormal in
// place, by Gram-Schmidt (PowerSGD's _orthogonalize_gram_schmidt, which
// PyTorch uses for ranks up to 2).
func orthogonalize(m *tensor.Tensor, eps float64) error {
	sc := m.Runtime().OpenScope()
	defer sc.Close()
	cols := m.Shape()[1]
	for i := range cols {
		col := m.Narrow(1, i, 1)
		norm := col.Square().Sum([]int{0}, true).Sqrt()
		if eps != 0 {
			norm = norm.AddScalar(eps)
		}
		if err := col.CopyFrom(col.Div(norm)); err != nil {
			return err
		}
		if i+1 < cols {
			rest := m.Narrow(1, i+1, cols-i-1)
			if err := rest.CopyFrom(rest.Sub(col.Mul(rest).Sum([]int{0}, true).Mul(col))); err != nil {
				return err
			}
		}
	}
	return nil
}

// String describes the state (for logs).
func (s *PowerSGD) String() string {
	rate := 0.0
	if s.NumelAfter > 0 {
		rate = float64(s.NumelBefore) / float64(s.NumelAfter)
	}
	return fmt.Sprintf("PowerSGD(rank %d, iteration %d, compression rate %.1f)", s.opts.Rank, s.iter, rate)
}
