//go:build ignore

// gen_asm writes the amd64 assembly kernels of package vmath, once for
// AVX-512 (16 float32 lanes in Z registers, tails under a K1 mask) and once
// for AVX2 with FMA (8 lanes in Y registers, tails under a VMASKMOVPS mask in
// Y15), from one description of each kernel, so that the two variants cannot
// drift apart. Run it with `go generate` in this directory.
//
// Register conventions in every kernel:
//
//	CX        elements left
//	DI        the first slice (output or in-place operand)
//	SI, DX, R8  the following slices, in argument order
//	AX        pointer to a constant block (optimizer kernels)
//	R11       scratch for the tail mask
//	V0..V14   vector registers (Z on AVX-512, Y on AVX2)
//	V15       the AVX2 tail mask (all ones in the lanes that exist)
//	K1        the AVX-512 tail mask
//
// The main loop handles whole vectors; the remaining 1..W-1 elements go
// through the same instructions once more with masked loads and stores,
// which neither read nor write past the slices (masked-off lanes do not
// fault), so every element gets exactly the same arithmetic wherever it
// sits in the slice.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

type isa struct {
	name string // suffix of the Go function names
	w    int    // float32 lanes
	vb   int    // bytes per vector
	r    string // vector register prefix
	half string // prefix of the register holding the low half
	k512 bool
}

var (
	avx512 = isa{name: "AVX512", w: 16, vb: 64, r: "Z", half: "Y", k512: true}
	avx2   = isa{name: "AVX2", w: 8, vb: 32, r: "Y", half: "X"}
)

type gen struct {
	isa
	b    bytes.Buffer
	tail bool
	used map[string]uint32 // constants referenced, name -> bits
	// used64 are the float64 constants (8 lanes of 64 bits).
	used64 map[string]uint64
	lbl    int
}

func (g *gen) op(format string, args ...any) {
	fmt.Fprintf(&g.b, "\t"+format+"\n", args...)
}

func (g *gen) comment(s string) { fmt.Fprintf(&g.b, "\t// %s\n", s) }

// v names vector register i; h names its low half.
func (g *gen) v(i int) string { return fmt.Sprintf("%s%d", g.r, i) }
func (g *gen) h(i int) string { return fmt.Sprintf("%s%d", g.half, i) }

// c references a constant vector (every lane holds f).
func (g *gen) c(name string, f float32) string {
	g.used[name] = math.Float32bits(f)
	return name + "<>(SB)"
}

// c64 references a constant vector of float64 lanes, each f.
func (g *gen) c64(name string, f float64) string {
	g.used64[name] = math.Float64bits(f)
	return name + "<>(SB)"
}

// horner64 is horner in float64 lanes.
func (g *gen) horner64(dst, x int, prefix string, cs []float64) {
	g.op("VMOVUPD %s, %s", g.c64(fmt.Sprintf("%s%d", prefix, len(cs)-1), cs[0]), g.v(dst))
	for i := 1; i < len(cs); i++ {
		g.op("VFMADD213PD %s, %s, %s", g.c64(fmt.Sprintf("%s%d", prefix, len(cs)-1-i), cs[i]), g.v(x), g.v(dst))
	}
}

// ci references a constant vector given by its bits.
func (g *gen) ci(name string, bits uint32) string {
	g.used[name] = bits
	return name + "<>(SB)"
}

func (g *gen) load(dst int, mem string) {
	switch {
	case !g.tail:
		g.op("VMOVUPS %s, %s", mem, g.v(dst))
	case g.k512:
		g.op("VMOVUPS.Z %s, K1, %s", mem, g.v(dst))
	default:
		g.op("VMASKMOVPS %s, Y15, %s", mem, g.v(dst))
	}
}

// loadFill loads like load but leaves fill in the lanes past the tail
// (using tmp on AVX2).
func (g *gen) loadFill(dst int, mem, fill string, tmp int) {
	switch {
	case !g.tail:
		g.op("VMOVUPS %s, %s", mem, g.v(dst))
	case g.k512:
		g.op("VMOVUPS %s, %s", fill, g.v(dst))
		g.op("VMOVUPS %s, K1, %s", mem, g.v(dst))
	default:
		g.op("VMASKMOVPS %s, Y15, %s", mem, g.v(dst))
		g.op("VMOVUPS %s, %s", fill, g.v(tmp))
		g.op("VBLENDVPS Y15, %s, %s, %s", g.v(dst), g.v(tmp), g.v(dst))
	}
}

func (g *gen) store(src int, mem string) {
	switch {
	case !g.tail:
		g.op("VMOVUPS %s, %s", g.v(src), mem)
	case g.k512:
		g.op("VMOVUPS %s, K1, %s", g.v(src), mem)
	default:
		g.op("VMASKMOVPS %s, Y15, %s", g.v(src), mem)
	}
}

// zeroTail clears the lanes past the tail (before they enter a sum).
func (g *gen) zeroTail(r int) {
	switch {
	case !g.tail:
	case g.k512:
		g.op("VMOVAPS.Z %s, K1, %s", g.v(r), g.v(r))
	default:
		g.op("VANDPS Y15, %s, %s", g.v(r), g.v(r))
	}
}

// zeroTail64 clears the float64 lanes of lo and hi (the low and high
// halves of a float32 vector, widened) past the tail, using t0 and t1.
func (g *gen) zeroTail64(lo, hi, t0, t1 int) {
	switch {
	case !g.tail:
	case g.k512:
		g.op("VMOVAPD.Z %s, K1, %s", g.v(lo), g.v(lo))
		g.op("KSHIFTRW $8, K1, K2")
		g.op("VMOVAPD.Z %s, K2, %s", g.v(hi), g.v(hi))
	default:
		// The float32 lane mask, sign-extended to 64-bit lanes.
		g.op("VPMOVSXDQ X15, Y%d", t0)
		g.op("VEXTRACTI128 $1, Y15, X%d", t1)
		g.op("VPMOVSXDQ X%d, Y%d", t1, t1)
		g.op("VANDPD Y%d, %s, %s", t0, g.v(lo), g.v(lo))
		g.op("VANDPD Y%d, %s, %s", t1, g.v(hi), g.v(hi))
	}
}

// selectLT sets dst = a < thr ? small : dst, using tmp on AVX2.
func (g *gen) selectLT(dst, small, a int, thr string, tmp int) {
	if g.k512 {
		g.op("VCMPPS $1, %s, %s, K2", thr, g.v(a))
		g.op("VMOVAPS %s, K2, %s", g.v(small), g.v(dst))
	} else {
		g.op("VCMPPS $1, %s, %s, %s", thr, g.v(a), g.v(tmp))
		g.op("VBLENDVPS %s, %s, %s, %s", g.v(tmp), g.v(small), g.v(dst), g.v(dst))
	}
}

// selectNeg sets dst = signbit(x) ? neg : dst.
func (g *gen) selectNeg(dst, neg, x int) {
	if g.k512 {
		g.op("VPMOVD2M %s, K2", g.v(x))
		g.op("VMOVAPS %s, K2, %s", g.v(neg), g.v(dst))
	} else {
		g.op("VBLENDVPS %s, %s, %s, %s", g.v(x), g.v(neg), g.v(dst), g.v(dst))
	}
}

// horner evaluates the polynomial with coefficients cs (highest degree
// first) at x into dst, one FMA per coefficient.
func (g *gen) horner(dst, x int, prefix string, cs []float32) {
	g.op("VMOVUPS %s, %s", g.c(fmt.Sprintf("%s%d", prefix, len(cs)-1), cs[0]), g.v(dst))
	for i := 1; i < len(cs); i++ {
		g.op("VFMADD213PS %s, %s, %s", g.c(fmt.Sprintf("%s%d", prefix, len(cs)-1-i), cs[i]), g.v(x), g.v(dst))
	}
}

// cvtAdd converts the float32 lanes of src to float64 and adds them into the
// accumulators a0 (low half) and a1 (high half), using t0 and t1.
func (g *gen) cvtAdd(src, a0, a1, t0, t1 int) {
	g.cvt(src, t0, t1)
	g.op("VADDPD %s, %s, %s", g.v(t0), g.v(a0), g.v(a0))
	g.op("VADDPD %s, %s, %s", g.v(t1), g.v(a1), g.v(a1))
}

// cvt widens the low and high halves of src to float64 in lo and hi.
func (g *gen) cvt(src, lo, hi int) {
	g.op("VCVTPS2PD %s, %s", g.h(src), g.v(lo))
	if g.k512 {
		g.op("VEXTRACTF32X8 $1, %s, %s", g.v(src), g.h(hi))
	} else {
		g.op("VEXTRACTF128 $1, %s, %s", g.v(src), g.h(hi))
	}
	g.op("VCVTPS2PD %s, %s", g.h(hi), g.v(hi))
}

// hsumPD adds the float64 lanes of register a into X<a>'s low lane, using t.
func (g *gen) hsumPD(a, t int) {
	if g.k512 {
		g.op("VEXTRACTF64X4 $1, Z%d, Y%d", a, t)
		g.op("VADDPD Y%d, Y%d, Y%d", t, a, a)
	}
	g.op("VEXTRACTF128 $1, Y%d, X%d", a, t)
	g.op("VADDPD X%d, X%d, X%d", t, a, a)
	g.op("VPERMILPD $1, X%d, X%d", a, t)
	g.op("VADDSD X%d, X%d, X%d", t, a, a)
}

// Cephes expf: exp(r) = 1 + r + r²·P(r) on |r| <= ln2/2.
var expP = []float32{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}

// exp sets d = e^s; it clobbers t0, t1, t2 (d may be s; the others must be
// distinct). NaN propagates; the argument is clamped to [-104, 89], outside
// which the float32 result is 0 or +Inf anyway.
//
//	x = clamp(s); n = round(x·log2e); r = x - n·ln2 (two FMAs, Cody-Waite)
//	d = (1 + r + r²·P(r))·2^n
//
// AVX-512 scales with VSCALEFPS, which rounds once into the subnormals and
// overflows to +Inf. AVX2 builds 2^n from exponent bits in two halves,
// 2^(n>>1)·2^(n-(n>>1)), so that n in [-150, 128] never leaves the normal
// exponent range before the final (single-rounding) multiply.
func (g *gen) exp(d, s, t0, t1, t2 int) {
	g.comment(fmt.Sprintf("%s = exp(%s)", g.v(d), g.v(s)))
	g.op("VMOVUPS %s, %s", g.c("expHi", 89), g.v(t0))
	g.op("VMINPS %s, %s, %s", g.v(s), g.v(t0), g.v(t0)) // NaN in s wins
	g.op("VMOVUPS %s, %s", g.c("expLo", -104), g.v(t1))
	g.op("VMAXPS %s, %s, %s", g.v(t0), g.v(t1), g.v(t0))
	g.op("VMULPS %s, %s, %s", g.c("log2e", float32(math.Log2E)), g.v(t0), g.v(t1))
	if g.k512 {
		g.op("VRNDSCALEPS $0, %s, %s", g.v(t1), g.v(t1))
	} else {
		g.op("VROUNDPS $0, %s, %s", g.v(t1), g.v(t1))
	}
	ln2hi := float32(math.Ln2)
	ln2lo := float32(math.Ln2 - float64(ln2hi))
	g.op("VFNMADD231PS %s, %s, %s", g.c("ln2hi", ln2hi), g.v(t1), g.v(t0))
	g.op("VFNMADD231PS %s, %s, %s", g.c("ln2lo", ln2lo), g.v(t1), g.v(t0)) // t0 = r
	g.horner(t2, t0, "expP", expP)
	g.op("VMULPS %s, %s, %s", g.v(t0), g.v(t0), g.v(d))
	g.op("VFMADD213PS %s, %s, %s", g.v(t0), g.v(d), g.v(t2)) // P·r² + r
	g.op("VADDPS %s, %s, %s", g.c("one", 1), g.v(t2), g.v(t2))
	if g.k512 {
		g.op("VSCALEFPS %s, %s, %s", g.v(t1), g.v(t2), g.v(d))
		return
	}
	g.op("VCVTPS2DQ %s, %s", g.v(t1), g.v(t1))
	g.op("VPSRAD $1, %s, %s", g.v(t1), g.v(t0))
	g.op("VPSUBD %s, %s, %s", g.v(t0), g.v(t1), g.v(t1))
	g.op("VPADDD %s, %s, %s", g.ci("bias127", 127), g.v(t0), g.v(t0))
	g.op("VPSLLD $23, %s, %s", g.v(t0), g.v(t0))
	g.op("VPADDD %s, %s, %s", g.ci("bias127", 127), g.v(t1), g.v(t1))
	g.op("VPSLLD $23, %s, %s", g.v(t1), g.v(t1))
	g.op("VMULPS %s, %s, %s", g.v(t0), g.v(t2), g.v(d))
	g.op("VMULPS %s, %s, %s", g.v(t1), g.v(d), g.v(d))
}

// Cephes logf: ln(1+f) = f - f²/2 + f³·P(f) on f in [√½-1, √2-1].
var logP = []float32{7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
	-1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1}

// log sets V1 = ln(V0), Cephes logf: x = m·2^e with m in [√½, √2) (a
// subnormal x is scaled by 2^23 first), f = m-1 (exact), and ln x =
// f - f²/2 + f³·P(f) + e·ln2, ln2 split as 0.693359375 - 2.12194440e-4
// so that e·ln2 adds without rounding error. ln(±0) = -Inf, ln(x<0) = NaN,
// ln(+Inf) = +Inf, NaN stays NaN. Clobbers V2-V10.
func (g *gen) log() {
	const x, d, xs, eadj, e, m, msk, f, z = 0, 1, 2, 3, 4, 5, 6, 7, 8
	const y, t = 9, 10
	// blendIf sets dst = (a pred b) ? val : dst.
	blendIf := func(pred int, b string, a int, val string, dst int) {
		if g.k512 {
			g.op("VCMPPS $%d, %s, %s, K2", pred, b, g.v(a))
			// VMOVUPS: val may be a constant in memory, and Go's
			// linker aligns a symbol to at most 32 bytes; a masked
			// VMOVAPS from it faults on a Z register.
			g.op("VMOVUPS %s, K2, %s", val, g.v(dst))
		} else {
			g.op("VCMPPS $%d, %s, %s, %s", pred, b, g.v(a), g.v(t))
			g.op("VBLENDVPS %s, %s, %s, %s", g.v(t), val, g.v(dst), g.v(dst))
		}
	}
	g.comment("subnormals: x·2^23, and 23 off the exponent")
	g.op("VMOVAPS %s, %s", g.v(x), g.v(xs))
	g.op("VMULPS %s, %s, %s", g.c("two23", 0x1p23), g.v(x), g.v(y))
	g.op("VXORPS %s, %s, %s", g.v(eadj), g.v(eadj), g.v(eadj))
	blendIf(1, g.ci("minNormal", 0x00800000), x, g.v(y), xs)
	blendIf(1, g.ci("minNormal", 0x00800000), x, g.c("logAdj", 23), eadj)
	g.comment("e = exponent - 126 (m in [0.5, 1)), m = mantissa | 0.5")
	g.op("VPSRLD $23, %s, %s", g.v(xs), g.v(e))
	g.op("VPSUBD %s, %s, %s", g.ci("bias126", 126), g.v(e), g.v(e))
	g.op("VCVTDQ2PS %s, %s", g.v(e), g.v(e))
	g.op("VSUBPS %s, %s, %s", g.v(eadj), g.v(e), g.v(e))
	g.op("VANDPS %s, %s, %s", g.ci("mantissa", 0x007fffff), g.v(xs), g.v(m))
	g.op("VORPS %s, %s, %s", g.c("half", 0.5), g.v(m), g.v(m))
	g.comment("m < √½: f = 2m-1, e-1; else f = m-1 (both exact)")
	g.op("VSUBPS %s, %s, %s", g.c("one", 1), g.v(m), g.v(f))
	g.op("VXORPS %s, %s, %s", g.v(msk), g.v(msk), g.v(msk))
	blendIf(1, g.c("sqrtHalf", float32(math.Sqrt2/2)), m, g.v(m), msk)
	g.op("VADDPS %s, %s, %s", g.v(msk), g.v(f), g.v(f))
	g.op("VXORPS %s, %s, %s", g.v(msk), g.v(msk), g.v(msk))
	blendIf(1, g.c("sqrtHalf", float32(math.Sqrt2/2)), m, g.c("one", 1), msk)
	g.op("VSUBPS %s, %s, %s", g.v(msk), g.v(e), g.v(e))
	g.comment("ln(1+f) = f + (f·z·P(f) - z/2 - e·2.12194440e-4) + e·0.693359375, z = f²")
	g.op("VMULPS %s, %s, %s", g.v(f), g.v(f), g.v(z))
	g.horner(y, f, "logP", logP)
	g.op("VMULPS %s, %s, %s", g.v(f), g.v(y), g.v(y))
	g.op("VMULPS %s, %s, %s", g.v(z), g.v(y), g.v(y))
	g.op("VFMADD231PS %s, %s, %s", g.c("logQ1", -2.12194440e-4), g.v(e), g.v(y))
	g.op("VFMADD231PS %s, %s, %s", g.c("mhalf", -0.5), g.v(z), g.v(y))
	g.op("VADDPS %s, %s, %s", g.v(y), g.v(f), g.v(d))
	g.op("VFMADD231PS %s, %s, %s", g.c("logQ2", 0.693359375), g.v(e), g.v(d))
	g.comment("+Inf, zeros, negatives, NaN")
	blendIf(0, g.ci("posInf", 0x7f800000), x, g.ci("posInf", 0x7f800000), d)
	blendIf(0, g.ci("zero", 0), x, g.ci("negInf", 0xff800000), d)
	blendIf(1, g.ci("zero", 0), x, g.ci("qnan", 0x7fc00000), d)
	blendIf(3, g.v(x), x, g.v(x), d)
}

// fdlibm's __kernel_sin and __kernel_cos coefficients (float64).
var (
	sinS = []float64{1.58969099521155010221e-10, -2.50507602534068634195e-08, 2.75573137070700676789e-06,
		-1.98412698298579493134e-04, 8.33333333332248946124e-03, -1.66666666666666324348e-01}
	cosC = []float64{-1.13596475577881948265e-11, 2.08757232129817482790e-09, -2.75573143513906633035e-07,
		2.48015872894767294178e-05, -1.38888888888741095749e-03, 4.16666666666666019037e-02}
)

// sinMax is the largest |x| the vector sine and cosine reduce exactly:
// there the quadrant j = round(x·2/π) has at most 19 bits, and j times the
// 33-bit head of π/2 is exact in float64.
const sinMax = 1 << 19

// sincos is the kernel of Sin (cos false) or Cos: the float32 lanes
// widened to float64, x = j·π/2 + r with r in [-π/4, π/4] (a two-part
// Cody-Waite reduction, exact to far below float32's precision for |x| <=
// sinMax), the sine or cosine polynomial of r by j's low two bits, and
// one rounding to float32. It returns whether a lane exceeded sinMax (its
// result is then not to be trusted; the Go wrapper recomputes the slice).
func sincos(name string, cos bool) kernel {
	const j, r, z, p, sp, cp, m, t, msk = 3, 4, 5, 6, 7, 8, 9, 10, 11
	half := func(g *gen, h int) {
		g.op("VMULPD %s, %s, %s", g.c64("twoOverPi", 2/math.Pi), g.v(h), g.v(j))
		if g.k512 {
			g.op("VRNDSCALEPD $0, %s, %s", g.v(j), g.v(j))
		} else {
			g.op("VROUNDPD $0, %s, %s", g.v(j), g.v(j))
		}
		g.op("VMOVAPD %s, %s", g.v(h), g.v(r))
		g.op("VFNMADD231PD %s, %s, %s", g.c64("pio2Hi", 1.57079632673412561417e+00), g.v(j), g.v(r))
		g.op("VFNMADD231PD %s, %s, %s", g.c64("pio2Lo", 6.07710050650619224932e-11), g.v(j), g.v(r))
		g.op("VMULPD %s, %s, %s", g.v(r), g.v(r), g.v(z))
		g.horner64(p, z, "sinS", sinS)
		g.op("VMULPD %s, %s, %s", g.v(z), g.v(r), g.v(t))
		g.op("VMOVAPD %s, %s", g.v(r), g.v(sp))
		g.op("VFMADD231PD %s, %s, %s", g.v(p), g.v(t), g.v(sp)) // r + r·z·S(z)
		g.horner64(p, z, "cosC", cosC)
		g.op("VMULPD %s, %s, %s", g.v(z), g.v(z), g.v(t))
		g.op("VMOVUPD %s, %s", g.c64("one64", 1), g.v(cp))
		g.op("VFNMADD231PD %s, %s, %s", g.c64("half64", 0.5), g.v(z), g.v(cp))
		g.op("VFMADD231PD %s, %s, %s", g.v(p), g.v(t), g.v(cp)) // 1 - z/2 + z²·C(z)
		// j's low bits from the mantissa of j + 1.5·2^52; the cosine is the
		// sine a quadrant on.
		g.op("VADDPD %s, %s, %s", g.c64("roundMagic", 0x1.8p52), g.v(j), g.v(m))
		if cos {
			g.op("VADDPD %s, %s, %s", g.c64("one64", 1), g.v(m), g.v(m))
		}
		g.op("VPSLLQ $63, %s, %s", g.v(m), g.v(msk))
		if g.k512 {
			g.op("VPMOVQ2M %s, K2", g.v(msk))
			g.op("VMOVAPD %s, %s", g.v(sp), g.v(h))
			g.op("VMOVAPD %s, K2, %s", g.v(cp), g.v(h))
		} else {
			g.op("VBLENDVPD %s, %s, %s, %s", g.v(msk), g.v(cp), g.v(sp), g.v(h))
		}
		g.op("VPSLLQ $62, %s, %s", g.v(m), g.v(msk))
		g.op("VANDPD %s, %s, %s", g.c64("sign64", math.Copysign(0, -1)), g.v(msk), g.v(msk))
		g.op("VXORPD %s, %s, %s", g.v(msk), g.v(h), g.v(h))
	}
	return kernel{
		name: name, goArgs: "(dst, x []float32) bool", frame: 49,
		ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
		setup: func(g *gen) {
			if g.k512 {
				g.op("KXORW K3, K3, K3")
			} else {
				g.op("VXORPS Y13, Y13, Y13")
			}
		},
		body: func(g *gen, u int) {
			g.load(0, g.mem("SI", 0))
			g.op("VANDPS %s, %s, %s", g.ci("abs", ^uint32(signBit)), g.v(0), g.v(14))
			if g.k512 {
				g.op("VCMPPS $14, %s, %s, K2", g.c("sinMax", sinMax), g.v(14))
				g.op("KORW K2, K3, K3")
			} else {
				g.op("VCMPPS $14, %s, %s, %s", g.c("sinMax", sinMax), g.v(14), g.v(14))
				g.op("VORPS %s, %s, %s", g.v(14), g.v(13), g.v(13))
			}
			g.cvt(0, 1, 2)
			half(g, 1)
			half(g, 2)
			if g.k512 {
				g.op("VCVTPD2PS Z1, Y1")
				g.op("VCVTPD2PS Z2, Y2")
				g.op("VINSERTF32X8 $1, Y2, Z1, Z1")
			} else {
				g.op("VCVTPD2PSY Y1, X1")
				g.op("VCVTPD2PSY Y2, X2")
				g.op("VINSERTF128 $1, X2, Y1, Y1")
			}
			if !cos { // the sign of a zero: sin(-0) = -0
				if g.k512 {
					g.op("VCMPPS $0, %s, %s, K2", g.ci("zero", 0), g.v(0))
					g.op("VMOVAPS %s, K2, %s", g.v(0), g.v(1))
				} else {
					g.op("VCMPPS $0, %s, %s, %s", g.ci("zero", 0), g.v(0), g.v(14))
					g.op("VBLENDVPS %s, %s, %s, %s", g.v(14), g.v(0), g.v(1), g.v(1))
				}
			}
			g.store(1, g.mem("DI", 0))
		},
		finish: func(g *gen) {
			g.flaggedLanesToAX()
			g.op("TESTL AX, AX")
			g.op("SETNE AL")
			g.op("MOVB AL, ret+48(FP)")
		},
	}
}

// recip sets d = 1/s using t (d may be s).
func (g *gen) recip(d, s, t int) {
	g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(t))
	g.op("VDIVPS %s, %s, %s", g.v(s), g.v(t), g.v(d))
}

const signBit = 0x80000000

// Erf: erf(z) = z·P(z²) for |z| < 0.84375 (Erf) or 0.5 (Φ in GELU, where
// 0.5+0.5·erf must not cancel); erfc(z) = e^(-z²)·s·Q(s) with s = 1/(1+z/2)
// above. Weighted least-squares fits, computed with mpmath, with relative
// errors 1.2e-10 (P on [0, 0.84375]) and 3.0e-9 (Q on z in [0.5, 11]) in
// exact arithmetic; coefficients rounded to float32.
var (
	erfP = []float32{8.876217907527462e-05, -0.0008252236293628812, 0.005209887400269508, -0.026862680912017822,
		0.11283750087022781, -0.37612637877464294, 1.128379225730896}
	erfQ = []float32{-0.03387834504246712, 0.08240516483783722, 0.03318009525537491, -0.23944801092147827, 0.1301625370979309,
		0.02818293310701847, 0.19029822945594788, 0.244703009724617, 0.28227484226226807, 0.2820883095264435}
)

// erfcTail sets d = exp(-hi)·(1-lo)·s·Q(s), s = 1/(1+a/2): erfc(a) when
// hi+lo = a² exactly. Clobbers t0..t2 and hi.
func (g *gen) erfcTail(d, a, hi, lo, t0, t1, t2 int) {
	g.op("VXORPS %s, %s, %s", g.ci("sign", signBit), g.v(hi), g.v(hi))
	g.exp(d, hi, t0, t1, t2)
	g.op("VFNMADD231PS %s, %s, %s", g.v(lo), g.v(d), g.v(d)) // e - e·lo
	g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(t0))
	g.op("VFMADD231PS %s, %s, %s", g.c("half", 0.5), g.v(a), g.v(t0))
	g.recip(t0, t0, t1)
	g.horner(t1, t0, "erfQ", erfQ)
	g.op("VMULPS %s, %s, %s", g.v(t0), g.v(t1), g.v(t1))
	g.op("VMULPS %s, %s, %s", g.v(t1), g.v(d), g.v(d))
}

// phi sets d = Φ(x) = 0.5·erfc(-x/√2) for x in register x, and e to
// exp(-x²/2) (before the 0.5). It uses registers x+1..x+13 except those
// named; callers pass x = 0 and keep V14 free.
func (g *gen) phi(d, e, x int) {
	z, az, u, p, xc, hi, lo := 1, 2, 3, 4, 6, 7, 8
	g.op("VMULPS %s, %s, %s", g.c("sqrt1_2", float32(math.Sqrt2/2)), g.v(x), g.v(z))
	g.op("VANDPS %s, %s, %s", g.ci("abs", ^uint32(signBit)), g.v(z), g.v(az))
	g.comment("small |z|: Φ = 0.5 + 0.5·z·P(z²)")
	g.op("VMULPS %s, %s, %s", g.v(z), g.v(z), g.v(u))
	g.horner(p, u, "erfP", erfP)
	g.op("VMULPS %s, %s, %s", g.v(z), g.v(p), g.v(p))
	g.op("VMOVUPS %s, %s", g.c("half", 0.5), g.v(d))
	g.op("VFMADD231PS %s, %s, %s", g.c("half", 0.5), g.v(p), g.v(d))
	g.comment("large |z|: q = 0.5·erfc(|z|) with z² = x²/2 exact, Φ = x<0 ? q : 1-q")
	g.op("VANDPS %s, %s, %s", g.ci("abs", ^uint32(signBit)), g.v(x), g.v(xc))
	g.op("VMINPS %s, %s, %s", g.c("twenty", 20), g.v(xc), g.v(xc))
	g.op("VMULPS %s, %s, %s", g.v(xc), g.v(xc), g.v(hi))
	g.op("VMOVAPS %s, %s", g.v(xc), g.v(lo))
	g.op("VFMSUB213PS %s, %s, %s", g.v(hi), g.v(xc), g.v(lo)) // xc·xc - hi
	g.op("VMULPS %s, %s, %s", g.c("half", 0.5), g.v(hi), g.v(hi))
	g.op("VMULPS %s, %s, %s", g.c("half", 0.5), g.v(lo), g.v(lo))
	// e = exp(-hi)·(1-lo): the Gaussian factor, kept for the derivative.
	g.op("VXORPS %s, %s, %s", g.ci("sign", signBit), g.v(hi), g.v(hi))
	g.exp(e, hi, 9, 10, 11)
	g.op("VFNMADD231PS %s, %s, %s", g.v(lo), g.v(e), g.v(e))
	g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(9))
	g.op("VFMADD231PS %s, %s, %s", g.c("half", 0.5), g.v(az), g.v(9))
	g.recip(9, 9, 10)
	g.horner(10, 9, "erfQ", erfQ)
	g.op("VMULPS %s, %s, %s", g.v(9), g.v(10), g.v(10))
	g.op("VMULPS %s, %s, %s", g.v(e), g.v(10), g.v(10))
	g.op("VMULPS %s, %s, %s", g.c("half", 0.5), g.v(10), g.v(10)) // q
	g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(11))
	g.op("VSUBPS %s, %s, %s", g.v(10), g.v(11), g.v(11)) // 1-q
	g.selectNeg(11, 10, x)
	g.selectLT(11, d, az, g.c("half", 0.5), 13)
	g.op("VMOVAPS %s, %s", g.v(11), g.v(d))
}

type kernel struct {
	name   string
	goArgs string // Go parameter list and results
	frame  int
	ptrs   []string // "REG arg+off(FP)"
	n      string   // length argument
	unroll int
	// narrow names the pointer register of a slice of 16-bit elements,
	// which advances half as far as the float32 ones.
	narrow string
	// whole: the kernel is only called on whole vectors (its Go wrapper
	// runs the rest), so it has no masked tail.
	whole  bool
	setup  func(g *gen)
	body   func(g *gen, u int) // u: index within the unrolled group
	finish func(g *gen)
}

// mem names the u-th vector at pointer reg.
func (g *gen) mem(reg string, u int) string {
	if u == 0 {
		return "(" + reg + ")"
	}
	return fmt.Sprintf("%d(%s)", u*g.vb, reg)
}

func unary(name string, f func(g *gen)) kernel {
	return kernel{
		name: name, goArgs: "(dst, x []float32)", frame: 48,
		ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
		body: func(g *gen, u int) {
			g.load(0, g.mem("SI", 0))
			f(g)
			g.store(1, g.mem("DI", 0))
		},
	}
}

func backward(name string, f func(g *gen)) kernel {
	return kernel{
		name: name, goArgs: "(dx, dy, x []float32)", frame: 72,
		ptrs: []string{"DI dx_base+0(FP)", "SI dy_base+24(FP)", "DX x_base+48(FP)"}, n: "x_len+56(FP)",
		body: func(g *gen, u int) {
			g.load(0, g.mem("DX", 0))
			f(g) // derivative into V1
			g.load(2, g.mem("SI", 0))
			g.op("VMULPS %s, %s, %s", g.v(1), g.v(2), g.v(1))
			g.store(1, g.mem("DI", 0))
		},
	}
}

func binary(name, inst string) kernel {
	return kernel{
		name: name, goArgs: "(dst, a, b []float32)", frame: 72, unroll: 4,
		ptrs: []string{"DI dst_base+0(FP)", "SI a_base+24(FP)", "DX b_base+48(FP)"}, n: "a_len+32(FP)",
		body: func(g *gen, u int) {
			g.load(2*u, g.mem("SI", u))
			g.load(2*u+1, g.mem("DX", u))
			g.op("%s %s, %s, %s", inst, g.v(2*u+1), g.v(2*u), g.v(2*u))
			g.store(2*u, g.mem("DI", u))
		},
	}
}

func scalar(name, inst string) kernel {
	return kernel{
		name: name, goArgs: "(dst, x []float32, s float32)", frame: 52, unroll: 4,
		ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
		setup: func(g *gen) { g.op("VBROADCASTSS s+48(FP), %s", g.v(14)) },
		body: func(g *gen, u int) {
			g.load(u, g.mem("SI", u))
			g.op("%s %s, %s, %s", inst, g.v(14), g.v(u), g.v(u))
			g.store(u, g.mem("DI", u))
		},
	}
}

// scalar2 is an elementwise kernel dst = (x first a) second b with two
// broadcast scalars a and b.
func scalar2(name, first, second string) kernel {
	return kernel{
		name: name, goArgs: "(dst, x []float32, a, b float32)", frame: 56, unroll: 4,
		ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
		setup: func(g *gen) {
			g.op("VBROADCASTSS a+48(FP), %s", g.v(13))
			g.op("VBROADCASTSS b+52(FP), %s", g.v(14))
		},
		body: func(g *gen, u int) {
			g.load(u, g.mem("SI", u))
			g.op("%s %s, %s, %s", first, g.v(13), g.v(u), g.v(u))
			g.op("%s %s, %s, %s", second, g.v(14), g.v(u), g.v(u))
			g.store(u, g.mem("DI", u))
		},
	}
}

// reduce64 is a float64 reduction over one slice, unrolled twice, each
// unrolled vector into accumulators of its own (V12:V13 and V10:V11): a
// single pair made the additions' latency, not memory, the limit. f adds
// the vector, widened to float64 in V1 (low half) and V2 (high half), into
// the accumulators lo and hi.
func reduce64(name string, f func(g *gen, lo, hi int)) kernel {
	return kernel{
		name: name, goArgs: "(x []float32) float64", frame: 32,
		ptrs: []string{"SI x_base+0(FP)"}, n: "x_len+8(FP)", unroll: 2,
		setup: zeroAcc4,
		body: func(g *gen, u int) {
			if g.tail {
				g.load(0, g.mem("SI", u))
				g.cvt(0, 1, 2)
			} else {
				// Widen straight from memory: no load and no extract of
				// the high half.
				g.op("VCVTPS2PD %d(SI), %s", u*g.vb, g.v(1))
				g.op("VCVTPS2PD %d(SI), %s", u*g.vb+g.vb/2, g.v(2))
			}
			f(g, 12-2*u, 13-2*u)
		},
		finish: func(g *gen) { finishAcc4(g, "ret+24(FP)") },
	}
}

// lanewise is an exact elementwise kernel of a few instructions a vector,
// unrolled four times: V(u) holds the u-th vector, V(4+u) a scratch
// register, V13 and V14 what setup puts there.
func lanewise(name string, setup func(g *gen), f func(g *gen, u int)) kernel {
	return kernel{
		name: name, goArgs: "(dst, x []float32)", frame: 48, unroll: 4,
		ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
		setup: setup,
		body: func(g *gen, u int) {
			g.load(u, g.mem("SI", u))
			f(g, u)
			g.store(u, g.mem("DI", u))
		},
	}
}

// extremum is torch.maximum (inst VMAXPS) or torch.minimum (VMINPS) of two
// slices, or of a slice and a broadcast scalar in V14 (scalar). The
// instruction returns its second operand when the two are equal or either
// is NaN; with b second, that is b on ties and NaN in b, and a blend puts
// back a where a is NaN: NaN propagates from either side, and ties give b
// as the Go loop does.
func extremum(name, inst string, scalar bool) kernel {
	k := kernel{
		name: name, goArgs: "(dst, a, b []float32)", frame: 72, unroll: 4,
		ptrs: []string{"DI dst_base+0(FP)", "SI a_base+24(FP)", "DX b_base+48(FP)"}, n: "a_len+32(FP)",
	}
	if scalar {
		k.goArgs, k.frame = "(dst, a []float32, b float32)", 52
		k.ptrs, k.n = k.ptrs[:2], "a_len+32(FP)"
		k.setup = func(g *gen) { g.op("VBROADCASTSS b+48(FP), %s", g.v(14)) }
	}
	k.body = func(g *gen, u int) {
		a, b, m := 2*u, 2*u+1, 8+u
		g.load(a, g.mem("SI", u))
		if scalar {
			g.op("%s %s, %s, %s", inst, g.v(14), g.v(a), g.v(b))
		} else {
			g.load(b, g.mem("DX", u))
			g.op("%s %s, %s, %s", inst, g.v(b), g.v(a), g.v(b))
		}
		if g.k512 {
			g.op("VCMPPS $3, %s, %s, K2", g.v(a), g.v(a))
			g.op("VMOVAPS %s, K2, %s", g.v(a), g.v(b))
		} else {
			g.op("VCMPPS $3, %s, %s, %s", g.v(a), g.v(a), g.v(m))
			g.op("VBLENDVPS %s, %s, %s, %s", g.v(m), g.v(a), g.v(b), g.v(b))
		}
		g.store(b, g.mem("DI", u))
	}
	return k
}

func zeroAcc(g *gen) {
	g.op("VXORPS %s, %s, %s", g.v(12), g.v(12), g.v(12))
	g.op("VXORPS %s, %s, %s", g.v(13), g.v(13), g.v(13))
}

// zeroAcc4 and finishAcc4 are zeroAcc and finishAcc with a second pair
// of accumulators, V10:V11, for a second unrolled vector.
func zeroAcc4(g *gen) {
	zeroAcc(g)
	g.op("VXORPS %s, %s, %s", g.v(10), g.v(10), g.v(10))
	g.op("VXORPS %s, %s, %s", g.v(11), g.v(11), g.v(11))
}

func finishAcc4(g *gen, ret string) {
	g.op("VADDPD %s, %s, %s", g.v(10), g.v(12), g.v(12))
	g.op("VADDPD %s, %s, %s", g.v(11), g.v(13), g.v(13))
	finishAcc(g, ret)
}

func finishAcc(g *gen, ret string) {
	g.op("VADDPD %s, %s, %s", g.v(13), g.v(12), g.v(12))
	g.hsumPD(12, 0)
	g.op("VMOVSD X12, %s", ret)
}

func adamKernel(name, mode string) kernel {
	return kernel{
		name: name, goArgs: "(p, g, m, v []float32, c *adamConsts)", frame: 104,
		ptrs: []string{"DI p_base+0(FP)", "SI g_base+24(FP)", "DX m_base+48(FP)", "R8 v_base+72(FP)", "AX c+96(FP)"},
		n:    "p_len+8(FP)",
		body: func(g *gen, u int) {
			// Offsets into adamConsts.
			const gsign, decay, wd, beta1, c1, beta2, c2, negStep, bc2Sqrt, eps = 0, 4, 8, 12, 16, 20, 24, 28, 32, 36
			b := func(r, off int) { g.op("VBROADCASTSS %d(AX), %s", off, g.v(r)) }
			g.load(0, g.mem("SI", 0)) // g
			b(8, gsign)
			g.op("VMULPS %s, %s, %s", g.v(8), g.v(0), g.v(0))
			g.load(1, g.mem("DI", 0)) // p
			switch mode {
			case "adamw":
				b(8, decay)
				g.op("VMULPS %s, %s, %s", g.v(8), g.v(1), g.v(1))
			case "adaml2":
				b(8, wd)
				g.op("VFMADD231PS %s, %s, %s", g.v(8), g.v(1), g.v(0))
			}
			g.load(2, g.mem("DX", 0)) // m = m·beta1 + c1·g (fused)
			b(8, beta1)
			g.op("VMULPS %s, %s, %s", g.v(8), g.v(2), g.v(2))
			b(9, c1)
			g.op("VFMADD231PS %s, %s, %s", g.v(9), g.v(0), g.v(2))
			g.store(2, g.mem("DX", 0))
			g.load(3, g.mem("R8", 0)) // v = v·beta2 + (c2·g)·g
			b(8, beta2)
			g.op("VMULPS %s, %s, %s", g.v(8), g.v(3), g.v(3))
			b(9, c2)
			g.op("VMULPS %s, %s, %s", g.v(9), g.v(0), g.v(4))
			g.op("VMULPS %s, %s, %s", g.v(0), g.v(4), g.v(4))
			g.op("VADDPS %s, %s, %s", g.v(4), g.v(3), g.v(3))
			g.store(3, g.mem("R8", 0))
			g.op("VSQRTPS %s, %s", g.v(3), g.v(4)) // denom = sqrt(v)/bc2Sqrt + eps
			b(8, bc2Sqrt)
			g.op("VDIVPS %s, %s, %s", g.v(8), g.v(4), g.v(4))
			b(9, eps)
			g.op("VADDPS %s, %s, %s", g.v(9), g.v(4), g.v(4))
			b(8, negStep) // p += (negStep·m)/denom
			g.op("VMULPS %s, %s, %s", g.v(8), g.v(2), g.v(5))
			g.op("VDIVPS %s, %s, %s", g.v(4), g.v(5), g.v(5))
			g.op("VADDPS %s, %s, %s", g.v(5), g.v(1), g.v(1))
			g.store(1, g.mem("DI", 0))
		},
	}
}

// sgdModes are the generated SGD loops: L2 decay or not, times no momentum,
// momentum on the first step, momentum, and Nesterov momentum (the mode
// bits of sgdMode in optim.go).
var sgdModes = []struct {
	suffix string
	bits   int
}{
	{"", 0}, {"L2", 1},
	{"Mom", 2}, {"L2Mom", 3}, {"MomFirst", 6}, {"L2MomFirst", 7},
	{"Nesterov", 10}, {"L2Nesterov", 11}, {"NesterovFirst", 14}, {"L2NesterovFirst", 15},
}

func sgdKernel(suffix string, bits int) kernel {
	l2, mom, first, nest := bits&1 != 0, bits&2 != 0, bits&4 != 0, bits&8 != 0
	return kernel{
		name: "sgd" + suffix, goArgs: "(p, g, buf []float32, c *sgdConsts)", frame: 80,
		ptrs: []string{"DI p_base+0(FP)", "SI g_base+24(FP)", "DX buf_base+48(FP)", "AX c+72(FP)"},
		n:    "p_len+8(FP)",
		setup: func(g *gen) {
			for i := 0; i < 5; i++ { // gsign, wd, mom, damp, negLR
				g.op("VBROADCASTSS %d(AX), %s", 4*i, g.v(10+i))
			}
		},
		body: func(g *gen, u int) {
			g.load(0, g.mem("SI", 0))
			g.op("VMULPS %s, %s, %s", g.v(10), g.v(0), g.v(0)) // d = ±g
			g.load(1, g.mem("DI", 0))
			if l2 {
				g.op("VFMADD231PS %s, %s, %s", g.v(11), g.v(1), g.v(0)) // d += wd·p
			}
			if mom {
				if first {
					g.op("VMOVAPS %s, %s", g.v(0), g.v(2))
				} else {
					g.load(2, g.mem("DX", 0))
					g.op("VMULPS %s, %s, %s", g.v(12), g.v(2), g.v(2))
					g.op("VFMADD231PS %s, %s, %s", g.v(13), g.v(0), g.v(2)) // buf·mom + damp·d
				}
				g.store(2, g.mem("DX", 0))
				if nest {
					g.op("VFMADD231PS %s, %s, %s", g.v(12), g.v(2), g.v(0)) // d += mom·buf
				} else {
					g.op("VMOVAPS %s, %s", g.v(2), g.v(0))
				}
			}
			g.op("VFMADD231PS %s, %s, %s", g.v(14), g.v(0), g.v(1)) // p += -lr·d
			g.store(1, g.mem("DI", 0))
		},
	}
}

var tanhP = []float32{-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1}

var (
	kBeta  = float32(math.Sqrt2 * 2 / math.SqrtPi * 0.5)
	kKappa = float32(0.044715)
)

// sigmoid sets d = sigmoid(a) = (a < 0 ? e : 1)/(1+e) with e = exp(-|a|),
// which neither overflows nor cancels on either side; x holds a value with
// the sign of a. Clobbers a and t0..t2.
func (g *gen) sigmoid(d, a, x, t0, t1, t2 int) {
	g.op("VORPS %s, %s, %s", g.ci("sign", signBit), g.v(a), g.v(a)) // -|a|
	g.exp(t2, a, t0, t1, d)
	g.op("VADDPS %s, %s, %s", g.c("one", 1), g.v(t2), g.v(t0))
	g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(d))
	g.selectNeg(d, t2, x)
	g.op("VDIVPS %s, %s, %s", g.v(t0), g.v(d), g.v(d))
}

// sigmoidParts computes, for the argument a in register a, e = exp(-|a|)
// and the two halves r = 1/(1+e) into V<r> and e·r into V<er>: sigmoid(a)
// is r for a >= 0 and e·r otherwise, and 1-sigmoid(a) the other one, both
// free of cancellation. Clobbers t0..t2 and a.
func (g *gen) sigmoidParts(a, r, er, t0, t1, t2 int) {
	g.op("VORPS %s, %s, %s", g.ci("sign", signBit), g.v(a), g.v(a)) // -|a|
	g.exp(er, a, t0, t1, t2)
	g.op("VADDPS %s, %s, %s", g.c("one", 1), g.v(er), g.v(r))
	g.recip(r, r, t0)
	g.op("VMULPS %s, %s, %s", g.v(r), g.v(er), g.v(er))
}

// geluTanhU computes, from x in V0: V1 = x² and V3 = 2u with
// u = β·(x + κ·x³) (u has the sign of x).
func geluTanhU(g *gen) {
	g.op("VMULPS %s, %s, %s", g.v(0), g.v(0), g.v(1))
	g.op("VMULPS %s, %s, %s", g.v(0), g.v(1), g.v(2)) // x³
	g.op("VMOVAPS %s, %s", g.v(0), g.v(3))
	g.op("VFMADD231PS %s, %s, %s", g.c("kappa", kKappa), g.v(2), g.v(3))
	g.op("VMULPS %s, %s, %s", g.c("beta", kBeta), g.v(3), g.v(3)) // u
	g.op("VADDPS %s, %s, %s", g.v(3), g.v(3), g.v(3))             // 2u, exact
}

func kernels() []kernel {
	return []kernel{
		unary("exp", func(g *gen) { g.exp(1, 0, 2, 3, 4) }),
		unary("log", func(g *gen) { g.log() }),
		sincos("sin", false),
		sincos("cos", true),
		unary("sigmoid", func(g *gen) {
			g.op("VMOVAPS %s, %s", g.v(0), g.v(2))
			g.sigmoid(1, 2, 0, 3, 4, 5)
		}),
		unary("silu", func(g *gen) {
			g.op("VMOVAPS %s, %s", g.v(0), g.v(2))
			g.sigmoid(1, 2, 0, 3, 4, 5)
			g.op("VMULPS %s, %s, %s", g.v(0), g.v(1), g.v(1))
		}),
		unary("tanh", func(g *gen) {
			// Cephes tanhf: |x| < 0.625: x + x³·P(x²); else 1 - 2/(e^2|x| + 1).
			g.op("VANDPS %s, %s, %s", g.ci("abs", ^uint32(signBit)), g.v(0), g.v(6))
			g.op("VADDPS %s, %s, %s", g.v(6), g.v(6), g.v(5))
			g.exp(1, 5, 2, 3, 4)
			g.op("VADDPS %s, %s, %s", g.c("one", 1), g.v(1), g.v(1))
			g.op("VMOVUPS %s, %s", g.c("two", 2), g.v(2))
			g.op("VDIVPS %s, %s, %s", g.v(1), g.v(2), g.v(2))
			g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(1))
			g.op("VSUBPS %s, %s, %s", g.v(2), g.v(1), g.v(1))
			g.op("VANDPS %s, %s, %s", g.ci("sign", signBit), g.v(0), g.v(2))
			g.op("VORPS %s, %s, %s", g.v(2), g.v(1), g.v(1))
			g.op("VMULPS %s, %s, %s", g.v(0), g.v(0), g.v(3))
			g.horner(4, 3, "tanhP", tanhP)
			g.op("VMULPS %s, %s, %s", g.v(3), g.v(4), g.v(4))
			g.op("VFMADD213PS %s, %s, %s", g.v(0), g.v(0), g.v(4))
			g.selectLT(1, 4, 6, g.c("tanhThr", 0.625), 7)
		}),
		unary("erf", func(g *gen) {
			// |x| < 0.5: x·P(x²); else sign(x)·(1 - erfc(|x|)).
			a, u, p, xc, hi, lo := 6, 2, 3, 7, 8, 9
			g.op("VANDPS %s, %s, %s", g.ci("abs", ^uint32(signBit)), g.v(0), g.v(a))
			g.op("VMULPS %s, %s, %s", g.v(0), g.v(0), g.v(u))
			g.horner(p, u, "erfP", erfP)
			g.op("VMULPS %s, %s, %s", g.v(0), g.v(p), g.v(p))
			g.op("VMINPS %s, %s, %s", g.c("ten", 10), g.v(a), g.v(xc))
			g.op("VMULPS %s, %s, %s", g.v(xc), g.v(xc), g.v(hi))
			g.op("VMOVAPS %s, %s", g.v(xc), g.v(lo))
			g.op("VFMSUB213PS %s, %s, %s", g.v(hi), g.v(xc), g.v(lo))
			g.erfcTail(1, a, hi, lo, 10, 11, 12)
			g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(2))
			g.op("VSUBPS %s, %s, %s", g.v(1), g.v(2), g.v(1))
			g.op("VANDPS %s, %s, %s", g.ci("sign", signBit), g.v(0), g.v(2))
			g.op("VORPS %s, %s, %s", g.v(2), g.v(1), g.v(1))
			g.selectLT(1, p, a, g.c("erfThr", 0.84375), 10)
		}),
		unary("gelu", func(g *gen) {
			g.phi(5, 12, 0)
			g.op("VMULPS %s, %s, %s", g.v(0), g.v(5), g.v(1))
		}),
		unary("geluTanh", func(g *gen) {
			geluTanhU(g)
			g.sigmoid(4, 3, 0, 5, 6, 7)
			g.op("VMULPS %s, %s, %s", g.v(0), g.v(4), g.v(1))
		}),
		backward("geluBackward", func(g *gen) {
			g.phi(5, 12, 0)
			// Φ + x·φ, φ = e/√(2π)
			g.op("VMULPS %s, %s, %s", g.c("invSqrt2Pi", float32(1/math.Sqrt(2*math.Pi))), g.v(12), g.v(12))
			g.op("VFMADD231PS %s, %s, %s", g.v(12), g.v(0), g.v(5))
			g.op("VMOVAPS %s, %s", g.v(5), g.v(1))
		}),
		backward("geluTanhBackward", func(g *gen) {
			// d = s + (2x·s(1-s))·β·(1+3κx²), s(1-s) = r·(e·r). Past |x| = 20
			// the derivative is 0 or 1 in float32; clamping x there keeps
			// x² and x³ finite (∞·0 would give NaN). NaN propagates, and
			// ±Inf gives NaN as in PyTorch's formula (V8 = x-x is 0 or NaN).
			g.op("VSUBPS %s, %s, %s", g.v(0), g.v(0), g.v(8))
			g.op("VMOVUPS %s, %s", g.c("twenty", 20), g.v(1))
			g.op("VMINPS %s, %s, %s", g.v(0), g.v(1), g.v(1))
			g.op("VMOVUPS %s, %s", g.c("mtwenty", -20), g.v(0))
			g.op("VMAXPS %s, %s, %s", g.v(1), g.v(0), g.v(0))
			geluTanhU(g)
			g.sigmoidParts(3, 4, 5, 2, 6, 7)
			g.op("VMOVAPS %s, %s", g.v(4), g.v(6))
			g.selectNeg(6, 5, 0) // s
			g.op("VMULPS %s, %s, %s", g.v(4), g.v(5), g.v(3))
			g.op("VADDPS %s, %s, %s", g.v(0), g.v(0), g.v(2))
			g.op("VMULPS %s, %s, %s", g.v(2), g.v(3), g.v(3))
			g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(2))
			g.op("VFMADD231PS %s, %s, %s", g.c("kappa3", 3*kKappa), g.v(1), g.v(2))
			g.op("VMULPS %s, %s, %s", g.c("beta", kBeta), g.v(2), g.v(2))
			g.op("VFMADD213PS %s, %s, %s", g.v(6), g.v(3), g.v(2))
			g.op("VADDPS %s, %s, %s", g.v(8), g.v(2), g.v(1))
		}),
		backward("siluBackward", func(g *gen) {
			// s·(1 + x·(1-s)); s and 1-s are r and e·r, swapped for x < 0.
			g.op("VMOVAPS %s, %s", g.v(0), g.v(2))
			g.sigmoidParts(2, 3, 4, 5, 6, 7)
			g.op("VMOVAPS %s, %s", g.v(3), g.v(5))
			g.selectNeg(5, 4, 0) // s
			g.selectNeg(4, 3, 0) // 1-s
			g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(6))
			g.op("VFMADD231PS %s, %s, %s", g.v(4), g.v(0), g.v(6))
			g.op("VMULPS %s, %s, %s", g.v(5), g.v(6), g.v(1))
		}),
		{
			name: "relu", goArgs: "(dst, x []float32)", frame: 48, unroll: 4,
			ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
			setup: func(g *gen) { g.op("VXORPS %s, %s, %s", g.v(14), g.v(14), g.v(14)) },
			body: func(g *gen, u int) {
				g.load(u, g.mem("SI", u))
				// max(0, x) returns x when x is NaN and when both are zeros:
				// NaN and -0 pass through, as in PyTorch's clamp_min.
				g.op("VMAXPS %s, %s, %s", g.v(u), g.v(14), g.v(u))
				g.store(u, g.mem("DI", u))
			},
		},
		{
			name: "reluBackward", goArgs: "(dx, dy, x []float32)", frame: 72, unroll: 4,
			ptrs: []string{"DI dx_base+0(FP)", "SI dy_base+24(FP)", "DX x_base+48(FP)"}, n: "x_len+56(FP)",
			setup: func(g *gen) { g.op("VXORPS %s, %s, %s", g.v(14), g.v(14), g.v(14)) },
			body: func(g *gen, u int) {
				g.load(2*u, g.mem("DX", u))
				g.load(2*u+1, g.mem("SI", u))
				// Keep dy where !(x <= 0) (predicate NLE_US, true for NaN).
				if g.k512 {
					g.op("VCMPPS $6, %s, %s, K2", g.v(14), g.v(2*u))
					g.op("VMOVAPS.Z %s, K2, %s", g.v(2*u+1), g.v(2*u))
				} else {
					g.op("VCMPPS $6, %s, %s, %s", g.v(14), g.v(2*u), g.v(2*u))
					g.op("VANDPS %s, %s, %s", g.v(2*u+1), g.v(2*u), g.v(2*u))
				}
				g.store(2*u, g.mem("DI", u))
			},
		},
		{
			name: "tanhBackward", goArgs: "(dx, dy, y []float32)", frame: 72, unroll: 4,
			ptrs: []string{"DI dx_base+0(FP)", "SI dy_base+24(FP)", "DX y_base+48(FP)"}, n: "y_len+56(FP)",
			body: func(g *gen, u int) {
				g.load(2*u, g.mem("DX", u))
				g.op("VMULPS %s, %s, %s", g.v(2*u), g.v(2*u), g.v(2*u))
				g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(2*u+1))
				g.op("VSUBPS %s, %s, %s", g.v(2*u), g.v(2*u+1), g.v(2*u))
				g.load(2*u+1, g.mem("SI", u))
				g.op("VMULPS %s, %s, %s", g.v(2*u+1), g.v(2*u), g.v(2*u))
				g.store(2*u, g.mem("DI", u))
			},
		},
		{
			name: "sigmoidBackward", goArgs: "(dx, dy, y []float32)", frame: 72, unroll: 4,
			ptrs: []string{"DI dx_base+0(FP)", "SI dy_base+24(FP)", "DX y_base+48(FP)"}, n: "y_len+56(FP)",
			body: func(g *gen, u int) {
				g.load(2*u, g.mem("DX", u))
				g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(2*u+1))
				g.op("VSUBPS %s, %s, %s", g.v(2*u), g.v(2*u+1), g.v(2*u+1))
				g.load(8+u, g.mem("SI", u))
				g.op("VMULPS %s, %s, %s", g.v(8+u), g.v(2*u+1), g.v(2*u+1))
				g.op("VMULPS %s, %s, %s", g.v(2*u), g.v(2*u+1), g.v(2*u+1))
				g.store(2*u+1, g.mem("DI", u))
			},
		},
		binary("add", "VADDPS"),
		{
			// a·s + b·s, each product rounded (no FMA): a pre-multiplied
			// sum of two ranks' values, as dividing each into a bucket and
			// adding the buckets rounds them.
			name: "addScaled", goArgs: "(dst, a, b []float32, s float32)", frame: 76, unroll: 4,
			ptrs: []string{"DI dst_base+0(FP)", "SI a_base+24(FP)", "DX b_base+48(FP)"}, n: "a_len+32(FP)",
			setup: func(g *gen) { g.op("VBROADCASTSS s+72(FP), %s", g.v(14)) },
			body: func(g *gen, u int) {
				g.load(2*u, g.mem("SI", u))
				g.load(2*u+1, g.mem("DX", u))
				g.op("VMULPS %s, %s, %s", g.v(14), g.v(2*u), g.v(2*u))
				g.op("VMULPS %s, %s, %s", g.v(14), g.v(2*u+1), g.v(2*u+1))
				g.op("VADDPS %s, %s, %s", g.v(2*u+1), g.v(2*u), g.v(2*u))
				g.store(2*u, g.mem("DI", u))
			},
		},
		binary("sub", "VSUBPS"),
		binary("mul", "VMULPS"),
		binary("div", "VDIVPS"),
		scalar("addScalar", "VADDPS"),
		scalar("mulScalar", "VMULPS"),
		scalar("divScalar", "VDIVPS"),
		lanewise("neg", func(g *gen) { g.op("VMOVUPS %s, %s", g.ci("sign", signBit), g.v(14)) }, func(g *gen, u int) {
			g.op("VXORPS %s, %s, %s", g.v(14), g.v(u), g.v(u))
		}),
		lanewise("abs", func(g *gen) { g.op("VMOVUPS %s, %s", g.ci("abs", ^uint32(signBit)), g.v(14)) }, func(g *gen, u int) {
			g.op("VANDPS %s, %s, %s", g.v(14), g.v(u), g.v(u))
		}),
		lanewise("square", nil, func(g *gen, u int) { g.op("VMULPS %s, %s, %s", g.v(u), g.v(u), g.v(u)) }),
		lanewise("cube", nil, func(g *gen, u int) { // (x·x)·x, PyTorch's pow(x, 3)
			g.op("VMULPS %s, %s, %s", g.v(u), g.v(u), g.v(4+u))
			g.op("VMULPS %s, %s, %s", g.v(u), g.v(4+u), g.v(u))
		}),
		lanewise("sqrt", nil, func(g *gen, u int) { g.op("VSQRTPS %s, %s", g.v(u), g.v(u)) }),
		// 1/sqrt(x) as PyTorch's vectorized rsqrt: a float32 square root,
		// then a float32 division, each correctly rounded.
		lanewise("rsqrt", func(g *gen) { g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(14)) }, func(g *gen, u int) {
			g.op("VSQRTPS %s, %s", g.v(u), g.v(u))
			g.op("VDIVPS %s, %s, %s", g.v(u), g.v(14), g.v(u))
		}),
		lanewise("reciprocal", func(g *gen) { g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(14)) }, func(g *gen, u int) {
			g.op("VDIVPS %s, %s, %s", g.v(u), g.v(14), g.v(u))
		}),
		// (x > 0) - (x < 0), both comparisons ordered (false for NaN).
		lanewise("sign", func(g *gen) {
			g.op("VXORPS %s, %s, %s", g.v(13), g.v(13), g.v(13))
			g.op("VMOVUPS %s, %s", g.c("one", 1), g.v(14))
		}, func(g *gen, u int) {
			if g.k512 {
				g.op("VCMPPS $14, %s, %s, K2", g.v(13), g.v(u))
				g.op("VCMPPS $1, %s, %s, K3", g.v(13), g.v(u))
				g.op("VMOVAPS.Z %s, K2, %s", g.v(14), g.v(4+u))
				g.op("VMOVAPS.Z %s, K3, %s", g.v(14), g.v(u))
			} else {
				g.op("VCMPPS $14, %s, %s, %s", g.v(13), g.v(u), g.v(4+u))
				g.op("VCMPPS $1, %s, %s, %s", g.v(13), g.v(u), g.v(u))
				g.op("VANDPS %s, %s, %s", g.v(14), g.v(4+u), g.v(4+u))
				g.op("VANDPS %s, %s, %s", g.v(14), g.v(u), g.v(u))
			}
			g.op("VSUBPS %s, %s, %s", g.v(u), g.v(4+u), g.v(u))
		}),
		{
			// float32 to bfloat16 bits, rounded to nearest even; a NaN keeps
			// its sign and top payload bits, quieted (dtype.BF16FromFloat32).
			name: "toBF16", goArgs: "(dst []uint16, x []float32)", frame: 48, whole: true, narrow: "DI",
			ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
			body: func(g *gen, u int) {
				and, or := "VPAND", "VPOR"
				if g.k512 {
					and, or = "VPANDD", "VPORD"
				}
				g.op("VMOVUPS (SI), %s", g.v(0))
				g.op("VPSRLD $16, %s, %s", g.v(0), g.v(1))
				g.op("%s %s, %s, %s", and, g.ci("lowBit", 1), g.v(1), g.v(2))
				g.op("VPADDD %s, %s, %s", g.ci("roundHalf", 0x7fff), g.v(0), g.v(3))
				g.op("VPADDD %s, %s, %s", g.v(2), g.v(3), g.v(3))
				g.op("VPSRLD $16, %s, %s", g.v(3), g.v(3))
				g.op("%s %s, %s, %s", or, g.ci("quietBF16", 0x40), g.v(1), g.v(1))
				if g.k512 {
					g.op("VCMPPS $3, %s, %s, K2", g.v(0), g.v(0))
					g.op("VMOVDQA32 %s, K2, %s", g.v(1), g.v(3))
					g.op("VPMOVDW %s, (DI)", g.v(3))
					return
				}
				g.op("VCMPPS $3, %s, %s, %s", g.v(0), g.v(0), g.v(4))
				g.op("VBLENDVPS %s, %s, %s, %s", g.v(4), g.v(1), g.v(3), g.v(3))
				g.op("VPACKUSDW %s, %s, %s", g.v(3), g.v(3), g.v(3)) // words 0-3 | 4-7 of each lane
				g.op("VPERMQ $0x08, %s, %s", g.v(3), g.v(3))
				g.op("VMOVDQU %s, (DI)", g.h(3))
			},
		},
		{
			// bfloat16 bits to float32: exact, the bits moved up.
			name: "fromBF16", goArgs: "(dst []float32, x []uint16)", frame: 48, whole: true, narrow: "SI",
			ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
			body: func(g *gen, u int) {
				g.op("VPMOVZXWD (SI), %s", g.v(0))
				g.op("VPSLLD $16, %s, %s", g.v(0), g.v(0))
				g.op("VMOVUPS %s, (DI)", g.v(0))
			},
		},
		extremum("maximum", "VMAXPS", false),
		extremum("minimum", "VMINPS", false),
		extremum("maximumScalar", "VMAXPS", true),
		extremum("minimumScalar", "VMINPS", true),
		{
			name: "mulScalarFlush", goArgs: "(dst, x []float32, s float32)", frame: 52, unroll: 4,
			ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
			setup: func(g *gen) {
				g.op("VBROADCASTSS s+48(FP), %s", g.v(14))
				g.op("VMOVUPS %s, %s", g.ci("absMask", 0x7fffffff), g.v(13))
				g.op("VMOVUPS %s, %s", g.ci("minNormal", 0x00800000), g.v(12))
			},
			body: func(g *gen, u int) {
				g.load(u, g.mem("SI", u))
				g.op("VMULPS %s, %s, %s", g.v(14), g.v(u), g.v(u))
				g.op("VANDPS %s, %s, %s", g.v(13), g.v(u), g.v(4+u))
				if g.k512 {
					g.op("VCMPPS $1, %s, %s, K2", g.v(12), g.v(4+u))
					g.op("VXORPS %s, %s, %s", g.v(4+u), g.v(4+u), g.v(4+u))
					g.op("VMOVAPS %s, K2, %s", g.v(4+u), g.v(u))
				} else {
					g.op("VCMPPS $1, %s, %s, %s", g.v(12), g.v(4+u), g.v(4+u))
					g.op("VANDNPS %s, %s, %s", g.v(u), g.v(4+u), g.v(u))
				}
				g.store(u, g.mem("DI", u))
			},
		},
		{
			name: "axpy", goArgs: "(dst []float32, alpha float32, x []float32)", frame: 56, unroll: 4,
			ptrs: []string{"DI dst_base+0(FP)", "SI x_base+32(FP)"}, n: "x_len+40(FP)",
			setup: func(g *gen) { g.op("VBROADCASTSS alpha+24(FP), %s", g.v(14)) },
			body: func(g *gen, u int) {
				g.load(2*u, g.mem("SI", u))
				g.load(2*u+1, g.mem("DI", u))
				g.op("VFMADD231PS %s, %s, %s", g.v(14), g.v(2*u), g.v(2*u+1))
				g.store(2*u+1, g.mem("DI", u))
			},
		},
		reduce64("sum", func(g *gen, lo, hi int) {
			g.op("VADDPD %s, %s, %s", g.v(1), g.v(lo), g.v(lo))
			g.op("VADDPD %s, %s, %s", g.v(2), g.v(hi), g.v(hi))
		}),
		reduce64("sumSquares", func(g *gen, lo, hi int) {
			g.op("VFMADD231PD %s, %s, %s", g.v(1), g.v(1), g.v(lo))
			g.op("VFMADD231PD %s, %s, %s", g.v(2), g.v(2), g.v(hi))
		}),
		{
			name: "dot", goArgs: "(x, y []float32) float64", frame: 56, unroll: 2,
			ptrs: []string{"SI x_base+0(FP)", "DX y_base+24(FP)"}, n: "x_len+8(FP)",
			setup: zeroAcc,
			body: func(g *gen, u int) {
				g.load(0, g.mem("SI", u))
				g.load(3, g.mem("DX", u))
				g.cvt(0, 1, 2)
				g.cvt(3, 4, 5)
				g.op("VFMADD231PD %s, %s, %s", g.v(4), g.v(1), g.v(12))
				g.op("VFMADD231PD %s, %s, %s", g.v(5), g.v(2), g.v(13))
			},
			finish: func(g *gen) { finishAcc(g, "ret+48(FP)") },
		},
		extremeReduce("max", "VMAXPS", "negInf", 0xff800000),
		extremeReduce("min", "VMINPS", "posInf", 0x7f800000),
		{
			name: "expSubSum", goArgs: "(dst, x []float32, m float32) float64", frame: 64,
			ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)"}, n: "x_len+32(FP)",
			setup: func(g *gen) {
				zeroAcc(g)
				g.op("VBROADCASTSS m+48(FP), %s", g.v(14))
			},
			body: func(g *gen, u int) {
				g.load(0, g.mem("SI", 0))
				g.op("VSUBPS %s, %s, %s", g.v(14), g.v(0), g.v(0))
				g.exp(1, 0, 2, 3, 4)
				g.store(1, g.mem("DI", 0))
				g.zeroTail(1)
				g.cvtAdd(1, 12, 13, 5, 6)
			},
			finish: func(g *gen) { finishAcc(g, "ret+56(FP)") },
		},
		{
			name: "sumExpSub", goArgs: "(x []float32, m float32) float64", frame: 40,
			ptrs: []string{"SI x_base+0(FP)"}, n: "x_len+8(FP)",
			setup: func(g *gen) {
				zeroAcc(g)
				g.op("VBROADCASTSS m+24(FP), %s", g.v(14))
			},
			body: func(g *gen, u int) {
				g.load(0, g.mem("SI", 0))
				g.op("VSUBPS %s, %s, %s", g.v(14), g.v(0), g.v(0))
				g.exp(1, 0, 2, 3, 4)
				g.zeroTail(1)
				g.cvtAdd(1, 12, 13, 5, 6)
			},
			finish: func(g *gen) { finishAcc(g, "ret+32(FP)") },
		},
		{
			// Batch norm's variance: Σ (x - mean)² in float64, each
			// unrolled vector into accumulators of its own.
			name: "sumSqDev", goArgs: "(x []float32, mean float64) float64", frame: 40, unroll: 2,
			ptrs: []string{"SI x_base+0(FP)"}, n: "x_len+8(FP)",
			setup: func(g *gen) {
				zeroAcc4(g)
				g.op("VBROADCASTSD mean+24(FP), %s", g.v(14))
			},
			body: func(g *gen, u int) {
				g.load(0, g.mem("SI", u))
				g.cvt(0, 1, 2)
				g.op("VSUBPD %s, %s, %s", g.v(14), g.v(1), g.v(1))
				g.op("VSUBPD %s, %s, %s", g.v(14), g.v(2), g.v(2))
				g.zeroTail64(1, 2, 3, 4)
				g.op("VFMADD231PD %s, %s, %s", g.v(1), g.v(1), g.v(12-2*u))
				g.op("VFMADD231PD %s, %s, %s", g.v(2), g.v(2), g.v(13-2*u))
			},
			finish: func(g *gen) { finishAcc4(g, "ret+32(FP)") },
		},
		{
			// Batch norm's backward: Σ y·(x - mean) in float64 (y's
			// lanes past the tail load as zero).
			name: "dotDev", goArgs: "(y, x []float32, mean float64) float64", frame: 64, unroll: 2,
			ptrs: []string{"SI y_base+0(FP)", "DX x_base+24(FP)"}, n: "y_len+8(FP)",
			setup: func(g *gen) {
				zeroAcc4(g)
				g.op("VBROADCASTSD mean+48(FP), %s", g.v(14))
			},
			body: func(g *gen, u int) {
				g.load(0, g.mem("SI", u))
				g.load(3, g.mem("DX", u))
				g.cvt(0, 1, 2)
				g.cvt(3, 4, 5)
				g.op("VSUBPD %s, %s, %s", g.v(14), g.v(4), g.v(4))
				g.op("VSUBPD %s, %s, %s", g.v(14), g.v(5), g.v(5))
				g.op("VFMADD231PD %s, %s, %s", g.v(4), g.v(1), g.v(12-2*u))
				g.op("VFMADD231PD %s, %s, %s", g.v(5), g.v(2), g.v(13-2*u))
			},
			finish: func(g *gen) { finishAcc4(g, "ret+56(FP)") },
		},
		// x·a + b, rounded twice as the Go loop does.
		scalar2("scaleShift", "VMULPS", "VADDPS"),
		{
			// (x·a + y·b) + c, each operation rounded as the Go loop's.
			name: "scaleAdd2", goArgs: "(dst, x, y []float32, a, b, c float32)", frame: 84, unroll: 4,
			ptrs: []string{"DI dst_base+0(FP)", "SI x_base+24(FP)", "DX y_base+48(FP)"}, n: "x_len+32(FP)",
			setup: func(g *gen) {
				g.op("VBROADCASTSS a+72(FP), %s", g.v(12))
				g.op("VBROADCASTSS b+76(FP), %s", g.v(13))
				g.op("VBROADCASTSS c+80(FP), %s", g.v(14))
			},
			body: func(g *gen, u int) {
				g.load(2*u, g.mem("SI", u))
				g.load(2*u+1, g.mem("DX", u))
				g.op("VMULPS %s, %s, %s", g.v(12), g.v(2*u), g.v(2*u))
				g.op("VMULPS %s, %s, %s", g.v(13), g.v(2*u+1), g.v(2*u+1))
				g.op("VADDPS %s, %s, %s", g.v(2*u+1), g.v(2*u), g.v(2*u))
				g.op("VADDPS %s, %s, %s", g.v(14), g.v(2*u), g.v(2*u))
				g.store(2*u, g.mem("DI", u))
			},
		},
		scalar2("subSub", "VSUBPS", "VSUBPS"),
		{
			name: "softmaxBwd", goArgs: "(dx, dy, y []float32, s float32)", frame: 76, unroll: 4,
			ptrs: []string{"DI dx_base+0(FP)", "SI dy_base+24(FP)", "DX y_base+48(FP)"}, n: "y_len+56(FP)",
			setup: func(g *gen) { g.op("VBROADCASTSS s+72(FP), %s", g.v(14)) },
			body: func(g *gen, u int) {
				g.load(2*u, g.mem("SI", u))
				g.load(2*u+1, g.mem("DX", u))
				g.op("VSUBPS %s, %s, %s", g.v(14), g.v(2*u), g.v(2*u))
				g.op("VMULPS %s, %s, %s", g.v(2*u+1), g.v(2*u), g.v(2*u))
				g.store(2*u, g.mem("DI", u))
			},
		},
		{
			name: "logSoftmaxBwd", goArgs: "(dx, dy, y []float32, s float32)", frame: 76,
			ptrs: []string{"DI dx_base+0(FP)", "SI dy_base+24(FP)", "DX y_base+48(FP)"}, n: "y_len+56(FP)",
			setup: func(g *gen) { g.op("VBROADCASTSS s+72(FP), %s", g.v(14)) },
			body: func(g *gen, u int) {
				g.load(0, g.mem("DX", 0))
				g.exp(1, 0, 2, 3, 4)
				g.load(5, g.mem("SI", 0))
				g.op("VFNMADD231PS %s, %s, %s", g.v(14), g.v(1), g.v(5))
				g.store(5, g.mem("DI", 0))
			},
		},
		sgdKernel("", 0), sgdKernel("L2", 1),
		sgdKernel("Mom", 2), sgdKernel("L2Mom", 3), sgdKernel("MomFirst", 6), sgdKernel("L2MomFirst", 7),
		sgdKernel("Nesterov", 10), sgdKernel("L2Nesterov", 11), sgdKernel("NesterovFirst", 14), sgdKernel("L2NesterovFirst", 15),
		adamKernel("adamw", "adamw"),
		adamKernel("adamL2", "adaml2"),
		adamKernel("adam", "adam"),
	}
}

// extremeReduce is the largest (inst VMAXPS, init -Inf) or smallest
// (VMINPS, +Inf) element of a slice, NaN if any element is NaN.
func extremeReduce(name, inst, initName string, initBits uint32) kernel {
	return kernel{
		name: name, goArgs: "(x []float32) float32", frame: 28, unroll: 2,
		ptrs: []string{"SI x_base+0(FP)"}, n: "x_len+8(FP)",
		setup: func(g *gen) {
			g.op("VMOVUPS %s, %s", g.ci(initName, initBits), g.v(12))
			if g.k512 {
				g.op("KXORW K3, K3, K3")
			} else {
				g.op("VXORPS Y13, Y13, Y13")
			}
		},
		body: func(g *gen, u int) {
			g.loadFill(0, g.mem("SI", u), g.ci(initName, initBits), 1)
			g.op("%s %s, %s, %s", inst, g.v(0), g.v(12), g.v(12))
			// The instruction does not keep NaN; remember NaNs separately.
			if g.k512 {
				g.op("VCMPPS $3, %s, %s, K2", g.v(0), g.v(0))
				g.op("KORW K2, K3, K3")
			} else {
				g.op("VCMPPS $3, %s, %s, %s", g.v(0), g.v(0), g.v(1))
				g.op("VORPS %s, %s, %s", g.v(1), g.v(13), g.v(13))
			}
		},
		finish: func(g *gen) {
			if g.k512 {
				g.op("VEXTRACTF32X8 $1, Z12, Y0")
				g.op("%s Y0, Y12, Y12", inst)
			}
			g.op("VEXTRACTF128 $1, Y12, X0")
			g.op("%s X0, X12, X12", inst)
			g.op("VPERMILPS $0x4e, X12, X0")
			g.op("%s X0, X12, X12", inst)
			g.op("VPERMILPS $0xb1, X12, X0")
			g.op("%s X0, X12, X12", inst)
			g.op("VMOVSS X12, ret+24(FP)")
			g.flaggedLanesToAX()
			g.op("TESTL AX, AX")
			g.op("JZ nonan")
			g.op("MOVL $0x7fc00000, AX")
			g.op("MOVL AX, ret+24(FP)")
			fmt.Fprintf(&g.b, "nonan:\n")
		},
	}
}

// regDoc describes each kernel's vector registers (V = Z or Y); the
// pointer registers are listed in the kernel's MOVQs.
var regDoc = map[string]string{
	"exp":                "V0 x; V1 exp(x); V2-V4 exp scratch (clamped x and r, n, polynomial)",
	"sin":                "V0 x; V14 |x| > 2^19, then the zero lanes (AVX2); V13 or K3 lanes past 2^19; V1:V2 x's halves as float64, then sin x; V3 j; V4 r; V5 r²; V6 a polynomial; V7 sin r; V8 cos r; V9 j + 1.5·2^52; V10 r·z or z²; V11 the quadrant's selection and sign",
	"cos":                "as sin, with j + 1 selecting and signing",
	"log":                "V0 x; V2 x scaled out of the subnormals; V3 23 or 0; V4 the exponent e; V5 the mantissa m; V6 m<√½ selections; V7 f; V8 f²; V9 the polynomial terms; V1 ln x; V10 blend masks (AVX2)",
	"sigmoid":            "V0 x; V2 -|x|; V5 e = exp(-|x|); V3 1+e; V1 (x<0 ? e : 1)/(1+e); V4 scratch",
	"silu":               "V0 x; V2 -|x|; V5 e; V3 1+e; V1 sigmoid(x), then x·sigmoid(x); V4 scratch",
	"tanh":               "V0 x; V6 |x|; V5 2|x|; V1 1-2/(e^2|x|+1) with the sign of x; V3 x²; V4 x+x³·P(x²); V2, V7 scratch",
	"erf":                "V0 x; V6 |x|; V2 x²; V3 x·P(x²); V7 min(|x|,10); V8:V9 its square as hi+lo; V1 sign(x)·(1-erfc|x|); V10-V12 scratch",
	"gelu":               "V0 x; V1 z = x/√2; V2 |z|; V3 z²; V4 erf(z); V5 Φ; V6 min(|x|,20); V7:V8 x²/2 as hi+lo; V12 e^(-x²/2); V9-V11, V13 scratch; V1 x·Φ",
	"geluTanh":           "V0 x; V1 x²; V2 x³; V3 2u; V4 sigmoid(2u); V5-V7 scratch; V1 x·sigmoid(2u)",
	"geluBackward":       "as gelu, then V12 φ = e^(-x²/2)/√(2π), V5 Φ + x·φ; V2 dy; V1 dx",
	"geluTanhBackward":   "V8 x-x (0, or NaN for ±Inf); V0 x clamped to ±20; V1 x²; V3 2u, then s(1-s) terms; V4 r = 1/(1+e); V5 e·r; V6 s; V2 β(1+3κx²), then f'; V2 dy; V1 dx",
	"siluBackward":       "V0 x; V3 r = 1/(1+e); V4 e·r, then 1-s; V5 s; V6 1+x(1-s); V2 dy; V1 dx",
	"relu":               "V14 zero; V(u) x then max(0, x), for the u-th of 4 unrolled vectors",
	"reluBackward":       "V14 zero; V(2u) x, then the mask x > 0 or NaN, then dx; V(2u+1) dy",
	"tanhBackward":       "V(2u) y, y², 1-y², then dx; V(2u+1) one, then dy",
	"sigmoidBackward":    "V(2u) y; V(2u+1) one, 1-y, dy·(1-y), then dx; V(8+u) dy",
	"add":                "V(2u) a then a+b, V(2u+1) b, for the u-th of 4 unrolled vectors",
	"addScaled":          "V14 s; V(2u) a, a·s, then a·s+b·s; V(2u+1) b, then b·s",
	"sub":                "V(2u) a then a-b, V(2u+1) b",
	"mul":                "V(2u) a then a·b, V(2u+1) b",
	"div":                "V(2u) a then a/b, V(2u+1) b",
	"addScalar":          "V14 s; V(u) x then x+s",
	"mulScalar":          "V14 s; V(u) x then x·s",
	"divScalar":          "V14 s; V(u) x then x/s",
	"neg":                "V14 the sign bit; V(u) x then -x",
	"abs":                "V14 all bits but the sign; V(u) x then |x|",
	"square":             "V(u) x then x·x",
	"cube":               "V(u) x then x·x·x; V(4+u) x·x",
	"sqrt":               "V(u) x then sqrt(x)",
	"rsqrt":              "V14 one; V(u) x, sqrt(x), then 1/sqrt(x)",
	"reciprocal":         "V14 one; V(u) x then 1/x",
	"sign":               "V13 zero; V14 one; V(u) x, then (x < 0 ? 1 : 0), then the sign; V(4+u) x > 0 ? 1 : 0",
	"toBF16":             "V0 x; V1 x>>16, then the NaN result; V2 its low bit; V3 x+0x7fff+bit, then rounded >>16, then packed to 16 bits; V4 the NaN lanes (AVX2)",
	"fromBF16":           "V0 the 16-bit elements widened, then moved into the high half",
	"maximum":            "V(2u) a; V(2u+1) b, then max(a, b) with NaN from either; V(8+u) the lanes where a is NaN (AVX2)",
	"minimum":            "V(2u) a; V(2u+1) b, then min(a, b) with NaN from either; V(8+u) the lanes where a is NaN (AVX2)",
	"maximumScalar":      "V14 b; V(2u) a; V(2u+1) max(a, b) with NaN from either; V(8+u) the lanes where a is NaN (AVX2)",
	"minimumScalar":      "V14 b; V(2u) a; V(2u+1) min(a, b) with NaN from either; V(8+u) the lanes where a is NaN (AVX2)",
	"mulScalarFlush":     "V14 s; V13 abs mask; V12 smallest normal; V(u) x then x·s, zeroed where subnormal; V(4+u) |x·s|, then the mask",
	"axpy":               "V14 alpha; V(2u) x; V(2u+1) dst then dst + alpha·x",
	"sum":                "V0 x; V1:V2 its halves as float64; V12:V13, V10:V11 float64 accumulators of the two unrolled vectors",
	"sumSquares":         "V0 x; V1:V2 its halves as float64; V12:V13, V10:V11 float64 accumulators of the two unrolled vectors",
	"dot":                "V0 x, V3 y; V1:V2 and V4:V5 their halves as float64; V12:V13 float64 accumulators",
	"max":                "V0 x (-Inf past the tail); V12 running max; K3 (AVX-512) or V13 (AVX2) lanes that saw a NaN",
	"min":                "V0 x (+Inf past the tail); V12 running min; K3 (AVX-512) or V13 (AVX2) lanes that saw a NaN",
	"expSubSum":          "V14 m; V0 x-m; V1 exp(x-m); V5:V6 its halves as float64; V12:V13 float64 accumulators",
	"sumExpSub":          "V14 m; V0 x-m; V1 exp(x-m); V5:V6 its halves as float64; V12:V13 float64 accumulators",
	"sumSqDev":           "V14 mean; V0 x; V1:V2 its halves as float64, then minus the mean; V12:V13, V10:V11 float64 accumulators of the two unrolled vectors; V3, V4 the tail's float64 masks (AVX2)",
	"dotDev":             "V14 mean; V0 y, V3 x; V1:V2 and V4:V5 their halves as float64, x's minus the mean; V12:V13, V10:V11 float64 accumulators of the two unrolled vectors",
	"scaleShift":         "V13 a; V14 b; V(u) x then x·a then x·a+b",
	"scaleAdd2":          "V12 a; V13 b; V14 c; V(2u) x, x·a, then x·a+y·b+c; V(2u+1) y, y·b",
	"subSub":             "V13 a; V14 b; V(u) x then (x-a)-b",
	"softmaxBwd":         "V14 s; V(2u) dy then (dy-s)·y; V(2u+1) y",
	"logSoftmaxBwd":      "V14 s; V0 y; V1 exp(y); V5 dy then dy - exp(y)·s",
	"sgd":                "V0 d = ±g; V1 p; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdL2":              "V0 d = ±g + wd·p; V1 p; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdMom":             "V0 d; V1 p; V2 buf; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdL2Mom":           "V0 d; V1 p; V2 buf; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdMomFirst":        "V0 d; V1 p; V2 buf = d; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdL2MomFirst":      "V0 d; V1 p; V2 buf = d; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdNesterov":        "V0 d; V1 p; V2 buf; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdL2Nesterov":      "V0 d; V1 p; V2 buf; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdNesterovFirst":   "V0 d; V1 p; V2 buf = d; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"sgdL2NesterovFirst": "V0 d; V1 p; V2 buf = d; V10-V14 gsign, wd, mom, 1-dampening, -lr",
	"adamw":              "V0 g; V1 p; V2 m; V3 v; V4 sqrt(v)/bc2Sqrt+eps; V5 update; V8, V9 broadcast scalars",
	"adamL2":             "V0 g (+wd·p); V1 p; V2 m; V3 v; V4 denominator; V5 update; V8, V9 broadcast scalars",
	"adam":               "V0 g; V1 p; V2 m; V3 v; V4 denominator; V5 update; V8, V9 broadcast scalars",
}

func (g *gen) emit(k kernel) {
	fn := k.name + g.name
	fmt.Fprintf(&g.b, "// func %s%s\n", fn, k.goArgs)
	doc, ok := regDoc[k.name]
	if !ok {
		panic("no register doc for " + k.name)
	}
	fmt.Fprintf(&g.b, "// Registers: %s.\n", doc)
	fmt.Fprintf(&g.b, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", fn, k.frame)
	for _, p := range k.ptrs {
		f := strings.Fields(p)
		g.op("MOVQ %s, %s", f[1], f[0])
	}
	g.op("MOVQ %s, CX", k.n)
	if k.setup != nil {
		k.setup(g)
	}
	u := max(k.unroll, 1)
	advance := func(n int) {
		for _, p := range k.ptrs {
			r := strings.Fields(p)[0]
			switch r {
			case "AX":
			case k.narrow:
				g.op("ADDQ $%d, %s", n*g.vb/2, r)
			default:
				g.op("ADDQ $%d, %s", n*g.vb, r)
			}
		}
		g.op("SUBQ $%d, CX", n*g.w)
	}
	if u > 1 {
		fmt.Fprintf(&g.b, "loop%d:\n", u)
		g.op("CMPQ CX, $%d", u*g.w)
		g.op("JLT loop1")
		for i := 0; i < u; i++ {
			k.body(g, i)
		}
		advance(u)
		g.op("JMP loop%d", u)
	}
	fmt.Fprintf(&g.b, "loop1:\n")
	g.op("CMPQ CX, $%d", g.w)
	g.op("JLT tail")
	k.body(g, 0)
	advance(1)
	g.op("JMP loop1")
	fmt.Fprintf(&g.b, "tail:\n")
	if k.whole {
		fmt.Fprintf(&g.b, "done:\n")
		g.op("VZEROUPPER")
		g.op("RET")
		fmt.Fprintf(&g.b, "\n")
		return
	}
	g.op("TESTQ CX, CX")
	g.op("JZ done")
	if g.k512 {
		g.op("MOVL $1, R11")
		g.op("SHLL CX, R11")
		g.op("DECL R11")
		g.op("KMOVW R11, K1")
	} else {
		g.op("LEAQ tailmask<>+32(SB), R11")
		g.op("SHLQ $2, CX")
		g.op("SUBQ CX, R11")
		g.op("VMOVDQU (R11), Y15")
	}
	g.tail = true
	k.body(g, 0)
	g.tail = false
	fmt.Fprintf(&g.b, "done:\n")
	if k.finish != nil {
		k.finish(g)
	}
	g.op("VZEROUPPER")
	g.op("RET")
	fmt.Fprintf(&g.b, "\n")
}

const header = "// Code generated by gen_asm.go; DO NOT EDIT.\n\n"

func writeAsm(a isa, ks []kernel) {
	g := &gen{isa: a, used: map[string]uint32{}, used64: map[string]uint64{}}
	fmt.Fprintf(&g.b, "%s//go:build !purego\n\n", header)
	fmt.Fprintf(&g.b, "// %s kernels of package vmath (%d float32 lanes). Every kernel:\n", a.name, a.w)
	fmt.Fprintf(&g.b, "// CX elements left; DI, SI, DX, R8 the slices in argument order (see each\n")
	fmt.Fprintf(&g.b, "// kernel's MOVQs); AX a constant block; R11 scratch for the tail mask.\n")
	if a.k512 {
		fmt.Fprintf(&g.b, "// The last 1..15 elements run the loop body once more under the K1 mask\n")
		fmt.Fprintf(&g.b, "// (zeroing or merging loads, masked stores); K2 holds lane selections.\n\n")
	} else {
		fmt.Fprintf(&g.b, "// The last 1..7 elements run the loop body once more with VMASKMOVPS\n")
		fmt.Fprintf(&g.b, "// loads and stores under the lane mask in Y15 (from tailmask<>).\n\n")
	}
	fmt.Fprintf(&g.b, "#include \"textflag.h\"\n\n")
	for _, k := range ks {
		g.emit(k)
	}
	writeConsts(&g.b, g.used, 4)
	writeConsts(&g.b, g.used64, 8)
	if !a.k512 {
		for i := 0; i < 16; i++ {
			v := uint32(0)
			if i < 8 {
				v = 0xffffffff
			}
			fmt.Fprintf(&g.b, "DATA tailmask<>+%d(SB)/4, $0x%08x\n", 4*i, v)
		}
		fmt.Fprintf(&g.b, "GLOBL tailmask<>(SB), RODATA|NOPTR, $64\n")
	}
	must(os.WriteFile(filepath.Join(*outDir, "kernels_"+strings.ToLower(a.name)+"_amd64.s"), g.b.Bytes(), 0o644))
}

// flaggedLanesToAX moves the lanes a kernel flagged along the way (in K3
// on AVX-512, in the sign bits of Y13 on AVX2: a NaN seen, an argument
// past the reduction's range) into AX's low bits.
func (g *gen) flaggedLanesToAX() {
	if g.k512 {
		g.op("KMOVW K3, AX")
	} else {
		g.op("VMOVMSKPS Y13, AX")
	}
}

// writeConsts writes each constant of used as a 64-byte symbol of its
// value repeated in lanes of size bytes, in name order.
func writeConsts[T uint32 | uint64](b io.Writer, used map[string]T, size int) {
	for _, n := range slices.Sorted(maps.Keys(used)) {
		for i := 0; i < 64/size; i++ {
			fmt.Fprintf(b, "DATA %s<>+%d(SB)/%d, $0x%0*x\n", n, size*i, size, 2*size, used[n])
		}
		fmt.Fprintf(b, "GLOBL %s<>(SB), RODATA|NOPTR, $64\n\n", n)
	}
}

func writeGo(ks []kernel) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s//go:build amd64 && !purego\n\npackage vmath\n\n", header)
	for _, a := range []isa{avx512, avx2} {
		for _, k := range ks {
			fmt.Fprintf(&b, "//go:noescape\nfunc %s%s%s\n\n", k.name, a.name, k.goArgs)
		}
	}
	for _, a := range []isa{avx512, avx2} {
		fmt.Fprintf(&b, "var %sKernels = kernels{\n\tname: %q,\n", strings.ToLower(a.name), strings.ToLower(a.name))
		for _, k := range ks {
			if strings.HasPrefix(k.name, "adam") || strings.HasPrefix(k.name, "sgd") {
				continue
			}
			fmt.Fprintf(&b, "\t%s: %s%s,\n", k.name, k.name, a.name)
		}
		// The constants go by value through the table (a pointer passed
		// through a func value would escape and allocate) and by pointer
		// to the assembly.
		fmt.Fprintf(&b, "\tsgd: func(p, g, buf []float32, c sgdConsts, mode sgdMode) {\n\t\tswitch mode {\n")
		for _, m := range sgdModes {
			fmt.Fprintf(&b, "\t\tcase %d:\n\t\t\tsgd%s%s(p, g, buf, &c)\n", m.bits, m.suffix, a.name)
		}
		fmt.Fprintf(&b, "\t\tdefault:\n\t\t\tsgdGo(p, g, buf, c, mode)\n\t\t}\n\t},\n")
		fmt.Fprintf(&b, "\tadam: func(p, g, m, v []float32, c adamConsts) {\n")
		fmt.Fprintf(&b, "\t\tswitch {\n\t\tcase c.adamW:\n\t\t\tadamw%[1]s(p, g, m, v, &c)\n\t\tcase c.l2:\n\t\t\tadamL2%[1]s(p, g, m, v, &c)\n\t\tdefault:\n\t\t\tadam%[1]s(p, g, m, v, &c)\n\t\t}\n\t},\n}\n\n", a.name)
	}
	src, err := format.Source(b.Bytes())
	must(err)
	must(os.WriteFile(filepath.Join(*outDir, "kernels_amd64.go"), src, 0o644))
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

var outDir = flag.String("out", ".", "directory to write the generated files to")

func main() {
	flag.Parse()
	ks := kernels()
	writeAsm(avx512, ks)
	writeAsm(avx2, ks)
	writeGo(ks)
}
