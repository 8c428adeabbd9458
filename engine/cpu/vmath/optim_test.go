package vmath

import (
	"fmt"
	"math"
	"testing"
	"unsafe"
)

// The optimizer tests run several steps of each kernel against a float64
// transcription of PyTorch 1.13's single-tensor loops (torch/optim/adamw.py,
// adam.py, sgd.py), with fresh gradients every step. The float32 state may
// differ from the float64 one by the float32 roundings of each step, so
// the comparison is relative (1e-5, the tolerance the engine's tests use
// against PyTorch itself); the variants are also compared with each other,
// where only the fused versus separately rounded operations may differ.

type adamCfg struct {
	adamW, amsgrad, maximize bool
	lr, beta1, beta2, eps    float64
	wd                       float64
}

func (c adamCfg) String() string {
	return fmt.Sprintf("adamW=%v amsgrad=%v maximize=%v wd=%g", c.adamW, c.amsgrad, c.maximize, c.wd)
}

type adamState64 struct{ p, m, v, vmax []float64 }

// step64 is one step of _single_tensor_adamw / _single_tensor_adam in
// float64, step counting from 1.
func (s *adamState64) step64(c adamCfg, g []float32, step int) {
	bc1 := 1 - math.Pow(c.beta1, float64(step))
	bc2 := 1 - math.Pow(c.beta2, float64(step))
	for i := range s.p {
		gi := float64(g[i])
		if c.maximize {
			gi = -gi
		}
		if c.adamW {
			s.p[i] *= 1 - c.lr*c.wd
		} else if c.wd != 0 {
			gi += c.wd * s.p[i]
		}
		s.m[i] = s.m[i]*c.beta1 + (1-c.beta1)*gi
		s.v[i] = s.v[i]*c.beta2 + (1-c.beta2)*gi*gi
		v := s.v[i]
		if c.amsgrad {
			s.vmax[i] = math.Max(s.vmax[i], s.v[i])
			v = s.vmax[i]
		}
		denom := math.Sqrt(v)/math.Sqrt(bc2) + c.eps
		s.p[i] += -c.lr / bc1 * s.m[i] / denom
	}
}

type adamState32 struct{ p, m, v, vmax []float32 }

func (s *adamState32) step(c adamCfg, g []float32, step int) {
	bc1 := 1 - math.Pow(c.beta1, float64(step))
	bc2 := 1 - math.Pow(c.beta2, float64(step))
	f := AdamStep
	if c.adamW {
		f = AdamWStep
	}
	f(s.p, g, s.m, s.v, s.vmax, c.lr, c.beta1, c.beta2, c.eps, c.wd, bc1, bc2, c.maximize)
}

func widen(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func relClose(got float32, want, scale, tol float64) bool {
	return math.Abs(float64(got)-want) <= tol*(math.Abs(want)+scale)
}

func TestAdam(t *testing.T) {
	var cfgs []adamCfg
	for _, adamW := range []bool{true, false} {
		for _, ams := range []bool{false, true} {
			for _, maxi := range []bool{false, true} {
				for _, wd := range []float64{0, 0.1} {
					cfgs = append(cfgs, adamCfg{adamW, ams, maxi, 1e-3, 0.9, 0.999, 1e-8, wd})
				}
			}
		}
	}
	cfgs = append(cfgs, adamCfg{adamW: true, lr: 0.05, beta1: 0.8, beta2: 0.95, eps: 1e-6, wd: 0.3})
	const n, steps = 1037, 6
	for _, c := range cfgs {
		var results [][]float32
		for _, k := range variants {
			restore := useVariant(k)
			r := newRand(99)
			p := r.slice(n, 1)
			s32 := adamState32{p: p, m: make([]float32, n), v: make([]float32, n)}
			s64 := adamState64{p: widen(p), m: make([]float64, n), v: make([]float64, n)}
			if c.amsgrad {
				s32.vmax = make([]float32, n)
				s64.vmax = make([]float64, n)
			}
			for step := 1; step <= steps; step++ {
				g := r.slice(n, 0.1*float64(step))
				g[0] = 0 // an element where eps decides the update
				s32.step(c, g, step)
				s64.step64(c, g, step)
			}
			for i := range p {
				if !relClose(s32.p[i], s64.p[i], 1e-3, 1e-5) ||
					!relClose(s32.m[i], s64.m[i], 1e-2, 1e-5) ||
					!relClose(s32.v[i], s64.v[i], 1e-6, 1e-5) {
					t.Fatalf("%s %v: [%d] p, m, v = %g, %g, %g; float64 PyTorch loop %g, %g, %g",
						k.name, c, i, s32.p[i], s32.m[i], s32.v[i], s64.p[i], s64.m[i], s64.v[i])
				}
			}
			results = append(results, s32.p)
			restore()
		}
		// The variants agree to a few float32 roundings.
		for vi := 1; vi < len(results); vi++ {
			for i := range results[0] {
				a, b := results[0][i], results[vi][i]
				if math.Abs(float64(a-b)) > 4*ulp32(float64(b)) {
					t.Fatalf("%v: %s p[%d] = %g, %s %g", c, variants[0].name, i, a, variants[vi].name, b)
				}
			}
		}
	}
}

// TestAdamFirstStep pins the order of operations of one AdamW step on
// values small enough to follow by hand: with m = v = 0 and step 1,
// m = 0.1·g, v = 0.001·g², denom = |g|·√0.001/√0.001 + eps = |g| + eps, so
// p moves by -lr·sign(g) (up to eps) after the decay.
func TestAdamFirstStep(t *testing.T) {
	forVariants(t, func(t *testing.T, k *kernels) {
		p := []float32{1, 2, -3, 0.5}
		g := []float32{0.5, -0.25, 4, 0}
		m, v := make([]float32, 4), make([]float32, 4)
		AdamWStep(p, g, m, v, nil, 0.1, 0.9, 0.999, 1e-8, 0.5, 0.1, 0.001, false)
		want := []float64{1*0.95 - 0.1, 2*0.95 + 0.1, -3*0.95 - 0.1, 0.5 * 0.95}
		for i := range p {
			if math.Abs(float64(p[i])-want[i]) > 1e-6 {
				t.Errorf("p[%d] = %g, want %g", i, p[i], want[i])
			}
		}
	})
}

type sgdCfg struct {
	momentum, dampening, wd float64
	nesterov, maximize      bool
}

func TestSGD(t *testing.T) {
	var cfgs []sgdCfg
	for _, mom := range []float64{0, 0.9} {
		for _, damp := range []float64{0, 0.1} {
			for _, wd := range []float64{0, 1e-2} {
				for _, nest := range []bool{false, true} {
					for _, maxi := range []bool{false, true} {
						if nest && (mom == 0 || damp != 0) {
							continue // PyTorch rejects nesterov without momentum or with dampening
						}
						cfgs = append(cfgs, sgdCfg{mom, damp, wd, nest, maxi})
					}
				}
			}
		}
	}
	const n, steps, lr = 333, 5, 0.05
	forVariants(t, func(t *testing.T, k *kernels) {
		testSGD(t, cfgs, n, steps, lr)
	})
}

func testSGD(t *testing.T, cfgs []sgdCfg, n, steps int, lr float64) {
	for _, c := range cfgs {
		r := newRand(5)
		p := r.slice(n, 1)
		p64 := widen(p)
		buf := make([]float32, n)
		var buf64 []float64
		for step := 0; step < steps; step++ {
			g := r.slice(n, 1)
			SGDStep(p, g, buf, lr, c.momentum, c.dampening, c.wd, c.nesterov, c.maximize, step == 0)
			for i := range p64 { // _single_tensor_sgd in float64
				d := float64(g[i])
				if c.maximize {
					d = -d
				}
				if c.wd != 0 {
					d += c.wd * p64[i]
				}
				if c.momentum != 0 {
					if buf64 == nil {
						buf64 = make([]float64, n)
					}
					if step == 0 {
						buf64[i] = d
					} else {
						buf64[i] = buf64[i]*c.momentum + (1-c.dampening)*d
					}
					if c.nesterov {
						d += c.momentum * buf64[i]
					} else {
						d = buf64[i]
					}
				}
				p64[i] += -lr * d
			}
		}
		for i := range p {
			if !relClose(p[i], p64[i], 1e-2, 1e-5) { // p ~ 1 may cancel towards 0
				t.Fatalf("%+v: p[%d] = %g, float64 PyTorch loop %g", c, i, p[i], p64[i])
			}
			// The buffer is a sum of gradients ~1 that may cancel.
			if c.momentum != 0 && !relClose(buf[i], buf64[i], 0.1, 1e-5) {
				t.Fatalf("%+v: buf[%d] = %g, float64 PyTorch loop %g", c, i, buf[i], buf64[i])
			}
		}
	}
}

func TestSGDNilBuffer(t *testing.T) {
	// Without momentum the buffer may be nil.
	p := []float32{1}
	SGDStep(p, []float32{2}, nil, 0.5, 0, 0, 0, false, false, true)
	if p[0] != 0 {
		t.Errorf("plain SGD step: p = %g, want 0", p[0])
	}
}

// TestAdamConstsLayout pins the field offsets the assembly reads.
func TestAdamConstsLayout(t *testing.T) {
	var c adamConsts
	got := []uintptr{unsafe.Offsetof(c.gsign), unsafe.Offsetof(c.decay), unsafe.Offsetof(c.wd),
		unsafe.Offsetof(c.beta1), unsafe.Offsetof(c.c1), unsafe.Offsetof(c.beta2), unsafe.Offsetof(c.c2),
		unsafe.Offsetof(c.negStep), unsafe.Offsetof(c.bc2Sqrt), unsafe.Offsetof(c.eps)}
	for i, off := range got {
		if off != uintptr(4*i) {
			t.Errorf("adamConsts field %d at offset %d, the assembly reads %d", i, off, 4*i)
		}
	}
}

func TestSGDConstsLayout(t *testing.T) {
	var c sgdConsts
	got := []uintptr{unsafe.Offsetof(c.gsign), unsafe.Offsetof(c.wd), unsafe.Offsetof(c.mom),
		unsafe.Offsetof(c.damp), unsafe.Offsetof(c.negLR)}
	for i, off := range got {
		if off != uintptr(4*i) {
			t.Errorf("sgdConsts field %d at offset %d, the assembly reads %d", i, off, 4*i)
		}
	}
}
