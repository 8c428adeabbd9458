package vmath

import (
	"flag"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var exhaustive = flag.String("vmath.exhaustive", "", "check every float32 input of these functions (comma-separated names, or all) for the assembly variants and print the max error; minutes per function")

// ulp32 is the spacing of float32 values at |r| (the subnormal spacing below
// the normal range).
func ulp32(r float64) float64 {
	a := math.Abs(r)
	if a < 0x1p-126 {
		return 0x1p-149
	}
	_, e := math.Frexp(a) // a = f·2^e, f in [0.5, 1)
	return math.Ldexp(1, e-24)
}

// ulpErr is |got - ref| in float32 ulps of the exact (float64) result ref:
// 0.5 is the error of the correctly rounded result. Special values must
// match exactly (NaN for NaN; the same infinity, or the overflow of ref).
func ulpErr(got float32, ref float64) float64 {
	g := float64(got)
	switch {
	case math.IsNaN(ref):
		if math.IsNaN(g) {
			return 0
		}
		return math.Inf(1)
	case math.IsNaN(g):
		return math.Inf(1)
	}
	r32 := float32(ref)
	if math.IsInf(float64(r32), 0) || math.IsInf(g, 0) {
		if got == r32 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Abs(g-ref) / ulp32(ref)
}

type unaryCase struct {
	name string
	get  func(k *kernels) func(dst, x []float32)
	ref  func(x float64) float64
	// Bounds for the Go loops and for the assembly. For the
	// transcendentals (cond false) the bound is on the distance in ulps to
	// the correctly rounded result, the measure the package promises.
	// For the activations (cond true) it is on |got - exact| in ulps of the
	// exact result divided by 1+κ(x), κ = |x·f'/f| the condition number of
	// f: they are evaluated in float32 from float32 intermediates
	// (u = β(x+κx³) for GELU-tanh, e^-x for SiLU, which may be subnormal),
	// so their error is a few ulps of the input propagated through f —
	// backward stable, and as accurate as the function's conditioning
	// allows. The plain ulp error for |x| <= 3 is logged too.
	goMax, asmMax float64
	cond          bool
}

// condNum is |x·f'(x)/f(x)| by a central difference in float64.
func condNum(f func(float64) float64, x float64) float64 {
	h := 1e-6 * math.Max(1, math.Abs(x))
	y := f(x)
	if y == 0 || math.IsInf(y, 0) || math.IsNaN(y) {
		return 0
	}
	c := math.Abs(x * (f(x+h) - f(x-h)) / (2 * h) / y)
	if math.IsNaN(c) || math.IsInf(c, 0) {
		return 0
	}
	return c
}

// ulpDist is the number of float32 values between got and the correctly
// rounded ref (0 when equal; +Inf for a NaN mismatch).
func ulpDist(got float32, ref float64) float64 {
	r := float32(ref)
	if math.IsNaN(ref) || math.IsNaN(float64(got)) {
		if math.IsNaN(ref) && math.IsNaN(float64(got)) {
			return 0
		}
		return math.Inf(1)
	}
	ord := func(f float32) int64 {
		b := int64(math.Float32bits(f))
		if b&(1<<31) != 0 {
			return -(b &^ (1 << 31))
		}
		return b
	}
	d := ord(got) - ord(r)
	if d < 0 {
		d = -d
	}
	return float64(d)
}

// refGeluTanh is PyTorch's literal float64 formula where 1+tanh does not
// cancel, and the sigmoid form elsewhere.
func refGeluTanh(x float64) float64 {
	u := kBeta * (x + kKappa*x*x*x)
	if x > -3 {
		return 0.5 * x * (1 + math.Tanh(u))
	}
	return x / (1 + math.Exp(-2*u))
}

func refGelu(x float64) float64 {
	if x > -2 {
		return 0.5 * x * (1 + math.Erf(x*kSqrt1_2))
	}
	return 0.5 * x * math.Erfc(-x*kSqrt1_2)
}

func refSilu(x float64) float64 { return x / (1 + math.Exp(-x)) }

var unaryCases = []unaryCase{
	{name: "Exp", get: func(k *kernels) func(dst, x []float32) { return k.exp }, ref: math.Exp, goMax: 1, asmMax: 2},
	{name: "Log", get: func(k *kernels) func(dst, x []float32) { return k.log }, ref: math.Log, goMax: 1, asmMax: 1},
	{name: "Sin", get: func(k *kernels) func(dst, x []float32) { return func(d, x []float32) { trig(d, x, k.sin, math.Sin) } }, ref: math.Sin, goMax: 1, asmMax: 1},
	{name: "Cos", get: func(k *kernels) func(dst, x []float32) { return func(d, x []float32) { trig(d, x, k.cos, math.Cos) } }, ref: math.Cos, goMax: 1, asmMax: 1},
	{name: "Tanh", get: func(k *kernels) func(dst, x []float32) { return k.tanh }, ref: math.Tanh, goMax: 1, asmMax: 2},
	{name: "Sigmoid", get: func(k *kernels) func(dst, x []float32) { return k.sigmoid }, ref: func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }, goMax: 1, asmMax: 2},
	{name: "Erf", get: func(k *kernels) func(dst, x []float32) { return k.erf }, ref: math.Erf, goMax: 1, asmMax: 2},
	{name: "Gelu", get: func(k *kernels) func(dst, x []float32) { return k.gelu }, ref: refGelu, goMax: 0.501, asmMax: 4, cond: true},
	{name: "GeluTanh", get: func(k *kernels) func(dst, x []float32) { return k.geluTanh }, ref: refGeluTanh, goMax: 0.501, asmMax: 4, cond: true},
	{name: "Silu", get: func(k *kernels) func(dst, x []float32) { return k.silu }, ref: refSilu, goMax: 0.501, asmMax: 4, cond: true},
}

// caseRef holds a case's reference values (and condition numbers) for a
// set of inputs, computed once for all variants.
type caseRef struct{ ref, cond []float64 }

func (c *unaryCase) refs(in []float32) caseRef {
	r := caseRef{ref: make([]float64, len(in))}
	if c.cond {
		r.cond = make([]float64, len(in))
	}
	for i, x := range in {
		r.ref[i] = c.ref(float64(x))
		if c.cond {
			r.cond[i] = condNum(c.ref, float64(x))
		}
	}
	return r
}

// errAt is the case's error measure at input i and the plain ulp error.
func (c *unaryCase) errAt(r caseRef, i int, got float32) (e, plain float64) {
	plain = ulpErr(got, r.ref[i])
	if !c.cond {
		return ulpDist(got, r.ref[i]), plain
	}
	return plain / (1 + r.cond[i]), plain
}

// sweepInputs returns the special values, a dense uniform sweep of the
// range where the functions vary, and a strided walk through all float32
// bit patterns (every exponent and both signs).
func sweepInputs() []float32 {
	in := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 0x1p-126, -0x1p-126, math.MaxFloat32, -math.MaxFloat32,
		88.72283, 88.72284, 88.7, -87.33655, -103.27893, -103.97208, -104, 89, 9.010913, -9.010913, 0.625, -0.625, 0.5, -0.5, 1, -1}
	// Under -short (make test) a quarter of the points: the full sweep
	// runs in make test-all.
	step := 1
	if testing.Short() {
		step = 4
	}
	for i := 0; i <= 2_000_000; i += step {
		in = append(in, float32(-110+210*float64(i)/2_000_000))
	}
	for i := 0; i <= 200_000; i += step {
		in = append(in, float32(-4+8*float64(i)/200_000))
	}
	for b := uint64(0); b < 1<<32; b += 2039 * uint64(step) {
		in = append(in, math.Float32frombits(uint32(b)))
	}
	return in
}

var sweepOnce = sync.OnceValue(sweepInputs)

func kindOf(k *kernels) string {
	if k == &goKernels {
		return "go"
	}
	return "asm"
}

func TestUnaryAccuracy(t *testing.T) {
	in := sweepOnce()
	out := make([]float32, len(in))
	for i := range unaryCases {
		c := &unaryCases[i]
		r := c.refs(in)
		for _, k := range variants {
			bound := c.asmMax
			if k == &goKernels {
				bound = c.goMax
			}
			c.get(k)(out, in)
			var worst, plain, central float64
			wi := 0
			for j, x := range in {
				e, p := c.errAt(r, j, out[j])
				if e > worst {
					worst, wi = e, j
				}
				plain = math.Max(plain, p)
				if math.Abs(float64(x)) <= 3 {
					central = math.Max(central, p)
				}
			}
			t.Logf("%-8s %-6s max %.3f (bound %.3g) at x=%g; |got-exact| max %.3f ulp, for |x|<=3 %.3f ulp", c.name, k.name, worst, bound, in[wi], plain, central)
			if worst > bound {
				t.Errorf("%s %s: error %.3f > %.3f at x=%g (%#08x): got %g, want %g", c.name, k.name, worst, bound, in[wi], math.Float32bits(in[wi]), out[wi], r.ref[wi])
			}
		}
	}
}

func indexOf(s []float32, v float32) int {
	for i, x := range s {
		if math.Float32bits(x) == math.Float32bits(v) {
			return i
		}
	}
	return 0
}

// TestExhaustive checks every float32 input and prints the table written
// into the doc comments and docs/benchmarks-vmath.md.
func TestExhaustive(t *testing.T) {
	if *exhaustive == "" {
		t.Skip("-vmath.exhaustive not set")
	}
	var cases []unaryCase
	for _, c := range unaryCases {
		if *exhaustive == "all" || strings.Contains(","+*exhaustive+",", ","+c.name+",") {
			cases = append(cases, c)
		}
	}
	// The Go loops round the math package's float64 result once; the
	// sweep in TestUnaryAccuracy covers them.
	var vars []*kernels
	for _, k := range variants {
		if k != &goKernels {
			vars = append(vars, k)
		}
	}
	type res struct {
		worst, plain, central float64
		x                     float32
	}
	results := make([][]res, len(cases))
	for i := range results {
		results[i] = make([]res, len(vars))
	}
	const chunk = 1 << 20
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan uint64)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := make([]float32, chunk)
			out := make([]float32, chunk)
			for base := range next {
				for j := range in {
					in[j] = math.Float32frombits(uint32(base + uint64(j)))
				}
				for ci := range cases {
					c := &cases[ci]
					r := c.refs(in)
					for vi, k := range vars {
						c.get(k)(out, in)
						var w res
						for j, x := range in {
							e, p := c.errAt(r, j, out[j])
							if e > w.worst {
								w.worst, w.x = e, x
							}
							w.plain = math.Max(w.plain, p)
							if math.Abs(float64(x)) <= 3 {
								w.central = math.Max(w.central, p)
							}
						}
						mu.Lock()
						cur := &results[ci][vi]
						if w.worst > cur.worst {
							cur.worst, cur.x = w.worst, w.x
						}
						cur.plain = math.Max(cur.plain, w.plain)
						cur.central = math.Max(cur.central, w.central)
						mu.Unlock()
					}
				}
			}
		}()
	}
	for b := uint64(0); b < 1<<32; b += chunk {
		if b%(1<<28) == 0 {
			t.Logf("at %#x", b)
		}
		next <- b
	}
	close(next)
	wg.Wait()
	for ci, c := range cases {
		for vi, k := range vars {
			r := results[ci][vi]
			fmt.Printf("exhaustive %-8s %-6s max %.3f at x=%g; |got-exact| max %.3f ulp, |x|<=3 %.3f ulp\n", c.name, k.name, r.worst, r.x, r.plain, r.central)
			if bound := c.asmMax; r.worst > bound {
				t.Errorf("%s %s: %.3f exceeds %.3f", c.name, k.name, r.worst, bound)
			}
		}
	}
}

// Derivative kernels: dx = dy·f'(x). The reference derivative is checked
// against a central finite difference of the float64 forward function
// (TestDerivativeFormulas), so the Go loops are not graded by themselves.
type backCase struct {
	name  string
	get   func(k *kernels) func(dx, dy, x []float32)
	deriv func(x float64) float64
	fwd   func(x float64) float64
	// mag is the sum of the magnitudes of the terms of f' (f' itself
	// crosses zero, where no float32 evaluation keeps relative accuracy).
	mag func(x float64) float64
	// Bound on |got - exact| in ulps of |dy|·mag(x), divided by 1+κ(x)
	// with κ the condition number of mag (see unaryCase.cond); the Go
	// loops round f' once and multiply once (<= 1.5 ulps of |dy|·mag).
	goMax, asmMax float64
}

func geluMag(x float64) float64 {
	return 0.5*math.Erfc(-x*kSqrt1_2) + math.Abs(x)*kInvSqrt2P*math.Exp(-0.5*x*x)
}

func geluTanhMag(x float64) float64 {
	u := kBeta * (x + kKappa*x*x*x)
	e := math.Exp(-2 * u)
	return 1/(1+e) + math.Abs(2*x/(2+e+1/e)*kBeta*(1+3*kKappa*x*x))
}

func siluMag(x float64) float64 {
	s := 1 / (1 + math.Exp(-x))
	return s * (1 + math.Abs(x)*(1-s))
}

var backCases = []backCase{
	{"GeluBackward", func(k *kernels) func(dx, dy, x []float32) { return k.geluBackward }, geluDeriv64, refGelu, geluMag, 1.5, 4},
	{"GeluTanhBackward", func(k *kernels) func(dx, dy, x []float32) { return k.geluTanhBackward }, geluTanhDeriv64, refGeluTanh, geluTanhMag, 1.5, 4},
	{"SiluBackward", func(k *kernels) func(dx, dy, x []float32) { return k.siluBackward }, siluDeriv64, refSilu, siluMag, 1.5, 4},
}

func TestDerivativeFormulas(t *testing.T) {
	for _, c := range backCases {
		for x := -8.0; x <= 8; x += 0.01 {
			h := 1e-5
			fd := (c.fwd(x+h) - c.fwd(x-h)) / (2 * h)
			if d := c.deriv(x); math.Abs(d-fd) > 1e-8*math.Max(1, math.Abs(d)) {
				t.Errorf("%s: f'(%g) = %g, finite difference %g", c.name, x, d, fd)
			}
		}
	}
}

func TestBackwardAccuracy(t *testing.T) {
	var x []float32
	for i := 0; i <= 400_000; i++ {
		x = append(x, float32(-10+20*float64(i)/400_000))
	}
	x = append(x, 0, -0.0, 1e-30, -1e-30)
	dy := make([]float32, len(x))
	r := newRand(7)
	for i := range dy {
		dy[i] = float32(r.norm())
	}
	dx := make([]float32, len(x))
	for _, k := range variants {
		for _, c := range backCases {
			c.get(k)(dx, dy, x)
			bound := c.asmMax
			if k == &goKernels {
				bound = c.goMax
			}
			worst, central, wi := 0.0, 0.0, 0
			for i := range x {
				xi := float64(x[i])
				ref := float64(dy[i]) * c.deriv(xi)
				scale := ulp32(math.Abs(float64(dy[i])) * c.mag(xi))
				if math.Abs(ref) < 0x1p-100 {
					if math.Abs(float64(dx[i])-ref) > 0x1p-110 {
						t.Errorf("%s %s: x=%g got %g want %g", c.name, k.name, x[i], dx[i], ref)
					}
					continue
				}
				raw := math.Abs(float64(dx[i])-ref) / scale
				if math.Abs(xi) <= 3 {
					central = math.Max(central, raw)
				}
				if e := raw / (1 + condNum(c.mag, xi)); e > worst {
					worst, wi = e, i
				}
			}
			t.Logf("%-16s %-6s max %.3f (ulps of |dy|·mag, cond-scaled) at x=%g; |x|<=3: %.3f", c.name, k.name, worst, x[wi], central)
			if worst > bound {
				t.Errorf("%s %s: %.3f ulp > %.3f at x=%g dy=%g: got %g want %g", c.name, k.name, worst, bound, x[wi], dy[wi], dx[wi], float64(dy[wi])*c.deriv(float64(x[wi])))
			}
		}
	}
}

// Special inputs of the derivative kernels must agree with the float64
// formulas (NaN where PyTorch's formula gives NaN, 0 in the far tails).
func TestBackwardSpecial(t *testing.T) {
	x := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 100, -100, 1e20, -1e20, 0}
	dy := []float32{1, 1, 1, 1, 1, 1, 1, 1}
	dx := make([]float32, len(x))
	for _, k := range variants {
		for _, c := range backCases {
			c.get(k)(dx, dy, x)
			for i := range x {
				want := float32(c.deriv(float64(x[i])))
				if !(dx[i] == want || math.IsNaN(float64(dx[i])) && math.IsNaN(float64(want)) || math.Abs(float64(dx[i]-want)) < 1e-30) {
					t.Errorf("%s %s: f'(%g) = %g, want %g", c.name, k.name, x[i], dx[i], want)
				}
			}
		}
	}
}

// rng is a small deterministic generator (the tests must not depend on the
// global source's sequence).
type rng struct{ s uint64 }

func newRand(seed uint64) *rng { return &rng{seed*0x9e3779b97f4a7c15 + 1} }

func (r *rng) next() uint64 {
	r.s ^= r.s << 13
	r.s ^= r.s >> 7
	r.s ^= r.s << 17
	return r.s
}

func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

func (r *rng) norm() float64 {
	u := r.float()
	for u == 0 {
		u = r.float()
	}
	return math.Sqrt(-2*math.Log(u)) * math.Cos(2*math.Pi*r.float())
}

func (r *rng) slice(n int, scale float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.norm() * scale)
	}
	return s
}
