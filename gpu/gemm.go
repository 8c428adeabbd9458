package gpu

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cublas"
)

// Gemm implements device.Device with cublasGemmStridedBatchedEx.
//
// cuBLAS is column-major and the engine row-major. A row-major m×n matrix
// with rows ld apart is, read column-major, its n×m transpose with columns
// ld apart; so dst = op(a)·op(b) is computed as dstᵀ = op(b)ᵀ·op(a)ᵀ: cuBLAS
// gets b as its first operand and a as its second, with m and n swapped,
// and each operand's Trans flag unchanged (a stored row-major matrix that
// is not transposed is, read column-major, already the transpose cuBLAS
// needs).
//
// Precision follows PyTorch on CUDA: float32 in float32 (TF32 tensor
// cores only with Options.TF32), bfloat16 and float16 in their own type
// with float32 accumulation, float64 in float64.
func (d *Device) Gemm(dst, a, b device.GemmOperand, batch, m, n, k int, alpha, beta float64) error {
	if dst.Trans {
		return fmt.Errorf("%v: gemm into a transposed destination", d)
	}
	if a.DType != dst.DType || b.DType != dst.DType {
		return fmt.Errorf("%v: gemm of %v and %v into %v", d, a.DType, b.DType, dst.DType)
	}
	if batch == 0 || m == 0 || n == 0 {
		return nil
	}
	dt, compute, err := d.gemmTypes(dst.DType)
	if err != nil {
		return err
	}
	op := func(trans bool) cublas.Op {
		if trans {
			return cublas.OpT
		}
		return cublas.OpN
	}
	// cuBLAS rejects a leading dimension below the rows of the stored
	// (column-major) matrix even when that dimension is never stepped
	// over; a single row or column has no real leading dimension.
	ld := func(o device.GemmOperand, rows, cols int) int {
		stored := cols // a row-major rows×cols matrix read column-major has cols rows
		if o.Trans {
			stored = rows
		}
		return max(o.Ld, stored, 1)
	}
	return d.ctx.Do(func() error {
		return d.blas.GemmStridedBatched(
			op(b.Trans), op(a.Trans), n, m, k, alpha,
			uint64(d.ptr(viewOf(b))), dt, ld(b, k, n), int64(b.BatchStride),
			uint64(d.ptr(viewOf(a))), dt, ld(a, m, k), int64(a.BatchStride),
			beta,
			uint64(d.ptr(viewOf(dst))), dt, ld(dst, m, n), int64(dst.BatchStride),
			batch, compute)
	})
}

// viewOf is the view of a GEMM operand's first element.
func viewOf(o device.GemmOperand) device.View {
	return device.View{Buf: o.Buf, DType: o.DType, Offset: o.Offset}
}

func (d *Device) gemmTypes(dt dtype.DType) (cublas.DataType, cublas.ComputeType, error) {
	switch dt {
	case dtype.Float32:
		if d.opt.TF32 {
			return cublas.R32F, cublas.Compute32FFastTF32, nil
		}
		return cublas.R32F, cublas.Compute32F, nil
	case dtype.Float64:
		return cublas.R64F, cublas.Compute64F, nil
	case dtype.BFloat16:
		return cublas.R16BF, cublas.Compute32F, nil
	case dtype.Float16:
		return cublas.R16F, cublas.Compute32F, nil
	}
	return 0, 0, fmt.Errorf("%v: gemm of %v", d, dt)
}
