package tensor

import (
	"fmt"
	"unsafe"

	"github.com/zeroeng/zeroeng/engine/rand"
)

// Generator is the seeded random generator that reproduces PyTorch's CPU
// generator bit for bit (engine/rand).
type Generator = rand.Generator

// NewGenerator returns a generator seeded like torch.manual_seed(seed).
func NewGenerator(seed uint64) *Generator { return rand.New(seed) }

// hostRandom fills a new tensor from host-side samples of the generator:
// fill32 for float32 (and, rounded, the half types), fill64 for float64.
func (rt *Runtime) hostRandom(op string, dt DType, shape []int, fill32 func([]float32), fill64 func([]float64)) *Tensor {
	n, err := checkedNumel(shape, Float64)
	if err != nil {
		return rt.failErr(op, err)
	}
	switch dt {
	case Float64:
		v := make([]float64, n)
		fill64(v)
		return rt.FromFloat64s(v, shape...)
	case Float32, BFloat16, Float16:
		v := make([]float32, n)
		fill32(v)
		t := rt.FromBytes(Float32, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*n), shape...)
		if dt == Float32 || t.err != nil {
			return t
		}
		c := t.To(dt)
		t.Release()
		return c
	}
	return rt.fail(op, "%v is not a floating-point type", dt)
}

// Rand draws uniformly from [0, 1) (torch.rand).
func (rt *Runtime) Rand(dt DType, shape ...int) *Tensor {
	return rt.RandWith(rt.gen, dt, shape...)
}

// RandWith is Rand with an explicit generator.
func (rt *Runtime) RandWith(g *Generator, dt DType, shape ...int) *Tensor {
	return rt.hostRandom("rand", dt, shape, func(v []float32) { g.Uniform32(v, 0, 1) }, func(v []float64) { g.Uniform64(v, 0, 1) })
}

// Randn draws from the standard normal distribution (torch.randn).
func (rt *Runtime) Randn(dt DType, shape ...int) *Tensor {
	return rt.RandnWith(rt.gen, dt, shape...)
}

// RandnWith is Randn with an explicit generator.
func (rt *Runtime) RandnWith(g *Generator, dt DType, shape ...int) *Tensor {
	return rt.hostRandom("randn", dt, shape, func(v []float32) { g.Normal32(v, 0, 1) }, func(v []float64) { g.Normal64(v, 0, 1) })
}

// Randint draws int64 values uniformly from [low, high) (torch.randint).
func (rt *Runtime) Randint(low, high int64, shape ...int) *Tensor {
	if low >= high {
		return rt.fail("randint", "random_ expects 'from' to be less than 'to', but got from=%d >= to=%d", low, high)
	}
	n, err := checkedNumel(shape, Int64)
	if err != nil {
		return rt.failErr("randint", err)
	}
	v := make([]int64, n)
	rt.gen.RandInt64(v, low, high)
	return rt.FromInt64s(v, shape...)
}

// Randperm returns a random permutation of 0..n-1 as int64 (torch.randperm).
func (rt *Runtime) Randperm(n int) *Tensor {
	return rt.RandpermWith(rt.gen, n)
}

// RandpermWith is Randperm with an explicit generator.
func (rt *Runtime) RandpermWith(g *Generator, n int) *Tensor {
	if _, err := checkedNumel([]int{n}, Int64); err != nil {
		return rt.failErr("randperm", err)
	}
	return rt.FromInt64s(g.Randperm(n), n)
}

// UniformFill overwrites t with uniform samples from [from, to) drawn from g
// (Tensor.uniform_, nn.init.uniform_). It is not recorded by autograd.
func (t *Tensor) UniformFill(g *Generator, from, to float64) error {
	return t.randomFill("uniform_", func(v []float32) { g.Uniform32(v, from, to) }, func(v []float64) { g.Uniform64(v, from, to) })
}

// NormalFill overwrites t with normal samples (Tensor.normal_,
// nn.init.normal_).
func (t *Tensor) NormalFill(g *Generator, mean, std float64) error {
	return t.randomFill("normal_", func(v []float32) { g.Normal32(v, mean, std) }, func(v []float64) { g.Normal64(v, mean, std) })
}

func (t *Tensor) randomFill(op string, fill32 func([]float32), fill64 func([]float64)) (err error) {
	if _, bad := check(op, t); bad != nil {
		return bad.err
	}
	defer func() {
		if r := recover(); r != nil { // the generator rejects invalid bounds
			err = fmt.Errorf("tensor: %s: %v", op, r)
		}
	}()
	var src *Tensor
	t.rt.NoGrad(func() { src = t.rt.hostRandom(op, t.dt, t.shape, fill32, fill64) })
	if src.err != nil {
		return src.err
	}
	defer src.Release()
	restore := t.rt.SetGradEnabled(false)
	defer restore()
	return t.CopyFrom(src)
}

// Dropout zeroes elements with probability p and scales the others by
// 1/(1−p) when training, as torch.nn.functional.dropout; the mask is drawn
// from g exactly as PyTorch's CPU kernel draws it. In eval mode (training
// false) or with p == 0 it returns an alias of x.
func Dropout(x *Tensor, p float64, training bool, g *Generator) *Tensor {
	rt, bad := check("dropout", x)
	if bad != nil {
		return bad
	}
	if p < 0 || p > 1 {
		return rt.fail("dropout", "dropout probability has to be between 0 and 1, but got %v", p)
	}
	if !training || p == 0 {
		return x.viewAs("AliasBackward", x.shape, x.strides)
	}
	if !x.dt.IsFloat() {
		return rt.fail("dropout", "not implemented for %v", x.dt)
	}
	var mask *Tensor
	rt.NoGrad(func() {
		mask = rt.hostRandom("dropout", x.dt, x.shape, func(v []float32) { g.DropoutMask32(v, p) }, func(v []float64) {
			// The same draws as DropoutMask32, scaled in float64 as
			// PyTorch does for double tensors.
			m := make([]float32, len(v))
			g.Bernoulli32(m, 1-p)
			for i := range v {
				v[i] = float64(m[i]) / (1 - p)
			}
		})
	})
	if mask.err != nil {
		return mask
	}
	out := x.Mul(mask)
	mask.Release()
	return out
}
