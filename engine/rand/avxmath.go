package rand

import "math"

// This file reproduces normal_fill_16_AVX2 from
// ATen/native/cpu/DistributionTemplates.h together with log256_ps and
// sincos256_ps from ATen/native/cpu/avx_mathfun.h (Giovanni Garberoglio's AVX
// port of Julien Pommier's sse_mathfun, itself a port of Cephes logf/sinf/cosf).
//
// The C code is written with separate _mm256_mul_ps/_mm256_add_ps calls, but
// GCC (Debian's build uses -O2 -mavx2 -mfma with the default
// -ffp-contract=fast) contracts many multiply-add pairs into FMA instructions.
// Which ones it fused was read off the machine code of libtorch_cpu.so 1.13.1
// (the AVX2 normal_kernel). The Go code below follows that machine code one
// instruction per line on 8-lane vectors (v8, a __m256): each fma8 is one
// vfmadd/vfnmadd/vfmsub there, each mul8 a vmulps whose rounding must be kept.
// It is the reference, and the implementation on CPUs without AVX2 and FMA
// and on other architectures; normal_amd64.s runs the same instructions.

// v8 is the eight float32 lanes of a __m256.
type v8 [8]float32

func splat(x float32) v8 { return v8{x, x, x, x, x, x, x, x} }

func mul8(r, a, b *v8) {
	for i := range r {
		r[i] = float32(a[i] * b[i]) // the conversion forbids fusing it into a later add
	}
}

func add8(r, a, b *v8) {
	for i := range r {
		r[i] = a[i] + b[i]
	}
}

func sub8(r, a, b *v8) {
	for i := range r {
		r[i] = a[i] - b[i]
	}
}

// neg8 flips the sign bits (the n in vfnmadd, the s in vfmsub).
func neg8(r, a *v8) {
	for i := range r {
		r[i] = -a[i]
	}
}

// fmaLanes computes the kernel's fused multiply-adds. Rounding a*b+c (the
// product is exact in float64) to float64 and then to float32 gives the
// correctly rounded float32 result unless the float64 rounding was inexact and
// landed exactly on a float32 halfway point, or the result is in the float32
// subnormal range (see fma32). The fast mode notes those cases, and
// normal16AVX2 redoes the block in exact mode when one occurred. For random
// inputs an inexact sum lands on a halfway point with probability about
// 2^-29, so this costs nothing measurable.
type fmaLanes struct {
	exact bool
	mid   uint64 // 0 once an inexact sum has hit a float32 halfway point, else max
	small uint64 // below smallLimit once a result had 0 < |s| < 2^-126
}

const smallLimit = (1023-126)<<53 - 1

func (k *fmaLanes) reset() { k.mid, k.small = math.MaxUint64, math.MaxUint64 }

// suspect reports whether a fast-mode result since reset may be misrounded.
func (k *fmaLanes) suspect() bool { return k.mid == 0 || k.small < smallLimit }

// fma8 is r = a*b+c, rounded once per lane.
func (k *fmaLanes) fma8(r, a, b, c *v8) {
	if k.exact {
		for i := range r {
			r[i] = fma32(a[i], b[i], c[i])
		}
		return
	}
	mid, small := k.mid, k.small
	for i := range r {
		p, q := float64(a[i])*float64(b[i]), float64(c[i])
		s := p + q
		u := math.Float64bits(s)
		if u&(1<<29-1) == 1<<28 {
			// On a halfway point: harmless if the float64 sum was exact
			// (then float32 rounds it to even as it should), which is
			// common; otherwise the block is redone exactly.
			bb := s - p
			if (p-(s-bb))+(q-bb) != 0 { // TwoSum error
				mid = 0
			}
		}
		small = min(small, u<<1-1)
		r[i] = float32(s)
	}
	k.mid, k.small = mid, small
}

// Constants of avx_mathfun.h, as float32 (the _ps256_ tables).
const (
	cephesSQRTHF = float32(0.707106781186547524)
	logP0        = float32(7.0376836292e-2)
	logP1        = float32(-1.1514610310e-1)
	logP2        = float32(1.1676998740e-1)
	logP3        = float32(-1.2420140846e-1)
	logP4        = float32(+1.4249322787e-1)
	logP5        = float32(-1.6668057665e-1)
	logP6        = float32(+2.0000714765e-1)
	logP7        = float32(-2.4999993993e-1)
	logP8        = float32(+3.3333331174e-1)
	logQ1        = float32(-2.12194440e-4)
	logQ2        = float32(0.693359375)

	minusDP1   = float32(-0.78515625)
	minusDP2   = float32(-2.4187564849853515625e-4)
	minusDP3   = float32(-3.77489497744594108e-8)
	sincofP0   = float32(-1.9515295891e-4)
	sincofP1   = float32(8.3321608736e-3)
	sincofP2   = float32(-1.6666654611e-1)
	coscofP0   = float32(2.443315711809948e-005)
	coscofP1   = float32(-1.388731625493765e-003)
	coscofP2   = float32(4.166664568298827e-002)
	cephesFOPI = float32(1.27323954473516) // 4/pi

	minNormPos = 0x00800000 // smallest normal float32, as bits
	// twoPiF32 is _mm256_set1_ps(2.0f * c10::pi<double>): 2*pi computed in
	// double, then rounded to float.
	twoPiF32 = float32(2 * math.Pi)
)

var (
	vOne, vHalf, vMinusTwo, vTwoPi = splat(1), splat(0.5), splat(-2), splat(twoPiF32)
	vLogP                          = [9]v8{splat(logP0), splat(logP1), splat(logP2), splat(logP3), splat(logP4), splat(logP5), splat(logP6), splat(logP7), splat(logP8)}
	vLogQ1, vLogQ2                 = splat(logQ1), splat(logQ2)
	vDP1, vDP2, vDP3               = splat(minusDP1), splat(minusDP2), splat(minusDP3)
	vSinP0, vSinP1, vSinP2         = splat(sincofP0), splat(sincofP1), splat(sincofP2)
	vCosP0, vCosP1, vCosP2         = splat(coscofP0), splat(coscofP1), splat(coscofP2)
	vFOPI                          = splat(cephesFOPI)
)

// log256 is log256_ps for the inputs normal_fill_16_AVX2 gives it, x = 1-u
// with u in [0, 1), so x in [2^-24, 1].
func (k *fmaLanes) log256(r, in *v8) {
	var x, e, tmp, one, z, y, t v8
	var invalid [8]bool
	for i, v := range in {
		invalid[i] = v <= 0 // _CMP_LE_OS; never true for these inputs
		if !(v > math.Float32frombits(minNormPos)) {
			v = math.Float32frombits(minNormPos) // _mm256_max_ps with min_norm_pos
		}
		bits := math.Float32bits(v)
		// Keep the mantissa, force the exponent of 0.5: x in [0.5, 1);
		// e = exponent + 1.
		x[i] = math.Float32frombits(bits&^0x7f800000 | 0x3f000000)
		e[i] = float32(int32(bits>>23)-0x7f) + 1
		// if x < SQRTHF { e -= 1; x = x + x - 1 } else { x = x - 1 },
		// branch-free in the C code: tmp is x or +0, one is 1 or +0.
		if x[i] < cephesSQRTHF {
			tmp[i], one[i] = x[i], 1
		}
	}
	sub8(&x, &x, &vOne)
	sub8(&e, &e, &one)
	add8(&x, &x, &tmp)

	mul8(&z, &x, &x)

	// The nine-term polynomial: a broadcast and eight FMAs.
	k.fma8(&y, &x, &vLogP[0], &vLogP[1])
	for j := 2; j <= 8; j++ {
		k.fma8(&y, &x, &y, &vLogP[j])
	}
	mul8(&y, &x, &y)
	// y = y*z + e*q1: e*q1 is its own vmulps, y*z is fused.
	mul8(&t, &e, &vLogQ1)
	k.fma8(&y, &y, &z, &t)
	// y -= z*0.5: vfnmadd.
	neg8(&t, &z)
	k.fma8(&y, &t, &vHalf, &y)
	add8(&x, &x, &y)
	k.fma8(r, &e, &vLogQ2, &x)
	for i := range r {
		if invalid[i] { // or with the all-ones mask: NaN
			r[i] = math.Float32frombits(0xffffffff)
		}
	}
}

// sincos256 is sincos256_ps for the angles of normal_fill_16_AVX2,
// theta = 2*pi*u in [0, 2*pi).
func (k *fmaLanes) sincos256(s, c, theta *v8) {
	var x, y, z, yc, ys, t v8
	var j [8]int32
	var signSin, signCos [8]uint32
	for i, th := range theta {
		x[i] = math.Float32frombits(math.Float32bits(th) &^ 0x80000000)
		signSin[i] = math.Float32bits(th) & 0x80000000
	}
	mul8(&t, &x, &vFOPI)
	for i, q := range t {
		// j = (int(x*4/pi) + 1) &^ 1: the octant rounded up to even;
		// cvttps2dq truncates.
		j[i] = (int32(q) + 1) &^ 1
		y[i] = float32(j[i])
		signSin[i] ^= uint32(j[i]&4) << 29
		signCos[i] = uint32(^(j[i]-2)&4) << 29
	}

	// Extended precision modular arithmetic, x - y*pi/4 in three FMAs.
	k.fma8(&x, &y, &vDP1, &x)
	k.fma8(&x, &y, &vDP2, &x)
	k.fma8(&x, &y, &vDP3, &x)

	mul8(&z, &x, &x)

	// Cosine polynomial: ((cp0*z + cp1)*z + cp2)*z*z - z/2 + 1.
	k.fma8(&yc, &z, &vCosP0, &vCosP1)
	k.fma8(&yc, &z, &yc, &vCosP2)
	mul8(&t, &z, &vHalf)
	neg8(&t, &t)
	mul8(&yc, &z, &yc)
	k.fma8(&yc, &yc, &z, &t) // vfmsub
	add8(&yc, &yc, &vOne)

	// Sine polynomial: ((sp0*z + sp1)*z + sp2)*z*x + x.
	k.fma8(&ys, &vSinP0, &z, &vSinP1)
	k.fma8(&ys, &z, &ys, &vSinP2)
	mul8(&ys, &z, &ys)
	k.fma8(&ys, &ys, &x, &x)

	// Select with the bit masks and adds of the C code: one operand of each
	// add is +0, so this is a selection except that -0 becomes +0.
	for i := range s {
		var ysin1, ysin2 float32 // andnot(mask, y), and(mask, y2)
		if j[i]&2 == 0 {
			ysin2 = ys[i]
		} else {
			ysin1 = yc[i]
		}
		si := ysin1 + ysin2
		ci := (yc[i] - ysin1) + (ys[i] - ysin2)
		s[i] = math.Float32frombits(math.Float32bits(si) ^ signSin[i])
		c[i] = math.Float32frombits(math.Float32bits(ci) ^ signCos[i])
	}
}

// normal16 is normal_fill_16_AVX2 on the lanes: u1 and u2 hold uniforms in
// [0, 1); n1 receives radius*cos*std+mean and n2 radius*sin*std+mean, the
// last step one FMA.
func (k *fmaLanes) normal16(n1, n2, u1, u2, mean, std *v8) {
	var x, l, radius, theta, s, c v8
	sub8(&x, &vOne, u1)
	k.log256(&l, &x)
	mul8(&radius, &vMinusTwo, &l)
	for i, r := range radius {
		radius[i] = float32(math.Sqrt(float64(r))) // vsqrtps: exact after rounding
	}
	mul8(&theta, &vTwoPi, u2)
	k.sincos256(&s, &c, &theta)
	mul8(&x, &radius, &c)
	k.fma8(n1, &x, std, mean)
	mul8(&x, &radius, &s)
	k.fma8(n2, &x, std, mean)
}

// forceExactFMA makes normal16AVX2 take the exact path for every block
// (tests).
var forceExactFMA = false

// normal16AVX2 is normal_fill_16_AVX2: d[0:8] and d[8:16] hold uniforms in
// [0, 1) and receive the Box-Muller pairs, radius*cos in the first half and
// radius*sin in the second.
func normal16AVX2(d []float32, mean, std *v8) {
	d = d[:16]
	var u1, u2, n1, n2 v8
	copy(u1[:], d[0:8])
	copy(u2[:], d[8:16])
	k := fmaLanes{exact: forceExactFMA}
	k.reset()
	k.normal16(&n1, &n2, &u1, &u2, mean, std)
	if !k.exact && k.suspect() {
		k.exact = true
		k.normal16(&n1, &n2, &u1, &u2, mean, std)
	}
	copy(d[0:8], n1[:])
	copy(d[8:16], n2[:])
}
