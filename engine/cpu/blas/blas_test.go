package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu/cblas"
	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// needCBLAS switches to mode cblas for the test, or skips it when no
// library loads.
func needCBLAS(t testing.TB) *cblas.Lib {
	t.Helper()
	if err := Use("cblas"); err != nil {
		t.Skip("no CBLAS library: " + err.Error())
	}
	t.Cleanup(func() { Use("auto") })
	return current().lib
}

type product struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
}

// run computes p through the dispatcher and returns the largest error
// relative to the float64 reference, scaled by Σ|a·b| + |beta·c|.
func (p product) run(rng *rand.Rand) float64 {
	a := make([]float32, p.m*p.k)
	b := make([]float32, p.k*p.n)
	c := make([]float32, p.m*p.n)
	for _, x := range [][]float32{a, b, c} {
		for i := range x {
			x[i] = float32(rng.Float64()*2 - 1)
		}
	}
	if p.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	c0 := append([]float32(nil), c...)
	lda, ldb := p.k, p.n
	if p.transA {
		lda = p.m
	}
	if p.transB {
		ldb = p.k
	}
	Sgemm(p.transA, p.transB, p.m, p.n, p.k, p.alpha, a, lda, b, ldb, p.beta, c, p.n)
	worst := 0.0
	for i := 0; i < p.m; i++ {
		for j := 0; j < p.n; j++ {
			var s, abs float64
			for q := 0; q < p.k; q++ {
				ai, bi := i*lda+q, q*ldb+j
				if p.transA {
					ai = q*lda + i
				}
				if p.transB {
					bi = j*ldb + q
				}
				s += float64(a[ai]) * float64(b[bi])
				abs += math.Abs(float64(a[ai]) * float64(b[bi]))
			}
			want := float64(p.alpha) * s
			scale := math.Abs(float64(p.alpha)) * abs
			if p.beta != 0 {
				want += float64(p.beta) * float64(c0[i*p.n+j])
				scale += math.Abs(float64(p.beta) * float64(c0[i*p.n+j]))
			}
			e := math.Abs(float64(c[i*p.n+j])-want) / (scale + 1e-30)
			if math.IsNaN(e) {
				return math.Inf(1)
			}
			worst = max(worst, e)
		}
	}
	return worst
}

var products = []product{
	{false, false, 1, 1, 1, 1, 0},
	{false, false, 17, 33, 9, 0.5, -2},
	{true, false, 129, 257, 65, 1, 0}, // above smallFlops: CBLAS in cblas mode
	{false, true, 100, 90, 80, -1, 1},
	{true, true, 70, 64, 64, 0.5, 0},
}

func TestModes(t *testing.T) {
	for _, m := range []string{"go", "auto", "cblas"} {
		t.Run(m, func(t *testing.T) {
			if m == "cblas" {
				needCBLAS(t)
			} else {
				if err := Use(m); err != nil {
					t.Fatal(err)
				}
				defer Use("auto")
			}
			info := Info()
			t.Log(info)
			if m == "go" && !strings.HasPrefix(info, "blas: go") {
				t.Errorf("mode go: Info() = %q", info)
			}
			if m == "cblas" && !strings.HasPrefix(info, "blas: cblas") {
				t.Errorf("mode cblas: Info() = %q", info)
			}
			// The pool's workers poll while the Go kernels do the
			// products, and park at once beside a library.
			if want := map[bool]time.Duration{true: goPoll, false: 0}[current().lib == nil]; parallel.Poll() != want {
				t.Errorf("mode %s: the workers poll %v, want %v", m, parallel.Poll(), want)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, p := range products {
				if e := p.run(rng); e > 1e-6*math.Sqrt(float64(p.k)) {
					t.Errorf("%+v: relative error %.3g", p, e)
				}
			}
		})
	}
}

func TestUseUnknownMode(t *testing.T) {
	if err := Use("fast"); err == nil {
		t.Fatal("Use(\"fast\") succeeded")
	}
}

// TestEnvNone runs this test binary again with ZEROENG_BLAS=none (the
// library is looked for once per process) and checks that the Go kernels
// are used and mode cblas is refused.
func TestEnvNone(t *testing.T) {
	if os.Getenv("BLAS_TEST_CHILD") == "1" {
		info := Info()
		if !strings.HasPrefix(info, "blas: go") || !strings.Contains(info, "ZEROENG_BLAS=none") {
			fmt.Printf("FAILURE: Info() = %q\n", info)
		}
		if err := Use("cblas"); err == nil {
			fmt.Println("FAILURE: Use(\"cblas\") succeeded with ZEROENG_BLAS=none")
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvNone$", "-test.v")
	cmd.Env = append(os.Environ(), "BLAS_TEST_CHILD=1", "ZEROENG_BLAS=none")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "FAILURE") || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestThreadsFollowPool checks that CBLAS runs on parallel.Threads()
// threads, following changes of the pool's size.
func TestThreadsFollowPool(t *testing.T) {
	l := needCBLAS(t)
	if l.Threads() == 0 {
		t.Skipf("%s reports no thread count", l.Flavour)
	}
	defer parallel.SetThreads(0)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3} {
		parallel.SetThreads(n)
		if e := products[2].run(rng); e > 1e-4 {
			t.Fatalf("error %g", e)
		}
		if got := l.Threads(); got != n {
			t.Errorf("parallel.Threads() = %d, library threads %d", n, got)
		}
	}
}

// TestCallersShareTheThreads: with as many callers (in-process ranks) as
// threads, each library call (mode cblas) runs on one library thread, from
// every caller at once, with correct results, and mode auto runs the Go
// kernels; once the callers are gone, calls run on every thread again.
func TestCallersShareTheThreads(t *testing.T) {
	l := needCBLAS(t)
	if l.Threads() == 0 {
		t.Skipf("%s reports no thread count", l.Flavour)
	}
	parallel.SetThreads(2)
	defer parallel.SetThreads(0)
	done := AddCallers(1)
	defer done()
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 6))
			for range 5 {
				if e := products[2].run(rng); e > 1e-5 {
					t.Errorf("relative error %.3g", e)
				}
			}
		})
	}
	wg.Wait()
	if got := l.Threads(); got != 1 {
		t.Errorf("2 callers on 2 threads: the library runs %d threads a call, want 1", got)
	}
	if !strings.Contains(Info(), "1 thread a call") {
		t.Errorf("Info() = %q, want it to say 1 thread a call", Info())
	}
	// In mode auto, even with a library named, the ranks run the Go
	// kernels, which divide the pool's threads between them loop by loop.
	t.Setenv("ZEROENG_BLAS", l.Path)
	Use("auto")
	if library() != nil || !strings.Contains(Info(), "not used while 2 in-process ranks share 2 threads") {
		t.Errorf("mode auto, 2 callers on 2 threads: library %v, Info() = %q; want the Go kernels", library(), Info())
	}
	Use("cblas")
	done()
	done() // a second call changes nothing
	if e := products[2].run(rand.New(rand.NewPCG(1, 2))); e > 1e-5 {
		t.Errorf("relative error %.3g", e)
	}
	if got := l.Threads(); got != 2 {
		t.Errorf("1 caller on 2 threads: the library runs %d threads a call, want 2", got)
	}
	Use("auto")
	if library() != l {
		t.Errorf("mode auto, 1 caller: library %v, want %v", library(), l)
	}
}

// TestAutoPrefersAssemblyKernels: mode auto runs this CPU's assembly
// kernels rather than a library that loads, takes a library that
// ZEROENG_BLAS names, and takes one that loads on a CPU without assembly
// kernels.
func TestAutoPrefersAssemblyKernels(t *testing.T) {
	l := needCBLAS(t)
	t.Setenv("ZEROENG_BLAS", "")
	Use("auto")
	want := l
	if gemm.Vectorised() {
		want = nil
	}
	if library() != want {
		t.Errorf("mode auto, kernels %s: library %v, want %v; Info() = %q", gemm.Kernel(), library(), want, Info())
	}
	if want == nil && !strings.Contains(Info(), "mode auto prefers the engine's own kernels") {
		t.Errorf("Info() = %q, want it to say why the library is not used", Info())
	}
	if want := map[bool]time.Duration{true: goPoll, false: 0}[want == nil]; parallel.Poll() != want {
		t.Errorf("the workers poll %v, want %v", parallel.Poll(), want)
	}
	t.Setenv("ZEROENG_BLAS", l.Path)
	Use("auto")
	if library() != l || !strings.HasPrefix(Info(), "blas: cblas (mode auto)") {
		t.Errorf("mode auto, ZEROENG_BLAS=%s: library %v, Info() = %q; want the library named", l.Path, library(), Info())
	}
}

// TestConcurrentRanks calls the dispatcher from several goroutines at once,
// as in-process ranks do, in each mode.
func TestConcurrentRanks(t *testing.T) {
	for _, m := range []string{"go", "cblas"} {
		t.Run(m, func(t *testing.T) {
			if m == "cblas" {
				needCBLAS(t)
			} else {
				Use(m)
				defer Use("auto")
			}
			var wg sync.WaitGroup
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 5))
					for r := 0; r < 3; r++ {
						for _, p := range products[1:] {
							if e := p.run(rng); e > 1e-5 {
								t.Errorf("%+v: relative error %.3g", p, e)
							}
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// TestBatchedPaths checks SgemmBatched on both sides of the crossover, in
// each mode: small products (Go batched kernel) and large ones (one CBLAS
// call per product in cblas mode), with a broadcast A.
func TestBatchedPaths(t *testing.T) {
	for _, m := range []string{"go", "cblas"} {
		for _, sz := range []int{24, 260} {
			t.Run(fmt.Sprintf("%s/%d", m, sz), func(t *testing.T) {
				if m == "cblas" {
					needCBLAS(t)
				} else {
					Use(m)
					defer Use("auto")
				}
				const batch = 3
				rng := rand.New(rand.NewPCG(6, 7))
				a := make([]float32, sz*sz)
				b := make([]float32, batch*sz*sz)
				c := make([]float32, batch*sz*sz)
				for _, x := range [][]float32{a, b} {
					for i := range x {
						x[i] = float32(rng.IntN(5) - 2)
					}
				}
				for i := range c {
					c[i] = float32(math.NaN())
				}
				SgemmBatched(batch, false, true, sz, sz, sz, 1, a, sz, 0, b, sz, sz*sz, 0, c, sz, sz*sz)
				for q := 0; q < batch; q++ {
					for i := 0; i < sz; i++ {
						for j := 0; j < sz; j++ {
							var s float32
							for p := 0; p < sz; p++ {
								s += a[i*sz+p] * b[q*sz*sz+j*sz+p]
							}
							if got := c[q*sz*sz+i*sz+j]; got != s { // small integers: exact
								t.Fatalf("batch %d C[%d,%d] = %g, want %g", q, i, j, got, s)
							}
						}
					}
				}
			})
		}
	}
}

func TestBatchedInvalid(t *testing.T) {
	needCBLAS(t)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "len(c)") {
			t.Fatalf("panic %v, want one about len(c)", r)
		}
	}()
	const n = 300 // above the CBLAS crossover
	x := make([]float32, 2*n*n)
	SgemmBatched(2, false, false, n, n, n, 1, x, n, n*n, x, n, n*n, 0, x[:2*n*n-1], n, n*n)
}
