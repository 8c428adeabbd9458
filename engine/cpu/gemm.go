package cpu

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/cpu/blas"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Gemm implements device.Device.
func (d *Device) Gemm(dst, a, b device.GemmOperand, batch, m, n, k int, alpha, beta float64) error {
	if dst.Trans {
		return fmt.Errorf("cpu: gemm into a transposed destination")
	}
	if a.DType != dst.DType || b.DType != dst.DType {
		return fmt.Errorf("cpu: gemm of %v and %v into %v", a.DType, b.DType, dst.DType)
	}
	if batch == 0 || m == 0 || n == 0 {
		return nil
	}
	switch dst.DType {
	case dtype.Float32:
		blas.SgemmBatched(batch, a.Trans, b.Trans, m, n, k, float32(alpha),
			elems[float32](a.Buf)[a.Offset:], a.Ld, a.BatchStride,
			elems[float32](b.Buf)[b.Offset:], b.Ld, b.BatchStride,
			float32(beta), elems[float32](dst.Buf)[dst.Offset:], dst.Ld, dst.BatchStride)
	case dtype.Float64:
		af, bf, cf := elems[float64](a.Buf), elems[float64](b.Buf), elems[float64](dst.Buf)
		for i := 0; i < batch; i++ {
			blas.Dgemm(a.Trans, b.Trans, m, n, k, alpha, af[a.Offset+i*a.BatchStride:], a.Ld,
				bf[b.Offset+i*b.BatchStride:], b.Ld, beta, cf[dst.Offset+i*dst.BatchStride:], dst.Ld)
		}
	case dtype.BFloat16, dtype.Float16:
		return d.gemmWidened(dst, a, b, batch, m, n, k, alpha, beta)
	default:
		return fmt.Errorf("cpu: gemm of %v", dst.DType)
	}
	return nil
}

// gemmWidened multiplies half-precision matrices in float32, as PyTorch's CPU
// matmul does for them: the element range each operand spans is widened into
// a float32 buffer, the product computed there, and dst's range rounded back
// once.
func (d *Device) gemmWidened(dst, a, b device.GemmOperand, batch, m, n, k int, alpha, beta float64) error {
	span := func(op device.GemmOperand, rows, cols int) int {
		if op.Trans {
			rows, cols = cols, rows
		}
		return (batch-1)*op.BatchStride + (rows-1)*op.Ld + cols
	}
	widen := func(op device.GemmOperand, rows, cols int, load bool) (device.GemmOperand, device.View, error) {
		n := span(op, rows, cols)
		buf, err := d.Alloc(dtype.Float32, n)
		if err != nil {
			return op, device.View{}, err
		}
		src := device.View{Buf: op.Buf, DType: op.DType, Offset: op.Offset, Shape: []int{n}, Strides: []int{1}}
		w := op
		w.Buf, w.DType, w.Offset = buf, dtype.Float32, 0
		if load {
			if err := d.Copy(device.View{Buf: buf, DType: dtype.Float32, Shape: []int{n}, Strides: []int{1}}, src); err != nil {
				d.Free(buf)
				return op, device.View{}, err
			}
		}
		return w, src, nil
	}
	wa, _, err := widen(a, m, k, true)
	if err != nil {
		return err
	}
	defer d.Free(wa.Buf)
	wb, _, err := widen(b, k, n, true)
	if err != nil {
		return err
	}
	defer d.Free(wb.Buf)
	wc, orig, err := widen(dst, m, n, beta != 0)
	if err != nil {
		return err
	}
	defer d.Free(wc.Buf)
	if beta == 0 {
		// Rows of dst may have gaps (Ld > n) that must survive the copy back.
		if err := d.Copy(device.View{Buf: wc.Buf, DType: dtype.Float32, Shape: orig.Shape, Strides: []int{1}}, orig); err != nil {
			return err
		}
	}
	if err := d.Gemm(wc, wa, wb, batch, m, n, k, alpha, beta); err != nil {
		return err
	}
	return d.Copy(orig, device.View{Buf: wc.Buf, DType: dtype.Float32, Shape: orig.Shape, Strides: []int{1}})
}
