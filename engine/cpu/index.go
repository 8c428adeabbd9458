package cpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The indexing kernels: index_select and gather move elements, index_add and
// scatter_add accumulate them.
//
// The moves walk the destination as an elementwise op does, with the index
// as an extra operand (stride 0 along the axes it does not vary over) and
// the source's stride along axis replaced by 0 in the walk and applied to
// the index value instead: the walk coalesces and splits the loops whatever
// the strides of the three views.
//
// The accumulations must not let two threads add into one element, and
// must add in an order that does not depend on scheduling: they split the
// work over the destination (its axes other than axis, or ranges along
// axis) and let each thread add its share in index order.
//
// Every index is checked before anything is written, so that an error leaves
// the destination as it was.

// IndexSelect implements device.Device: dst[..., i, ...] = src[..., index[i], ...]
// along axis, for a 1-D int64 index. It moves elements without looking at
// them, so every dtype works.
func (d *Device) IndexSelect(dst, src, index device.View, axis int) error {
	if err := checkIndex1D("index_select", index); err != nil {
		return err
	}
	if err := checkIndices("index_select", index, axis, src.Shape[axis]); err != nil {
		return err
	}
	if dst.DType != src.DType {
		return fmt.Errorf("cpu: index_select of %v into %v", src.DType, dst.DType)
	}
	if dst.Numel() == 0 {
		return nil
	}
	var sbuf, ibuf [8]int
	srcW := withStride(src, axis, 0, sbuf[:0])
	idxW := device.View{Buf: index.Buf, DType: index.DType, Offset: index.Offset, Strides: zeroStrides(len(dst.Shape), axis, index.Strides[0], ibuf[:0])}
	return selectBySize(newWalk(dst.Shape, dst, srcW, idxW), dst, src, index, src.Strides[axis])
}

// Gather implements device.Device with torch.gather's semantics:
// dst[i][j][k] = src[i][index[i][j][k]][k] for axis 1. dst has index's shape;
// src may be larger than index along the other axes.
func (d *Device) Gather(dst, src, index device.View, axis int) error {
	if err := checkIndices("gather", index, axis, src.Shape[axis]); err != nil {
		return err
	}
	if dst.DType != src.DType {
		return fmt.Errorf("cpu: gather of %v into %v", src.DType, dst.DType)
	}
	if dst.Numel() == 0 {
		return nil
	}
	var sbuf [8]int
	srcW := withStride(src, axis, 0, sbuf[:0])
	return selectBySize(newWalk(index.Shape, dst, srcW, index), dst, src, index, src.Strides[axis])
}

// selectBySize runs selectRun on the elements' bits: a move needs no
// arithmetic, so the element size is all that matters.
func selectBySize(w *walk, dst, src, index device.View, axisStride int) error {
	idx := elems[int64](index.Buf)
	switch dst.DType.Size() {
	case 1:
		selectRun(w, elems[uint8](dst.Buf), elems[uint8](src.Buf), idx, axisStride)
	case 2:
		selectRun(w, elems[uint16](dst.Buf), elems[uint16](src.Buf), idx, axisStride)
	case 4:
		selectRun(w, elems[uint32](dst.Buf), elems[uint32](src.Buf), idx, axisStride)
	case 8:
		selectRun(w, elems[uint64](dst.Buf), elems[uint64](src.Buf), idx, axisStride)
	default:
		return fmt.Errorf("cpu: indexing of %v", dst.DType)
	}
	return nil
}

// selectRun copies src[o1 + index·sa] to dst[o0] along the walk of (dst,
// src with stride 0 along axis, index).
func selectRun[T any](w *walk, dst, src []T, idx []int64, sa int) {
	ds, ss, is := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		o0, o1, o2 := off[0]+lo*ds, off[1]+lo*ss, off[2]+lo*is
		n := hi - lo
		if is != 0 {
			// The indexed axis is the innermost one (gather along the
			// last axis): one lookup per element.
			for i := 0; i < n; i++ {
				dst[o0+i*ds] = src[o1+i*ss+int(idx[o2+i*is])*sa]
			}
			return
		}
		// One index for the whole segment (an embedding row).
		o1 += int(idx[o2]) * sa
		if ds == 1 && ss == 1 {
			copy(dst[o0:o0+n], src[o1:o1+n])
			return
		}
		for i := 0; i < n; i++ {
			dst[o0+i*ds] = src[o1+i*ss]
		}
	})
}

// IndexAdd implements device.Device: dst[..., index[i], ...] += src[..., i, ...]
// along axis. Repeated indices accumulate in the order of i, on one thread:
// the threads own disjoint ranges of dst along axis (each scans the whole
// index and keeps the entries in its range), so that no two threads ever add
// into the same element and the result does not depend on scheduling. An
// embedding's gradient is added a whole row at a time.
func (d *Device) IndexAdd(dst, src, index device.View, axis int) error {
	if err := checkIndex1D("index_add", index); err != nil {
		return err
	}
	if err := checkIndices("index_add", index, axis, dst.Shape[axis]); err != nil {
		return err
	}
	if dst.DType != src.DType {
		return fmt.Errorf("cpu: index_add of %v into %v", src.DType, dst.DType)
	}
	if src.Numel() == 0 {
		return nil
	}
	if isHalf(dst.DType) {
		return d.widened([]*device.View{&dst}, []*device.View{&dst, &src}, func() error { return d.IndexAdd(dst, src, index, axis) })
	}
	var rbuf [3][8]int
	rest := dropAxis(src.Shape, axis, rbuf[0][:0])
	dstR := device.View{Buf: dst.Buf, Offset: dst.Offset, Strides: dropAxis(dst.Strides, axis, rbuf[1][:0])}
	srcR := device.View{Buf: src.Buf, Offset: src.Offset, Strides: dropAxis(src.Strides, axis, rbuf[2][:0])}
	w := newWalk(rest, dstR, srcR)
	a := indexAddArgs{k: src.Shape[axis], ext: dst.Shape[axis], da: dst.Strides[axis], sa: src.Strides[axis],
		idx: elems[int64](index.Buf), io: index.Offset, ia: index.Strides[0]}
	switch dst.DType {
	case dtype.Float32:
		indexAddRun(w, elems[float32](dst.Buf), elems[float32](src.Buf), &a)
	case dtype.Float64:
		indexAddRun(w, elems[float64](dst.Buf), elems[float64](src.Buf), &a)
	case dtype.Int64:
		indexAddRun(w, elems[int64](dst.Buf), elems[int64](src.Buf), &a)
	default:
		return fmt.Errorf("cpu: index_add of %v", dst.DType)
	}
	return nil
}

// indexAddArgs describe the indexed axis of an index_add: k slices of src
// (stride sa) added into ext slices of dst (stride da) at the indices
// idx[io + j·ia].
type indexAddArgs struct {
	k, ext, da, sa int
	idx            []int64
	io, ia         int
}

// indexAddRun splits the work into (block of dst along axis, row of the walk
// over the other axes) units: rows alone when there are enough of them, dst
// blocks when they are few (an embedding table has one).
func indexAddRun[T accum](w *walk, dst, src []T, a *indexAddArgs) {
	inner, rows := w.inner(), w.rows()
	ds, ss := w.innerStride(0), w.innerStride(1)
	threads := parallel.Threads()
	blocks := 1
	if rows < 4*threads && a.k*rows*inner > grain {
		blocks = min(a.ext, (4*threads+rows-1)/rows)
	}
	units := rows * blocks
	unitGrain := max(1, grain/max(1, a.k*inner/blocks))
	nd := len(w.shape) - 1
	parallel.For(units, unitGrain, func(u0, u1 int) {
		for u := u0; u < u1; u++ {
			row, b := u/blocks, u%blocks
			lo, hi := int64(b*a.ext/blocks), int64((b+1)*a.ext/blocks)
			o0, o1 := w.off[0], w.off[1]
			r := row
			for dd := nd - 1; dd >= 0; dd-- {
				i := r % w.shape[dd]
				r /= w.shape[dd]
				o0 += i * w.st[0][dd]
				o1 += i * w.st[1][dd]
			}
			for j := 0; j < a.k; j++ {
				v := a.idx[a.io+j*a.ia]
				if v < lo || v >= hi {
					continue
				}
				d0, s0 := o0+int(v)*a.da, o1+j*a.sa
				if ds == 1 && ss == 1 {
					addTo(dst[d0:d0+inner], src[s0:s0+inner])
					continue
				}
				for i := 0; i < inner; i++ {
					dst[d0+i*ds] += src[s0+i*ss]
				}
			}
		}
	})
}

// ScatterAdd implements device.Device with Tensor.scatter_add_'s semantics:
// dst[i][index[i][j][k]][k] += src[i][j][k] for axis 1, src having index's
// shape. The work is split over the axes other than axis, which address
// distinct elements of dst, and each thread adds along axis in order.
func (d *Device) ScatterAdd(dst, src, index device.View, axis int) error {
	if err := checkIndices("scatter_add", index, axis, dst.Shape[axis]); err != nil {
		return err
	}
	if dst.DType != src.DType {
		return fmt.Errorf("cpu: scatter_add of %v into %v", src.DType, dst.DType)
	}
	if index.Numel() == 0 {
		return nil
	}
	if isHalf(dst.DType) {
		return d.widened([]*device.View{&dst}, []*device.View{&dst, &src}, func() error { return d.ScatterAdd(dst, src, index, axis) })
	}
	var rbuf [4][8]int
	rest := dropAxis(index.Shape, axis, rbuf[0][:0])
	dstR := device.View{Buf: dst.Buf, Offset: dst.Offset, Strides: dropAxis(dst.Strides, axis, rbuf[1][:0])}
	srcR := device.View{Buf: src.Buf, Offset: src.Offset, Strides: dropAxis(src.Strides, axis, rbuf[2][:0])}
	idxR := device.View{Buf: index.Buf, Offset: index.Offset, Strides: dropAxis(index.Strides, axis, rbuf[3][:0])}
	w := newWalk(rest, dstR, srcR, idxR)
	return scatterAdd(w, dst.DType, dst, src, index, index.Shape[axis], dst.Strides[axis], src.Strides[axis], index.Strides[axis])
}

// scatterAdd dispatches scatterRun on the element type.
func scatterAdd(w *walk, dt dtype.DType, dst, src, index device.View, n, da, sa, ia int) error {
	idx := elems[int64](index.Buf)
	switch dt {
	case dtype.Float32:
		scatterRun(w, elems[float32](dst.Buf), elems[float32](src.Buf), idx, n, da, sa, ia)
	case dtype.Float64:
		scatterRun(w, elems[float64](dst.Buf), elems[float64](src.Buf), idx, n, da, sa, ia)
	case dtype.Int64:
		scatterRun(w, elems[int64](dst.Buf), elems[int64](src.Buf), idx, n, da, sa, ia)
	default:
		return fmt.Errorf("cpu: scatter_add of %v", dt)
	}
	return nil
}

// scatterRun walks the axes other than axis (operands dst, src, index with
// axis removed) and, for each segment, adds the n slices along axis in
// order: dst[o0 + index[o2 + j·ia]·da] += src[o1 + j·sa].
func scatterRun[T accum](w *walk, dst, src []T, idx []int64, n, da, sa, ia int) {
	ds, ss, is := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	runWeighted(w, n, func(off *[maxOperands]int, lo, hi int) {
		o0, o1, o2 := off[0]+lo*ds, off[1]+lo*ss, off[2]+lo*is
		m := hi - lo
		for j := 0; j < n; j++ {
			s0 := o1 + j*sa
			i0 := o2 + j*ia
			if is != 0 {
				// scatter_add: an index per element.
				for i := 0; i < m; i++ {
					dst[o0+i*ds+int(idx[i0+i*is])*da] += src[s0+i*ss]
				}
				continue
			}
			// An index shared by the segment (a broadcast index).
			d0 := o0 + int(idx[i0])*da
			if ds == 1 && ss == 1 {
				addTo(dst[d0:d0+m], src[s0:s0+m])
				continue
			}
			for i := 0; i < m; i++ {
				dst[d0+i*ds] += src[s0+i*ss]
			}
		}
	})
}

// runWeighted is walk.run for loops whose every element costs weight units
// of work (the slices accumulated along the indexed axis): a short walk with
// a heavy element is still split across the threads, by cutting its rows
// into segments.
func runWeighted(w *walk, weight int, fn func(off *[maxOperands]int, lo, hi int)) {
	weight = max(1, weight)
	inner, rows := w.inner(), w.rows()
	units := 2 * parallel.Threads()
	seg := inner
	if rows*inner*weight > grain && rows < units {
		// Segments of at least grain work, a multiple of a cache line of
		// float32, and enough of them for every thread.
		seg = max((grain+weight-1)/weight, (rows*inner+units-1)/units)
		seg = min(inner, max(64, (seg+15)/16*16))
	}
	w.runSegments(seg, max(1, grain/(seg*weight)), fn)
}

// checkIndex1D rejects an index that is not a vector (a layout the tensor
// layer promised not to send).
func checkIndex1D(op string, index device.View) error {
	if len(index.Shape) != 1 || index.DType != dtype.Int64 {
		return fmt.Errorf("cpu: %s: index must be a 1-D int64 tensor, not %v of shape %v", op, index.DType, index.Shape)
	}
	return nil
}

// checkIndices returns an error naming the first index (in row-major order)
// outside [0, extent). Negative indices are errors too: the tensor layer
// wraps Python-style negative indices before it calls a kernel.
func checkIndices(op string, index device.View, axis, extent int) error {
	if index.DType != dtype.Int64 {
		return fmt.Errorf("cpu: %s: index must be int64, not %v", op, index.DType)
	}
	n := index.Numel()
	if n == 0 {
		return nil
	}
	data := elems[int64](index.Buf)
	lim := uint64(extent)
	if index.Contiguous() {
		for i, v := range data[index.Offset : index.Offset+n] {
			if uint64(v) >= lim {
				return indexError(op, v, unravel(i, index.Shape), axis, extent)
			}
		}
		return nil
	}
	rank := len(index.Shape)
	var pbuf [8]int
	pos := pbuf[:0]
	for range rank {
		pos = append(pos, 0)
	}
	off := index.Offset
	for range n {
		if v := data[off]; uint64(v) >= lim {
			return indexError(op, v, pos, axis, extent)
		}
		for dd := rank - 1; dd >= 0; dd-- {
			pos[dd]++
			off += index.Strides[dd]
			if pos[dd] < index.Shape[dd] {
				break
			}
			off -= index.Strides[dd] * index.Shape[dd]
			pos[dd] = 0
		}
	}
	return nil
}

func indexError(op string, v int64, pos []int, axis, extent int) error {
	var at string
	if len(pos) == 1 {
		at = strconv.Itoa(pos[0])
	} else {
		parts := make([]string, len(pos))
		for i, p := range pos {
			parts[i] = strconv.Itoa(p)
		}
		at = "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Errorf("%s: index %d at position %s is out of range for dimension %d of size %d", op, v, at, axis, extent)
}

// unravel converts a row-major linear position into a multi-index.
func unravel(i int, shape []int) []int {
	pos := make([]int, len(shape))
	for dd := len(shape) - 1; dd >= 0; dd-- {
		if shape[dd] > 0 {
			pos[dd] = i % shape[dd]
			i /= shape[dd]
		}
	}
	return pos
}

// withStride returns v with its stride along axis replaced.
func withStride(v device.View, axis, stride int, buf []int) device.View {
	v.Strides = append(buf, v.Strides...)
	v.Strides[axis] = stride
	return v
}

// zeroStrides returns rank strides, all 0 but stride at axis (if axis >= 0).
func zeroStrides(rank, axis, stride int, buf []int) []int {
	st := buf[:0]
	for range rank {
		st = append(st, 0)
	}
	if axis >= 0 {
		st[axis] = stride
	}
	return st
}

// dropAxis returns s without its element at axis.
func dropAxis(s []int, axis int, buf []int) []int {
	out := append(buf[:0], s[:axis]...)
	return append(out, s[axis+1:]...)
}
