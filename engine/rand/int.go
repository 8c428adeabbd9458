package rand

import "fmt"

// RandInt64 fills dst with integers uniform in [low, high), as
// torch.randint(low, high, size) (Tensor.random_(low, high)) on a contiguous
// int64 tensor.
//
// PyTorch (uniform_int_from_to_distribution in ATen/core/DistributionsHelper.h,
// transformation::uniform_int_from_to) reduces one draw modulo the range,
// without rejection: a 32-bit draw when high-low < 2^32, a 64-bit draw
// otherwise. The modulo bias is PyTorch's and is kept. high <= low panics.
func (g *Generator) RandInt64(dst []int64, low, high int64) {
	if high <= low {
		panic(fmt.Sprintf("rand: randint expects low < high, got low=%d high=%d", low, high))
	}
	r := uint64(high) - uint64(low)
	if r >= 1<<32 {
		for i := range dst {
			dst[i] = int64(g.Uint64()%r + uint64(low))
		}
		return
	}
	var buf [256]uint32
	for len(dst) > 0 {
		b := buf[:min(len(dst), len(buf))]
		g.fillUint32(b)
		for i, v := range b {
			dst[i] = int64(uint64(v)%r + uint64(low))
		}
		dst = dst[len(b):]
	}
}

// Randperm returns a random permutation of 0..n-1, as torch.randperm(n) on the
// CPU (int64). PyTorch 1.13 (randperm_cpu in ATen/native/TensorFactories.cpp)
// runs the same Fisher-Yates shuffle for every n: for i in [0, n-1) swap
// element i with element i + Uint32() % (n-i). That is n-1 32-bit draws, and
// for n > 2^32 the offsets cannot reach past 2^32 - PyTorch's behaviour,
// reproduced. n < 0 panics.
func (g *Generator) Randperm(n int) []int64 {
	if n < 0 {
		panic(fmt.Sprintf("rand: randperm expects n >= 0, got %d", n))
	}
	p := make([]int64, n)
	for i := range p {
		p[i] = int64(i)
	}
	var buf [256]uint32
	for i := 0; i < n-1; {
		b := buf[:min(n-1-i, len(buf))]
		g.fillUint32(b)
		for _, v := range b {
			z := int(uint64(v) % uint64(n-i))
			p[i], p[i+z] = p[i+z], p[i]
			i++
		}
	}
	return p
}
