package gemm

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// Windows is a B operand that is never formed: element (p, j) of the k×n
// matrix is
//
//	Base[Offs[p] + (j/Width)·Stride + j%Width]
//
// so that row p of B is runs of Width elements of Base, Stride apart,
// starting at Offs[p]. With Base a zero-padded image, Offs[p] the place of
// tap p (channel, kernel row, kernel column) in it and Stride its padded
// row, the columns are a stride-1 convolution's output positions, and the
// product of the weights [O, C·KH·KW] with this B is the convolution: an
// implicit GEMM, in which the micro-kernel loads each tap's row from the
// image itself, where im2col would first copy every tap's row into a
// column matrix and the GEMM would copy it again into packed panels.
//
// The kernels read whole tiles, so Base must extend WindowsSlack elements
// past the last element of B; they are read but never reach C.
type Windows[T ~float32 | ~float64] struct {
	Base          []T
	Offs          []int32
	Width, Stride int
}

// WindowsSlack is the number of elements Base must hold past the last
// element of a Windows operand: the widest tile, less one, rounded up.
const WindowsSlack = 32

// GemmWindows computes C = alpha·A·B + beta·C for a row-major m×k A (row
// stride lda), a k×n B read in place through b (n a multiple of b.Width)
// and a row-major m×n C (row stride ldc), on up to threads threads (1: on
// the calling goroutine alone). Zero alpha or k and zero beta behave as in
// Sgemm. It panics, naming the argument, when the operands are
// inconsistent.
func GemmWindows[T ~float32 | ~float64](m, n, k int, alpha T, a []T, lda int, b Windows[T], beta T, c []T, ldc int, threads int) {
	checkWindows(m, n, k, len(a), lda, b, len(c), ldc)
	if trivial(m, n, k, alpha, beta, c, ldc) {
		return
	}
	ws := getWorkspace[T]()
	defer putWorkspace(ws)
	kern := currentKernel[T]()
	pa := packWindowsA(kern, grow(&ws.backing[0], windowsALen(kern, m, k)), m, k, a, lda)
	gemmWindows(pa, n, alpha, b, beta, c, ldc, threads, ws)
}

// WindowsA is the A operand of GemmWindows packed once for several
// products that share it, as a convolution's weights are shared by its
// samples: PackWindowsA packs it, GemmWindowsA multiplies it. It holds
// the panels of every K block for the kernel its rows chose, and is only
// read by GemmWindowsA, from any number of goroutines.
type WindowsA[T ~float32 | ~float64] struct {
	kern   *kernel[T]
	m, k   int
	packed []T
}

// WindowsALen returns the length of the buffer PackWindowsA needs for an
// m×k A.
func WindowsALen[T ~float32 | ~float64](m, k int) int { return windowsALen(currentKernel[T](), m, k) }

func windowsALen[T ~float32 | ~float64](kern *kernel[T], m, k int) int {
	mr := kern.windowsFor(m).mr
	return ceilDiv(m, mr) * mr * k
}

// Rows is the number of rows of the packed A, m.
func (a WindowsA[T]) Rows() int { return a.m }

// PackWindowsA packs the row-major m×k A (row stride lda) into buf, at
// least WindowsALen(m, k) long, for GemmWindowsA. It panics, naming the
// argument, when the operands are inconsistent.
func PackWindowsA[T ~float32 | ~float64](buf []T, m, k int, a []T, lda int) WindowsA[T] {
	const fn = "PackWindowsA"
	kern := currentKernel[T]()
	if m < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: %s: negative dimension m = %d, k = %d", fn, m, k))
	}
	if need := windowsALen(kern, m, k); len(buf) < need {
		panic(fmt.Sprintf("gemm: %s: len(buf) = %d < %d", fn, len(buf), need))
	}
	checkGemm(fn, false, false, m, 1, k, len(a), lda, math.MaxInt, 1, math.MaxInt, 1)
	return packWindowsA(kern, buf, m, k, a, lda)
}

// GemmWindowsA is GemmWindows with A packed by PackWindowsA.
func GemmWindowsA[T ~float32 | ~float64](a WindowsA[T], n int, alpha T, b Windows[T], beta T, c []T, ldc int, threads int) {
	if a.kern == nil {
		panic("gemm: GemmWindowsA: A was not packed by PackWindowsA")
	}
	checkWindows(a.m, n, a.k, a.m*a.k, max(1, a.k), b, len(c), ldc)
	if trivial(a.m, n, a.k, alpha, beta, c, ldc) {
		return
	}
	ws := getWorkspace[T]()
	defer putWorkspace(ws)
	gemmWindows(a, n, alpha, b, beta, c, ldc, threads, ws)
}

// packWindowsA packs A for kern's windows kernel of its rows: each K
// block's MR-row panels, block after block (block p0's at npa·mr·p0).
func packWindowsA[T ~float32 | ~float64](kern *kernel[T], buf []T, m, k int, a []T, lda int) WindowsA[T] {
	mr := kern.windowsFor(m).mr
	npa := ceilDiv(m, mr)
	kcStep := kBlock(k)
	for p0 := 0; p0 < k; p0 += kcStep {
		kc := min(kcStep, k-p0)
		block := buf[npa*mr*p0:]
		for i := range npa {
			packA(block[i*mr*kc:(i+1)*mr*kc], a, lda, false, i*mr, min(mr, m-i*mr), p0, kc, mr)
		}
	}
	return WindowsA[T]{kern: kern, m: m, k: k, packed: buf[:npa*mr*k]}
}

// WindowsTileWidth returns the width of the tiles GemmWindows computes for
// T: nr consecutive columns of one window row (by as many rows of C as the
// kernel chosen for the product's rows computes). A window row whose width
// is not a multiple of nr ends in a partial tile, computed whole into a
// scratch tile and merged into C.
func WindowsTileWidth[T ~float32 | ~float64]() (nr int) {
	return currentKernel[T]().nr
}

// currentKernel is the kernel in use for T.
func currentKernel[T ~float32 | ~float64]() *kernel[T] {
	var z T
	if _, ok := any(z).(float32); ok {
		return any(kernels32.cur).(*kernel[T])
	}
	return any(kernels64.cur).(*kernel[T])
}

// checkWindows panics when the operands of GemmWindows do not fit.
func checkWindows[T ~float32 | ~float64](m, n, k, la, lda int, b Windows[T], lc, ldc int) {
	const fn = "GemmWindows"
	checkGemm(fn, false, false, m, n, k, la, lda, math.MaxInt, max(1, n), lc, ldc)
	if b.Width <= 0 || n%b.Width != 0 {
		panic(fmt.Sprintf("gemm: %s: n = %d is not a multiple of the window width %d", fn, n, b.Width))
	}
	if b.Stride < 0 {
		panic(fmt.Sprintf("gemm: %s: negative window stride %d", fn, b.Stride))
	}
	if len(b.Offs) < k {
		panic(fmt.Sprintf("gemm: %s: %d window offsets for depth %d", fn, len(b.Offs), k))
	}
	if m == 0 || n == 0 || k == 0 {
		return
	}
	hi := int32(0)
	for p, off := range b.Offs[:k] {
		if off < 0 {
			panic(fmt.Sprintf("gemm: %s: window offset %d of row %d is negative", fn, off, p))
		}
		hi = max(hi, off)
	}
	last := int(hi) + (n/b.Width-1)*b.Stride + b.Width - 1
	if need := last + 1 + WindowsSlack; len(b.Base) < need {
		panic(fmt.Sprintf("gemm: %s: len(Base) = %d < %d: the last element of B is %d and the kernels read %d past it",
			fn, len(b.Base), need, last, WindowsSlack))
	}
}

// gemmWindows is GemmWindows on A packed (for the kernel it names), its
// operands checked, with ws for its loops.
//
// Loops: for each K block, the tiles, NR consecutive columns of one window
// row, are shared among the threads, and each tile runs every A panel
// (small: the weights) against the same B rows, which stay in L1 between
// the panels.
func gemmWindows[T ~float32 | ~float64](a WindowsA[T], n int, alpha T, b Windows[T], beta T, c []T, ldc int, threads int, ws *workspace[T]) {
	kern, m, k := a.kern, a.m, a.k
	threads = threadsFor(m, n, k, threads)
	wk := kern.windowsFor(m)
	mr, nr := wk.mr, kern.nr
	j := &ws.windows
	*j = windowsJob[T]{kern: wk, nr: nr, m: m, ldc: ldc, alpha: alpha, b: b, c: c}
	j.rowTiles = ceilDiv(b.Width, nr)
	ntiles := n / b.Width * j.rowTiles
	j.npa = ceilDiv(m, mr)
	kcStep := kBlock(k)
	for p0 := 0; p0 < k; p0 += kcStep {
		j.p0, j.kc = p0, min(kcStep, k-p0)
		j.beta = blockBeta(beta, p0)
		j.packed = a.packed[j.npa*mr*p0 : j.npa*mr*(p0+j.kc)]
		j.chunking = ws.chunking(ntiles, threads, mr*nr)
		runChunks(j.chunks, ws.windowsFn)
	}
	*j = windowsJob[T]{} // drop the references to the caller's slices
}

// chunking splits n units among up to threads threads in chunks, each
// with a scratch tile of tile elements of its own.
type chunking[T scalar] struct {
	n, chunks, per, tile int
	edges                []T
}

func (ws *workspace[T]) chunking(n, threads, tile int) chunking[T] {
	chunks := 1
	if threads > 1 {
		chunks = min(n, 4*threads)
	}
	ws.edge = grow(&ws.backing[2], chunks*tile)
	return chunking[T]{n: n, chunks: chunks, per: ceilDiv(n, chunks), tile: tile, edges: ws.edge}
}

// units returns chunk ch's units and scratch tile.
func (c *chunking[T]) units(ch int) (lo, hi int, edge []T) {
	return ch * c.per, min(c.n, (ch+1)*c.per), c.edges[ch*c.tile : (ch+1)*c.tile]
}

// runChunks runs fn over chunks [0, chunks), on the pool when there are
// several.
func runChunks(chunks int, fn func(lo, hi int)) {
	if chunks > 1 {
		parallel.For(chunks, 1, fn)
		return
	}
	fn(0, 1)
}

// windowsJob is one GemmWindows call's K block, for the loops run by
// parallel.For (kept in the workspace, so that no call allocates).
type windowsJob[T scalar] struct {
	kern          *windowsKernel[T]
	nr, m, ldc    int
	alpha, beta   T
	b             Windows[T]
	c, packed     []T
	p0, kc        int
	npa, rowTiles int
	chunking[T]
}

// tiles computes the tiles of chunks [c0, c1).
func (j *windowsJob[T]) tiles(c0, c1 int) {
	mr, nr, kc := j.kern.mr, j.nr, j.kc
	offs := &j.b.Offs[j.p0]
	for ch := c0; ch < c1; ch++ {
		lo, hi, edge := j.units(ch)
		for t := lo; t < hi; t++ {
			row, jx := t/j.rowTiles, t%j.rowTiles*nr
			cols := min(nr, j.b.Width-jx)
			bp := &j.b.Base[row*j.b.Stride+jx]
			for i := 0; i < j.npa; i++ {
				ap := &j.packed[i*mr*kc]
				rows := min(mr, j.m-i*mr)
				off := i*mr*j.ldc + row*j.b.Width + jx
				if rows == mr && cols == nr {
					j.kern.fn(kc, ap, bp, offs, &j.c[off], j.ldc, j.alpha, j.beta)
					continue
				}
				j.kern.fn(kc, ap, bp, offs, &edge[0], nr, j.alpha, 0)
				mergeEdge(j.c[off:], j.ldc, edge, nr, rows, cols, j.beta)
			}
		}
	}
}

// Rows is an A operand that is never formed: row i of the m×k matrix is
// the run Base[Offs[i] : Offs[i]+k]. A stride-1 convolution's weight
// gradient is such a product: with Base a zero-padded image and the
// depth its positions, row i of A is tap i's view of the image, the
// output gradient (padded to the same rows) is B, and C is the weight
// gradient transposed.
type Rows[T ~float32 | ~float64] struct {
	Base []T
	Offs []int32
}

// GemmRows computes C = alpha·A·op(B) + beta·C for an m×k A read in place
// through a, op(B) k×n (B, or Bᵀ when transB, stored with row stride ldb)
// and a row-major m×n C (row stride ldc), on up to threads threads (1: on
// the calling goroutine alone). Zero alpha or k and zero beta behave as
// in Sgemm. It panics, naming the argument, when the operands are
// inconsistent.
func GemmRows[T ~float32 | ~float64](m, n, k int, alpha T, a Rows[T], transB bool, b []T, ldb int, beta T, c []T, ldc int, threads int) {
	const fn = "GemmRows"
	checkGemm(fn, false, transB, m, n, k, math.MaxInt, max(1, k), len(b), ldb, len(c), ldc)
	if len(a.Offs) < m {
		panic(fmt.Sprintf("gemm: %s: %d row offsets for %d rows", fn, len(a.Offs), m))
	}
	if m > 0 && n > 0 && k > 0 {
		for i, off := range a.Offs[:m] {
			if off < 0 || int(off)+k > len(a.Base) {
				panic(fmt.Sprintf("gemm: %s: row %d at offset %d, %d long, is outside len(Base) = %d", fn, i, off, k, len(a.Base)))
			}
		}
	}
	gemmRows(currentKernel[T](), m, n, k, alpha, a, transB, b, ldb, beta, c, ldc, threads)
}

// gemmRows is GemmRows on kern's rows kernel, its operands checked.
//
// Loops: for each K block, B is packed into NR-column panels; the tiles
// (an A panel of MR rows against a B panel) are shared among the
// threads, A panel by A panel, so that consecutive tiles read the same
// rows of A.
func gemmRows[T ~float32 | ~float64](kern *kernel[T], m, n, k int, alpha T, a Rows[T], transB bool, b []T, ldb int, beta T, c []T, ldc int, threads int) {
	if trivial(m, n, k, alpha, beta, c, ldc) {
		return
	}
	threads = threadsFor(m, n, k, threads)
	rk := kern.rowsFor(n)
	mr, nr := rk.mr, rk.nr
	ws := getWorkspace[T]()
	defer putWorkspace(ws)
	j := &ws.rows
	*j = rowsJob[T]{kern: rk, m: m, n: n, ldc: ldc, alpha: alpha, c: c}
	j.npa, j.npb = ceilDiv(m, mr), ceilDiv(n, nr)
	// The offsets of the rows, the last panel's filled with its first
	// row's: the kernel reads whole panels, the rows past m reach only
	// the scratch tile.
	if cap(ws.offs) < j.npa*mr {
		ws.offs = make([]int32, j.npa*mr)
	}
	j.offs = ws.offs[:j.npa*mr]
	copy(j.offs, a.Offs[:m])
	for i := m; i < len(j.offs); i++ {
		j.offs[i] = a.Offs[(m-1)/mr*mr]
	}
	kcStep := kBlock(k)
	for p0 := 0; p0 < k; p0 += kcStep {
		j.kc = min(kcStep, k-p0)
		j.beta = blockBeta(beta, p0)
		ws.reserve(0, j.npb*nr*j.kc, 0)
		j.packed = ws.b
		for q := 0; q < j.npb; q++ {
			packB(j.packed[q*nr*j.kc:(q+1)*nr*j.kc], b, ldb, transB, p0, j.kc, q*nr, min(nr, n-q*nr), nr)
		}
		j.a = &a.Base[p0]
		j.chunking = ws.chunking(j.npa*j.npb, threads, mr*nr)
		runChunks(j.chunks, ws.rowsFn)
	}
	*j = rowsJob[T]{}
}

// rowsJob is one GemmRows call's K block, for the loops run by
// parallel.For.
type rowsJob[T scalar] struct {
	kern        *rowsKernel[T]
	m, n, ldc   int
	alpha, beta T
	a           *T // the rows' origin, moved to the K block
	offs        []int32
	c, packed   []T
	kc          int
	npa, npb    int
	chunking[T]
}

// tiles computes the tiles of chunks [c0, c1).
func (j *rowsJob[T]) tiles(c0, c1 int) {
	mr, nr, kc := j.kern.mr, j.kern.nr, j.kc
	for ch := c0; ch < c1; ch++ {
		lo, hi, edge := j.units(ch)
		for t := lo; t < hi; t++ {
			i, q := t/j.npb, t%j.npb
			rows, cols := min(mr, j.m-i*mr), min(nr, j.n-q*nr)
			bp := &j.packed[q*nr*kc]
			off := i*mr*j.ldc + q*nr
			if rows == mr && cols == nr {
				j.kern.fn(kc, j.a, &j.offs[i*mr], bp, &j.c[off], j.ldc, j.alpha, j.beta)
				continue
			}
			j.kern.fn(kc, j.a, &j.offs[i*mr], bp, &edge[0], nr, j.alpha, 0)
			mergeEdge(j.c[off:], j.ldc, edge, nr, rows, cols, j.beta)
		}
	}
}

// mergeEdge stores the valid rows×cols corner of a kernel tile (row
// stride nr) into C: C = tile + beta·C.
func mergeEdge[T scalar](c []T, ldc int, tile []T, nr, rows, cols int, beta T) {
	for r := 0; r < rows; r++ {
		dst := c[r*ldc:][:cols]
		src := tile[r*nr:][:cols]
		if beta == 0 {
			copy(dst, src)
			continue
		}
		for x, v := range src {
			dst[x] = v + beta*dst[x]
		}
	}
}
