package vmath

import "math"

// This file holds the portable implementations. They are the reference the
// tests hold every assembly variant to, so they favour accuracy over speed:
// transcendentals are evaluated in float64 with the math package and rounded
// once to float32, which is the correctly rounded result except in the rare
// double-rounding case (an error of at most 0.5 ulp plus 2^-29 ulp).
//
// Where PyTorch rounds an intermediate to float32 (the final multiply by the
// incoming gradient, the scalar operands of the optimizer updates), these
// functions round there too. Explicit float32 conversions keep the Go
// compiler from fusing a multiply and an add on platforms where it would
// (the language allows fusion unless a conversion rounds in between).

// The constants of PyTorch's GELU kernels (aten/src/ATen/native/cpu/
// Activation.cpp). Exact GELU uses the exact values: in the tail, where the
// result is e^(-x²/2)-small, the float32 rounding of 1/√2 would change it by
// x²·1e-8 relative, and the function is 0.5·x·(1+erf(x/√2)) by definition.
// The tanh approximation is defined by its constants, which PyTorch rounds
// to float32; we round them the same way.
var (
	kSqrt1_2   = float64(float32(math.Sqrt2 / 2))                       // gelu: x * M_SQRT1_2
	kInvSqrt2P = float64(float32(2 / math.SqrtPi * math.Sqrt2 / 2 / 2)) // gelu': M_2_SQRTPI * M_SQRT1_2 * 0.5
	kBeta      = float64(float32(math.Sqrt2 * 2 / math.SqrtPi * 0.5))   // gelu tanh: sqrt(2/pi)
	kKappa     = float64(float32(0.044715))
)

// fma32 is a*b+c rounded once to float32 (up to the rare double rounding
// through float64): the product of two float32 values is exact in float64.
// PyTorch's AVX2/AVX-512 kernels use a fused multiply-add for add(x, alpha=)
// and so does the assembly here.
func fma32(a, b, c float32) float32 {
	return float32(float64(a)*float64(b) + float64(c))
}

func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// gelu64 is 0.5·x·(1+erf(x/√2)) written as 0.5·x·erfc(-x/√2), which is the
// same function without the cancellation of 1+erf for negative x.
func gelu64(x float64) float64 { return 0.5 * x * math.Erfc(-x*kSqrt1_2) }

// geluDeriv64 is d/dx gelu = Φ(x) + x·φ(x), PyTorch's cdf + x·pdf.
func geluDeriv64(x float64) float64 {
	return 0.5*math.Erfc(-x*kSqrt1_2) + x*kInvSqrt2P*math.Exp(-0.5*x*x)
}

// geluTanh64 uses 0.5·(1+tanh(u)) = sigmoid(2u): the same value as PyTorch's
// formula, without its cancellation for negative x.
func geluTanh64(x float64) float64 {
	u := kBeta * (x + kKappa*x*x*x)
	return x / (1 + math.Exp(-2*u))
}

// geluTanhDeriv64 is PyTorch's 0.5·(1+t) + 0.5·x·(1-t²)·β·(1+3κx²) with
// t = tanh(u), rewritten with s = sigmoid(2u): 0.5(1+t) = s and
// 0.5(1-t²) = 2s(1-s) = 2/(2+e+1/e), e = exp(-2u), which stays finite when e
// overflows or underflows.
func geluTanhDeriv64(x float64) float64 {
	u := kBeta * (x + kKappa*x*x*x)
	e := math.Exp(-2 * u)
	s := 1 / (1 + e)
	return s + 2*x/(2+e+1/e)*kBeta*(1+3*kKappa*x*x)
}

// siluDeriv64 is PyTorch's sigmoid·(1 + x·(1 - sigmoid)).
func siluDeriv64(x float64) float64 {
	e := math.Exp(-x)
	s := 1 / (1 + e)
	oneMinus := e * s // 1-s without cancellation
	if math.IsInf(e, 1) {
		oneMinus = 1
	}
	return s * (1 + x*oneMinus)
}

// The unary loops below compute in float64 and round once. They stay one
// loop each rather than one loop over a func(float64) float64: the
// indirect call cost 4-9% per element (BenchmarkExp, Tanh, Gelu, GeluTanh
// of the go variant, 2026-11-29, Zen 5), and these loops are the only
// route on CPUs without the assembly.
func expGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(math.Exp(float64(v)))
	}
}

func logGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(math.Log(float64(v)))
	}
}

func sinGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(math.Sin(float64(v)))
	}
}

func cosGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(math.Cos(float64(v)))
	}
}

func tanhGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(math.Tanh(float64(v)))
	}
}

func sigmoidGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(sigmoid64(float64(v)))
	}
}

func erfGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(math.Erf(float64(v)))
	}
}

func geluGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(gelu64(float64(v)))
	}
}

func geluTanhGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(geluTanh64(float64(v)))
	}
}

func siluGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(float64(v) * sigmoid64(float64(v)))
	}
}

// The backward kernels round the derivative to float32 and then multiply by
// dy in float32, as PyTorch's dy * (...) does.

func geluBackwardGo(dx, dy, x []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	for i, v := range x {
		dx[i] = dy[i] * float32(geluDeriv64(float64(v)))
	}
}

func geluTanhBackwardGo(dx, dy, x []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	for i, v := range x {
		dx[i] = dy[i] * float32(geluTanhDeriv64(float64(v)))
	}
}

func siluBackwardGo(dx, dy, x []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	for i, v := range x {
		dx[i] = dy[i] * float32(siluDeriv64(float64(v)))
	}
}

func addGo(dst, a, b []float32) {
	dst, b = dst[:len(a)], b[:len(a)]
	for i := range a {
		dst[i] = a[i] + b[i]
	}
}

func addScaledGo(dst, a, b []float32, s float32) {
	dst, b = dst[:len(a)], b[:len(a)]
	for i := range a {
		dst[i] = float32(a[i]*s) + float32(b[i]*s) // the conversions keep the products rounded (no FMA)
	}
}

func subGo(dst, a, b []float32) {
	dst, b = dst[:len(a)], b[:len(a)]
	for i := range a {
		dst[i] = a[i] - b[i]
	}
}

func mulGo(dst, a, b []float32) {
	dst, b = dst[:len(a)], b[:len(a)]
	for i := range a {
		dst[i] = a[i] * b[i]
	}
}

func divGo(dst, a, b []float32) {
	dst, b = dst[:len(a)], b[:len(a)]
	for i := range a {
		dst[i] = a[i] / b[i]
	}
}

func addScalarGo(dst, x []float32, s float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v + s
	}
}

func mulScalarFlushGo(dst, x []float32, s float32) {
	mulScalarGo(dst, x, s)
	FlushSubnormal(dst)
}

func mulScalarGo(dst, x []float32, s float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * s
	}
}

func divScalarGo(dst, x []float32, s float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v / s
	}
}

func axpyGo(dst []float32, alpha float32, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = fma32(alpha, v, dst[i])
	}
}

// sumGo accumulates in float64 with four partial sums (for instruction-level
// parallelism); the float64 error of a sum of n float32 values stays below
// one float32 ulp of Σ|x| for any n up to 2^28. It is also Sum64's loop for
// float64.
func sumGo[T ~float32 | ~float64](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// dotGo accumulates exact float64 products in float64.
func dotGo(x, y []float32) float64 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i]) * float64(y[i])
		s1 += float64(x[i+1]) * float64(y[i+1])
		s2 += float64(x[i+2]) * float64(y[i+2])
		s3 += float64(x[i+3]) * float64(y[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(y[i])
	}
	return (s0 + s1) + (s2 + s3)
}

func sumSquaresGo(x []float32) float64 { return dotGo(x, x) }

// maxGo returns NaN if any element is NaN, like torch.max; len(x) > 0.
func minGo(x []float32) float32 {
	m := float32(math.Inf(1))
	nan := false
	for _, v := range x {
		if v < m {
			m = v
		}
		nan = nan || v != v
	}
	if nan {
		return float32(math.NaN())
	}
	return m
}

func maxGo(x []float32) float32 {
	m := float32(math.Inf(-1))
	nan := false
	for _, v := range x {
		if v > m {
			m = v
		}
		nan = nan || v != v
	}
	if nan {
		return float32(math.NaN())
	}
	return m
}

// expSubSumGo sets dst = exp(x - m) and returns the sum of dst.
func expSubSumGo(dst, x []float32, m float32) float64 {
	dst = dst[:len(x)]
	var s float64
	for i, v := range x {
		e := expf(v - m)
		dst[i] = e
		s += float64(e)
	}
	return s
}

// sumExpSubGo returns the sum of exp(x - m).
func sumExpSubGo(x []float32, m float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(expf(v - m))
	}
	return s
}

// subSubGo sets dst = (x - a) - b, the two roundings of PyTorch's log-softmax.
func subSubGo(dst, x []float32, a, b float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = (v - a) - b
	}
}

// softmaxBwdGo sets dx = y·(dy - s).
func softmaxBwdGo(dx, dy, y []float32, s float32) {
	dx, dy = dx[:len(y)], dy[:len(y)]
	for i, v := range y {
		dx[i] = v * (dy[i] - s)
	}
}

// logSoftmaxBwdGo sets dx = dy - exp(y)·s, the product and difference fused.
func logSoftmaxBwdGo(dx, dy, y []float32, s float32) {
	dx, dy = dx[:len(y)], dy[:len(y)]
	for i, v := range y {
		dx[i] = fma32(-expf(v), s, dy[i])
	}
}

func tanhBackwardGo(dx, dy, y []float32) {
	dx, dy = dx[:len(y)], dy[:len(y)]
	for i, v := range y {
		dx[i] = dy[i] * (1 - float32(v*v))
	}
}

func sigmoidBackwardGo(dx, dy, y []float32) {
	dx, dy = dx[:len(y)], dy[:len(y)]
	for i, v := range y {
		dx[i] = float32(dy[i]*(1-v)) * v
	}
}

func reluGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		if v < 0 {
			v = 0
		}
		dst[i] = v
	}
}

func reluBackwardGo(dx, dy, x []float32) {
	dx, dy = dx[:len(x)], dy[:len(x)]
	for i, v := range x {
		g := dy[i]
		if v <= 0 {
			g = 0
		}
		dx[i] = g
	}
}

// sumSqDevGo is Σ (x - mean)² in float64, four partial sums.
func sumSqDevGo[T ~float32 | ~float64](x []T, mean float64) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		d0, d1, d2, d3 := float64(x[i])-mean, float64(x[i+1])-mean, float64(x[i+2])-mean, float64(x[i+3])-mean
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < len(x); i++ {
		d := float64(x[i]) - mean
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// dotDevGo is Σ y·(x - mean) in float64, four partial sums.
func dotDevGo[T ~float32 | ~float64](y, x []T, mean float64) float64 {
	x = x[:len(y)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(y); i += 4 {
		s0 += float64(y[i]) * (float64(x[i]) - mean)
		s1 += float64(y[i+1]) * (float64(x[i+1]) - mean)
		s2 += float64(y[i+2]) * (float64(x[i+2]) - mean)
		s3 += float64(y[i+3]) * (float64(x[i+3]) - mean)
	}
	for ; i < len(y); i++ {
		s0 += float64(y[i]) * (float64(x[i]) - mean)
	}
	return (s0 + s1) + (s2 + s3)
}

// scaleShiftGo sets dst = x·a + b, two roundings (the conversion keeps
// the compiler from fusing them).
func scaleShiftGo[T ~float32 | ~float64](dst, x []T, a, b T) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = T(v*a) + b
	}
}

// scaleAdd2Go sets dst = (x·a + y·b) + c, each operation rounded.
func scaleAdd2Go[T ~float32 | ~float64](dst, x, y []T, a, b, c T) {
	dst, y = dst[:len(x)], y[:len(x)]
	for i, v := range x {
		dst[i] = T(v*a) + T(y[i]*b) + c
	}
}

func negGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = -v
	}
}

func absGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
	}
}

func squareGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * v
	}
}

func cubeGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * v * v
	}
}

// sqrtGo rounds the float64 square root to float32: the square root of a
// float32 is exact enough in float64 that the double rounding gives the
// correctly rounded float32 result, as the vector instruction does.
func sqrtGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(math.Sqrt(float64(v)))
	}
}

func rsqrtGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = 1 / float32(math.Sqrt(float64(v)))
	}
}

func reciprocalGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = 1 / v
	}
}

func signGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = b2f(v > 0) - b2f(v < 0)
	}
}

func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// maximumGo is torch.maximum: NaN from either side, b on ties (so that
// max(-0, +0) is +0 and max(+0, -0) is -0, as the vector instruction
// gives).
func maximumGo(dst, a, b []float32) {
	dst, b = dst[:len(a)], b[:len(a)]
	for i, x := range a {
		if x != x || x > b[i] {
			dst[i] = x
		} else {
			dst[i] = b[i]
		}
	}
}

func minimumGo(dst, a, b []float32) {
	dst, b = dst[:len(a)], b[:len(a)]
	for i, x := range a {
		if x != x || x < b[i] {
			dst[i] = x
		} else {
			dst[i] = b[i]
		}
	}
}

func maximumScalarGo(dst, a []float32, b float32) {
	dst = dst[:len(a)]
	for i, x := range a {
		if x != x || x > b {
			dst[i] = x
		} else {
			dst[i] = b
		}
	}
}

func minimumScalarGo(dst, a []float32, b float32) {
	dst = dst[:len(a)]
	for i, x := range a {
		if x != x || x < b {
			dst[i] = x
		} else {
			dst[i] = b
		}
	}
}

// toBF16Go is dtype.BF16FromFloat32 (vmath imports nothing): round to
// nearest even; a NaN keeps its sign and top payload bits, quieted.
func toBF16Go(dst []uint16, x []float32) {
	dst = dst[:len(x)]
	for i, f := range x {
		u := math.Float32bits(f)
		if u&0x7fffffff > 0x7f800000 {
			dst[i] = uint16(u>>16 | 0x0040)
			continue
		}
		dst[i] = uint16((u + 0x7fff + (u >> 16 & 1)) >> 16)
	}
}

func fromBF16Go(dst []float32, x []uint16) {
	dst = dst[:len(x)]
	for i, b := range x {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}
