package cpu

import (
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
)

// The float32 fast paths: contiguous segments handed to the vector kernels of
// engine/cpu/vmath. A nil result means the portable loop handles the op. The
// vector kernels compute the same formulas as the loops (vmath's tests hold
// them to a few ulps of the float64 result).

func unaryFast32(op device.UnaryOp, s float32) func(dst, src []float32) {
	switch op {
	case device.Exp:
		return vmath.Exp
	case device.Log:
		return vmath.Log
	case device.Tanh:
		return vmath.Tanh
	case device.Sigmoid:
		return vmath.Sigmoid
	case device.Gelu:
		return vmath.Gelu
	case device.GeluTanh:
		return vmath.GeluTanh
	case device.Silu:
		return vmath.Silu
	case device.Relu:
		return vmath.Relu
	case device.Neg:
		return vmath.Neg
	case device.Abs:
		return vmath.Abs
	case device.Square:
		return vmath.Square
	case device.Sqrt:
		return vmath.Sqrt
	case device.Rsqrt:
		return vmath.Rsqrt
	case device.Reciprocal:
		return vmath.Reciprocal
	case device.Sign:
		return vmath.Sign
	case device.PowScalar: // 3 and -2; the other special exponents: powAsUnary
		switch s {
		case 3:
			return vmath.Cube
		case -2:
			return func(dst, src []float32) {
				vmath.Square(dst, src)
				vmath.Reciprocal(dst, dst)
			}
		}
	case device.Erf:
		return vmath.Erf
	case device.Sin:
		return vmath.Sin
	case device.Cos:
		return vmath.Cos
	case device.AddScalar:
		return func(dst, src []float32) { vmath.AddScalar(dst, src, s) }
	case device.MulScalar:
		return func(dst, src []float32) { vmath.MulScalar(dst, src, s) }
	}
	return nil
}

func activationBackwardFast32(op device.ActivationOp) func(dx, dy, saved []float32) {
	switch op {
	case device.ReluBackward: // the saved output is positive exactly where the input was
		return vmath.ReluBackward
	case device.GeluBackward:
		return vmath.GeluBackward
	case device.GeluTanhBackward:
		return vmath.GeluTanhBackward
	case device.SiluBackward:
		return vmath.SiluBackward
	case device.TanhBackward:
		return vmath.TanhBackward
	case device.SigmoidBackward:
		return vmath.SigmoidBackward
	}
	return nil
}

// binaryFast32 handles contiguous a with b contiguous (bStride 1) or a
// broadcast scalar (bStride 0, where only exact rewrites are used: a−s is
// a+(−s) bit for bit; a/s stays a division, as a·(1/s) rounds differently).
func binaryFast32(op device.BinaryOp) func(dst, a, b []float32, bStride int) bool {
	switch op {
	case device.Add:
		return func(dst, a, b []float32, bs int) bool {
			if bs == 0 {
				vmath.AddScalar(dst, a, b[0])
			} else {
				vmath.Add(dst, a, b)
			}
			return true
		}
	case device.Sub:
		return func(dst, a, b []float32, bs int) bool {
			if bs == 0 {
				vmath.AddScalar(dst, a, -b[0])
			} else {
				vmath.Sub(dst, a, b)
			}
			return true
		}
	case device.Mul:
		return func(dst, a, b []float32, bs int) bool {
			if bs == 0 {
				vmath.MulScalar(dst, a, b[0])
			} else {
				vmath.Mul(dst, a, b)
			}
			return true
		}
	case device.Div:
		return func(dst, a, b []float32, bs int) bool {
			if bs == 0 {
				vmath.DivScalar(dst, a, b[0])
			} else {
				vmath.Div(dst, a, b)
			}
			return true
		}
	case device.Maximum:
		return func(dst, a, b []float32, bs int) bool {
			if bs == 0 {
				vmath.MaximumScalar(dst, a, b[0])
			} else {
				vmath.Maximum(dst, a, b)
			}
			return true
		}
	case device.Minimum:
		return func(dst, a, b []float32, bs int) bool {
			if bs == 0 {
				vmath.MinimumScalar(dst, a, b[0])
			} else {
				vmath.Minimum(dst, a, b)
			}
			return true
		}
	}
	return nil
}

func sumSquares32(x []float32) float64 { return vmath.SumSquares(x) }
