// Package cblas owns the run-time binding to a CBLAS library (OpenBLAS,
// MKL, BLIS or any library exporting cblas_sgemm): discovering it, loading
// it with purego (no cgo, so the binary builds and runs without it), and
// calling cblas_sgemm, cblas_dgemm and the library's thread-count control.
//
// The package only binds; engine/cpu/blas decides when to use it.
//
// # Discovery
//
// Load looks at the environment variable ZEROENG_BLAS first: a path opens
// that library only, "none" disables CBLAS. Otherwise it tries, in order,
// the sonames in Candidates through the dynamic loader's search path, and
// takes the first that exports cblas_sgemm and cblas_dgemm.
//
// # OpenBLAS settings
//
// Two OpenBLAS defaults hurt this engine, and both can only be changed
// through environment variables read when the library is loaded; Open sets
// them for the load when the user has not, and records it in Lib.Note:
// OPENBLAS_THREAD_TIMEOUT=16, so that idle worker threads sleep after
// about 30 µs instead of spinning for 0.1 s after every call, and, when a
// DYNAMIC_ARCH build did not recognise the CPU and fell back to SSE
// kernels, OPENBLAS_CORETYPE for the best kernels the CPU supports (the
// library is then reloaded). See docs/benchmarks-gemm.md.
//
// # Floating-point arguments
//
// alpha and beta are passed as C float (cblas_sgemm) and double
// (cblas_dgemm). purego passes a Go float32 in the low 32 bits of the
// next SSE register, as the System V amd64 and AAPCS64 calling conventions
// require, so no widening or bit casting is needed; TestFloatArguments
// checks it with alpha = 0.5 and beta = -2, which a float/double mix-up
// would turn into garbage or zero.
package cblas

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"unsafe"
)

// Candidates are the sonames Load tries, in order, when ZEROENG_BLAS does
// not name a library. libcblas.so.3 and libblas.so.3 are taken only when
// they export the CBLAS interface and are a known optimised implementation
// (Debian's alternatives point them at OpenBLAS, MKL or BLIS when one is
// installed; its reference libblas3 exports CBLAS too, and is passed by).
var Candidates = []string{
	"libopenblas.so.0",
	"libopenblas.so",
	"libmkl_rt.so.2",
	"libmkl_rt.so",
	"libblis.so.4",
	"libblis.so",
	"libcblas.so.3",
	"libblas.so.3",
}

// CBLAS enumerations (cblas.h).
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

// Flavours of library, as reported by Lib.Flavour.
const (
	OpenBLAS = "openblas"
	MKL      = "mkl"
	BLIS     = "blis"
	Generic  = "cblas" // a CBLAS with no known thread control
)

// Lib is a loaded CBLAS library. Its methods may be called from several
// goroutines only if the library itself is thread-safe; engine/cpu/blas
// serialises its calls.
type Lib struct {
	Path    string // the name or path it was opened by
	Flavour string // OpenBLAS, MKL, BLIS or Generic
	Config  string // the library's own description: version, build, kernel
	Note    string // what Load did beyond opening it, if anything

	handle uintptr
	sgemm  func(order, transA, transB, m, n, k int32, alpha float32, a *float32, lda int32, b *float32, ldb int32, beta float32, c *float32, ldc int32)
	dgemm  func(order, transA, transB, m, n, k int32, alpha float64, a *float64, lda int32, b *float64, ldb int32, beta float64, c *float64, ldc int32)

	setThreads func(n int) // nil when the library has no thread control
	getThreads func() int
}

// Load finds and opens a CBLAS library (see the package comment). Its error
// lists every candidate it tried and why each was rejected.
func Load() (*Lib, error) {
	if runtime.GOOS != "linux" && runtime.GOOS != "freebsd" && runtime.GOOS != "netbsd" {
		// purego can dlopen on darwin too, but there the system BLAS is
		// Accelerate, with no soname from the list: not supported yet.
		return nil, fmt.Errorf("cblas: run-time loading is implemented for Linux, not %s", runtime.GOOS)
	}
	switch env := os.Getenv("ZEROENG_BLAS"); env {
	case "none":
		return nil, errors.New("cblas: disabled by ZEROENG_BLAS=none")
	case "":
	default:
		l, err := Open(env)
		if err != nil {
			return nil, fmt.Errorf("cblas: ZEROENG_BLAS=%s: %w", env, err)
		}
		return l, nil
	}
	var why []string
	for _, name := range Candidates {
		l, err := Open(name)
		if err == nil && !l.optimised() {
			// Debian's libblas3 (the reference BLAS) exports CBLAS too:
			// its GEMM is a plain triple loop, 30 times slower than the
			// Go kernels here (gpt.js bench: 8.8 s a step against 0.28).
			// An unknown library is taken only when named (ZEROENG_BLAS).
			l.release()
			err = errors.New("a CBLAS of no known optimised implementation (OpenBLAS, MKL, BLIS, ATLAS): the reference BLAS is slower than the Go kernels (install libopenblas0-pthread, or name a library with ZEROENG_BLAS)")
		}
		if err == nil {
			return l, nil
		}
		why = append(why, fmt.Sprintf("%s: %v", name, err))
	}
	return nil, fmt.Errorf("cblas: no CBLAS library found (set ZEROENG_BLAS to a path to choose one):\n\t%s", strings.Join(why, "\n\t"))
}

// Open loads the library at path (a file name, searched for by the dynamic
// loader, or a path) and binds it. It fails when the library does not
// export cblas_sgemm and cblas_dgemm.
func Open(path string) (*Lib, error) {
	l, err := open(path)
	if err != nil {
		return nil, err
	}
	if fixed := l.fixOpenBLASCore(); fixed != nil {
		l = fixed
	}
	return l, nil
}

// String describes the library in one line.
func (l *Lib) String() string {
	s := fmt.Sprintf("%s (%s)", l.Path, l.Flavour)
	if l.Config != "" {
		s += ": " + l.Config
	}
	if l.Note != "" {
		s += "; " + l.Note
	}
	return s
}

// SetThreads sets the number of threads the library uses for one call. It
// reports false when the library has no thread control known to this
// package.
func (l *Lib) SetThreads(n int) bool {
	if l.setThreads == nil {
		return false
	}
	l.setThreads(n)
	return true
}

// Threads reports the library's thread count, or 0 when unknown.
func (l *Lib) Threads() int {
	if l.getThreads == nil {
		return 0
	}
	return l.getThreads()
}

// Sgemm calls cblas_sgemm(CblasRowMajor, ...) with the arguments of
// gemm.Sgemm. It panics when a dimension does not fit the 32-bit integers
// of an LP64 CBLAS (Fits reports it beforehand) or a slice is too short.
func (l *Lib) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkArgs("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	l.sgemm(cblasRowMajor, trans(transA), trans(transB), int32(m), int32(n), int32(k),
		alpha, first(a), int32(lda), first(b), int32(ldb), beta, first(c), int32(ldc))
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
}

// Dgemm calls cblas_dgemm(CblasRowMajor, ...); see Sgemm.
func (l *Lib) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	checkArgs("Dgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	l.dgemm(cblasRowMajor, trans(transA), trans(transB), int32(m), int32(n), int32(k),
		alpha, first(a), int32(lda), first(b), int32(ldb), beta, first(c), int32(ldc))
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
}

// Fits reports whether every dimension and leading dimension fits the
// 32-bit integers of an LP64 CBLAS.
func Fits(m, n, k, lda, ldb, ldc int) bool {
	return max(m, n, k, lda, ldb, ldc) <= math.MaxInt32
}

func trans(t bool) int32 {
	if t {
		return cblasTrans
	}
	return cblasNoTrans
}

// first returns a pointer to the first element, or nil for an empty slice
// (an operand that is not read: k == 0).
func first[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return unsafe.SliceData(s)
}

// checkArgs panics on arguments that would make the library read or write
// outside the slices; CBLAS itself checks nothing but the leading
// dimensions, and reports those by printing, not by failing.
func checkArgs(fn string, transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("cblas: %s: negative dimension (m %d, n %d, k %d)", fn, m, n, k))
	}
	if !Fits(m, n, k, lda, ldb, ldc) {
		panic(fmt.Sprintf("cblas: %s: dimensions do not fit 32-bit CBLAS integers", fn))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	check := func(name, ldName string, rows, cols, length, ld int) {
		if ld < max(1, cols) {
			panic(fmt.Sprintf("cblas: %s: %s = %d < max(1, %d columns of %s)", fn, ldName, ld, cols, name))
		}
		if rows > 0 && cols > 0 && length < (rows-1)*ld+cols {
			panic(fmt.Sprintf("cblas: %s: len(%s) = %d < %d needed for %d×%d with %s %d", fn, name, length, (rows-1)*ld+cols, rows, cols, ldName, ld))
		}
	}
	check("a", "lda", ar, ac, la, lda)
	check("b", "ldb", br, bc, lb, ldb)
	check("c", "ldc", m, n, lc, ldc)
}

// cString returns the NUL-terminated string at the start of buf.
func cString(buf []byte) string {
	if i := strings.IndexByte(string(buf), 0); i >= 0 {
		buf = buf[:i]
	}
	return strings.TrimSpace(string(buf))
}
