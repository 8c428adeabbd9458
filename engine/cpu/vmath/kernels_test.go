package vmath

import (
	"math"
	"runtime"
	"strings"
	"testing"
)

// tailLengths exercise the empty slice, partial vectors of both widths (8
// and 16 lanes), whole vectors, the unrolled groups and a long slice.
var tailLengths = []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000}

// op is one table kernel seen uniformly: ins inputs, one output written (or
// updated in place) and a scalar result, so that the tail, guard and
// aliasing tests cover every kernel of every variant.
type op struct {
	name string
	ins  int // number of input slices
	// inplace: the output is also read (axpy, the optimizer slices).
	inplace bool
	run     func(k *kernels, out []float32, in [][]float32) float64
	// tol is the allowed difference from the Go kernels: |a-b| <= tol·|b|
	// + abs elementwise and for the scalar result.
	tol, abs float64
	// scale of the random inputs.
	scale float64
}

var testConsts = newAdamConsts(1e-3, 0.9, 0.999, 1e-8, 0.01, 1-math.Pow(0.9, 3), 1-math.Pow(0.999, 3), false, true)

var testSGDConsts = sgdConsts{gsign: -1, wd: 0.01, mom: 0.9, damp: 0.75, negLR: -0.1}

func init() {
	// Every SGD loop: out is p, the inputs are g and the momentum buffer.
	for _, mode := range []sgdMode{0, sgdL2, sgdMomentum, sgdL2 | sgdMomentum, sgdMomentum | sgdFirst,
		sgdL2 | sgdMomentum | sgdFirst, sgdMomentum | sgdNesterov, sgdL2 | sgdMomentum | sgdNesterov,
		sgdMomentum | sgdNesterov | sgdFirst, sgdL2 | sgdMomentum | sgdNesterov | sgdFirst} {
		ops = append(ops, op{name: "sgd" + itoa(int(mode)), ins: 2, inplace: true, run: func(k *kernels, o []float32, in [][]float32) float64 {
			k.sgd(o, in[0], in[1], testSGDConsts, mode)
			return 0
		}, tol: 1.2e-7, abs: 1e-30, scale: 1})
	}
}

var ops = []op{
	{name: "exp", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.exp(o, in[0]); return 0 }, tol: 3e-7, scale: 10},
	{name: "sin", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.sin(o, in[0]); return 0 }, tol: 1.2e-7, abs: 1e-30, scale: 30},
	{name: "cos", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.cos(o, in[0]); return 0 }, tol: 1.2e-7, abs: 1e-30, scale: 30},
	{name: "tanh", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.tanh(o, in[0]); return 0 }, tol: 3e-7, scale: 2},
	{name: "sigmoid", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.sigmoid(o, in[0]); return 0 }, tol: 3e-7, scale: 5},
	{name: "erf", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.erf(o, in[0]); return 0 }, tol: 3e-7, scale: 1},
	{name: "log", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.log(o, in[0]); return 0 }, tol: 1.2e-7, scale: 3},
	{name: "gelu", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.gelu(o, in[0]); return 0 }, tol: 1e-5, abs: 1e-30, scale: 2},
	{name: "geluTanh", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.geluTanh(o, in[0]); return 0 }, tol: 1e-5, abs: 1e-30, scale: 2},
	{name: "silu", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.silu(o, in[0]); return 0 }, tol: 1e-5, abs: 1e-30, scale: 3},
	{name: "geluBackward", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.geluBackward(o, in[0], in[1]); return 0 }, tol: 1e-5, abs: 1e-7, scale: 2},
	{name: "geluTanhBackward", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 {
		k.geluTanhBackward(o, in[0], in[1])
		return 0
	}, tol: 1e-5, abs: 1e-7, scale: 2},
	{name: "siluBackward", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.siluBackward(o, in[0], in[1]); return 0 }, tol: 1e-5, abs: 1e-7, scale: 3},
	{name: "tanhBackward", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.tanhBackward(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "sigmoidBackward", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.sigmoidBackward(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "relu", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.relu(o, in[0]); return 0 }, scale: 1},
	{name: "reluBackward", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.reluBackward(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "add", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.add(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "addScaled", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.addScaled(o, in[0], in[1], 0.37); return 0 }, scale: 1},
	{name: "sub", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.sub(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "mul", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.mul(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "div", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.div(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "addScalar", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.addScalar(o, in[0], 0.37); return 0 }, scale: 1},
	{name: "mulScalar", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.mulScalar(o, in[0], -1.7); return 0 }, scale: 1},
	{name: "divScalar", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.divScalar(o, in[0], -1.7); return 0 }, scale: 1},
	{name: "neg", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.neg(o, in[0]); return 0 }, scale: 1},
	{name: "abs", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.abs(o, in[0]); return 0 }, scale: 1},
	{name: "square", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.square(o, in[0]); return 0 }, scale: 1},
	{name: "cube", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.cube(o, in[0]); return 0 }, scale: 1},
	{name: "sqrt", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.sqrt(o, in[0]); return 0 }, scale: 1},
	{name: "rsqrt", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.rsqrt(o, in[0]); return 0 }, scale: 1},
	{name: "reciprocal", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.reciprocal(o, in[0]); return 0 }, scale: 1},
	{name: "sign", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.sign(o, in[0]); return 0 }, scale: 1},
	{name: "maximum", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.maximum(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "minimum", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.minimum(o, in[0], in[1]); return 0 }, scale: 1},
	{name: "maximumScalar", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.maximumScalar(o, in[0], 0.25); return 0 }, scale: 1},
	{name: "minimumScalar", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.minimumScalar(o, in[0], -0.25); return 0 }, scale: 1},
	// The products straddle the smallest normal, 2^-126 ≈ 1.18e-38.
	{name: "mulScalarFlush", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.mulScalarFlush(o, in[0], -2e-38); return 0 }, scale: 1},
	{name: "axpy", ins: 1, inplace: true, run: func(k *kernels, o []float32, in [][]float32) float64 { k.axpy(o, 0.3, in[0]); return 0 }, tol: 6e-8, abs: 1e-37, scale: 1},
	{name: "sum", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { return k.sum(in[0]) }, tol: 1e-13, abs: 1e-13, scale: 1},
	{name: "sumSquares", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { return k.sumSquares(in[0]) }, tol: 1e-13, scale: 1},
	{name: "dot", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { return k.dot(in[0], in[1]) }, tol: 1e-13, abs: 1e-13, scale: 1},
	{name: "max", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 {
		if len(in[0]) == 0 {
			return 0
		}
		return float64(k.max(in[0]))
	}, scale: 1},
	{name: "min", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 {
		if len(in[0]) == 0 {
			return 0
		}
		return float64(k.min(in[0]))
	}, scale: 1},
	{name: "expSubSum", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { return k.expSubSum(o, in[0], 0.5) }, tol: 3e-7, scale: 2},
	{name: "sumExpSub", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { return k.sumExpSub(in[0], 0.5) }, tol: 3e-7, scale: 2},
	{name: "sumSqDev", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { return k.sumSqDev(in[0], 0.3) }, tol: 1e-13, abs: 1e-13, scale: 1},
	{name: "dotDev", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { return k.dotDev(in[0], in[1], -0.7) }, tol: 1e-13, abs: 1e-13, scale: 1},
	{name: "scaleShift", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.scaleShift(o, in[0], 1.37, -0.21); return 0 }, scale: 1},
	{name: "scaleAdd2", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 {
		k.scaleAdd2(o, in[0], in[1], 0.83, -1.9, 0.11)
		return 0
	}, scale: 1},
	{name: "subSub", ins: 1, run: func(k *kernels, o []float32, in [][]float32) float64 { k.subSub(o, in[0], 0.25, 1.5); return 0 }, scale: 1},
	{name: "softmaxBwd", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.softmaxBwd(o, in[0], in[1], 0.3); return 0 }, scale: 1},
	{name: "logSoftmaxBwd", ins: 2, run: func(k *kernels, o []float32, in [][]float32) float64 { k.logSoftmaxBwd(o, in[0], in[1], 0.7); return 0 }, tol: 1e-6, abs: 1e-6, scale: 1},
	// adam: out is p; the inputs are g, m and v (m and v are updated too).
	{name: "adamw", ins: 3, inplace: true, run: func(k *kernels, o []float32, in [][]float32) float64 {
		for i := range in[2] {
			in[2][i] = float32(math.Abs(float64(in[2][i])))
		}
		k.adam(o, in[0], in[1], in[2], testConsts)
		return 0
	}, tol: 1e-6, abs: 1e-9, scale: 1},
}

const guardBits = 0x7fa5a5a5 // a NaN no kernel produces

// guarded returns a slice of n elements inside a buffer with g guard
// elements on each side, filled from r (or with guard bits if r is nil).
func guarded(n, g int, r *rng, scale float64) (s, buf []float32) {
	buf = make([]float32, n+2*g)
	for i := range buf {
		buf[i] = math.Float32frombits(guardBits)
	}
	s = buf[g : g+n : g+n]
	if r != nil {
		for i := range s {
			s[i] = float32(r.norm() * scale)
		}
	}
	return s, buf
}

func checkGuards(t *testing.T, what string, buf []float32, g int) {
	t.Helper()
	for i := range g {
		for _, j := range []int{i, len(buf) - 1 - i} {
			if math.Float32bits(buf[j]) != guardBits {
				t.Fatalf("%s: wrote outside the slice (guard %d of %d changed to %g)", what, j, len(buf), buf[j])
			}
		}
	}
}

func close32(a, b float32, tol, abs float64) bool {
	if math.IsNaN(float64(a)) || math.IsNaN(float64(b)) {
		return math.IsNaN(float64(a)) && math.IsNaN(float64(b))
	}
	return a == b || math.Abs(float64(a)-float64(b)) <= tol*math.Abs(float64(b))+abs
}

// runOp runs o on copies of ins (and of out0 for in-place kernels) with
// guards, and returns the output and the scalar result.
func runOp(t *testing.T, k *kernels, o op, ins [][]float32, out0 []float32) ([]float32, float64) {
	t.Helper()
	const g = 16
	n := len(ins[0])
	in := make([][]float32, len(ins))
	inBufs := make([][]float32, len(ins))
	for i := range ins {
		in[i], inBufs[i] = guarded(n, g, nil, 0)
		copy(in[i], ins[i])
	}
	out, outBuf := guarded(n, g, nil, 0)
	if o.inplace {
		copy(out, out0)
	}
	res := o.run(k, out, in)
	what := k.name + " " + o.name + " n=" + itoa(n)
	checkGuards(t, what, outBuf, g)
	for i := range inBufs {
		checkGuards(t, what+" input", inBufs[i], g)
	}
	return out, res
}

// TestTails compares every kernel of every variant with the Go kernels over
// the tail lengths, with guard elements around every slice, and checks that
// an element's result does not depend on where it sits (the masked tail
// runs the same instructions as the main loop).
func TestTails(t *testing.T) {
	for _, o := range ops {
		r := newRand(uint64(len(o.name)))
		long := make([][]float32, o.ins)
		for i := range long {
			long[i] = r.slice(1000, o.scale)
		}
		outLong := r.slice(1000, 1)
		for _, k := range variants {
			fullOut, _ := runOp(t, k, o, long, outLong)
			for _, n := range tailLengths {
				ins := make([][]float32, o.ins)
				for i := range ins {
					ins[i] = long[i][:n]
				}
				got, gotRes := runOp(t, k, o, ins, outLong[:n])
				want, wantRes := runOp(t, &goKernels, o, ins, outLong[:n])
				for i := range got {
					if !close32(got[i], want[i], o.tol, o.abs) {
						t.Fatalf("%s %s n=%d: [%d] = %g, go %g (inputs %v)", k.name, o.name, n, i, got[i], want[i], col(ins, i))
					}
					if math.Float32bits(got[i]) != math.Float32bits(fullOut[i]) {
						t.Fatalf("%s %s n=%d: [%d] = %g in the short slice, %g in the long one", k.name, o.name, n, i, got[i], fullOut[i])
					}
				}
				if math.Abs(gotRes-wantRes) > o.tol*math.Abs(wantRes)+o.abs*float64(n) {
					t.Fatalf("%s %s n=%d: result %g, go %g", k.name, o.name, n, gotRes, wantRes)
				}
			}
		}
	}
}

func col(ins [][]float32, i int) []float32 {
	var c []float32
	for _, s := range ins {
		c = append(c, s[i])
	}
	return c
}

// TestAliasing runs each elementwise kernel with the output aliasing each
// input in turn and expects the result of the unaliased call.
func TestAliasing(t *testing.T) {
	for _, o := range ops {
		if o.inplace || strings.HasPrefix(o.name, "sum") || strings.HasPrefix(o.name, "dot") || o.name == "max" || o.name == "min" {
			continue
		}
		r := newRand(3)
		for _, k := range variants {
			for _, n := range []int{33, 1000} {
				ins := make([][]float32, o.ins)
				for i := range ins {
					ins[i] = r.slice(n, o.scale)
				}
				want := make([]float32, n)
				o.run(k, want, ins)
				for a := range ins {
					cp := make([][]float32, len(ins))
					for i := range ins {
						cp[i] = append([]float32(nil), ins[i]...)
					}
					o.run(k, cp[a], cp)
					for i := range want {
						if math.Float32bits(cp[a][i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s %s: output aliasing input %d: [%d] = %g, want %g", k.name, o.name, a, i, cp[a][i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestLengthPanics(t *testing.T) {
	a, b := make([]float32, 3), make([]float32, 4)
	for name, f := range map[string]func(){
		"Exp":        func() { Exp(a, b) },
		"Add":        func() { Add(a, a, b) },
		"Axpy":       func() { Axpy(a, 1, b) },
		"Dot":        func() { Dot(a, b) },
		"GeluBack":   func() { GeluBackward(a, b, a) },
		"SoftmaxRow": func() { SoftmaxRow(a, b) },
		"LayerNorm":  func() { LayerNormRow(a, a, b, nil, 1e-5) },
		"AdamW":      func() { AdamWStep(a, a, a, b, nil, 1, 0.9, 0.999, 1e-8, 0, 1, 1, false) },
		"AdamVmax":   func() { AdamStep(a, a, a, a, b, 1, 0.9, 0.999, 1e-8, 0, 1, 1, false) },
		"SGD":        func() { SGDStep(a, a, b, 1, 0.9, 0, 0, false, false, false) },
		"Max":        func() { Max(nil) },
	} {
		func() {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "vmath.") {
					t.Errorf("%s: recovered %v, want a vmath panic", name, r)
				}
			}()
			f()
		}()
	}
}

// TestSumDrift sums 16M copies of 0.1: a float32 accumulator is off by
// several percent; float64 accumulation is exact to float32 rounding.
func TestSumDrift(t *testing.T) {
	n := 1 << 24
	if testing.Short() {
		n = 1 << 20
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = 0.1
	}
	want := float32(float64(n) * float64(float32(0.1)))
	for _, k := range variants {
		defer useVariant(k)()
		if got := Sum(x); got != want {
			t.Errorf("%s: Sum of %d×0.1 = %g, want %g", k.name, n, got, want)
		}
		if got := Dot(x, x); got != float32(float64(n)*float64(float32(0.1))*float64(float32(0.1))) {
			t.Errorf("%s: Dot = %g", k.name, got)
		}
	}
}

// TestReductions checks Sum, Dot, SumSquares and Max against exact float64
// results, including NaN and infinities for Max.
func TestReductions(t *testing.T) {
	r := newRand(11)
	for _, k := range variants {
		restore := useVariant(k)
		for _, n := range tailLengths {
			x, y := r.slice(n, 3), r.slice(n, 3)
			var s, d, ss, abs float64
			m := float32(math.Inf(-1))
			for i := range x {
				s += float64(x[i])
				d += float64(x[i]) * float64(y[i])
				ss += float64(x[i]) * float64(x[i])
				abs += math.Abs(float64(x[i])) * (1 + math.Abs(float64(y[i])))
				m = max(m, x[i])
			}
			if got := Sum(x); !close32(got, float32(s), 0, abs*1e-15+0x1p-149) {
				t.Errorf("%s Sum n=%d = %g, want %g", k.name, n, got, s)
			}
			if got := Dot(x, y); !close32(got, float32(d), 0, abs*1e-15+0x1p-149) {
				t.Errorf("%s Dot n=%d = %g, want %g", k.name, n, got, d)
			}
			if got := SumSquares(x); math.Abs(got-ss) > ss*1e-14 {
				t.Errorf("%s SumSquares n=%d = %g, want %g", k.name, n, got, ss)
			}
			if n > 0 {
				if got := Max(x); got != m {
					t.Errorf("%s Max n=%d = %g, want %g", k.name, n, got, m)
				}
				if got, want := Min(x), -Max(negated(x)); got != want {
					t.Errorf("%s Min n=%d = %g, want %g", k.name, n, got, want)
				}
				for _, special := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
					for _, at := range []int{0, n / 2, n - 1} {
						z := append([]float32(nil), x...)
						z[at] = special
						want := float32(math.Inf(-1))
						for _, v := range z {
							if v != v || want != want {
								want = float32(math.NaN())
							} else {
								want = max(want, v)
							}
						}
						if got := Max(z); !(got == want || got != got && want != want) {
							t.Errorf("%s Max n=%d with %g at %d = %g, want %g", k.name, n, special, at, got, want)
						}
						wantMin := float32(math.Inf(1))
						for _, v := range z {
							if v != v || wantMin != wantMin {
								wantMin = float32(math.NaN())
							} else {
								wantMin = min(wantMin, v)
							}
						}
						if got := Min(z); !(got == wantMin || got != got && wantMin != wantMin) {
							t.Errorf("%s Min n=%d with %g at %d = %g, want %g", k.name, n, special, at, got, wantMin)
						}
					}
				}
			}
		}
		restore()
	}
}

// TestNoAlloc: the kernels must not allocate. The layer-norm kernels take
// their staging buffer from a sync.Pool, which keeps one per P: a
// goroutine that moves to another P (on a loaded machine, as under make
// test-all) draws a new one there, once per P. One P measures the steady
// state the claim is about.
func TestNoAlloc(t *testing.T) {
	if raceEnabled {
		// Under make test-all's race run it failed as "1 allocations per
		// run" once: 20 draws from the pool with a quarter dropped.
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	x, y, z := make([]float32, 100), make([]float32, 100), make([]float32, 100)
	for i := range x {
		x[i], y[i] = float32(i)*0.01, 1
	}
	for _, k := range variants {
		restore := useVariant(k)
		allocs := testing.AllocsPerRun(10, func() {
			Exp(z, x)
			Gelu(z, x)
			GeluBackward(z, y, x)
			Add(z, x, y)
			Axpy(z, 2, x)
			_ = Sum(x) + Dot(x, y) + Max(x)
			SoftmaxRow(z, x)
			LogSoftmaxRow(z, x)
			SoftmaxBackwardRow(z, y, x)
			LayerNormRow(z, x, y, y, 1e-5)
			LayerNormBackwardRow(z, y, y, y, x, y, 0.5, 2)
			AdamWStep(z, x, y, y, nil, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.1, 0.001, false)
			SGDStep(z, x, y, 0.1, 0.9, 0, 0, true, false, false)
		})
		restore()
		if allocs != 0 {
			t.Errorf("%s: %v allocations per run", k.name, allocs)
		}
	}
}

// TestReluSpecial pins PyTorch's treatment of NaN and signed zeros.
func TestReluSpecial(t *testing.T) {
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	x := []float32{nan, negZero, 0, -1, 2, float32(math.Inf(-1)), float32(math.Inf(1))}
	dy := []float32{1, 2, 3, 4, 5, 6, 7}
	wantY := []float32{nan, negZero, 0, 0, 2, 0, float32(math.Inf(1))}
	wantDx := []float32{1, 0, 0, 0, 5, 0, 7}
	for _, k := range variants {
		y, dx := make([]float32, len(x)), make([]float32, len(x))
		k.relu(y, x)
		k.reluBackward(dx, dy, x)
		for i := range x {
			if math.Float32bits(y[i]) != math.Float32bits(wantY[i]) && !(y[i] != y[i] && wantY[i] != wantY[i]) {
				t.Errorf("%s: relu(%g) = %g, want %g", k.name, x[i], y[i], wantY[i])
			}
			if dx[i] != wantDx[i] {
				t.Errorf("%s: relu backward at %g = %g, want %g", k.name, x[i], dx[i], wantDx[i])
			}
		}
	}
}

// TestChunking: the exported functions split long slices into chunks (to
// stay preemptible); the result must equal one kernel call over the whole
// slice, element for element, and a NaN in a later chunk must reach Max.
func TestChunking(t *testing.T) {
	n := 3*chunk + 5
	r := newRand(17)
	x, y := r.slice(n, 2), r.slice(n, 1)
	for _, k := range variants {
		restore := useVariant(k)
		same := func(name string, got, want []float32) {
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %s: [%d] = %g chunked, %g in one call", k.name, name, i, got[i], want[i])
				}
			}
		}
		got, want := make([]float32, n), make([]float32, n)
		Gelu(got, x)
		k.gelu(want, x)
		same("Gelu", got, want)
		GeluBackward(got, y, x)
		k.geluBackward(want, y, x)
		same("GeluBackward", got, want)
		MulScalar(got, x, 3)
		k.mulScalar(want, x, 3)
		same("MulScalar", got, want)
		copy(got, y)
		copy(want, y)
		Axpy(got, 0.5, x)
		k.axpy(want, 0.5, x)
		same("Axpy", got, want)
		p1, p2 := append([]float32(nil), x...), append([]float32(nil), x...)
		m1, m2, v1, v2 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		AdamWStep(p1, y, m1, v1, nil, 1e-3, 0.9, 0.999, 1e-8, 0.1, 0.1, 0.001, false)
		k.adam(p2, y, m2, v2, newAdamConsts(1e-3, 0.9, 0.999, 1e-8, 0.1, 0.1, 0.001, false, true))
		same("AdamW p", p1, p2)
		same("AdamW v", v1, v2)
		b1, b2 := make([]float32, n), make([]float32, n)
		SGDStep(p1, y, b1, 0.1, 0.9, 0, 0.01, true, false, true)
		k.sgd(p2, y, b2, sgdConsts{gsign: 1, wd: 0.01, mom: 0.9, damp: 1, negLR: -0.1}, sgdL2|sgdMomentum|sgdFirst|sgdNesterov)
		same("SGD p", p1, p2)
		same("SGD buf", b1, b2)
		if s, w := float64(Sum(x)), k.sum(x); math.Abs(s-w) > 1e-6*math.Abs(w)+1e-6 {
			t.Errorf("%s Sum = %g chunked, %g in one call", k.name, s, w)
		}
		if s, w := SumSquares(x), k.sumSquares(x); math.Abs(s-w) > 1e-12*w {
			t.Errorf("%s SumSquares = %g chunked, %g in one call", k.name, s, w)
		}
		if s, w := float64(Dot(x, y)), k.dot(x, y); math.Abs(s-w) > 1e-6*math.Abs(w)+1e-6 {
			t.Errorf("%s Dot = %g chunked, %g in one call", k.name, s, w)
		}
		z := append([]float32(nil), x...)
		z[n-2] = 100
		if m := Max(z); m != 100 {
			t.Errorf("%s Max = %g, want 100 (in the last chunk)", k.name, m)
		}
		z[2*chunk+1] = float32(math.NaN())
		if m := Max(z); m == m {
			t.Errorf("%s Max = %g, want NaN (NaN in the third chunk)", k.name, m)
		}
		restore()
	}
}

// specials are the inputs where exact kernels most easily go wrong: both
// zeros, infinities, NaNs of either sign, subnormals and the extremes of
// the normal range.
var specials = []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, 2, float32(math.Inf(1)), float32(math.Inf(-1)),
	float32(math.NaN()), -float32(math.NaN()), 0x1p-149, -0x1p-149, 0x1p-126, math.MaxFloat32, -math.MaxFloat32, 3, -7.25}

// TestExactKernels runs the exact elementwise kernels of every variant on
// every pair of special values (and each unary one on each) and expects
// the Go kernels' bits: the sign of zero, which NaN, ties.
func TestExactKernels(t *testing.T) {
	var a, b []float32
	for _, x := range specials {
		for _, y := range specials {
			a, b = append(a, x), append(b, y)
		}
	}
	unary := map[string]func(k *kernels) func(dst, x []float32){
		"neg":        func(k *kernels) func(dst, x []float32) { return k.neg },
		"abs":        func(k *kernels) func(dst, x []float32) { return k.abs },
		"square":     func(k *kernels) func(dst, x []float32) { return k.square },
		"cube":       func(k *kernels) func(dst, x []float32) { return k.cube },
		"sqrt":       func(k *kernels) func(dst, x []float32) { return k.sqrt },
		"rsqrt":      func(k *kernels) func(dst, x []float32) { return k.rsqrt },
		"reciprocal": func(k *kernels) func(dst, x []float32) { return k.reciprocal },
		"sign":       func(k *kernels) func(dst, x []float32) { return k.sign },
		"maximumScalar(-0)": func(k *kernels) func(dst, x []float32) {
			return func(dst, x []float32) { k.maximumScalar(dst, x, float32(math.Copysign(0, -1))) }
		},
		"minimumScalar(NaN)": func(k *kernels) func(dst, x []float32) {
			return func(dst, x []float32) { k.minimumScalar(dst, x, float32(math.NaN())) }
		},
	}
	binary := map[string]func(k *kernels) func(dst, a, b []float32){
		"maximum": func(k *kernels) func(dst, a, b []float32) { return k.maximum },
		"minimum": func(k *kernels) func(dst, a, b []float32) { return k.minimum },
		"maximumScalar": func(k *kernels) func(dst, a, b []float32) {
			return func(dst, a, b []float32) {
				for i := range a {
					k.maximumScalar(dst[i:i+1], a[i:i+1], b[i])
				}
			}
		},
		"minimumScalar": func(k *kernels) func(dst, a, b []float32) {
			return func(dst, a, b []float32) {
				for i := range a {
					k.minimumScalar(dst[i:i+1], a[i:i+1], b[i])
				}
			}
		},
	}
	same := func(name string, k *kernels, got, want, in0, in1 []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Errorf("%s %s(%g, %g) = %g (%#08x), go %g (%#08x)", k.name, name, in0[i], in1[i], got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
	for _, k := range variants {
		for name, f := range unary {
			got, want := make([]float32, len(a)), make([]float32, len(a))
			f(k)(got, a)
			f(&goKernels)(want, a)
			same(name, k, got, want, a, a)
		}
		for name, f := range binary {
			got, want := make([]float32, len(a)), make([]float32, len(a))
			f(k)(got, a, b)
			f(&goKernels)(want, a, b)
			same(name, k, got, want, a, b)
		}
	}
	// The Go kernels themselves: PyTorch's results on the cases that
	// decide (torch.maximum/minimum propagate NaN, sign(NaN) = 0, the
	// tie takes b).
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		name      string
		got, want float32
	}{
		{"maximum(NaN, 1)", call2(maximumGo, nan, 1), nan},
		{"maximum(1, NaN)", call2(maximumGo, 1, nan), nan},
		{"minimum(NaN, 1)", call2(minimumGo, nan, 1), nan},
		{"minimum(-1, NaN)", call2(minimumGo, -1, nan), nan},
		{"maximum(-0, 0)", call2(maximumGo, negZero, 0), 0},
		{"maximum(0, -0)", call2(maximumGo, 0, negZero), negZero},
		{"sign(NaN)", call1(signGo, nan), 0},
		{"sign(-0)", call1(signGo, negZero), 0},
		{"sign(-3)", call1(signGo, -3), -1},
		{"rsqrt(4)", call1(rsqrtGo, 4), 0.5},
		{"rsqrt(-0)", call1(rsqrtGo, negZero), float32(math.Inf(-1))},
		{"abs(-0)", call1(absGo, negZero), 0},
	} {
		if math.Float32bits(c.got) != math.Float32bits(c.want) && !(c.got != c.got && c.want != c.want) {
			t.Errorf("%s = %g, want %g", c.name, c.got, c.want)
		}
	}
}

func call1(f func(dst, x []float32), x float32) float32 {
	d := []float32{0}
	f(d, []float32{x})
	return d[0]
}

func call2(f func(dst, a, b []float32), a, b float32) float32 {
	d := []float32{0}
	f(d, []float32{a}, []float32{b})
	return d[0]
}

func negated(x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = -v
	}
	return y
}

// TestBF16Conversions converts every length up to 70 and two long slices,
// with both zeros, infinities, NaNs of either sign and payload,
// subnormals, ties to even and values that round up into the next binade,
// on every variant, against the Go loops (and the widening back, exactly).
func TestBF16Conversions(t *testing.T) {
	r := newRand(21)
	specials := []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0xff812345,
		0x00000001, 0x807fffff, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7fffff, 0xff7fffff, 0x3fffffff}
	var x []float32
	for i := 0; i < 1100; i++ {
		if i%3 == 0 {
			x = append(x, math.Float32frombits(specials[r.next()%uint64(len(specials))]))
		} else {
			x = append(x, float32(r.norm()*1e3))
		}
	}
	for _, k := range variants {
		restore := useVariant(k)
		lengths := []int{1000, 1100}
		for n := range 71 {
			lengths = append(lengths, n)
		}
		for _, n := range lengths {
			got, want := make([]uint16, n), make([]uint16, n)
			ToBF16(got, x[:n])
			toBF16Go(want, x[:n])
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s ToBF16 n=%d [%d] %#08x: %#04x, go %#04x", k.name, n, i, math.Float32bits(x[i]), got[i], want[i])
				}
			}
			back, wantBack := make([]float32, n), make([]float32, n)
			FromBF16(back, got)
			fromBF16Go(wantBack, got)
			for i := range back {
				if math.Float32bits(back[i]) != math.Float32bits(wantBack[i]) {
					t.Fatalf("%s FromBF16 n=%d [%d]: %g, go %g", k.name, n, i, back[i], wantBack[i])
				}
			}
		}
		restore()
	}
}

// TestClamp holds Clamp to MaximumScalar and then MinimumScalar, bit for
// bit, on every variant: lengths across a vector and a block, NaNs, both
// zeros and infinities in x and as bounds, a lower bound above the upper.
func TestClamp(t *testing.T) {
	negZero, inf := float32(math.Copysign(0, -1)), float32(math.Inf(1))
	specials := []float32{float32(math.NaN()), negZero, 0, inf, -inf, 1, -1}
	r := newRand(21)
	for _, k := range variants {
		defer useVariant(k)()
		for _, n := range []int{0, 1, 15, 16, 17, 70, 2047, 2048, 2049, 5000} {
			for _, b := range [][2]float32{{-1, 1}, {0, negZero}, {negZero, 0}, {1, -1}, {-inf, inf}, {0.5, 0.5}} {
				x := r.slice(n, 2)
				for i := range x {
					if r.next()%5 == 0 {
						x[i] = specials[r.next()%uint64(len(specials))]
					}
				}
				want := make([]float32, n)
				MaximumScalar(want, x, b[0])
				MinimumScalar(want, want, b[1])
				got := make([]float32, n)
				Clamp(got, x, b[0], b[1])
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: n=%d bounds %v: clamp(%v) = %v, want %v", k.name, n, b, x[i], got[i], want[i])
					}
				}
			}
		}
	}
}
