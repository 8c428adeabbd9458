package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// TestDivByScalarIsTrueDivision: a float32 tensor divided by a broadcast
// scalar (DDP's bucket.div_(world_size), x / 255) is a true division on
// every route, the small in-line loop, the vectorised one with its tails
// and the strided walk: each element is the correctly rounded quotient,
// never the product with a reciprocal (x/3 and x·(1/3) differ in about a
// third of the elements).
func TestDivByScalarIsTrueDivision(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 8, 9, 31, 33, 1000, grain + 5, 3*grain + 17} {
		for _, l := range []layout{contiguous, strided} {
			for _, s := range []float64{3, 2, -0.7, 255} {
				t.Run(fmt.Sprintf("n=%d/%v/s=%g", n, l, s), func(t *testing.T) {
					xs := randn(r, n, 10, dtype.Float32)
					x := newOperand(t, d, dtype.Float32, []int{n}, xs, l)
					sv := newOperand(t, d, dtype.Float32, []int{1}, []float64{s}, contiguous)
					sv.Shape, sv.Strides = []int{n}, []int{0}
					y := emptyOperand(t, d, dtype.Float32, []int{n}, l)
					if err := d.Binary(device.Div, y, x, sv); err != nil {
						t.Fatal(err)
					}
					got := values(t, d, y)
					for i, v := range xs {
						if want := float32(v) / float32(s); math.Float32bits(float32(got[i])) != math.Float32bits(want) {
							t.Fatalf("[%d] = %g / %g: got %g, want %g", i, v, s, got[i], want)
						}
					}
				})
			}
		}
	}
}

// specialValues are mixed into the random inputs of TestFastPathsMatchWalk:
// both zeros, infinities, NaN, subnormals and ties between operands.
var specialValues = []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 0x1p-149, 1, -1, 0.5, 1e7}

// TestFastPathsMatchWalk runs the float32 ops that have vector kernels on
// contiguous operands (the kernels, below and above the parallel grain)
// and on strided ones (the portable loops of the walk), and expects the
// same bits: the sign of a zero, NaN, ties of maximum and minimum, the
// rounding of rsqrt, comparisons and where on unpredictable masks, and max
// and min reductions over rows and over everything; sine and cosine, which
// both routes round correctly (the kernels were checked on every float32
// input).
func TestFastPathsMatchWalk(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(7, 8))
	input := func(n int) []float64 {
		x := randn(r, n, 3, dtype.Float32)
		for i := range x {
			if r.IntN(4) == 0 {
				x[i] = specialValues[r.IntN(len(specialValues))]
			}
		}
		return x
	}
	type run func(t *testing.T, l layout, shape []int, a, b []float64) device.View
	unary := func(op device.UnaryOp, s float64) run {
		return func(t *testing.T, l layout, shape []int, a, _ []float64) device.View {
			y := emptyOperand(t, d, dtype.Float32, shape, l)
			if err := d.Unary(op, y, newOperand(t, d, dtype.Float32, shape, a, l), s); err != nil {
				t.Fatal(err)
			}
			return y
		}
	}
	binary := func(op device.BinaryOp, scalarB bool) run {
		return func(t *testing.T, l layout, shape []int, a, b []float64) device.View {
			out := dtype.Float32
			if op.IsComparison() {
				out = dtype.Bool
			}
			y := emptyOperand(t, d, out, shape, l)
			bv := newOperand(t, d, dtype.Float32, shape, b, l)
			if scalarB {
				bv = newOperand(t, d, dtype.Float32, []int{1}, b[:1], contiguous)
				bv.Shape, bv.Strides = shape, make([]int, len(shape))
			}
			if err := d.Binary(op, y, newOperand(t, d, dtype.Float32, shape, a, l), bv); err != nil {
				t.Fatal(err)
			}
			return y
		}
	}
	where := func(t *testing.T, l layout, shape []int, a, b []float64) device.View {
		c := make([]float64, len(a))
		for i := range c {
			c[i] = float64(r.IntN(2))
		}
		y := emptyOperand(t, d, dtype.Float32, shape, l)
		err := d.Where(y, newOperand(t, d, dtype.Bool, shape, c, l), newOperand(t, d, dtype.Float32, shape, a, l),
			newOperand(t, d, dtype.Float32, shape, b, l))
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	reduce := func(op device.ReduceOp, all bool) run {
		return func(t *testing.T, l layout, shape []int, a, _ []float64) device.View {
			keep := []int{shape[0], 1}
			if all {
				keep = []int{1, 1}
			}
			y := emptyOperand(t, d, dtype.Float32, keep, contiguous)
			if err := d.Reduce(op, y, newOperand(t, d, dtype.Float32, shape, a, l)); err != nil {
				t.Fatal(err)
			}
			return y
		}
	}
	ops := map[string]run{
		"neg": unary(device.Neg, 0), "abs": unary(device.Abs, 0), "square": unary(device.Square, 0),
		"pow2": unary(device.PowScalar, 2), "pow3": unary(device.PowScalar, 3), "pow-2": unary(device.PowScalar, -2),
		"pow0.5": unary(device.PowScalar, 0.5), "pow-0.5": unary(device.PowScalar, -0.5), "pow-1": unary(device.PowScalar, -1),
		"sqrt": unary(device.Sqrt, 0), "rsqrt": unary(device.Rsqrt, 0),
		"reciprocal": unary(device.Reciprocal, 0), "sign": unary(device.Sign, 0),
		"sin": unary(device.Sin, 0), "cos": unary(device.Cos, 0), // correctly rounded on both routes
		"maximum": binary(device.Maximum, false), "minimum": binary(device.Minimum, false),
		"maximum scalar": binary(device.Maximum, true), "minimum scalar": binary(device.Minimum, true),
		"gt": binary(device.Gt, false), "le": binary(device.Le, false), "eq": binary(device.Eq, false),
		"ne scalar": binary(device.Ne, true), "ge scalar": binary(device.Ge, true), "lt scalar": binary(device.Lt, true),
		"where":    where,
		"max rows": reduce(device.Max, false), "min rows": reduce(device.Min, false),
		"max all": reduce(device.Max, true), "min all": reduce(device.Min, true),
	}
	for name, f := range ops {
		for _, shape := range [][]int{{3, 7}, {5, 33}, {4, grain/4 + 9}, {1, 3*grain + 5}} {
			n := shape[0] * shape[1]
			a, b := input(n), input(n)
			for i := 0; i < n; i += 5 {
				b[i] = a[i] // ties
			}
			t.Run(fmt.Sprintf("%s/%v", name, shape), func(t *testing.T) {
				seed := r.Uint64()
				r = rand.New(rand.NewPCG(seed, 1)) // where's mask: the same for both layouts
				fast := rawBits(t, d, contiguousCopy(t, d, f(t, contiguous, shape, a, b)))
				r = rand.New(rand.NewPCG(seed, 1))
				walk := rawBits(t, d, contiguousCopy(t, d, f(t, strided, shape, a, b)))
				for i := range fast {
					if fast[i] != walk[i] {
						t.Fatalf("byte %d: contiguous %#x, strided %#x", i, fast[i], walk[i])
					}
				}
			})
		}
	}
}

// contiguousCopy returns v, copied into a contiguous view when it is not.
func contiguousCopy(t *testing.T, d *Device, v device.View) device.View {
	t.Helper()
	if v.Contiguous() {
		return v
	}
	c := emptyOperand(t, d, v.DType, v.Shape, contiguous)
	if err := d.Copy(c, v); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestUnaryBroadcastSource: a unary op whose input is one value broadcast
// along the run (the gradient of a sum, expanded) computes it once and
// fills the run; every element must be what the op gives on that value
// alone, on the vector route and the portable one, below and above the
// parallel grain.
func TestUnaryBroadcastSource(t *testing.T) {
	d := New(Options{})
	ops := []struct {
		op device.UnaryOp
		s  float64
	}{
		{device.Neg, 0}, {device.Exp, 0}, {device.Log, 0}, {device.Rsqrt, 0}, {device.Sigmoid, 0},
		{device.Gelu, 0}, {device.MulScalar, -1.5}, {device.PowScalar, 2}, {device.PowScalar, 1.7},
		{device.Sin, 0}, {device.Relu, 0}, {device.Sign, 0},
	}
	for _, c := range ops {
		for _, v := range []float64{0.37, -2.5, math.Copysign(0, -1)} {
			one := newOperand(t, d, dtype.Float32, []int{1}, []float64{v}, contiguous)
			want := emptyOperand(t, d, dtype.Float32, []int{1}, contiguous)
			if err := d.Unary(c.op, want, one, c.s); err != nil {
				t.Fatal(err)
			}
			w := math.Float32bits(float32(values(t, d, want)[0]))
			for _, n := range []int{5, grain + 7} {
				for _, l := range []layout{contiguous, strided} {
					src := one
					src.Shape, src.Strides = []int{n}, []int{0}
					dst := emptyOperand(t, d, dtype.Float32, []int{n}, l)
					if err := d.Unary(c.op, dst, src, c.s); err != nil {
						t.Fatal(err)
					}
					for i, g := range values(t, d, dst) {
						if math.Float32bits(float32(g)) != w {
							t.Fatalf("%v(%g) s=%g n=%d %v: [%d] = %g, alone %g", c.op, v, c.s, n, l, i, g, math.Float32frombits(w))
						}
					}
				}
			}
		}
	}
}

// TestBroadcastOperands: a binary op or a where whose operand is one value
// broadcast along the run (a gradient expanded from a sum) takes the
// vector kernels and the branch-free select on a contiguous output; each
// must give the bits of the portable loops a strided output takes.
func TestBroadcastOperands(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(13, 14))
	for _, shape := range [][]int{{2, 3}, {4, 150}, {2, grain/2 + 9}} {
		n := shape[0] * shape[1]
		b := randn(r, n, 3, dtype.Float32)
		cond := make([]float64, n)
		for i := range b {
			if r.IntN(5) == 0 {
				b[i] = specialValues[r.IntN(len(specialValues))]
			}
			cond[i] = float64(r.IntN(2))
		}
		for _, av := range []float64{-1.25, 0, math.NaN()} {
			scalar := newOperand(t, d, dtype.Float32, []int{1}, []float64{av}, contiguous)
			scalar.Shape, scalar.Strides = shape, []int{0, 0}
			run := func(l layout, f func(dst device.View) error) []byte {
				dst := emptyOperand(t, d, dtype.Float32, shape, l)
				if err := f(dst); err != nil {
					t.Fatal(err)
				}
				return rawBits(t, d, contiguousCopy(t, d, dst))
			}
			for _, op := range []device.BinaryOp{device.Add, device.Sub, device.Mul, device.Div, device.Maximum, device.Minimum} {
				f := func(l layout) []byte {
					bv := newOperand(t, d, dtype.Float32, shape, b, l)
					return run(l, func(dst device.View) error { return d.Binary(op, dst, scalar, bv) })
				}
				if got, want := f(contiguous), f(strided); !bytes.Equal(got, want) {
					t.Errorf("%v(broadcast %g, rows) %v: the contiguous route differs from the strided one", op, av, shape)
				}
			}
			// ReLU's backward is exact on both routes (the others' vector
			// kernels and float64 loops round differently, within their
			// tolerances).
			for _, op := range []device.ActivationOp{device.ReluBackward} {
				f := func(l layout) []byte {
					saved := newOperand(t, d, dtype.Float32, shape, b, l)
					return run(l, func(dst device.View) error { return d.ActivationBackward(op, dst, scalar, saved) })
				}
				if got, want := f(contiguous), f(strided); !bytes.Equal(got, want) {
					t.Errorf("%v(broadcast gradient %g) %v: the contiguous route differs from the strided one", op, av, shape)
				}
			}
			for _, scalarFirst := range []bool{true, false} {
				f := func(l layout) []byte {
					bv := newOperand(t, d, dtype.Float32, shape, b, l)
					cv := newOperand(t, d, dtype.Bool, shape, cond, l)
					x, y := scalar, bv
					if !scalarFirst {
						x, y = bv, scalar
					}
					return run(l, func(dst device.View) error { return d.Where(dst, cv, x, y) })
				}
				if got, want := f(contiguous), f(strided); !bytes.Equal(got, want) {
					t.Errorf("where with broadcast %g first=%v %v: the contiguous route differs from the strided one", av, scalarFirst, shape)
				}
			}
		}
	}
}

// TestPowTrivialExponents: pow with an exponent of 0 is ones and of 1 the
// base, bit for bit as math.Pow gives them (NaN and infinities included),
// for float32 and float64, contiguous and strided.
func TestPowTrivialExponents(t *testing.T) {
	d := New(Options{})
	x := append([]float64{3.25, -7, 0x1p-140}, specialValues...)
	shape := []int{1, len(x)}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
		for _, l := range []layout{contiguous, strided} {
			for _, s := range []float64{0, math.Copysign(0, -1), 1} {
				y := emptyOperand(t, d, dt, shape, l)
				if err := d.Unary(device.PowScalar, y, newOperand(t, d, dt, shape, x, l), s); err != nil {
					t.Fatal(err)
				}
				got := values(t, d, y)
				for i, v := range x {
					want := roundTo(dt, math.Pow(v, s))
					if math.Float64bits(got[i]) != math.Float64bits(want) && !(math.IsNaN(got[i]) && math.IsNaN(want)) {
						t.Errorf("%v %v: pow(%g, %g) = %g, want %g", dt, l, v, s, got[i], want)
					}
				}
			}
		}
	}
}
