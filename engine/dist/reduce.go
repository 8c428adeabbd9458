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

// Reducer combines the same element range of every rank's buffer so that
// every rank computes bit-identical results, and every backend that uses
// it the same results as the in-process one. An all-reduce combines the
// ranks in the order of PyTorch's Gloo backend (see AllReduce), so that a
// job's numbers are those of the same job under PyTorch with gloo, bit for
// bit; other reductions combine in rank order. bfloat16 and float16 are
// combined in float32 and rounded after every combination, as Gloo and
// NCCL add half-precision values; an average is the sum divided by the
// number of ranks; max and min propagate NaN. A Reducer holds scratch
// memory for one chunk: it is for one goroutine at a time.
type Reducer struct {
	dt      dtype.DType
	op      ReduceOp
	n       int       // ranks: the divisor of Avg
	scratch []byte    // one chunk of the result
	divisor []float32 // n, reduceChunk times: Avg divides with vmath.Div
	order   []int     // the ranks in the order they are combined
	// preMul, when not 1, multiplies every rank's values before they are
	// summed (preMultiply), each product rounded as the dtype's: scaled
	// holds a chunk of them.
	preMul float64
	scaled []byte
}

// NewReducer returns a Reducer of n ranks' elements of dt by op, which
// CheckReduce must have accepted.
func NewReducer(dt dtype.DType, op ReduceOp, n int) *Reducer {
	r := &Reducer{dt: dt, op: op, n: n, scratch: make([]byte, reduceChunk*dt.Size()), order: make([]int, n), preMul: 1}
	if dt == dtype.Float32 && op == Avg {
		r.divisor = make([]float32, reduceChunk)
		for i := range r.divisor {
			r.divisor[i] = float32(n)
		}
	}
	return r
}

// preMultiply makes r a pre-multiplied sum (NCCL's PreMulSum): every
// rank's value times s, rounded to the dtype, then summed; r must sum
// float32 or float64. DDP's average is this sum with s = 1/n: each
// gradient divided on its way into the bucket, as PyTorch's reducer does,
// without the bucket.
func (r *Reducer) preMultiply(s float64) {
	r.preMul = s
	r.scaled = make([]byte, len(r.scratch))
}

// Reduce writes into dst (bytes [lo, hi) of the collective's element
// range, at element boundaries) the combination of srcs[k][lo:hi], rank
// k's bytes, in rank order, a chunk at a time. dst may be one of the
// srcs' ranges: each chunk is combined in scratch first.
func (r *Reducer) Reduce(dst []byte, srcs [][]byte, lo, hi int) {
	for k := range r.order {
		r.order[k] = k
	}
	r.reduce(dst, srcs, lo, hi)
}

func (r *Reducer) reduce(dst []byte, srcs [][]byte, lo, hi int) {
	if r.n == 2 && r.dt == dtype.Float32 && r.op == Sum {
		// One pass: each element is read from both ranks before dst,
		// which may be either's memory, is written.
		out, a, b := asSlice[float32](dst[:hi-lo]), asSlice[float32](srcs[r.order[0]][lo:hi]), asSlice[float32](srcs[r.order[1]][lo:hi])
		if r.preMul != 1 {
			vmath.AddScaled(out, a, b, float32(r.preMul))
		} else {
			vmath.Add(out, a, b)
		}
		return
	}
	es := r.dt.Size()
	for start := lo; start < hi; start += reduceChunk * es {
		end := min(hi, start+reduceChunk*es)
		out := r.scratch[:end-start]
		r.combine(out, srcs, start, end)
		copy(dst[start-lo:end-lo], out)
	}
}

// AllReduce is Reduce for an all-reduce of total bytes, of which
// srcs[k][lo:hi] are bytes [offset+lo, offset+hi): it combines the ranks
// in the order of Gloo's ring all-reduce, which PyTorch's gloo backend
// runs. Gloo cuts the buffer into one chunk a rank (in segments of at
// most 1 MiB, at least two a chunk); chunk c starts at rank c−1, and each
// rank down the ring adds its own values to the partial sum it received,
// rank c last: ((x[c−1] + x[c−2]) + x[c−3]) + … + x[c].
func (r *Reducer) AllReduce(dst []byte, srcs [][]byte, lo, hi, offset, total int) {
	chunk := glooChunkBytes(total, r.n, r.dt.Size())
	for start := lo; start < hi; {
		c := (offset + start) / chunk
		end := min(hi, (c+1)*chunk-offset)
		for j := range r.order {
			r.order[j] = ((c-1-j)%r.n + r.n) % r.n
		}
		r.reduce(dst[start-lo:end-lo], srcs, start, end)
		start = end
	}
}

// glooChunkBytes is the size of the chunk each rank reduces in Gloo's
// ring all-reduce of total bytes over n ranks (gloo/allreduce.cc as
// PyTorch 1.13 links it): the buffer is cut into segments of at most 1 MiB,
// their number rounded up to at least 2n and to a multiple of n, the
// segments made equal (a whole number of elements each), and each rank's
// chunk is a run of them.
func glooChunkBytes(total, n, es int) int {
	const maxSegment = 1 << 20
	maxSegmentBytes := es * max(1, maxSegment/es)
	segments := max((total+maxSegmentBytes-1)/maxSegmentBytes, 2*n)
	segments = (segments + n - 1) / n * n
	segment := (total + segments - 1) / segments
	segment = (segment + es - 1) / es * es
	return max(segments/n*segment, es)
}

func (r *Reducer) combine(out []byte, srcs [][]byte, lo, hi int) {
	first, rest := r.order[0], r.order[1:]
	if r.preMul != 1 {
		r.combineScaled(out, srcs, lo, hi)
		return
	}
	switch r.dt {
	case dtype.Float32:
		o := asSlice[float32](out)
		copy(o, asSlice[float32](srcs[first][lo:hi]))
		for _, k := range rest {
			in := asSlice[float32](srcs[k][lo:hi])
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
		copy(o, asSlice[float64](srcs[first][lo:hi]))
		for _, k := range rest {
			combine(o, asSlice[float64](srcs[k][lo:hi]), r.op)
		}
		if r.op == Avg {
			d := float64(r.n)
			for i := range o {
				o[i] /= d
			}
		}
	case dtype.BFloat16, dtype.Float16:
		// Each combination in float32, rounded to the half type, as
		// Gloo's and NCCL's half-precision arithmetic rounds it.
		o := asSlice[uint16](out)
		copy(o, asSlice[uint16](srcs[first][lo:hi]))
		for _, k := range rest {
			in := asSlice[uint16](srcs[k][lo:hi])
			for i, h := range in {
				o[i] = floatToHalf(r.dt, combine1(halfToFloat(r.dt, o[i]), halfToFloat(r.dt, h), r.op))
			}
		}
		if r.op == Avg {
			d := float32(r.n)
			for i, h := range o {
				o[i] = floatToHalf(r.dt, halfToFloat(r.dt, h)/d)
			}
		}
	case dtype.Int64:
		o := asSlice[int64](out)
		copy(o, asSlice[int64](srcs[first][lo:hi]))
		for _, k := range rest {
			combine(o, asSlice[int64](srcs[k][lo:hi]), r.op)
		}
	case dtype.Int32:
		o := asSlice[int32](out)
		copy(o, asSlice[int32](srcs[first][lo:hi]))
		for _, k := range rest {
			combine(o, asSlice[int32](srcs[k][lo:hi]), r.op)
		}
	case dtype.Uint8, dtype.Bool:
		copy(out, srcs[first][lo:hi])
		for _, k := range rest {
			combine(out, srcs[k][lo:hi], r.op)
		}
	}
}

// combineScaled is combine for a pre-multiplied sum: the first rank's
// values times preMul, then each other's times preMul added, every product
// and sum rounded (float32: a multiplication pass into scaled, then an
// addition pass, as a bucket of divided gradients would be summed; float64:
// the conversion keeps the compiler from fusing them).
func (r *Reducer) combineScaled(out []byte, srcs [][]byte, lo, hi int) {
	first, rest := r.order[0], r.order[1:]
	if r.dt == dtype.Float32 {
		s := float32(r.preMul)
		o, t := asSlice[float32](out), asSlice[float32](r.scaled[:len(out)])
		vmath.MulScalar(o, asSlice[float32](srcs[first][lo:hi]), s)
		for _, k := range rest {
			vmath.MulScalar(t, asSlice[float32](srcs[k][lo:hi]), s)
			vmath.Add(o, o, t)
		}
		return
	}
	s, o := r.preMul, asSlice[float64](out)
	for i, x := range asSlice[float64](srcs[first][lo:hi]) {
		o[i] = x * s
	}
	for _, k := range rest {
		for i, x := range asSlice[float64](srcs[k][lo:hi])[:len(o)] {
			o[i] += float64(x * s)
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
