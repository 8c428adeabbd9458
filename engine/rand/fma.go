package rand

import "math"

// fma32 returns a*b+c rounded once to float32, as the vfmadd*ss/ps
// instructions of PyTorch's AVX2 kernels compute it. Go has no float32 FMA, so
// it is built from float64: the product of two float32 values is exact in
// float64, and the sum rounded to float64 then to float32 is the correctly
// rounded float32 result unless the first rounding landed exactly on a
// float32 halfway point (double rounding). In that case, and for results in
// the float32 subnormal range (whose halfway points sit elsewhere), the exact
// error of the sum decides: rounding the float64 sum to odd (nudging an
// inexact even result one ulp towards the exact value) makes the conversion
// to float32 round as the exact sum would.
func fma32(a, b, c float32) float32 {
	// The product is exact, so it does not matter whether the compiler
	// fuses this line.
	s := float64(a)*float64(b) + float64(c)
	u := math.Float64bits(s)
	if u&(1<<29-1) == 1<<28 || u&(0x7ff<<52) < (1023-126)<<52 {
		p := float64(a) * float64(b)
		bb := s - p
		if e := (p - (s - bb)) + (float64(c) - bb); e != 0 && u&1 == 0 { // Knuth's TwoSum
			if (e > 0) == (s > 0) {
				u++
			} else {
				u--
			}
		}
	}
	return float32(math.Float64frombits(u))
}
