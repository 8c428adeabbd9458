package rand

// The engine is the 32-bit Mersenne Twister MT19937 exactly as
// ATen/core/MT19937RNGEngine.h (at::mt19937) implements it. The sequence is the
// standard one (std::mt19937 gives the same numbers for the same 32-bit seed);
// what is PyTorch's own is the bookkeeping that torch.get_rng_state exposes:
// "left" counts down from 1 after seeding, so the first draw twists.

const (
	mtN         = 624
	mtM         = 397
	mtMatrixA   = 0x9908b0df
	mtUpperMask = 0x80000000
	mtLowerMask = 0x7fffffff
)

// initMT is at::mt19937::init_with_uint32. The 64-bit seed is kept for
// InitialSeed, but only its low 32 bits reach the state, as in PyTorch
// (torch.manual_seed(2**32 + 5) and torch.manual_seed(5) draw the same numbers).
func (g *Generator) initMT(seed uint64) {
	g.seed = seed
	g.seeded = true
	g.mt[0] = uint32(seed)
	for j := 1; j < mtN; j++ {
		prev := g.mt[j-1]
		g.mt[j] = 1812433253*(prev^prev>>30) + uint32(j)
	}
	g.left = 1
	g.next = 0
}

// twist is at::mt19937's twist: (mixBits(u, v) >> 1) ^ (v&1 ? MATRIX_A : 0),
// written without a branch (the low bit is random, so a branch mispredicts
// half the time).
func twist(u, v uint32) uint32 {
	y := u&mtUpperMask | v&mtLowerMask
	return y>>1 ^ -(v&1)&mtMatrixA
}

// nextState regenerates the 624 state words (at::mt19937::next_state). It
// leaves left one higher than PyTorch does (625, not 624) because Uint32
// decrements after twisting rather than before; the states observable between
// draws are PyTorch's.
func (g *Generator) nextState() {
	s := &g.mt
	g.left = mtN + 1
	g.next = 0
	lo, hi := s[:mtN-mtM+1], s[mtM:] // bounds known to the compiler
	for j := range mtN - mtM {
		lo[j] = hi[j] ^ twist(lo[j], lo[j+1])
	}
	for j := mtN - mtM; j < mtN-1; j++ {
		s[j] = s[j+mtM-mtN] ^ twist(s[j], s[j+1])
	}
	s[mtN-1] = s[mtM-1] ^ twist(s[mtN-1], s[0])
}

// Uint32 returns the next 32-bit output of the engine: CPUGeneratorImpl::random().
// PyTorch decrements left and twists when it reaches 0; twisting when it is
// 1 and decrementing after is the same.
func (g *Generator) Uint32() uint32 {
	if g.left <= 1 {
		g.nextState()
	}
	g.left--
	y := g.mt[g.next]
	g.next++
	return temper(y)
}

// temper is MT19937's output transform of a state word.
func temper(y uint32) uint32 {
	y ^= y >> 11
	y ^= y << 7 & 0x9d2c5680
	y ^= y << 15 & 0xefc60000
	y ^= y >> 18
	return y
}

// block returns the untempered state words of the next draws, at most n and
// at least one (for n >= 1), and advances the engine past them, exactly as
// that many Uint32 calls would. Bulk fills use it to run their loops over
// the state array without a call per draw.
func (g *Generator) block(n int) []uint32 {
	if n <= 0 {
		return nil
	}
	if g.left <= 1 {
		g.nextState()
	}
	if avail := int(g.left) - 1; n > avail {
		n = avail
	}
	w := g.mt[g.next : int(g.next)+n]
	g.next += uint32(n)
	g.left -= int32(n)
	return w
}

// fillUint32 sets dst to the next len(dst) outputs of the engine.
func (g *Generator) fillUint32(dst []uint32) {
	for len(dst) > 0 {
		w := g.block(len(dst))
		for i, y := range w {
			dst[i] = temper(y)
		}
		dst = dst[len(w):]
	}
}

// Uint64 returns CPUGeneratorImpl::random64(): two engine outputs, the first
// in the high half (detail::make64BitsFrom32Bits(hi, lo)).
func (g *Generator) Uint64() uint64 {
	hi := g.Uint32()
	lo := g.Uint32()
	return uint64(hi)<<32 | uint64(lo)
}
