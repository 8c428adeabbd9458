package gpu

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The fused optimizer steps (gpu/kernels/optim.cu), elementwise over
// contiguous tensors of equal size. float32 steps receive their scalars
// rounded to float32 from the float64 hyper-parameters exactly as
// engine/cpu/vmath computes them (the values PyTorch's Python scalars
// round to when a tensor kernel receives them); float64 steps receive the
// float64 values engine/cpu's loops use.

// Mode bits of the kernels (enums in optim.cu).
const (
	adamDecoupled = 1
	adamL2        = 2
	adamAMSGrad   = 4

	sgdL2       = 1
	sgdMomentum = 2
	sgdFirst    = 4
	sgdNesterov = 8
)

func (d *Device) contiguousSame(op string, vs ...device.View) error {
	n := vs[0].Numel()
	for _, v := range vs {
		if v.Buf == nil {
			continue
		}
		if !v.Contiguous() || v.Numel() != n || v.DType != vs[0].DType {
			return fmt.Errorf("%v: %s needs contiguous tensors of equal size and type", d, op)
		}
	}
	return nil
}

// AdamStep implements device.Device: one Adam or AdamW step (PyTorch 1.13's
// single-tensor code), with AMSGrad and maximize.
func (d *Device) AdamStep(p, g, m, v, vmax device.View, h device.AdamHyper) error {
	if err := d.contiguousSame("adam step", p, g, m, v, vmax); err != nil {
		return err
	}
	if h.AMSGrad != (vmax.Buf != nil) {
		return fmt.Errorf("%v: adam step: amsgrad=%v but max_exp_avg_sq given=%v", d, h.AMSGrad, vmax.Buf != nil)
	}
	if p.DType != dtype.Float32 && p.DType != dtype.Float64 {
		return fmt.Errorf("%v: adam step on %v parameters (keep float32 master weights)", d, p.DType)
	}
	n := p.Numel()
	if n == 0 {
		return nil
	}
	mode := int32(0)
	switch {
	case h.Decoupled:
		mode |= adamDecoupled
	case h.WeightDecay != 0:
		mode |= adamL2
	}
	if h.AMSGrad {
		mode |= adamAMSGrad
	}
	gsign := 1.0
	if h.Maximize {
		gsign = -1
	}
	// The scalars of vmath's newAdamConsts and cpu.adam64, computed alike.
	decay := 1 - h.LR*h.WeightDecay
	c1, c2 := 1-h.Beta1, 1-h.Beta2
	negStep := -(h.LR / h.BiasCorrection1)
	bc2Sqrt := math.Sqrt(h.BiasCorrection2)

	c := d.call(famOptim, kname("adam_", typeSuffix(p.DType)))
	c.ptr(d.ptr(p))
	c.ptr(d.ptr(g))
	c.ptr(d.ptr(m))
	c.ptr(d.ptr(v))
	c.ptr(d.optPtr(vmax))
	c.i64(int64(n))
	scalars := []float64{gsign, decay, h.WeightDecay, h.Beta1, c1, h.Beta2, c2, negStep, bc2Sqrt, h.Eps}
	for _, s := range scalars {
		if p.DType == dtype.Float32 {
			c.f32(float32(s))
		} else {
			c.f64(s)
		}
	}
	c.i32(mode)
	return c.launch(d.gridFor(int64(n)), dim1(blockSize), 0)
}

// SGDStep implements device.Device: one SGD step (PyTorch 1.13's
// single-tensor code) with momentum, dampening, Nesterov, weight decay and
// maximize; FirstStep initialises the momentum buffer from the gradient.
func (d *Device) SGDStep(p, g, buf device.View, h device.SGDHyper) error {
	if err := d.contiguousSame("sgd step", p, g, buf); err != nil {
		return err
	}
	if h.Momentum != 0 && buf.Buf == nil {
		return fmt.Errorf("%v: sgd step with momentum needs a momentum buffer", d)
	}
	if p.DType != dtype.Float32 && p.DType != dtype.Float64 {
		return fmt.Errorf("%v: sgd step on %v parameters (keep float32 master weights)", d, p.DType)
	}
	n := p.Numel()
	if n == 0 {
		return nil
	}
	mode := int32(0)
	if h.WeightDecay != 0 {
		mode |= sgdL2
	}
	if h.Momentum != 0 {
		mode |= sgdMomentum
		if h.FirstStep {
			mode |= sgdFirst
		}
		if h.Nesterov {
			mode |= sgdNesterov
		}
	}
	gsign := 1.0
	if h.Maximize {
		gsign = -1
	}
	c := d.call(famOptim, kname("sgd_", typeSuffix(p.DType)))
	c.ptr(d.ptr(p))
	c.ptr(d.ptr(g))
	bufPtr := d.optPtr(buf)
	if mode&sgdMomentum == 0 {
		bufPtr = 0 // not read without momentum
	}
	c.ptr(bufPtr)
	c.i64(int64(n))
	damp := 1 - h.Dampening
	if p.DType == dtype.Float32 {
		// vmath.SGDStep: the step is applied as fma(d, -lr, p).
		for _, s := range []float64{gsign, h.WeightDecay, h.Momentum, damp, -h.LR} {
			c.f32(float32(s))
		}
	} else {
		// cpu.sgd64: p -= lr·d.
		for _, s := range []float64{gsign, h.WeightDecay, h.Momentum, damp, h.LR} {
			c.f64(s)
		}
	}
	c.i32(mode)
	return c.launch(d.gridFor(int64(n)), dim1(blockSize), 0)
}
