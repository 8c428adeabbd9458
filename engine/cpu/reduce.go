package cpu

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Reduce implements device.Device. Float sums and products accumulate in
// float64, which is at least as accurate as PyTorch's cascaded float32 sums
// and its float32 products.
func (d *Device) Reduce(op device.ReduceOp, dst, src device.View) error {
	if len(dst.Shape) != len(src.Shape) {
		return fmt.Errorf("cpu: reduce of rank %d into rank %d", len(src.Shape), len(dst.Shape))
	}
	if dst.Numel() == 0 {
		return nil
	}
	if src.Numel() == 0 {
		switch op {
		case device.Sum:
			return d.Fill(dst, 0)
		case device.Prod:
			return d.Fill(dst, 1)
		}
		return fmt.Errorf("cpu: max/min of an empty tensor")
	}
	if anyHalf(dst, src) {
		return d.widened([]*device.View{&dst}, []*device.View{&src}, func() error { return d.Reduce(op, dst, src) })
	}
	// The reduced sub-space: src dimensions that dst collapses, coalesced.
	var rshape, rstride []int
	for i, ext := range src.Shape {
		if dst.Shape[i] == 1 && ext != 1 {
			n := len(rshape)
			if n > 0 && rstride[n-1] == src.Strides[i]*ext {
				rshape[n-1] *= ext
				rstride[n-1] = src.Strides[i]
				continue
			}
			rshape = append(rshape, ext)
			rstride = append(rstride, src.Strides[i])
		}
	}
	if len(rshape) == 0 {
		return d.Copy(dst, src)
	}
	w := newWalk(dst.Shape, dst, src)
	innerReduce := rstride[len(rstride)-1] == 1 || w.inner() == 1
	switch src.DType {
	case dtype.Float32:
		if op == device.Sum && sumFast32(w, elems[float32](dst.Buf), elems[float32](src.Buf), rshape, rstride, innerReduce) {
			return nil
		}
		if (op == device.Max || op == device.Min) && extremeFast32(w, op, elems[float32](dst.Buf), elems[float32](src.Buf), rshape, rstride, innerReduce) {
			return nil
		}
		reduceRun(w, op, elems[float32](dst.Buf), elems[float32](src.Buf), rshape, rstride, innerReduce)
	case dtype.Float64:
		reduceRun(w, op, elems[float64](dst.Buf), elems[float64](src.Buf), rshape, rstride, innerReduce)
	case dtype.Int64:
		reduceRun(w, op, elems[int64](dst.Buf), elems[int64](src.Buf), rshape, rstride, innerReduce)
	default:
		return fmt.Errorf("cpu: reduction of %v", src.DType)
	}
	return nil
}

type accum interface{ ~float32 | ~float64 | ~int64 }

// reducer folds values in the accumulator type A (float64 for floats).
type reducer[A float64 | int64] struct {
	op   device.ReduceOp
	init A
}

func newReducer[A float64 | int64](op device.ReduceOp) reducer[A] {
	r := reducer[A]{op: op}
	switch op {
	case device.Max:
		r.init = lowest[A]()
	case device.Min:
		r.init = highest[A]()
	case device.Prod:
		r.init = 1
	}
	return r
}

func lowest[A float64 | int64]() A {
	var a A
	switch p := any(&a).(type) {
	case *float64:
		*p = math.Inf(-1)
	case *int64:
		*p = math.MinInt64
	}
	return a
}

func highest[A float64 | int64]() A {
	var a A
	switch p := any(&a).(type) {
	case *float64:
		*p = math.Inf(1)
	case *int64:
		*p = math.MaxInt64
	}
	return a
}

func (r reducer[A]) fold(acc, x A) A {
	switch r.op {
	case device.Sum:
		return acc + x
	case device.Max: // NaN wins and stays, as in torch.max
		if acc == acc && (x != x || x > acc) {
			return x
		}
	case device.Min:
		if acc == acc && (x != x || x < acc) {
			return x
		}
	case device.Prod: // int64 products wrap, as Go's (and PyTorch's) do
		return acc * x
	}
	return acc
}

func reduceRun[T accum](w *walk, op device.ReduceOp, dst, src []T, rshape, rstride []int, innerReduce bool) {
	var z T
	if _, isInt := any(z).(int64); isInt {
		reduceWith[T, int64](w, newReducer[int64](op), dst, src, rshape, rstride, innerReduce)
	} else {
		reduceWith[T, float64](w, newReducer[float64](op), dst, src, rshape, rstride, innerReduce)
	}
}

func reduceWith[T accum, A float64 | int64](w *walk, r reducer[A], dst, src []T, rshape, rstride []int, innerReduce bool) {
	rn := 1
	for _, e := range rshape {
		rn *= e
	}
	nr := len(rshape)
	s0, s1 := w.innerStride(0), w.innerStride(1)
	// forReduced calls f with the offset of every element of the reduced
	// sub-space, innermost fastest.
	forReduced := func(base int, f func(off int)) {
		var idx [8]int
		if nr > len(idx) {
			panic("cpu: reduction over more than 8 non-adjacent dimensions")
		}
		off := base
		for k := 0; k < rn; k++ {
			f(off)
			for dd := nr - 1; dd >= 0; dd-- {
				idx[dd]++
				off += rstride[dd]
				if idx[dd] < rshape[dd] {
					break
				}
				off -= rstride[dd] * rshape[dd]
				idx[dd] = 0
			}
		}
	}
	if innerReduce {
		// Each output folds its own run of elements; the innermost reduced
		// dimension is contiguous.
		last := rshape[nr-1]
		lastStride := rstride[nr-1]
		outer := rshape[:nr-1]
		outerStride := rstride[:nr-1]
		reduceOne := func(base int) A {
			acc := r.init
			if len(outer) == 0 {
				for j := 0; j < last; j++ {
					acc = r.fold(acc, A(src[base+j*lastStride]))
				}
				return acc
			}
			var idx [8]int
			off := base
			count := rn / last
			for k := 0; k < count; k++ {
				for j := 0; j < last; j++ {
					acc = r.fold(acc, A(src[off+j*lastStride]))
				}
				for dd := len(outer) - 1; dd >= 0; dd-- {
					idx[dd]++
					off += outerStride[dd]
					if idx[dd] < outer[dd] {
						break
					}
					off -= outerStride[dd] * outer[dd]
					idx[dd] = 0
				}
			}
			return acc
		}
		if w.rows()*w.inner() == 1 && rn > grain {
			// One output from a huge input: fold chunks in parallel, then
			// fold the partial results (only a contiguous sub-space is split).
			if nr == 1 && lastStride == 1 {
				nchunks := min(4*parallel.Threads(), (rn+grain-1)/grain)
				partial := make([]A, nchunks)
				chunk := (rn + nchunks - 1) / nchunks
				base := w.off[1]
				parallel.For(nchunks, 1, func(c0, c1 int) {
					for c := c0; c < c1; c++ {
						acc := r.init
						for j := c * chunk; j < min((c+1)*chunk, rn); j++ {
							acc = r.fold(acc, A(src[base+j]))
						}
						partial[c] = acc
					}
				})
				acc := r.init
				for _, p := range partial {
					acc = r.fold(acc, p)
				}
				dst[w.off[0]] = T(acc)
				return
			}
		}
		w.run(func(off *[maxOperands]int, lo, hi int) {
			for i := lo; i < hi; i++ {
				dst[off[0]+i*s0] = T(reduceOne(off[1] + i*s1))
			}
		})
		return
	}
	// The innermost kept dimension runs fastest in memory: fold whole rows of
	// the reduced sub-space into a vector of accumulators.
	w.run(func(off *[maxOperands]int, lo, hi int) {
		var buf [512]A
		for c := lo; c < hi; c += len(buf) {
			n := min(len(buf), hi-c)
			acc := buf[:n]
			for i := range acc {
				acc[i] = r.init
			}
			forReduced(off[1]+c*s1, func(o int) {
				for i := range acc {
					acc[i] = r.fold(acc[i], A(src[o+i*s1]))
				}
			})
			for i, a := range acc {
				dst[off[0]+(c+i)*s0] = T(a)
			}
		}
	})
}

// ArgMax implements device.Device.
func (d *Device) ArgMax(values, indices, src device.View, axis int) error {
	if values.Numel() == 0 {
		return nil
	}
	if src.Shape[axis] == 0 {
		return fmt.Errorf("cpu: argmax over an empty dimension")
	}
	if indices.DType != dtype.Int64 {
		return fmt.Errorf("cpu: argmax indices must be int64, not %v", indices.DType)
	}
	if anyHalf(values, src) {
		return d.widened([]*device.View{&values}, []*device.View{&src}, func() error { return d.ArgMax(values, indices, src, axis) })
	}
	w := newWalk(values.Shape, values, indices, src)
	n, st := src.Shape[axis], src.Strides[axis]
	switch src.DType {
	case dtype.Float32:
		argMaxRun(w, elems[float32](values.Buf), elems[int64](indices.Buf), elems[float32](src.Buf), n, st)
	case dtype.Float64:
		argMaxRun(w, elems[float64](values.Buf), elems[int64](indices.Buf), elems[float64](src.Buf), n, st)
	case dtype.Int64:
		argMaxRun(w, elems[int64](values.Buf), elems[int64](indices.Buf), elems[int64](src.Buf), n, st)
	default:
		return fmt.Errorf("cpu: argmax of %v", src.DType)
	}
	return nil
}

func argMaxRun[T accum](w *walk, vals []T, idx []int64, src []T, n, st int) {
	s0, s1, s2 := w.innerStride(0), w.innerStride(1), w.innerStride(2)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		for i := lo; i < hi; i++ {
			base := off[2] + i*s2
			best, at := src[base], 0
			for j := 1; j < n && best == best; j++ {
				if x := src[base+j*st]; x > best || x != x {
					best, at = x, j
				}
			}
			vals[off[0]+i*s0] = best
			idx[off[1]+i*s1] = int64(at)
		}
	})
}

// SumSquares implements device.Device.
func (d *Device) SumSquares(x device.View) (float64, error) {
	if !x.Contiguous() {
		return 0, fmt.Errorf("cpu: sum of squares of a non-contiguous view")
	}
	n := x.Numel()
	nchunks := max(1, min(4*parallel.Threads(), n/grain))
	partial := make([]float64, nchunks)
	chunk := (n + nchunks - 1) / nchunks
	switch x.DType {
	case dtype.Float32:
		s := elems[float32](x.Buf)[x.Offset : x.Offset+n]
		parallel.For(nchunks, 1, func(c0, c1 int) {
			for c := c0; c < c1; c++ {
				partial[c] = sumSquares32(s[c*chunk : min((c+1)*chunk, n)])
			}
		})
	case dtype.Float64:
		s := elems[float64](x.Buf)[x.Offset : x.Offset+n]
		parallel.For(nchunks, 1, func(c0, c1 int) {
			for c := c0; c < c1; c++ {
				acc := 0.0
				for _, v := range s[c*chunk : min((c+1)*chunk, n)] {
					acc += v * v
				}
				partial[c] = acc
			}
		})
	default:
		buf, err := d.Alloc(dtype.Float32, n)
		if err != nil {
			return 0, err
		}
		defer d.Free(buf)
		tmp := device.View{Buf: buf, DType: dtype.Float32, Shape: x.Shape, Strides: device.ContiguousStrides(x.Shape)}
		if err := d.Copy(tmp, x); err != nil {
			return 0, err
		}
		return d.SumSquares(tmp)
	}
	total := 0.0
	for _, p := range partial {
		total += p
	}
	return total, nil
}

// forRuns calls f with the offset of each position of the reduced
// sub-space (rshape, rstride; at most 8 dimensions) from base, the last
// reduced dimension excluded when skipLast.
func forRuns(rshape, rstride []int, base int, skipLast bool, f func(off int)) {
	dims, strides := rshape, rstride
	if skipLast {
		dims, strides = rshape[:len(rshape)-1], rstride[:len(rstride)-1]
	}
	var idx [8]int
	n := 1
	for _, e := range dims {
		n *= e
	}
	off := base
	for k := 0; k < n; k++ {
		f(off)
		for d := len(dims) - 1; d >= 0; d-- {
			idx[d]++
			off += strides[d]
			if idx[d] < dims[d] {
				break
			}
			off -= strides[d] * dims[d]
			idx[d] = 0
		}
	}
}

// extremeFast32 handles float32 max and min over contiguous runs (the
// innermost reduced dimension has stride 1) with vmath.Max and vmath.Min;
// it reports false for other layouts, which the generic loop handles. NaN
// wins, as in torch.max and torch.amax.
func extremeFast32(w *walk, op device.ReduceOp, dst, src []float32, rshape, rstride []int, innerReduce bool) bool {
	nr := len(rshape)
	if !innerReduce || nr > 8 || rstride[nr-1] != 1 {
		return false
	}
	f, better := vmath.Max, func(c, m float32) bool { return c > m }
	if op == device.Min {
		f, better = vmath.Min, func(c, m float32) bool { return c < m }
	}
	fold := func(m, c float32) float32 {
		if m == m && (c != c || better(c, m)) {
			return c
		}
		return m
	}
	last := rshape[nr-1]
	if nr == 1 && w.rows()*w.inner() == 1 && last > grain {
		// One output from one long run: partial results in parallel.
		nchunks := min(4*parallel.Threads(), (last+grain-1)/grain)
		chunk := (last + nchunks - 1) / nchunks
		nchunks = (last + chunk - 1) / chunk
		partial := make([]float32, nchunks)
		base := w.off[1]
		parallel.For(nchunks, 1, func(c0, c1 int) {
			for c := c0; c < c1; c++ {
				partial[c] = f(src[base+c*chunk : base+min((c+1)*chunk, last)])
			}
		})
		dst[w.off[0]] = f(partial) // the partial results' extreme, NaN kept
		return true
	}
	s0, s1 := w.innerStride(0), w.innerStride(1)
	w.run(func(off *[maxOperands]int, lo, hi int) {
		for i := lo; i < hi; i++ {
			if nr == 1 { // one run an output: no walk over the reduced space
				o := off[1] + i*s1
				dst[off[0]+i*s0] = f(src[o : o+last])
				continue
			}
			first := true
			var m float32
			forRuns(rshape, rstride, off[1]+i*s1, true, func(o int) {
				c := f(src[o : o+last])
				if first {
					m, first = c, false
				} else {
					m = fold(m, c)
				}
			})
			dst[off[0]+i*s0] = m
		}
	})
	return true
}

// sumFast32 handles the float32 sums whose innermost memory runs are
// contiguous with vector kernels; it reports false for other layouts, which
// the generic loop handles.
//
//   - Rows (the innermost reduced dimension is contiguous): each run is
//     summed by vmath.Sum64, in float64 lanes.
//   - Columns (the innermost kept dimension is contiguous, as for a bias
//     gradient, the sum over the batch of [N, C]): blocks of up to 64 rows
//     are added into a float32 vector with vmath.Add, and each block's
//     partial sums are added into float64 accumulators, so the error stays
//     that of a 64-term float32 sum however many rows there are (PyTorch's
//     cascade sum has the same kind of bound).
func sumFast32(w *walk, dst, src []float32, rshape, rstride []int, innerReduce bool) bool {
	nr := len(rshape)
	if nr > 8 {
		return false
	}
	s0, s1 := w.innerStride(0), w.innerStride(1)
	rows := 1
	for _, e := range rshape {
		rows *= e
	}
	if innerReduce {
		if rstride[nr-1] != 1 {
			return false
		}
		last := rshape[nr-1]
		if w.rows()*w.inner() == 1 && nr == 1 && rows > grain {
			// One output from one long run: partial sums in parallel.
			nchunks := min(4*parallel.Threads(), (rows+grain-1)/grain)
			chunk := (rows + nchunks - 1) / nchunks
			partial := make([]float64, nchunks)
			base := w.off[1]
			parallel.For(nchunks, 1, func(c0, c1 int) {
				for c := c0; c < c1; c++ {
					partial[c] = vmath.Sum64(src[base+c*chunk : base+min((c+1)*chunk, rows)])
				}
			})
			total := 0.0
			for _, p := range partial {
				total += p
			}
			dst[w.off[0]] = float32(total)
			return true
		}
		w.run(func(off *[maxOperands]int, lo, hi int) {
			for i := lo; i < hi; i++ {
				if nr == 1 { // one run an output: no walk over the reduced space
					o := off[1] + i*s1
					dst[off[0]+i*s0] = float32(vmath.Sum64(src[o : o+last]))
					continue
				}
				acc := 0.0
				forRuns(rshape, rstride, off[1]+i*s1, true, func(o int) { acc += vmath.Sum64(src[o : o+last]) })
				dst[off[0]+i*s0] = float32(acc)
			}
		})
		return true
	}
	if s1 != 1 {
		return false
	}
	const block = 64
	w.run(func(off *[maxOperands]int, lo, hi int) {
		var part [512]float32
		var acc [512]float64
		for c := lo; c < hi; c += len(part) {
			n := min(len(part), hi-c)
			p, a := part[:n], acc[:n]
			clear(a)
			inBlock := 0
			forRuns(rshape, rstride, off[1]+c, false, func(o int) {
				row := src[o : o+n]
				if inBlock == 0 {
					copy(p, row)
				} else {
					vmath.Add(p, p, row)
				}
				if inBlock++; inBlock == block {
					for i, v := range p {
						a[i] += float64(v)
					}
					inBlock = 0
				}
			})
			if inBlock > 0 {
				for i, v := range p {
					a[i] += float64(v)
				}
			}
			for i, v := range a {
				dst[off[0]+(c+i)*s0] = float32(v)
			}
		}
	})
	return true
}
