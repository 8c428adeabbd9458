package cpu

import (
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
)

// maxOperands is the most operands an elementwise kernel walks together
// (Where: dst, cond, a, b).
const maxOperands = 4

// grain is the number of elements below which a loop is not worth splitting
// across threads (about the cost of waking a worker).
const grain = 1 << 14

// walk is the iteration space of an elementwise kernel: several operands
// over one shape, with dimensions of extent 1 dropped and adjacent
// dimensions merged wherever every operand allows it, so that a contiguous
// tensor is a single row however many dimensions it has.
type walk struct {
	shape []int                // coalesced, at least one dimension
	st    [maxOperands][]int   // per operand, per dimension
	off   [maxOperands]int     // per operand base offset
	n     int                  // number of operands
	buf   [2 * maxOperands]int // backing store for small shapes
	sbuf  [maxOperands][8]int  // backing store for strides
}

func newWalk(shape []int, views ...device.View) *walk {
	w := &walk{n: len(views)}
	w.shape = w.buf[:0]
	for k := range views {
		w.st[k] = w.sbuf[k][:0]
		w.off[k] = views[k].Offset
	}
	for i, ext := range shape {
		if ext == 1 {
			continue
		}
		last := len(w.shape) - 1
		merge := last >= 0
		for k := 0; merge && k < w.n; k++ {
			merge = w.st[k][last] == views[k].Strides[i]*ext
		}
		if merge {
			w.shape[last] *= ext
			for k := 0; k < w.n; k++ {
				w.st[k][last] = views[k].Strides[i]
			}
			continue
		}
		w.shape = append(w.shape, ext)
		for k := 0; k < w.n; k++ {
			w.st[k] = append(w.st[k], views[k].Strides[i])
		}
	}
	if len(w.shape) == 0 {
		w.shape = append(w.shape, 1)
		for k := 0; k < w.n; k++ {
			w.st[k] = append(w.st[k], 1)
		}
	}
	return w
}

// inner is the extent of the innermost dimension.
func (w *walk) inner() int { return w.shape[len(w.shape)-1] }

// innerStride is operand k's stride along the innermost dimension.
func (w *walk) innerStride(k int) int { return w.st[k][len(w.shape)-1] }

// rows is the number of innermost rows.
func (w *walk) rows() int {
	r := 1
	for _, e := range w.shape[:len(w.shape)-1] {
		r *= e
	}
	return r
}

// run calls fn for every segment of every innermost row, in parallel. A
// segment is [lo, hi) of a row whose element 0 sits at offsets off; long
// rows are cut into segments so that a single huge row still uses every
// thread. fn must not keep off.
func (w *walk) run(fn func(off *[maxOperands]int, lo, hi int)) {
	inner := w.inner()
	rows := w.rows()
	seg := inner
	if rows*inner > grain && rows < 4*parallel.Threads() {
		seg = max(grain, (inner+3)/4)
	}
	w.runSegments(seg, max(1, grain/seg), fn)
}

// runSegments cuts every innermost row into segments of seg elements and
// runs fn over them in parallel, unitGrain segments at least per chunk.
func (w *walk) runSegments(seg, unitGrain int, fn func(off *[maxOperands]int, lo, hi int)) {
	inner := w.inner()
	segs := (inner + seg - 1) / seg
	units := w.rows() * segs
	nd := len(w.shape) - 1
	parallel.For(units, unitGrain, func(u0, u1 int) {
		var off [maxOperands]int
		for u := u0; u < u1; u++ {
			row, s := u/segs, u%segs
			// Offsets of the row's first element: decompose the row index
			// over the outer dimensions.
			for k := 0; k < w.n; k++ {
				off[k] = w.off[k]
			}
			r := row
			for d := nd - 1; d >= 0; d-- {
				i := r % w.shape[d]
				r /= w.shape[d]
				for k := 0; k < w.n; k++ {
					off[k] += i * w.st[k][d]
				}
			}
			fn(&off, s*seg, min((s+1)*seg, inner))
		}
	})
}
