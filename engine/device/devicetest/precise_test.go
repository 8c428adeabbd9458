package devicetest_test

import (
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/device/devicetest"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// precise is another correct device: it computes every float32 and 16-bit
// op in float64 on the CPU and rounds the results once, the way a device
// with other kernels (other summation orders, other vector math) differs
// from the reference. The suite must accept it: its tolerances must admit
// the differences between correct implementations.
type precise struct {
	*cpu.Device
}

// widen swaps the float32 and 16-bit views among outs and ins for float64
// copies while kernel runs, and copies the outputs back. A view in both
// lists is loaded and stored.
func (p *precise) widen(outs, ins []*device.View, halves bool, kernel func() error) error {
	type saved struct {
		p    *device.View
		orig device.View
	}
	var temps []saved
	swap := func(v *device.View, load bool) error {
		if v.Buf == nil || !(v.DType == dtype.Float32 || halves && (v.DType == dtype.BFloat16 || v.DType == dtype.Float16)) {
			return nil
		}
		for _, t := range temps {
			if t.p == v {
				return nil
			}
		}
		buf, err := p.Alloc(dtype.Float64, v.Numel())
		if err != nil {
			return err
		}
		tmp := device.View{Buf: buf, DType: dtype.Float64, Shape: v.Shape, Strides: device.ContiguousStrides(v.Shape)}
		if load {
			if err := p.Device.Copy(tmp, *v); err != nil {
				return err
			}
		}
		temps = append(temps, saved{v, *v})
		*v = tmp
		return nil
	}
	defer func() {
		for _, t := range temps {
			p.Free(t.p.Buf)
			*t.p = t.orig
		}
	}()
	for _, v := range ins {
		if err := swap(v, true); err != nil {
			return err
		}
	}
	for _, v := range outs {
		if err := swap(v, false); err != nil {
			return err
		}
	}
	if err := kernel(); err != nil {
		return err
	}
	for _, t := range temps {
		for _, o := range outs {
			if o == t.p {
				if err := p.Device.Copy(t.orig, *t.p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func vs(v ...*device.View) []*device.View { return v }

func (p *precise) Unary(op device.UnaryOp, dst, src device.View, s float64) error {
	return p.widen(vs(&dst), vs(&src), true, func() error { return p.Device.Unary(op, dst, src, s) })
}

func (p *precise) ActivationBackward(op device.ActivationOp, dx, dy, saved device.View) error {
	return p.widen(vs(&dx), vs(&dy, &saved), true, func() error { return p.Device.ActivationBackward(op, dx, dy, saved) })
}

func (p *precise) Binary(op device.BinaryOp, dst, a, b device.View) error {
	return p.widen(vs(&dst), vs(&a, &b), true, func() error { return p.Device.Binary(op, dst, a, b) })
}

func (p *precise) Reduce(op device.ReduceOp, dst, src device.View) error {
	return p.widen(vs(&dst), vs(&src), true, func() error { return p.Device.Reduce(op, dst, src) })
}

func (p *precise) Softmax(dst, src device.View, log bool) error {
	return p.widen(vs(&dst), vs(&src), true, func() error { return p.Device.Softmax(dst, src, log) })
}

func (p *precise) SoftmaxBackward(dx, dy, y device.View, log bool) error {
	return p.widen(vs(&dx), vs(&dy, &y), true, func() error { return p.Device.SoftmaxBackward(dx, dy, y, log) })
}

func (p *precise) LayerNorm(dst, mean, rstd, x, w, b device.View, eps float64) error {
	return p.widen(vs(&dst, &mean, &rstd), vs(&x, &w, &b), true, func() error { return p.Device.LayerNorm(dst, mean, rstd, x, w, b, eps) })
}

func (p *precise) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w device.View) error {
	return p.widen(vs(&dx, &dw, &db), vs(&dy, &x, &mean, &rstd, &w), true, func() error {
		return p.Device.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w)
	})
}

func (p *precise) CrossEntropy(loss, logits, target device.View, opt device.CrossEntropyOptions) (int, error) {
	var n int
	err := p.widen(vs(&loss), vs(&logits), true, func() (err error) {
		n, err = p.Device.CrossEntropy(loss, logits, target, opt)
		return err
	})
	return n, err
}

func (p *precise) CrossEntropyBackward(dlogits, dloss, logits, target device.View, opt device.CrossEntropyOptions) error {
	return p.widen(vs(&dlogits), vs(&dloss, &logits), true, func() error {
		return p.Device.CrossEntropyBackward(dlogits, dloss, logits, target, opt)
	})
}

func (p *precise) IndexAdd(dst, src, index device.View, axis int) error {
	return p.widen(vs(&dst), vs(&dst, &src), true, func() error { return p.Device.IndexAdd(dst, src, index, axis) })
}

func (p *precise) ScatterAdd(dst, src, index device.View, axis int) error {
	return p.widen(vs(&dst), vs(&dst, &src), true, func() error { return p.Device.ScatterAdd(dst, src, index, axis) })
}

func (p *precise) Attention(out, probs, q, k, v device.View, scale float64, causal bool) error {
	return p.widen(vs(&out, &probs), vs(&q, &k, &v), true, func() error { return p.Device.Attention(out, probs, q, k, v, scale, causal) })
}

func (p *precise) AttentionBackward(dq, dk, dv, dout, q, k, v, probs device.View, scale float64) error {
	return p.widen(vs(&dq, &dk, &dv), vs(&dout, &q, &k, &v, &probs), true, func() error {
		return p.Device.AttentionBackward(dq, dk, dv, dout, q, k, v, probs, scale)
	})
}

func (p *precise) AdamStep(pp, g, m, v, vmax device.View, h device.AdamHyper) error {
	return p.widen(vs(&pp, &m, &v, &vmax), vs(&pp, &g, &m, &v, &vmax), false, func() error { return p.Device.AdamStep(pp, g, m, v, vmax, h) })
}

func (p *precise) SGDStep(pp, g, buf device.View, h device.SGDHyper) error {
	return p.widen(vs(&pp, &buf), vs(&pp, &g, &buf), false, func() error { return p.Device.SGDStep(pp, g, buf, h) })
}

func (p *precise) SumSquares(x device.View) (float64, error) {
	var r float64
	err := p.widen(nil, vs(&x), true, func() (err error) {
		r, err = p.Device.SumSquares(x)
		return err
	})
	return r, err
}

// Gemm widens the element range each operand spans.
func (p *precise) Gemm(dst, a, b device.GemmOperand, batch, m, n, k int, alpha, beta float64) error {
	if dst.DType == dtype.Float64 || !dst.DType.IsFloat() || a.DType != dst.DType || b.DType != dst.DType || batch == 0 || m == 0 || n == 0 {
		return p.Device.Gemm(dst, a, b, batch, m, n, k, alpha, beta)
	}
	var frees []device.Buffer
	defer func() {
		for _, f := range frees {
			p.Free(f)
		}
	}()
	widen := func(op device.GemmOperand, rows, cols int) (device.GemmOperand, device.View, device.View, error) {
		if op.Trans {
			rows, cols = cols, rows
		}
		span := 1
		if rows > 0 && cols > 0 {
			span = (batch-1)*op.BatchStride + (rows-1)*op.Ld + cols
		}
		buf, err := p.Alloc(dtype.Float64, span)
		if err != nil {
			return op, device.View{}, device.View{}, err
		}
		frees = append(frees, buf)
		orig := device.View{Buf: op.Buf, DType: op.DType, Offset: op.Offset, Shape: []int{span}, Strides: []int{1}}
		wide := device.View{Buf: buf, DType: dtype.Float64, Shape: []int{span}, Strides: []int{1}}
		op.Buf, op.DType, op.Offset = buf, dtype.Float64, 0
		return op, orig, wide, p.Device.Copy(wide, orig)
	}
	wa, _, _, err := widen(a, m, k)
	if err != nil {
		return err
	}
	wb, _, _, err := widen(b, k, n)
	if err != nil {
		return err
	}
	wc, orig, wide, err := widen(dst, m, n)
	if err != nil {
		return err
	}
	if err := p.Device.Gemm(wc, wa, wb, batch, m, n, k, alpha, beta); err != nil {
		return err
	}
	return p.Device.Copy(orig, wide)
}

// TestTolerancesAdmitAnotherCorrectDevice runs the suite against a device
// that computes in float64 where the reference computes in float32.
func TestTolerancesAdmitAnotherCorrectDevice(t *testing.T) {
	devicetest.Conformance(t, cpu.New(cpu.Options{}), &precise{cpu.New(cpu.Options{Index: 1})})
}
