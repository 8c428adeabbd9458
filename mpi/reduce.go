package mpi

import (
	"fmt"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// checkReduce says whether op can combine elements of dt, with the
// in-process backend's rules and words: averages need floating point,
// booleans only take max (or) and min (and).
func checkReduce(dt dtype.DType, op dist.ReduceOp) error {
	switch {
	case op > dist.Product:
		return fmt.Errorf("unknown reduce op %d", op)
	case dt == dtype.Bool && op != dist.Max && op != dist.Min:
		return fmt.Errorf("reduce op %v is not defined for bool tensors (max and min are)", op)
	case op == dist.Avg && !dt.IsFloat():
		return fmt.Errorf("reduce op avg needs a floating-point tensor, not %v", dt)
	}
	return checkDType(dt)
}

// checkDType says whether dt can be communicated at all.
func checkDType(dt dtype.DType) error {
	switch dt {
	case dtype.Float32, dtype.Float64, dtype.BFloat16, dtype.Float16, dtype.Int64, dtype.Int32, dtype.Uint8, dtype.Bool:
		return nil
	}
	return fmt.Errorf("dtype %v cannot be communicated", dt)
}

// The reduction is the in-process backend's (engine/dist/reduce.go), so
// that both give bit-identical results: the ranks' values are combined
// in rank order, a chunk at a time; bfloat16 and float16 in float32,
// rounded once (to nearest, ties to even); an average is the sum divided
// by the number of ranks; max and min propagate NaN.

// reduceChunk is how many elements are combined at a time: small enough
// that the partial result stays in L1/L2 while every rank's part streams
// past it.
const reduceChunk = 4096

// reducer combines the same element range of every rank's part.
type reducer struct {
	dt      dtype.DType
	op      dist.ReduceOp
	n       int       // ranks: the divisor of Avg
	scratch []byte    // one chunk of the result
	acc     []float32 // one chunk in float32, for bfloat16 and float16
	divisor []float32 // n, reduceChunk times: Avg divides with vmath.Div
}

func newReducer(dt dtype.DType, op dist.ReduceOp, n int) *reducer {
	r := &reducer{dt: dt, op: op, n: n, scratch: make([]byte, reduceChunk*dt.Size())}
	if dt == dtype.BFloat16 || dt == dtype.Float16 {
		r.acc = make([]float32, reduceChunk)
	}
	if dt == dtype.Float32 && op == dist.Avg {
		r.divisor = make([]float32, reduceChunk)
		for i := range r.divisor {
			r.divisor[i] = float32(n)
		}
	}
	return r
}

// reduce writes into dst the combination of srcs (rank k's part is
// srcs[k], as long as dst). dst may be one of the srcs: each chunk is
// combined in scratch first.
func (r *reducer) reduce(dst []byte, srcs [][]byte) {
	es := r.dt.Size()
	for start := 0; start < len(dst); start += reduceChunk * es {
		end := min(len(dst), start+reduceChunk*es)
		out := r.scratch[:end-start]
		r.combine(out, srcs, start, end)
		copy(dst[start:end], out)
	}
}

func (r *reducer) combine(out []byte, srcs [][]byte, lo, hi int) {
	switch r.dt {
	case dtype.Float32:
		o := asSlice[float32](out)
		copy(o, asSlice[float32](srcs[0][lo:hi]))
		for _, s := range srcs[1:] {
			in := asSlice[float32](s[lo:hi])
			if r.op == dist.Sum || r.op == dist.Avg {
				vmath.Add(o, o, in)
			} else {
				combine(o, in, r.op)
			}
		}
		if r.op == dist.Avg {
			vmath.Div(o, o, r.divisor[:len(o)])
		}
	case dtype.Float64:
		o := asSlice[float64](out)
		copy(o, asSlice[float64](srcs[0][lo:hi]))
		for _, s := range srcs[1:] {
			combine(o, asSlice[float64](s[lo:hi]), r.op)
		}
		if r.op == dist.Avg {
			d := float64(r.n)
			for i := range o {
				o[i] /= d
			}
		}
	case dtype.BFloat16, dtype.Float16:
		acc := r.acc[:(hi-lo)/2]
		for k, s := range srcs {
			in := asSlice[uint16](s[lo:hi])
			for i, h := range in {
				x := halfToFloat(r.dt, h)
				if k == 0 {
					acc[i] = x
				} else {
					acc[i] = combine1(acc[i], x, r.op)
				}
			}
		}
		o := asSlice[uint16](out)
		for i, x := range acc {
			if r.op == dist.Avg {
				x /= float32(r.n)
			}
			o[i] = floatToHalf(r.dt, x)
		}
	case dtype.Int64:
		o := asSlice[int64](out)
		copy(o, asSlice[int64](srcs[0][lo:hi]))
		for _, s := range srcs[1:] {
			combine(o, asSlice[int64](s[lo:hi]), r.op)
		}
	case dtype.Int32:
		o := asSlice[int32](out)
		copy(o, asSlice[int32](srcs[0][lo:hi]))
		for _, s := range srcs[1:] {
			combine(o, asSlice[int32](s[lo:hi]), r.op)
		}
	case dtype.Uint8, dtype.Bool:
		copy(out, srcs[0][lo:hi])
		for _, s := range srcs[1:] {
			combine(out, s[lo:hi], r.op)
		}
	}
}

type number interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~uint8
}

// combine folds in into o element by element (Avg folds as Sum; the
// division comes at the end).
func combine[T number](o, in []T, op dist.ReduceOp) {
	in = in[:len(o)]
	switch op {
	case dist.Sum, dist.Avg:
		for i, x := range in {
			o[i] += x
		}
	case dist.Product:
		for i, x := range in {
			o[i] *= x
		}
	case dist.Max:
		for i, x := range in {
			o[i] = maxNaN(o[i], x)
		}
	case dist.Min:
		for i, x := range in {
			o[i] = minNaN(o[i], x)
		}
	}
}

func combine1(a, b float32, op dist.ReduceOp) float32 {
	switch op {
	case dist.Product:
		return a * b
	case dist.Max:
		return maxNaN(a, b)
	case dist.Min:
		return minNaN(a, b)
	}
	return a + b
}

// maxNaN and minNaN propagate NaN, as torch.maximum, NCCL and the
// in-process backend do (MPI_MAX and MPI_MIN keep whichever operand
// their comparison picks).
func maxNaN[T number](a, b T) T {
	if a != a {
		return a
	}
	if b != b || b > a {
		return b
	}
	return a
}

func minNaN[T number](a, b T) T {
	if a != a {
		return a
	}
	if b != b || b < a {
		return b
	}
	return a
}

func halfToFloat(dt dtype.DType, h uint16) float32 {
	if dt == dtype.BFloat16 {
		return dtype.BF16(h).Float32()
	}
	return dtype.F16(h).Float32()
}

func floatToHalf(dt dtype.DType, x float32) uint16 {
	if dt == dtype.BFloat16 {
		return uint16(dtype.BF16FromFloat32(x))
	}
	return uint16(dtype.F16FromFloat32(x))
}

// asSlice views little-endian bytes as elements of T (the engine's buffers
// are aligned to 64 bytes, and element ranges start at element
// boundaries).
func asSlice[T any](b []byte) []T {
	var zero T
	n := len(b) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// part returns the byte range of part k when numel elements are split
// into n near-equal parts (the first numel%n parts one element longer),
// as the in-process backend splits an all-reduce.
func part(numel, n, k, es int) (lo, hi int) {
	q, rem := numel/n, numel%n
	start := k*q + min(k, rem)
	size := q
	if k < rem {
		size++
	}
	return start * es, (start + size) * es
}
