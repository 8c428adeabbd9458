package optim

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// ClipGradNorm scales the gradients of params so that their total norm is
// at most maxNorm, and returns the total norm before clipping
// (torch.nn.utils.clip_grad_norm_). normType is 2 for the Euclidean norm;
// math.Inf(1) selects the largest absolute value. As in PyTorch, the
// gradients are always multiplied by min(1, maxNorm/(norm+1e-6)), computed in
// float32, and parameters without a gradient are ignored.
func ClipGradNorm(params []*tensor.Tensor, maxNorm, normType float64) (float64, error) {
	var grads []*tensor.Tensor
	for _, p := range params {
		if g := p.Grad(); g != nil {
			grads = append(grads, g)
		}
	}
	if len(grads) == 0 {
		return 0, nil
	}
	total, err := GradNorm(grads, normType)
	if err != nil {
		return 0, err
	}
	return total, ScaleToNorm(grads, maxNorm, total)
}

// ScaleToNorm multiplies the gradients grads, whose total norm is total,
// by PyTorch's clipping coefficient min(1, maxNorm/(total+1e-6)), computed
// in float32. ZeRO's stage 2 clips its gradient slices with it once the
// ranks have agreed on the total.
func ScaleToNorm(grads []*tensor.Tensor, maxNorm, total float64) error {
	coef := min(float32(maxNorm)/(float32(total)+float32(1e-6)), 1)
	for _, g := range grads {
		var err error
		g.Runtime().NoGrad(func() { err = g.MulScalarInPlace(float64(coef)) })
		if err != nil {
			return fmt.Errorf("optim: clip_grad_norm_: %w", err)
		}
	}
	return nil
}

// GradNorm is the total normType-norm of the tensors, computed per tensor in
// float64 and rounded to float32 as torch.norm does for float32 tensors, then
// combined.
func GradNorm(ts []*tensor.Tensor, normType float64) (float64, error) {
	if !(normType > 0) {
		return 0, fmt.Errorf("optim: norm type must be positive, got %v", normType)
	}
	norms := make([]float64, len(ts))
	for i, t := range ts {
		if err := t.Err(); err != nil {
			return 0, err
		}
		switch {
		case normType == 2:
			ss, err := t.Device().SumSquares(tensor.DeviceView(contiguous(t)))
			if err != nil {
				return 0, fmt.Errorf("optim: gradient norm: %w", err)
			}
			norms[i] = float64(float32(math.Sqrt(ss)))
		case math.IsInf(normType, 1):
			var m *tensor.Tensor
			t.Runtime().NoGrad(func() { m = t.Abs().MaxAll() })
			v, err := m.Item()
			m.Release()
			if err != nil {
				return 0, err
			}
			norms[i] = v
		default:
			var s *tensor.Tensor
			t.Runtime().NoGrad(func() { s = t.To(tensor.Float64).Abs().PowScalar(normType).SumAll() })
			v, err := s.Item()
			s.Release()
			if err != nil {
				return 0, err
			}
			norms[i] = float64(float32(math.Pow(v, 1/normType)))
		}
	}
	if math.IsInf(normType, 1) {
		m := 0.0
		for _, n := range norms {
			m = math.Max(m, n)
		}
		return m, nil
	}
	acc := 0.0
	for _, n := range norms {
		acc += math.Pow(n, normType)
	}
	return float64(float32(math.Pow(acc, 1/normType))), nil
}

func contiguous(t *tensor.Tensor) *tensor.Tensor {
	if t.IsContiguous() {
		return t
	}
	return t.Contiguous()
}
