package cblas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/cpu"
)

var (
	loadOnce sync.Once
	lib      *Lib
	loadErr  error
)

// need returns the library, or skips the test when there is none.
func need(t testing.TB) *Lib {
	t.Helper()
	loadOnce.Do(func() { lib, loadErr = Load() })
	if loadErr != nil {
		t.Skip("no CBLAS library: " + loadErr.Error())
	}
	return lib
}

func TestLoad(t *testing.T) {
	l := need(t)
	t.Logf("loaded %s", l)
	if l.Flavour == "" || l.Path == "" {
		t.Fatalf("incomplete description: %+v", l)
	}
	// On a CPU with AVX2 an OpenBLAS left on its SSE kernels runs at a
	// fifth of its speed: fixOpenBLASCore must have reloaded it (unless the
	// user chose the kernel).
	if l.Flavour == OpenBLAS && cpu.X86.HasAVX2 && os.Getenv("OPENBLAS_CORETYPE") == "" &&
		strings.HasSuffix(l.Config, "core=Prescott") {
		t.Errorf("OpenBLAS still on its Prescott kernels: %s", l)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Setenv("ZEROENG_BLAS", "none")
	if _, err := Load(); err == nil || !strings.Contains(err.Error(), "ZEROENG_BLAS=none") {
		t.Errorf("ZEROENG_BLAS=none: error %v", err)
	}
	t.Setenv("ZEROENG_BLAS", "/nonexistent/libfoo.so")
	if _, err := Load(); err == nil || !strings.Contains(err.Error(), "/nonexistent/libfoo.so") {
		t.Errorf("ZEROENG_BLAS=path: error %v", err)
	}
	t.Setenv("ZEROENG_BLAS", "")
	saved := Candidates
	defer func() { Candidates = saved }()
	Candidates = []string{"libzeroeng-missing-a.so", "libzeroeng-missing-b.so"}
	_, err := Load()
	if err == nil {
		t.Fatal("no error with no candidate present")
	}
	for _, c := range Candidates {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error does not mention candidate %s:\n%v", c, err)
		}
	}
}

// TestRejectsLibraryWithoutCBLAS opens a library that exists but has no
// cblas_sgemm (the C library itself).
func TestRejectsLibraryWithoutCBLAS(t *testing.T) {
	_, err := Open("libc.so.6")
	if err == nil || !strings.Contains(err.Error(), "cblas_sgemm") {
		t.Fatalf("libc.so.6: error %v", err)
	}
}

// ref computes alpha·op(A)·op(B) + beta·C in float64 (beta == 0: C ignored)
// and, per element, the scale of its rounding error: |alpha|·Σ|a·b| + |beta·c|.
func ref(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) (out, scale []float64) {
	out = append([]float64(nil), c...)
	scale = make([]float64, len(c))
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, abs float64
			for p := 0; p < k; p++ {
				ai, bi := i*lda+p, p*ldb+j
				if transA {
					ai = p*lda + i
				}
				if transB {
					bi = j*ldb + p
				}
				s += a[ai] * b[bi]
				abs += math.Abs(a[ai] * b[bi])
			}
			v, sc := alpha*s, math.Abs(alpha)*abs
			if beta != 0 {
				v += beta * c[i*ldc+j]
				sc += math.Abs(beta * c[i*ldc+j])
			}
			out[i*ldc+j], scale[i*ldc+j] = v, sc
		}
	}
	return out, scale
}

func randSlice(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(float32(rng.Float64()*2 - 1))
	}
	return x
}

// TestGemm compares cblas_sgemm and cblas_dgemm through the binding with a
// float64 reference over shapes, transposes, padded strides and
// coefficients, including alpha = 0.5 and beta = -2 (which also checks
// that float arguments reach the library intact) and beta = 0 over NaN.
func TestGemm(t *testing.T) {
	l := need(t)
	rng := rand.New(rand.NewPCG(1, 1))
	shapes := [][4]int{{1, 1, 1, 0}, {17, 33, 9, 0}, {17, 33, 9, 3}, {129, 257, 65, 0}, {129, 257, 65, 1},
		{1, 1024, 1024, 0}, {1024, 1, 1024, 0}, {5, 6, 0, 0}}
	var coeffs [][2]float64
	for _, alpha := range []float64{1, 0.5, 0} {
		for _, beta := range []float64{0, 1, -2} {
			coeffs = append(coeffs, [2]float64{alpha, beta})
		}
	}
	for _, s := range shapes {
		m, n, k, pad := s[0], s[1], s[2], s[3]
		cs := coeffs
		if m*n*k > 100000 {
			cs = [][2]float64{{1, 0}, {0.5, -2}}
		}
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, ab := range cs {
				transA, transB := tr[0], tr[1]
				alpha, beta := ab[0], ab[1]
				ar, ac := m, k
				if transA {
					ar, ac = k, m
				}
				br, bc := k, n
				if transB {
					br, bc = n, k
				}
				lda, ldb, ldc := max(1, ac)+pad, max(1, bc)+pad, n+pad
				a := randSlice(rng, max(0, (ar-1)*lda+ac))
				b := randSlice(rng, max(0, (br-1)*ldb+bc))
				c := randSlice(rng, (m-1)*ldc+n)
				if beta == 0 {
					for i := range c {
						c[i] = math.NaN()
					}
				}
				want, scale := ref(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
				name := fmt.Sprintf("%dx%dx%d pad=%d trans=%v,%v alpha=%g beta=%g", m, n, k, pad, transA, transB, alpha, beta)

				c32 := make([]float32, len(c))
				for i, v := range c {
					c32[i] = float32(v)
				}
				l.Sgemm(transA, transB, m, n, k, float32(alpha), to32(a), lda, to32(b), ldb, float32(beta), c32, ldc)
				c64 := append([]float64(nil), c...)
				l.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c64, ldc)
				root := math.Sqrt(float64(max(k, 1)))
				for i := range want {
					if i%ldc >= n { // padding between rows: must be untouched
						same32 := c32[i] == float32(c[i]) || (math.IsNaN(c[i]) && math.IsNaN(float64(c32[i])))
						same64 := c64[i] == c[i] || (math.IsNaN(c[i]) && math.IsNaN(c64[i]))
						if !same32 || !same64 {
							t.Fatalf("%s: padding c[%d] written", name, i)
						}
						continue
					}
					if e := math.Abs(float64(c32[i]) - want[i]); !(e <= 1e-6*root*scale[i]+1e-30) {
						t.Fatalf("sgemm %s: c[%d] = %g, want %g", name, i, c32[i], want[i])
					}
					if e := math.Abs(c64[i] - want[i]); !(e <= 1e-15*root*scale[i]+1e-300) {
						t.Fatalf("dgemm %s: c[%d] = %g, want %g", name, i, c64[i], want[i])
					}
				}
			}
		}
	}
}

func to32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// TestFloatArguments isolates the float passing: C = 0.5·I·B - 2·C must be
// exact.
func TestFloatArguments(t *testing.T) {
	l := need(t)
	a := []float32{1, 0, 0, 1}
	b := []float32{3, 5, 7, 9}
	c := []float32{1, 1, 1, 1}
	l.Sgemm(false, false, 2, 2, 2, 0.5, a, 2, b, 2, -2, c, 2)
	want := []float32{-0.5, 0.5, 1.5, 2.5}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("sgemm alpha=0.5 beta=-2: got %v, want %v", c, want)
		}
	}
	d := []float64{1, 1, 1, 1}
	l.Dgemm(false, false, 2, 2, 2, 0.5, []float64{1, 0, 0, 1}, 2, []float64{3, 5, 7, 9}, 2, -2, d, 2)
	for i := range d {
		if d[i] != float64(want[i]) {
			t.Fatalf("dgemm alpha=0.5 beta=-2: got %v, want %v", d, want)
		}
	}
}

func TestThreads(t *testing.T) {
	l := need(t)
	before := l.Threads()
	defer l.SetThreads(max(before, 1))
	for _, n := range []int{1, 2} {
		if !l.SetThreads(n) {
			t.Skipf("%s has no thread control", l.Flavour)
		}
		if got := l.Threads(); got != n {
			t.Errorf("SetThreads(%d): Threads() = %d", n, got)
		}
	}
}

// TestConcurrentCalls calls the library from several goroutines at once,
// unserialised, as several in-process ranks do, and checks every result.
// It is the evidence behind engine/cpu/blas running the calls of several
// ranks at once (see there): a failure here means the library is not safe
// to share.
func TestConcurrentCalls(t *testing.T) {
	l := need(t)
	const n, goroutines, rounds = 256, 4, 10
	a := make([]float32, n*n)
	for i := range a {
		a[i] = float32(i%7) - 3
	}
	want := make([]float32, n*n)
	l.Sgemm(false, true, n, n, n, 1, a, n, a, n, 0, want, n)
	var wg sync.WaitGroup
	errs := make(chan string, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := make([]float32, n*n)
			for r := 0; r < rounds; r++ {
				l.Sgemm(false, true, n, n, n, 1, a, n, a, n, 0, c, n)
				for i := range c {
					if c[i] != want[i] { // small integers: exact
						errs <- fmt.Sprintf("round %d: c[%d] = %g, want %g", r, i, c[i], want[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestInvalidArguments(t *testing.T) {
	l := need(t)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "len(c)") {
			t.Fatalf("panic %v, want one about len(c)", r)
		}
	}()
	l.Sgemm(false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
}

// TestReferenceBLASNotChosen: Debian's reference BLAS (libblas3) exports
// CBLAS too, and its GEMM is far slower than the Go kernels: Load passes
// it by (saying why) unless ZEROENG_BLAS names it, which Open still
// honours.
func TestReferenceBLASNotChosen(t *testing.T) {
	ref, err := Open("libblas.so.3")
	if err != nil || ref.Flavour != Generic {
		t.Skipf("no reference libblas.so.3 here (%v)", err)
	}
	if l, err := Load(); err == nil && l.Path == "libblas.so.3" {
		t.Fatalf("Load chose the reference BLAS: %s", l)
	} else if err != nil && !strings.Contains(err.Error(), "libblas.so.3: a CBLAS of no known optimised implementation") {
		t.Fatalf("Load's error does not say why libblas.so.3 was passed by: %v", err)
	}
}
