package zero

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Offload (DeepSpeed's ZeRO-Offload, Options.Offload): under stages 2
// and 3 the optimizer's half of a rank's slice — a copy of its parameters
// and the optimizer state, with the float32 master weights of a bfloat16
// or float16 model (the state's master_param, so checkpoints keep them) —
// lives on the host runtime, and the step runs there (the CPU's fused
// AdamW): the rank's gradient slices go down to the host, the updated
// parameter slices come back up. On a GPU rank that trades device memory (12 bytes of a
// 16-byte Adam parameter) for host↔device traffic (the gradient slice down
// and the parameter slice up, each step). On a CPU rank the host is a
// second CPU device, which is how the tests exercise it.
//
// A bucket's gradient slice goes down once its reduce-scatter is retired
// (waited for by the in-flight bound, maxScattering launches later, at the
// same point whatever the timing), while backward goes on (sendDown,
// DeepSpeed's overlap of the gradient transfers). The host step itself starts at Step, after a
// possible clipping (which scales the slices that came down alike): it
// needs the whole gradient's norm and the learning rate the script sets
// after backward, so it cannot start earlier without changing the result.
// Under stage 3 it then runs beside the device (hoststep.go): Step
// returns at once, and each unit's next gather waits for that unit's
// slices only, so the host updates the later units while the device runs
// the forward of the first ones.

// OffloadBytes counts the bytes moved between the device and the host.
type OffloadBytes struct {
	ToHost, ToDevice int64
}

// offloaded is a bucket's host half: this rank's slice of the parameters
// (in their dtype; the optimizer keeps a float32 master of a half-precision
// one in its state), and the gradient slice of the current pass once it
// has come down.
type offloaded struct {
	param *tensor.Tensor // on the host
	grad  *tensor.Tensor // on the host; nil until sendDown
}

// stateRuntime is where the optimizer state lives: the host under
// offload, else the device.
func (z *Optimizer) stateRuntime() *tensor.Runtime {
	if z.opts.Offloads() {
		return z.opts.Offload
	}
	return z.rt
}

// Offloaded reports the bytes moved between the device and the host so
// far (while a stage-3 step runs on the host, those moved up to now).
func (z *Optimizer) Offloaded() OffloadBytes {
	return OffloadBytes{ToHost: z.toHostBytes.Load(), ToDevice: z.toDeviceBytes.Load()}
}

// toHost copies a device tensor's elements to a new host tensor (in the
// host runtime's current scope).
func (z *Optimizer) toHost(t *tensor.Tensor) (*tensor.Tensor, error) {
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	z.toHostBytes.Add(int64(len(b)))
	h := z.opts.Offload.FromBytes(t.DType(), b, t.Shape()...)
	return h, h.Err()
}

// toDevice copies a host tensor's elements into the device tensor dst.
func (z *Optimizer) toDevice(dst, h *tensor.Tensor) error {
	b, err := h.To(dst.DType()).Bytes()
	if err != nil {
		return err
	}
	z.toDeviceBytes.Add(int64(len(b)))
	return dst.SetBytes(b)
}

// offloadStep updates bucket b's slice on the host with the
// hyper-parameters of groups: its gradient slice goes down (unless it did
// during backward), the pieces are stepped against the float32 master
// copy (made from the device's values at the first step), the slice goes
// back up.
func (f *flatLayout) offloadStep(b *flatBucket, groups []*optim.ParamGroup) error {
	z := f.z
	host := z.opts.Offload
	hs := host.OpenScope()
	defer hs.Close()
	me := z.pg.Rank()
	slice := func() *tensor.Tensor { // this rank's parameter slice on the device
		if b.shard != nil {
			return b.shard
		}
		if b.buf != nil {
			return b.buf.Narrow(0, me*b.slice, b.slice)
		}
		return nil
	}
	if b.host == nil {
		b.host = &offloaded{}
	}
	if b.host.param == nil {
		param := host.Zeros(b.gradShard.DType(), b.slice).Persist()
		if dev := slice(); dev != nil {
			h, err := z.toHost(dev)
			if err != nil {
				return err
			}
			if err := param.CopyFrom(h); err != nil {
				return err
			}
		} else {
			for _, pc := range b.pieces {
				h, err := z.toHost(pc.param.View(-1).Narrow(0, pc.at, pc.n).Contiguous())
				if err != nil {
					return err
				}
				if err := param.Narrow(0, pc.in, pc.n).CopyFrom(h); err != nil {
					return err
				}
			}
		}
		b.host.param = param
	}
	if b.host.grad == nil {
		if err := f.sendDown(b); err != nil {
			return err
		}
	}
	g := b.host.grad
	defer func() {
		b.host.grad.Release()
		b.host.grad = nil
	}()
	var uerr error
	host.NoGrad(func() {
		for _, pc := range b.pieces {
			states := []*optim.State{pc.state}
			p := b.host.param.Narrow(0, pc.in, pc.n)
			if uerr = optim.Update(z.kind, groups[pc.group], []*tensor.Tensor{p}, []*tensor.Tensor{g.Narrow(0, pc.in, pc.n)}, states); uerr != nil {
				uerr = fmt.Errorf("zero: %s (offloaded): %w", paramLabel(pc.param, z.index[pc.param]), uerr)
				return
			}
			pc.state = states[0]
		}
	})
	if uerr != nil {
		return uerr
	}
	if dev := slice(); dev != nil {
		return z.toDevice(dev, b.host.param)
	}
	for _, pc := range b.pieces {
		if err := z.toDevice(pc.param.View(-1).Narrow(0, pc.at, pc.n), b.host.param.Narrow(0, pc.in, pc.n)); err != nil {
			return err
		}
	}
	return nil
}

// sendDown copies bucket b's reduced gradient slice to the host (once per
// pass).
func (f *flatLayout) sendDown(b *flatBucket) error {
	z := f.z
	f.waitHost() // normally long done: the forward waited for every unit
	if b.host == nil {
		b.host = &offloaded{}
	}
	if b.host.grad != nil || b.gradShard == nil {
		return nil
	}
	hs := z.opts.Offload.OpenScope()
	defer hs.Close()
	h, err := z.toHost(b.gradShard)
	if err != nil {
		return err
	}
	b.host.grad = h.Persist()
	return nil
}
