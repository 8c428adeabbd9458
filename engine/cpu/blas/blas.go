// Package blas owns the choice of matrix-multiplication implementation for
// the CPU backend: every GEMM of the engine goes through Sgemm,
// SgemmBatched or Dgemm here, which route it either to a CBLAS library
// (engine/cpu/cblas: OpenBLAS, MKL, BLIS, loaded at run time) or to the
// pure Go kernels (engine/cpu/gemm).
//
// The signatures and semantics are those of engine/cpu/gemm (row-major
// cblas_sgemm). The mode is chosen with Use:
//
//	"auto"  (default) the Go kernels where this CPU has assembly kernels
//	        for them (AVX2, AVX-512); CBLAS when ZEROENG_BLAS names a
//	        library, or on a CPU without them when a library loads
//	"go"    always the Go kernels
//	"cblas" always CBLAS; Use fails when no library loads
//
// Mode auto prefers the assembly kernels because, measured on one CPU with
// both of them, a whole training step is as fast or faster on them than on
// OpenBLAS: the kernels run at the library's rate, and the pool's workers,
// which poll between loops while no library's threads need the cores,
// start the short loops between products without a wake-up (RATIONALE.md,
// "One worker pool for the process").
//
// The library is looked for lazily, on the first product or call to Info
// that needs it, and once; the environment variable ZEROENG_BLAS=none keeps
// it from being loaded at all, and a path or soname in it chooses the
// library (see engine/cpu/cblas). Info says what is in use and why.
//
// Even with CBLAS, products too small to repay a call into the library
// (under smallFlops) and batches of small products run on the Go kernels,
// which are faster there; see docs/benchmarks-gemm.md.
package blas

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeroeng/zeroeng/engine/cpu/cblas"
	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// Crossovers measured on the development machine (docs/benchmarks-gemm.md).
const (
	// A single product of fewer flops than a smallCube³ product runs on
	// the Go kernels even in CBLAS mode: a call through purego into the
	// library costs about a microsecond before any work, and the Go path
	// is the faster one up to about 32³ (16³: 0.7 against 1.3 µs).
	smallCube  = 40
	smallFlops = 2 * smallCube * smallCube * smallCube

	// A batch of products of at least batchedCube³'s flops each is run as
	// one cblas_sgemm per product; below it the Go batched kernel, which
	// runs whole products on each thread, is faster.
	batchedCube       = 256
	batchedCBLASFlops = 2 * batchedCube * batchedCube * batchedCube
)

// state is one resolved choice: lib is nil for the Go kernels.
type state struct {
	mode string
	lib  *cblas.Lib
	why  string
}

var (
	mu  sync.Mutex            // serialises Use and the lazy resolution
	cur atomic.Pointer[state] // nil until resolved

	mode = "auto" // guarded by mu

	loadOnce sync.Once
	lib      *cblas.Lib
	loadErr  error

	// callMu guards calls into the library and libThreads. A call on
	// all of the pool's threads holds it exclusively: OpenBLAS's pthread
	// build locks its thread server anyway (since 0.3.7), MKL and BLIS
	// builds differ, and two such calls at once would only oversubscribe
	// the cores. Calls on one library thread each, which run in the
	// caller's thread without the library's workers, hold it shared and
	// run at the same time (TestConcurrentCalls in engine/cpu/cblas is
	// the evidence that the library is safe to share so); libThreads
	// changes only under the exclusive lock.
	callMu     sync.RWMutex
	libThreads int

	// callers is the number of goroutines that may multiply at the same
	// time: 1, plus the extra in-process ranks of the jobs running
	// (AddCallers).
	callers atomic.Int32
)

func init() { callers.Store(1) }

// AddCallers declares n more goroutines (in-process ranks) that call the
// products at the same time as the first, until the returned function is
// called. While there are more callers than one and at least as many as
// the pool has threads (parallel.Threads()), mode auto runs every product
// on the Go kernels, and mode cblas runs each library call on one library
// thread, the callers' calls at the same time, a core each; otherwise a
// library call takes every thread and the calls take turns. Measured on 2
// cores, 2 ranks of the GPT workload against one rank on one thread:
// library calls taking turns on 2 threads, 1.50× its tokens a second; a
// library thread each, 1.6-1.8×; the Go kernels, 1.8-1.9× (RATIONALE.md,
// "One worker pool for the process").
func AddCallers(n int) (done func()) {
	callers.Add(int32(n))
	var once sync.Once
	return func() { once.Do(func() { callers.Add(-int32(n)) }) }
}

// shared reports whether several callers (in-process ranks) share the
// pool's threads, as many callers as threads or more.
func shared() bool {
	c := int(callers.Load())
	return c > 1 && parallel.Threads() <= c
}

// library returns the library that runs the products, or nil for the Go
// kernels. In mode auto, ranks that share the threads run the Go kernels:
// their loops divide the cores with the other ranks' loops as each starts
// (engine/cpu/parallel), which a library thread, fixed to its rank, cannot
// (2 ranks of the GPT workload on 2 cores: 4,613-5,673 tokens a second
// against 4,561-4,900 with a library thread a rank).
func library() *cblas.Lib {
	s := current()
	if s.lib != nil && s.mode == "auto" && shared() {
		return nil
	}
	return s.lib
}

// lock takes callMu for one call (or a batch of calls) and sets the
// library's thread count for it: every thread, exclusively, unless callers
// share the threads; then one, shared. The returned function releases it.
func lock(l *cblas.Lib) (unlock func()) {
	if !shared() {
		callMu.Lock()
		setThreads(l, parallel.Threads())
		return callMu.Unlock
	}
	for {
		callMu.RLock()
		if libThreads == 1 {
			return callMu.RUnlock
		}
		callMu.RUnlock()
		callMu.Lock()
		setThreads(l, 1)
		callMu.Unlock()
	}
}

// Use selects the implementation: "auto", "go" or "cblas". It returns an
// error for an unknown mode, and for "cblas" when no library can be
// loaded, leaving the previous mode in place. Products already running
// finish on the implementation they started with.
func Use(m string) error {
	mu.Lock()
	defer mu.Unlock()
	switch m {
	case "auto", "go":
	case "cblas":
		if l, err := load(); l == nil {
			return fmt.Errorf("blas: mode cblas: %w", err)
		}
	default:
		return fmt.Errorf("blas: unknown mode %q (want auto, go or cblas)", m)
	}
	mode = m
	cur.Store(nil) // resolved again on next use
	return nil
}

// Info describes the implementation in use and why, for diagnostics
// (zeroeng info). It loads the library if the mode needs it. Example:
//
//	blas: cblas (mode auto): libopenblas.so.0 (openblas): OpenBLAS 0.3.21 … core=SkylakeX;
//	OpenBLAS did not recognise this CPU (chose Prescott); reloaded with
//	OPENBLAS_CORETYPE=SkylakeX; …; 2 threads a call (parallel.Threads()),
//	calls take turns; products under 2·40³ flops and batches of products
//	under 2·256³ flops use the Go kernels (sgemm avx512 12×32, dgemm avx512 12×16)
func Info() string {
	s := current()
	kern := "Go kernels (" + gemm.Kernel() + ")"
	if s.lib == nil {
		return fmt.Sprintf("blas: go (mode %s): %s, idle workers poll %v before parking; CBLAS not used: %s",
			s.mode, kern, parallel.Poll(), s.why)
	}
	t := fmt.Sprintf("%d threads a call (parallel.Threads()), calls take turns", parallel.Threads())
	if c := callers.Load(); shared() && s.mode == "auto" {
		t = fmt.Sprintf("not used while %d in-process ranks share %d threads (the Go kernels divide them)", c, parallel.Threads())
	} else if shared() {
		t = fmt.Sprintf("1 thread a call, the calls of %d callers at once", c)
	}
	return fmt.Sprintf("blas: cblas (mode %s): %s; %s; "+
		"products under 2·%d³ flops and batches of products under 2·%d³ flops use the %s",
		s.mode, s.lib, t, smallCube, batchedCube, kern)
}

// Resolve makes the choice now rather than at the first product, loading
// the library if the mode needs one. The pool's workers poll or park by
// the choice (current), so a device resolves it when it starts: a model
// whose first loops are not products (convolutions, normalisations) would
// otherwise run them with parked workers, each loop's second thread
// starting a wake-up late, until its first product.
func Resolve() { current() }

// current returns the resolved choice, resolving it on first use.
func current() *state {
	if s := cur.Load(); s != nil {
		return s
	}
	mu.Lock()
	defer mu.Unlock()
	if s := cur.Load(); s != nil {
		return s
	}
	s := &state{mode: mode}
	switch {
	case mode == "go":
		s.why = "mode go selected with Use"
	case mode == "auto" && os.Getenv("ZEROENG_BLAS") == "" && gemm.Vectorised():
		// ZEROENG_BLAS, when set, names the user's library (or none, which
		// load reports).
		s.why = "mode auto prefers the engine's own kernels on a CPU with AVX2 or AVX-512 (ZEROENG_BLAS=libopenblas.so.0, or another library's name or path, chooses a library)"
	default: // auto, cblas (Use checked that it loads)
		if l, err := load(); l != nil {
			s.lib = l
		} else {
			s.why = err.Error()
		}
	}
	// The Go kernels' loops start sooner with workers that poll; a
	// library's threads would lose their cores to them.
	if s.lib == nil {
		parallel.SetPoll(goPoll)
	} else {
		parallel.SetPoll(0)
	}
	cur.Store(s)
	return s
}

// goPoll is how long the pool's workers poll for the next loop while the
// Go kernels do the products (parallel.SetPoll): measured at 200 µs on a
// 2-vCPU Zen 5 EPYC, where a parked worker takes 97 µs to start.
const goPoll = 200 * time.Microsecond

// load loads the library once.
func load() (*cblas.Lib, error) {
	loadOnce.Do(func() { lib, loadErr = cblas.Load() })
	return lib, loadErr
}

// setThreads makes the library use t threads. callMu is held exclusively.
func setThreads(l *cblas.Lib, t int) {
	if t != libThreads {
		l.SetThreads(t)
		libThreads = t
	}
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C; see gemm.Sgemm for the
// arguments and semantics, which both implementations follow.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if l := library(); l != nil && useLib(m, n, k, lda, ldb, ldc, alpha != 0, smallFlops) {
		defer lock(l)()
		l.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemm.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm is Sgemm for float64; see gemm.Dgemm.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if l := library(); l != nil && useLib(m, n, k, lda, ldb, ldc, alpha != 0, smallFlops) {
		defer lock(l)()
		l.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemm.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmBatched computes a strided batch of products; see
// gemm.SgemmBatched. With CBLAS, batches of large products make one
// library call per product; batches of small ones (attention heads) run on
// the Go batched kernel, which spreads whole products over the threads.
func SgemmBatched(batch int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	l := library()
	if l == nil || batch <= 0 || !useLib(m, n, k, lda, ldb, ldc, alpha != 0, batchedCBLASFlops) {
		gemm.SgemmBatched(batch, transA, transB, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC)
		return
	}
	// Validate the whole batch before the first call, as the Go path
	// does: a batch is not left half done by a bad argument.
	gemm.CheckBatched(batch, transA, transB, m, n, k, len(a), lda, strideA, len(b), ldb, strideB, len(c), ldc, strideC)
	defer lock(l)()
	for i := 0; i < batch; i++ {
		l.Sgemm(transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
	}
}

// useLib reports whether a product goes to the library: enough work
// (minFlops) and dimensions that fit its 32-bit integers. Products with
// alpha == 0 stay in Go, which then does not read A and B at all (NaN in
// them does not reach C), whatever the library would do.
func useLib(m, n, k, lda, ldb, ldc int, alphaNonZero bool, minFlops int64) bool {
	return alphaNonZero && flops(m, n, k) >= minFlops && cblas.Fits(m, n, k, lda, ldb, ldc)
}

// flops is the work of an m×n×k product, 2·m·n·k, in 64 bits so that it
// does not overflow on 32-bit platforms.
func flops(m, n, k int) int64 { return 2 * int64(m) * int64(n) * int64(k) }
