package gemm

import (
	"fmt"
	"math"
)

// The positions product is GemmWindows's product with its tiles turned:
// a tile is MR consecutive positions of one window row (a row of a
// convolution's output) by NR rows of A (output channels), the positions
// broadcast and the channels the vectors, where GemmWindows's tiles run
// NR positions by MR channels.
//
// It exists for windows whose rows are narrow and not a multiple of the
// vector: a 14-wide image's rows fill a 16-lane vector at 88%, and
// GemmWindows either computes each row's last tile into scratch or,
// flattened (windowsInto in the CPU device), the rows' padding columns
// too and then packs the rows into the output. Fourteen positions (or
// eight, for rows of 8, 16 or 24) as a tile's rows waste nothing; the
// tile is then stored transposed, through
// a scratch tile in L1, so that C keeps its layout ([rows of A,
// positions]).
//
// Each element is the same sum in the same order as GemmWindows's (the
// depth in order, one FMA a step, the same K blocks): the two products
// are equal bit for bit, which the tests hold them to.

// positionsKernel computes an mr×nr tile of C from mr consecutive
// elements of A at each depth step's offset and a packed B panel:
//
//	C[i, x] = alpha·Σ_p a[offs[p] + i]·B[p·nr + x] + beta·C[i, x]
//
// mr must not exceed WindowsSlack: a row's last tile reads past it.
type positionsKernel[T scalar] struct {
	mr, nr int
	fn     func(k int, a *T, offs *int32, b, c *T, ldc int, alpha, beta T)
}

// positionsFor returns the positions kernel for a product of m rows of A
// over window rows of width positions: of those whose tile width divides
// m (and is nr, unless nr is 0), the one that computes the fewest
// positions (a row is a whole number of tiles), the taller on a tie; nil
// when there is none.
func (k *kernel[T]) positionsFor(m, width, nr int) *positionsKernel[T] {
	var best *positionsKernel[T]
	for _, p := range k.positions {
		if m <= 0 || m%p.nr != 0 || nr != 0 && p.nr != nr {
			continue
		}
		if best == nil || ceilDiv(width, p.mr)*p.mr < ceilDiv(width, best.mr)*best.mr ||
			ceilDiv(width, p.mr)*p.mr == ceilDiv(width, best.mr)*best.mr && p.mr > best.mr {
			best = p
		}
	}
	return best
}

// PositionsTile returns the height of the positions tile GemmPositionsA
// takes for a product of m rows of A over window rows of width positions
// (a row is a whole number of tiles), or 0 when this machine's kernel for
// T has no positions kernel for m rows (then use GemmWindowsA).
func PositionsTile[T ~float32 | ~float64](m, width int) int {
	if p := currentKernel[T]().positionsFor(m, width, 0); p != nil {
		return p.mr
	}
	return 0
}

// PositionsA is the A operand of GemmPositionsA packed once for several
// products that share it: the columns of each K block in panels of the
// kernels' width, as B panels are packed. It is only read by
// GemmPositionsA, from any number of goroutines.
type PositionsA[T ~float32 | ~float64] struct {
	kern   *kernel[T] // whose positions kernels of width nr take it
	nr     int
	m, k   int
	packed []T
}

// PositionsALen returns the length of the buffer PackPositionsA needs for
// an m×k A (PositionsTile(m, …) > 0).
func PositionsALen[T ~float32 | ~float64](m, k int) int { return m * k }

// PackPositionsA packs the row-major m×k A (row stride lda) into buf, at
// least PositionsALen(m, k) long, for GemmPositionsA. It panics, naming
// the argument, when the operands are inconsistent or PositionsTile(m, 1)
// is 0.
func PackPositionsA[T ~float32 | ~float64](buf []T, m, k int, a []T, lda int) PositionsA[T] {
	const fn = "PackPositionsA"
	if m < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: %s: negative dimension m = %d, k = %d", fn, m, k))
	}
	kern := currentKernel[T]()
	pk := kern.positionsFor(m, 1, 0)
	if pk == nil {
		panic(fmt.Sprintf("gemm: %s: no positions kernel for %d rows", fn, m))
	}
	if len(buf) < m*k {
		panic(fmt.Sprintf("gemm: %s: len(buf) = %d < %d", fn, len(buf), m*k))
	}
	checkGemm(fn, false, false, m, 1, k, len(a), lda, math.MaxInt, 1, math.MaxInt, 1)
	nr := pk.nr
	kcStep := kBlock(k)
	for p0 := 0; p0 < k; p0 += kcStep {
		kc := min(kcStep, k-p0)
		block := buf[m*p0:]
		for q := range m / nr {
			// Panel q holds rows q·nr … of A as the columns of B.
			packB(block[q*nr*kc:(q+1)*nr*kc], a, lda, true, p0, kc, q*nr, nr, nr)
		}
	}
	return PositionsA[T]{kern: kern, nr: nr, m: m, k: k, packed: buf[:m*k]}
}

// GemmPositionsA computes C = A·B, plus bias[i] on row i of C when bias is
// not nil, for A packed by PackPositionsA, a k×n B read in place through b
// (n a multiple of b.Width) and a row-major m×n C (row stride ldc), on up
// to threads threads (1: on the calling goroutine alone). C is only
// written. Each element is GemmWindows's bit for bit (with a bias:
// GemmWindows onto C filled with it, beta 1). It panics, naming the
// argument, when the operands are inconsistent.
func GemmPositionsA[T ~float32 | ~float64](a PositionsA[T], n int, b Windows[T], bias []T, c []T, ldc int, threads int) {
	if a.kern == nil {
		panic("gemm: GemmPositionsA: A was not packed by PackPositionsA")
	}
	checkWindows(a.m, n, a.k, a.m*a.k, max(1, a.k), b, len(c), ldc)
	if bias != nil && len(bias) != a.m {
		panic(fmt.Sprintf("gemm: GemmPositionsA: %d biases for %d rows", len(bias), a.m))
	}
	if a.m == 0 || n == 0 {
		return
	}
	if a.k == 0 {
		for i := range a.m {
			row := c[i*ldc : i*ldc+n]
			if bias == nil {
				clear(row)
				continue
			}
			for j := range row {
				row[j] = bias[i]
			}
		}
		return
	}
	// The tile for these rows, of the width the panels were packed for.
	kern := a.kern.positionsFor(a.m, b.Width, a.nr)
	ws := getWorkspace[T]()
	defer putWorkspace(ws)
	j := &ws.positions
	*j = positionsJob[T]{kern: kern, a: a, b: b, bias: bias, c: c, ldc: ldc, kcStep: kBlock(a.k)}
	j.rowTiles = ceilDiv(b.Width, kern.mr)
	j.chunking = ws.chunking(n/b.Width*j.rowTiles, threadsFor(a.m, n, a.k, threads), kern.mr*kern.nr)
	runChunks(j.chunks, ws.positionsFn)
	*j = positionsJob[T]{}
}

// positionsJob is one GemmPositionsA call, for the loops run by
// parallel.For.
type positionsJob[T scalar] struct {
	kern     *positionsKernel[T]
	a        PositionsA[T]
	b        Windows[T]
	bias, c  []T
	ldc      int
	kcStep   int
	rowTiles int
	chunking[T]
}

// tiles computes the tiles of chunks [c0, c1): each tile's positions
// against every panel of A, every K block in turn into the scratch tile,
// which is then stored transposed into C.
func (j *positionsJob[T]) tiles(c0, c1 int) {
	mr, nr, m, k := j.kern.mr, j.kern.nr, j.a.m, j.a.k
	for ch := c0; ch < c1; ch++ {
		lo, hi, edge := j.units(ch)
		for t := lo; t < hi; t++ {
			row, x0 := t/j.rowTiles, t%j.rowTiles*mr
			cols := min(mr, j.b.Width-x0)
			ap := &j.b.Base[row*j.b.Stride+x0]
			for q := range m / nr {
				var beta T
				if j.bias != nil {
					for i := range mr {
						copy(edge[i*nr:(i+1)*nr], j.bias[q*nr:])
					}
					beta = 1
				}
				for p0 := 0; p0 < k; p0 += j.kcStep {
					kc := min(j.kcStep, k-p0)
					j.kern.fn(kc, ap, &j.b.Offs[p0], &j.a.packed[m*p0+q*nr*kc], &edge[0], nr, 1, blockBeta(beta, p0))
				}
				// C[q·nr + x, position i] = edge[i, x].
				transposeRows(j.c[q*nr*j.ldc+row*j.b.Width+x0:], edge, nr, 0, cols, 0, nr, j.ldc)
			}
		}
	}
}
