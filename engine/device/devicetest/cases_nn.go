package devicetest

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Softmax, LayerNorm, CrossEntropy and Attention, forward and backward.

// rounded returns vals as dt holds them.
func rounded(dt dtype.DType, vals []float64) []float64 {
	out := make([]float64, len(vals))
	b := make([]byte, dt.Size())
	for i, x := range vals {
		put(dt, b, 0, x)
		out[i] = getF(dt, b, 0)
	}
	return out
}

// softmaxRows is the (log-)softmax of each row of n elements, in float64.
func softmaxRows(x []float64, n int, log bool) []float64 {
	y := make([]float64, len(x))
	for r := 0; r*n < len(x); r++ {
		row := x[r*n : (r+1)*n]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for i, v := range row {
			if log {
				y[r*n+i] = v - m - math.Log(s)
			} else {
				y[r*n+i] = math.Exp(v-m) / s
			}
		}
	}
	return y
}

// stat is the type of LayerNorm's mean and rstd for inputs of dt.
func stat(dt dtype.DType) dtype.DType { return accType(dt) }

var softmaxShapes = [][]int{{1, 1}, {5, 1}, {7, 10}, {33, 257}, {4, 6, 1000}, longRows}

// longRows is the shape of the row kernels' cases with rows over 4096
// elements, which GPUs run in blocks of 1024 threads; the engine's kernels
// must fit their registers into that (see gpu/kernels' launch bounds).
var longRows = []int{2, 4099}

func softmaxName(op string, log bool, dt dtype.DType, shape []int, lname string) string {
	kind := "softmax"
	if log {
		kind = "log"
	}
	return fmt.Sprintf("%s/%s/%s/%s/%s", op, kind, short(dt), shapeName(shape), lname)
}

func softmaxCases() []Case {
	var cs []Case
	add := func(log bool, dt dtype.DType, shape []int, lname string, l layout, g gen, large bool) {
		cs = append(cs,
			Case{Name: softmaxName("Softmax", log, dt, shape, lname), Large: large, run: func(e *env) { softmaxCase(e, log, dt, shape, l, g) }},
			Case{Name: softmaxName("SoftmaxBackward", log, dt, shape, lname), Large: large, run: func(e *env) { softmaxBackwardCase(e, log, dt, shape, l) }})
	}
	for _, log := range []bool{false, true} {
		for _, shape := range softmaxShapes {
			add(log, f32, shape, "contig", contig, nil, false)
			add(log, f32, shape, "offset", offset, nil, false)
		}
		for _, dt := range []dtype.DType{f64, bf16, f16} {
			for _, shape := range softmaxShapes[2:5] {
				add(log, dt, shape, "offset", offset, nil, false)
			}
			// Rows over 4096 elements: blocks of 1024 threads, where a
			// kernel's registers must fit its launch bounds.
			add(log, dt, longRows, "contig", contig, nil, false)
		}
		for _, dt := range []dtype.DType{f32, bf16} {
			cs = append(cs,
				Case{Name: softmaxName("Softmax", log, dt, []int{7, 33}, "masked"), run: func(e *env) {
					softmaxCase(e, log, dt, []int{7, 33}, contig, mix(0.3, pick(math.Inf(-1)), unif(-8, 8)))
				}},
				Case{Name: softmaxName("Softmax", log, dt, []int{4, 9}, "specials"), run: func(e *env) {
					x := e.values(36, unif(-8, 8))
					x[2] = nan // a NaN row
					x[9+4] = inf
					for i := 18; i < 27; i++ { // a row of -inf only
						x[i] = math.Inf(-1)
					}
					x[27], x[30] = math.Inf(-1), math.Inf(-1)
					src := e.inVals("src", dt, []int{4, 9}, offset, x)
					dst := e.out("dst", dt, []int{4, 9}, contig)
					if !log {
						dst.relative(1e-3)
					}
					e.call(func(s side) error { return s.d.Softmax(s.v(dst), s.v(src), log) })
				}})
		}
		add(log, f32, []int{16, 65537}, "large", contig, nil, true)
		add(log, f32, []int{8192, 128}, "large", offset, nil, true)
		add(log, bf16, []int{16, 65537}, "large", contig, nil, true)
	}
	return cs
}

func softmaxCase(e *env, log bool, dt dtype.DType, shape []int, l layout, g gen) {
	if g == nil {
		g = unif(-8, 8)
	}
	src := e.in("src", dt, shape, l, g)
	dst := e.out("dst", dt, shape, l)
	if !log {
		dst.relative(1e-3)
	}
	e.call(func(s side) error { return s.d.Softmax(s.v(dst), s.v(src), log) })
}

func softmaxBackwardCase(e *env, log bool, dt dtype.DType, shape []int, l layout) {
	n := shape[len(shape)-1]
	y := softmaxRows(e.values(numel(shape), unif(-8, 8)), n, log)
	yv := e.inVals("y", dt, shape, l, y)
	dy := e.in("dy", dt, shape, contig, unif(-1, 1))
	dx := e.out("dx", dt, shape, l)
	if log {
		dx.sums(n, 0.1) // Σ dy, scaled by the probabilities
	}
	e.call(func(s side) error { return s.d.SoftmaxBackward(s.v(dx), s.v(dy), s.v(yv), log) })
}

// LayerNorm.

type lnAffine struct {
	name string
	w, b bool
}

var lnAffines = []lnAffine{{"w,b", true, true}, {"w", true, false}, {"b", false, true}, {"none", false, false}}

// lnGrads are the gradients LayerNormBackward is asked for, with the
// weight it is given.
type lnGrads struct {
	name      string
	w, dw, db bool
}

var lnGradSets = []lnGrads{{"w,dw,db", true, true, true}, {"w,dw", true, true, false}, {"w", true, false, false},
	{"db", false, false, true}, {"none", false, false, false}}

var lnShapes = [][]int{{1, 1}, {4, 1}, {7, 33}, {64, 768}, {3, 5, 257}}

func layerNormCases() []Case {
	var cs []Case
	fwd := func(dt dtype.DType, shape []int, a lnAffine, large bool) {
		cs = append(cs, Case{Name: fmt.Sprintf("LayerNorm/%s/%s/%s", short(dt), shapeName(shape), a.name), Large: large,
			run: func(e *env) { layerNormCase(e, dt, shape, a) }})
	}
	bwd := func(dt dtype.DType, shape []int, g lnGrads, large bool) {
		cs = append(cs, Case{Name: fmt.Sprintf("LayerNormBackward/%s/%s/%s", short(dt), shapeName(shape), g.name), Large: large,
			run: func(e *env) { layerNormBackwardCase(e, dt, shape, g) }})
	}
	for _, shape := range lnShapes {
		for _, a := range lnAffines {
			fwd(f32, shape, a, false)
		}
		if shape[len(shape)-1] == 1 {
			// The backward of a one-element row is 0 up to rounding noise
			// times rstd³ = eps^-1.5: each formula gives other noise.
			continue
		}
		for _, g := range lnGradSets {
			bwd(f32, shape, g, false)
		}
	}
	for _, dt := range []dtype.DType{f64, bf16, f16} {
		for _, shape := range [][]int{{7, 33}, {3, 5, 257}, longRows} {
			fwd(dt, shape, lnAffines[0], false)
			fwd(dt, shape, lnAffines[3], false)
			bwd(dt, shape, lnGradSets[0], false)
			bwd(dt, shape, lnGradSets[3], false)
		}
	}
	fwd(f32, []int{512, 2049}, lnAffines[0], true)
	fwd(bf16, []int{512, 2049}, lnAffines[0], true)
	bwd(f32, []int{512, 2049}, lnGradSets[0], true)
	bwd(bf16, []int{4096, 256}, lnGradSets[0], true)
	return cs
}

const lnEps = 1e-5

func layerNormCase(e *env, dt dtype.DType, shape []int, a lnAffine) {
	n := shape[len(shape)-1]
	rows := numel(shape) / n
	x := e.in("x", dt, shape, offset, unif(1, 5))
	w, b := none, none
	if a.w {
		w = e.in("w", dt, []int{n}, offset, unif(0.5, 1.5))
	}
	if a.b {
		b = e.in("b", dt, []int{n}, contig, unif(-0.5, 0.5))
	}
	dst := e.out("dst", dt, shape, contig)
	mean := e.out("mean", stat(dt), []int{rows}, offset)
	rstd := e.out("rstd", stat(dt), []int{rows}, contig)
	e.note("eps %v", lnEps)
	e.call(func(s side) error {
		return s.d.LayerNorm(s.v(dst), s.v(mean), s.v(rstd), s.v(x), s.v(w), s.v(b), lnEps)
	})
}

func layerNormBackwardCase(e *env, dt dtype.DType, shape []int, g lnGrads) {
	n := shape[len(shape)-1]
	rows := numel(shape) / n
	xs := rounded(dt, e.values(numel(shape), unif(1, 5)))
	mu, rs := make([]float64, rows), make([]float64, rows)
	for r := range rows {
		row := xs[r*n : (r+1)*n]
		s := 0.0
		for _, v := range row {
			s += v
		}
		mu[r] = s / float64(n)
		ss := 0.0
		for _, v := range row {
			ss += (v - mu[r]) * (v - mu[r])
		}
		rs[r] = 1 / math.Sqrt(ss/float64(n)+lnEps)
	}
	x := e.inVals("x", dt, shape, offset, xs)
	dy := e.in("dy", dt, shape, contig, unif(-1, 1))
	mean := e.inVals("mean", stat(dt), []int{rows}, contig, mu)
	rstd := e.inVals("rstd", stat(dt), []int{rows}, offset, rs)
	w, dw, db := none, none, none
	if g.w {
		w = e.in("w", dt, []int{n}, contig, unif(0.5, 1.5))
	}
	dx := e.out("dx", dt, shape, offset).sums(n, 0.1)
	if g.dw {
		dw = e.out("dw", dt, []int{n}, contig).sums(rows, 2)
	}
	if g.db {
		db = e.out("db", dt, []int{n}, offset).sums(rows, 1)
	}
	e.call(func(s side) error {
		return s.d.LayerNormBackward(s.v(dx), s.v(dw), s.v(db), s.v(dy), s.v(x), s.v(mean), s.v(rstd), s.v(w))
	})
}

// CrossEntropy.

type ceShape struct{ rows, classes int }

var ceOptions = []device.CrossEntropyOptions{{IgnoreIndex: -100}, {IgnoreIndex: -100, LabelSmoothing: 0.1}, {IgnoreIndex: 0}, {IgnoreIndex: 0, LabelSmoothing: 0.1}}

func ceName(op string, dt dtype.DType, sh ceShape, o device.CrossEntropyOptions, lname string) string {
	return fmt.Sprintf("%s/%s/%dx%d/ignore=%d,smoothing=%s/%s", op, short(dt), sh.rows, sh.classes, o.IgnoreIndex, fmtValue(o.LabelSmoothing), lname)
}

func crossEntropyCases() []Case {
	var cs []Case
	add := func(dt dtype.DType, sh ceShape, o device.CrossEntropyOptions, lname string, large bool) {
		cs = append(cs,
			Case{Name: ceName("CrossEntropy", dt, sh, o, lname), Large: large, run: func(e *env) { crossEntropyCase(e, dt, sh, o, lname, false) }},
			Case{Name: ceName("CrossEntropyBackward", dt, sh, o, lname), Large: large, run: func(e *env) { crossEntropyBackwardCase(e, dt, sh, o, lname) }})
	}
	for _, sh := range []ceShape{{1, 1}, {5, 3}, {7, 10}, {64, 1000}} {
		for _, o := range ceOptions {
			add(f32, sh, o, "contig", false)
		}
		add(f32, sh, ceOptions[1], "strided", false)
	}
	for _, dt := range []dtype.DType{f64, bf16, f16} {
		for _, sh := range []ceShape{{7, 10}, {64, 1000}} {
			add(dt, sh, ceOptions[0], "contig", false)
			add(dt, sh, ceOptions[3], "strided", false)
		}
	}
	// GPT-2's vocabulary: rows of 50257 classes, blocks of 1024 threads.
	for _, dt := range []dtype.DType{f32, f64, bf16, f16} {
		add(dt, ceShape{3, 50257}, ceOptions[1], "contig", false)
	}
	add(f32, ceShape{64, 1000}, ceOptions[0], "bcast", false)
	add(bf16, ceShape{7, 10}, ceOptions[1], "bcast", false)
	for _, dt := range []dtype.DType{f32, bf16} {
		cs = append(cs, Case{Name: ceName("CrossEntropy", dt, ceShape{9, 33}, ceOptions[0], "masked"), run: func(e *env) {
			crossEntropyCase(e, dt, ceShape{9, 33}, ceOptions[0], "contig", true)
		}})
	}
	add(f32, ceShape{33, 50257}, ceOptions[1], "large", true)
	add(bf16, ceShape{4096, 256}, ceOptions[0], "large", true)
	return cs
}

// ceTargets draws targets in [0, classes) with about one row in five
// ignored.
func (e *env) ceTargets(rows, classes int, o device.CrossEntropyOptions) []float64 {
	t := make([]float64, rows)
	for i := range t {
		t[i] = float64(e.r.IntN(classes))
		if e.r.IntN(5) == 0 || (i == 0 && rows > 2) {
			t[i] = float64(o.IgnoreIndex)
		}
	}
	return t
}

func ceLayouts(lname string) (rowLayout, logitLayout layout) {
	if lname == "strided" || lname == "bcast" {
		return strided, offset
	}
	return contig, contig
}

func crossEntropyCase(e *env, dt dtype.DType, sh ceShape, o device.CrossEntropyOptions, lname string, masked bool) {
	rl, ll := ceLayouts(lname)
	tv := e.ceTargets(sh.rows, sh.classes, o)
	x := e.values(sh.rows*sh.classes, unif(-4, 4))
	if masked {
		for r := range sh.rows {
			for c := range sh.classes {
				if float64(c) != tv[r] && e.r.IntN(3) == 0 {
					x[r*sh.classes+c] = math.Inf(-1)
				}
			}
		}
	}
	logits := e.inVals("logits", dt, []int{sh.rows, sh.classes}, ll, x)
	target := e.inVals("target", i64, []int{sh.rows}, rl, tv)
	loss := e.out("loss", dt, []int{sh.rows}, rl)
	e.note("options %+v", o)
	var count [2]int
	if e.call(func(s side) error {
		n, err := s.d.CrossEntropy(s.v(loss), s.v(logits), s.v(target), o)
		count[s.i] = n
		return err
	}) && count[0] != count[1] {
		e.failf("CrossEntropy counted %d rows, the reference %d", count[1], count[0])
	}
}

func crossEntropyBackwardCase(e *env, dt dtype.DType, sh ceShape, o device.CrossEntropyOptions, lname string) {
	rl, ll := ceLayouts(lname)
	if lname == "bcast" {
		rl = scalarBcast
	}
	logits := e.in("logits", dt, []int{sh.rows, sh.classes}, ll, unif(-4, 4))
	target := e.inVals("target", i64, []int{sh.rows}, offset, e.ceTargets(sh.rows, sh.classes, o))
	dloss := e.in("dloss", dt, []int{sh.rows}, rl, unif(-2, 2))
	dlogits := e.out("dlogits", dt, []int{sh.rows, sh.classes}, ll)
	e.note("options %+v", o)
	e.call(func(s side) error {
		return s.d.CrossEntropyBackward(s.v(dlogits), s.v(dloss), s.v(logits), s.v(target), o)
	})
}

// Attention.

type attnSpec struct {
	dt         dtype.DType
	b, h, t, d int
	tk         int // keys, when not t
	causal     bool
	packed     bool // q, k, v (and their gradients) interleaved in one [B, T, 3, H, D] buffer
	large      bool
}

// keys is the number of keys (and values).
func (a attnSpec) keys() int {
	if a.tk == 0 {
		return a.t
	}
	return a.tk
}

func (a attnSpec) name(op string) string {
	mask, lay := "full", "contig"
	if a.causal {
		mask = "causal"
	}
	if a.packed {
		lay = "packed"
	}
	dims := fmt.Sprintf("%dx%dx%dx%d", a.b, a.h, a.t, a.d)
	if a.tk != 0 {
		dims = fmt.Sprintf("%dx%dx%dx%d,keys=%d", a.b, a.h, a.t, a.d, a.tk)
	}
	s := fmt.Sprintf("%s/%s/%s/%s/%s", op, short(a.dt), dims, mask, lay)
	if a.large {
		s += "/large"
	}
	return s
}

func attentionCases() []Case {
	var specs []attnSpec
	for _, c := range [][4]int{{1, 1, 1, 1}, {2, 3, 17, 8}, {1, 4, 64, 32}, {2, 2, 129, 64}} {
		for _, causal := range []bool{false, true} {
			for _, packed := range []bool{false, true} {
				specs = append(specs, attnSpec{dt: f32, b: c[0], h: c[1], t: c[2], d: c[3], causal: causal, packed: packed})
			}
		}
	}
	for _, causal := range []bool{false, true} {
		specs = append(specs, attnSpec{dt: f64, b: 2, h: 3, t: 17, d: 8, causal: causal})
		for _, dt := range []dtype.DType{bf16, f16} {
			specs = append(specs, attnSpec{dt: dt, b: 2, h: 3, t: 17, d: 8, causal: causal, packed: true},
				attnSpec{dt: dt, b: 1, h: 4, t: 64, d: 32, causal: causal})
		}
	}
	// Fewer queries than keys (the causal mask is aligned top-left, as
	// PyTorch's: query i sees keys j ≤ i).
	specs = append(specs, attnSpec{dt: f32, b: 2, h: 3, t: 5, d: 16, tk: 17}, attnSpec{dt: f32, b: 1, h: 2, t: 7, d: 8, tk: 19, causal: true},
		attnSpec{dt: bf16, b: 1, h: 2, t: 7, d: 8, tk: 19, causal: true})
	// Rows of over 4096 keys: the softmax kernels' blocks of 1024 threads.
	for _, dt := range []dtype.DType{f32, f64, bf16, f16} {
		specs = append(specs, attnSpec{dt: dt, b: 1, h: 2, t: 3, d: 8, tk: 4099})
	}
	specs = append(specs, attnSpec{dt: f32, b: 2, h: 8, t: 256, d: 64, causal: true, packed: true, large: true},
		attnSpec{dt: bf16, b: 2, h: 8, t: 256, d: 64, causal: true, large: true})
	var cs []Case
	for _, a := range specs {
		cs = append(cs,
			Case{Name: a.name("Attention"), Large: a.large, run: func(e *env) { attentionCase(e, a) }},
			Case{Name: a.name("AttentionBackward"), Large: a.large, run: func(e *env) { attentionBackwardCase(e, a) }})
	}
	return cs
}

// qkvViews makes q ([B, H, T, D]), k and v ([B, H, Tk, D]) with values from
// vals (each in row-major order): three tensors, or one packed [B, T, 3, H,
// D] buffer.
func (e *env) qkvViews(a attnSpec, names [3]string, r role, vals [3][]float64) [3]view {
	shapes := [3][]int{{a.b, a.h, a.t, a.d}, {a.b, a.h, a.keys(), a.d}, {a.b, a.h, a.keys(), a.d}}
	var out [3]view
	if !a.packed {
		for i := range out {
			if r == output {
				out[i] = e.out(names[i], a.dt, shapes[i], contig)
			} else {
				out[i] = e.inVals(names[i], a.dt, shapes[i], contig, vals[i])
			}
		}
		return out
	}
	packedName := "qkv"
	if r == output {
		packedName = "dqkv"
	}
	hd := a.h * a.d
	n := a.b*a.t*3*hd + guard
	var init []byte
	if r == output {
		init = poison(a.dt, n)
	} else {
		init = e.fill(a.dt, n, defGen(a.dt))
	}
	st := []int{a.t * 3 * hd, a.d, 3 * hd, 1}
	for i := range out {
		if r != output {
			forEach(shapes[i], st, i*hd, func(j, o int) { put(a.dt, init, o, vals[i][j]) })
		}
	}
	t := e.alloc(packedName, a.dt, n, r, init)
	for i := range out {
		out[i] = t.view(names[i], i*hd, shapes[i], st)
	}
	return out
}

// attnOutLayout is [B, H, T, D] contiguous, or as a [B, T, H, D] buffer
// when packed (the layout the tensor layer gives the output).
func attnOutLayout(a attnSpec) layout {
	if !a.packed {
		return contig
	}
	return layout{"bthd", func(shape []int) (int, []int) {
		h, t, d := shape[1], shape[2], shape[3]
		return 1, []int{t * h * d, d, h * d, 1}
	}}
}

// attnProbs is softmax(scale·q·kᵀ) with the causal mask, in float64.
func attnProbs(a attnSpec, q, k []float64, scale float64) []float64 {
	tq, tk, d := a.t, a.keys(), a.d
	p := make([]float64, a.b*a.h*tq*tk)
	for hd := 0; hd < a.b*a.h; hd++ {
		for i := range tq {
			row := p[(hd*tq+i)*tk : (hd*tq+i+1)*tk]
			l := tk
			if a.causal {
				l = min(i+1, tk)
			}
			m := math.Inf(-1)
			for j := range l {
				s := 0.0
				for c := range d {
					s += q[(hd*tq+i)*d+c] * k[(hd*tk+j)*d+c]
				}
				row[j] = s * scale
				m = math.Max(m, row[j])
			}
			sum := 0.0
			for j := range l {
				row[j] = math.Exp(row[j] - m)
				sum += row[j]
			}
			for j := range l {
				row[j] /= sum
			}
		}
	}
	return p
}

func attentionCase(e *env, a attnSpec) {
	var vals [3][]float64
	for i, n := range []int{a.t, a.keys(), a.keys()} {
		vals[i] = e.values(a.b*a.h*n*a.d, unif(-1, 1))
	}
	qkv := e.qkvViews(a, [3]string{"q", "k", "v"}, input, vals)
	out := e.out("out", a.dt, []int{a.b, a.h, a.t, a.d}, attnOutLayout(a)).sums(a.keys(), 1)
	probs := e.out("probs", a.dt, []int{a.b, a.h, a.t, a.keys()}, offset).sums(a.d, 1)
	scale := 1 / math.Sqrt(float64(a.d))
	e.note("scale %v, causal %v", scale, a.causal)
	e.call(func(s side) error {
		return s.d.Attention(s.v(out), s.v(probs), s.v(qkv[0]), s.v(qkv[1]), s.v(qkv[2]), scale, a.causal)
	})
}

func attentionBackwardCase(e *env, a attnSpec) {
	var vals [3][]float64
	for i, n := range []int{a.t, a.keys(), a.keys()} {
		vals[i] = rounded(a.dt, e.values(a.b*a.h*n*a.d, unif(-1, 1)))
	}
	scale := 1 / math.Sqrt(float64(a.d))
	qkv := e.qkvViews(a, [3]string{"q", "k", "v"}, input, vals)
	probs := e.inVals("probs", a.dt, []int{a.b, a.h, a.t, a.keys()}, offset, attnProbs(a, vals[0], vals[1], scale))
	dout := e.in("dout", a.dt, []int{a.b, a.h, a.t, a.d}, attnOutLayout(a), unif(-1, 1))
	grads := e.qkvViews(a, [3]string{"dq", "dk", "dv"}, output, vals)
	for _, g := range grads {
		g.sums(max(a.t, a.keys()), 1)
	}
	e.note("scale %v (the probabilities carry the mask: causal %v)", scale, a.causal)
	e.call(func(s side) error {
		return s.d.AttentionBackward(s.v(grads[0]), s.v(grads[1]), s.v(grads[2]), s.v(dout),
			s.v(qkv[0]), s.v(qkv[1]), s.v(qkv[2]), s.v(probs), scale)
	})
}
