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

// func deinterleaveRows(even *float32, evenStride int, odd *float32, oddStride int, src *float32, srcStride int, rows, pairs int)
//
// Splits rows runs of 2·pairs float32 of src into their even elements
// (into even) and odd ones (into odd): 4 pairs at a time with SHUFPS,
// which every amd64 has, then a pair at a time.
TEXT ·deinterleaveRows(SB), NOSPLIT, $0-64
	MOVQ even+0(FP), DI
	MOVQ evenStride+8(FP), R8
	MOVQ odd+16(FP), R11
	MOVQ oddStride+24(FP), R12
	MOVQ src+32(FP), SI
	MOVQ srcStride+40(FP), R9
	MOVQ rows+48(FP), CX
	MOVQ pairs+56(FP), DX
	SHLQ $2, R8
	SHLQ $2, R12
	SHLQ $2, R9
	TESTQ CX, CX
	JLE deinterleaveDone
	TESTQ DX, DX
	JLE deinterleaveDone

deinterleaveRow:
	XORQ AX, AX
	MOVQ DX, BX

deinterleave4:
	CMPQ BX, $4
	JLT deinterleaveTail
	MOVUPS (SI)(AX*8), X0
	MOVUPS 16(SI)(AX*8), X1
	MOVAPS X0, X2
	SHUFPS $0x88, X1, X0 // a0 a2 a4 a6
	SHUFPS $0xDD, X1, X2 // a1 a3 a5 a7
	MOVUPS X0, (DI)(AX*4)
	MOVUPS X2, (R11)(AX*4)
	ADDQ $4, AX
	SUBQ $4, BX
	JMP deinterleave4

deinterleaveTail:
	TESTQ BX, BX
	JEQ deinterleaveNext
	MOVL (SI)(AX*8), R10
	MOVL R10, (DI)(AX*4)
	MOVL 4(SI)(AX*8), R10
	MOVL R10, (R11)(AX*4)
	INCQ AX
	DECQ BX
	JMP deinterleaveTail

deinterleaveNext:
	ADDQ R8, DI
	ADDQ R12, R11
	ADDQ R9, SI
	DECQ CX
	JNZ deinterleaveRow

deinterleaveDone:
	RET

// func interleaveRows(dst *float32, dstStride int, even *float32, evenStride int, odd *float32, oddStride int, rows, pairs int)
//
// The inverse of deinterleaveRows: each row of dst takes pairs elements of
// even and of odd alternately, 4 pairs at a time with UNPCKLPS and
// UNPCKHPS, then a pair at a time.
TEXT ·interleaveRows(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R8
	MOVQ even+16(FP), SI
	MOVQ evenStride+24(FP), R9
	MOVQ odd+32(FP), R11
	MOVQ oddStride+40(FP), R12
	MOVQ rows+48(FP), CX
	MOVQ pairs+56(FP), DX
	SHLQ $2, R8
	SHLQ $2, R9
	SHLQ $2, R12
	TESTQ CX, CX
	JLE interleaveDone
	TESTQ DX, DX
	JLE interleaveDone

interleaveRow:
	XORQ AX, AX
	MOVQ DX, BX

interleave4:
	CMPQ BX, $4
	JLT interleaveTail
	MOVUPS (SI)(AX*4), X0
	MOVUPS (R11)(AX*4), X1
	MOVAPS X0, X2
	UNPCKLPS X1, X0 // e0 o0 e1 o1
	UNPCKHPS X1, X2 // e2 o2 e3 o3
	MOVUPS X0, (DI)(AX*8)
	MOVUPS X2, 16(DI)(AX*8)
	ADDQ $4, AX
	SUBQ $4, BX
	JMP interleave4

interleaveTail:
	TESTQ BX, BX
	JEQ interleaveNext
	MOVL (SI)(AX*4), R10
	MOVL R10, (DI)(AX*8)
	MOVL (R11)(AX*4), R10
	MOVL R10, 4(DI)(AX*8)
	INCQ AX
	DECQ BX
	JMP interleaveTail

interleaveNext:
	ADDQ R8, DI
	ADDQ R9, SI
	ADDQ R12, R11
	DECQ CX
	JNZ interleaveRow

interleaveDone:
	RET

// func copyRowsAdd(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32)
//
// copyRows with s added to every element on the way: 8 floats at a time
// with ADDPS, then 4, then one at a time with ADDSS.
TEXT ·copyRowsAdd(SB), NOSPLIT, $0-52
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ srcStride+24(FP), R9
	MOVQ rows+32(FP), CX
	MOVQ cols+40(FP), DX
	MOVSS s+48(FP), X4
	SHUFPS $0, X4, X4
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ CX, CX
	JLE addDone
	TESTQ DX, DX
	JLE addDone

addRow:
	XORQ AX, AX
	MOVQ DX, BX

add8:
	CMPQ BX, $8
	JLT add4
	MOVUPS (SI)(AX*4), X0
	MOVUPS 16(SI)(AX*4), X1
	ADDPS X4, X0
	ADDPS X4, X1
	MOVUPS X0, (DI)(AX*4)
	MOVUPS X1, 16(DI)(AX*4)
	ADDQ $8, AX
	SUBQ $8, BX
	JMP add8

add4:
	CMPQ BX, $4
	JLT add1
	MOVUPS (SI)(AX*4), X0
	ADDPS X4, X0
	MOVUPS X0, (DI)(AX*4)
	ADDQ $4, AX
	SUBQ $4, BX

add1:
	TESTQ BX, BX
	JEQ addNext
	MOVSS (SI)(AX*4), X0
	ADDSS X4, X0
	MOVSS X0, (DI)(AX*4)
	INCQ AX
	DECQ BX
	JMP add1

addNext:
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ CX
	JNZ addRow

addDone:
	RET

// The row loops below share their start. ROWS_ARGS: DI dst, R8 its
// stride in bytes, SI src, R9 its stride in bytes, R11 rows, DX cols.
#define ROWS_ARGS \
	MOVQ dst+0(FP), DI; \
	MOVQ dstStride+8(FP), R8; \
	MOVQ src+16(FP), SI; \
	MOVQ srcStride+24(FP), R9; \
	MOVQ rows+32(FP), R11; \
	MOVQ cols+40(FP), DX

// Z_TAIL: K1 the lanes of a row's tail (cols mod 16, possibly none), DX
// the whole 16-lane vectors a row.
#define Z_TAIL \
	MOVQ DX, CX; \
	ANDQ $15, CX; \
	MOVL $1, AX; \
	SHLL CX, AX; \
	DECL AX; \
	KMOVW AX, K1; \
	SHRQ $4, DX

// Y_LAST (cols ≥ 8): R10 the byte offset of a row's last 8 elements, DX
// the whole 8-lane vectors before them.
#define Y_LAST \
	LEAQ -32(DX*4), R10; \
	DECQ DX; \
	SHRQ $3, DX

// func copyRowsAVX512(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)
//
// copyRows with Z registers: a row's whole 64-byte vectors, then its tail
// (cols mod 16 elements, possibly none) in one masked load and store, so
// that a 14-wide row is one load and one store.
TEXT ·copyRowsAVX512(SB), NOSPLIT, $0-48
	ROWS_ARGS
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ R11, R11
	JLE done
	Z_TAIL

row:
	MOVQ DX, BX
	XORQ AX, AX

whole:
	TESTQ BX, BX
	JEQ tail
	VMOVUPS (SI)(AX*1), Z0
	VMOVUPS Z0, (DI)(AX*1)
	ADDQ $64, AX
	DECQ BX
	JMP whole

tail:
	VMOVUPS.Z (SI)(AX*1), K1, Z0
	VMOVUPS Z0, K1, (DI)(AX*1)
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ R11
	JNZ row
	VZEROUPPER

done:
	RET

// func copyRowsAddAVX512(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32)
//
// copyRowsAdd with Z registers: a row's whole vectors, then its tail in
// one masked load, add and store.
TEXT ·copyRowsAddAVX512(SB), NOSPLIT, $0-52
	ROWS_ARGS
	VBROADCASTSS s+48(FP), Z4
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ R11, R11
	JLE addDone512
	Z_TAIL

addRow512:
	MOVQ DX, BX
	XORQ AX, AX

addWhole512:
	TESTQ BX, BX
	JEQ addTail512
	VADDPS (SI)(AX*1), Z4, Z0
	VMOVUPS Z0, (DI)(AX*1)
	ADDQ $64, AX
	DECQ BX
	JMP addWhole512

addTail512:
	VMOVUPS.Z (SI)(AX*1), K1, Z0
	VADDPS Z4, Z0, Z0
	VMOVUPS Z0, K1, (DI)(AX*1)
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ R11
	JNZ addRow512
	VZEROUPPER

addDone512:
	RET

// func copyRowsAVX2(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)
//
// copyRows with Y registers for rows of 8 or more elements: a row's whole
// 32-byte vectors but the last, then the row's last 8 elements, a vector
// that overlaps the one before when cols is not a multiple of 8 (no mask:
// a masked store is slow on some AVX2 cores). A 14-wide row is two loads
// and two stores. Shorter rows take copyRows.
TEXT ·copyRowsAVX2(SB), NOSPLIT, $0-48
	ROWS_ARGS
	CMPQ DX, $8
	JLT short2
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ R11, R11
	JLE done2
	Y_LAST

row2:
	MOVQ DX, BX
	XORQ AX, AX

whole2:
	TESTQ BX, BX
	JEQ last2
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ BX
	JMP whole2

last2:
	VMOVUPS (SI)(R10*1), Y0
	VMOVUPS Y0, (DI)(R10*1)
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ R11
	JNZ row2
	VZEROUPPER

done2:
	RET

short2:
	JMP ·copyRows(SB)

// func copyRowsAddAVX2(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, s float32)
//
// copyRowsAdd as copyRowsAVX2 copies: the overlapping last vector adds s
// to the same source elements again, so it writes the same sums.
TEXT ·copyRowsAddAVX2(SB), NOSPLIT, $0-52
	ROWS_ARGS
	CMPQ DX, $8
	JLT addShort2
	VBROADCASTSS s+48(FP), Y4
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ R11, R11
	JLE addDone2
	Y_LAST

addRow2:
	MOVQ DX, BX
	XORQ AX, AX

addWhole2:
	TESTQ BX, BX
	JEQ addLast2
	VADDPS (SI)(AX*1), Y4, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ BX
	JMP addWhole2

addLast2:
	VADDPS (SI)(R10*1), Y4, Y0
	VMOVUPS Y0, (DI)(R10*1)
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ R11
	JNZ addRow2
	VZEROUPPER

addDone2:
	RET

addShort2:
	JMP ·copyRowsAdd(SB)
