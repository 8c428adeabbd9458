package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// shape is one product of the test table. pad is added to every leading
// dimension beyond the minimum.
type shape struct{ m, n, k, pad int }

var shapes = []shape{
	{1, 1, 1, 0},
	{2, 3, 4, 0},
	{17, 33, 9, 0},
	{17, 33, 9, 3},
	{12, 32, 1, 0},  // exactly one AVX-512 tile, depth 1
	{13, 33, 5, 0},  // one row and one column past a tile
	{6, 16, 7, 0},   // exactly one AVX2 tile
	{24, 64, 24, 5}, // whole tiles with padded strides
	{64, 64, 64, 0}, // above the direct path, whole tiles
	{1, 1024, 1024, 0},
	{1024, 1, 1024, 0},
	{129, 257, 65, 0},
	{129, 257, 65, 7},
	{50, 40, 1000, 1}, // several K blocks
	{40, 1100, 30, 0}, // several macro-tile columns
	{7, 9, 0, 0},      // k == 0: C = beta·C
	{0, 9, 5, 0},
	{9, 0, 5, 0},
	{0, 0, 0, 0},
}

// coeffs are the (alpha, beta) pairs every shape is run with; beta == 0
// runs start from a C full of NaN.
var coeffs = [][2]float64{{1, 0}, {0.5, 1}, {1, -2}, {0, -2}, {0, 0}, {0.5, 0}, {-1.5, 1}}

// problem is one product with float64 operands, from which the float32
// inputs are rounded.
type problem struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float64
	lda, ldb, ldc  int
	a, b, c        []float64
}

func newProblem(rng *rand.Rand, s shape, transA, transB bool, alpha, beta float64) *problem {
	p := &problem{transA: transA, transB: transB, m: s.m, n: s.n, k: s.k, alpha: alpha, beta: beta}
	ar, ac := s.m, s.k
	if transA {
		ar, ac = s.k, s.m
	}
	br, bc := s.k, s.n
	if transB {
		br, bc = s.n, s.k
	}
	p.lda, p.ldb, p.ldc = max(1, ac)+s.pad, max(1, bc)+s.pad, max(1, s.n)+s.pad
	p.a = randMatrix(rng, ar, ac, p.lda, 0)
	p.b = randMatrix(rng, br, bc, p.ldb, 0)
	fill := 0.0
	if beta == 0 {
		fill = math.NaN() // must be overwritten, not scaled
	}
	p.c = randMatrix(rng, s.m, s.n, p.ldc, fill)
	return p
}

// randMatrix returns a rows×cols matrix with stride ld in a slice exactly
// as long as it needs, values in [-1, 1) that are exact in float32. Fill,
// when not zero, goes into the elements themselves (NaN for beta == 0);
// the padding between rows always holds a marker that must survive.
func randMatrix(rng *rand.Rand, rows, cols, ld int, fill float64) []float64 {
	if rows == 0 || cols == 0 {
		return nil
	}
	x := make([]float64, (rows-1)*ld+cols)
	for i := range x {
		x[i] = padMarker
	}
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			if fill != 0 {
				x[i*ld+j] = fill
			} else {
				x[i*ld+j] = float64(float32(rng.Float64()*2 - 1))
			}
		}
	}
	return x
}

const padMarker = 12345

// reference computes the product in float64 and, for each element, the
// scale against which its error is measured: |alpha|·Σ|a·b| + |beta·c|.
func (p *problem) reference() (want, scale []float64) {
	want = append([]float64(nil), p.c...)
	scale = make([]float64, len(p.c))
	for i := 0; i < p.m; i++ {
		for j := 0; j < p.n; j++ {
			var s, abs float64
			if p.alpha != 0 {
				for q := 0; q < p.k; q++ {
					ai, bi := i*p.lda+q, q*p.ldb+j
					if p.transA {
						ai = q*p.lda + i
					}
					if p.transB {
						bi = j*p.ldb + q
					}
					av, bv := p.a[ai], p.b[bi]
					s += av * bv
					abs += math.Abs(av * bv)
				}
			}
			ci := i*p.ldc + j
			v := p.alpha * s
			sc := math.Abs(p.alpha) * abs
			if p.beta != 0 {
				v += p.beta * p.c[ci]
				sc += math.Abs(p.beta * p.c[ci])
			}
			want[ci], scale[ci] = v, sc
		}
	}
	return want, scale
}

func (p *problem) String() string {
	return fmt.Sprintf("%dx%dx%d transA=%v transB=%v lda=%d ldb=%d ldc=%d alpha=%g beta=%g",
		p.m, p.n, p.k, p.transA, p.transB, p.lda, p.ldb, p.ldc, p.alpha, p.beta)
}

// check compares got (C after the product) with the reference: elements
// within tol·sqrt(k) of the scale, padding untouched.
func (p *problem) check(t *testing.T, got []float64, tol float64) {
	t.Helper()
	want, scale := p.reference()
	bound := tol * math.Sqrt(float64(max(p.k, 1)))
	bad := 0
	for i := 0; i < p.m; i++ {
		for j := 0; j < p.ldc && i*p.ldc+j < len(got); j++ {
			ci := i*p.ldc + j
			if j >= p.n {
				if got[ci] != padMarker {
					t.Errorf("%v: padding C[%d,%d] = %g was written", p, i, j, got[ci])
					return
				}
				continue
			}
			err := math.Abs(got[ci] - want[ci])
			if !(err <= bound*scale[ci]+1e-30) { // also catches NaN
				if bad < 5 {
					t.Errorf("%v: C[%d,%d] = %g, want %g (error %.3g > %.3g)", p, i, j, got[ci], want[ci], err, bound*scale[ci])
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%v: %d of %d elements wrong", p, bad, p.m*p.n)
	}
}

func to32(x []float64) []float32 {
	y := exact32(len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// forEachKernel runs f once with each kernel this machine supports
// selected, on 1 and 3 threads (3 exercises uneven splits of the pool).
func forEachKernel(t *testing.T, f func(t *testing.T)) {
	threadCounts := []int{1, 3}
	if raceEnabled {
		threadCounts = []int{3} // the race detector looks at the parallel runs
	}
	for _, name := range kernelNames() {
		for _, threads := range threadCounts {
			t.Run(fmt.Sprintf("%s/threads=%d", name, threads), func(t *testing.T) {
				restore, err := useKernel(name)
				if err != nil {
					t.Fatal(err)
				}
				defer restore()
				parallel.SetThreads(threads)
				defer parallel.SetThreads(0)
				defer freeGuarded()
				f(t)
			})
		}
	}
}

// cases enumerates the table: every shape, transpose and coefficient pair.
func cases(f func(s shape, transA, transB bool, alpha, beta float64)) {
	for _, s := range shapes {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, ab := range coeffsFor(s.m * s.n * s.k) {
				f(s, tr[0], tr[1], ab[0], ab[1])
			}
		}
	}
}

// coeffsFor is the coefficient pairs a product of work m·n·k runs with:
// large products take fewer, to keep the race build quick.
func coeffsFor(work int) [][2]float64 {
	if work <= 100000 {
		return coeffs
	}
	if raceEnabled {
		return [][2]float64{{-1.5, 1}}
	}
	return [][2]float64{{1, 0}, {-1.5, 1}}
}

func TestSgemm(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		cases(func(s shape, transA, transB bool, alpha, beta float64) {
			p := newProblem(rng, s, transA, transB, alpha, beta)
			c := to32(p.c)
			Sgemm(transA, transB, p.m, p.n, p.k, float32(alpha), to32(p.a), p.lda, to32(p.b), p.ldb, float32(beta), c, p.ldc)
			p.check(t, to64(c), 1e-6)
		})
	})
}

func TestDgemm(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		cases(func(s shape, transA, transB bool, alpha, beta float64) {
			p := newProblem(rng, s, transA, transB, alpha, beta)
			c := exact64(len(p.c))
			copy(c, p.c)
			a, b := exact64(len(p.a)), exact64(len(p.b))
			copy(a, p.a)
			copy(b, p.b)
			Dgemm(transA, transB, p.m, p.n, p.k, alpha, a, p.lda, b, p.ldb, beta, c, p.ldc)
			p.check(t, c, 1e-15)
		})
	})
}

// TestAlphaZeroIgnoresAB checks that alpha == 0 does not read A and B, as
// in the reference BLAS: NaN there must not reach C.
func TestAlphaZeroIgnoresAB(t *testing.T) {
	nan := float32(math.NaN())
	for _, s := range []shape{{3, 4, 5, 0}, {100, 100, 100, 0}} {
		a := make([]float32, s.m*s.k)
		b := make([]float32, s.k*s.n)
		for i := range a {
			a[i] = nan
		}
		for i := range b {
			b[i] = nan
		}
		c := make([]float32, s.m*s.n)
		for i := range c {
			c[i] = 2
		}
		Sgemm(false, false, s.m, s.n, s.k, 0, a, s.k, b, s.n, 0.5, c, s.n)
		for i, v := range c {
			if v != 1 {
				t.Fatalf("%v: c[%d] = %g, want 1", s, i, v)
			}
		}
	}
}

// TestKernels checks each micro-kernel directly against the Go kernel's
// contract: depths around the unrolling (0–9), alpha and beta, and beta
// == 0 over NaN, with C rows further apart than the tile is wide.
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kern := range kernels32.all {
		for _, k := range []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 33} {
			mr := kern.mr
			a := smallInts(rng, max(1, k*mr))
			checkTile(t, rng, fmt.Sprintf("%s k=%d", kern.name, k), mr, kern.nr, k,
				func(r, p int) float32 { return a[p*mr+r] },
				func(b, c []float32, ldc int, alpha, beta float32) { kern.fn(k, &a[0], &b[0], &c[0], ldc, alpha, beta) })
		}
	}
}

// smallInts returns n random integers in [-4, 4] as float32: products and
// sums of them are exact on every path.
func smallInts(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.IntN(9) - 4)
	}
	return x
}

// checkTile runs a micro-kernel that computes an mr×nr tile of depth k,
// A's element (r, p) given by a, against the definition
// C = alpha·A·B + beta·C on small integers, for three (alpha, beta) pairs,
// B packed k×nr, C's rows further apart than the tile is wide and NaN
// where beta is 0 (which must not be read). run calls the kernel.
func checkTile(t *testing.T, rng *rand.Rand, name string, mr, nr, k int, a func(r, p int) float32,
	run func(b, c []float32, ldc int, alpha, beta float32)) {
	t.Helper()
	for _, ab := range [][2]float32{{1, 0}, {0.5, -2}, {-1, 1}} {
		alpha, beta := ab[0], ab[1]
		ldc := nr + 3
		b := smallInts(rng, max(1, k*nr))
		c := smallInts(rng, (mr-1)*ldc+nr)
		if beta == 0 {
			for i := range c {
				c[i] = float32(math.NaN())
			}
		}
		want := append([]float32(nil), c...)
		for r := range mr {
			for x := range nr {
				var s float32
				for p := range k {
					s += a(r, p) * b[p*nr+x]
				}
				v := alpha * s
				if beta != 0 {
					v += beta * want[r*ldc+x]
				}
				want[r*ldc+x] = v
			}
		}
		run(b, c, ldc, alpha, beta)
		for i := range c {
			if c[i] != want[i] && !(math.IsNaN(float64(c[i])) && math.IsNaN(float64(want[i]))) {
				t.Fatalf("%s alpha=%g beta=%g: c[%d] = %g, want %g", name, alpha, beta, i, c[i], want[i])
			}
		}
	}
}

func TestSgemmBatched(t *testing.T) {
	type bcase struct {
		name                    string
		batch, m, n, k          int
		transA, transB          bool
		broadcastA, interleaveC bool
		alpha, beta             float32
	}
	cases := []bcase{
		{"attention-scores", 8, 32, 32, 16, false, true, false, true, 0.25, 0},
		{"attention-values", 8, 32, 16, 32, false, false, false, true, 1, 0},
		{"broadcast-weight", 5, 20, 7, 9, false, false, true, false, 1, 1},
		{"big", 2, 130, 70, 500, true, false, false, false, 0.5, -1},   // split within each product
		{"many-big", 5, 130, 70, 500, false, true, false, false, 1, 0}, // whole products per thread
		{"single", 1, 17, 33, 9, false, false, false, false, 1, 0},
		{"empty-k", 3, 4, 5, 0, false, false, false, false, 1, 2},
		{"empty-batch", 0, 4, 5, 6, false, false, false, false, 1, 0},
	}
	for _, threads := range []int{1, 2} {
		parallel.SetThreads(threads)
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/threads=%d", tc.name, threads), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 8))
				// Reference: each product on its own with Dgemm-checked
				// problem; operands laid out per the case's strides.
				ps := make([]*problem, tc.batch)
				for i := range ps {
					ps[i] = newProblem(rng, shape{tc.m, tc.n, tc.k, 0}, tc.transA, tc.transB, float64(tc.alpha), float64(tc.beta))
					if tc.beta == 0 {
						for j := range ps[i].c {
							ps[i].c[j] = math.NaN()
						}
					}
				}
				// The layout (lda, ldb, sizes) is the same for every product.
				tp := newProblem(rng, shape{tc.m, tc.n, tc.k, 0}, tc.transA, tc.transB, 1, 1)
				if tc.broadcastA {
					for _, p := range ps {
						p.a = ps[0].a
					}
				}
				sizeA, sizeB := len(tp.a), len(tp.b)
				strideA, strideB := sizeA, sizeB
				if tc.broadcastA {
					strideA = 0
				}
				// C either stacked or interleaved as [m, batch·n].
				ldc, strideC := tc.n, tc.m*tc.n
				if tc.interleaveC {
					ldc, strideC = tc.batch*tc.n, tc.n
				}
				a := make([]float32, max(0, (tc.batch-1)*strideA+sizeA))
				b := make([]float32, max(0, (tc.batch-1)*strideB+sizeB))
				c := make([]float32, max(0, (tc.batch-1)*strideC+(tc.m-1)*ldc+tc.n))
				for i, p := range ps {
					for j, v := range p.a {
						a[i*strideA+j] = float32(v)
					}
					for j, v := range p.b {
						b[i*strideB+j] = float32(v)
					}
					for r := 0; r < tc.m; r++ {
						for x := 0; x < tc.n; x++ {
							c[i*strideC+r*ldc+x] = float32(p.c[r*p.ldc+x])
						}
					}
				}
				SgemmBatched(tc.batch, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha,
					a, tp.lda, strideA, b, tp.ldb, strideB, tc.beta, c, ldc, strideC)
				for i, p := range ps {
					got := make([]float64, len(p.c))
					for r := 0; r < tc.m; r++ {
						for x := 0; x < tc.n; x++ {
							got[r*p.ldc+x] = float64(c[i*strideC+r*ldc+x])
						}
					}
					p.check(t, got, 1e-6)
				}
			})
		}
	}
	parallel.SetThreads(0)
}

// TestInvalidArguments checks that each inconsistency panics with a
// message naming the argument.
func TestInvalidArguments(t *testing.T) {
	buf := make([]float32, 100)
	cases := []panicCase{
		{"negative m", func() { Sgemm(false, false, -1, 2, 2, 1, buf, 2, buf, 2, 0, buf, 2) }, "negative dimension"},
		{"lda", func() { Sgemm(false, false, 2, 2, 3, 1, buf, 2, buf, 2, 0, buf, 2) }, "lda = 2"},
		{"lda transposed", func() { Sgemm(true, false, 5, 2, 3, 1, buf, 3, buf, 2, 0, buf, 2) }, "lda = 3"},
		{"ldb", func() { Sgemm(false, true, 2, 2, 3, 1, buf, 3, buf, 2, 0, buf, 2) }, "ldb = 2"},
		{"ldc", func() { Sgemm(false, false, 2, 4, 3, 1, buf, 3, buf, 4, 0, buf, 3) }, "ldc = 3"},
		{"ldc empty", func() { Sgemm(false, false, 0, 0, 0, 1, buf, 1, buf, 1, 0, buf, 0) }, "ldc = 0"},
		{"short a", func() { Sgemm(false, false, 10, 2, 11, 1, buf, 11, buf, 2, 0, buf, 2) }, "len(a) = 100 < 110"},
		{"short b", func() { Sgemm(false, false, 2, 10, 11, 1, buf, 11, buf, 10, 0, buf, 10) }, "len(b) = 100 < 110"},
		{"short c", func() { Sgemm(false, false, 11, 10, 1, 1, buf, 1, buf, 10, 0, buf, 10) }, "len(c) = 100 < 110"},
		{"short c dgemm", func() {
			Dgemm(false, false, 11, 10, 1, 1, make([]float64, 11), 1, make([]float64, 10), 10, 0, make([]float64, 109), 10)
		}, "Dgemm: len(c) = 109 < 110"},
		{"batch", func() { SgemmBatched(-1, false, false, 1, 1, 1, 1, buf, 1, 1, buf, 1, 1, 0, buf, 1, 1) }, "batch = -1"},
		{"stride", func() { SgemmBatched(2, false, false, 1, 1, 1, 1, buf, 1, -1, buf, 1, 1, 0, buf, 1, 1) }, "negative stride"},
		{"strideC 0", func() { SgemmBatched(2, false, false, 1, 1, 1, 1, buf, 1, 1, buf, 1, 1, 0, buf, 1, 0) }, "strideC = 0"},
		{"batched ok", func() {
			SgemmBatched(11, false, false, 3, 3, 3, 1, buf, 3, 9, buf, 3, 9, 0, buf, 3, 9)
			panic("no panic")
		}, "no panic"},
		{"batched short", func() { SgemmBatched(12, false, false, 3, 3, 3, 1, buf, 3, 9, buf, 3, 9, 0, buf, 3, 9) }, "len(a) = 100 < 108 needed for 12 matrices"},
		{"batched short c", func() { SgemmBatched(2, false, false, 3, 3, 3, 1, buf, 3, 0, buf, 3, 0, 0, buf, 3, 92) }, "len(c) = 100 < 101"},
	}
	runPanicCases(t, cases)
}

// panicCase is a call that must panic with a message containing want.
type panicCase struct {
	name string
	call func()
	want string
}

func runPanicCases(t *testing.T, cases []panicCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if r == nil || !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %v, want one containing %q", r, tc.want)
				}
			}()
			tc.call()
		})
	}
}

// TestNoAllocs checks that steady-state single-threaded calls take their
// packing buffers from the free list. (Multi-threaded calls allocate the pool's
// job in parallel.For, a few dozen bytes per loop.)
func TestNoAllocs(t *testing.T) {
	parallel.SetThreads(1)
	defer parallel.SetThreads(0)
	a := make([]float32, 128*128)
	b := make([]float32, 128*128)
	c := make([]float32, 128*128)
	d := make([]float64, 64*64)
	offs := make([]int32, 64)
	for i := range offs {
		offs[i] = int32(3 * i)
	}
	for name, f := range map[string]func(){
		"Sgemm":        func() { Sgemm(false, true, 128, 128, 128, 1, a, 128, b, 128, 0, c, 128) },
		"Dgemm":        func() { Dgemm(true, false, 64, 64, 64, 1, d, 64, d, 64, 1, d, 64) },
		"SgemmBatched": func() { SgemmBatched(4, false, false, 64, 64, 64, 1, a, 64, 4096, b, 64, 4096, 0, c, 64, 4096) },
		"GemmWindows": func() {
			GemmWindows(16, 120, 64, 1, a, 64, Windows[float32]{b, offs, 12, 20}, 0, c, 120, 1)
		},
		"GemmRows": func() { GemmRows(16, 40, 100, 1, Rows[float32]{b, offs}, true, a, 100, 1, c, 40, 1) },
	} {
		if n := testing.AllocsPerRun(20, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
		// The workspaces survive a garbage collection (a sync.Pool's did
		// not: every product after one allocated its buffers again).
		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		// (The count of the process's allocations may catch a few small
		// ones of the runtime's; the packing buffers are kilobytes.)
		if n := after.TotalAlloc - before.TotalAlloc; n > 1024 {
			t.Errorf("%s: %d bytes allocated by the first call after a collection, want none", name, n)
		}
	}
}

// TestPack checks the packing of every edge case directly: each panel
// width, every row count up to it, depths around the assembly's 8-step
// blocks, source slices ending at a guard page.
func TestPack(t *testing.T) {
	defer freeGuarded()
	for _, w := range []int{4, 6, 12, 16, 32} {
		for rows := 0; rows <= w; rows++ {
			for _, kc := range []int{1, 7, 8, 9, 16, 23} {
				const ld, row0, col0 = 41, 2, 3
				n := (row0+rows-1)*ld + col0 + kc
				if rows == 0 {
					n = 0
				}
				src := exact32(n)
				for i := range src {
					src[i] = float32(i + 1)
				}
				dst := make([]float32, kc*w)
				for i := range dst {
					dst[i] = -1 // must all be overwritten
				}
				transpose(dst, src, ld, row0, rows, col0, kc, w)
				for p := 0; p < kc; p++ {
					for r := 0; r < w; r++ {
						want := float32(0)
						if r < rows {
							want = src[(row0+r)*ld+col0+p]
						}
						if got := dst[p*w+r]; got != want {
							t.Fatalf("w=%d rows=%d kc=%d: dst[%d·%d+%d] = %g, want %g", w, rows, kc, p, w, r, got, want)
						}
					}
				}
			}
		}
	}
}
