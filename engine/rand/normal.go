package rand

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// normal_ on the CPU (templates::cpu::normal_kernel in
// ATen/native/cpu/DistributionTemplates.h) has three paths, chosen by dtype,
// size and contiguity:
//
//   - float32, at least 16 contiguous elements: normal_fill_AVX2. Fill the
//     whole buffer with float uniforms (one 32-bit draw each), transform each
//     complete block of 16 in place with the AVX2 Box-Muller (normal16AVX2,
//     or its assembly twin normalBlocksAVX2 on CPUs with AVX2 and FMA), and
//     if the size is not a multiple of 16, draw 16 fresh uniforms into the
//     last 16 elements and transform them again. mean and std are rounded to
//     float32 first.
//   - float64 (and bfloat16/float16), at least 16 contiguous elements:
//     normal_fill, the same scheme with 64-bit draws and the C library's
//     double log, sin and cos (here aorLog, log.go, and the correctly
//     rounded sincos, sincos.go).
//   - fewer than 16 elements (or non-contiguous): at::normal_distribution<double>
//     per element, which uses and refills the generator's cached second
//     Box-Muller sample, then rounds to the tensor's type.
//
// The cache is only touched by the third path, so the number of draws a
// normal_ call makes depends on its size and on the cache: the functions here
// reproduce all of it.

// normalGrain is the number of 16-element blocks below which the
// Box-Muller transform stays on the calling goroutine (a block costs about
// a microsecond in portable Go), normalGrainAVX2 that of the assembly
// float32 transform (about 25 ns a block).
const (
	normalGrain     = 256
	normalGrainAVX2 = 8192
)

// normalDouble is at::normal_distribution<double>(mean, std)(generator)
// (ATen/core/DistributionsHelper.h): Box-Muller on two 53-bit uniforms, the
// sine sample cached for the next call.
func (g *Generator) normalDouble(mean, std float64) float64 {
	if g.normalValid {
		g.normalValid = false
		// transformation::normal: val*std + mean, one FMA in the AVX2 build.
		return math.FMA(g.normalNext, std, mean)
	}
	u1 := g.float64Uniform01()
	u2 := g.float64Uniform01()
	r := math.Sqrt(float64(aorLog(1-u2) * -2))
	theta := float64(2*math.Pi) * u1
	s, c := sincos(theta)
	g.normalNext = float64(r * s)
	g.normalValid = true
	return math.FMA(float64(r*c), std, mean)
}

func checkStd(std float64) {
	if !(std >= 0) {
		panic(fmt.Sprintf("rand: normal expects std >= 0.0, got std=%v", std))
	}
}

// Normal32 fills dst with samples of N(mean, std²), as Tensor.normal_(mean,
// std) on a contiguous float32 tensor (and so torch.randn, nn.init.normal_
// and nn.Embedding's initialisation). mean and std are float64 because
// PyTorch takes them as Python floats and, for tensors of fewer than 16
// elements, computes in double with them unrounded.
//
// Draws: len(dst) 32-bit outputs, plus 16 more when len(dst) >= 16 is not a
// multiple of 16; below 16 elements, two 64-bit draws per pair of samples
// (the cached sample is used first). A negative std panics.
func (g *Generator) Normal32(dst []float32, mean, std float64) {
	checkStd(std)
	n := len(dst)
	if n < 16 {
		for i := range dst {
			dst[i] = float32(g.normalDouble(mean, std))
		}
		return
	}
	m, s := float32(mean), float32(std)
	g.fillUniform01(dst)
	normalBlocksPar(dst[:n&^15], m, s)
	if n%16 != 0 {
		tail := dst[n-16:]
		g.fillUniform01(tail)
		normalBlocks(tail, m, s)
	}
}

// normalBlocksPar applies normalBlocks to d (a multiple of 16 elements).
// The draws are sequential; the blocks of 16 are independent, so the
// transform runs on the shared worker pool with the same result.
func normalBlocksPar(d []float32, mean, std float32) {
	grain := normalGrain
	if useAVX2 {
		grain = normalGrainAVX2
	}
	parallel.For(len(d)/16, grain, func(lo, hi int) {
		normalBlocks(d[16*lo:16*hi], mean, std)
	})
}

// normal64BlocksPar applies normal16Double to each block of 16 elements of
// d (a multiple of 16 elements), on the worker pool as normalBlocksPar.
func normal64BlocksPar(d []float64, mean, std float64) {
	parallel.For(len(d)/16, normalGrain, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			normal16Double(d[16*b:16*b+16], mean, std)
		}
	})
}

// normalBlocksGo applies normal16AVX2 to each block of 16 elements of d.
func normalBlocksGo(d []float32, mean, std float32) {
	m, s := splat(mean), splat(std)
	for ; len(d) >= 16; d = d[16:] {
		normal16AVX2(d[:16], &m, &s)
	}
}

// Normal64 fills dst with samples of N(mean, std²), as Tensor.normal_(mean,
// std) on a contiguous float64 tensor (torch.randn(..., dtype=torch.float64)).
// Draws: one 64-bit output per element, plus 16 more when len(dst) >= 16 is
// not a multiple of 16; below 16 elements as Normal32.
func (g *Generator) Normal64(dst []float64, mean, std float64) {
	checkStd(std)
	n := len(dst)
	if n < 16 {
		for i := range dst {
			dst[i] = g.normalDouble(mean, std)
		}
		return
	}
	g.fillUniform01x64(dst)
	normal64BlocksPar(dst[:n&^15], mean, std)
	if n%16 != 0 {
		tail := dst[n-16:]
		g.fillUniform01x64(tail)
		normal16Double(tail, mean, std)
	}
}

// normal16Double is normal_fill_16<double>: the scalar Box-Muller of
// DistributionTemplates.h, which GCC vectorises four lanes wide around scalar
// calls to log and sincos; radius*cos (and *sin) is rounded, then *std+mean
// is one FMA.
func normal16Double(d []float64, mean, std float64) {
	d = d[:16]
	for j := 0; j < 8; j++ {
		u1 := 1 - d[j]
		u2 := d[j+8]
		radius := math.Sqrt(float64(aorLog(u1) * -2))
		theta := float64(2*math.Pi) * u2
		s, c := sincos(theta)
		d[j] = math.FMA(float64(radius*c), std, mean)
		d[j+8] = math.FMA(float64(radius*s), std, mean)
	}
}
