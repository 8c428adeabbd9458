package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// windowsCase is one GemmWindows shape: an m×k A, B of k rows of rows
// window rows of width elements.
type windowsCase struct {
	m, k, width, rows, stride int
}

var windowsCases = []windowsCase{
	{1, 1, 1, 1, 1},
	{6, 7, 16, 1, 16},     // one AVX2 tile
	{12, 9, 32, 2, 40},    // one AVX-512 tile a row
	{16, 144, 32, 3, 34},  // a 3×3 convolution's shapes, two partial A panels
	{32, 144, 32, 2, 32},  // AVX-512's 8-row kernel, whole panels
	{24, 40, 64, 1, 64},   // AVX-512's 12-row kernel on a tie
	{5, 27, 17, 2, 19},    // a column past a tile, rows overlapping nothing
	{13, 33, 5, 4, 3},     // rows overlapping in Base
	{7, 400, 28, 2, 30},   // several K blocks, partial tiles on every kernel
	{32, 288, 14, 3, 16},  // a partial tile only
	{3, 10, 8, 5, 0},      // stride 0: every row the same windows
	{40, 1000, 16, 1, 16}, // K blocks not a multiple of 4 deep
}

// newWindows builds the operands of c: A and C as in a problem, random
// offsets into a Base exactly long enough, and the problem whose explicit
// B is what the windows describe.
func newWindows(rng *rand.Rand, c windowsCase, alpha, beta float64) (*problem, []float64, []int32) {
	n := c.width * c.rows
	offs := make([]int32, c.k)
	hi := int32(0)
	for p := range offs {
		offs[p] = int32(rng.IntN(50))
		hi = max(hi, offs[p])
	}
	base := make([]float64, int(hi)+(c.rows-1)*c.stride+c.width+WindowsSlack)
	for i := range base {
		base[i] = float64(float32(rng.Float64()*2 - 1))
	}
	p := newProblem(rng, shape{c.m, n, c.k, 0}, false, false, alpha, beta)
	for q := 0; q < c.k; q++ {
		for j := 0; j < n; j++ {
			p.b[q*p.ldb+j] = base[int(offs[q])+j/c.width*c.stride+j%c.width]
		}
	}
	return p, base, offs
}

func TestGemmWindows(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, wc := range windowsCases {
			for _, ab := range coeffsFor(wc.m * wc.k * wc.width * wc.rows) {
				for _, f64 := range []bool{false, true} {
					p, base, offs := newWindows(rng, wc, ab[0], ab[1])
					n := wc.width * wc.rows
					threads := 1
					if wc.rows > 1 {
						threads = 3
					}
					if f64 {
						a, c, b := exact64(len(p.a)), exact64(len(p.c)), exact64(len(base))
						copy(a, p.a)
						copy(c, p.c)
						copy(b, base)
						GemmWindows(wc.m, n, wc.k, ab[0], a, p.lda, Windows[float64]{b, offs, wc.width, wc.stride}, ab[1], c, p.ldc, threads)
						p.check(t, c, 1e-15)
						// A packed once gives the same bits.
						pa := PackWindowsA(make([]float64, WindowsALen[float64](wc.m, wc.k)), wc.m, wc.k, a, p.lda)
						c2 := exact64(len(p.c))
						copy(c2, p.c)
						GemmWindowsA(pa, n, ab[0], Windows[float64]{b, offs, wc.width, wc.stride}, ab[1], c2, p.ldc, threads)
						sameBits(t, "float64", []string{"GemmWindows", "GemmWindowsA"}, [][]float64{c, c2})
						continue
					}
					c := to32(p.c)
					b := exact32(len(base))
					copy(b, to32(base))
					GemmWindows(wc.m, n, wc.k, float32(ab[0]), to32(p.a), p.lda, Windows[float32]{b, offs, wc.width, wc.stride}, float32(ab[1]), c, p.ldc, threads)
					p.check(t, to64(c), 1e-6)
					pa := PackWindowsA(make([]float32, WindowsALen[float32](wc.m, wc.k)), wc.m, wc.k, to32(p.a), p.lda)
					for range 2 { // the packed A serves any number of products
						c2 := to32(p.c)
						GemmWindowsA(pa, n, float32(ab[0]), Windows[float32]{b, offs, wc.width, wc.stride}, float32(ab[1]), c2, p.ldc, threads)
						sameBits(t, "float32", []string{"GemmWindows", "GemmWindowsA"}, [][]float32{c, c2})
					}
				}
			}
		}
	})
}

// rowsCases are GemmRows shapes: m rows of A, n columns of op(B), depth k.
var rowsCases = []shape{
	{1, 1, 1, 0},
	{6, 16, 7, 0},      // one AVX2 tile
	{6, 32, 7, 0},      // one AVX-512 tile
	{144, 32, 300, 0},  // the CNN's second convolution: whole AVX-512 tiles
	{5, 3, 9, 2},       // one partial tile, padded strides
	{144, 16, 1088, 0}, // a 3×3 convolution's weight gradient: 3 K blocks
	{27, 32, 300, 1},   // a partial last panel of rows
	{13, 33, 5, 0},
	{7, 9, 0, 0},
}

// newRows builds a problem whose A is made of runs of a Base at random
// offsets (overlapping), returning the Base and offsets.
func newRows(rng *rand.Rand, s shape, transB bool, alpha, beta float64) (*problem, []float64, []int32) {
	p := newProblem(rng, s, false, transB, alpha, beta)
	offs := make([]int32, s.m)
	hi := int32(0)
	for i := range offs {
		offs[i] = int32(rng.IntN(20))
		hi = max(hi, offs[i])
	}
	base := make([]float64, int(hi)+s.k)
	for i := range base {
		base[i] = float64(float32(rng.Float64()*2 - 1))
	}
	for i := 0; i < s.m; i++ {
		for q := 0; q < s.k; q++ {
			p.a[i*p.lda+q] = base[int(offs[i])+q]
		}
	}
	return p, base, offs
}

func TestGemmRows(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, rc := range rowsCases {
			for _, ab := range coeffsFor(rc.m * rc.n * rc.k) {
				for _, transB := range []bool{false, true} {
					threads := 1 + 2*(rc.m%2) // 1 or 3
					p, base, offs := newRows(rng, rc, transB, ab[0], ab[1])
					// f64
					b64, c64, a64 := exact64(len(p.b)), exact64(len(p.c)), exact64(len(base))
					copy(b64, p.b)
					copy(c64, p.c)
					copy(a64, base)
					GemmRows(rc.m, rc.n, rc.k, ab[0], Rows[float64]{a64, offs}, transB, b64, p.ldb, ab[1], c64, p.ldc, threads)
					p.check(t, c64, 1e-15)
					// f32
					c32 := to32(p.c)
					a32 := exact32(len(base))
					copy(a32, to32(base))
					GemmRows(rc.m, rc.n, rc.k, float32(ab[0]), Rows[float32]{a32, offs}, transB, to32(p.b), p.ldb, float32(ab[1]), c32, p.ldc, threads)
					p.check(t, to64(c32), 1e-6)
				}
			}
		}
	})
}

func TestGemmWindowsInvalid(t *testing.T) {
	buf := make([]float32, 100)
	offs := []int32{0, 1, 2}
	cases := []panicCase{
		{"width", func() { GemmWindows(2, 6, 3, 1, buf, 3, Windows[float32]{buf, offs, 4, 4}, 0, buf, 6, 1) }, "not a multiple of the window width 4"},
		{"zero width", func() { GemmWindows(2, 6, 3, 1, buf, 3, Windows[float32]{buf, offs, 0, 4}, 0, buf, 6, 1) }, "window width 0"},
		{"stride", func() { GemmWindows(2, 6, 3, 1, buf, 3, Windows[float32]{buf, offs, 3, -1}, 0, buf, 6, 1) }, "negative window stride"},
		{"offsets", func() { GemmWindows(2, 6, 4, 1, buf, 4, Windows[float32]{buf, offs, 3, 3}, 0, buf, 6, 1) }, "3 window offsets for depth 4"},
		{"negative offset", func() {
			GemmWindows(2, 6, 3, 1, buf, 3, Windows[float32]{buf, []int32{0, -1, 2}, 3, 3}, 0, buf, 6, 1)
		}, "window offset -1 of row 1"},
		{"short base", func() {
			GemmWindows(2, 6, 3, 1, buf, 3, Windows[float32]{buf[:39], offs, 3, 3}, 0, buf, 6, 1)
		}, "len(Base) = 39 < 40"},
		{"lda", func() { GemmWindows(2, 6, 3, 1, buf, 2, Windows[float32]{buf, offs, 3, 3}, 0, buf, 6, 1) }, "lda = 2"},
		{"short c", func() { GemmWindows(20, 6, 3, 1, buf, 3, Windows[float32]{buf, offs, 3, 3}, 0, buf, 6, 1) }, "len(c) = 100 < 120"},
		{"packed buf", func() { PackWindowsA(buf[:5], 2, 3, buf, 3) }, "len(buf) = 5 <"},
		{"packed lda", func() { PackWindowsA(buf, 2, 3, buf, 2) }, "lda = 2"},
		{"not packed", func() { GemmWindowsA(WindowsA[float32]{}, 6, 1, Windows[float32]{buf, offs, 3, 3}, 0, buf, 6, 1) }, "not packed by PackWindowsA"},
		{"packed width", func() {
			GemmWindowsA(PackWindowsA(buf, 2, 3, buf, 3), 6, 1, Windows[float32]{buf, offs, 4, 4}, 0, buf, 6, 1)
		}, "not a multiple of the window width 4"},
		{"rows offsets", func() { GemmRows(4, 2, 3, 1, Rows[float32]{buf, offs}, false, buf, 2, 0, buf, 2, 1) }, "3 row offsets for 4 rows"},
		{"rows outside", func() { GemmRows(3, 1, 99, 1, Rows[float32]{buf, offs}, false, buf, 1, 0, buf, 1, 1) }, "row 2 at offset 2, 99 long, is outside len(Base) = 100"},
		{"rows negative", func() {
			GemmRows(3, 2, 3, 1, Rows[float32]{buf, []int32{0, -4, 1}}, false, buf, 2, 0, buf, 2, 1)
		}, "row 1 at offset -4"},
		{"rows ldb", func() { GemmRows(3, 2, 3, 1, Rows[float32]{buf, offs}, true, buf, 2, 0, buf, 2, 1) }, "ldb = 2"},
	}
	runPanicCases(t, cases)
	// The smallest Base that fits is accepted.
	GemmWindows(2, 6, 3, 1, buf, 3, Windows[float32]{buf[:40], offs, 3, 3}, 0, buf, 6, 1)
}

// BenchmarkGemmWindows compares a 3×3 convolution's product computed in
// place with the same product of the explicit column matrix (im2col) by
// the packed GEMM, one sample on one thread.
func BenchmarkGemmWindows(b *testing.B) {
	for _, s := range []struct{ c, o, hw int }{{16, 16, 32}, {32, 32, 16}} {
		k, wp := s.c*9, s.hw+2
		x := make([]float32, s.c*wp*wp+WindowsSlack)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		offs := make([]int32, k)
		for p := range offs {
			ch, t := p/9, p%9
			offs[p] = int32(ch*wp*wp + t/3*wp + t%3)
		}
		w := make([]float32, s.o*k)
		y := make([]float32, s.o*s.hw*s.hw)
		cols := make([]float32, k*s.hw*s.hw)
		gflops := func(b *testing.B) {
			b.ReportMetric(2*float64(s.o*k*s.hw*s.hw)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		name := fmt.Sprintf("%dx%dx%d", s.c, s.hw, s.hw)
		b.Run(name+"/windows", func(b *testing.B) {
			for b.Loop() {
				GemmWindows(s.o, s.hw*s.hw, k, 1, w, k, Windows[float32]{x, offs, s.hw, wp}, 0, y, s.hw*s.hw, 1)
			}
			gflops(b)
		})
		b.Run(name+"/packed", func(b *testing.B) {
			for b.Loop() {
				SgemmSerial(false, false, s.o, s.hw*s.hw, k, 1, w, k, cols, s.hw*s.hw, 0, y, s.hw*s.hw)
			}
			gflops(b)
		})
	}
}

// TestKernelChoiceKeepsBits: the windows and rows kernels a kernel set
// chooses among by shape give the same bits, so that a product's result
// does not depend on which one its shape picked.
func TestKernelChoiceKeepsBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, kern := range kernels32.all {
		// Each choice's C, computed with the kernel set narrowed to it.
		var names []string
		var results [][]float32
		wc := windowsCase{32, 300, 32, 3, 34}
		p, base, offs := newWindows(rng, wc, 1, 0.5)
		for _, w := range kern.windows {
			one := *kern
			one.windows = []*windowsKernel[float32]{w}
			c := to32(p.c)
			pa := packWindowsA(&one, make([]float32, windowsALen(&one, wc.m, wc.k)), wc.m, wc.k, to32(p.a), p.lda)
			ws := getWorkspace[float32]()
			gemmWindows(pa, wc.width*wc.rows, 1, Windows[float32]{to32(base), offs, wc.width, wc.stride}, 0.5, c, p.ldc, 2, ws)
			putWorkspace(ws)
			names, results = append(names, fmt.Sprintf("windows kernel of %d rows", w.mr)), append(results, c)
		}
		sameBits(t, kern.name, names, results)
		names, results = nil, nil
		rc := shape{144, 16, 700, 0}
		p, base, offs = newRows(rng, rc, true, 1, 0.5)
		for _, r := range kern.rows {
			one := *kern
			one.rows = []*rowsKernel[float32]{r}
			c := to32(p.c)
			gemmRows(&one, rc.m, rc.n, rc.k, 1, Rows[float32]{to32(base), offs}, true, to32(p.b), p.ldb, 0.5, c, p.ldc, 2)
			names, results = append(names, fmt.Sprintf("rows kernel %d wide", r.nr)), append(results, c)
		}
		sameBits(t, kern.name, names, results)
	}
}

// sameBits fails the test at the first element of a result whose bits
// differ from the first result's.
func sameBits[T float32 | float64](t *testing.T, kernel string, names []string, results [][]T) {
	t.Helper()
	for i := 1; i < len(results); i++ {
		for j, v := range results[i] {
			// float32 → float64 is exact: equal bits as float64 are equal
			// bits as float32.
			if w := results[0][j]; math.Float64bits(float64(v)) != math.Float64bits(float64(w)) {
				t.Fatalf("%s: %s: C[%d] = %g, the %s gives %g", kernel, names[i], j, v, names[0], w)
			}
		}
	}
}

// TestRowsKernels runs every rows kernel alone against the definition
// (checkTile): row i of A the k elements at a + offs[i].
func TestRowsKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, kern := range kernels32.all {
		for _, rk := range kern.rows {
			for _, k := range []int{0, 1, 3, 4, 9, 33} {
				offs := make([]int32, rk.mr)
				for i := range offs {
					offs[i] = int32(rng.IntN(40))
				}
				a := smallInts(rng, 40+k)
				checkTile(t, rng, fmt.Sprintf("%s rows %d×%d k=%d", kern.name, rk.mr, rk.nr, k), rk.mr, rk.nr, k,
					func(r, p int) float32 { return a[int(offs[r])+p] },
					func(b, c []float32, ldc int, alpha, beta float32) {
						rk.fn(k, &a[0], &offs[0], &b[0], &c[0], ldc, alpha, beta)
					})
			}
		}
	}
}
