package cpu

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The optimizer steps are elementwise, so they split into independent
// chunks across threads without changing a single bit of the result.

const optimGrain = 1 << 15

func contiguousSame(op string, vs ...device.View) error {
	n := vs[0].Numel()
	for _, v := range vs {
		if v.Buf == nil {
			continue
		}
		if !v.Contiguous() || v.Numel() != n || v.DType != vs[0].DType {
			return fmt.Errorf("cpu: %s needs contiguous tensors of equal size and type", op)
		}
	}
	return nil
}

func f32(v device.View) []float32 {
	if v.Buf == nil {
		return nil
	}
	return elems[float32](v.Buf)[v.Offset : v.Offset+v.Numel()]
}

func f64(v device.View) []float64 {
	if v.Buf == nil {
		return nil
	}
	return elems[float64](v.Buf)[v.Offset : v.Offset+v.Numel()]
}

func part[T any](s []T, lo, hi int) []T {
	if s == nil {
		return nil
	}
	return s[lo:hi]
}

// AdamStep implements device.Device.
func (d *Device) AdamStep(p, g, m, v, vmax device.View, h device.AdamHyper) error {
	if err := contiguousSame("adam step", p, g, m, v, vmax); err != nil {
		return err
	}
	if h.AMSGrad != (vmax.Buf != nil) {
		return fmt.Errorf("cpu: adam step: amsgrad=%v but max_exp_avg_sq given=%v", h.AMSGrad, vmax.Buf != nil)
	}
	switch p.DType {
	case dtype.Float32:
		P, G, M, V, VM := f32(p), f32(g), f32(m), f32(v), f32(vmax)
		step := vmath.AdamStep
		if h.Decoupled {
			step = vmath.AdamWStep
		}
		parallel.For(len(P), optimGrain, func(lo, hi int) {
			step(P[lo:hi], G[lo:hi], M[lo:hi], V[lo:hi], part(VM, lo, hi), h.LR, h.Beta1, h.Beta2, h.Eps, h.WeightDecay,
				h.BiasCorrection1, h.BiasCorrection2, h.Maximize)
		})
	case dtype.Float64:
		P, G, M, V, VM := f64(p), f64(g), f64(m), f64(v), f64(vmax)
		parallel.For(len(P), optimGrain, func(lo, hi int) {
			adam64(P[lo:hi], G[lo:hi], M[lo:hi], V[lo:hi], part(VM, lo, hi), h)
		})
	default:
		return fmt.Errorf("cpu: adam step on %v parameters (keep float32 master weights)", p.DType)
	}
	return nil
}

// adam64 is the float64 transcription of PyTorch's single-tensor Adam/AdamW.
func adam64(p, g, m, v, vmax []float64, h device.AdamHyper) {
	stepSize := h.LR / h.BiasCorrection1
	bc2Sqrt := math.Sqrt(h.BiasCorrection2)
	for i := range p {
		gi := g[i]
		if h.Maximize {
			gi = -gi
		}
		if h.Decoupled {
			p[i] *= 1 - h.LR*h.WeightDecay
		} else if h.WeightDecay != 0 {
			gi += h.WeightDecay * p[i]
		}
		m[i] = m[i]*h.Beta1 + (1-h.Beta1)*gi
		v[i] = v[i]*h.Beta2 + (1-h.Beta2)*gi*gi
		vd := v[i]
		if vmax != nil {
			if !(vmax[i] >= v[i]) {
				vmax[i] = v[i]
			}
			vd = vmax[i]
		}
		p[i] += -stepSize * m[i] / (math.Sqrt(vd)/bc2Sqrt + h.Eps)
	}
}

// SGDStep implements device.Device.
func (d *Device) SGDStep(p, g, buf device.View, h device.SGDHyper) error {
	if err := contiguousSame("sgd step", p, g, buf); err != nil {
		return err
	}
	if h.Momentum != 0 && buf.Buf == nil {
		return fmt.Errorf("cpu: sgd step with momentum needs a momentum buffer")
	}
	switch p.DType {
	case dtype.Float32:
		P, G, B := f32(p), f32(g), f32(buf)
		parallel.For(len(P), optimGrain, func(lo, hi int) {
			vmath.SGDStep(P[lo:hi], G[lo:hi], part(B, lo, hi), h.LR, h.Momentum, h.Dampening, h.WeightDecay, h.Nesterov, h.Maximize, h.FirstStep)
		})
	case dtype.Float64:
		P, G, B := f64(p), f64(g), f64(buf)
		parallel.For(len(P), optimGrain, func(lo, hi int) {
			sgd64(P[lo:hi], G[lo:hi], part(B, lo, hi), h)
		})
	default:
		return fmt.Errorf("cpu: sgd step on %v parameters (keep float32 master weights)", p.DType)
	}
	return nil
}

func sgd64(p, g, buf []float64, h device.SGDHyper) {
	for i := range p {
		d := g[i]
		if h.Maximize {
			d = -d
		}
		if h.WeightDecay != 0 {
			d += h.WeightDecay * p[i]
		}
		if h.Momentum != 0 {
			b := d
			if !h.FirstStep {
				b = buf[i]*h.Momentum + (1-h.Dampening)*d
			}
			buf[i] = b
			if h.Nesterov {
				d += h.Momentum * b
			} else {
				d = b
			}
		}
		p[i] -= h.LR * d
	}
}
