//go:build amd64

#include "textflag.h"

// Transposition kernels for packing (pack.go): they move 8 or 4 rows of a
// row-major source into columns of a panel, 8 depth steps at a time, with
// AVX shuffles instead of one scalar load and store per element.

// func transpose8(dst *float32, ldd int, src *float32, lds int, n int)
//
// For r < 8 and p < n (n a multiple of 8):
//	dst[p·ldd + r] = src[r·lds + p]
//
// Registers:
//   DI, R8    dst and ldd in bytes; R13 = 3·ldd; DX = 8·ldd, the dst advance per block
//   SI, R9    src and lds in bytes; R10 = 3·lds; R11 = src + 4·lds (rows 4–7)
//   CX        blocks of 8 columns left
//   R12       dst + 4·ldd (output rows 4–7 of the block)
//   Y0–Y7     the 8×8 block, one source row each, then the output rows
//   Y8–Y15    intermediate shuffles
TEXT ·transpose8(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	SHLQ $2, R8
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R9
	SHLQ $2, R9
	MOVQ n+32(FP), CX
	SHRQ $3, CX
	JZ   t8_done
	LEAQ (R9)(R9*2), R10
	LEAQ (SI)(R9*4), R11
	MOVQ R8, DX
	SHLQ $3, DX
	LEAQ (R8)(R8*2), R13

t8_loop:
	// Rows r0–r7 of the block: row i holds columns p…p+7.
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R9*1), Y1
	VMOVUPS (SI)(R9*2), Y2
	VMOVUPS (SI)(R10*1), Y3
	VMOVUPS (R11), Y4
	VMOVUPS (R11)(R9*1), Y5
	VMOVUPS (R11)(R9*2), Y6
	VMOVUPS (R11)(R10*1), Y7

	// Interleave pairs of rows: Y8 = [00 10 01 11 | 04 14 05 15] …
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15

	// Gather groups of four rows: Y0 = [00 10 20 30 | 04 14 24 34] …
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7

	// Join the halves: output row q = column p+q of the block.
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15

	LEAQ (DI)(R8*4), R12
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(R8*1)
	VMOVUPS Y10, (DI)(R8*2)
	VMOVUPS Y11, (DI)(R13*1)
	VMOVUPS Y12, (R12)
	VMOVUPS Y13, (R12)(R8*1)
	VMOVUPS Y14, (R12)(R8*2)
	VMOVUPS Y15, (R12)(R13*1)

	ADDQ $32, SI
	ADDQ $32, R11
	ADDQ DX, DI
	DECQ CX
	JNZ  t8_loop

t8_done:
	VZEROUPPER
	RET

// func transpose4(dst *float32, ldd int, src *float32, lds int, n int)
//
// For r < 4 and p < n (n a multiple of 8):
//	dst[p·ldd + r] = src[r·lds + p]
//
// Registers as in transpose8, with rows 0–3 only; each output row is 4
// floats, the low or high half of Y0–Y3 after the shuffles.
TEXT ·transpose4(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	SHLQ $2, R8
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R9
	SHLQ $2, R9
	MOVQ n+32(FP), CX
	SHRQ $3, CX
	JZ   t4_done
	LEAQ (R9)(R9*2), R10
	MOVQ R8, DX
	SHLQ $3, DX
	LEAQ (R8)(R8*2), R13

t4_loop:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R9*1), Y1
	VMOVUPS (SI)(R9*2), Y2
	VMOVUPS (SI)(R10*1), Y3

	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11

	// Y0 = [00 10 20 30 | 04 14 24 34]: column p in the low half, p+4 in
	// the high half; likewise Y1 (p+1, p+5), Y2 (p+2, p+6), Y3 (p+3, p+7).
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3

	LEAQ (DI)(R8*4), R12
	VMOVUPS X0, (DI)
	VMOVUPS X1, (DI)(R8*1)
	VMOVUPS X2, (DI)(R8*2)
	VMOVUPS X3, (DI)(R13*1)
	VEXTRACTF128 $1, Y0, (R12)
	VEXTRACTF128 $1, Y1, (R12)(R8*1)
	VEXTRACTF128 $1, Y2, (R12)(R8*2)
	VEXTRACTF128 $1, Y3, (R12)(R13*1)

	ADDQ $32, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  t4_loop

t4_done:
	VZEROUPPER
	RET

// func transpose2(dst *float32, ldd int, src *float32, lds int, n int)
//
// transpose4 for 2 rows: the pairs (row 0, row 1) of 8 depth steps at a
// time, each stored as 8 bytes. The 6-row panels of the AVX2 kernel are
// transposed as 4 rows and 2.
TEXT ·transpose2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	SHLQ $2, R8
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R9
	SHLQ $2, R9
	MOVQ n+32(FP), CX
	SHRQ $3, CX
	JZ   t2_done
	MOVQ R8, DX
	SHLQ $3, DX
	LEAQ (R8)(R8*2), R13

t2_loop:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R9*1), Y1

	// Y2 = [a0 b0 a1 b1 | a4 b4 a5 b5], Y3 = [a2 b2 a3 b3 | a6 b6 a7 b7].
	VUNPCKLPS Y1, Y0, Y2
	VUNPCKHPS Y1, Y0, Y3
	VEXTRACTF128 $1, Y2, X4
	VEXTRACTF128 $1, Y3, X5

	LEAQ (DI)(R8*4), R12
	VMOVLPS X2, (DI)
	VMOVHPS X2, (DI)(R8*1)
	VMOVLPS X3, (DI)(R8*2)
	VMOVHPS X3, (DI)(R13*1)
	VMOVLPS X4, (R12)
	VMOVHPS X4, (R12)(R8*1)
	VMOVLPS X5, (R12)(R8*2)
	VMOVHPS X5, (R12)(R13*1)

	ADDQ $32, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  t2_loop

t2_done:
	VZEROUPPER
	RET
