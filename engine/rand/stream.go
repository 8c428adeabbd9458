package rand

import (
	"fmt"
	"math"
)

// A Stream produces one fill of n elements — what Uniform32, Uniform64,
// Normal32 or Normal64 would write into a buffer of n elements — in
// order, piece by piece, into buffers of the caller's choosing: Read32 or
// Read64 writes the next elements, Skip passes over some without keeping
// them, and Finish leaves the generator exactly where the whole fill
// leaves it. Whatever the pieces, the values are the whole fill's, bit for
// bit, and so is the generator's state after Finish. So a tensor of any size
// can be initialised through a small buffer, or directly in its own
// memory, and a rank that holds a slice [lo, hi) of a parameter can draw
// just that slice (Skip(lo), Read, Finish) and stay in step with the ranks
// that draw the rest.
//
// Extra memory is one block of 16 samples. Skipped elements cost their
// draws from the engine (about a nanosecond each) but no transform, except
// below 16 elements, where normal samples come from the generator's cached
// Box-Muller pair and each must be computed.
//
// A Stream is used by one goroutine, and its generator must not be drawn
// from by anything else until Finish has returned.
type Stream struct {
	g      *Generator
	kind   streamKind
	n, pos int // elements in the fill; elements read or skipped so far

	// uniform: x*r + f (f32/r32, or f64/r64 for float64); normal: mean and
	// std (m32/s32 rounded, for 16 or more float32 elements).
	f64, r64 float64
	f32, r32 float32

	// Normal fills of 16 or more elements: drawn counts the elements whose
	// uniforms have been drawn (the transform of a block needs all 16 of
	// its draws); held is the first element of the block kept in blk32 or
	// blk64 (-1 for none); the tail, the last 16 elements redrawn when n is
	// not a multiple of 16, is kept there too once tailDrawn.
	drawn     int
	held      int
	tailDrawn bool
	blk32     [16]float32
	blk64     [16]float64
}

type streamKind uint8

const (
	streamUniform32 streamKind = iota
	streamUniform64
	streamNormal32
	streamNormal64
)

func (k streamKind) wide() bool { return k == streamUniform64 || k == streamNormal64 }

func (k streamKind) String() string {
	return [...]string{"Uniform32", "Uniform64", "Normal32", "Normal64"}[k]
}

func (g *Generator) newStream(kind streamKind, n int) *Stream {
	if n < 0 {
		panic(fmt.Sprintf("rand: a %v stream of %d elements", kind, n))
	}
	return &Stream{g: g, kind: kind, n: n, held: -1}
}

// Uniform32Stream returns a stream of the fill g.Uniform32(dst, from, to)
// with len(dst) = n. Invalid bounds panic, as in Uniform32.
func (g *Generator) Uniform32Stream(n int, from, to float64) *Stream {
	checkUniform(from, to, math.MaxFloat32)
	s := g.newStream(streamUniform32, n)
	s.f32 = float32(from)
	s.r32 = float32(to) - s.f32
	return s
}

// Uniform64Stream returns a stream of the fill g.Uniform64(dst, from, to)
// with len(dst) = n.
func (g *Generator) Uniform64Stream(n int, from, to float64) *Stream {
	checkUniform(from, to, math.MaxFloat64)
	s := g.newStream(streamUniform64, n)
	s.f64, s.r64 = from, to-from
	return s
}

// Normal32Stream returns a stream of the fill g.Normal32(dst, mean, std)
// with len(dst) = n. A negative std panics, as in Normal32.
func (g *Generator) Normal32Stream(n int, mean, std float64) *Stream {
	checkStd(std)
	s := g.newStream(streamNormal32, n)
	s.f64, s.r64 = mean, std
	s.f32, s.r32 = float32(mean), float32(std)
	return s
}

// Normal64Stream returns a stream of the fill g.Normal64(dst, mean, std)
// with len(dst) = n.
func (g *Generator) Normal64Stream(n int, mean, std float64) *Stream {
	checkStd(std)
	s := g.newStream(streamNormal64, n)
	s.f64, s.r64 = mean, std
	return s
}

// Len returns the number of elements of the whole fill.
func (s *Stream) Len() int { return s.n }

// Pos returns the number of elements read or skipped so far.
func (s *Stream) Pos() int { return s.pos }

func (s *Stream) advance(op string, k int, wide bool) {
	if wide != s.kind.wide() {
		panic(fmt.Sprintf("rand: %s on a %v stream", op, s.kind))
	}
	if k < 0 || k > s.n-s.pos {
		panic(fmt.Sprintf("rand: %s of %d elements at %d of a %v stream of %d", op, k, s.pos, s.kind, s.n))
	}
}

// Read32 writes the next len(dst) elements of a float32 stream into dst.
// Reading past the end, or from a float64 stream, panics. Large reads
// transform their blocks on the engine's worker pool, as Normal32 does.
func (s *Stream) Read32(dst []float32) {
	s.advance("Read32", len(dst), false)
	switch {
	case s.kind == streamUniform32:
		s.g.uniform32(dst, s.f32, s.r32)
	case s.n < 16:
		for i := range dst {
			dst[i] = float32(s.g.normalDouble(s.f64, s.r64))
		}
	default:
		s.normal32(dst)
	}
	s.pos += len(dst)
}

// Read64 writes the next len(dst) elements of a float64 stream into dst.
func (s *Stream) Read64(dst []float64) {
	s.advance("Read64", len(dst), true)
	switch {
	case s.kind == streamUniform64:
		s.g.uniform64(dst, s.f64, s.r64)
	case s.n < 16:
		for i := range dst {
			dst[i] = s.g.normalDouble(s.f64, s.r64)
		}
	default:
		s.normal64(dst)
	}
	s.pos += len(dst)
}

// Skip passes over the next k elements without computing them.
func (s *Stream) Skip(k int) {
	s.advance("Skip", k, s.kind.wide())
	switch {
	case s.kind == streamUniform32:
		s.g.discard(k)
	case s.kind == streamUniform64:
		s.g.discard(2 * k)
	case s.n < 16:
		// Each sample uses or refills the cached one: draw them all.
		for range k {
			s.g.normalDouble(s.f64, s.r64)
		}
	}
	// Normal fills of 16 or more elements draw lazily (drawn, skipTo).
	s.pos += k
}

// Finish skips the rest of the fill, leaving the generator as the whole
// fill leaves it. It may be called more than once.
func (s *Stream) Finish() {
	s.Skip(s.n - s.pos)
	if (s.kind == streamNormal32 || s.kind == streamNormal64) && s.n >= 16 {
		s.skipTo(s.n)
		if s.n%16 != 0 && !s.tailDrawn {
			s.g.discard(16 * s.words())
			s.tailDrawn, s.held = true, -1
		}
	}
}

// words is the number of engine outputs one element draws.
func (s *Stream) words() int {
	if s.kind.wide() {
		return 2
	}
	return 1
}

// skipTo discards the draws of the elements from drawn up to e.
func (s *Stream) skipTo(e int) {
	if s.drawn < e {
		s.g.discard(s.words() * (e - s.drawn))
		s.drawn = e
	}
}

// blockEnd is the end of the elements that come from the fill's blocks of
// 16 draws: all n, or n-16 when the last 16 are redrawn.
func (s *Stream) blockEnd() int {
	if s.n%16 == 0 {
		return s.n
	}
	return s.n - 16
}

// normal32 is Read32 of a float32 normal fill of 16 or more elements.
func (s *Stream) normal32(dst []float32) {
	streamNormal(s, dst, s.blk32[:], s.g.fillUniform01,
		func(v []float32) { normalBlocks(v, s.f32, s.r32) }, func(v []float32) { normalBlocksPar(v, s.f32, s.r32) })
}

// normal64 is normal32 for float64 fills.
func (s *Stream) normal64(dst []float64) {
	streamNormal(s, dst, s.blk64[:], s.g.fillUniform01x64,
		func(v []float64) { normal16Double(v, s.f64, s.r64) }, func(v []float64) { normal64BlocksPar(v, s.f64, s.r64) })
}

// streamNormal reads the next len(dst) elements of a normal fill of 16 or
// more: whole blocks are drawn (fill) and transformed (blocks, in
// parallel) in dst itself, a block that dst holds only part of (or that
// the redrawn tail overwrites in part) in blk, one block of 16 (block).
func streamNormal[T float32 | float64](s *Stream, dst, blk []T, fill, block, blocks func([]T)) {
	p, nb := s.pos, s.blockEnd()
	for len(dst) > 0 {
		if p >= nb { // the redrawn tail
			t0 := s.n - 16
			if !s.tailDrawn {
				s.skipTo(s.n)
				fill(blk)
				block(blk)
				s.tailDrawn, s.held = true, t0
			}
			c := copy(dst, blk[p-t0:])
			dst, p = dst[c:], p+c
			continue
		}
		b := p &^ 15
		if p == b && len(dst) >= 16 && nb-p >= 16 {
			k := min(len(dst), nb-p) &^ 15
			s.skipTo(p)
			fill(dst[:k])
			blocks(dst[:k])
			s.drawn = p + k
			dst, p = dst[k:], p+k
			continue
		}
		if s.held != b {
			s.skipTo(b)
			fill(blk)
			block(blk)
			s.drawn, s.held = b+16, b
		}
		c := copy(dst[:min(len(dst), nb-p)], blk[p-b:])
		dst, p = dst[c:], p+c
	}
}

// discard advances the engine by k outputs, as k calls of Uint32 would,
// without tempering them.
func (g *Generator) discard(k int) {
	for k > 0 {
		k -= len(g.block(k))
	}
}
