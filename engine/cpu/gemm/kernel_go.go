package gemm

import "unsafe"

// The portable kernel's tile. 4×4 keeps the 16 accumulators in registers
// on arm64 (32 FP registers); on amd64 the assembly kernels are used.
const goMR, goNR = 4, 4

// kernelGo is the portable micro-kernel and the reference for the
// assembly ones: the same packed layout and the same contract.
func kernelGo[T scalar](k int, a, b, c *T, ldc int, alpha, beta T) {
	as := unsafe.Slice(a, k*goMR)
	bs := unsafe.Slice(b, k*goNR)
	var c00, c01, c02, c03 T
	var c10, c11, c12, c13 T
	var c20, c21, c22, c23 T
	var c30, c31, c32, c33 T
	for p := 0; p < k; p++ {
		ap := as[p*goMR : p*goMR+goMR : p*goMR+goMR]
		bp := bs[p*goNR : p*goNR+goNR : p*goNR+goNR]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		a0 := ap[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := ap[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := ap[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		a3 := ap[3]
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	cs := unsafe.Slice(c, 3*ldc+goNR)
	store := func(row []T, v0, v1, v2, v3 T) {
		row = row[:goNR:goNR]
		if beta == 0 {
			row[0], row[1], row[2], row[3] = alpha*v0, alpha*v1, alpha*v2, alpha*v3
			return
		}
		row[0] = alpha*v0 + beta*row[0]
		row[1] = alpha*v1 + beta*row[1]
		row[2] = alpha*v2 + beta*row[2]
		row[3] = alpha*v3 + beta*row[3]
	}
	store(cs[0:], c00, c01, c02, c03)
	store(cs[ldc:], c10, c11, c12, c13)
	store(cs[2*ldc:], c20, c21, c22, c23)
	store(cs[3*ldc:], c30, c31, c32, c33)
}

// kernelGoWindows is kernelGo reading B in place: it gathers the k rows of
// the B panel (k ≤ kcMax, as the driver's K blocks are) and runs kernelGo,
// so that the portable kernel stays one loop.
func kernelGoWindows[T scalar](k int, a, b *T, offs *int32, c *T, ldc int, alpha, beta T) {
	var panel [kcMax * goNR]T
	size := unsafe.Sizeof(*b)
	for p, off := range unsafe.Slice(offs, k) {
		row := unsafe.Slice((*T)(unsafe.Add(unsafe.Pointer(b), uintptr(off)*size)), goNR)
		copy(panel[p*goNR:(p+1)*goNR], row)
	}
	kernelGo(k, a, &panel[0], c, ldc, alpha, beta)
}

// kernelGoRows is kernelGo reading A in place: it packs the goMR rows of
// the A panel (k ≤ kcMax) and runs kernelGo.
func kernelGoRows[T scalar](k int, a *T, offs *int32, b, c *T, ldc int, alpha, beta T) {
	var panel [kcMax * goMR]T
	size := unsafe.Sizeof(*a)
	for i, off := range unsafe.Slice(offs, goMR) {
		row := unsafe.Slice((*T)(unsafe.Add(unsafe.Pointer(a), uintptr(off)*size)), k)
		for p, v := range row {
			panel[p*goMR+i] = v
		}
	}
	kernelGo(k, &panel[0], b, c, ldc, alpha, beta)
}
