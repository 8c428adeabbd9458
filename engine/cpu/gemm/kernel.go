package gemm

import (
	"fmt"
	"os"
	"strings"
)

// A kernel computes one mr×nr tile of C from a packed A panel (mr rows,
// k deep) and a packed B panel (k deep, nr columns):
//
//	C[r, x] = alpha·Σ_p A[p·mr + r]·B[p·nr + x] + beta·C[r, x]
//
// where row r of C starts at c + r·ldc. When beta is zero C is only
// written, never read. k may be zero.
//
// Its windows kernels read B in place rather than packed: row p of the B
// panel is the nr elements at b + offs[p], with tiles of their own height;
// its rows kernels read A in place: row i of the A panel is the k
// elements at a + offs[i], with tiles of their own (see windows.go); its
// positions kernels read A in place by columns: column p is the mr
// elements at a + offs[p] (positions.go). All
// of them add a tile's products in depth order, so the choice among them
// changes no bit of C.
type kernel[T scalar] struct {
	name   string
	mr, nr int
	fn     func(k int, a, b, c *T, ldc int, alpha, beta T)
	// windows are the windows kernels (tiles nr wide), the main one
	// first (windowsFor picks).
	windows []*windowsKernel[T]
	// rows are the rows kernels, narrowest tile first (rowsFor picks).
	rows []*rowsKernel[T]
	// positions are the positions kernels (positionsFor picks by the
	// rows' width; positions.go), none for most kernels.
	positions []*positionsKernel[T]
}

// windowsKernel computes an mr×nr tile of C (nr its kernel's) from a
// packed A panel of mr rows and B rows read in place.
type windowsKernel[T scalar] struct {
	mr int
	fn func(k int, a, b *T, offs *int32, c *T, ldc int, alpha, beta T)
}

// rowsKernel computes an mr×nr tile of C from mr rows of A read in place
// and a packed B panel.
type rowsKernel[T scalar] struct {
	mr, nr int
	fn     func(k int, a *T, offs *int32, b, c *T, ldc int, alpha, beta T)
}

// windowsFor returns the windows kernel for a product of m rows: the one
// that computes the fewest rows of C (every row costs its FMAs, needed or
// not), the first on a tie, whose taller tile loads less per FMA. On
// AVX-512, 16, 32 or 64 channels take the 8-row tile, 12, 24 or 48 the
// 12-row one.
func (k *kernel[T]) windowsFor(m int) *windowsKernel[T] {
	best := k.windows[0]
	for _, w := range k.windows[1:] {
		if ceilDiv(m, w.mr)*w.mr < ceilDiv(m, best.mr)*best.mr {
			best = w
		}
	}
	return best
}

// rowsFor returns the rows kernel for a product of n columns: the one that
// covers them in the fewest tiles (a tile twice as wide costs less than
// two), the narrower on a tie, which wastes fewer columns. On AVX-512 16
// columns (a 16-channel convolution's weight gradient) take the 8×16
// tile, 32 or more the 6×32 one.
func (k *kernel[T]) rowsFor(n int) *rowsKernel[T] {
	best := k.rows[0]
	for _, r := range k.rows[1:] {
		if ceilDiv(n, r.nr) < ceilDiv(n, best.nr) {
			best = r
		}
	}
	return best
}

// kernelSet holds the kernels usable on this machine, best first, and the
// one in use.
type kernelSet[T scalar] struct {
	cur *kernel[T]
	all []*kernel[T]
}

var (
	kernels32 kernelSet[float32]
	kernels64 kernelSet[float64]
)

func init() {
	// asmKernels (per architecture) lists the assembly kernels that this
	// CPU supports, fastest first; the Go kernel is always last.
	k32, k64 := asmKernels()
	kernels32.init(k32)
	kernels64.init(k64)
	if name := os.Getenv("ZEROENG_GEMM"); name != "" {
		if _, err := useKernel(name); err != nil {
			envErr = fmt.Errorf("ZEROENG_GEMM=%s names no GEMM kernel of this CPU (it has %s)", name, strings.Join(kernelNames(), ", "))
		}
	}
}

// The ZEROENG_GEMM environment variable, when it names a kernel this CPU
// supports ("avx512", "avx2" or "go"), overrides the choice, as
// ZEROENG_VMATH does the vector kernels': for comparing the kernels inside
// a whole training run (and against a library's of the same width). A name
// this CPU has no kernel of leaves the choice alone and is reported by
// EnvError.
var envErr error

// EnvError reports a ZEROENG_GEMM that names no kernel of this CPU, which
// the command line refuses rather than run on another kernel unnoticed.
func EnvError() error { return envErr }

// init lists asm, then the portable Go kernel, and uses the first. A kernel
// set without a rows kernel of its own uses Go's.
func (s *kernelSet[T]) init(asm []*kernel[T]) {
	goRows := &rowsKernel[T]{goMR, goNR, kernelGoRows[T]}
	s.all = append(asm, &kernel[T]{"go", goMR, goNR, kernelGo[T], []*windowsKernel[T]{{goMR, kernelGoWindows[T]}}, nil, nil})
	for _, k := range s.all {
		if len(k.rows) == 0 {
			k.rows = []*rowsKernel[T]{goRows}
		}
	}
	s.cur = s.all[0]
}

// Kernel describes the micro-kernels in use, for diagnostics
// ("sgemm avx512 12×32, dgemm avx512 12×16").
func Kernel() string {
	s, d := kernels32.cur, kernels64.cur
	return fmt.Sprintf("sgemm %s %d×%d, dgemm %s %d×%d", s.name, s.mr, s.nr, d.name, d.mr, d.nr)
}

// Vectorised reports whether this CPU has assembly kernels for its vector
// unit (AVX2 or AVX-512); without them only the portable Go kernel runs, a
// reference at a few percent of a library's rate. It is the machine's
// capability, whichever kernel ZEROENG_GEMM chose.
func Vectorised() bool { return kernels32.all[0].name != "go" }

// kernelNames lists the kernels usable on this machine, fastest first.
func kernelNames() []string {
	var names []string
	for _, k := range kernels32.all {
		names = append(names, k.name)
	}
	return names
}

// useKernel selects the kernels called name for both precisions and
// returns a function that restores the previous ones. It is the switch
// through which tests and benchmarks exercise every kernel on one machine;
// it must not be called while a product is running.
func useKernel(name string) (restore func(), err error) {
	prev32, prev64 := kernels32.cur, kernels64.cur
	var k32 *kernel[float32]
	var k64 *kernel[float64]
	for _, k := range kernels32.all {
		if k.name == name {
			k32 = k
		}
	}
	for _, k := range kernels64.all {
		if k.name == name {
			k64 = k
		}
	}
	if k32 == nil || k64 == nil {
		return nil, fmt.Errorf("gemm: kernel %q is not available on this machine (have %v)", name, kernelNames())
	}
	kernels32.cur, kernels64.cur = k32, k64
	return func() { kernels32.cur, kernels64.cur = prev32, prev64 }, nil
}
