//go:build amd64 && !purego

#include "textflag.h"

// The lanes' even and odd elements of two vectors (VPERMT2PS indices);
// the even ones are also each lane's first tap, 2·lane, as int32.
DATA poolEven<>+0(SB)/4, $0
DATA poolEven<>+4(SB)/4, $2
DATA poolEven<>+8(SB)/4, $4
DATA poolEven<>+12(SB)/4, $6
DATA poolEven<>+16(SB)/4, $8
DATA poolEven<>+20(SB)/4, $10
DATA poolEven<>+24(SB)/4, $12
DATA poolEven<>+28(SB)/4, $14
DATA poolEven<>+32(SB)/4, $16
DATA poolEven<>+36(SB)/4, $18
DATA poolEven<>+40(SB)/4, $20
DATA poolEven<>+44(SB)/4, $22
DATA poolEven<>+48(SB)/4, $24
DATA poolEven<>+52(SB)/4, $26
DATA poolEven<>+56(SB)/4, $28
DATA poolEven<>+60(SB)/4, $30
GLOBL poolEven<>(SB), RODATA|NOPTR, $64
DATA poolOdd<>+0(SB)/4, $1
DATA poolOdd<>+4(SB)/4, $3
DATA poolOdd<>+8(SB)/4, $5
DATA poolOdd<>+12(SB)/4, $7
DATA poolOdd<>+16(SB)/4, $9
DATA poolOdd<>+20(SB)/4, $11
DATA poolOdd<>+24(SB)/4, $13
DATA poolOdd<>+28(SB)/4, $15
DATA poolOdd<>+32(SB)/4, $17
DATA poolOdd<>+36(SB)/4, $19
DATA poolOdd<>+40(SB)/4, $21
DATA poolOdd<>+44(SB)/4, $23
DATA poolOdd<>+48(SB)/4, $25
DATA poolOdd<>+52(SB)/4, $27
DATA poolOdd<>+56(SB)/4, $29
DATA poolOdd<>+60(SB)/4, $31
GLOBL poolOdd<>(SB), RODATA|NOPTR, $64

// POOL_CHUNK pools 16 windows: rows 2r and 2r+1 from BX and CX (32 floats
// each, lanes masked by K1 and K2), the values to (R13) (K3) and the
// positions to (R14) as int64 (K4 the first 8, K5 the last 8), the first
// window's first tap at index AX.
//
//   Z4-Z7  the taps: even and odd columns of row 2r, then of row 2r+1
//   Z8     their maximum (VMAXPS: right but for NaN lanes, which come last)
//   Z10    the value: the first tap equal to the maximum (D first, A last,
//          so that the first wins), then in NaN lanes the last NaN
//   Z11    that tap's offset in its window (Z22-Z25: 0, 1, w, w+1)
#define POOL_CHUNK \
	VMOVUPS.Z (BX), K1, Z0; \
	VMOVUPS.Z 64(BX), K2, Z1; \
	VMOVUPS.Z (CX), K1, Z2; \
	VMOVUPS.Z 64(CX), K2, Z3; \
	VMOVAPS Z0, Z4; \
	VPERMT2PS Z1, Z20, Z4; \
	VMOVAPS Z0, Z5; \
	VPERMT2PS Z1, Z21, Z5; \
	VMOVAPS Z2, Z6; \
	VPERMT2PS Z3, Z20, Z6; \
	VMOVAPS Z2, Z7; \
	VPERMT2PS Z3, Z21, Z7; \
	VMAXPS Z5, Z4, Z8; \
	VMAXPS Z7, Z6, Z9; \
	VMAXPS Z9, Z8, Z8; \
	VMOVAPS Z7, Z10; \
	VMOVDQA32 Z25, Z11; \
	VCMPPS $0, Z8, Z6, K6; \
	VMOVAPS Z6, K6, Z10; \
	VMOVDQA32 Z24, K6, Z11; \
	VCMPPS $0, Z8, Z5, K6; \
	VMOVAPS Z5, K6, Z10; \
	VMOVDQA32 Z23, K6, Z11; \
	VCMPPS $0, Z8, Z4, K6; \
	VMOVAPS Z4, K6, Z10; \
	VMOVDQA32 Z22, K6, Z11; \
	VCMPPS $3, Z4, Z4, K6; \
	VMOVAPS Z4, K6, Z10; \
	VMOVDQA32 Z22, K6, Z11; \
	VCMPPS $3, Z5, Z5, K6; \
	VMOVAPS Z5, K6, Z10; \
	VMOVDQA32 Z23, K6, Z11; \
	VCMPPS $3, Z6, Z6, K6; \
	VMOVAPS Z6, K6, Z10; \
	VMOVDQA32 Z24, K6, Z11; \
	VCMPPS $3, Z7, Z7, K6; \
	VMOVAPS Z7, K6, Z10; \
	VMOVDQA32 Z25, K6, Z11; \
	VPBROADCASTD AX, Z12; \
	VPADDD Z20, Z12, Z12; \
	VPADDD Z11, Z12, Z12; \
	VPMOVSXDQ Y12, Z13; \
	VEXTRACTI64X4 $1, Z12, Y14; \
	VPMOVSXDQ Y14, Z14; \
	VMOVUPS Z10, K3, (R13); \
	VMOVDQU64 Z13, K4, (R14); \
	VMOVDQU64 Z14, K5, 64(R14)

// POOL_ROWS runs CHUNK over every row of windows: full chunks of 16
// with every lane, then the tail's masks from R15 (in0 | in1<<16 |
// out<<32), advancing the rows (BX, CX from SI and R12, 2·r·w), the
// outputs (R13, 16 floats; R14, 16 positions) and the first tap (AX).
// R11 counts the rows, R10 the full chunks of a row; the caller defines
// rowsDone, where it goes after the last row.
#define POOL_ROWS(CHUNK) \
rows: \
	TESTQ R11, R11; \
	JZ   rowsDone; \
	LEAQ (SI)(R12*4), BX; \
	LEAQ (BX)(R9*4), CX; \
	MOVQ R12, AX; \
	KXNORW K1, K1, K1; \
	KXNORW K2, K2, K2; \
	KXNORW K3, K3, K3; \
	KXNORW K4, K4, K4; \
	KXNORW K5, K5, K5; \
	MOVQ R10, DX; \
rowsFull: \
	TESTQ DX, DX; \
	JZ   rowsTail; \
	CHUNK; \
	ADDQ $128, BX; \
	ADDQ $128, CX; \
	ADDQ $64, R13; \
	ADDQ $128, R14; \
	ADDQ $32, AX; \
	DECQ DX; \
	JMP  rowsFull; \
rowsTail: \
	TESTQ R15, R15; \
	JZ   rowsNext; \
	MOVQ R15, DX; \
	KMOVW DX, K1; \
	SHRQ $16, DX; \
	KMOVW DX, K2; \
	SHRQ $16, DX; \
	KMOVW DX, K3; \
	KMOVW DX, K4; \
	SHRQ $8, DX; \
	KMOVW DX, K5; \
	CHUNK; \
	MOVQ R15, DX; \
	SHRQ $32, DX; \
	POPCNTQ DX, DX; \
	LEAQ (R13)(DX*4), R13; \
	LEAQ (R14)(DX*8), R14; \
rowsNext: \
	LEAQ (R12)(R9*2), R12; \
	DECQ R11; \
	JMP  rows

// func maxPool2x2AVX512(y *float32, at *int64, x *float32, w, ow, oh, full, tail int)
//
// MaxPool2x2 on AVX-512: each row of windows in full chunks of 16, then
// the tail's masks (tail = in0 | in1<<16 | out<<32; 0 when ow is a
// multiple of 16). Positions are computed in int32 (the caller checks
// that they fit) and widened.
TEXT ·maxPool2x2AVX512(SB), NOSPLIT, $0-64
	MOVQ y+0(FP), R13
	MOVQ at+8(FP), R14
	MOVQ x+16(FP), SI
	MOVQ w+24(FP), R9
	MOVQ oh+40(FP), R11
	MOVQ full+48(FP), R10
	MOVQ tail+56(FP), R15
	VMOVUPS poolEven<>(SB), Z20
	VMOVUPS poolOdd<>(SB), Z21
	VPXORD Z22, Z22, Z22
	MOVL $1, AX
	VPBROADCASTD AX, Z23
	MOVL R9, AX
	VPBROADCASTD AX, Z24
	INCL AX
	VPBROADCASTD AX, Z25
	XORQ R12, R12

	POOL_ROWS(POOL_CHUNK)

rowsDone:
	VZEROUPPER
	RET

// Each lane's first tap, 2·lane, as int64; and the VPERMT2PS indices that
// interleave two vectors' lanes (the first 16 of the 32, then the rest).
DATA poolLanes64<>+0(SB)/8, $0
DATA poolLanes64<>+8(SB)/8, $2
DATA poolLanes64<>+16(SB)/8, $4
DATA poolLanes64<>+24(SB)/8, $6
DATA poolLanes64<>+32(SB)/8, $8
DATA poolLanes64<>+40(SB)/8, $10
DATA poolLanes64<>+48(SB)/8, $12
DATA poolLanes64<>+56(SB)/8, $14
DATA poolLanes64<>+64(SB)/8, $16
DATA poolLanes64<>+72(SB)/8, $18
DATA poolLanes64<>+80(SB)/8, $20
DATA poolLanes64<>+88(SB)/8, $22
DATA poolLanes64<>+96(SB)/8, $24
DATA poolLanes64<>+104(SB)/8, $26
DATA poolLanes64<>+112(SB)/8, $28
DATA poolLanes64<>+120(SB)/8, $30
GLOBL poolLanes64<>(SB), RODATA|NOPTR, $128
DATA poolInterleave<>+0(SB)/4, $0
DATA poolInterleave<>+4(SB)/4, $16
DATA poolInterleave<>+8(SB)/4, $1
DATA poolInterleave<>+12(SB)/4, $17
DATA poolInterleave<>+16(SB)/4, $2
DATA poolInterleave<>+20(SB)/4, $18
DATA poolInterleave<>+24(SB)/4, $3
DATA poolInterleave<>+28(SB)/4, $19
DATA poolInterleave<>+32(SB)/4, $4
DATA poolInterleave<>+36(SB)/4, $20
DATA poolInterleave<>+40(SB)/4, $5
DATA poolInterleave<>+44(SB)/4, $21
DATA poolInterleave<>+48(SB)/4, $6
DATA poolInterleave<>+52(SB)/4, $22
DATA poolInterleave<>+56(SB)/4, $7
DATA poolInterleave<>+60(SB)/4, $23
DATA poolInterleave<>+64(SB)/4, $8
DATA poolInterleave<>+68(SB)/4, $24
DATA poolInterleave<>+72(SB)/4, $9
DATA poolInterleave<>+76(SB)/4, $25
DATA poolInterleave<>+80(SB)/4, $10
DATA poolInterleave<>+84(SB)/4, $26
DATA poolInterleave<>+88(SB)/4, $11
DATA poolInterleave<>+92(SB)/4, $27
DATA poolInterleave<>+96(SB)/4, $12
DATA poolInterleave<>+100(SB)/4, $28
DATA poolInterleave<>+104(SB)/4, $13
DATA poolInterleave<>+108(SB)/4, $29
DATA poolInterleave<>+112(SB)/4, $14
DATA poolInterleave<>+116(SB)/4, $30
DATA poolInterleave<>+120(SB)/4, $15
DATA poolInterleave<>+124(SB)/4, $31
GLOBL poolInterleave<>(SB), RODATA|NOPTR, $128

// POOL_BACK_TAP selects the lanes of Z0 whose window's position (Z1, Z2:
// int64, 8 windows each) is the first tap (Z4, Z5) plus off (a register
// of int64 lanes, or Z22 for zero) into dst, zero elsewhere, and ORs the
// selected lanes into DI.
#define POOL_BACK_TAP(off, dst) \
	VPADDQ off, Z4, Z6; \
	VPADDQ off, Z5, Z7; \
	VPCMPEQQ Z6, Z1, K6; \
	VPCMPEQQ Z7, Z2, K7; \
	KUNPCKBW K6, K7, K6; \
	VMOVAPS.Z Z0, K6, dst; \
	KMOVW K6, R8; \
	ORL R8, DI

// POOL_BACK_CHUNK spreads 16 windows' gradients (dy at R13, K3; positions
// at R14, K4 and K5; the first window's first tap at AX) over rows 2r and
// 2r+1 of dx (BX and CX, K1 and K2): each window's tap at its position
// gets dy + 0, the other three 0. It jumps to poolBackBad when a position
// is not one of its window's taps.
#define POOL_BACK_CHUNK \
	VMOVUPS.Z (R13), K3, Z0; \
	VADDPS Z22, Z0, Z0; \
	VMOVDQU64.Z (R14), K4, Z1; \
	VMOVDQU64.Z 64(R14), K5, Z2; \
	VPBROADCASTQ AX, Z3; \
	VPADDQ Z20, Z3, Z4; \
	VPADDQ Z21, Z3, Z5; \
	XORL DI, DI; \
	POOL_BACK_TAP(Z22, Z8); \
	POOL_BACK_TAP(Z26, Z9); \
	POOL_BACK_TAP(Z27, Z10); \
	POOL_BACK_TAP(Z28, Z11); \
	KMOVW K3, R8; \
	ANDL R8, DI; \
	CMPL DI, R8; \
	JNE  poolBackBad; \
	VMOVAPS Z8, Z12; \
	VPERMT2PS Z9, Z29, Z12; \
	VMOVAPS Z8, Z13; \
	VPERMT2PS Z9, Z30, Z13; \
	VMOVAPS Z10, Z14; \
	VPERMT2PS Z11, Z29, Z14; \
	VMOVAPS Z10, Z15; \
	VPERMT2PS Z11, Z30, Z15; \
	VMOVUPS Z12, K1, (BX); \
	VMOVUPS Z13, K2, 64(BX); \
	VMOVUPS Z14, K1, (CX); \
	VMOVUPS Z15, K2, 64(CX)

// func maxPool2x2BackwardAVX512(dx, dy *float32, at *int64, w, ow, oh, full, tail int) (ok bool)
//
// MaxPool2x2Backward's windows on AVX-512, with maxPool2x2AVX512's chunks
// and masks; false at the first position outside its window.
TEXT ·maxPool2x2BackwardAVX512(SB), NOSPLIT, $0-65
	MOVQ dx+0(FP), SI
	MOVQ dy+8(FP), R13
	MOVQ at+16(FP), R14
	MOVQ w+24(FP), R9
	MOVQ oh+40(FP), R11
	MOVQ full+48(FP), R10
	MOVQ tail+56(FP), R15
	VMOVDQU64 poolLanes64<>(SB), Z20
	VMOVDQU64 poolLanes64<>+64(SB), Z21
	VPXORD Z22, Z22, Z22
	MOVQ $1, AX
	VPBROADCASTQ AX, Z26
	VPBROADCASTQ R9, Z27
	LEAQ 1(R9), AX
	VPBROADCASTQ AX, Z28
	VMOVDQU32 poolInterleave<>(SB), Z29
	VMOVDQU32 poolInterleave<>+64(SB), Z30
	XORQ R12, R12

	POOL_ROWS(POOL_BACK_CHUNK)

rowsDone:
	MOVB $1, ok+64(FP)
	VZEROUPPER
	RET

poolBackBad:
	MOVB $0, ok+64(FP)
	VZEROUPPER
	RET

// Each of 8 lanes' first tap, 2·lane, as int32 (the AVX2 kernel).
DATA poolLanes32<>+0(SB)/4, $0
DATA poolLanes32<>+4(SB)/4, $2
DATA poolLanes32<>+8(SB)/4, $4
DATA poolLanes32<>+12(SB)/4, $6
DATA poolLanes32<>+16(SB)/4, $8
DATA poolLanes32<>+20(SB)/4, $10
DATA poolLanes32<>+24(SB)/4, $12
DATA poolLanes32<>+28(SB)/4, $14
GLOBL poolLanes32<>(SB), RODATA|NOPTR, $32

// POOL2_CORE pools 8 windows on AVX2 from rows 2r (Y0, Y1: 16 floats)
// and 2r+1 (Y2, Y3): the taps A-D (Y4-Y7, even and odd columns of each
// row), their maximum (Y8), the first tap equal to it and then in NaN
// lanes the last NaN (value Y10, offset in its window Y11), and the
// positions AX + 2·lane + offset widened to int64 in Y2 (lanes 0-3) and
// Y3 (4-7). Y12-Y14 hold the offsets w+1, w and 1, Y15 the lanes' 2·lane.
#define POOL2_CORE \
	VSHUFPS $0x88, Y1, Y0, Y4; \
	VPERMPD $0xD8, Y4, Y4; \
	VSHUFPS $0xDD, Y1, Y0, Y5; \
	VPERMPD $0xD8, Y5, Y5; \
	VSHUFPS $0x88, Y3, Y2, Y6; \
	VPERMPD $0xD8, Y6, Y6; \
	VSHUFPS $0xDD, Y3, Y2, Y7; \
	VPERMPD $0xD8, Y7, Y7; \
	VXORPS Y0, Y0, Y0; \
	VMAXPS Y5, Y4, Y8; \
	VMAXPS Y7, Y6, Y9; \
	VMAXPS Y9, Y8, Y8; \
	VMOVAPS Y7, Y10; \
	VMOVAPS Y12, Y11; \
	VCMPPS $0, Y8, Y6, Y9; \
	VBLENDVPS Y9, Y6, Y10, Y10; \
	VBLENDVPS Y9, Y13, Y11, Y11; \
	VCMPPS $0, Y8, Y5, Y9; \
	VBLENDVPS Y9, Y5, Y10, Y10; \
	VBLENDVPS Y9, Y14, Y11, Y11; \
	VCMPPS $0, Y8, Y4, Y9; \
	VBLENDVPS Y9, Y4, Y10, Y10; \
	VBLENDVPS Y9, Y0, Y11, Y11; \
	VCMPPS $3, Y4, Y4, Y9; \
	VBLENDVPS Y9, Y4, Y10, Y10; \
	VBLENDVPS Y9, Y0, Y11, Y11; \
	VCMPPS $3, Y5, Y5, Y9; \
	VBLENDVPS Y9, Y5, Y10, Y10; \
	VBLENDVPS Y9, Y14, Y11, Y11; \
	VCMPPS $3, Y6, Y6, Y9; \
	VBLENDVPS Y9, Y6, Y10, Y10; \
	VBLENDVPS Y9, Y13, Y11, Y11; \
	VCMPPS $3, Y7, Y7, Y9; \
	VBLENDVPS Y9, Y7, Y10, Y10; \
	VBLENDVPS Y9, Y12, Y11, Y11; \
	MOVL AX, X1; \
	VPBROADCASTD X1, Y1; \
	VPADDD Y15, Y1, Y1; \
	VPADDD Y11, Y1, Y1; \
	VPMOVSXDQ X1, Y2; \
	VEXTRACTI128 $1, Y1, X3; \
	VPMOVSXDQ X3, Y3

// func maxPool2x2AVX2(y *float32, at *int64, x *float32, w, ow, oh int, masks *int32)
//
// MaxPool2x2 on AVX2: each row of windows in chunks of 8, then a tail of
// ow%8 windows through masks (the 2·rem input lanes of the two vectors,
// the rem outputs, the rem positions as int64 in two vectors: 5 vectors
// of 8 int32 at masks, from poolMasksAVX2).
TEXT ·maxPool2x2AVX2(SB), NOSPLIT, $0-56
	MOVQ y+0(FP), R13
	MOVQ at+8(FP), R14
	MOVQ x+16(FP), SI
	MOVQ w+24(FP), R9
	MOVQ ow+32(FP), R10
	MOVQ oh+40(FP), R11
	MOVQ masks+48(FP), DI
	VMOVDQU poolLanes32<>(SB), Y15
	MOVL $1, AX
	MOVL AX, X14
	VPBROADCASTD X14, Y14
	MOVL R9, AX
	MOVL AX, X13
	VPBROADCASTD X13, Y13
	INCL AX
	MOVL AX, X12
	VPBROADCASTD X12, Y12
	MOVQ R10, R15
	ANDQ $7, R15
	SHRQ $3, R10
	XORQ R12, R12

pool2Row:
	TESTQ R11, R11
	JZ   pool2Done
	LEAQ (SI)(R12*4), BX
	LEAQ (BX)(R9*4), CX
	MOVQ R12, AX
	MOVQ R10, DX

pool2Full:
	TESTQ DX, DX
	JZ   pool2Tail
	VMOVUPS (BX), Y0
	VMOVUPS 32(BX), Y1
	VMOVUPS (CX), Y2
	VMOVUPS 32(CX), Y3
	POOL2_CORE
	VMOVUPS Y10, (R13)
	VMOVDQU Y2, (R14)
	VMOVDQU Y3, 32(R14)
	ADDQ $64, BX
	ADDQ $64, CX
	ADDQ $32, R13
	ADDQ $64, R14
	ADDQ $16, AX
	DECQ DX
	JMP  pool2Full

pool2Tail:
	TESTQ R15, R15
	JZ   pool2Next
	VMOVDQU (DI), Y9
	VMASKMOVPS (BX), Y9, Y0
	VMASKMOVPS (CX), Y9, Y2
	VMOVDQU 32(DI), Y9
	VMASKMOVPS 32(BX), Y9, Y1
	VMASKMOVPS 32(CX), Y9, Y3
	POOL2_CORE
	VMOVDQU 64(DI), Y9
	VMASKMOVPS Y10, Y9, (R13)
	VMOVDQU 96(DI), Y9
	VPMASKMOVQ Y2, Y9, (R14)
	VMOVDQU 128(DI), Y9
	VPMASKMOVQ Y3, Y9, 32(R14)
	LEAQ (R13)(R15*4), R13
	LEAQ (R14)(R15*8), R14

pool2Next:
	LEAQ (R12)(R9*2), R12
	DECQ R11
	JMP  pool2Row

pool2Done:
	VZEROUPPER
	RET
