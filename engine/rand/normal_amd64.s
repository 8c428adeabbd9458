//go:build !purego

#include "textflag.h"

// normalBlocksAVX2 is normal16AVX2 (avxmath.go) in AVX2 and FMA
// instructions: the same operations on the same eight float32 lanes in the
// same order, each fma8 one VFMADD/VFNMADD/VFMSUB here and each mul8, add8
// and sub8 one VMULPS, VADDPS and VSUBPS, so that every rounding is the one
// the Go code (and libtorch's machine code, which it follows) performs.
// Hardware FMA rounds once, as fma8 does, and Go leaves MXCSR at its
// default (round to nearest, no flush to zero), as PyTorch does.

// SPLAT defines name<> as eight copies of the 32-bit pattern v.
#define SPLAT(name, v) \
	DATA name<>+0(SB)/4, $v; \
	DATA name<>+4(SB)/4, $v; \
	DATA name<>+8(SB)/4, $v; \
	DATA name<>+12(SB)/4, $v; \
	DATA name<>+16(SB)/4, $v; \
	DATA name<>+20(SB)/4, $v; \
	DATA name<>+24(SB)/4, $v; \
	DATA name<>+28(SB)/4, $v; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

// The constants of avxmath.go as IEEE 754 bits (TestAVXConstants checks
// the same bits), and the integer constants of avx_mathfun.h.
SPLAT(one, 0x3f800000)
SPLAT(half, 0x3f000000)
SPLAT(minusTwo, 0xc0000000)
SPLAT(twoPi, 0x40c90fdb)
SPLAT(minNormPos, 0x00800000)
SPLAT(invMantMask, 0x807fffff)
SPLAT(signMask, 0x80000000)
SPLAT(absMask, 0x7fffffff)
SPLAT(i0x7f, 0x0000007f)
SPLAT(i1, 0x00000001)
SPLAT(iInv1, 0xfffffffe)
SPLAT(i2, 0x00000002)
SPLAT(i4, 0x00000004)
SPLAT(sqrthf, 0x3f3504f3)
SPLAT(logP0, 0x3d9021bb)
SPLAT(logP1, 0xbdebd1b8)
SPLAT(logP2, 0x3def251a)
SPLAT(logP3, 0xbdfe5d4f)
SPLAT(logP4, 0x3e11e9bf)
SPLAT(logP5, 0xbe2aae50)
SPLAT(logP6, 0x3e4cceac)
SPLAT(logP7, 0xbe7ffffc)
SPLAT(logP8, 0x3eaaaaaa)
SPLAT(logQ1, 0xb95e8083)
SPLAT(logQ2, 0x3f318000)
SPLAT(minusDP1, 0xbf490000)
SPLAT(minusDP2, 0xb97da000)
SPLAT(minusDP3, 0xb3222169)
SPLAT(sincofP0, 0xb94ca1f9)
SPLAT(sincofP1, 0x3c08839e)
SPLAT(sincofP2, 0xbe2aaaa3)
SPLAT(coscofP0, 0x37ccf5ce)
SPLAT(coscofP1, 0xbab6061a)
SPLAT(coscofP2, 0x3d2aaaa5)
SPLAT(cephesFOPI, 0x3fa2f983)

// func normalBlocksAVX2(d *float32, blocks int, mean, std float32)
//
// Transforms blocks consecutive blocks of 16 uniforms at d in place.
// Registers: Y14 mean, Y15 std; per block Y0 u1, Y1 u2, then
//
//	log256:   Y2 x (then log x, radius), Y3 invalid mask, Y4 e,
//	          Y5 mask/tmp, Y6 z, Y7 y, Y8 e*q1;
//	sincos256: Y0 z, Y1 theta, Y9 x, Y10 j, Y11 y, Y12 sign of sin,
//	          Y13 sign of cos, Y3 poly mask, Y4 swap, Y5 cos polynomial,
//	          Y6 sin polynomial, Y7 z/2 then ysin2, Y8 ysin1.
TEXT ·normalBlocksAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ blocks+8(FP), CX
	VBROADCASTSS mean+16(FP), Y14
	VBROADCASTSS std+20(FP), Y15
	TESTQ CX, CX
	JZ done

loop:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1

	// x = 1 - u1; log256(x).
	VMOVUPS one<>(SB), Y2
	VSUBPS Y0, Y2, Y2
	VXORPS Y3, Y3, Y3
	VCMPPS $2, Y3, Y2, Y3 // invalid = x <= 0 (_CMP_LE_OS)
	VMAXPS minNormPos<>(SB), Y2, Y2
	VPSRLD $23, Y2, Y4
	VANDPS invMantMask<>(SB), Y2, Y2
	VORPS half<>(SB), Y2, Y2
	VPSUBD i0x7f<>(SB), Y4, Y4
	VCVTDQ2PS Y4, Y4
	VADDPS one<>(SB), Y4, Y4 // e
	VCMPPS $1, sqrthf<>(SB), Y2, Y5 // mask = x < SQRTHF (_CMP_LT_OS)
	VANDPS Y2, Y5, Y6 // tmp = x & mask
	VSUBPS one<>(SB), Y2, Y2
	VANDPS one<>(SB), Y5, Y5
	VSUBPS Y5, Y4, Y4
	VADDPS Y6, Y2, Y2
	VMULPS Y2, Y2, Y6 // z = x*x
	VMOVUPS logP0<>(SB), Y7
	VFMADD213PS logP1<>(SB), Y2, Y7
	VFMADD213PS logP2<>(SB), Y2, Y7
	VFMADD213PS logP3<>(SB), Y2, Y7
	VFMADD213PS logP4<>(SB), Y2, Y7
	VFMADD213PS logP5<>(SB), Y2, Y7
	VFMADD213PS logP6<>(SB), Y2, Y7
	VFMADD213PS logP7<>(SB), Y2, Y7
	VFMADD213PS logP8<>(SB), Y2, Y7
	VMULPS Y7, Y2, Y7 // y = x*y
	VMULPS logQ1<>(SB), Y4, Y8 // e*q1
	VFMADD213PS Y8, Y6, Y7 // y = y*z + e*q1
	VFNMADD231PS half<>(SB), Y6, Y7 // y = y - z*0.5
	VADDPS Y7, Y2, Y2 // x = x + y
	VFMADD231PS logQ2<>(SB), Y4, Y2 // log = e*q2 + x
	VORPS Y3, Y2, Y2 // NaN where invalid

	// radius = sqrt(-2*log); theta = 2*pi*u2.
	VMULPS minusTwo<>(SB), Y2, Y2
	VSQRTPS Y2, Y2
	VMULPS twoPi<>(SB), Y1, Y1

	// sincos256(theta).
	VANDPS absMask<>(SB), Y1, Y9 // x = |theta|
	VANDPS signMask<>(SB), Y1, Y12 // sign of sin
	VMULPS cephesFOPI<>(SB), Y9, Y10
	VCVTTPS2DQ Y10, Y10
	VPADDD i1<>(SB), Y10, Y10
	VPAND iInv1<>(SB), Y10, Y10 // j = (j + 1) &^ 1
	VCVTDQ2PS Y10, Y11 // y = float(j)
	VPAND i4<>(SB), Y10, Y4
	VPSLLD $29, Y4, Y4 // swap sign bit of sin
	VPAND i2<>(SB), Y10, Y3
	VPXOR Y5, Y5, Y5
	VPCMPEQD Y5, Y3, Y3 // poly mask: j&2 == 0
	VPSUBD i2<>(SB), Y10, Y13
	VPANDN i4<>(SB), Y13, Y13 // ^(j-2) & 4
	VPSLLD $29, Y13, Y13 // sign of cos
	VXORPS Y4, Y12, Y12
	VFMADD231PS minusDP1<>(SB), Y11, Y9
	VFMADD231PS minusDP2<>(SB), Y11, Y9
	VFMADD231PS minusDP3<>(SB), Y11, Y9
	VMULPS Y9, Y9, Y0 // z = x*x

	// Cosine polynomial.
	VMOVUPS coscofP0<>(SB), Y5
	VFMADD213PS coscofP1<>(SB), Y0, Y5
	VFMADD213PS coscofP2<>(SB), Y0, Y5
	VMULPS half<>(SB), Y0, Y7 // z*0.5
	VMULPS Y5, Y0, Y5
	VFMSUB213PS Y7, Y0, Y5 // yc*z - z*0.5
	VADDPS one<>(SB), Y5, Y5

	// Sine polynomial.
	VMOVUPS sincofP0<>(SB), Y6
	VFMADD213PS sincofP1<>(SB), Y0, Y6
	VFMADD213PS sincofP2<>(SB), Y0, Y6
	VMULPS Y6, Y0, Y6
	VFMADD213PS Y9, Y9, Y6 // ys*x + x

	// Select and sign.
	VANDPS Y6, Y3, Y7 // ysin2 = mask & ys
	VANDNPS Y5, Y3, Y8 // ysin1 = ^mask & yc
	VSUBPS Y8, Y5, Y5 // yc - ysin1
	VSUBPS Y7, Y6, Y6 // ys - ysin2
	VADDPS Y7, Y8, Y8 // sin = ysin1 + ysin2
	VADDPS Y6, Y5, Y5 // cos
	VXORPS Y12, Y8, Y8
	VXORPS Y13, Y5, Y5

	// radius*cos*std + mean, radius*sin*std + mean.
	VMULPS Y5, Y2, Y5
	VFMADD213PS Y14, Y15, Y5
	VMULPS Y8, Y2, Y8
	VFMADD213PS Y14, Y15, Y8
	VMOVUPS Y5, (DI)
	VMOVUPS Y8, 32(DI)

	ADDQ $64, DI
	DECQ CX
	JNZ loop

done:
	VZEROUPPER
	RET
