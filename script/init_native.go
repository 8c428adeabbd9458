package script

import (
	"math"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// truncNormalInit is nn.init.truncNormal_'s draw (torch.nn.init.trunc_normal_):
// a uniform draw between the CDF's values at the bounds, mapped through the
// inverse CDF (erfinv), scaled, shifted and clamped, each step rounded as
// PyTorch rounds it in the tensor's type. The uniform draw is uniform_'s,
// from the rank's generator, so the values are PyTorch's for the same seed
// (erfinv is computed in float64 and rounded, within an ulp of PyTorch's
// float32 erfinv). The mapping runs on the host: an initialiser runs once.
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
	cdf := func(x float64) float64 { return (1 + math.Erf(x/math.Sqrt2)) / 2 }
	lo, hi := 2*cdf((a-mean)/std)-1, 2*cdf((b-mean)/std)-1
	u, err := r.rt.Rand(t.DType(), t.Shape()...).MulScalar(hi - lo).AddScalar(lo).Float64s()
	if err != nil {
		r.throw(err)
	}
	round := func(v float64) float64 { return float64(float32(v)) } // float32 and the half types' float32 opmath
	if t.DType() == tensor.Float64 {
		round = func(v float64) float64 { return v }
	}
	scale, shift, fa, fb := round(std*math.Sqrt2), round(mean), round(a), round(b)
	for i, v := range u {
		x := round(math.Erfinv(v))
		x = round(x * scale)
		x = round(x + shift)
		u[i] = math.Min(math.Max(x, fa), fb)
	}
	if err := t.CopyFrom(r.rt.FromValues(t.DType(), u, t.Shape()...)); err != nil {
		r.throw(err)
	}
	return goja.Undefined()
}
