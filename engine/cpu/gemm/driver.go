package gemm

import (
	"sync"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
)

// scalar is the element type of the GEMM driver.
type scalar interface{ ~float32 | ~float64 }

// Cache blocking. The loop structure is that of BLIS and GotoBLAS, mirrored
// for row-major C (C = A·B row-major is Cᵀ = Bᵀ·Aᵀ column-major):
//
//	for each K block of kc (≤ kcMax)          pack op(A) m×kc into MR-row panels
//	  for each macro tile (mt rows, nt cols)  in parallel
//	    pack its op(B) kc×nt into NR-column   in the thread's own buffer, which
//	    panels                                stays in its L2 (kc·nt·4 B ≤ 768 KiB)
//	    for each MR-row A panel               stays in L1 (MR·kc·4 B = 18 KiB)
//	      for each NR-column B panel          streams from L2
//	        micro-kernel: MR×NR tile of C += A panel · B panel
//
// Each thread packs the B sub-block of the tile it computes next, as
// GotoBLAS does, rather than all threads packing the whole of op(B) before
// any computes: the packed panels are written into the L2 of the core that
// reads them instead of making a round trip through the shared cache, and
// one thread's packing (bound by memory) runs while the other computes.
// Consecutive tiles of a thread that share their columns pack them once.
//
// The sizes are chosen for the development machine (48 KiB L1d and 2 MiB L2
// per core, see docs/benchmarks-gemm.md for the measurements) and are
// reasonable for any AVX2 or AVX-512 core: the L1-resident A panel takes
// under half of a 32 KiB L1d with the AVX2 kernel (MR = 6), and the B
// sub-block under half of a 1 MiB L2. On one thread at 1024³, K blocks of
// 256 to 512 measured within 3% of each other, 768 4% slower and 1024 8–17%
// slower.
const (
	kcMax = 384  // depth of a K block
	mbMax = 4096 // rows of A packed at once (bounds the packing buffer)
	nbMax = 4096 // columns of a block (bounds its macro tiles' scratch tiles)
	ntMax = 512  // columns of a macro tile: the B sub-block that stays in L2

	// prefetchRows is how many rows ahead packing a row-major B
	// fetches.
	prefetchRows = 8

	// smallWork is the m·n·k up to which a product is computed directly,
	// without packing. Packing and the micro-kernel cost about 0.15 µs
	// up front and then win from 6×6×6 on (0.2 µs against 0.35 µs; at
	// 16×16×16, 0.5 µs against 5.8 µs).
	smallWork = 128

	// minParallelFlops is the work below which a product runs on one
	// thread: waking a pool worker takes 5 µs on an idle machine and up
	// to 100 µs on a busy one, while a product of this size takes about
	// 50 µs on one core.
	minParallelFlops = 2 * 128 * 128 * 256
)

// gemm computes C = alpha·op(A)·op(B) + beta·C with kernel kern on up to
// threads threads. The arguments have been checked.
func gemm[T scalar](kern *kernel[T], transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int, threads int) {
	if trivial(m, n, k, alpha, beta, c, ldc) {
		return
	}
	if int64(m)*int64(n)*int64(k) <= smallWork {
		naive(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	threads = threadsFor(m, n, k, threads)

	ws := getWorkspace[T]()
	defer putWorkspace(ws)
	g := &ws.job
	*g = job[T]{kern: kern, transA: transA, transB: transB, a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, alpha: alpha}
	mr, nr := kern.mr, kern.nr

	kcStep := kBlock(k)

	for i0 := 0; i0 < m; i0 += mbMax {
		mb := min(mbMax, m-i0)
		for j0 := 0; j0 < n; j0 += nbMax {
			nb := min(nbMax, n-j0)
			g.i0, g.mb, g.j0, g.nb = i0, mb, j0, nb
			g.npa = (mb + mr - 1) / mr
			g.tiling(threads)
			slots := min(threads, g.ntiles)
			for p0 := 0; p0 < k; p0 += kcStep {
				g.p0, g.kc = p0, min(kcStep, k-p0)
				g.beta = blockBeta(beta, p0)
				g.bSlot = g.nt * g.kc
				ws.reserve(g.npa*mr*g.kc, slots*g.bSlot, g.ntiles*mr*nr)
				g.packA, g.packB, g.edge = ws.a, ws.b, ws.edge
				g.strips = ws.strips(slots)
				if threads > 1 {
					// Panels are a few KiB each: a handful per chunk.
					parallel.For(g.npa, 4, ws.packFn)
					parallel.ForThreads(g.ntiles, 1, slots, ws.tileFn)
				} else {
					g.pack(0, g.npa)
					g.tiles(0, 0, g.ntiles)
				}
			}
		}
	}
	*g = job[T]{} // drop the references to the caller's slices
}

// job holds one call's parameters, for the loops run by parallel.For.
type job[T scalar] struct {
	kern           *kernel[T]
	transA, transB bool
	a, b, c        []T
	lda, ldb, ldc  int
	alpha, beta    T

	i0, mb, j0, nb, p0, kc int // the block being computed
	npa                    int // number of A panels in it
	mt, nt, nti, ntiles    int // macro tiles: mt×nt, nti along m

	packA, edge []T
	// packB holds a B sub-block (bSlot elements) for each thread, its
	// own buffer while it computes its tiles.
	packB []T
	bSlot int
	// strips is the column strip each thread's buffer holds in this K
	// block (−1: none yet).
	strips []int
}

// tiling splits the mb×nb block into macro tiles: columns in strips of at
// most ntMax, then halved along the longer side until every thread has at
// least two tiles, so that the pool can balance them.
func (g *job[T]) tiling(threads int) {
	mr, nr := g.kern.mr, g.kern.nr
	g.mt = roundUp(g.mb, mr)
	g.nt = min(ntMax, roundUp(g.nb, nr))
	count := func() int { return ceilDiv(g.mb, g.mt) * ceilDiv(g.nb, g.nt) }
	for threads > 1 && count() < 2*threads && (g.mt > mr || g.nt > nr) {
		if g.mt/mr >= g.nt/nr {
			g.mt = roundUp(ceilDiv(g.mt, 2), mr)
		} else {
			g.nt = roundUp(ceilDiv(g.nt, 2), nr)
		}
	}
	g.nti = ceilDiv(g.mb, g.mt)
	g.ntiles = g.nti * ceilDiv(g.nb, g.nt)
}

// pack packs A panels [lo, hi) of the current block.
func (g *job[T]) pack(lo, hi int) {
	mr, kc := g.kern.mr, g.kc
	for p := lo; p < hi; p++ {
		i := p * mr
		packA(g.packA[p*mr*kc:(p+1)*mr*kc], g.a, g.lda, g.transA, g.i0+i, min(mr, g.mb-i), g.p0, kc, mr)
	}
}

// packStrip packs into buf the B panels of columns [jLo, jHi) of the
// current block.
func (g *job[T]) packStrip(buf []T, jLo, jHi int) {
	nr, kc := g.kern.nr, g.kc
	if whole := (jHi - jLo) / nr; !g.transB && whole > 1 {
		// A row-major B: its whole panels a depth row at a time, each
		// row of the strip read as one run (a panel at a time would
		// read nr elements of each of kc rows, ldb apart), and the
		// rows a few ahead fetched meanwhile: each run starts in a
		// page of its own, where the hardware's prefetchers have not
		// yet seen a stream (a weight of 4096×4096 comes from memory).
		run := whole * nr
		bytes := run * int(unsafe.Sizeof(buf[0]))
		row := func(p int) []T { return g.b[(g.p0+p)*g.ldb+g.j0+jLo:][:run] }
		for p := range min(prefetchRows, kc) {
			prefetch(unsafe.Pointer(&row(p)[0]), bytes)
		}
		for p := range kc {
			if p+prefetchRows < kc {
				prefetch(unsafe.Pointer(&row(p + prefetchRows)[0]), bytes)
			}
			vmath.CopyBlock(buf[p*nr:], nr*kc, row(p), nr, whole, nr)
		}
		jLo += whole * nr
		buf = buf[whole*nr*kc:]
	}
	for j := jLo; j < jHi; j += nr {
		q := (j - jLo) / nr
		packB(buf[q*nr*kc:(q+1)*nr*kc], g.b, g.ldb, g.transB, g.p0, kc, g.j0+j, min(nr, g.nb-j), nr)
	}
}

// tiles computes macro tiles [lo, hi) on thread (parallel.ForThreads),
// each with its B sub-block packed into the thread's buffer. Tiles are
// numbered column strip first, so that consecutive tiles share their B
// sub-block, which is then packed once, also across the thread's chunks
// of the K block (the static schedule gives a thread consecutive ones).
func (g *job[T]) tiles(thread, lo, hi int) {
	mr, nr, kc := g.kern.mr, g.kern.nr, g.kc
	fn := g.kern.fn
	buf := g.packB[thread*g.bSlot : (thread+1)*g.bSlot]
	packed := &g.strips[thread] // the column strip in buf, from the thread's chunks before
	for t := lo; t < hi; t++ {
		ti, tj := t%g.nti, t/g.nti
		iLo, jLo := ti*g.mt, tj*g.nt
		iHi, jHi := min(iLo+g.mt, g.mb), min(jLo+g.nt, g.nb)
		if tj != *packed {
			g.packStrip(buf, jLo, jHi)
			*packed = tj
		}
		edge := g.edge[t*mr*nr : (t+1)*mr*nr]
		for i := iLo; i < iHi; i += mr {
			ap := &g.packA[(i/mr)*mr*kc]
			rows := min(mr, g.mb-i)
			for j := jLo; j < jHi; j += nr {
				bp := &buf[((j-jLo)/nr)*nr*kc]
				cols := min(nr, g.nb-j)
				off := (g.i0+i)*g.ldc + g.j0 + j
				if rows == mr && cols == nr {
					fn(kc, ap, bp, &g.c[off], g.ldc, g.alpha, g.beta)
					continue
				}
				// A partial tile: the kernel writes a whole tile into the
				// scratch tile, of which the valid part is merged into C.
				fn(kc, ap, bp, &edge[0], nr, g.alpha, 0)
				mergeEdge(g.c[off:], g.ldc, edge, nr, rows, cols, g.beta)
			}
		}
	}
}

// workspace is the per-call state, reused through a free list so that
// steady-state calls do not allocate: the packing buffers, the scratch
// tiles, the job and the closures handed to parallel.For.
type workspace[T scalar] struct {
	job     job[T]
	a, b    []T // packed A and B, 64-byte aligned
	edge    []T // one scratch tile per macro tile, for partial micro-tiles
	packFn  func(lo, hi int)
	tileFn  func(t, lo, hi int)
	backing [3][]T

	// The windows and rows products' calls (windows.go).
	windows   windowsJob[T]
	rows      rowsJob[T]
	windowsFn func(lo, hi int)
	rowsFn    func(lo, hi int)
	// The positions products' calls (positions.go).
	positions   positionsJob[T]
	positionsFn func(lo, hi int)
	offs        []int32 // GemmRows's row offsets, whole panels
	stripBuf    []int   // job.strips
}

func newWorkspace[T scalar]() *workspace[T] {
	ws := &workspace[T]{}
	ws.packFn = func(lo, hi int) { ws.job.pack(lo, hi) }
	ws.tileFn = func(t, lo, hi int) { ws.job.tiles(t, lo, hi) }
	ws.windowsFn = func(lo, hi int) { ws.windows.tiles(lo, hi) }
	ws.rowsFn = func(lo, hi int) { ws.rows.tiles(lo, hi) }
	ws.positionsFn = func(lo, hi int) { ws.positions.tiles(lo, hi) }
	return ws
}

// strips returns n column strips marked empty (−1), for job.strips.
func (ws *workspace[T]) strips(n int) []int {
	if cap(ws.stripBuf) < n {
		ws.stripBuf = make([]int, n)
	}
	s := ws.stripBuf[:n]
	for i := range s {
		s[i] = -1
	}
	return s
}

// reserve makes the buffers at least na, nb and ne elements long.
func (ws *workspace[T]) reserve(na, nb, ne int) {
	ws.a = grow(&ws.backing[0], na)
	ws.b = grow(&ws.backing[1], nb)
	ws.edge = grow(&ws.backing[2], ne)
}

// grow returns a 64-byte aligned slice of n elements from *backing,
// reallocating it when it is too short.
func grow[T scalar](backing *[]T, n int) []T {
	const align = 64
	var z T
	size := int(unsafe.Sizeof(z))
	pad := align / size
	if cap(*backing) < n+pad {
		// Grow by a quarter more than asked so that slowly growing shapes
		// settle after a few calls.
		*backing = make([]T, n+n/4+pad)
	}
	buf := (*backing)[:cap(*backing)]
	skip := int((align - uintptr(unsafe.Pointer(&buf[0]))%align) % align / uintptr(size))
	return buf[skip : skip+n : skip+n]
}

// The workspaces live on free lists rather than in a sync.Pool: a garbage
// collection empties a Pool, and every product after it would allocate its
// packing buffers again (megabytes a training step, whenever the script's
// own allocations set off a collection). A list keeps at most freeMax of
// each type, as many as the products that run at once.
//
// Each list is cut into stripes, each with its own lock on its own cache
// line, and a goroutine takes and returns its workspaces at the stripe its
// stack's address picks (stripeOf): threads that run products at once (a
// convolution's samples, in-process ranks) then each find theirs where
// they left it, instead of taking turns on one lock whose cache line
// moves between their cores at every call. A stripe found empty takes one
// from the others before allocating, so there are no more workspaces than
// before.
var (
	free32 freeList[float32]
	free64 freeList[float64]
)

const (
	freeMax = 64
	stripes = 8
)

type freeList[T scalar] struct {
	s [stripes]stripe[T]
}

type stripe[T scalar] struct {
	mu sync.Mutex
	ws []*workspace[T]
	_  [64]byte // a cache line of its own
}

// stripeOf picks the calling goroutine's stripe from the address of its
// stack (a goroutine's stack is its own; one that grows moves, and its
// workspaces follow it after a call or two).
func stripeOf() int {
	var marker byte
	addr := uint64(uintptr(unsafe.Pointer(&marker))) >> 13 // stacks are at least 8 KiB apart
	return int(addr * 0x9e3779b97f4a7c15 >> (64 - 3))      // Fibonacci hashing into 8 stripes
}

func (l *freeList[T]) get() *workspace[T] {
	me := stripeOf()
	for i := range stripes {
		s := &l.s[(me+i)%stripes]
		s.mu.Lock()
		if n := len(s.ws); n > 0 {
			ws := s.ws[n-1]
			s.ws[n-1] = nil
			s.ws = s.ws[:n-1]
			s.mu.Unlock()
			return ws
		}
		s.mu.Unlock()
	}
	return newWorkspace[T]()
}

func (l *freeList[T]) put(ws *workspace[T]) {
	s := &l.s[stripeOf()]
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ws) < freeMax/stripes {
		s.ws = append(s.ws, ws)
	}
}

func getWorkspace[T scalar]() *workspace[T] {
	var z T
	if _, ok := any(z).(float32); ok {
		return any(free32.get()).(*workspace[T])
	}
	return any(free64.get()).(*workspace[T])
}

func putWorkspace[T scalar](ws *workspace[T]) {
	var z T
	if _, ok := any(z).(float32); ok {
		free32.put(any(ws).(*workspace[float32]))
		return
	}
	free64.put(any(ws).(*workspace[float64]))
}

// trivial computes the products with nothing to multiply (m, n, k or
// alpha zero) and reports whether it did. As in the reference BLAS, A and
// B are then not read: NaN in them does not reach C.
func trivial[T scalar](m, n, k int, alpha, beta T, c []T, ldc int) bool {
	if m == 0 || n == 0 {
		return true
	}
	if alpha == 0 || k == 0 {
		scale(m, n, beta, c, ldc)
		return true
	}
	return false
}

// threadsFor is the threads a product of m·n·k may use: one below the
// work that pays for waking a pool worker.
func threadsFor(m, n, k, threads int) int {
	if flops(m, n, k) < minParallelFlops {
		return 1
	}
	return threads
}

// kBlock is the depth of a product's K blocks: equal blocks (1024 = 3×344
// rather than 384+384+256, so that no block is too thin to amortise the
// C update) of a multiple of 4 (every B panel, kc·NR elements, on a
// cache-line boundary). It depends on k alone, so a product's sums do not
// change with the threads that share it.
func kBlock(k int) int {
	if k <= 0 {
		return 1 // no blocks: any step ends the loop (PackWindowsA of depth 0)
	}
	nk := ceilDiv(k, kcMax)
	return roundUp(ceilDiv(k, nk), 4)
}

// blockBeta is the beta of the K block starting at depth p0: the later
// blocks accumulate onto the first.
func blockBeta[T scalar](beta T, p0 int) T {
	if p0 > 0 {
		return 1
	}
	return beta
}

// scale sets C = beta·C, or C = 0 when beta is zero (even over NaN).
func scale[T scalar](m, n int, beta T, c []T, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc:][:n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// naive computes a small product directly from the unpacked operands.
func naive[T scalar](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	// Element (i, p) of op(A) is a[i*ai + p*ap]; likewise for B.
	ai, ap := lda, 1
	if transA {
		ai, ap = 1, lda
	}
	bp, bj := ldb, 1
	if transB {
		bp, bj = 1, ldb
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s T
			for p := 0; p < k; p++ {
				s += a[i*ai+p*ap] * b[p*bp+j*bj]
			}
			s *= alpha
			if beta != 0 {
				s += beta * c[i*ldc+j]
			}
			c[i*ldc+j] = s
		}
	}
}

// flops is the work of an m×n×k product, 2·m·n·k, in 64 bits so that it
// does not overflow on 32-bit platforms.
func flops(m, n, k int) int64 { return 2 * int64(m) * int64(n) * int64(k) }

func ceilDiv(a, b int) int { return (a + b - 1) / b }
func roundUp(a, b int) int { return ceilDiv(a, b) * b }
