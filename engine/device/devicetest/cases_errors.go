package devicetest

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The cases where the reference returns an error, which the device under
// test must return too (from the op or from the Sync after it). They run
// last: a device may be less usable after an error.

func unsupportedCases() []Case {
	var cs []Case
	add := func(name string, run func(e *env)) { cs = append(cs, Case{Name: "Unsupported/" + name, run: run}) }
	shape := []int{5, 7}
	for _, u := range []struct {
		op device.UnaryOp
		dt dtype.DType
		s  float64
		n  string
	}{
		{device.Exp, i64, 0, ""}, {device.Sqrt, i64, 0, ""}, {device.PowScalar, i64, 2, ""}, {device.RDivScalar, i64, 2, ""},
		{device.AddScalar, i64, 0.5, "/fraction"}, {device.Neg, i32, 0, ""}, {device.Neg, u8, 0, ""}, {device.Abs, boolean, 0, ""},
	} {
		add(fmt.Sprintf("Unary/%v/%s%s", u.op, short(u.dt), u.n), func(e *env) {
			src, dst := e.in("src", u.dt, shape, contig, nil), e.out("dst", u.dt, shape, contig)
			e.expectError(func(s side) error { return s.d.Unary(u.op, s.v(dst), s.v(src), u.s) })
		})
	}
	for _, dt := range []dtype.DType{i64, i32} {
		add("ActivationBackward/relu/"+short(dt), func(e *env) {
			dy, x, dx := e.in("dy", dt, shape, contig, nil), e.in("x", dt, shape, contig, nil), e.out("dx", dt, shape, contig)
			e.expectError(func(s side) error { return s.d.ActivationBackward(device.ReluBackward, s.v(dx), s.v(dy), s.v(x)) })
		})
	}
	for _, b := range []struct {
		op device.BinaryOp
		dt dtype.DType
	}{{device.Div, i64}, {device.Pow, i64}, {device.Add, i32}, {device.Mul, u8}, {device.Add, boolean}} {
		add(fmt.Sprintf("Binary/%v/%s", b.op, short(b.dt)), func(e *env) {
			a, c, dst := e.in("a", b.dt, shape, contig, nil), e.in("b", b.dt, shape, contig, nil), e.out("dst", b.dt, shape, contig)
			e.expectError(func(s side) error { return s.d.Binary(b.op, s.v(dst), s.v(a), s.v(c)) })
		})
	}
	for _, r := range []struct {
		op device.ReduceOp
		dt dtype.DType
	}{{device.Sum, i32}, {device.Max, u8}, {device.Sum, boolean}} {
		add(fmt.Sprintf("Reduce/%s/%s", []string{"sum", "max", "min"}[r.op], short(r.dt)), func(e *env) {
			src, dst := e.in("src", r.dt, shape, contig, nil), e.out("dst", r.dt, []int{1, 7}, contig)
			e.expectError(func(s side) error { return s.d.Reduce(r.op, s.v(dst), s.v(src)) })
		})
	}
	for _, op := range []device.ReduceOp{device.Max, device.Min} {
		add(fmt.Sprintf("Reduce/%s/f32/empty", []string{"sum", "max", "min"}[op]), func(e *env) {
			src, dst := e.in("src", f32, []int{0, 5}, contig, nil), e.out("dst", f32, []int{1, 5}, contig)
			e.expectError(func(s side) error { return s.d.Reduce(op, s.v(dst), s.v(src)) })
		})
	}
	add("ArgMax/i32", func(e *env) {
		src := e.in("src", i32, shape, contig, nil)
		vals, idx := e.out("values", i32, []int{5, 1}, contig), e.out("indices", i64, []int{5, 1}, contig)
		e.expectError(func(s side) error { return s.d.ArgMax(s.v(vals), s.v(idx), s.v(src), 1) })
	})
	add("ArgMax/f32/empty-axis", func(e *env) {
		src := e.in("src", f32, []int{3, 0}, contig, nil)
		vals, idx := e.out("values", f32, []int{3, 1}, contig), e.out("indices", i64, []int{3, 1}, contig)
		e.expectError(func(s side) error { return s.d.ArgMax(s.v(vals), s.v(idx), s.v(src), 1) })
	})
	for _, dt := range []dtype.DType{i64, i32} {
		add("Gemm/"+short(dt), func(e *env) {
			a := e.gemmOperand("a", dt, input, 1, 4, 3, false, 0, false, defGen(dt))
			b := e.gemmOperand("b", dt, input, 1, 3, 5, false, 0, false, defGen(dt))
			c := e.gemmOperand("c", dt, output, 1, 4, 5, false, 0, false, nil)
			e.expectError(func(s side) error { return s.d.Gemm(s.g(c), s.g(a), s.g(b), 1, 4, 5, 3, 1, 0) })
		})
		add("Softmax/"+short(dt), func(e *env) {
			src, dst := e.in("src", dt, shape, contig, nil), e.out("dst", dt, shape, contig)
			e.expectError(func(s side) error { return s.d.Softmax(s.v(dst), s.v(src), false) })
		})
	}
	for _, dt := range []dtype.DType{i32, u8, boolean} {
		add("IndexAdd/"+short(dt), func(e *env) {
			dst, src := e.inout("dst", dt, []int{6, 4}, contig, nil), e.in("src", dt, []int{3, 4}, contig, nil)
			idx := e.inVals("index", i64, []int{3}, contig, []float64{0, 5, 0})
			e.expectError(func(s side) error { return s.d.IndexAdd(s.v(dst), s.v(src), s.v(idx), 0) })
		})
		add("ScatterAdd/"+short(dt), func(e *env) {
			dst, src := e.inout("dst", dt, []int{6, 4}, contig, nil), e.in("src", dt, []int{3, 4}, contig, nil)
			idx := e.inVals("index", i64, []int{3, 4}, contig, e.indexValues(12, 6))
			e.expectError(func(s side) error { return s.d.ScatterAdd(s.v(dst), s.v(src), s.v(idx), 0) })
		})
	}
	for _, dt := range []dtype.DType{bf16, f16} {
		add("AdamStep/"+short(dt), func(e *env) {
			p, g := e.inout("p", dt, []int{100}, contig, nil), e.in("g", dt, []int{100}, contig, nil)
			m, v := e.inout("m", dt, []int{100}, contig, nil), e.inout("v", dt, []int{100}, contig, unif(0, 1))
			h := device.AdamHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, BiasCorrection1: 0.1, BiasCorrection2: 0.001}
			e.expectError(func(s side) error { return s.d.AdamStep(s.v(p), s.v(g), s.v(m), s.v(v), device.View{}, h) })
		})
		add("SGDStep/"+short(dt), func(e *env) {
			p, g := e.inout("p", dt, []int{100}, contig, nil), e.in("g", dt, []int{100}, contig, nil)
			e.expectError(func(s side) error { return s.d.SGDStep(s.v(p), s.v(g), device.View{}, device.SGDHyper{LR: 0.1}) })
		})
	}
	add("Upload/size", func(e *env) {
		t := e.alloc("buf", f32, 10, output, poison(f32, 10))
		v := t.view("buf", 0, []int{10}, []int{1})
		e.expectError(func(s side) error { return s.d.Upload(s.v(v), make([]byte, 36)) })
	})
	add("Download/size", func(e *env) {
		t := e.alloc("buf", f32, 10, input, e.fill(f32, 10, defGen(f32)))
		v := t.view("buf", 0, []int{10}, []int{1})
		e.expectError(func(s side) error { return s.d.Download(make([]byte, 44), s.v(v)) })
	})
	return cs
}

// indexErrorCases put one index out of range, at a random position.
func indexErrorCases() []Case {
	var cs []Case
	add := func(name string, run func(e *env)) { cs = append(cs, Case{Name: "IndexError/" + name, run: run}) }
	bad := func(e *env, n, extent int, neg bool) []float64 {
		v := e.indexValues(n, extent)
		i := e.r.IntN(n)
		v[i] = float64(extent)
		if neg {
			v[i] = -1
		}
		e.note("index %d at position %d is out of range for an extent of %d", int(v[i]), i, extent)
		return v
	}
	for _, neg := range []bool{false, true} {
		which := "high"
		if neg {
			which = "negative"
		}
		add("IndexSelect/f32/"+which, func(e *env) {
			src := e.in("src", f32, []int{50, 33}, contig, nil)
			idx := e.inVals("index", i64, []int{20}, contig, bad(e, 20, 50, neg))
			dst := e.out("dst", f32, []int{20, 33}, contig)
			e.expectError(func(s side) error { return s.d.IndexSelect(s.v(dst), s.v(src), s.v(idx), 0) })
		})
		add("IndexAdd/f32/"+which, func(e *env) {
			dst := e.inout("dst", f32, []int{8, 40}, contig, nil)
			src := e.in("src", f32, []int{8, 12}, contig, nil)
			idx := e.inVals("index", i64, []int{12}, contig, bad(e, 12, 40, neg))
			e.expectError(func(s side) error { return s.d.IndexAdd(s.v(dst), s.v(src), s.v(idx), 1) })
		})
		add("Gather/f32/"+which, func(e *env) {
			src := e.in("src", f32, []int{6, 9, 7}, contig, nil)
			idx := e.inVals("index", i64, []int{6, 5, 7}, contig, bad(e, 210, 9, neg))
			dst := e.out("dst", f32, []int{6, 5, 7}, contig)
			e.expectError(func(s side) error { return s.d.Gather(s.v(dst), s.v(src), s.v(idx), 1) })
		})
		add("ScatterAdd/f32/"+which, func(e *env) {
			dst := e.inout("dst", f32, []int{6, 9, 7}, contig, nil)
			src := e.in("src", f32, []int{6, 5, 7}, contig, nil)
			idx := e.inVals("index", i64, []int{6, 5, 7}, transposed, bad(e, 210, 9, neg))
			e.expectError(func(s side) error { return s.d.ScatterAdd(s.v(dst), s.v(src), s.v(idx), 1) })
		})
		add("CrossEntropy/f32/"+which, func(e *env) {
			o := device.CrossEntropyOptions{IgnoreIndex: -100}
			logits := e.in("logits", f32, []int{7, 10}, contig, nil)
			target := e.inVals("target", i64, []int{7}, contig, bad(e, 7, 10, neg))
			loss := e.out("loss", f32, []int{7}, contig)
			e.expectError(func(s side) error {
				_, err := s.d.CrossEntropy(s.v(loss), s.v(logits), s.v(target), o)
				return err
			})
		})
		add("CrossEntropyBackward/f32/"+which, func(e *env) {
			o := device.CrossEntropyOptions{IgnoreIndex: -100}
			logits := e.in("logits", f32, []int{7, 10}, contig, nil)
			target := e.inVals("target", i64, []int{7}, contig, bad(e, 7, 10, neg))
			dloss := e.in("dloss", f32, []int{7}, contig, nil)
			dlogits := e.out("dlogits", f32, []int{7, 10}, contig)
			e.expectError(func(s side) error {
				return s.d.CrossEntropyBackward(s.v(dlogits), s.v(dloss), s.v(logits), s.v(target), o)
			})
		})
	}
	return cs
}
