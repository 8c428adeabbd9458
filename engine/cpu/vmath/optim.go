package vmath

import "math"

// The optimizer steps transcribe the single-tensor (for-loop) code paths of
// PyTorch 1.13's torch/optim/adamw.py, adam.py and sgd.py, one parameter
// tensor flattened into slices, keeping PyTorch's order of operations.
//
// Where the scalars are computed matters for matching PyTorch to the last
// bits. In PyTorch the hyperparameters and the bias corrections are Python
// floats, so everything computed from scalars alone is computed in float64
// on the host:
//
//	bias_correction1 = 1 - beta1**step      (float64; the caller passes it)
//	bias_correction2 = 1 - beta2**step      (float64; the caller passes it)
//	step_size        = lr / bias_correction1          (float64)
//	sqrt(bias_correction2)                            (float64)
//	1 - lr*weight_decay, 1 - beta1, 1 - beta2, 1 - dampening  (float64)
//
// and each is rounded to float32 only when the tensor kernel (mul_, add_,
// addcmul_, addcdiv_, div) receives it as a scalar operand. That is why these
// functions take float64 hyperparameters: pass the Python-equivalent values
// (step counts from 1, biasCorrection1 = 1 - math.Pow(beta1, step)) and do
// not round them first.

// adamConsts are the float32 scalar operands of one Adam/AdamW step, in the
// layout the assembly kernels read.
type adamConsts struct {
	gsign   float32 // -1 when maximizing, else 1 (exact negation)
	decay   float32 // AdamW: 1 - lr·weight_decay
	wd      float32 // Adam: weight_decay (L2 term added to the gradient)
	beta1   float32
	c1      float32 // 1 - beta1
	beta2   float32
	c2      float32 // 1 - beta2
	negStep float32 // -lr / bias_correction1
	bc2Sqrt float32 // sqrt(bias_correction2)
	eps     float32
	adamW   bool // decoupled weight decay (AdamW) instead of L2 (Adam)
	l2      bool // Adam with weight_decay != 0
	_       [2]bool
}

func newAdamConsts(lr, beta1, beta2, eps, weightDecay, bc1, bc2 float64, maximize, adamW bool) adamConsts {
	c := adamConsts{
		gsign:   1,
		decay:   float32(1 - lr*weightDecay),
		wd:      float32(weightDecay),
		beta1:   float32(beta1),
		c1:      float32(1 - beta1),
		beta2:   float32(beta2),
		c2:      float32(1 - beta2),
		negStep: float32(-(lr / bc1)),
		bc2Sqrt: float32(math.Sqrt(bc2)),
		eps:     float32(eps),
		adamW:   adamW,
		l2:      !adamW && weightDecay != 0,
	}
	if maximize {
		c.gsign = -1
	}
	return c
}

func checkAdam(fn string, p, g, m, v, vmax []float32) {
	n := len(p)
	if len(g) != n || len(m) != n || len(v) != n {
		panic("vmath." + fn + ": p, g, m and v lengths differ (" + itoa(n) + ", " + itoa(len(g)) + ", " + itoa(len(m)) + ", " + itoa(len(v)) + ")")
	}
	checkOpt(fn, "vmax", n, vmax)
}

// AdamWStep applies one step of torch.optim.AdamW (PyTorch 1.13,
// _single_tensor_adamw) to the parameters p in place, given their gradients
// g and the moment buffers m (exp_avg) and v (exp_avg_sq), which it updates.
// vmax is max_exp_avg_sq for amsgrad=True and must be nil otherwise.
// biasCorrection1 and biasCorrection2 are 1-beta1^step and 1-beta2^step
// computed in float64 for the step being taken (step counts from 1). Per
// element, with PyTorch's roundings:
//
//	g = maximize ? -g : g
//	p = p·(1 - lr·weightDecay)
//	m = m·beta1 + (1-beta1)·g          (the add fused, as add_(alpha=))
//	v = v·beta2 + (1-beta2)·g·g        (addcmul_)
//	vmax = max(vmax, v); use vmax for v below when amsgrad
//	p = p + ((-lr/bc1)·m) / (sqrt(v)/sqrt(bc2) + eps)   (addcdiv_)
func AdamWStep(p, g, m, v, vmax []float32, lr, beta1, beta2, eps, weightDecay, biasCorrection1, biasCorrection2 float64, maximize bool) {
	checkAdam("AdamWStep", p, g, m, v, vmax)
	c := newAdamConsts(lr, beta1, beta2, eps, weightDecay, biasCorrection1, biasCorrection2, maximize, true)
	if vmax != nil {
		adamAMSGradGo(p, g, m, v, vmax, &c)
		return
	}
	adamSplit(p, g, m, v, c)
}

func adamSplit(p, g, m, v []float32, c adamConsts) {
	k := impl
	for len(p) > chunk {
		k.adam(p[:chunk], g[:chunk], m[:chunk], v[:chunk], c)
		p, g, m, v = p[chunk:], g[chunk:], m[chunk:], v[chunk:]
	}
	k.adam(p, g, m, v, c)
}

// AdamStep applies one step of torch.optim.Adam (PyTorch 1.13,
// _single_tensor_adam): like AdamWStep, except that weight decay is the L2
// term added to the gradient, g = g + weightDecay·p (fused, as
// grad.add(param, alpha=weight_decay)), after the maximize negation and
// before the moment updates, and p is not decayed.
func AdamStep(p, g, m, v, vmax []float32, lr, beta1, beta2, eps, weightDecay, biasCorrection1, biasCorrection2 float64, maximize bool) {
	checkAdam("AdamStep", p, g, m, v, vmax)
	c := newAdamConsts(lr, beta1, beta2, eps, weightDecay, biasCorrection1, biasCorrection2, maximize, false)
	if vmax != nil {
		adamAMSGradGo(p, g, m, v, vmax, &c)
		return
	}
	adamSplit(p, g, m, v, c)
}

// adamElem is one element's update; vmax is nil-safe through the pointer.
func adamElem(pi, gi, mi, vi float32, vm *float32, c *adamConsts) (p, m, v float32) {
	gi *= c.gsign
	if c.adamW {
		pi *= c.decay
	} else if c.l2 {
		gi = fma32(pi, c.wd, gi)
	}
	mi = fma32(gi, c.c1, mi*c.beta1)
	vi = float32(vi*c.beta2) + float32(c.c2*gi)*gi
	vd := vi
	if vm != nil {
		if !(*vm >= vi) { // NaN-propagating maximum, as torch.maximum
			*vm = vi
		}
		vd = *vm
	}
	denom := float32(sqrt32(vd)/c.bc2Sqrt) + c.eps
	pi += float32(c.negStep*mi) / denom // addcdiv_: self + value*t1/t2, left to right
	return pi, mi, vi
}

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

func adamGo(p, g, m, v []float32, c adamConsts) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	for i := range p {
		p[i], m[i], v[i] = adamElem(p[i], g[i], m[i], v[i], nil, &c)
	}
}

func adamAMSGradGo(p, g, m, v, vmax []float32, c *adamConsts) {
	g, m, v, vmax = g[:len(p)], m[:len(p)], v[:len(p)], vmax[:len(p)]
	for i := range p {
		p[i], m[i], v[i] = adamElem(p[i], g[i], m[i], v[i], &vmax[i], c)
	}
}

// SGDStep applies one step of torch.optim.SGD (PyTorch 1.13,
// _single_tensor_sgd) to p in place. buf is the momentum buffer; it may be
// nil when momentum is 0. firstStep says that the buffer does not exist yet
// in PyTorch's terms (momentum_buffer is None): the buffer is then set to the
// (decayed) gradient instead of being updated. Per element:
//
//	d = maximize ? -g : g
//	d = d + weightDecay·p                   (if weightDecay != 0; fused)
//	buf = firstStep ? d : buf·momentum + (1-dampening)·d   (if momentum != 0)
//	d = nesterov ? d + momentum·buf : buf   (if momentum != 0)
//	p = p + (-lr)·d                         (fused)
func SGDStep(p, g, buf []float32, lr, momentum, dampening, weightDecay float64, nesterov, maximize, firstStep bool) {
	n := len(p)
	check2("SGDStep", p, g)
	c := sgdConsts{
		gsign: 1,
		wd:    float32(weightDecay),
		mom:   float32(momentum),
		damp:  float32(1 - dampening),
		negLR: float32(-lr),
	}
	if maximize {
		c.gsign = -1
	}
	var mode sgdMode
	if weightDecay != 0 {
		mode |= sgdL2
	}
	if momentum != 0 {
		if len(buf) != n {
			panic("vmath.SGDStep: momentum buffer has length " + itoa(len(buf)) + ", want " + itoa(n))
		}
		mode |= sgdMomentum
		if firstStep {
			mode |= sgdFirst
		}
		if nesterov {
			mode |= sgdNesterov
		}
	} else {
		buf = p // not touched; keeps the kernels' slices non-nil and equal in length
	}
	k := impl
	for len(p) > chunk {
		k.sgd(p[:chunk], g[:chunk], buf[:chunk], c, mode)
		p, g, buf = p[chunk:], g[chunk:], buf[chunk:]
	}
	k.sgd(p, g, buf, c, mode)
}

// sgdConsts are the float32 scalar operands of one SGD step, in the layout
// the assembly kernels read.
type sgdConsts struct {
	gsign float32 // -1 when maximizing, else 1
	wd    float32 // weight_decay
	mom   float32 // momentum
	damp  float32 // 1 - dampening
	negLR float32 // -lr
}

// sgdMode selects the terms of the update; each combination has its own
// loop (in the assembly) so that no element pays for a test.
type sgdMode uint8

const (
	sgdL2       sgdMode = 1 << iota // weight_decay != 0
	sgdMomentum                     // momentum != 0
	sgdFirst                        // the momentum buffer is created this step
	sgdNesterov
)

func sgdGo(p, g, buf []float32, c sgdConsts, mode sgdMode) {
	g, buf = g[:len(p)], buf[:len(p)]
	for i := range p {
		d := g[i] * c.gsign
		if mode&sgdL2 != 0 {
			d = fma32(p[i], c.wd, d)
		}
		if mode&sgdMomentum != 0 {
			b := d
			if mode&sgdFirst == 0 {
				b = fma32(d, c.damp, buf[i]*c.mom)
			}
			buf[i] = b
			if mode&sgdNesterov != 0 {
				d = fma32(b, c.mom, d)
			} else {
				d = b
			}
		}
		p[i] = fma32(d, c.negLR, p[i])
	}
}
