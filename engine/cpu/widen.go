package cpu

import (
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

func isHalf(dt dtype.DType) bool { return dt == dtype.BFloat16 || dt == dtype.Float16 }

// widened runs a float32 kernel for half-precision operands, as PyTorch's CPU
// kernels do: inputs are widened to float32, the kernel computes in float32,
// and outputs are rounded once on the way back. ins and outs point at the
// caller's views, which are swapped for float32 temporaries while kernel
// runs. Outputs that are also read (accumulators) must be listed in both.
func (d *Device) widened(outs, ins []*device.View, kernel func() error) error {
	type saved struct {
		p    *device.View
		orig device.View
	}
	var temps []saved
	swap := func(p *device.View, fill bool) error {
		if !isHalf(p.DType) {
			return nil
		}
		for _, t := range temps {
			if t.p == p {
				return nil
			}
		}
		buf, err := d.Alloc(dtype.Float32, p.Numel())
		if err != nil {
			return err
		}
		tmp := device.View{Buf: buf, DType: dtype.Float32, Shape: p.Shape, Strides: device.ContiguousStrides(p.Shape)}
		if fill {
			if err := d.Copy(tmp, *p); err != nil {
				return err
			}
		}
		temps = append(temps, saved{p, *p})
		*p = tmp
		return nil
	}
	defer func() {
		for _, t := range temps {
			d.Free(t.p.Buf)
			*t.p = t.orig
		}
	}()
	for _, p := range ins {
		if err := swap(p, true); err != nil {
			return err
		}
	}
	for _, p := range outs {
		if err := swap(p, false); err != nil {
			return err
		}
	}
	if err := kernel(); err != nil {
		return err
	}
	for _, t := range temps {
		for _, o := range outs {
			if o == t.p {
				if err := d.Copy(t.orig, *t.p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func anyHalf(vs ...device.View) bool {
	for _, v := range vs {
		if isHalf(v.DType) {
			return true
		}
	}
	return false
}
