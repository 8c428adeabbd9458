package cpu

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

type float interface{ ~float32 | ~float64 }

// Unary implements device.Device.
func (d *Device) Unary(op device.UnaryOp, dst, src device.View, s float64) error {
	if dst.Numel() == 0 {
		return nil
	}
	if anyHalf(dst, src) {
		return d.widened([]*device.View{&dst}, []*device.View{&src}, func() error { return d.Unary(op, dst, src, s) })
	}
	if dst.DType.IsFloat() {
		op = powAsUnary(op, s)
		// PyTorch's pow_out fills ones for an exponent of 0 and copies the
		// base for 1 (math.Pow agrees bit for bit: Pow(x, ±0) = 1 and
		// Pow(x, 1) = x for every x). x.pow(2)'s gradient is 2·x.pow(1).
		if op == device.PowScalar && s == 0 {
			return d.Fill(dst, 1)
		}
		if op == device.PowScalar && s == 1 {
			return d.Copy(dst, src)
		}
	}
	if dst.DType == dtype.Float32 && dst.Numel() <= grain && dst.Contiguous() && src.Contiguous() {
		if fast := unaryFast32(op, float32(s)); fast != nil {
			fast(flat32(dst), flat32(src))
			return nil
		}
	}
	w := newWalk(dst.Shape, dst, src)
	switch dst.DType {
	case dtype.Float32:
		unaryRun(w, op, elems[float32](dst.Buf), elems[float32](src.Buf), s, unaryFast32(op, float32(s)))
	case dtype.Float64:
		unaryRun(w, op, elems[float64](dst.Buf), elems[float64](src.Buf), s, nil)
	case dtype.Int64:
		return unaryInt(w, op, elems[int64](dst.Buf), elems[int64](src.Buf), s)
	default:
		return fmt.Errorf("cpu: %v is not defined for %v", op, dst.DType)
	}
	return nil
}

// powAsUnary is op, or for PyTorch's special exponents of pow (its
// PowKernel.cpp) the op they stand for: x² is square, x^0.5 sqrt, x^-0.5
// rsqrt, x^-1 reciprocal, so that both routes of every float type compute
// them as those ops do (3 and -2, products, stay pow's own cases).
func powAsUnary(op device.UnaryOp, s float64) device.UnaryOp {
	if op != device.PowScalar {
		return op
	}
	switch s {
	case 2:
		return device.Square
	case 0.5:
		return device.Sqrt
	case -0.5:
		return device.Rsqrt
	case -1:
		return device.Reciprocal
	}
	return op
}

// unaryRun walks the operands; fast, when not nil, handles contiguous
// segments.
func unaryRun[T float](w *walk, op device.UnaryOp, dst, src []T, s float64, fast func(dst, src []T)) {
	ds, ss := w.innerStride(0), w.innerStride(1)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		o0, o1 := off[0]+lo*ds, off[1]+lo*ss
		if fast != nil && ds == 1 && ss == 1 {
			fast(dst[o0:o0+hi-lo], src[o1:o1+hi-lo])
			return
		}
		if ds == 1 && ss == 0 {
			// One input for the whole run (a gradient expanded from a
			// sum): compute one element as the run would, fill the rest.
			if fast != nil {
				fast(dst[o0:o0+1], src[o1:o1+1])
			} else {
				unaryLoop(op, dst, o0, 1, src, o1, 0, 1, s)
			}
			fillFloats(dst[o0+1:o0+hi-lo], dst[o0])
			return
		}
		unaryLoop(op, dst, o0, ds, src, o1, ss, hi-lo, s)
	})
}

// unaryLoop is the portable reference of every unary op, with PyTorch's
// formulas (aten/src/ATen/native/cpu/UnaryOpsKernel.cpp, Activation.cpp).
func unaryLoop[T float](op device.UnaryOp, dst []T, o0, ds int, src []T, o1, ss, n int, s float64) {
	f := func(g func(x float64) float64) {
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = T(g(float64(src[o1+i*ss])))
		}
	}
	ts := T(s)
	switch op {
	case device.Neg:
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = -src[o1+i*ss]
		}
	case device.AddScalar:
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = src[o1+i*ss] + ts
		}
	case device.MulScalar:
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = src[o1+i*ss] * ts
		}
	case device.RSubScalar:
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = ts - src[o1+i*ss]
		}
	case device.RDivScalar:
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = ts / src[o1+i*ss]
		}
	case device.Square:
		for i := 0; i < n; i++ {
			x := src[o1+i*ss]
			dst[o0+i*ds] = x * x
		}
	case device.Reciprocal:
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = 1 / src[o1+i*ss]
		}
	case device.Relu:
		for i := 0; i < n; i++ {
			x := src[o1+i*ss]
			if x < 0 { // NaN passes through, as in PyTorch's clamp_min
				x = 0
			}
			dst[o0+i*ds] = x
		}
	case device.Abs:
		f(math.Abs)
	case device.Sign:
		// PyTorch's (0 < x) − (x < 0): +0 for ±0 and for NaN, so that
		// abs's gradient at NaN is 0 as PyTorch's.
		f(func(x float64) float64 { return float64(b2u(x > 0)) - float64(b2u(x < 0)) })
	case device.Exp:
		f(math.Exp)
	case device.Log:
		f(math.Log)
	case device.Sqrt:
		f(math.Sqrt)
	case device.Rsqrt: // PyTorch's: the rounded square root, then 1/it
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = 1 / T(math.Sqrt(float64(src[o1+i*ss])))
		}
	case device.Tanh:
		f(math.Tanh)
	case device.Sin:
		f(math.Sin)
	case device.Cos:
		f(math.Cos)
	case device.Erf:
		f(math.Erf)
	case device.Sigmoid:
		f(func(x float64) float64 { return 1 / (1 + math.Exp(-x)) })
	case device.Silu:
		f(func(x float64) float64 { return x / (1 + math.Exp(-x)) })
	case device.Gelu:
		f(func(x float64) float64 { return x * 0.5 * (1 + math.Erf(x*math.Sqrt2/2)) })
	case device.GeluTanh:
		f(geluTanh)
	case device.PowScalar:
		// PyTorch's products for 3 and -2 in T, not math.Pow in float64
		// (its other special exponents arrive as their ops: powAsUnary).
		switch s {
		case 3:
			for i := 0; i < n; i++ {
				x := src[o1+i*ss]
				dst[o0+i*ds] = x * x * x
			}
		case -2:
			for i := 0; i < n; i++ {
				x := src[o1+i*ss]
				dst[o0+i*ds] = 1 / (x * x)
			}
		default: // 0 and 1 are a fill and a copy (Unary)
			f(func(x float64) float64 { return math.Pow(x, s) })
		}
	default:
		panic(fmt.Sprintf("cpu: unary op %v", op))
	}
}

const sqrt2OverPi = 0.7978845608028654 // √(2/π)

func geluTanh(x float64) float64 {
	inner := sqrt2OverPi * (x + 0.044715*x*x*x)
	return 0.5 * x * (1 + math.Tanh(inner))
}

func unaryInt(w *walk, op device.UnaryOp, dst, src []int64, s float64) error {
	ds, ss := w.innerStride(0), w.innerStride(1)
	is := int64(s)
	if float64(is) != s && (op == device.AddScalar || op == device.MulScalar || op == device.RSubScalar) {
		return fmt.Errorf("cpu: %v of an int64 tensor by the non-integer %v", op, s)
	}
	var g func(int64) int64
	switch op {
	case device.Neg:
		g = func(x int64) int64 { return -x }
	case device.Abs:
		g = func(x int64) int64 { return max(x, -x) }
	case device.Sign:
		g = func(x int64) int64 { return int64(b2u(x > 0)) - int64(b2u(x < 0)) }
	case device.AddScalar:
		g = func(x int64) int64 { return x + is }
	case device.MulScalar:
		g = func(x int64) int64 { return x * is }
	case device.RSubScalar:
		g = func(x int64) int64 { return is - x }
	case device.Square:
		g = func(x int64) int64 { return x * x }
	case device.Relu:
		g = func(x int64) int64 { return max(x, 0) }
	default:
		return fmt.Errorf("cpu: %v is not defined for int64", op)
	}
	w.run(func(off *[maxOperands]int, lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[off[0]+i*ds] = g(src[off[1]+i*ss])
		}
	})
	return nil
}

// ActivationBackward implements device.Device.
func (d *Device) ActivationBackward(op device.ActivationOp, dx, dy, saved device.View) error {
	if dx.Numel() == 0 {
		return nil
	}
	if anyHalf(dx, dy, saved) {
		return d.widened([]*device.View{&dx}, []*device.View{&dy, &saved}, func() error { return d.ActivationBackward(op, dx, dy, saved) })
	}
	w := newWalk(dx.Shape, dx, dy, saved)
	switch dx.DType {
	case dtype.Float32:
		activationBackwardRun(w, op, elems[float32](dx.Buf), elems[float32](dy.Buf), elems[float32](saved.Buf), activationBackwardFast32(op))
	case dtype.Float64:
		activationBackwardRun(w, op, elems[float64](dx.Buf), elems[float64](dy.Buf), elems[float64](saved.Buf), nil)
	default:
		return fmt.Errorf("cpu: activation backward of %v", dx.DType)
	}
	return nil
}

func activationBackwardRun[T float](w *walk, op device.ActivationOp, dx, dy, sv []T, fast func(dx, dy, saved []T)) {
	s0, s1, s2 := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		o0, o1, o2 := off[0]+lo*s0, off[1]+lo*s1, off[2]+lo*s2
		n := hi - lo
		if fast != nil && s0 == 1 && s1 == 1 && s2 == 1 {
			fast(dx[o0:o0+n], dy[o1:o1+n], sv[o2:o2+n])
			return
		}
		if fast != nil && s0 == 1 && s1 == 0 && s2 == 1 {
			// One gradient for the whole run (the backward of a sum, an
			// expanded tensor): the fast kernel over pieces of a copy.
			var buf [512]T
			for i := range buf[:min(n, len(buf))] {
				buf[i] = dy[o1]
			}
			for at := 0; at < n; at += len(buf) {
				m := min(len(buf), n-at)
				fast(dx[o0+at:o0+at+m], buf[:m], sv[o2+at:o2+at+m])
			}
			return
		}
		for i := 0; i < n; i++ {
			g, x := float64(dy[o1+i*s1]), float64(sv[o2+i*s2])
			dx[o0+i*s0] = T(activationGrad(op, g, x))
		}
	})
}

// activationGrad is the reference of each activation's backward, with
// PyTorch's formulas.
func activationGrad(op device.ActivationOp, g, x float64) float64 {
	switch op {
	case device.ReluBackward: // threshold_backward on the output
		if x <= 0 {
			return 0
		}
		return g
	case device.GeluBackward:
		cdf := 0.5 * (1 + math.Erf(x*math.Sqrt2/2))
		pdf := math.Exp(-0.5*x*x) * (2 / math.SqrtPi) * (math.Sqrt2 / 2) * 0.5
		return g * (cdf + x*pdf)
	case device.GeluTanhBackward:
		const kappa = 0.044715
		xsq := x * x
		inner := sqrt2OverPi * (x + kappa*xsq*x)
		th := math.Tanh(inner)
		left := 0.5 * x
		right := 1 + th
		leftDerivative := 0.5 * right
		rightDerivative := left * (1 - th*th) * sqrt2OverPi * (1 + 3*kappa*xsq)
		return g * (leftDerivative + rightDerivative)
	case device.SiluBackward:
		sig := 1 / (1 + math.Exp(-x))
		return g * sig * (1 + x*(1-sig))
	case device.TanhBackward:
		return g * (1 - x*x)
	case device.SigmoidBackward:
		return g * (1 - x) * x
	}
	panic(fmt.Sprintf("cpu: activation backward op %d", op))
}

// Binary implements device.Device.
func (d *Device) Binary(op device.BinaryOp, dst, a, b device.View) error {
	if dst.Numel() == 0 {
		return nil
	}
	if anyHalf(dst, a, b) {
		return d.widened([]*device.View{&dst}, []*device.View{&a, &b}, func() error { return d.Binary(op, dst, a, b) })
	}
	if dst.DType == dtype.Float32 && !op.IsComparison() && smallBinary32(op, dst, a, b) {
		return nil
	}
	w := newWalk(dst.Shape, dst, a, b)
	if op.IsComparison() {
		if dst.DType != dtype.Bool {
			return fmt.Errorf("cpu: %v must write bool, not %v", op, dst.DType)
		}
		out := elems[uint8](dst.Buf)
		switch a.DType {
		case dtype.Float32:
			compareRun(w, op, out, elems[float32](a.Buf), elems[float32](b.Buf))
		case dtype.Float64:
			compareRun(w, op, out, elems[float64](a.Buf), elems[float64](b.Buf))
		case dtype.Int64:
			compareRun(w, op, out, elems[int64](a.Buf), elems[int64](b.Buf))
		case dtype.Int32:
			compareRun(w, op, out, elems[int32](a.Buf), elems[int32](b.Buf))
		case dtype.Uint8, dtype.Bool:
			compareRun(w, op, out, elems[uint8](a.Buf), elems[uint8](b.Buf))
		default:
			return fmt.Errorf("cpu: %v of %v", op, a.DType)
		}
		return nil
	}
	switch dst.DType {
	case dtype.Float32:
		binaryRun(w, op, elems[float32](dst.Buf), elems[float32](a.Buf), elems[float32](b.Buf), binaryFast32(op))
	case dtype.Float64:
		binaryRun(w, op, elems[float64](dst.Buf), elems[float64](a.Buf), elems[float64](b.Buf), nil)
	case dtype.Int64:
		return binaryInt(w, op, elems[int64](dst.Buf), elems[int64](a.Buf), elems[int64](b.Buf))
	default:
		return fmt.Errorf("cpu: %v is not defined for %v", op, dst.DType)
	}
	return nil
}

// binaryRun walks the operands; fast, when not nil, handles segments where
// dst and a are contiguous and b is contiguous (bStride 1) or a scalar
// (bStride 0).
func binaryRun[T float](w *walk, op device.BinaryOp, dst, a, b []T, fast func(dst, a, b []T, bStride int) bool) {
	s0, s1, s2 := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		o0, o1, o2 := off[0]+lo*s0, off[1]+lo*s1, off[2]+lo*s2
		n := hi - lo
		if fast != nil && s0 == 1 && s1 == 1 && (s2 == 1 || s2 == 0) &&
			fast(dst[o0:o0+n], a[o1:o1+n], b[o2:o2+max(1, n*s2)], s2) {
			return
		}
		if fast != nil && s0 == 1 && s1 == 0 && s2 == 1 && n >= 256 {
			// a is one value for a long run (a gradient expanded from a
			// sum, meeting the saved operand of a product): the vector
			// kernel over blocks of a copy of it, a op b in that order.
			// (The copy escapes to the heap through fast: short runs,
			// thousands of them in a pooling's backward, take the loop,
			// whose arithmetic is the same.)
			var buf [512]T
			for i := range buf[:min(n, len(buf))] {
				buf[i] = a[o1]
			}
			for at := 0; at < n; at += len(buf) {
				m := min(len(buf), n-at)
				fast(dst[o0+at:o0+at+m], buf[:m], b[o2+at:o2+at+m], 1)
			}
			return
		}
		switch op {
		case device.Add:
			for i := 0; i < n; i++ {
				dst[o0+i*s0] = a[o1+i*s1] + b[o2+i*s2]
			}
		case device.Sub:
			for i := 0; i < n; i++ {
				dst[o0+i*s0] = a[o1+i*s1] - b[o2+i*s2]
			}
		case device.Mul:
			for i := 0; i < n; i++ {
				dst[o0+i*s0] = a[o1+i*s1] * b[o2+i*s2]
			}
		case device.Div:
			for i := 0; i < n; i++ {
				dst[o0+i*s0] = a[o1+i*s1] / b[o2+i*s2]
			}
		case device.Pow:
			for i := 0; i < n; i++ {
				dst[o0+i*s0] = T(math.Pow(float64(a[o1+i*s1]), float64(b[o2+i*s2])))
			}
		case device.Maximum: // NaN propagates, as torch.maximum
			for i := 0; i < n; i++ {
				x, y := a[o1+i*s1], b[o2+i*s2]
				if x != x || x > y {
					y = x
				}
				dst[o0+i*s0] = y
			}
		case device.Minimum:
			for i := 0; i < n; i++ {
				x, y := a[o1+i*s1], b[o2+i*s2]
				if x != x || x < y {
					y = x
				}
				dst[o0+i*s0] = y
			}
		default:
			panic(fmt.Sprintf("cpu: binary op %v", op))
		}
	})
}

func binaryInt(w *walk, op device.BinaryOp, dst, a, b []int64) error {
	var g func(x, y int64) int64
	switch op {
	case device.Add:
		g = func(x, y int64) int64 { return x + y }
	case device.Sub:
		g = func(x, y int64) int64 { return x - y }
	case device.Mul:
		g = func(x, y int64) int64 { return x * y }
	case device.Maximum:
		g = func(x, y int64) int64 { return max(x, y) }
	case device.Minimum:
		g = func(x, y int64) int64 { return min(x, y) }
	default:
		return fmt.Errorf("cpu: %v is not defined for int64", op)
	}
	s0, s1, s2 := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[off[0]+i*s0] = g(a[off[1]+i*s1], b[off[2]+i*s2])
		}
	})
	return nil
}

type ordered interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~uint8
}

func compareRun[T ordered](w *walk, op device.BinaryOp, dst []uint8, a, b []T) {
	s0, s1, s2 := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		n := hi - lo
		o0, o1, o2 := off[0]+lo*s0, off[1]+lo*s1, off[2]+lo*s2
		if s0 == 1 && s1 == 1 && (s2 == 1 || s2 == 0) {
			compareRow(op, dst[o0:o0+n], a[o1:o1+n], b[o2:o2+max(1, n*s2)], s2)
			return
		}
		for i := 0; i < n; i++ {
			dst[o0+i*s0] = b2u(compare1(op, a[o1+i*s1], b[o2+i*s2]))
		}
	})
}

func compare1[T ordered](op device.BinaryOp, x, y T) bool {
	switch op {
	case device.Eq:
		return x == y
	case device.Ne:
		return x != y
	case device.Lt:
		return x < y
	case device.Le:
		return x <= y
	case device.Gt:
		return x > y
	}
	return x >= y
}

// compareRow is compareRun's contiguous segment, b a row (bStride 1) or a
// broadcast scalar (bStride 0): one loop per operator without branches,
// which on unpredictable data cost several times the comparison.
func compareRow[T ordered](op device.BinaryOp, dst []uint8, a, b []T, bStride int) {
	if bStride == 0 {
		y := b[0]
		dst = dst[:len(a)]
		switch op {
		case device.Eq:
			for i, x := range a {
				dst[i] = b2u(x == y)
			}
		case device.Ne:
			for i, x := range a {
				dst[i] = b2u(x != y)
			}
		case device.Lt:
			for i, x := range a {
				dst[i] = b2u(x < y)
			}
		case device.Le:
			for i, x := range a {
				dst[i] = b2u(x <= y)
			}
		case device.Gt:
			for i, x := range a {
				dst[i] = b2u(x > y)
			}
		case device.Ge:
			for i, x := range a {
				dst[i] = b2u(x >= y)
			}
		}
		return
	}
	dst, b = dst[:len(a)], b[:len(a)]
	switch op {
	case device.Eq:
		for i, x := range a {
			dst[i] = b2u(x == b[i])
		}
	case device.Ne:
		for i, x := range a {
			dst[i] = b2u(x != b[i])
		}
	case device.Lt:
		for i, x := range a {
			dst[i] = b2u(x < b[i])
		}
	case device.Le:
		for i, x := range a {
			dst[i] = b2u(x <= b[i])
		}
	case device.Gt:
		for i, x := range a {
			dst[i] = b2u(x > b[i])
		}
	case device.Ge:
		for i, x := range a {
			dst[i] = b2u(x >= b[i])
		}
	}
}

// Where implements device.Device.
func (d *Device) Where(dst, cond, a, b device.View) error {
	if dst.Numel() == 0 {
		return nil
	}
	if cond.DType != dtype.Bool {
		return fmt.Errorf("cpu: where needs a bool condition, not %v", cond.DType)
	}
	if a.DType != dst.DType || b.DType != dst.DType {
		return fmt.Errorf("cpu: where of %v and %v into %v", a.DType, b.DType, dst.DType)
	}
	w := newWalk(dst.Shape, dst, cond, a, b)
	switch dst.DType.Size() {
	case 1:
		whereRun(w, elems[uint8](dst.Buf), elems[uint8](cond.Buf), elems[uint8](a.Buf), elems[uint8](b.Buf))
	case 2:
		whereRun(w, elems[uint16](dst.Buf), elems[uint8](cond.Buf), elems[uint16](a.Buf), elems[uint16](b.Buf))
	case 4:
		whereRun(w, elems[uint32](dst.Buf), elems[uint8](cond.Buf), elems[uint32](a.Buf), elems[uint32](b.Buf))
	case 8:
		whereRun(w, elems[uint64](dst.Buf), elems[uint8](cond.Buf), elems[uint64](a.Buf), elems[uint64](b.Buf))
	}
	return nil
}

func whereRun[T any](w *walk, dst []T, cond []uint8, a, b []T) {
	s0, s1, s2, s3 := w.innerStride(0), w.innerStride(1), w.innerStride(2), w.innerStride(3)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		n := hi - lo
		o0, o1, o2, o3 := off[0]+lo*s0, off[1]+lo*s1, off[2]+lo*s2, off[3]+lo*s3
		if s0 == 1 && s1 == 1 && s2 <= 1 && s3 <= 1 && s2 >= 0 && s3 >= 0 {
			// Contiguous, a and b each a row or one value broadcast along
			// it (a gradient expanded from a sum): a select the compiler
			// makes a conditional move, as a branch on a random mask
			// mispredicts half the time.
			d, c := dst[o0:o0+n], cond[o1:o1+n]
			x, y := a[o2:o2+(n-1)*s2+1], b[o3:o3+(n-1)*s3+1]
			for i := range d {
				v := y[i*s3]
				if c[i] != 0 {
					v = x[i*s2]
				}
				d[i] = v
			}
			return
		}
		for i := 0; i < n; i++ {
			if cond[o1+i*s1] != 0 {
				dst[o0+i*s0] = a[o2+i*s2]
			} else {
				dst[o0+i*s0] = b[o3+i*s3]
			}
		}
	})
}

// smallBinary32 runs a small float32 op whose operands are contiguous (or b
// a broadcast scalar) straight on the vector kernel: below the parallel
// grain the walk machinery would cost more than the arithmetic.
func smallBinary32(op device.BinaryOp, dst, a, b device.View) bool {
	n := dst.Numel()
	if n > grain || !dst.Contiguous() || !a.Contiguous() {
		return false
	}
	fast := binaryFast32(op)
	if fast == nil {
		return false
	}
	switch {
	case b.Contiguous():
		return fast(flat32(dst), flat32(a), flat32(b), 1)
	case allZero(b.Strides):
		return fast(flat32(dst), flat32(a), elems[float32](b.Buf)[b.Offset:b.Offset+1], 0)
	}
	return false
}

func allZero(strides []int) bool {
	for _, s := range strides {
		if s != 0 {
			return false
		}
	}
	return true
}

// flat32 is the float32 slice of a contiguous view.
func flat32(v device.View) []float32 {
	return elems[float32](v.Buf)[v.Offset : v.Offset+v.Numel()]
}

// Clamp implements device.Clamper for contiguous float32 (the other
// dtypes and layouts take the two ops): vmath.Clamp over the threads.
func (d *Device) Clamp(dst, src device.View, lo, hi float64) error {
	n := src.Numel()
	if dst.DType != dtype.Float32 || src.DType != dtype.Float32 || dst.Numel() != n || !dst.Contiguous() || !src.Contiguous() {
		return fmt.Errorf("cpu: clamp of %v %v into %v %v: contiguous float32 only", src.DType, src.Shape, dst.DType, dst.Shape)
	}
	y, x := rowsOf[float32](dst), rowsOf[float32](src)
	parallel.For(n, grain, func(i0, i1 int) { vmath.Clamp(y[i0:i1], x[i0:i1], float32(lo), float32(hi)) })
	return nil
}
