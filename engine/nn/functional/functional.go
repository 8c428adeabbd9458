// Package functional is torch.nn.functional for Go: the stateless forms of
// the layers, with PyTorch's names, argument order and defaults, over the
// differentiable ops of engine/tensor.
package functional

import (
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// Linear is x·Wᵀ + b (bias may be nil).
func Linear(x, weight, bias *tensor.Tensor) *tensor.Tensor { return tensor.Linear(x, weight, bias) }

// Relu, Silu, Tanh and Sigmoid are the elementwise activations.
func Relu(x *tensor.Tensor) *tensor.Tensor    { return x.Relu() }
func Silu(x *tensor.Tensor) *tensor.Tensor    { return x.Silu() }
func Tanh(x *tensor.Tensor) *tensor.Tensor    { return x.Tanh() }
func Sigmoid(x *tensor.Tensor) *tensor.Tensor { return x.Sigmoid() }

// Gelu takes approximate "none" (or "") or "tanh".
func Gelu(x *tensor.Tensor, approximate string) *tensor.Tensor { return x.Gelu(approximate) }

// Softmax and LogSoftmax normalise along dim.
func Softmax(x *tensor.Tensor, dim int) *tensor.Tensor    { return x.Softmax(dim) }
func LogSoftmax(x *tensor.Tensor, dim int) *tensor.Tensor { return x.LogSoftmax(dim) }

// LayerNorm normalises over the trailing normalizedShape dimensions; weight
// and bias may be nil; PyTorch's eps is 1e-5.
func LayerNorm(x *tensor.Tensor, normalizedShape []int, weight, bias *tensor.Tensor, eps float64) *tensor.Tensor {
	return tensor.LayerNorm(x, normalizedShape, weight, bias, eps)
}

// Embedding looks up rows of weight; paddingIdx < 0 means none.
func Embedding(indices, weight *tensor.Tensor, paddingIdx int64) *tensor.Tensor {
	return tensor.Embedding(indices, weight, paddingIdx)
}

// Dropout zeroes with probability p when training, drawing from x's
// runtime's generator.
func Dropout(x *tensor.Tensor, p float64, training bool) *tensor.Tensor {
	if x.Err() != nil {
		return x
	}
	return tensor.Dropout(x, p, training, x.Runtime().Generator())
}

// CrossEntropyOptions and Reduction are torch's cross_entropy/mse_loss
// options; DefaultCrossEntropy holds PyTorch's defaults.
type (
	CrossEntropyOptions = tensor.CrossEntropyOptions
	Reduction           = tensor.Reduction
)

var DefaultCrossEntropy = tensor.DefaultCrossEntropy

// CrossEntropy is the cross-entropy of logits [N, C] against class indices.
func CrossEntropy(logits, target *tensor.Tensor, opt CrossEntropyOptions) *tensor.Tensor {
	return tensor.CrossEntropy(logits, target, opt)
}

// MSELoss is the squared error with reduction "mean" (default), "sum" or
// "none".
func MSELoss(input, target *tensor.Tensor, reduction Reduction) *tensor.Tensor {
	if reduction == "" {
		reduction = tensor.ReduceMean
	}
	return tensor.MSELoss(input, target, reduction)
}

// ScaledDotProductAttention is softmax(q·kᵀ/√D)·v, causal when isCausal.
func ScaledDotProductAttention(q, k, v *tensor.Tensor, isCausal bool) *tensor.Tensor {
	return tensor.ScaledDotProductAttention(q, k, v, isCausal)
}
