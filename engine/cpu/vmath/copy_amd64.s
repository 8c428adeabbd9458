//go:build amd64 && !purego

#include "textflag.h"

// func copyRows(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)
//
// Copies rows runs of cols float32 from src to dst, the runs srcStride and
// dstStride elements apart: 32 bytes at a time, then 16, 8 and 4 (SSE
// moves, which every amd64 has).
TEXT ·copyRows(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ srcStride+24(FP), R9
	MOVQ rows+32(FP), CX
	MOVQ cols+40(FP), DX
	SHLQ $2, R8
	SHLQ $2, R9
	SHLQ $2, DX
	TESTQ CX, CX
	JLE done

row:
	XORQ AX, AX
	MOVQ DX, BX

loop32:
	CMPQ BX, $32
	JLT tail16
	MOVUPS (SI)(AX*1), X0
	MOVUPS 16(SI)(AX*1), X1
	MOVUPS X0, (DI)(AX*1)
	MOVUPS X1, 16(DI)(AX*1)
	ADDQ $32, AX
	SUBQ $32, BX
	JMP loop32

tail16:
	CMPQ BX, $16
	JLT tail8
	MOVUPS (SI)(AX*1), X0
	MOVUPS X0, (DI)(AX*1)
	ADDQ $16, AX
	SUBQ $16, BX

tail8:
	CMPQ BX, $8
	JLT tail4
	MOVQ (SI)(AX*1), R10
	MOVQ R10, (DI)(AX*1)
	ADDQ $8, AX
	SUBQ $8, BX

tail4:
	TESTQ BX, BX
	JEQ next
	MOVL (SI)(AX*1), R10
	MOVL R10, (DI)(AX*1)

next:
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ CX
	JNZ row

done:
	RET
