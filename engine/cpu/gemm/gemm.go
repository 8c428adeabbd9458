package gemm

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
)

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major float32
// matrices, where op(X) is X, or Xᵀ when the matching trans flag is set.
// op(A) is m×k, op(B) is k×n and C is m×n. lda, ldb and ldc are row strides
// (elements between the starts of consecutive rows) of A, B and C as they
// are stored, that is before op is applied.
//
// The semantics are those of cblas_sgemm(CblasRowMajor, ...): when beta is
// zero C is not read, so NaN or Inf in it are overwritten; when alpha is
// zero or k is zero A and B are not read and C is only scaled by beta. The
// slices need only be as long as the matrices they hold; nothing past the
// last element is read or written.
//
// Sgemm runs on parallel.Threads() threads.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	gemm(kernels32.cur, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, parallel.Threads())
}

// Dgemm is Sgemm for float64. It is meant for reference computations such
// as gradient checks, where accuracy matters more than speed, but it uses
// the same blocked, multi-threaded algorithm.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	checkGemm("Dgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	gemm(kernels64.cur, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, parallel.Threads())
}

// SgemmSerial is Sgemm on the calling goroutine alone, for callers that
// divide their work among the threads themselves: a convolution runs one
// product per sample, each sample on one thread, so that the sample's
// columns stay in that core's cache between their making and their use.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm("SgemmSerial", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	gemm(kernels32.cur, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1)
}

// DgemmSerial is SgemmSerial for float64.
func DgemmSerial(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	checkGemm("DgemmSerial", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	gemm(kernels64.cur, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1)
}

// SgemmBatched computes batch independent products
//
//	C[i] = alpha·op(A[i])·op(B[i]) + beta·C[i],  i = 0 … batch-1,
//
// where matrix i of each operand starts strideA, strideB or strideC elements
// after matrix i-1 (see Sgemm for the rest). A stride of 0 for A or B
// broadcasts one matrix to every product. The outputs must not overlap,
// but they may interleave: a [T, H·D] activation holds H matrices T×D with
// ldc = H·D and strideC = D.
//
// Batches of at least two products per thread, and batches of small
// products, run whole products on each thread (attention heads); a few
// large products run one after the other, each on every thread.
func SgemmBatched(batch int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	CheckBatched(batch, transA, transB, m, n, k, len(a), lda, strideA, len(b), ldb, strideB, len(c), ldc, strideC)
	if batch == 0 {
		return
	}
	batched(kernels32.cur, batch, transA, transB, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC, parallel.Threads())
}

// CheckBatched panics, with the message SgemmBatched would give, when the
// arguments of a strided batched product are inconsistent: lenA, lenB and
// lenC are the lengths of the operand slices. Other implementations of the
// same contract (engine/cpu/blas over CBLAS) call it to validate a whole
// batch before computing any of it.
func CheckBatched(batch int, transA, transB bool, m, n, k, lenA, lda, strideA, lenB, ldb, strideB, lenC, ldc, strideC int) {
	if batch < 0 {
		panic(fmt.Sprintf("gemm: SgemmBatched: batch = %d < 0", batch))
	}
	if strideA < 0 || strideB < 0 || strideC < 0 {
		panic(fmt.Sprintf("gemm: SgemmBatched: negative stride (strideA %d, strideB %d, strideC %d)", strideA, strideB, strideC))
	}
	if batch > 1 && strideC == 0 && m > 0 && n > 0 {
		panic("gemm: SgemmBatched: strideC = 0 with batch > 1 would make the outputs overlap")
	}
	checkGemm("SgemmBatched", transA, transB, m, n, k, math.MaxInt, lda, math.MaxInt, ldb, math.MaxInt, ldc)
	if batch == 0 {
		return
	}
	// Each operand must hold its last matrix; the earlier ones lie before.
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	checkBatch("a", "strideA", batch, ar, ac, lenA, lda, strideA)
	checkBatch("b", "strideB", batch, br, bc, lenB, ldb, strideB)
	checkBatch("c", "strideC", batch, m, n, lenC, ldc, strideC)
}

// checkBatch panics when a slice of length length is too short for batch
// rows×cols matrices with row stride ld, each stride elements after the last.
func checkBatch(name, strideName string, batch, rows, cols, length, ld, stride int) {
	if rows == 0 || cols == 0 {
		return
	}
	if need := (batch-1)*stride + (rows-1)*ld + cols; length < need {
		panic(fmt.Sprintf("gemm: SgemmBatched: len(%s) = %d < %d needed for %d matrices %d×%d with ld %d and %s %d",
			name, length, need, batch, rows, cols, ld, strideName, stride))
	}
}

// batched runs the strided batch on kern with up to threads threads.
func batched[T scalar](kern *kernel[T], batch int, transA, transB bool, m, n, k int, alpha T, a []T, lda, strideA int, b []T, ldb, strideB int, beta T, c []T, ldc, strideC int, threads int) {
	if m == 0 || n == 0 {
		return
	}
	// Whole products per thread need no synchronisation inside a product
	// and keep each thread's packed operands in its own caches, so the
	// batch is spread over the threads whenever it balances (at least two
	// products per thread) or the products are too small to split anyway;
	// otherwise (a few large products) each runs on all the threads.
	work := flops(m, n, k)
	if threads <= 1 || batch == 1 || (batch < 2*threads && work >= minParallelFlops) {
		for i := 0; i < batch; i++ {
			gemm(kern, transA, transB, m, n, k, alpha,
				from(a, i*strideA), lda, from(b, i*strideB), ldb, beta, c[i*strideC:], ldc, threads)
		}
		return
	}
	// Each product is a fixed amount of work, so chunks of a few products
	// keep the pool's scheduling overhead small without unbalancing it.
	grain := int(max(1, minParallelFlops/max(work, 1)))
	parallel.For(batch, grain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			gemm(kern, transA, transB, m, n, k, alpha,
				from(a, i*strideA), lda, from(b, i*strideB), ldb, beta, c[i*strideC:], ldc, 1)
		}
	})
}

// from returns s[off:], or nil when off is past the end, which happens only
// for an operand that is empty (k == 0) and is then never read.
func from[T any](s []T, off int) []T {
	if off > len(s) {
		return nil
	}
	return s[off:]
}

// checkGemm panics with a message naming the offending argument when the
// dimensions, leading dimensions or slice lengths are inconsistent.
func checkGemm(fn string, transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: %s: negative dimension (m %d, n %d, k %d)", fn, m, n, k))
	}
	// Stored shapes: A is m×k, or k×m when transposed; likewise B.
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	checkMatrix(fn, "a", "lda", ar, ac, la, lda)
	checkMatrix(fn, "b", "ldb", br, bc, lb, ldb)
	checkMatrix(fn, "c", "ldc", m, n, lc, ldc)
}

func checkMatrix(fn, name, ldName string, rows, cols, length, ld int) {
	// As in CBLAS, the leading dimension must be at least max(1, cols) even
	// when the matrix is empty.
	if ld < max(1, cols) {
		panic(fmt.Sprintf("gemm: %s: %s = %d < max(1, %d columns of %s)", fn, ldName, ld, cols, name))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if need := (rows-1)*ld + cols; length < need {
		panic(fmt.Sprintf("gemm: %s: len(%s) = %d < %d needed for %d×%d with %s %d", fn, name, length, need, rows, cols, ldName, ld))
	}
}
