package tensor

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestFMA32 compares fma32 with a·b + c computed exactly and rounded once,
// on random operands and on sums that float64 rounds onto a float32 tie
// (where rounding twice would pick the wrong neighbour).
func TestFMA32(t *testing.T) {
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		p.Mul(p, new(big.Float).SetFloat64(float64(b)))
		p.Add(p, new(big.Float).SetFloat64(float64(c)))
		f, _ := p.SetPrec(24).Float32()
		return f
	}
	u := float32(math.Ldexp(1, -18))
	small := float32(math.Ldexp(1, -24)) * (1 + u) // ·(1 - u): 2⁻²⁴ - 2⁻⁶⁰
	ties := [][3]float32{
		{small, 1 - u, 1 + 2*float32(math.Ldexp(1, -24))},  // just below a tie that rounds up to even
		{-small, 1 - u, 1 + 2*float32(math.Ldexp(1, -24))}, // just above a tie that rounds down to even
		{small, -(1 - u), -1 - 2*float32(math.Ldexp(1, -24))},
	}
	for _, c := range ties {
		naive := float32(float64(c[0])*float64(c[1]) + float64(c[2]))
		want := exact(c[0], c[1], c[2])
		if naive == want {
			t.Fatalf("%v is not a double-rounding case", c)
		}
		if got := fma32(c[0], c[1], c[2]); got != want {
			t.Errorf("fma32(%v) = %v, want %v", c, got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 100000; i++ {
		a := float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
		b := float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
		c := float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
		if got, want := fma32(a, b, c), exact(a, b, c); got != want {
			t.Fatalf("fma32(%v, %v, %v) = %v, want %v", a, b, c, got, want)
		}
	}
}
