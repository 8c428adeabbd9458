package rand

import "math"

// The double-precision Box-Muller transform needs sin and cos of the angle
// θ = 2π·u, u in [0, 1). PyTorch takes them from the C library, whose last
// bits are its own. sincos below computes them correctly rounded instead:
// θ is reduced modulo π/2 with a 200-bit π/2, the series of sin and cos are
// summed in double-word arithmetic to a relative accuracy near 2^-100, and
// the double-word result is rounded once to float64. glibc's sin and cos,
// which are not correctly rounded but err by less than an ulp, agree with
// that on all but about one value in 700 of the generator's angles
// (TestSincosGlibc counts the exceptions); TestSincosAccuracy checks the
// error bound against math/big.
//
// Double-word arithmetic represents a number as an unevaluated sum hi + lo
// of two float64s with |lo| at most about half an ulp of hi, about 106
// significant bits (Dekker, "A floating-point technique for extending the
// available precision", Numer. Math. 18, 1971). The building blocks are the
// error-free transformations of Knuth (TAOCP vol. 2, §4.2.2, 2Sum), Dekker
// (Fast2Sum) and the exact product a*b = p + FMA(a, b, -p); the product of
// two double-words is Algorithm 12 (DWTimesDW3) of Joldes, Muller and
// Popescu, "Tight and rigorous error bounds for basic building blocks of
// double-word arithmetic", ACM TOMS 44(2), 2017, with a relative error of a
// few u² (u = 2^-53). Muller et al., Handbook of Floating-Point Arithmetic
// (2nd ed., 2018), ch. 4 and 14, describe both.
//
// Every operation whose rounding matters is written so that the compiler
// cannot contract it into a fused multiply-add (Go allows that on some
// architectures unless an explicit conversion rounds the product), and every
// fused multiply-add is an explicit math.FMA, so the results are the same
// on every architecture.

// twoSum returns s = fl(a+b) and the rounding error e, with s + e = a + b
// exactly (Knuth's 2Sum; no condition on a and b).
func twoSum(a, b float64) (s, e float64) {
	s = a + b
	bb := s - a
	e = (a - (s - bb)) + (b - bb)
	return s, e
}

// fastTwoSum is twoSum for |a| >= |b| (or a = 0): Dekker's Fast2Sum.
func fastTwoSum(a, b float64) (s, e float64) {
	s = a + b
	e = b - (s - a)
	return s, e
}

// mulDW returns (xh + xl)·(yh + yl) as a normalised double-word
// (DWTimesDW3 of Joldes, Muller and Popescu).
func mulDW(xh, xl, yh, yl float64) (hi, lo float64) {
	ch := xh * yh
	cl1 := math.FMA(xh, yh, -ch) // ch + cl1 = xh·yh exactly
	t := math.FMA(xh, yl, float64(xl*yl))
	t = math.FMA(xl, yh, t)
	return fastTwoSum(ch, cl1+t)
}

// hornerDW returns (ah + al)·(zh + zl) + (ch + cl), one step of Horner's
// rule in double-word arithmetic, leaving the result unnormalised (|lo| up
// to about an ulp of hi), which the next step accepts as it is. It requires
// |a·z| <= |c|, which holds by a wide margin in the series below
// (|a·z/c| <= z/12 < 1/19), so the sum needs no 2Sum and suffers no
// cancellation.
// The high parts depend on each other through one product and one sum only,
// and the low parts follow off that critical path.
func hornerDW(ah, al, zh, zl, ch, cl float64) (hi, lo float64) {
	ph := ah * zh
	pl := math.FMA(ah, zh, -ph) + math.FMA(ah, zl, float64(al*zh)) // al·zl is below 2^-104 of a·z
	hi = ch + ph
	e := ph - (hi - ch) // Fast2Sum
	return hi, e + (cl + pl)
}

// π/2 as the sum of four float64s of 50 significant bits each, with an
// error below 2^-208: the first 200 bits of π/2, rounded piece by piece.
// Because each piece has 50 bits, n·pio2[i] is exact for integers n <= 8.
var pio2 = [4]float64{
	0x1.921fb54442d18p+0,
	0x1.1a62633145c08p-54,
	-0x1.1f1976b7ed8f8p-106,
	-0x1.dd660ce2ff7d0p-157,
}

// sincosMax bounds the arguments of sincos: |x| <= sincosMax gives n <= 8
// in the reduction, for which n·pio2[i] is exact. The generator's angles
// are below 2π.
const sincosMax = 12

// reducePio2 returns n and the double-word r = rh + rl with x = n·π/2 + r,
// |r| < π/4 + 2^-47, for 0 <= x <= sincosMax. The relative error of
// r is below 2^-104: the doubles in that range closest to a nonzero
// multiple of π/2 are more than 2^-54 away from it, so r is either x itself
// (n = 0) or at least 2^-54, while the error of the computation is below
// 2^-158.
func reducePio2(x float64) (n int, rh, rl float64) {
	// Rounding errors in this estimate of x/(π/2) only matter within
	// about 2^-48 of an odd multiple of π/4, where either choice of n
	// leaves |r| barely above π/4; the series below allow for that.
	n = int(float64(x*(2/math.Pi)) + 0.5)
	if n == 0 {
		return 0, x, 0
	}
	nf := float64(n)
	// x - n·pio2[0] is exact: for n >= 2, x lies within a factor 2 of
	// n·pio2[0] (Sterbenz's lemma); for n = 1, x >= π/4·(1 - 2^-50) and
	// pio2[0] are both multiples of 2^-53 and differ by less than 1.
	a := x - nf*pio2[0]
	h, l := twoSum(a, -nf*pio2[1])
	h, e := twoSum(h, -nf*pio2[2])
	// Now x - n·(pio2[0]+pio2[1]+pio2[2]) = h + e + l exactly, where
	// |e|, |l| <= ulp(h)/2. The last piece (at most 2^-153 here) and the
	// rounding of e + l shift the sum by about 2^-106·|h|.
	return n, h, (e + l) - nf*pio2[3]
}

// Taylor coefficients (Abramowitz and Stegun 4.3.65 and 4.3.66)
//
//	sin r = r + r·z·Σ_j sinQ_j z^j,  sinQ_j = (-1)^(j+1)/(2j+3)!,
//	cos r = 1 + z·Σ_j cosR_j z^j,    cosR_j = (-1)^(j+1)/(2j+2)!,
//
// with z = r². For |r| <= π/4 the first omitted terms, r^27/27! and
// r^28/28!, are below 2^-102 relative to sin r and 2^-107 relative to
// cos r. The leading coefficients are double-words (hi, lo: 1/k! to about
// 2^-106 relative); in the trailing ones, whose terms are below 2^-48 of
// the sum, a float64 is accurate enough. TestSincosConstants recomputes all
// of them with math/big.
var (
	sinQ = [7][2]float64{
		{-0x1.5555555555555p-3, -0x1.5555555555555p-57},  // -1/3!
		{0x1.1111111111111p-7, 0x1.1111111111111p-63},    // 1/5!
		{-0x1.a01a01a01a01ap-13, -0x1.a01a01a01a01ap-73}, // -1/7!
		{0x1.71de3a556c734p-19, -0x1.c154f8ddc6c00p-73},  // 1/9!
		{-0x1.ae64567f544e4p-26, 0x1.c062e06d1f209p-80},  // -1/11!
		{0x1.6124613a86d09p-33, 0x1.f28e0cc748ebep-87},   // 1/13!
		{-0x1.ae7f3e733b81fp-41, -0x1.1d8656b0ee8cbp-97}, // -1/15!
	}
	sinQTail = [5]float64{
		0x1.952c77030ad4ap-49,  // 1/17!
		-0x1.2f49b46814157p-57, // -1/19!
		0x1.71b8ef6dcf572p-66,  // 1/21!
		-0x1.761b41316381ap-75, // -1/23!
		0x1.3f3ccdd165fa9p-84,  // 1/25!
	}
	cosR = [7][2]float64{
		{-0x1.0000000000000p-1, 0},                       // -1/2!
		{0x1.5555555555555p-5, 0x1.5555555555555p-59},    // 1/4!
		{-0x1.6c16c16c16c17p-10, 0x1.f49f49f49f49fp-65},  // -1/6!
		{0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-76},   // 1/8!
		{-0x1.27e4fb7789f5cp-22, -0x1.cbbc05b4fa99ap-76}, // -1/10!
		{0x1.1eed8eff8d898p-29, -0x1.2aec959e14c06p-83},  // 1/12!
		{-0x1.93974a8c07c9dp-37, -0x1.05d6f8a2efd1fp-92}, // -1/14!
	}
	cosRTail = [6]float64{
		0x1.ae7f3e733b81fp-45,  // 1/16!
		-0x1.6827863b97d97p-53, // -1/18!
		0x1.e542ba4020225p-62,  // 1/20!
		-0x1.0ce396db7f853p-70, // -1/22!
		0x1.f2cf01972f578p-80,  // 1/24!
		-0x1.88e85fc6a4e5ap-89, // -1/26!
	}
)

// sincosDW returns sin r and cos r as normalised double-words, for
// |r| < π/4 + 2^-47 given as the double-word rh + rl.
func sincosDW(rh, rl float64) (sh, sl, ch, cl float64) {
	// z = r² = rh² + 2·rh·rl (+ rl², below 2^-106·z).
	zh := rh * rh
	zl := math.FMA(rh, rh, -zh)
	zl = math.FMA(2*rh, rl, zl)
	zh, zl = fastTwoSum(zh, zl)

	// r³ = r·z, ready for the end of the sine.
	r3h, r3l := mulDW(rh, rl, zh, zl)

	// Horner's rule: the trailing coefficients in float64, with z rounded
	// to float64 (its low part is below 2^-53 of z and these terms below
	// 2^-48 of the sum), then the leading ones in double-word arithmetic.
	// The sine and cosine chains are interleaved so that their latencies
	// overlap.
	qh := sinQTail[len(sinQTail)-1]
	ph := cosRTail[len(cosRTail)-1]
	ph = math.FMA(ph, zh, cosRTail[len(cosRTail)-2])
	for i := len(sinQTail) - 2; i >= 0; i-- {
		qh = math.FMA(qh, zh, sinQTail[i])
		ph = math.FMA(ph, zh, cosRTail[i])
	}
	ql, pl := 0.0, 0.0
	for i := len(sinQ) - 1; i >= 0; i-- {
		qh, ql = hornerDW(qh, ql, zh, zl, sinQ[i][0], sinQ[i][1])
		ph, pl = hornerDW(ph, pl, zh, zl, cosR[i][0], cosR[i][1])
	}

	// sin r = r + r³·Q(z), where |r²·Q(z)| < 0.11: no cancellation.
	wh, wl := mulDW(r3h, r3l, qh, ql)
	s, e := fastTwoSum(rh, wh)
	sh, sl = fastTwoSum(s, e+(rl+wl))
	// cos r = 1 + z·R(z), where -0.31 < z·R(z) <= 0.
	wh, wl = mulDW(zh, zl, ph, pl)
	s, e = fastTwoSum(1, wh)
	ch, cl = fastTwoSum(s, e+wl)
	return sh, sl, ch, cl
}

// sincos returns sin x and cos x, correctly rounded unless the exact value
// lies within about 2^-100 (relative) of a midpoint between two float64s,
// which random arguments do with a probability near 2^-46. It is meant for
// |x| <= sincosMax; beyond that (never for the generator's angles) it
// returns math.Sincos(x), which is accurate to about an ulp.
func sincos(x float64) (sin, cos float64) {
	ax := math.Abs(x)
	if !(ax <= sincosMax) {
		return math.Sincos(x)
	}
	n, rh, rl := reducePio2(ax)
	// The high parts of the normalised double-words are their values
	// rounded to nearest: the one rounding of the result.
	sh, _, ch, _ := sincosDW(rh, rl)
	// sin(r + n·π/2) and cos(r + n·π/2) by quadrant.
	switch n & 3 {
	case 0:
		sin, cos = sh, ch
	case 1:
		sin, cos = ch, -sh
	case 2:
		sin, cos = -sh, -ch
	default:
		sin, cos = -ch, sh
	}
	if math.Signbit(x) {
		sin = -sin // sin is odd, cos even
	}
	return sin, cos
}
