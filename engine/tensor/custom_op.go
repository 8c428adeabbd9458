package tensor

// Function makes out the result of a differentiable op that autograd
// cannot derive from the engine's own ops: the caller computed out from
// inputs outside autograd (under NoGrad, or from inputs that need no
// gradient), and backward maps the gradient of out to one gradient per
// input, each of that input's shape and dtype (nil where none flows).
//
// It exists for ops whose adjoint involves something other than local
// arithmetic, such as SyncBatchNorm's all-reduce of batch statistics:
// the gradient of a sum over ranks is the sum over ranks of the gradients,
// so backward must all-reduce too, in the middle of the backward pass.
//
// backward runs with gradients disabled, inside a scope that releases its
// temporaries; it must not use tensors that may be released before the
// backward pass (capture none, or ones the caller keeps alive).
func Function(op string, out *Tensor, inputs []*Tensor, backward func(g *Tensor) []*Tensor) *Tensor {
	if out == nil {
		return &Tensor{err: errNil}
	}
	if out.err != nil {
		return out
	}
	for _, in := range inputs {
		if in != nil && in.err != nil {
			return errTensor(out.rt, in.err)
		}
	}
	if out.fn != nil || out.requiresGrad {
		return out.rt.fail(op, "the result of a custom op must be made outside autograd (under NoGrad)")
	}
	if n := out.record(op, inputs...); n != nil {
		n.backward = backward
	}
	return out
}
