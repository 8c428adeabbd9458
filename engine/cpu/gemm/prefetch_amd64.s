//go:build amd64

#include "textflag.h"

// func prefetch(p unsafe.Pointer, n int)
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	ADDQ SI, CX

line:
	CMPQ SI, CX
	JAE  done
	PREFETCHT0 (SI)
	ADDQ $64, SI
	JMP  line

done:
	RET
