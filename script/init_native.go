package script

import (
	"fmt"
	"strings"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The random initialisers of nn.init write into the tensor's own memory
// (tensor.FillRandom), drawing from the rank's generator exactly as
// PyTorch 1.13's tensor.normal_(mean, std), tensor.uniform_(a, b) and
// nn.init.trunc_normal_ do, without a temporary of the tensor's size: a
// model whose parameters fill a rank's --max-memory can be initialised.

// normalInit is nn.init.normal_(t, mean, std): t.normal_(mean, std), the
// normal kernel with mean and std inside it (not randn()*std+mean, which
// rounds differently).
func (r *Runtime) normalInit(call goja.FunctionCall) goja.Value {
	const fn = "nn.init.normal_"
	t := r.unwrap(fn, "tensor", call.Argument(0))
	mean := r.numberValue(fn, "mean", call.Argument(1))
	std := r.numberValue(fn, "std", call.Argument(2))
	r.fillRandom(fn, t, tensor.Normal(mean, std))
	return goja.Undefined()
}

// uniformInit is nn.init.uniform_(t, a, b): t.uniform_(a, b), each sample
// x·(b−a)+a in one fused multiply-add of the tensor's type.
func (r *Runtime) uniformInit(call goja.FunctionCall) goja.Value {
	const fn = "nn.init.uniform_"
	t := r.unwrap(fn, "tensor", call.Argument(0))
	a := r.numberValue(fn, "a", call.Argument(1))
	b := r.numberValue(fn, "b", call.Argument(2))
	r.fillRandom(fn, t, tensor.Uniform(a, b))
	return goja.Undefined()
}

// truncNormalInit is nn.init.truncNormal_ (torch.nn.init.trunc_normal_): a
// uniform_ draw between the CDF's values at the bounds, mapped through the
// inverse CDF (erfinv), scaled, shifted and clamped, each step rounded as
// PyTorch rounds it in the tensor's type (tensor.TruncNormal; erfinv is
// computed in float64 and rounded, within an ulp of PyTorch's float32
// erfinv).
func (r *Runtime) truncNormalInit(call goja.FunctionCall) goja.Value {
	const fn = "nn.init.truncNormal_"
	t := r.unwrap(fn, "tensor", call.Argument(0))
	mean := r.numberValue(fn, "mean", call.Argument(1))
	std := r.numberValue(fn, "std", call.Argument(2))
	a := r.numberValue(fn, "a", call.Argument(3))
	b := r.numberValue(fn, "b", call.Argument(4))
	switch {
	case !t.DType().IsFloat():
		r.throwf("%s: expects a floating-point tensor, got %v", fn, t.DType())
	case !(std > 0):
		r.throwf("%s: std must be positive, got %v", fn, std)
	case !(a < b):
		r.throwf("%s: the bounds must have a < b, got a=%v, b=%v", fn, a, b)
	}
	r.fillRandom(fn, t, tensor.TruncNormal(mean, std, a, b))
	return goja.Undefined()
}

// fillRandom fills t in place from the rank's generator, or throws the
// failure as fn's.
func (r *Runtime) fillRandom(fn string, t *tensor.Tensor, f tensor.RandomFill) {
	if err := t.FillRandom(r.rt.Generator(), f); err != nil {
		msg := strings.TrimPrefix(err.Error(), "tensor: "+f.String()+": ")
		r.throw(fmt.Errorf("%s: %s", fn, msg))
	}
}
