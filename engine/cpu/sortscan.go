package cpu

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The kernels that work along one axis, a row at a time: Scan (cumulative
// sums and products) and Sort. Both walk the operands over their shape
// with the axis taken out, so that each walk element is one row, and hand
// whole rows to the worker pool: a row is scanned or sorted on one thread,
// in order, which makes the result independent of scheduling.

// rowWalk is the walk over the rows of views along axis: their shape and
// strides without the axis.
func rowWalk(axis int, views ...device.View) *walk {
	shape := slices.Delete(slices.Clone(views[0].Shape), axis, axis+1)
	rows := make([]device.View, len(views))
	for i, v := range views {
		v.Strides = slices.Delete(slices.Clone(v.Strides), axis, axis+1)
		v.Shape = shape
		rows[i] = v
	}
	return newWalk(shape, rows...)
}

// runRows calls fn for consecutive rows [lo, hi) of the walk's innermost
// dimension, in parallel, with enough rows per call that a call does at
// least grain elements' work (n elements a row).
func (w *walk) runRows(n int, fn func(off *[maxOperands]int, lo, hi int)) {
	w.runSegments(min(w.inner(), max(1, grain/max(n, 1))), 1, fn)
}

// checkAxisOp validates the operands of an op along axis: equal shapes,
// an axis inside them.
func checkAxisOp(op string, axis int, views ...device.View) error {
	nd := len(views[0].Shape)
	if axis < 0 || axis >= nd {
		return fmt.Errorf("cpu: %s along axis %d of a %d-dimensional view", op, axis, nd)
	}
	for _, v := range views[1:] {
		if !slices.Equal(v.Shape, views[0].Shape) {
			return fmt.Errorf("cpu: %s of shape %v into shape %v", op, views[len(views)-1].Shape, v.Shape)
		}
	}
	return nil
}

// Scan implements device.Device: each row is scanned on one thread from
// its first element (its last when reverse), into a float64 accumulator
// for floats (int64, wrapping, for int64) that is rounded to the element
// type at every output: cpu_cum_base_kernel's loop with PyTorch's CPU
// accumulator type (double for float32; float32 for the 16-bit types,
// which are widened here to float32 and so accumulate in float64 too).
func (d *Device) Scan(op device.ScanOp, dst, src device.View, axis int, reverse bool) error {
	if op != device.CumSum && op != device.CumProd {
		return fmt.Errorf("cpu: scan op %v", op)
	}
	if dst.DType != src.DType {
		return fmt.Errorf("cpu: %v of %v into %v", op, src.DType, dst.DType)
	}
	if err := checkAxisOp(op.String(), axis, dst, src); err != nil {
		return err
	}
	if dst.Numel() == 0 {
		return nil
	}
	if anyHalf(dst, src) {
		return d.widened([]*device.View{&dst}, []*device.View{&src}, func() error { return d.Scan(op, dst, src, axis, reverse) })
	}
	w := rowWalk(axis, dst, src)
	n, ds, ss := src.Shape[axis], dst.Strides[axis], src.Strides[axis]
	switch src.DType {
	case dtype.Float32:
		scanRun[float32, float64](w, op, elems[float32](dst.Buf), elems[float32](src.Buf), n, ds, ss, reverse)
	case dtype.Float64:
		scanRun[float64, float64](w, op, elems[float64](dst.Buf), elems[float64](src.Buf), n, ds, ss, reverse)
	case dtype.Int64:
		scanRun[int64, int64](w, op, elems[int64](dst.Buf), elems[int64](src.Buf), n, ds, ss, reverse)
	default:
		return fmt.Errorf("cpu: %v of %v", op, src.DType)
	}
	return nil
}

// scanRun scans every row of n elements (strides ds, ss along the axis).
// Each element of a row is read before it is written, so dst may be src.
func scanRun[T accum, A float64 | int64](w *walk, op device.ScanOp, dst, src []T, n, ds, ss int, reverse bool) {
	s0, s1 := w.innerStride(0), w.innerStride(1)
	first := 0
	if reverse {
		first, ds, ss = n-1, -ds, -ss
	}
	w.runRows(n, func(off *[maxOperands]int, lo, hi int) {
		for r := lo; r < hi; r++ {
			o0, o1 := off[0]+r*s0-first*ds, off[1]+r*s1-first*ss
			if op == device.CumSum {
				var acc A
				for j := 0; j < n; j++ {
					acc += A(src[o1+j*ss])
					dst[o0+j*ds] = T(acc)
				}
				continue
			}
			acc := A(1)
			for j := 0; j < n; j++ {
				acc *= A(src[o1+j*ss])
				dst[o0+j*ds] = T(acc)
			}
		}
	})
}

// Sort implements device.Device: each row is sorted on one thread by the
// total order sortCmp (NaN above every number, ties by index), which
// gives what a stable sort gives and what the GPU's sorting network
// gives. The values are moved as they are (the 16-bit types are compared
// as float32, exactly, and moved as bits), so values may be src.
func (d *Device) Sort(values, indices, src device.View, axis int, descending bool) error {
	if err := checkSelection("sort", values, indices, src); err != nil {
		return err
	}
	if err := checkAxisOp("sort", axis, values, indices, src); err != nil {
		return err
	}
	if values.Numel() == 0 {
		return nil
	}
	w, n, vs, is, ss, idx := selectionRows(axis, values, indices, src)
	switch src.DType {
	case dtype.Float32:
		sortRun32(w, elems[float32](values.Buf), idx, elems[float32](src.Buf), n, vs, is, ss, descending, func(x float32) float32 { return x })
	case dtype.Float64:
		sortRun(w, elems[float64](values.Buf), idx, elems[float64](src.Buf), n, vs, is, ss, descending, func(x float64) float64 { return x })
	case dtype.Int64:
		sortRun(w, elems[int64](values.Buf), idx, elems[int64](src.Buf), n, vs, is, ss, descending, func(x int64) int64 { return x })
	case dtype.BFloat16:
		sortRun32(w, elems[uint16](values.Buf), idx, elems[uint16](src.Buf), n, vs, is, ss, descending, func(x uint16) float32 { return dtype.BF16(x).Float32() })
	case dtype.Float16:
		sortRun32(w, elems[uint16](values.Buf), idx, elems[uint16](src.Buf), n, vs, is, ss, descending, func(x uint16) float32 { return dtype.F16(x).Float32() })
	default:
		return fmt.Errorf("cpu: sort of %v", src.DType)
	}
	return nil
}

// checkSelection checks the element types of an op that writes src's
// values and their int64 indices (Sort, TopK).
func checkSelection(op string, values, indices, src device.View) error {
	if indices.DType != dtype.Int64 {
		return fmt.Errorf("cpu: %s indices must be int64, not %v", op, indices.DType)
	}
	if values.DType != src.DType {
		return fmt.Errorf("cpu: %s of %v into %v", op, src.DType, values.DType)
	}
	return nil
}

// selectionRows is the walk over the rows along axis of such an op, the
// rows' length in src, the three operands' strides along it and the
// indices' elements.
func selectionRows(axis int, values, indices, src device.View) (w *walk, n, vs, is, ss int, idx []int64) {
	return rowWalk(axis, values, indices, src), src.Shape[axis], values.Strides[axis], indices.Strides[axis],
		src.Strides[axis], elems[int64](indices.Buf)
}

type sortKey interface{ ~float32 | ~float64 | ~int64 }

// sortCmp is the order of Sort: a NaN is greater than every number and
// equal keys (NaNs among them) are ordered by their index, so that no two
// elements of a row compare equal. descending reverses the order of the
// keys, not that of the indices of equal keys.
func sortCmp[K sortKey](a K, ai int, b K, bi int, descending bool) int {
	c := 0
	switch an, bn := a != a, b != b; {
	case an && bn:
	case an:
		c = 1
	case bn:
		c = -1
	default:
		c = cmp.Compare(a, b) // +0 and −0 are equal
	}
	if descending {
		c = -c
	}
	if c == 0 {
		return cmp.Compare(ai, bi)
	}
	return c
}

// sortRun sorts every row of n elements of src (T as stored, compared by
// key) into vals and idx.
func sortRun[T any, K sortKey](w *walk, vals []T, idx []int64, src []T, n, vs, is, ss int, descending bool, key func(T) K) {
	s0, s1, s2 := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	type item struct {
		k K
		v T
		i int
	}
	w.runRows(n*max(1, bitsLen(n)), func(off *[maxOperands]int, lo, hi int) {
		row := make([]item, n)
		for r := lo; r < hi; r++ {
			vo, io, so := off[0]+r*s0, off[1]+r*s1, off[2]+r*s2
			for j := range row {
				v := src[so+j*ss]
				row[j] = item{key(v), v, j}
			}
			slices.SortFunc(row, func(a, b item) int { return sortCmp(a.k, a.i, b.k, b.i, descending) })
			for j, it := range row {
				vals[vo+j*vs] = it.v
				idx[io+j*is] = int64(it.i)
			}
		}
	})
}

// sortRun32 is sortRun for keys that are float32: each element becomes one
// uint64 (rowKeys32) and a row sorts as plain integers, without a
// comparison function (3-4x faster than sortRun, measured on rows of 196).
// Rows longer than 2^32 take sortRun.
func sortRun32[T any](w *walk, vals []T, idx []int64, src []T, n, vs, is, ss int, descending bool, key func(T) float32) {
	if uint64(n) > 1<<32 {
		sortRun(w, vals, idx, src, n, vs, is, ss, descending, key)
		return
	}
	s0, s1, s2 := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	w.runRows(n*max(1, bitsLen(n)), func(off *[maxOperands]int, lo, hi int) {
		keys := make([]uint64, n)
		orig := make([]T, n) // the row as it was: values may be src
		for r := lo; r < hi; r++ {
			so := off[2] + r*s2
			for j := range orig {
				orig[j] = src[so+j*ss]
			}
			rowKeys32(keys, orig, 0, 1, descending, key)
			slices.Sort(keys)
			writeKeyed(keys, vals, idx, off[0]+r*s0, vs, off[1]+r*s1, is, orig, 0, 1)
		}
	})
}

// rowKeys32 sets keys[j] to element j's place in Sort's order (its key's
// orderedKey32, flipped when descending) above j, for the len(keys)
// elements of src from so with stride ss: unique integers whose order is
// Sort's, ties by index. float32 rows read their values directly: through
// key, a call an element took most of a vocabulary's top 50.
func rowKeys32[T any](keys []uint64, src []T, so, ss int, descending bool, key func(T) float32) {
	var flip uint32
	if descending {
		flip = math.MaxUint32
	}
	if f32, ok := any(src).([]float32); ok {
		for j := range keys {
			keys[j] = uint64(orderedKey32(f32[so+j*ss])^flip)<<32 | uint64(j)
		}
		return
	}
	for j := range keys {
		keys[j] = uint64(orderedKey32(key(src[so+j*ss]))^flip)<<32 | uint64(j)
	}
}

// writeKeyed writes the elements that keys name (their indices in the low
// 32 bits), in keys' order, into vals (from vo, stride vs), taking them
// from src (from so, stride ss), and their indices into idx.
func writeKeyed[T any](keys []uint64, vals []T, idx []int64, vo, vs, io, is int, src []T, so, ss int) {
	for j, e := range keys {
		i := int(uint32(e))
		vals[vo+j*vs] = src[so+i*ss]
		idx[io+j*is] = int64(i)
	}
}

// TopK implements device.TopKer: each row's k first elements of Sort's
// order, from a bounded max-heap of the keys of sortRun32 (O(n log k); on
// rows of random values most elements cost one comparison with the heap's
// top) for float32 and the 16-bit floats, and from a sorted copy of the
// row for the other types.
func (d *Device) TopK(values, indices, src device.View, axis, k int, largest bool) error {
	if err := checkSelection("topk", values, indices, src); err != nil {
		return err
	}
	if axis < 0 || axis >= len(src.Shape) {
		return fmt.Errorf("cpu: topk along axis %d of a %d-dimensional view", axis, len(src.Shape))
	}
	want := slices.Clone(src.Shape)
	want[axis] = k
	if k < 0 || k > src.Shape[axis] || !slices.Equal(values.Shape, want) || !slices.Equal(indices.Shape, want) {
		return fmt.Errorf("cpu: topk of %d from shape %v into shapes %v and %v", k, src.Shape, values.Shape, indices.Shape)
	}
	if values.Numel() == 0 {
		return nil
	}
	w, n, vs, is, ss, idx := selectionRows(axis, values, indices, src)
	switch src.DType {
	case dtype.Float32:
		topkRun32(w, elems[float32](values.Buf), idx, elems[float32](src.Buf), n, k, vs, is, ss, largest, func(x float32) float32 { return x })
	case dtype.BFloat16:
		topkRun32(w, elems[uint16](values.Buf), idx, elems[uint16](src.Buf), n, k, vs, is, ss, largest, func(x uint16) float32 { return dtype.BF16(x).Float32() })
	case dtype.Float16:
		topkRun32(w, elems[uint16](values.Buf), idx, elems[uint16](src.Buf), n, k, vs, is, ss, largest, func(x uint16) float32 { return dtype.F16(x).Float32() })
	default:
		// Sort whole rows into scratch and keep the first k.
		sorted, err := d.Alloc(src.DType, src.Numel())
		if err != nil {
			return err
		}
		defer d.Free(sorted)
		order, err := d.Alloc(dtype.Int64, src.Numel())
		if err != nil {
			return err
		}
		defer d.Free(order)
		sv := device.View{Buf: sorted, DType: src.DType, Shape: src.Shape, Strides: device.ContiguousStrides(src.Shape)}
		ov := device.View{Buf: order, DType: dtype.Int64, Shape: src.Shape, Strides: sv.Strides}
		if err := d.Sort(sv, ov, src, axis, largest); err != nil {
			return err
		}
		sv.Shape, ov.Shape = want, want
		if err := d.Copy(values, sv); err != nil {
			return err
		}
		return d.Copy(indices, ov)
	}
	return nil
}

// topkRun32 keeps, per row, the k smallest of the row's keys (rowKeys32's:
// the ordered value above, the index below) in a max-heap, then sorts it:
// the row's first k in Sort's order. The keys past the first k are made
// one at a time as the row is scanned, not stored: an element whose value
// key is not below the heap's top cannot enter (on a tie its index, later
// than every index in the heap, loses), which on rows of random values is
// nearly every element, one comparison each.
func topkRun32[T any](w *walk, vals []T, idx []int64, src []T, n, k, vs, is, ss int, largest bool, key func(T) float32) {
	if uint64(n) > 1<<32 {
		panic("cpu: topk of a row longer than 2^32 elements")
	}
	if k == 0 {
		return
	}
	var flip uint32
	if largest {
		flip = math.MaxUint32
	}
	f32, _ := any(src).([]float32)
	s0, s1, s2 := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	w.runRows(n+k*max(1, bitsLen(k)), func(off *[maxOperands]int, lo, hi int) {
		heap := make([]uint64, k)
		for r := lo; r < hi; r++ {
			so := off[2] + r*s2
			rowKeys32(heap, src, so, ss, largest, key)
			for i := k/2 - 1; i >= 0; i-- {
				siftDown(heap, i)
			}
			top := uint32(heap[0] >> 32)
			enter := func(kk uint32, j int) {
				heap[0] = uint64(kk)<<32 | uint64(j)
				siftDown(heap, 0)
				top = uint32(heap[0] >> 32)
			}
			if f32 != nil && ss == 1 {
				for i, x := range f32[so+k : so+n] {
					if kk := orderedKey32(x) ^ flip; kk < top {
						enter(kk, k+i)
					}
				}
			} else {
				for j := k; j < n; j++ {
					if kk := orderedKey32(key(src[so+j*ss])) ^ flip; kk < top {
						enter(kk, j)
					}
				}
			}
			slices.Sort(heap)
			writeKeyed(heap, vals, idx, off[0]+r*s0, vs, off[1]+r*s1, is, src, so, ss)
		}
	})
}

// siftDown restores the max-heap order of h below position i.
func siftDown(h []uint64, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1] > h[c] {
			c++
		}
		if h[i] >= h[c] {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// orderedKey32 maps x to a uint32 whose unsigned order is sortCmp's order
// of keys: −0 equal to +0, every NaN equal to every other and above +Inf.
func orderedKey32(x float32) uint32 {
	if x != x {
		return math.MaxUint32
	}
	if x == 0 {
		x = 0 // −0 sorts as +0
	}
	// Negative: all bits flipped; positive: the sign bit set. Without a
	// branch, which random signs mispredict half the time.
	b := math.Float32bits(x)
	return b ^ (uint32(int32(b)>>31) | 1<<31)
}

// bitsLen is ⌈log₂ n⌉ roughly: the comparisons per element of a sort.
func bitsLen(n int) int {
	b := 0
	for ; n > 1; n >>= 1 {
		b++
	}
	return b
}
