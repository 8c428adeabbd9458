package devicetest

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Gemm.

type gemmSpec struct {
	dt               dtype.DType
	batch, m, n, k   int
	ta, tb           bool
	padA, padB, padC int
	bcastA, bcastB   bool
	alpha, beta      float64
	large            bool
}

func (g gemmSpec) name() string {
	tr := func(t bool) string {
		if t {
			return "t"
		}
		return "n"
	}
	s := fmt.Sprintf("Gemm/%s/%s%s/%dx%dx%d", short(g.dt), tr(g.ta), tr(g.tb), g.m, g.n, g.k)
	if g.batch != 1 {
		s += fmt.Sprintf("/batch=%d", g.batch)
	}
	if g.padA+g.padB+g.padC > 0 {
		s += "/ld"
	}
	if g.bcastA {
		s += "/bcastA"
	}
	if g.bcastB {
		s += "/bcastB"
	}
	if g.alpha != 1 || g.beta != 0 {
		s += fmt.Sprintf("/alpha=%s,beta=%s", fmtValue(g.alpha), fmtValue(g.beta))
	}
	if g.large {
		s += "/large"
	}
	return s
}

var transposes = [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}}

func gemmCases() []Case {
	var specs []gemmSpec
	base := func(dt dtype.DType, m, n, k int, tr [2]bool) gemmSpec {
		return gemmSpec{dt: dt, batch: 1, m: m, n: n, k: k, ta: tr[0], tb: tr[1], alpha: 1}
	}
	for _, d := range [][3]int{{1, 1, 1}, {7, 5, 3}, {33, 65, 129}, {64, 64, 64}, {127, 33, 257}} {
		for _, tr := range transposes {
			g := base(f32, d[0], d[1], d[2], tr)
			specs = append(specs, g)
			g.padA, g.padB, g.padC = 3, 5, 2
			specs = append(specs, g)
		}
	}
	for _, tr := range transposes {
		g := base(f32, 17, 19, 23, tr)
		g.batch, g.padA, g.padC = 3, 1, 4
		specs = append(specs, g)
	}
	for _, tr := range transposes[1:3] {
		g := base(f32, 17, 19, 23, tr)
		g.batch, g.bcastA = 4, true
		specs = append(specs, g)
		g.batch, g.bcastA, g.bcastB = 2, false, true
		specs = append(specs, g)
	}
	for _, ab := range [][2]float64{{0.5, 0}, {1, 1}, {-2, 0.25}} {
		for _, tr := range transposes[1:3] {
			g := base(f32, 33, 65, 129, tr)
			g.padA, g.padC, g.alpha, g.beta = 2, 3, ab[0], ab[1]
			specs = append(specs, g)
		}
	}
	for _, beta := range []float64{0, 0.5} {
		g := base(f32, 5, 7, 0, transposes[0])
		g.beta = beta
		specs = append(specs, g)
	}
	specs = append(specs, base(f32, 0, 5, 3, transposes[0]), base(f32, 5, 0, 3, transposes[1]))
	for _, tr := range transposes {
		specs = append(specs, base(f64, 33, 65, 129, tr))
	}
	{
		g := base(f64, 17, 19, 23, transposes[1])
		g.batch, g.alpha, g.beta, g.padB = 3, -2, 0.25, 2
		specs = append(specs, g)
	}
	for _, dt := range []dtype.DType{bf16, f16} {
		for _, tr := range transposes {
			g := base(dt, 33, 65, 129, tr)
			g.padA, g.padB, g.padC = 3, 5, 2
			specs = append(specs, g)
		}
		specs = append(specs, base(dt, 64, 64, 64, transposes[0]))
		g := base(dt, 17, 19, 23, transposes[2])
		g.batch, g.bcastA = 3, true
		specs = append(specs, g)
		g = base(dt, 33, 65, 129, transposes[1])
		g.batch, g.alpha, g.beta = 2, -2, 0.25
		specs = append(specs, g)
	}
	for _, g := range []gemmSpec{base(f32, 1024, 1025, 72, transposes[0]), base(bf16, 1024, 1024, 64, transposes[2]), base(f32, 128, 128, 128, transposes[1])} {
		g.large = true
		if g.m == 128 {
			g.batch, g.bcastB = 64, true
		}
		specs = append(specs, g)
	}
	cs := make([]Case, len(specs))
	for i, g := range specs {
		cs[i] = Case{Name: g.name(), Large: g.large, run: func(e *env) { gemmCase(e, g) }}
	}
	return cs
}

// gemmOperand makes the buffer of a batch of rows×cols matrices, stored
// transposed when trans, with rows ld = stored columns + pad apart, batches
// a gap apart (or 0 apart: broadcast).
func (e *env) gemmOperand(name string, dt dtype.DType, r role, batch, rows, cols int, trans bool, pad int, bc bool, g gen) gemmOp {
	sr, sc := rows, cols
	if trans {
		sr, sc = cols, rows
	}
	ld := max(sc, 1) + pad
	bs := sr*ld + 5
	if bc {
		bs = 0
	}
	const off = 3
	n := off + guard
	if sr > 0 && sc > 0 && batch > 0 {
		n = off + (batch-1)*bs + (sr-1)*ld + sc + guard
	}
	var init []byte
	if r == output {
		init = poison(dt, n)
	} else {
		init = e.fill(dt, n, g)
	}
	t := e.alloc(name, dt, n, r, init)
	t.view(fmt.Sprintf("%s (trans=%v, ld=%d, batch stride=%d)", name, trans, ld, bs), off, []int{batch, sr, sc}, []int{bs, ld, 1})
	return gemmOp{t: t, off: off, ld: ld, bs: bs, trans: trans}
}

func gemmCase(e *env, g gemmSpec) {
	a := e.gemmOperand("a", g.dt, input, g.batch, g.m, g.k, g.ta, g.padA, g.bcastA, unif(-1, 1))
	b := e.gemmOperand("b", g.dt, input, g.batch, g.k, g.n, g.tb, g.padB, g.bcastB, unif(-1, 1))
	r := output
	if g.beta != 0 {
		r = inout
	}
	c := e.gemmOperand("c", g.dt, r, g.batch, g.m, g.n, false, g.padC, false, unif(-1, 1))
	c.t.terms, c.t.scale = g.k, math.Abs(g.alpha)
	e.note("batch %d, m %d, n %d, k %d, alpha %v, beta %v", g.batch, g.m, g.n, g.k, g.alpha, g.beta)
	e.call(func(s side) error { return s.d.Gemm(s.g(c), s.g(a), s.g(b), g.batch, g.m, g.n, g.k, g.alpha, g.beta) })
}
