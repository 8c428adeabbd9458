package devicetest

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// AdamStep and SGDStep.

type adamSpec struct {
	name      string
	h         device.AdamHyper
	step      int
	zeroState bool // m, v (and vmax) start at 0, as on the first step
}

func adamSpecs() []adamSpec {
	base := device.AdamHyper{LR: 0.05, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	with := func(f func(h *device.AdamHyper)) device.AdamHyper {
		h := base
		f(&h)
		return h
	}
	return []adamSpec{
		{"adam/step1", with(func(h *device.AdamHyper) { h.LR = 1e-3 }), 1, true},
		{"adam/l2", with(func(h *device.AdamHyper) { h.WeightDecay = 0.01 }), 10, false},
		{"adamw", with(func(h *device.AdamHyper) { h.Decoupled, h.WeightDecay, h.LR = true, 0.1, 0.02 }), 3, false},
		{"adamw/amsgrad", with(func(h *device.AdamHyper) { h.Decoupled, h.WeightDecay, h.AMSGrad = true, 0.01, true }), 5, false},
		{"adam/amsgrad/step1", with(func(h *device.AdamHyper) { h.AMSGrad = true }), 1, true},
		{"adam/maximize", with(func(h *device.AdamHyper) { h.Maximize, h.WeightDecay, h.Beta1 = true, 0.01, 0.8 }), 7, false},
		{"adamw/maximize,amsgrad", with(func(h *device.AdamHyper) { h.Decoupled, h.Maximize, h.AMSGrad, h.Eps = true, true, true, 1e-6 }), 2, false},
	}
}

func adamCases() []Case {
	var cs []Case
	for _, sp := range adamSpecs() {
		for _, dt := range []dtype.DType{f32, f64} {
			for _, n := range []int{1, 1000, 4099} {
				cs = append(cs, Case{Name: fmt.Sprintf("AdamStep/%s/%s/%d", sp.name, short(dt), n), run: func(e *env) { adamCase(e, sp, dt, n) }})
			}
		}
	}
	sp := adamSpecs()[3]
	cs = append(cs, Case{Name: "AdamStep/" + sp.name + "/f32/large", Large: true, run: func(e *env) { adamCase(e, sp, f32, 1<<20+3) }})
	return cs
}

func adamCase(e *env, sp adamSpec, dt dtype.DType, n int) {
	h := sp.h
	h.BiasCorrection1 = 1 - math.Pow(h.Beta1, float64(sp.step))
	h.BiasCorrection2 = 1 - math.Pow(h.Beta2, float64(sp.step))
	shape := []int{n}
	state := func(g gen) gen {
		if sp.zeroState {
			return pick(0)
		}
		return g
	}
	p := e.inout("p", dt, shape, offset, unif(-1, 1))
	g := e.in("g", dt, shape, contig, mix(0.05, pick(0), unif(-1, 1)))
	m := e.inout("m", dt, shape, contig, state(unif(-0.5, 0.5)))
	v := e.inout("v", dt, shape, offset, state(unif(0, 1)))
	vmax := none
	if h.AMSGrad {
		vmax = e.inout("vmax", dt, shape, contig, state(unif(0, 1.5)))
	}
	e.note("hyper-parameters %+v (step %d)", h, sp.step)
	e.call(func(s side) error { return s.d.AdamStep(s.v(p), s.v(g), s.v(m), s.v(v), s.v(vmax), h) })
}

type sgdSpec struct {
	name string
	h    device.SGDHyper
}

var sgdSpecs = []sgdSpec{
	{"plain", device.SGDHyper{LR: 0.1}},
	{"plain/wd,maximize", device.SGDHyper{LR: 0.1, WeightDecay: 1e-4, Maximize: true}},
	{"momentum/first", device.SGDHyper{LR: 0.05, Momentum: 0.9, FirstStep: true}},
	{"momentum/dampening", device.SGDHyper{LR: 0.05, Momentum: 0.9, Dampening: 0.1}},
	{"nesterov/wd", device.SGDHyper{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-4}},
	{"nesterov/first,maximize", device.SGDHyper{LR: 0.05, Momentum: 0.8, Nesterov: true, FirstStep: true, Maximize: true}},
}

func sgdCases() []Case {
	var cs []Case
	for _, sp := range sgdSpecs {
		for _, dt := range []dtype.DType{f32, f64} {
			for _, n := range []int{1000, 4099} {
				cs = append(cs, Case{Name: fmt.Sprintf("SGDStep/%s/%s/%d", sp.name, short(dt), n), run: func(e *env) { sgdCase(e, sp, dt, n) }})
			}
		}
	}
	cs = append(cs, Case{Name: "SGDStep/" + sgdSpecs[4].name + "/f32/large", Large: true, run: func(e *env) { sgdCase(e, sgdSpecs[4], f32, 1<<20+3) }})
	return cs
}

func sgdCase(e *env, sp sgdSpec, dt dtype.DType, n int) {
	shape := []int{n}
	p := e.inout("p", dt, shape, offset, unif(-1, 1))
	g := e.in("g", dt, shape, contig, unif(-1, 1))
	buf := none
	switch {
	case sp.h.Momentum == 0:
	case sp.h.FirstStep: // the buffer is set, not read
		buf = e.out("buf", dt, shape, offset)
	default:
		buf = e.inout("buf", dt, shape, offset, unif(-0.5, 0.5))
	}
	e.note("hyper-parameters %+v", sp.h)
	e.call(func(s side) error { return s.d.SGDStep(s.v(p), s.v(g), s.v(buf), sp.h) })
}
