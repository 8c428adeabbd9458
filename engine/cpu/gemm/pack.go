package gemm

import (
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
)

// The packed layouts are those the micro-kernels read sequentially:
//
//	A panel (mr rows): for p in 0…kc-1, the mr elements op(A)[i0…i0+mr-1, p]
//	B panel (nr cols): for p in 0…kc-1, the nr elements op(B)[p, j0…j0+nr-1]
//
// Rows or columns past the edge of the matrix are zero, so that the kernel
// always computes a whole tile; the driver keeps only the valid part.
//
// Packing is a copy when op(A) = Aᵀ or op(B) = B (each depth step is a
// contiguous run of the source: one vmath.CopyBlock, where a copy per
// run called memmove for 24 to 128 bytes) and a transposition otherwise. Packing is
// 5–8% of a large product, so the transposition reads its source rows
// contiguously and writes each panel row in one go.

// packA packs rows [i0, i0+rows) and depth [p0, p0+kc) of op(A) into dst,
// a panel of mr rows.
func packA[T scalar](dst, a []T, lda int, trans bool, i0, rows, p0, kc, mr int) {
	dst = dst[:kc*mr]
	if trans {
		// op(A)[i, p] = A[p, i].
		if rows == mr {
			vmath.CopyBlock(dst, mr, a[p0*lda+i0:], lda, kc, mr)
			return
		}
		clear(dst)
		for p := 0; p < kc; p++ {
			copy(dst[p*mr:], a[(p0+p)*lda+i0:][:rows])
		}
		return
	}
	// op(A)[i, p] = A[i, p].
	transpose(dst, a, lda, i0, rows, p0, kc, mr)
}

// packB packs depth [p0, p0+kc) and columns [j0, j0+cols) of op(B) into
// dst, a panel of nr columns.
func packB[T scalar](dst, b []T, ldb int, trans bool, p0, kc, j0, cols, nr int) {
	dst = dst[:kc*nr]
	if !trans {
		// op(B)[p, j] = B[p, j].
		if cols == nr {
			vmath.CopyBlock(dst, nr, b[p0*ldb+j0:], ldb, kc, nr)
			return
		}
		clear(dst)
		for p := 0; p < kc; p++ {
			copy(dst[p*nr:], b[(p0+p)*ldb+j0:][:cols])
		}
		return
	}
	// op(B)[p, j] = B[j, p].
	transpose(dst, b, ldb, j0, cols, p0, kc, nr)
}

// transpose sets dst[p·w + r] = src[(row0+r)·ld + col0 + p] for r < rows
// and p < kc, and zeroes the columns r ≥ rows of dst (a panel w wide).
//
// It moves a group of source rows at a time (12, 8, 4 or 2), so that each
// depth step writes one contiguous run of the panel and each source row
// is read sequentially: about twice as fast as a row at a time.
func transpose[T scalar](dst, src []T, ld, row0, rows, col0, kc, w int) {
	dst = dst[:kc*w]
	if rows < w {
		// One clear of the panel is much cheaper than one per depth step.
		clear(dst)
	}
	transposeRows(dst, src, ld, row0, rows, col0, kc, w)
}

// transposeRows is transpose without the zeroing: dst's elements other
// than the rows' are left as they are, so that dst may be a block of a
// larger matrix of row stride w (the positions product stores its tiles
// into C so).
func transposeRows[T scalar](dst, src []T, ld, row0, rows, col0, kc, w int) {
	if simdTranspose && unsafe.Sizeof(dst[0]) == 4 && kc >= 8 {
		// float32 on amd64: groups of 8, 4 and 2 rows, 8 depth steps at
		// a time, with AVX shuffles (about twice the speed of the Go
		// loops); the Go loops do the rest.
		k8 := kc &^ 7
		r := 0
		for ; r+4 <= rows; r += 4 {
			_ = src[(row0+r+3)*ld+col0+k8-1] // the assembly reads up to here
			_ = dst[(k8-1)*w+r+3]            // and writes up to here
			s := (*float32)(unsafe.Pointer(&src[(row0+r)*ld+col0]))
			d := (*float32)(unsafe.Pointer(&dst[r]))
			if r+8 <= rows {
				_ = src[(row0+r+7)*ld+col0+k8-1]
				_ = dst[(k8-1)*w+r+7]
				transpose8(d, w, s, ld, k8)
				r += 4
				continue
			}
			transpose4(d, w, s, ld, k8)
		}
		if r+2 <= rows {
			// The AVX2 kernel's 6-row panels: 4 rows above, 2 here.
			_ = src[(row0+r+1)*ld+col0+k8-1]
			_ = dst[(k8-1)*w+r+1]
			transpose2((*float32)(unsafe.Pointer(&dst[r])), w, (*float32)(unsafe.Pointer(&src[(row0+r)*ld+col0])), ld, k8)
			r += 2
		}
		if k8 < kc { // (dst may end with the last step's rows: no slice past it)
			transposeGo(dst[k8*w:], src, ld, row0, r, col0+k8, kc-k8, w)
		}
		transposeGo(dst[r:], src, ld, row0+r, rows-r, col0, kc, w)
		return
	}
	transposeGo(dst, src, ld, row0, rows, col0, kc, w)
}

// transposeGo is transposeRows in Go.
func transposeGo[T scalar](dst, src []T, ld, row0, rows, col0, kc, w int) {
	r := 0
	if rows == 12 {
		s0 := src[(row0+0)*ld+col0:][:kc]
		s1 := src[(row0+1)*ld+col0:][:kc]
		s2 := src[(row0+2)*ld+col0:][:kc]
		s3 := src[(row0+3)*ld+col0:][:kc]
		s4 := src[(row0+4)*ld+col0:][:kc]
		s5 := src[(row0+5)*ld+col0:][:kc]
		s6 := src[(row0+6)*ld+col0:][:kc]
		s7 := src[(row0+7)*ld+col0:][:kc]
		s8 := src[(row0+8)*ld+col0:][:kc]
		s9 := src[(row0+9)*ld+col0:][:kc]
		s10 := src[(row0+10)*ld+col0:][:kc]
		s11 := src[(row0+11)*ld+col0:][:kc]
		for p := range s0 {
			d := (*[12]T)(dst[p*w:])
			d[0], d[1], d[2], d[3] = s0[p], s1[p], s2[p], s3[p]
			d[4], d[5], d[6], d[7] = s4[p], s5[p], s6[p], s7[p]
			d[8], d[9], d[10], d[11] = s8[p], s9[p], s10[p], s11[p]
		}
		r = 12
	}
	for ; r+8 <= rows; r += 8 {
		s0 := src[(row0+r+0)*ld+col0:][:kc]
		s1 := src[(row0+r+1)*ld+col0:][:kc]
		s2 := src[(row0+r+2)*ld+col0:][:kc]
		s3 := src[(row0+r+3)*ld+col0:][:kc]
		s4 := src[(row0+r+4)*ld+col0:][:kc]
		s5 := src[(row0+r+5)*ld+col0:][:kc]
		s6 := src[(row0+r+6)*ld+col0:][:kc]
		s7 := src[(row0+r+7)*ld+col0:][:kc]
		for p := range s0 {
			d := (*[8]T)(dst[p*w+r:])
			d[0], d[1], d[2], d[3] = s0[p], s1[p], s2[p], s3[p]
			d[4], d[5], d[6], d[7] = s4[p], s5[p], s6[p], s7[p]
		}
	}
	for ; r+4 <= rows; r += 4 {
		s0 := src[(row0+r+0)*ld+col0:][:kc]
		s1 := src[(row0+r+1)*ld+col0:][:kc]
		s2 := src[(row0+r+2)*ld+col0:][:kc]
		s3 := src[(row0+r+3)*ld+col0:][:kc]
		for p := range s0 {
			d := (*[4]T)(dst[p*w+r:])
			d[0], d[1], d[2], d[3] = s0[p], s1[p], s2[p], s3[p]
		}
	}
	for ; r < rows; r++ {
		for p, v := range src[(row0+r)*ld+col0:][:kc] {
			dst[p*w+r] = v
		}
	}
}
