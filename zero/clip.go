package zero

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/optim"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// ClipGradNorm is torch.nn.utils.clip_grad_norm_ over every parameter's
// gradient as the plain optimizer would see it, collective under stage 2:
// every rank calls it between backward and Step. Under stage 1 the
// gradients are whole on every rank (DDP averaged them), so the local norm
// is the global one. Under stage 2 each rank holds only its slices of the
// averaged gradients: the backward pass's reduce-scatters are finished,
// each rank's sum of squares is all-reduced, and every rank scales its
// slices by the same coefficient. It returns the total norm before
// clipping. Stage 2 supports the 2-norm only; with a Schedule it is an
// error (the parameters are updated before backward returns).
func (z *Optimizer) ClipGradNorm(maxNorm, normType float64) (float64, error) {
	if z.opts.OverlapWithDDP {
		return 0, fmt.Errorf("zero: clipGradNorm with overlapWithDDP: the step runs during backward, before the gradients' norm is known")
	}
	if err := z.refuseSchedule("clipGradNorm", "clipping needs the norm of the whole gradient before the step"); err != nil {
		return 0, err
	}
	if !z.opts.ShardsGradients() || z.flat == nil {
		return optim.ClipGradNorm(z.Params(), maxNorm, normType)
	}
	if normType != 2 {
		return 0, fmt.Errorf("zero: clipGradNorm under stage %d computes the 2-norm only (norm type %v asked)", z.opts.Stage, normType)
	}
	f := z.flat
	if f.clipped {
		return 0, fmt.Errorf("zero: clipGradNorm called twice before a step")
	}
	if err := f.finishReduce(); err != nil {
		return 0, err
	}
	f.clipped = true
	ss := 0.0
	for _, b := range f.buckets {
		v, err := b.gradShard.Device().SumSquares(tensor.DeviceView(b.gradShard))
		if err != nil {
			return 0, fmt.Errorf("zero: clipGradNorm: %w", err)
		}
		ss += v
	}
	total := z.rt.FromValues(tensor.Float64, []float64{ss})
	defer total.Release()
	if err := z.pg.AllReduce(total, dist.Sum).Wait(); err != nil {
		return 0, fmt.Errorf("zero: clipGradNorm: all-reducing the sum of squares: %w", err)
	}
	sum, err := total.Item()
	if err != nil {
		return 0, err
	}
	norm := float64(float32(math.Sqrt(sum)))
	shards := make([]*tensor.Tensor, len(f.buckets))
	for i, b := range f.buckets {
		shards[i] = b.gradShard
	}
	if err := optim.ScaleToNorm(shards, maxNorm, norm); err != nil {
		return 0, fmt.Errorf("zero: %w", err)
	}
	// Under offload the slices are on the host already (they went down
	// during backward): they are scaled alike.
	var down []*tensor.Tensor
	for _, b := range f.buckets {
		if g := b.hostGrad(); g != nil {
			down = append(down, g)
		}
	}
	if len(down) > 0 {
		if err := optim.ScaleToNorm(down, maxNorm, norm); err != nil {
			return 0, fmt.Errorf("zero: %w", err)
		}
	}
	return norm, nil
}
