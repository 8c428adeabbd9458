package vmath

import "math"

// Accuracy. The bounds quoted below were measured by the tests (see
// docs/benchmarks-vmath.md): for the transcendentals, the distance in ulps
// to the correctly rounded result over every float32 input
// (-vmath.exhaustive); for the activations, over a dense sweep, the error in
// ulps divided by 1+κ(x) with κ = |x·f'(x)/f(x)| the condition number (a
// float32 evaluation from float32 intermediates cannot do better where f
// amplifies the rounding of its input: the GELU tails). "go" is the pure-Go
// loop, "asm" the AVX-512 and AVX2 kernels (the same algorithm).

// Exp sets dst[i] = e^x[i]. Overflow gives +Inf, underflow 0 through the
// subnormals. Within 1 ulp of the correctly rounded result (go: 0).
func Exp(dst, x []float32) {
	check2("Exp", dst, x)
	split2(dst, x, impl.exp)
}

// Log sets dst[i] = ln x[i]; Log(±0) = -Inf, Log(x<0) = NaN. Error: asm
// 0.83 ulp (Cephes logf: within 1 ulp of the correctly rounded result
// over every float32 input, TestExhaustive); go correctly rounded.
func Log(dst, x []float32) {
	check2("Log", dst, x)
	split2(dst, x, impl.log)
}

// Sin sets dst[i] = sin x[i]. The vector kernels reduce x by π/2 exactly
// in float64 for |x| <= 2^19 and evaluate fdlibm's polynomials in float64,
// rounding once (at most 1 ulp from the correctly rounded result); larger
// |x| take float64 math.Sin, whose reduction is exact everywhere. Either
// way an element's result depends on its value alone.
func Sin(dst, x []float32) {
	check2("Sin", dst, x)
	trig(dst, x, impl.sin, math.Sin)
}

// Cos sets dst[i] = cos x[i], as Sin does.
func Cos(dst, x []float32) {
	check2("Cos", dst, x)
	trig(dst, x, impl.cos, math.Cos)
}

// trig runs a sine or cosine kernel a chunk at a time and recomputes the
// elements past the kernel's exact reduction with exact.
func trig(dst, x []float32, f func(dst, x []float32) bool, exact func(float64) float64) {
	for len(x) > 0 {
		n := min(len(x), chunk)
		if f(dst[:n], x[:n]) {
			for i, v := range x[:n] {
				if math.Abs(float64(v)) > sinMax {
					dst[i] = float32(exact(float64(v)))
				}
			}
		}
		dst, x = dst[n:], x[n:]
	}
}

// sinMax is the largest |x| whose reduction by π/2 the vector kernels do
// exactly (gen_asm.go).
const sinMax = 1 << 19

// Tanh sets dst[i] = tanh x[i]. Within 1 ulp of the correctly rounded result
// (go: 0).
func Tanh(dst, x []float32) {
	check2("Tanh", dst, x)
	split2(dst, x, impl.tanh)
}

// Sigmoid sets dst[i] = 1/(1+e^-x[i]), evaluated as e^x/(1+e^x) for x < 0
// so that neither side overflows or cancels. Within 2 ulp of the correctly
// rounded result (go: 0).
func Sigmoid(dst, x []float32) {
	check2("Sigmoid", dst, x)
	split2(dst, x, impl.sigmoid)
}

// Erf sets dst[i] = erf x[i]. Within 2 ulp of the correctly rounded result
// (go: 0).
func Erf(dst, x []float32) {
	check2("Erf", dst, x)
	split2(dst, x, impl.erf)
}

// Gelu sets dst[i] = 0.5·x·(1+erf(x/√2)), PyTorch's gelu(approximate='none').
// It is evaluated as 0.5·x·erfc(-x/√2) so that it stays accurate where the
// result is tiny (x < -3), where PyTorch's own float32 evaluation of 1+erf
// loses all its digits. Error: asm 3.73 ulp·(1+κ), at most 6.90 ulp for
// |x| <= 3; go 0.5 ulp.
func Gelu(dst, x []float32) {
	check2("Gelu", dst, x)
	split2(dst, x, impl.gelu)
}

// GeluTanh sets dst[i] = 0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³))), PyTorch's
// gelu(approximate='tanh'), evaluated as x·sigmoid(2u) (the same function,
// accurate for negative x too). Error: asm 2.22 ulp·(1+κ), at most 13.51 ulp
// for |x| <= 3; go 0.5 ulp.
func GeluTanh(dst, x []float32) {
	check2("GeluTanh", dst, x)
	split2(dst, x, impl.geluTanh)
}

// GeluBackward sets dx = dy·(Φ(x) + x·φ(x)), the gradient of Gelu.
//
// The derivative kernels round like PyTorch's: the derivative, then the
// product with dy. Their error is measured in ulps of |dy|·(the sum of the
// magnitudes of the derivative's terms), since the derivatives of GELU
// cross zero: asm at most 1.93 (GeluBackward), 2.85 (GeluTanhBackward) and
// 3.48 (SiluBackward), times 1+κ; go 1.46.
func GeluBackward(dx, dy, x []float32) {
	check3("GeluBackward", dx, dy, x)
	split3(dx, dy, x, impl.geluBackward)
}

// GeluTanhBackward sets dx to dy times the derivative of GeluTanh, PyTorch's
// 0.5·(1+t) + 0.5·x·(1-t²)·√(2/π)·(1+3·0.044715·x²) with t the tanh above.
func GeluTanhBackward(dx, dy, x []float32) {
	check3("GeluTanhBackward", dx, dy, x)
	split3(dx, dy, x, impl.geluTanhBackward)
}

// Silu sets dst[i] = x·sigmoid(x). Error: asm 1.78 ulp·(1+κ), at most 2.93 ulp
// for |x| <= 3; go 0.5 ulp.
func Silu(dst, x []float32) {
	check2("Silu", dst, x)
	split2(dst, x, impl.silu)
}

// SiluBackward sets dx = dy·s·(1+x·(1-s)) with s = sigmoid(x), PyTorch's
// silu_backward.
func SiluBackward(dx, dy, x []float32) {
	check3("SiluBackward", dx, dy, x)
	split3(dx, dy, x, impl.siluBackward)
}

// TanhBackward sets dx = dy·(1-y²) where y = tanh(x) is the forward output,
// as PyTorch's tanh_backward, with its roundings (y², then 1-y², then ·dy).
func TanhBackward(dx, dy, y []float32) {
	check3("TanhBackward", dx, dy, y)
	split3(dx, dy, y, impl.tanhBackward)
}

// SigmoidBackward sets dx = (dy·(1-y))·y where y = sigmoid(x) is the forward
// output, in PyTorch's order of operations.
func SigmoidBackward(dx, dy, y []float32) {
	check3("SigmoidBackward", dx, dy, y)
	split3(dx, dy, y, impl.sigmoidBackward)
}

// Relu sets dst[i] = max(x[i], 0) as PyTorch's relu (clamp_min(x, 0)): NaN
// stays NaN and -0 stays -0.
func Relu(dst, x []float32) {
	check2("Relu", dst, x)
	split2(dst, x, impl.relu)
}

// ReluBackward sets dx = 0 where x <= 0 and dy elsewhere (NaN included).
//
// PyTorch's relu backward is threshold_backward(grad, result, 0), which
// computes result <= 0 ? 0 : grad on the forward output. Because
// relu(x) <= 0 exactly when x <= 0 (for NaN both comparisons are false and
// the gradient passes, for -0 both are true), the mask on the input is the
// same mask: x may be the forward input or the forward output, whichever
// the caller kept.
func ReluBackward(dx, dy, x []float32) {
	check3("ReluBackward", dx, dy, x)
	split3(dx, dy, x, impl.reluBackward)
}

// Add sets dst = a + b.
func Add(dst, a, b []float32) {
	check3("Add", dst, a, b)
	split3(dst, a, b, impl.add)
}

// AddScaled sets dst = a·s + b·s, each product rounded to float32 before
// the sum (no fused multiply-add): two ranks' values pre-multiplied and
// summed, bit for bit as multiplying each into a buffer and adding the
// buffers.
func AddScaled(dst, a, b []float32, s float32) {
	check3("AddScaled", dst, a, b)
	for len(a) > chunk {
		impl.addScaled(dst[:chunk], a[:chunk], b[:chunk], s)
		dst, a, b = dst[chunk:], a[chunk:], b[chunk:]
	}
	impl.addScaled(dst, a, b, s)
}

// Sub sets dst = a - b.
func Sub(dst, a, b []float32) {
	check3("Sub", dst, a, b)
	split3(dst, a, b, impl.sub)
}

// Mul sets dst = a · b.
func Mul(dst, a, b []float32) {
	check3("Mul", dst, a, b)
	split3(dst, a, b, impl.mul)
}

// Div sets dst = a / b.
func Div(dst, a, b []float32) {
	check3("Div", dst, a, b)
	split3(dst, a, b, impl.div)
}

// AddScalar sets dst = x + s.
func AddScalar(dst, x []float32, s float32) {
	check2("AddScalar", dst, x)
	splitScalar(dst, x, s, impl.addScalar)
}

// MulScalar sets dst = x · s.
func MulScalar(dst, x []float32, s float32) {
	check2("MulScalar", dst, x)
	splitScalar(dst, x, s, impl.mulScalar)
}

// DivScalar sets dst = x / s, a true division as PyTorch's (not a product
// with 1/s, which rounds differently).
func DivScalar(dst, x []float32, s float32) {
	check2("DivScalar", dst, x)
	splitScalar(dst, x, s, impl.divScalar)
}

// Neg sets dst = -x (the sign bit flipped, NaN included).
func Neg(dst, x []float32) {
	check2("Neg", dst, x)
	split2(dst, x, impl.neg)
}

// Abs sets dst = |x| (the sign bit cleared, NaN included).
func Abs(dst, x []float32) {
	check2("Abs", dst, x)
	split2(dst, x, impl.abs)
}

// Square sets dst = x·x.
func Square(dst, x []float32) {
	check2("Square", dst, x)
	split2(dst, x, impl.square)
}

// Cube sets dst = (x·x)·x, PyTorch's pow(x, 3).
func Cube(dst, x []float32) {
	check2("Cube", dst, x)
	split2(dst, x, impl.cube)
}

// Sqrt sets dst = √x, correctly rounded.
func Sqrt(dst, x []float32) {
	check2("Sqrt", dst, x)
	split2(dst, x, impl.sqrt)
}

// Rsqrt sets dst = 1/√x as PyTorch's float32 rsqrt computes it: the
// rounded square root, then the rounded division.
func Rsqrt(dst, x []float32) {
	check2("Rsqrt", dst, x)
	split2(dst, x, impl.rsqrt)
}

// Reciprocal sets dst = 1/x.
func Reciprocal(dst, x []float32) {
	check2("Reciprocal", dst, x)
	split2(dst, x, impl.reciprocal)
}

// Sign sets dst = (x > 0) - (x < 0): ±1, +0 for either zero and for NaN,
// as PyTorch's sign.
func Sign(dst, x []float32) {
	check2("Sign", dst, x)
	split2(dst, x, impl.sign)
}

// ToBF16 rounds x to bfloat16 bits into dst: to nearest even, a NaN
// quieted with its sign and top payload bits (dtype.BF16FromFloat32).
func ToBF16(dst []uint16, x []float32) { wholeVectors("vmath.ToBF16", dst, x, impl.toBF16, toBF16Go) }

// FromBF16 widens bfloat16 bits to float32 (exact).
func FromBF16(dst []float32, x []uint16) {
	wholeVectors("vmath.FromBF16", dst, x, impl.fromBF16, fromBF16Go)
}

// wholeVectors runs a kernel that takes whole vectors (a multiple of 16
// elements) a chunk at a time, and the Go loop on the last 0-15 elements.
func wholeVectors[D, S any](fn string, dst []D, x []S, kernel, loop func([]D, []S)) {
	if len(dst) != len(x) {
		panic(fn + ": slice lengths differ (" + itoa(len(dst)) + " and " + itoa(len(x)) + ")")
	}
	for len(x) > 0 {
		n := min(len(x), chunk) &^ 15
		if n == 0 {
			loop(dst, x)
			return
		}
		kernel(dst[:n], x[:n])
		dst, x = dst[n:], x[n:]
	}
}

// Maximum sets dst = torch.maximum(a, b): the larger of each pair, NaN if
// either is NaN, b where they compare equal (the sign of a tied zero).
func Maximum(dst, a, b []float32) {
	check3("Maximum", dst, a, b)
	split3(dst, a, b, impl.maximum)
}

// Minimum is Maximum's counterpart, torch.minimum.
func Minimum(dst, a, b []float32) {
	check3("Minimum", dst, a, b)
	split3(dst, a, b, impl.minimum)
}

// MaximumScalar is Maximum with b broadcast: clamp_min's pass.
func MaximumScalar(dst, a []float32, b float32) {
	check2("MaximumScalar", dst, a)
	splitScalar(dst, a, b, impl.maximumScalar)
}

// MinimumScalar is Minimum with b broadcast: clamp_max's pass.
func MinimumScalar(dst, a []float32, b float32) {
	check2("MinimumScalar", dst, a)
	splitScalar(dst, a, b, impl.minimumScalar)
}

// Axpy sets dst += alpha·x with one rounding (a fused multiply-add), like
// PyTorch's dst.add_(x, alpha=alpha) on AVX2 and AVX-512 CPUs.
func Axpy(dst []float32, alpha float32, x []float32) {
	check2("Axpy", dst, x)
	k := impl
	for len(x) > chunk {
		k.axpy(dst[:chunk], alpha, x[:chunk])
		dst, x = dst[chunk:], x[chunk:]
	}
	k.axpy(dst, alpha, x)
}

// Sum returns the sum of x. It accumulates in float64 (every variant), so
// the result is the exact sum rounded to float32 up to an error far below
// one float32 ulp of Σ|x|, whatever the length: long sums do not drift.
func Sum(x []float32) float32 { return float32(splitSum(x, impl.sum)) }

// Sum64 is Sum without the final rounding, for callers that combine partial
// sums (the engine's reductions split long rows across threads); for
// float64 it is the same sum in Go.
func Sum64[T ~float32 | ~float64](x []T) float64 {
	if x32, ok := any(x).([]float32); ok {
		return splitSum(x32, impl.sum)
	}
	return sumGo(x)
}

// Dot returns Σ x[i]·y[i], accumulated in float64 from exact products.
func Dot(x, y []float32) float32 {
	check2("Dot", x, y)
	k := impl
	var s float64
	for len(x) > chunk {
		s += k.dot(x[:chunk], y[:chunk])
		x, y = x[chunk:], y[chunk:]
	}
	return float32(s + k.dot(x, y))
}

// SumSquaredDeviations returns Σ (x[i] − mean)², accumulated in float64
// with the deviations taken in float64: batch norm's second pass over a
// channel (PyTorch's CPU kernel's formula). float64 runs the Go loop.
func SumSquaredDeviations[T ~float32 | ~float64](x []T, mean float64) float64 {
	x32, ok := any(x).([]float32)
	if !ok {
		return sumSqDevGo(x, mean)
	}
	k := impl
	var s float64
	for len(x32) > chunk {
		s += k.sumSqDev(x32[:chunk], mean)
		x32 = x32[chunk:]
	}
	return s + k.sumSqDev(x32, mean)
}

// DotDeviations returns Σ y[i]·(x[i] − mean), accumulated in float64 with
// the deviations taken in float64: batch norm's backward sum. float64
// runs the Go loop.
func DotDeviations[T ~float32 | ~float64](y, x []T, mean float64) float64 {
	if len(y) != len(x) {
		panic("vmath.DotDeviations: slice lengths differ (" + itoa(len(y)) + " and " + itoa(len(x)) + ")")
	}
	y32, ok := any(y).([]float32)
	if !ok {
		return dotDevGo(y, x, mean)
	}
	x32 := any(x).([]float32)
	k := impl
	var s float64
	for len(y32) > chunk {
		s += k.dotDev(y32[:chunk], x32[:chunk], mean)
		y32, x32 = y32[chunk:], x32[chunk:]
	}
	return s + k.dotDev(y32, x32, mean)
}

// ScaleShift sets dst[i] = x[i]·a + b, the product rounded before the sum
// (batch norm's output, x·α + β). float64 runs the Go loop.
func ScaleShift[T ~float32 | ~float64](dst, x []T, a, b T) {
	if len(dst) != len(x) {
		panic("vmath.ScaleShift: slice lengths differ (" + itoa(len(dst)) + " and " + itoa(len(x)) + ")")
	}
	x32, ok := any(x).([]float32)
	if !ok {
		scaleShiftGo(dst, x, a, b)
		return
	}
	splitScalar2(any(dst).([]float32), x32, float32(a), float32(b), impl.scaleShift)
}

// ScaleAdd2 sets dst[i] = (x[i]·a + y[i]·b) + c, each operation rounded
// (batch norm's input gradient, dy·a + x·b + e). float64 runs the Go loop.
func ScaleAdd2[T ~float32 | ~float64](dst, x, y []T, a, b, c T) {
	if len(dst) != len(x) || len(dst) != len(y) {
		panic("vmath.ScaleAdd2: slice lengths differ (" + itoa(len(dst)) + ", " + itoa(len(x)) + " and " + itoa(len(y)) + ")")
	}
	x32, ok := any(x).([]float32)
	if !ok {
		scaleAdd2Go(dst, x, y, a, b, c)
		return
	}
	d32, y32 := any(dst).([]float32), any(y).([]float32)
	k := impl
	for len(x32) > chunk {
		k.scaleAdd2(d32[:chunk], x32[:chunk], y32[:chunk], float32(a), float32(b), float32(c))
		d32, x32, y32 = d32[chunk:], x32[chunk:], y32[chunk:]
	}
	k.scaleAdd2(d32, x32, y32, float32(a), float32(b), float32(c))
}

// SumSquares returns Σ x[i]², in float64 for gradient-norm clipping, where
// the squares of 25M gradients must not lose the small ones.
func SumSquares(x []float32) float64 { return splitSum(x, impl.sumSquares) }

// Max returns the largest element of x, or NaN if any element is NaN (as
// torch.max). It panics on an empty slice, as torch.max does.
func Max(x []float32) float32 {
	return extreme("vmath.Max", x, impl.max, func(c, m float32) bool { return c > m })
}

// Min returns the smallest element of x, or NaN if any element is NaN (as
// torch.min). It panics on an empty slice.
func Min(x []float32) float32 {
	return extreme("vmath.Min", x, impl.min, func(c, m float32) bool { return c < m })
}

// extreme runs f a chunk at a time and keeps the better of the chunks'
// results, or the first NaN.
func extreme(fn string, x []float32, f func(x []float32) float32, better func(c, m float32) bool) float32 {
	if len(x) == 0 {
		panic(fn + ": empty slice")
	}
	m := f(x[:min(len(x), chunk)])
	for x = x[min(len(x), chunk):]; len(x) > 0; x = x[min(len(x), chunk):] {
		if c := f(x[:min(len(x), chunk)]); m == m && (c != c || better(c, m)) {
			m = c
		}
	}
	return m
}

// Clamp sets dst = min(max(x, lo), hi): MaximumScalar and MinimumScalar
// (their bits, NaN included) a block at a time, so that the second pass
// reads what the first left in the first-level cache.
func Clamp(dst, x []float32, lo, hi float32) {
	check2("Clamp", dst, x)
	const block = 2048 // 8 KiB: well inside L1 with dst's own block
	k := impl
	for len(x) > 0 {
		n := min(block, len(x))
		k.maximumScalar(dst[:n], x[:n], lo)
		k.minimumScalar(dst[:n], dst[:n], hi)
		dst, x = dst[n:], x[n:]
	}
}
