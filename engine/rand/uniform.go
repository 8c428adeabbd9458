package rand

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The uniform transforms are at::transformation::uniform_real
// (ATen/core/TransformationHelper.h): keep as many random bits as the type has
// mantissa digits, scale them into [0, 1), then map to [from, to):
//
//	x := (bits & (1<<digits - 1)) * 2^-digits     // exact
//	return x*(to-from) + from
//
// float32 uses one 32-bit draw (24 bits kept), float64 one 64-bit draw (53
// bits), bfloat16 one 32-bit draw (8 bits). The last line is computed in the
// type's accumulation type (float for float32 and bfloat16, double for
// float64) and GCC contracts it into one fused multiply-add in the AVX2 build
// (vfmadd132ss/sd in uniform_kernel), which is why it is an FMA here.

const (
	twoPow24Inv = 1.0 / (1 << 24)
	twoPow53Inv = 1.0 / (1 << 53)
)

// float64Uniform01 returns a float64 in [0, 1) from one 64-bit draw.
func (g *Generator) float64Uniform01() float64 {
	return float64(g.Uint64()&(1<<53-1)) * twoPow53Inv
}

// fillUniform01 sets dst to float32 uniforms in [0, 1), one 32-bit draw each.
func (g *Generator) fillUniform01(dst []float32) {
	for len(dst) > 0 {
		w := g.block(len(dst))
		for i, y := range w {
			dst[i] = float32(temper(y)&(1<<24-1)) * twoPow24Inv
		}
		dst = dst[len(w):]
	}
}

// fillUniform01x64 sets dst to float64 uniforms in [0, 1), one 64-bit draw
// (two engine outputs, high half first) each.
func (g *Generator) fillUniform01x64(dst []float64) {
	var buf [512]uint32
	for len(dst) > 0 {
		n := min(len(dst), len(buf)/2)
		b := buf[:2*n]
		g.fillUint32(b)
		for i := range dst[:n] {
			v := uint64(b[2*i])<<32 | uint64(b[2*i+1])
			dst[i] = float64(v&(1<<53-1)) * twoPow53Inv
		}
		dst = dst[n:]
	}
}

// checkUniform mirrors the argument checks of templates::uniform_impl_.
func checkUniform(from, to, maxv float64) {
	if math.IsNaN(from) || math.IsNaN(to) || from < -maxv || from > maxv || to < -maxv || to > maxv {
		panic(fmt.Sprintf("rand: uniform bounds [%v, %v) out of range of the type", from, to))
	}
	if !(from <= to) {
		panic(fmt.Sprintf("rand: uniform expects from <= to, got from=%v to=%v", from, to))
	}
	if to-from > maxv {
		panic(fmt.Sprintf("rand: uniform range to-from=%v overflows the type", to-from))
	}
}

// Uniform32 fills dst with samples of U[from, to), as Tensor.uniform_(from, to)
// on a contiguous float32 tensor (and so torch.rand, nn.init.uniform_ and
// kaiming_uniform_). One 32-bit draw per element, in order.
//
// from and to are float64 because PyTorch takes them as Python floats and
// rounds them to float32 itself; the rounding happens here the same way.
// Invalid bounds (NaN, from > to, out of float32 range) panic, where PyTorch
// raises.
func (g *Generator) Uniform32(dst []float32, from, to float64) {
	checkUniform(from, to, math.MaxFloat32)
	f, t := float32(from), float32(to)
	g.uniform32(dst, f, t-f)
}

// uniform32 is Uniform32 with its bounds rounded: x*r + f, one fused
// multiply-add in float32, for each 24-bit uniform x.
func (g *Generator) uniform32(dst []float32, f, r float32) {
	if f == 0 && r == 1 {
		g.fillUniform01(dst) // torch.rand: x*1+0 is x
		return
	}
	for len(dst) > 0 {
		w := g.block(len(dst))
		for i, y := range w {
			x := float32(temper(y)&(1<<24-1)) * twoPow24Inv
			// fma32(x, r, f) with its fast path written out: Go does not
			// inline fma32.
			s := float64(x)*float64(r) + float64(f)
			if u := math.Float64bits(s); u&(1<<29-1) == 1<<28 || u&(0x7ff<<52) < (1023-126)<<52 {
				s = float64(fma32(x, r, f))
			}
			dst[i] = float32(s)
		}
		dst = dst[len(w):]
	}
}

// Uniform64 fills dst with samples of U[from, to), as Tensor.uniform_(from, to)
// on a contiguous float64 tensor. One 64-bit draw (two engine outputs) per
// element.
func (g *Generator) Uniform64(dst []float64, from, to float64) {
	checkUniform(from, to, math.MaxFloat64)
	g.uniform64(dst, from, to-from)
}

// uniform64 is Uniform64 with r = to-from: math.FMA(x, r, from) for each
// 53-bit uniform x.
func (g *Generator) uniform64(dst []float64, from, r float64) {
	g.fillUniform01x64(dst)
	for i, x := range dst {
		dst[i] = math.FMA(x, r, from)
	}
}

// UniformBF16 fills dst with samples of U[from, to), as Tensor.uniform_(from,
// to) on a contiguous bfloat16 tensor. PyTorch keeps only 8 random bits per
// element (the bfloat16 mantissa width), rounds from and to to bfloat16
// (through float32), computes to-from in float32 and rounds it to bfloat16
// too (c10::BFloat16 arithmetic returns BFloat16), and rounds the fused result
// to bfloat16. One 32-bit draw per element.
//
// There is no float16 counterpart: PyTorch's Half kernel runs Half arithmetic
// emulated in software, and float16 parameters are better initialised in
// float32 and rounded, which is what torch does when a model is created in
// float32 and converted with .half().
func (g *Generator) UniformBF16(dst []dtype.BF16, from, to float64) {
	const maxBF16 = 3.3895313892515355e38 // std::numeric_limits<BFloat16>::max()
	checkUniform(from, to, maxBF16)
	f := dtype.BF16FromFloat32(float32(from)).Float32()
	t := dtype.BF16FromFloat32(float32(to)).Float32()
	r := dtype.BF16FromFloat32(t - f).Float32()
	for i := range dst {
		x := float32(g.Uint32()&0xff) * (1.0 / 256)
		dst[i] = dtype.BF16FromFloat32(fma32(x, r, f))
	}
}
