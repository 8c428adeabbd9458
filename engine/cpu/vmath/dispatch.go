package vmath

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// kernels is one implementation of the primitive loops. The exported
// functions check lengths and special cases and then call through the table
// in use, so a variant only has to provide the loops, and composite kernels
// (softmax, the optimizer steps) are written once.
//
// Entries that a variant leaves nil fall back to the pure-Go loop: fill
// copies them in. Every entry must handle any length, including 0.
type kernels struct {
	name string

	exp, log, tanh, sigmoid, erf func(dst, x []float32)
	// sin and cos report a lane past the exact reduction of the vector
	// kernels (|x| > 2^19), whose slice the caller recomputes in Go.
	sin, cos             func(dst, x []float32) bool
	gelu, geluTanh, silu func(dst, x []float32)

	geluBackward, geluTanhBackward, siluBackward func(dx, dy, x []float32)
	tanhBackward, sigmoidBackward                func(dx, dy, y []float32)
	relu                                         func(dst, x []float32)
	reluBackward                                 func(dx, dy, x []float32)

	add, sub, mul, div   func(dst, a, b []float32)
	addScaled            func(dst, a, b []float32, s float32) // a·s + b·s, each product rounded
	addScalar, mulScalar func(dst, x []float32, s float32)
	divScalar            func(dst, x []float32, s float32)

	neg, abs, square, cube, sqrt, rsqrt, reciprocal, sign func(dst, x []float32)

	toBF16   func(dst []uint16, x []float32) // whole vectors only (len a multiple of 16)
	fromBF16 func(dst []float32, x []uint16) // whole vectors only

	maximum, minimum             func(dst, a, b []float32)
	maximumScalar, minimumScalar func(dst, a []float32, b float32)
	mulScalarFlush               func(dst, x []float32, s float32) // x·s, subnormal results flushed to zero
	axpy                         func(dst []float32, alpha float32, x []float32)

	sum, sumSquares func(x []float32) float64
	dot             func(x, y []float32) float64
	max, min        func(x []float32) float32

	expSubSum     func(dst, x []float32, m float32) float64
	sumExpSub     func(x []float32, m float32) float64
	subSub        func(dst, x []float32, a, b float32)
	sumSqDev      func(x []float32, mean float64) float64
	dotDev        func(y, x []float32, mean float64) float64
	scaleShift    func(dst, x []float32, a, b float32)
	scaleAdd2     func(dst, x, y []float32, a, b, c float32)
	softmaxBwd    func(dx, dy, y []float32, s float32)
	logSoftmaxBwd func(dx, dy, y []float32, s float32)

	// adam runs AdamW (c.adamW) or Adam, without AMSGrad (which always
	// takes the Go loop: it is rare and its NaN-propagating maximum would
	// cost a compare and blend per element); sgd runs the loop for mode.
	adam func(p, g, m, v []float32, c adamConsts)
	sgd  func(p, g, buf []float32, c sgdConsts, mode sgdMode)

	// copyRows is CopyRows's loop where a variant has one of its own
	// (nil: copyRows, the SSE assembly or the Go loop).
	copyRows func(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)
	// copyRowsAdd likewise for CopyRowsAdd (nil: copyRowsAdd).
	copyRowsAdd func(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32)

	// maxPool2x2 is MaxPool2x2's loop, its operands checked.
	maxPool2x2 func(y []float32, at []int64, x []float32, w, ow, oh int)
	// maxPool2x2Backward is MaxPool2x2Backward's loop, its operands
	// checked and dx cut to the plane.
	maxPool2x2Backward func(dx, dy []float32, at []int64, w, ow, oh int) bool
}

var goKernels = kernels{
	name:               "go",
	exp:                expGo,
	log:                logGo,
	sin:                func(dst, x []float32) bool { sinGo(dst, x); return false },
	cos:                func(dst, x []float32) bool { cosGo(dst, x); return false },
	tanh:               tanhGo,
	sigmoid:            sigmoidGo,
	erf:                erfGo,
	gelu:               geluGo,
	geluTanh:           geluTanhGo,
	silu:               siluGo,
	geluBackward:       geluBackwardGo,
	geluTanhBackward:   geluTanhBackwardGo,
	siluBackward:       siluBackwardGo,
	tanhBackward:       tanhBackwardGo,
	sigmoidBackward:    sigmoidBackwardGo,
	relu:               reluGo,
	reluBackward:       reluBackwardGo,
	add:                addGo,
	addScaled:          addScaledGo,
	sub:                subGo,
	mul:                mulGo,
	div:                divGo,
	addScalar:          addScalarGo,
	mulScalar:          mulScalarGo,
	divScalar:          divScalarGo,
	neg:                negGo,
	abs:                absGo,
	square:             squareGo,
	cube:               cubeGo,
	sqrt:               sqrtGo,
	rsqrt:              rsqrtGo,
	reciprocal:         reciprocalGo,
	sign:               signGo,
	maximum:            maximumGo,
	toBF16:             toBF16Go,
	fromBF16:           fromBF16Go,
	minimum:            minimumGo,
	maximumScalar:      maximumScalarGo,
	minimumScalar:      minimumScalarGo,
	mulScalarFlush:     mulScalarFlushGo,
	axpy:               axpyGo,
	sum:                sumGo[float32],
	sumSquares:         sumSquaresGo,
	dot:                dotGo,
	max:                maxGo,
	min:                minGo,
	expSubSum:          expSubSumGo,
	sumExpSub:          sumExpSubGo,
	subSub:             subSubGo,
	sumSqDev:           sumSqDevGo[float32],
	dotDev:             dotDevGo[float32],
	scaleShift:         scaleShiftGo[float32],
	scaleAdd2:          scaleAdd2Go[float32],
	softmaxBwd:         softmaxBwdGo,
	logSoftmaxBwd:      logSoftmaxBwdGo,
	adam:               adamGo,
	sgd:                sgdGo,
	maxPool2x2:         maxPool2x2Go[float32],
	maxPool2x2Backward: maxPool2x2BackwardGo[float32],
}

// fill returns k with its nil entries taken from the Go kernels.
func (k kernels) fill() *kernels {
	g := goKernels
	if k.exp == nil {
		k.exp = g.exp
	}
	if k.log == nil {
		k.log = g.log
	}
	if k.sin == nil {
		k.sin = g.sin
	}
	if k.cos == nil {
		k.cos = g.cos
	}
	if k.tanh == nil {
		k.tanh = g.tanh
	}
	if k.sigmoid == nil {
		k.sigmoid = g.sigmoid
	}
	if k.erf == nil {
		k.erf = g.erf
	}
	if k.gelu == nil {
		k.gelu = g.gelu
	}
	if k.geluTanh == nil {
		k.geluTanh = g.geluTanh
	}
	if k.silu == nil {
		k.silu = g.silu
	}
	if k.geluBackward == nil {
		k.geluBackward = g.geluBackward
	}
	if k.geluTanhBackward == nil {
		k.geluTanhBackward = g.geluTanhBackward
	}
	if k.siluBackward == nil {
		k.siluBackward = g.siluBackward
	}
	if k.tanhBackward == nil {
		k.tanhBackward = g.tanhBackward
	}
	if k.sigmoidBackward == nil {
		k.sigmoidBackward = g.sigmoidBackward
	}
	if k.relu == nil {
		k.relu = g.relu
	}
	if k.reluBackward == nil {
		k.reluBackward = g.reluBackward
	}
	if k.add == nil {
		k.add = g.add
	}
	if k.addScaled == nil {
		k.addScaled = g.addScaled
	}
	if k.sub == nil {
		k.sub = g.sub
	}
	if k.mul == nil {
		k.mul = g.mul
	}
	if k.div == nil {
		k.div = g.div
	}
	if k.addScalar == nil {
		k.addScalar = g.addScalar
	}
	if k.mulScalarFlush == nil {
		k.mulScalarFlush = g.mulScalarFlush
	}
	if k.mulScalar == nil {
		k.mulScalar = g.mulScalar
	}
	if k.divScalar == nil {
		k.divScalar = g.divScalar
	}
	if k.axpy == nil {
		k.axpy = g.axpy
	}
	for _, f := range []struct{ k, g *func(dst, x []float32) }{
		{&k.neg, &g.neg}, {&k.abs, &g.abs}, {&k.square, &g.square}, {&k.cube, &g.cube}, {&k.sqrt, &g.sqrt},
		{&k.rsqrt, &g.rsqrt}, {&k.reciprocal, &g.reciprocal}, {&k.sign, &g.sign},
	} {
		if *f.k == nil {
			*f.k = *f.g
		}
	}
	if k.toBF16 == nil {
		k.toBF16 = g.toBF16
	}
	if k.fromBF16 == nil {
		k.fromBF16 = g.fromBF16
	}
	if k.maximum == nil {
		k.maximum = g.maximum
	}
	if k.minimum == nil {
		k.minimum = g.minimum
	}
	if k.maximumScalar == nil {
		k.maximumScalar = g.maximumScalar
	}
	if k.minimumScalar == nil {
		k.minimumScalar = g.minimumScalar
	}
	if k.sum == nil {
		k.sum = g.sum
	}
	if k.sumSquares == nil {
		k.sumSquares = g.sumSquares
	}
	if k.dot == nil {
		k.dot = g.dot
	}
	if k.max == nil {
		k.max = g.max
	}
	if k.min == nil {
		k.min = g.min
	}
	if k.expSubSum == nil {
		k.expSubSum = g.expSubSum
	}
	if k.sumExpSub == nil {
		k.sumExpSub = g.sumExpSub
	}
	if k.subSub == nil {
		k.subSub = g.subSub
	}
	if k.sumSqDev == nil {
		k.sumSqDev = g.sumSqDev
	}
	if k.dotDev == nil {
		k.dotDev = g.dotDev
	}
	if k.scaleShift == nil {
		k.scaleShift = g.scaleShift
	}
	if k.scaleAdd2 == nil {
		k.scaleAdd2 = g.scaleAdd2
	}
	if k.softmaxBwd == nil {
		k.softmaxBwd = g.softmaxBwd
	}
	if k.logSoftmaxBwd == nil {
		k.logSoftmaxBwd = g.logSoftmaxBwd
	}
	if k.sgd == nil {
		k.sgd = g.sgd
	}
	if k.adam == nil {
		k.adam = g.adam
	}
	if k.maxPool2x2 == nil {
		k.maxPool2x2 = g.maxPool2x2
	}
	if k.maxPool2x2Backward == nil {
		k.maxPool2x2Backward = g.maxPool2x2Backward
	}
	return &k
}

// variants lists the implementations this CPU can run, best first; the
// pure-Go one is always last. impl is the one in use.
var (
	variants = []*kernels{&goKernels}
	impl     = &goKernels
)

// The ZEROENG_VMATH environment variable, when it names a variant this CPU
// supports ("avx512", "avx2" or "go"), overrides the choice: for comparing
// the variants inside a whole training run, and for ruling a kernel variant
// out when chasing a numerical difference. A name this CPU has no variant
// of leaves the choice alone and is reported by EnvError.
func init() {
	variants = append(archVariants(), &goKernels)
	impl = variants[0]
	if name := os.Getenv("ZEROENG_VMATH"); name != "" {
		i := slices.IndexFunc(variants, func(k *kernels) bool { return k.name == name })
		if i < 0 {
			var names []string
			for _, k := range variants {
				names = append(names, k.name)
			}
			envErr = fmt.Errorf("ZEROENG_VMATH=%s names no vector kernel variant of this CPU (it has %s)", name, strings.Join(names, ", "))
			return
		}
		impl = variants[i]
	}
}

// envErr is a ZEROENG_VMATH naming no variant of this CPU (init).
var envErr error

// EnvError reports a ZEROENG_VMATH that names no variant of this CPU, which
// the command line refuses rather than run on another variant unnoticed.
func EnvError() error { return envErr }

// Implementation names the kernel variant in use: "avx512", "avx2" or "go".
func Implementation() string { return impl.name }

// useVariant switches the implementation (tests and benchmarks only; it is
// not safe while kernels run) and returns a function that restores the old
// one.
func useVariant(k *kernels) (restore func()) {
	old := impl
	impl = k
	return func() { impl = old }
}
