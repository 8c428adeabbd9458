package dtype

import "math"

// BF16 is a bfloat16 value in its bit pattern: the upper 16 bits of a float32.
type BF16 uint16

// F16 is an IEEE 754 binary16 value in its bit pattern.
type F16 uint16

// BF16FromFloat32 rounds f to the nearest bfloat16, ties to even, as PyTorch
// does (c10::BFloat16's round_to_nearest_even). NaN stays a quiet NaN.
func BF16FromFloat32(f float32) BF16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN
		return BF16(u>>16 | 0x0040)
	}
	rounding := uint32(0x7fff) + (u >> 16 & 1)
	return BF16((u + rounding) >> 16)
}

// Float32 widens b exactly.
func (b BF16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// F16FromFloat32 rounds f to the nearest binary16, ties to even, with
// gradual underflow to subnormals and overflow to infinity.
func F16FromFloat32(f float32) F16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	mant := u & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return F16(sign | 0x7e00)
		}
		return F16(sign | 0x7c00)
	case exp > 142: // |f| >= 65536 before rounding: overflow
		return F16(sign | 0x7c00)
	case exp >= 113: // normal binary16
		// Keep 10 mantissa bits; round the 13 dropped bits to nearest even.
		v := uint32(exp-112)<<10 | mant>>13
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && v&1 == 1) {
			v++ // may carry into the exponent, and to infinity: both correct
		}
		return F16(sign | uint16(v))
	case exp >= 102: // subnormal binary16
		m := mant | 0x800000 // implicit leading one
		shift := uint32(126 - exp)
		v := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && v&1 == 1) {
			v++
		}
		return F16(sign | uint16(v))
	default: // underflows to zero
		return F16(sign)
	}
}

// Float32 widens h exactly.
func (h F16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise.
		e := uint32(113)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	}
}
