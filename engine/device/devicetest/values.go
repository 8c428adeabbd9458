package devicetest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Element types.

var (
	f32, f64, bf16, f16   = dtype.Float32, dtype.Float64, dtype.BFloat16, dtype.Float16
	i64, i32, u8, boolean = dtype.Int64, dtype.Int32, dtype.Uint8, dtype.Bool
	floats                = []dtype.DType{f32, f64, bf16, f16}
	nan, inf              = math.NaN(), math.Inf(1)
	shortNames            = map[dtype.DType]string{f32: "f32", f64: "f64", bf16: "bf16", f16: "f16", i64: "i64", i32: "i32", u8: "u8", boolean: "bool"}
)

// short is the name of dt in case names: f32, f64, bf16, f16, i64, i32, u8,
// bool.
func short(dt dtype.DType) string {
	if s, ok := shortNames[dt]; ok {
		return s
	}
	return dt.String()
}

func isHalf(dt dtype.DType) bool { return dt == bf16 || dt == f16 }

// accType is the type a kernel computes dt in: float32 for the 16-bit
// floats (as the CPU widens them), dt itself otherwise.
func accType(dt dtype.DType) dtype.DType {
	if isHalf(dt) {
		return f32
	}
	return dt
}

// put stores x as element i of b, with the conversions the CPU's Copy uses
// (x is an integer for the integer types).
func put(dt dtype.DType, b []byte, i int, x float64) {
	le := binary.LittleEndian
	switch dt {
	case f32:
		le.PutUint32(b[4*i:], math.Float32bits(float32(x)))
	case f64:
		le.PutUint64(b[8*i:], math.Float64bits(x))
	case bf16:
		le.PutUint16(b[2*i:], uint16(dtype.BF16FromFloat32(float32(x))))
	case f16:
		le.PutUint16(b[2*i:], uint16(dtype.F16FromFloat32(float32(x))))
	case i64:
		le.PutUint64(b[8*i:], uint64(int64(x)))
	case i32:
		le.PutUint32(b[4*i:], uint32(int32(int64(x))))
	case u8:
		b[i] = uint8(int64(x))
	case boolean:
		b[i] = 0
		if x != 0 {
			b[i] = 1
		}
	default:
		panic("devicetest: put of " + dt.String())
	}
}

// getF reads element i of b as a float64.
func getF(dt dtype.DType, b []byte, i int) float64 {
	le := binary.LittleEndian
	switch dt {
	case f32:
		return float64(math.Float32frombits(le.Uint32(b[4*i:])))
	case f64:
		return math.Float64frombits(le.Uint64(b[8*i:]))
	case bf16:
		return float64(dtype.BF16(le.Uint16(b[2*i:])).Float32())
	case f16:
		return float64(dtype.F16(le.Uint16(b[2*i:])).Float32())
	}
	return float64(getI(dt, b, i))
}

// getI reads element i of an integer or bool b.
func getI(dt dtype.DType, b []byte, i int) int64 {
	le := binary.LittleEndian
	switch dt {
	case i64:
		return int64(le.Uint64(b[8*i:]))
	case i32:
		return int64(int32(le.Uint32(b[4*i:])))
	case u8, boolean:
		return int64(b[i])
	}
	return int64(getF(dt, b, i))
}

func getBits16(b []byte, i int) uint16 { return binary.LittleEndian.Uint16(b[2*i:]) }

// ulpDist is the number of representable 16-bit values between a and b
// (neither NaN).
func ulpDist(a, b uint16) int {
	ord := func(u uint16) int {
		if u&0x8000 != 0 {
			return -int(u & 0x7fff)
		}
		return int(u)
	}
	d := ord(a) - ord(b)
	if d < 0 {
		d = -d
	}
	return d
}

// format renders element i of b for a failure message.
func format(dt dtype.DType, b []byte, i int) string {
	switch dt {
	case f32:
		return strconv.FormatFloat(getF(dt, b, i), 'g', 9, 64)
	case f64:
		return strconv.FormatFloat(getF(dt, b, i), 'g', 17, 64)
	case bf16, f16:
		return strconv.FormatFloat(getF(dt, b, i), 'g', 6, 64) + " (0x" + strconv.FormatUint(uint64(getBits16(b, i)), 16) + ")"
	case boolean:
		if b[i] > 1 {
			return "0x" + strconv.FormatUint(uint64(b[i]), 16)
		}
	}
	return strconv.FormatInt(getI(dt, b, i), 10)
}

// poison is n elements of dt with every byte 0xFF: NaN for the floating
// point types, -1 or 255 for the integer ones, an invalid bool.
func poison(dt dtype.DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	for i := range b {
		b[i] = 0xFF
	}
	return b
}

// Value generators.

// gen draws one element value.
type gen func(r *rand.Rand) float64

// unif is uniform in [lo, hi).
func unif(lo, hi float64) gen { return func(r *rand.Rand) float64 { return lo + (hi-lo)*r.Float64() } }

// magn has a magnitude uniform in [lo, hi) and a random sign.
func magn(lo, hi float64) gen {
	return func(r *rand.Rand) float64 {
		x := lo + (hi-lo)*r.Float64()
		if r.IntN(2) == 0 {
			return -x
		}
		return x
	}
}

// ints is a uniform integer in [lo, hi].
func ints(lo, hi int) gen {
	return func(r *rand.Rand) float64 { return float64(lo + r.IntN(hi-lo+1)) }
}

// pick chooses one of vals.
func pick(vals ...float64) gen {
	return func(r *rand.Rand) float64 { return vals[r.IntN(len(vals))] }
}

// mix draws from a with probability p, else from b.
func mix(p float64, a, b gen) gen {
	return func(r *rand.Rand) float64 {
		if r.Float64() < p {
			return a(r)
		}
		return b(r)
	}
}

// defGen is the default input of dt: uniform in [-1, 1) for floats, small
// integers, random bools.
func defGen(dt dtype.DType) gen {
	switch dt {
	case i64, i32:
		return ints(-1000, 1000)
	case u8:
		return ints(0, 255)
	case boolean:
		return ints(0, 1)
	}
	return unif(-1, 1)
}

// tieGen draws from a small set of values, so that comparisons see equal
// elements and arg-max sees ties.
func tieGen(dt dtype.DType) gen {
	switch dt {
	case u8:
		return ints(0, 4)
	case boolean:
		return ints(0, 1)
	case i64, i32:
		return ints(-3, 3)
	}
	return pick(-1.5, -1, -0.5, 0, 0.5, 1, 1.5)
}

// specialGen mixes NaN, infinities and signed zeros into normal values.
func specialGen(normal gen) gen {
	return mix(0.35, pick(nan, inf, math.Inf(-1), 0, math.Copysign(0, -1), 1, -1, 100, -100), normal)
}

// values draws n values from g.
func (e *env) values(n int, g gen) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = g(e.r)
	}
	return v
}

// Layouts.

// layout places a view of a shape in a buffer: its offset and strides.
type layout struct {
	name string
	fn   func(shape []int) (off int, strides []int)
}

var (
	// contig is row-major from element 0.
	contig = layout{"contig", func(shape []int) (int, []int) { return 0, device.ContiguousStrides(shape) }}
	// offset is row-major from element 5.
	offset = layout{"offset", func(shape []int) (int, []int) { return 5, device.ContiguousStrides(shape) }}
	// strided has an inner stride of 2 and rows padded by 3 elements,
	// from element 3.
	strided = layout{"strided", func(shape []int) (int, []int) {
		st := make([]int, len(shape))
		s := 2
		for i := len(shape) - 1; i >= 0; i-- {
			st[i] = s
			s = s*max(shape[i], 1) + 3
		}
		return 3, st
	}}
	// transposed stores the axes in reverse order (column-major), from
	// element 1.
	transposed = layout{"transposed", func(shape []int) (int, []int) {
		st := make([]int, len(shape))
		s := 1
		for i := range shape {
			st[i] = s
			s *= max(shape[i], 1)
		}
		return 1, st
	}}
	// padded is row-major with the last axis contiguous and every other
	// stride padded (rows 3 elements apart more than dense), from element 2.
	padded = layout{"padded", func(shape []int) (int, []int) {
		st := make([]int, len(shape))
		s := 1
		for i := len(shape) - 1; i >= 0; i-- {
			st[i] = s
			s = s*max(shape[i], 1) + 3
		}
		return 2, st
	}}
)

// bcast is row-major over the axes not listed, with stride 0 (broadcast)
// along the listed ones, from element 2.
func bcast(axes ...int) layout {
	return layout{"bcast", func(shape []int) (int, []int) {
		st := make([]int, len(shape))
		s := 1
		for i := len(shape) - 1; i >= 0; i-- {
			zero := false
			for _, a := range axes {
				zero = zero || a == i
			}
			if zero {
				continue
			}
			st[i] = s
			s *= max(shape[i], 1)
		}
		return 2, st
	}}
}

// scalarBcast broadcasts one element to every position.
var scalarBcast = layout{"scalar", func(shape []int) (int, []int) { return 4, make([]int, len(shape)) }}
