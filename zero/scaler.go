package zero

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Loss scaling (amp.GradScaler) under stages 2 and 3, where the gradients
// exist only as each rank's slices inside the optimizer: UnscaleGrads
// divides them by the scale and tells every rank whether any rank found
// an infinite or NaN gradient, so that all ranks skip the same step, and
// SkipStep ends such a step without an update. Under stages 0 and 1 the
// gradients are the parameters' own, which the scaler reaches directly.

// UnscaleGrads multiplies this rank's gradient slices by inv (the scale's
// reciprocal) and reports whether any rank's gradients hold an infinite
// or NaN value (an all-reduce: every rank must call it). It finishes the
// backward pass's reduce-scatters first, as clipping does, and may come
// before or after clipping. Outside stages 2 and 3 it is an error: the
// caller unscales the parameters' gradients. With a stage-2 Schedule it is
// an error too: the step runs during backward, before anyone unscales.
func (z *Optimizer) UnscaleGrads(inv float64) (foundInf bool, err error) {
	f := z.flat
	if !z.opts.ShardsGradients() || f == nil {
		return false, fmt.Errorf("zero: unscaleGrads: stage %d keeps whole gradients on the parameters; unscale those", z.opts.Stage)
	}
	if err := z.refuseSchedule("unscaleGrads", "a GradScaler checks the whole gradient for inf and NaN before the step (and unscales it)"); err != nil {
		return false, err
	}
	if err := f.finishReduce(); err != nil {
		return false, err
	}
	local := 0.0
	for _, b := range f.buckets {
		for _, g := range []*tensor.Tensor{b.gradShard, b.hostGrad()} {
			if g == nil {
				continue
			}
			if err := g.MulScalarInPlace(inv); err != nil {
				return false, fmt.Errorf("zero: unscaling gradients: %w", err)
			}
			ss, err := g.Device().SumSquares(tensor.DeviceView(g))
			if err != nil {
				return false, fmt.Errorf("zero: unscaling gradients: %w", err)
			}
			if math.IsNaN(ss) || math.IsInf(ss, 0) {
				local = 1
			}
		}
	}
	flag := z.rt.FromValues(tensor.Float64, []float64{local})
	defer flag.Release()
	if err := z.pg.AllReduce(flag, dist.Sum).Wait(); err != nil {
		return false, fmt.Errorf("zero: unscaling gradients: all-reducing the overflow flag: %w", err)
	}
	any, err := flag.Item()
	return any > 0, err
}

// SkipStep ends a step without updating anything (a scaler found an
// overflow): the pass's gradient slices are dropped, as a step would
// consume them. With a stage-2 Schedule it is an error: the step ran
// during backward.
func (z *Optimizer) SkipStep() error {
	f := z.flat
	if !z.opts.ShardsGradients() || f == nil {
		return nil // nothing is pending: the gradients are the parameters'
	}
	if err := z.refuseSchedule("skipStep", "a step cannot be skipped"); err != nil {
		return err
	}
	if err := f.finishReduce(); err != nil {
		return err
	}
	f.reduced, f.clipped = false, false
	for _, b := range f.buckets {
		if g := b.hostGrad(); g != nil {
			g.Release()
			b.host.grad = nil
		}
	}
	return nil
}

// finishReduce ends the backward pass's reduce-scatters once per step
// (clipping, unscaling and the step share it).
func (f *flatLayout) finishReduce() error {
	if err := f.settle(); err != nil {
		return err
	}
	if f.reduced {
		return nil
	}
	if err := f.finishPass(); err != nil {
		return err
	}
	f.reduced = true
	return nil
}

// hostGrad is the bucket's gradient slice on the host, when offload sent
// it down; nil otherwise.
func (b *flatBucket) hostGrad() *tensor.Tensor {
	if b.host == nil {
		return nil
	}
	return b.host.grad
}

// refuseSchedule is what fn (clipping, unscaling) answers under a stage-2
// Schedule: the parameters are updated while backward runs, before
// anything could see the whole gradient.
func (z *Optimizer) refuseSchedule(fn, why string) error {
	if z.flat == nil || z.flat.sched == nil {
		return nil
	}
	return fmt.Errorf("zero: %s: %s, but this ZeroRedundancyOptimizer steps inside backward (stage 2, schedule %v): its parameters are updated before backward returns. Use it without the schedule option",
		fn, why, z.flat.sched.sched)
}
