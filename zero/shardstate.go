package zero

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The flat layout as checkpoints and state dicts see it: the buckets, each
// rank's slice of them, and (under stage 3, where the slice is all a rank
// holds of the parameters) the slices themselves. A checkpoint writes and
// reads each rank's slices without gathering a unit, and a full state dict
// gathers one parameter at a time (GatherParam). The methods use only the
// engine's types, so that engine/checkpoint can name them in interfaces of
// its own (checkpoint.ShardedParams) without knowing this package.

// NumFlatBuckets is the number of buckets of the flat partition (0 under
// the greedy one).
func (z *Optimizer) NumFlatBuckets() int {
	if z.flat == nil {
		return 0
	}
	return len(z.flat.buckets)
}

// FlatBucket describes bucket i of the flat partition: its parameters in
// layout order, the element offset of each in the bucket, the bucket's
// length (padded to a multiple of the world size), and the bounds [lo, hi)
// of this rank's slice of it.
func (z *Optimizer) FlatBucket(i int) (params []*tensor.Tensor, offsets []int, numel, lo, hi int) {
	b := z.flat.buckets[i]
	me := z.pg.Rank()
	return b.params, b.offsets, b.numel, me * b.slice, (me + 1) * b.slice
}

// ParamSlice returns this rank's slice of bucket i's parameters under
// stage 3, the 1-D tensor of hi-lo elements that steps update and gathers
// send (FlatBucket's bounds), once an offloaded step running on the host
// has ended. Writing it writes the parameters; call SliceWritten after.
func (z *Optimizer) ParamSlice(i int) (*tensor.Tensor, error) {
	if z.flat == nil || i < 0 || i >= len(z.flat.buckets) {
		return nil, fmt.Errorf("zero: no bucket %d", i)
	}
	b := z.flat.buckets[i]
	if b.shard == nil {
		return nil, fmt.Errorf("zero: the parameters of bucket %d are whole on every rank (stage %d): only stage 3 shards them", i, z.opts.Stage)
	}
	if err := z.settle(); err != nil {
		return nil, err
	}
	return b.shard, nil
}

// SliceWritten tells that ParamSlice(i) was written (a checkpoint or a state
// dict loaded into it): the host's copy follows under offload, and a unit
// gathered now gives its memory back, so that its next gather sends the new
// values. Every rank calls it for the same buckets.
func (z *Optimizer) SliceWritten(i int) error {
	b := z.flat.buckets[i]
	if b.host != nil && b.host.param != nil {
		hs := z.opts.Offload.OpenScope()
		h, err := z.toHost(b.shard)
		if err == nil {
			err = b.host.param.CopyFrom(h)
		}
		hs.Close()
		if err != nil {
			return fmt.Errorf("zero: the host's copy of bucket %d: %w", i, err)
		}
	}
	if b.unit != nil && (b.unit.gathered || b.unit.inflight != nil) {
		return b.unit.reshard()
	}
	return nil
}

// GatherParam returns the elements [lo, hi) of the flattened parameter p,
// which stage 3 shards, as little-endian bytes of its dtype, without
// gathering its unit: each rank sends its part of those elements, on rank
// to (nil elsewhere), or on every rank when to < 0. Only those elements are
// ever held whole, in host memory. It is collective: every rank of the
// group calls it with the same arguments.
func (z *Optimizer) GatherParam(p *tensor.Tensor, lo, hi, to int) ([]byte, error) {
	f := z.flat
	if f == nil || f.units == nil {
		return nil, fmt.Errorf("zero: gatherParam: the parameters are whole on every rank (stage %d)", z.opts.Stage)
	}
	w, ok := f.where[p]
	if !ok {
		return nil, fmt.Errorf("zero: gatherParam: %s is not one the optimizer shards", paramLabel(p, -1))
	}
	if lo < 0 || hi > p.Numel() || lo > hi {
		return nil, fmt.Errorf("zero: gatherParam: elements [%d, %d) of %s, which has %d", lo, hi, paramLabel(p, z.index[p]), p.Numel())
	}
	if to >= z.pg.Size() {
		return nil, fmt.Errorf("zero: gatherParam: rank %d is not in the group of %d", to, z.pg.Size())
	}
	if lo == hi {
		if to < 0 || to == z.pg.Rank() {
			return []byte{}, nil
		}
		return nil, nil
	}
	b := f.buckets[w[0]]
	a, e := b.offsets[w[1]]+lo, b.offsets[w[1]]+hi // in the bucket
	me := z.pg.Rank()
	payload := z.pieceOf(b, a, e)
	if to >= 0 {
		all, err := z.pg.GatherObject(payload, to)
		if err != nil {
			return nil, fmt.Errorf("zero: gathering %s: %w", paramLabel(p, z.index[p]), err)
		}
		if me != to {
			return nil, nil
		}
		return joinPieces(all, (e-a)*p.DType().Size(), func(r int) []byte { return all[r] })
	}
	// Every rank: each rank holding some of the elements broadcasts them,
	// in rank order, which is their order.
	first, last := a/b.slice, (e-1)/b.slice
	parts := make([][]byte, z.pg.Size())
	for r := first; r <= last; r++ {
		var mine []byte
		if r == me {
			mine = payload
		}
		got, err := z.pg.BroadcastObject(mine, r)
		if err != nil {
			return nil, fmt.Errorf("zero: gathering %s: %w", paramLabel(p, z.index[p]), err)
		}
		parts[r] = got
	}
	return joinPieces(parts, (e-a)*p.DType().Size(), func(r int) []byte {
		if r < first || r > last {
			return []byte{'k'} // holds nothing, sends nothing
		}
		return parts[r]
	})
}

// pieceOf is what this rank sends of the bucket's elements [a, e): a
// status byte ('k', or 'e' and an error) and its part of them.
func (z *Optimizer) pieceOf(b *flatBucket, a, e int) []byte {
	me := z.pg.Rank()
	s, t := max(a, me*b.slice), min(e, (me+1)*b.slice)
	if s >= t {
		return []byte{'k'}
	}
	if err := z.settle(); err != nil {
		return append([]byte{'e'}, err.Error()...)
	}
	out := []byte{'k'}
	if hb, ok := tensor.HostBytes(b.shard); ok {
		es := b.shard.DType().Size()
		return append(out, hb[(s-me*b.slice)*es:(t-me*b.slice)*es]...)
	}
	sc := z.rt.OpenScope()
	defer sc.Close()
	raw, err := b.shard.Narrow(0, s-me*b.slice, t-s).Bytes()
	if err != nil {
		return append([]byte{'e'}, err.Error()...)
	}
	return append(out, raw...)
}

// joinPieces puts the ranks' parts together in rank order, or returns the
// first rank's error.
func joinPieces(parts [][]byte, size int, part func(r int) []byte) ([]byte, error) {
	out := make([]byte, 0, size)
	for r := range parts {
		p := part(r)
		switch {
		case len(p) == 0:
			return nil, fmt.Errorf("zero: rank %d sent nothing", r)
		case p[0] == 'e':
			return nil, fmt.Errorf("zero: rank %d: %s", r, p[1:])
		}
		out = append(out, p[1:]...)
	}
	if len(out) != size {
		return nil, fmt.Errorf("zero: the ranks sent %d bytes, want %d", len(out), size)
	}
	return out, nil
}
