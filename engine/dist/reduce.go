package dist

import (
	"fmt"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// reduceChunk is how many elements a rank combines at a time: small
// enough that the partial result stays in L1/L2 while every rank's input
// streams past it.
const reduceChunk = 4096

// CheckReduce says whether op can combine elements of dt: averages need
// floating point, booleans only take max (or) and min (and), and dt must
// be one that can be communicated (CheckDType). A backend that reduces
// with Reducer checks with it, so that it refuses what the in-process
// backend refuses, in the same words.
func CheckReduce(dt dtype.DType, op ReduceOp) error {
	switch {
	case int(op) >= len(reduceOpNames):
		return fmt.Errorf("unknown reduce op %d", op)
	case dt == dtype.Bool && op != Max && op != Min:
		return fmt.Errorf("reduce op %v is not defined for bool tensors (max and min are)", op)
	case op == Avg && !dt.IsFloat():
		return fmt.Errorf("reduce op avg needs a floating-point tensor, not %v", dt)
	}
	return CheckDType(dt)
}

// CheckDType says whether tensors of dt can be communicated at all: the
// dtypes Reducer combines.
func CheckDType(dt dtype.DType) error {
	switch dt {
	case dtype.Float32, dtype.Float64, dtype.BFloat16, dtype.Float16, dtype.Int64, dtype.Int32, dtype.Uint8, dtype.Bool:
		return nil
	}
	return fmt.Errorf("dtype %v cannot be communicated", dt)
}

// Reducer combines the same element range of every rank's buffer, in rank
// order, so that every rank computes bit-identical results, and every
// backend that uses it the same results as the in-process one: bfloat16
// and float16 in float32, rounded once (to nearest, ties to even); an
// average is the sum divided by the number of ranks; max and min
// propagate NaN. A Reducer holds scratch memory for one chunk: it is for
// one goroutine at a time.
type Reducer struct {
	dt      dtype.DType
	op      ReduceOp
	n       int       // ranks: the divisor of Avg
	scratch []byte    // one chunk of the result
	acc     []float32 // one chunk in float32, for bfloat16 and float16
	divisor []float32 // n, reduceChunk times: Avg divides with vmath.Div
}

// NewReducer returns a Reducer of n ranks' elements of dt by op, which
// CheckReduce must have accepted.
func NewReducer(dt dtype.DType, op ReduceOp, n int) *Reducer {
	r := &Reducer{dt: dt, op: op, n: n, scratch: make([]byte, reduceChunk*dt.Size())}
	if dt == dtype.BFloat16 || dt == dtype.Float16 {
		r.acc = make([]float32, reduceChunk)
	}
	if dt == dtype.Float32 && op == Avg {
		r.divisor = make([]float32, reduceChunk)
		for i := range r.divisor {
			r.divisor[i] = float32(n)
		}
	}
	return r
}

// Reduce writes into dst (bytes [lo, hi) of the collective's element
// range, at element boundaries) the combination of srcs[k][lo:hi], rank
// k's bytes, a chunk at a time. dst may be one of the srcs' ranges: each
// chunk is combined in scratch first.
func (r *Reducer) Reduce(dst []byte, srcs [][]byte, lo, hi int) {
	es := r.dt.Size()
	for start := lo; start < hi; start += reduceChunk * es {
		end := min(hi, start+reduceChunk*es)
		out := r.scratch[:end-start]
		r.combine(out, srcs, start, end)
		copy(dst[start-lo:end-lo], out)
	}
}

func (r *Reducer) combine(out []byte, srcs [][]byte, lo, hi int) {
	switch r.dt {
	case dtype.Float32:
		o := asSlice[float32](out)
		copy(o, asSlice[float32](srcs[0][lo:hi]))
		for _, s := range srcs[1:] {
			in := asSlice[float32](s[lo:hi])
			if r.op == Sum || r.op == Avg {
				vmath.Add(o, o, in)
			} else {
				combine(o, in, r.op)
			}
		}
		if r.op == Avg {
			vmath.Div(o, o, r.divisor[:len(o)])
		}
	case dtype.Float64:
		o := asSlice[float64](out)
		copy(o, asSlice[float64](srcs[0][lo:hi]))
		for _, s := range srcs[1:] {
			combine(o, asSlice[float64](s[lo:hi]), r.op)
		}
		if r.op == Avg {
			d := float64(r.n)
			for i := range o {
				o[i] /= d
			}
		}
	case dtype.BFloat16, dtype.Float16:
		// Combined in float32 and rounded once, as NCCL does for half
		// types.
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
			if r.op == Avg {
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
func combine[T number](o, in []T, op ReduceOp) {
	in = in[:len(o)]
	switch op {
	case Sum, Avg:
		for i, x := range in {
			o[i] += x
		}
	case Product:
		for i, x := range in {
			o[i] *= x
		}
	case Max:
		for i, x := range in {
			o[i] = maxNaN(o[i], x)
		}
	case Min:
		for i, x := range in {
			o[i] = minNaN(o[i], x)
		}
	}
}

func combine1(a, b float32, op ReduceOp) float32 {
	switch op {
	case Product:
		return a * b
	case Max:
		return maxNaN(a, b)
	case Min:
		return minNaN(a, b)
	}
	return a + b
}

// maxNaN and minNaN propagate NaN, as torch.maximum and NCCL do.
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

// Part returns the byte range of part k when numel elements of es bytes
// are split into n near-equal parts (the first numel%n parts one element
// longer): the part of an all-reduce that rank k reduces.
func Part(numel, n, k, es int) (lo, hi int) {
	q, rem := numel/n, numel%n
	start := k*q + min(k, rem)
	size := q
	if k < rem {
		size++
	}
	return start * es, (start + size) * es
}
