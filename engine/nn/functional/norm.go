package functional

import (
	"fmt"
	"slices"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// RMSNormEps is PyTorch 2.4's default eps of rms_norm for inputs of dtype
// dt: the machine epsilon of the type it computes in
// (std::numeric_limits<opmath_type<scalar_t>>::epsilon()), that is
// float64's for float64 and float32's for float32, bfloat16 and float16.
func RMSNormEps(dt tensor.DType) float64 {
	if dt == tensor.Float64 {
		return 0x1p-52
	}
	return 0x1p-23
}

// RMSNorm is PyTorch 2.4's torch.nn.functional.rms_norm: over the trailing
// normalizedShape dimensions, y = x · rsqrt(mean(x²) + eps), times weight
// (of shape normalizedShape) when it is not nil. It is composed of engine
// ops in PyTorch's order, so autograd gives its backward.
func RMSNorm(x *tensor.Tensor, normalizedShape []int, weight *tensor.Tensor, eps float64) *tensor.Tensor {
	const op = "rms_norm"
	if err := firstErr(x, weight); err != nil {
		return failed(x, err)
	}
	rt := x.Runtime()
	fail := func(format string, args ...any) *tensor.Tensor {
		return rt.Failed(fmt.Errorf("nn: "+op+": "+format, args...))
	}
	if len(normalizedShape) == 0 {
		return fail("expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got normalized_shape = []")
	}
	if weight != nil && !slices.Equal(weight.Shape(), normalizedShape) {
		return fail("expected weight to be of same shape as normalized_shape, but got weight of shape %v and normalized_shape = %v", weight.Shape(), normalizedShape)
	}
	xs := x.Shape()
	k := len(normalizedShape)
	if len(xs) < k || !slices.Equal(xs[len(xs)-k:], normalizedShape) {
		return fail("given normalized_shape=%v, expected input with shape [*, %s], but got input of size %v", normalizedShape, joinInts(normalizedShape), xs)
	}
	if !x.DType().IsFloat() {
		return fail("expected a floating-point input, got %v", x.DType())
	}
	dims := make([]int, k)
	for i := range dims {
		dims[i] = len(xs) - k + i
	}
	sc := rt.OpenScope()
	defer sc.Close()
	y := x.Mul(x.Square().Mean(dims, true).AddScalar(eps).Rsqrt())
	if weight != nil {
		y = y.Mul(weight)
	}
	sc.Keep(y)
	return y
}

func joinInts(xs []int) string {
	s := fmt.Sprint(xs)
	return s[1 : len(s)-1]
}

// BatchNormOptions are torch.nn.functional.batch_norm's arguments after
// the input. Tensors may be nil (no running statistics, no affine
// transform).
type BatchNormOptions struct {
	RunningMean, RunningVar *tensor.Tensor
	Weight, Bias            *tensor.Tensor
	// Training normalises with the batch's statistics (and updates the
	// running ones, when given); otherwise with the running ones.
	Training bool
	// Momentum is the weight of the batch's statistics in the running
	// ones: running = (1 − momentum)·running + momentum·batch.
	Momentum, Eps float64
	// AllReduce, when set, makes the statistics those of the batches of
	// every rank of a process group (SyncBatchNorm): it sums a tensor
	// over the group in place. Every rank of the group must call
	// BatchNorm with it, in training, and take part in the backward pass,
	// which sums the statistics' gradients over the group in turn.
	AllReduce func(*tensor.Tensor) error
}

// BatchNorm is torch.nn.functional.batch_norm over input [N, C, *]: each
// channel is normalised by the mean and biased variance of its N·∏*
// values (in training) or by the running statistics, then scaled by
// weight and shifted by bias. Training updates the running statistics in
// place, the variance's with the unbiased estimate, as PyTorch does.
// Composed of engine ops, it gets its backward from autograd.
func BatchNorm(x *tensor.Tensor, o BatchNormOptions) *tensor.Tensor {
	const op = "batch_norm"
	if err := firstErr(x, o.RunningMean, o.RunningVar, o.Weight, o.Bias); err != nil {
		return failed(x, err)
	}
	rt := x.Runtime()
	fail := func(format string, args ...any) *tensor.Tensor {
		return rt.Failed(fmt.Errorf("nn: "+op+": "+format, args...))
	}
	xs := x.Shape()
	if len(xs) < 2 {
		return fail("expected an input of at least 2 dimensions [N, C, *], got input of size %v", xs)
	}
	if !x.DType().IsFloat() {
		return fail("expected a floating-point input, got %v", x.DType())
	}
	c := xs[1]
	for _, p := range []struct {
		name string
		t    *tensor.Tensor
	}{{"running_mean", o.RunningMean}, {"running_var", o.RunningVar}, {"weight", o.Weight}, {"bias", o.Bias}} {
		if p.t != nil && (p.t.Dim() != 1 || p.t.Shape()[0] != c) {
			return fail("%s should contain %d elements not %d", p.name, c, p.t.Numel())
		}
	}
	if (o.RunningMean == nil) != (o.RunningVar == nil) {
		return fail("running_mean and running_var must be given together")
	}
	if !o.Training && o.RunningMean == nil {
		return fail("running_mean and running_var must be defined in evaluation mode")
	}
	count := x.Numel() / max(c, 1)
	if o.Training && count == 1 && o.AllReduce == nil {
		return fail("expected more than 1 value per channel when training, got input size %v", xs)
	}
	if o.AllReduce == nil && rt.HasBatchNormKernel(x.DType()) {
		// The device's fused kernels: the same formulas in a few passes.
		return tensor.BatchNorm(x, tensor.BatchNormArgs{Weight: o.Weight, Bias: o.Bias, RunningMean: o.RunningMean,
			RunningVar: o.RunningVar, Training: o.Training, Momentum: o.Momentum, Eps: o.Eps})
	}
	dims := []int{0}
	shape := make([]int, len(xs)) // [1, C, 1, ...]: a channel vector broadcast over x
	for i := range shape {
		shape[i] = 1
		if i >= 2 {
			dims = append(dims, i)
		}
	}
	shape[1] = c
	sc := rt.OpenScope()
	defer sc.Close()

	var y *tensor.Tensor
	if o.Training {
		var mean, sumSq *tensor.Tensor
		total := float64(count)
		if o.AllReduce == nil {
			mean = x.Mean(dims, true)
			d := x.Sub(mean)
			sumSq = d.Square().Sum(dims, false)
			y = d.Mul(sumSq.DivScalar(total).AddScalar(o.Eps).Rsqrt().Reshape(shape...))
		} else {
			// The batch's count travels with its sums, as ranks may hold
			// batches of different sizes.
			sums := allReduceSum(tensor.Cat([]*tensor.Tensor{x.Sum(dims, false), rt.Full(x.DType(), total, 1)}, 0), o.AllReduce)
			n, err := sums.Narrow(0, c, 1).Item()
			if err != nil {
				return failed(x, err)
			}
			total = n
			mean = sums.Narrow(0, 0, c).DivScalar(total).Reshape(shape...)
			d := x.Sub(mean)
			sumSq = allReduceSum(d.Square().Sum(dims, false), o.AllReduce)
			y = d.Mul(sumSq.DivScalar(total).AddScalar(o.Eps).Rsqrt().Reshape(shape...))
		}
		if o.RunningMean != nil {
			m := o.Momentum
			var err error
			rt.NoGrad(func() {
				newMean := mean.Reshape(c).MulScalar(m).Add(o.RunningMean.MulScalar(1 - m))
				newVar := sumSq.DivScalar(total - 1).MulScalar(m).Add(o.RunningVar.MulScalar(1 - m))
				if err = o.RunningMean.CopyFrom(newMean); err == nil {
					err = o.RunningVar.CopyFrom(newVar)
				}
			})
			if err != nil {
				return failed(x, fmt.Errorf("nn: %s: updating the running statistics: %w", op, err))
			}
		}
	} else {
		y = x.Sub(o.RunningMean.Reshape(shape...)).Mul(o.RunningVar.AddScalar(o.Eps).Rsqrt().Reshape(shape...))
	}
	if o.Weight != nil {
		y = y.Mul(o.Weight.Reshape(shape...))
	}
	if o.Bias != nil {
		y = y.Add(o.Bias.Reshape(shape...))
	}
	sc.Keep(y)
	return y
}

// allReduceSum is a differentiable sum over a process group: forward sums
// t over the ranks with reduce, and so does backward with the gradient,
// the adjoint of a sum being the sum of the adjoints.
func allReduceSum(t *tensor.Tensor, reduce func(*tensor.Tensor) error) *tensor.Tensor {
	if t.Err() != nil {
		return t
	}
	rt := t.Runtime()
	var out *tensor.Tensor
	rt.NoGrad(func() { out = t.Contiguous().Clone() })
	if out.Err() != nil {
		return out
	}
	if err := reduce(out); err != nil {
		return rt.Failed(fmt.Errorf("nn: sync_batch_norm: all-reduce: %w", err))
	}
	return tensor.Function("SyncBatchNormAllReduceBackward", out, []*tensor.Tensor{t}, func(g *tensor.Tensor) []*tensor.Tensor {
		sum := g.Contiguous().Clone()
		if err := reduce(sum); err != nil {
			return []*tensor.Tensor{g.Runtime().Failed(fmt.Errorf("nn: sync_batch_norm: all-reduce of the gradient: %w", err))}
		}
		return []*tensor.Tensor{sum}
	})
}
