package devicetest

import (
	"fmt"
	"math"
	"strings"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Memory: Alloc, Free, MemStats, Upload and Download.

func memoryCases() []Case {
	cs := []Case{{Name: "Memory/alloc", run: memAlloc}}
	for _, dt := range dtype.All {
		cs = append(cs,
			Case{Name: "Memory/upload/" + short(dt), run: func(e *env) { memUpload(e, dt) }},
			Case{Name: "Memory/download/" + short(dt), run: func(e *env) { memDownload(e, dt, 200) }})
	}
	cs = append(cs, Case{Name: "Memory/download/f32/large", Large: true, run: func(e *env) { memDownload(e, f32, 1<<21) }})
	return cs
}

// memAlloc checks the allocator's bookkeeping on dut alone.
func memAlloc(e *env) {
	d := e.dut
	stats := func() device.MemStats {
		var s device.MemStats
		if err := protect(func() error { s = d.MemStats(); return nil }); err != nil {
			e.fatalf("MemStats: %v", err)
		}
		return s
	}
	for _, dt := range dtype.All {
		for _, n := range []int{0, 1, 1000, 4097} {
			before := stats()
			var b device.Buffer
			err := protect(func() (err error) { b, err = d.Alloc(dt, n); return err })
			if err != nil || b == nil {
				e.failf("Alloc(%v, %d) = %v, %v", dt, n, b, err)
				continue
			}
			if b.Bytes() < n*dt.Size() {
				e.failf("Alloc(%v, %d): Bytes() = %d, want at least %d", dt, n, b.Bytes(), n*dt.Size())
			}
			mid := stats()
			if mid.LiveBuffers != before.LiveBuffers+1 {
				e.failf("Alloc(%v, %d): LiveBuffers went from %d to %d", dt, n, before.LiveBuffers, mid.LiveBuffers)
			}
			if got := mid.LiveBytes - before.LiveBytes; got != int64(b.Bytes()) {
				e.failf("Alloc(%v, %d): LiveBytes grew by %d, the buffer has %d bytes", dt, n, got, b.Bytes())
			}
			if mid.PeakBytes < mid.LiveBytes || mid.PeakBytes < before.PeakBytes {
				e.failf("Alloc(%v, %d): PeakBytes %d (before %d) below LiveBytes %d", dt, n, mid.PeakBytes, before.PeakBytes, mid.LiveBytes)
			}
			if got := (mid.Allocs + mid.Reuses) - (before.Allocs + before.Reuses); got != 1 {
				e.failf("Alloc(%v, %d): Allocs+Reuses grew by %d, want 1", dt, n, got)
			}
			if err := protect(func() error { d.Free(b); return nil }); err != nil {
				e.failf("Free: %v", err)
				continue
			}
			after := stats()
			if after.LiveBuffers != before.LiveBuffers || after.LiveBytes != before.LiveBytes {
				e.failf("Free after Alloc(%v, %d): live %d buffers / %d bytes, %d / %d before the Alloc",
					dt, n, after.LiveBuffers, after.LiveBytes, before.LiveBuffers, before.LiveBytes)
			}
			if after.PeakBytes < mid.PeakBytes {
				e.failf("Free: PeakBytes went down from %d to %d", mid.PeakBytes, after.PeakBytes)
			}
		}
	}
	for _, bad := range []struct {
		dt dtype.DType
		n  int
	}{{f32, -1}, {dtype.Invalid, 4}} {
		var b device.Buffer
		err := protect(func() (err error) { b, err = d.Alloc(bad.dt, bad.n); return err })
		if err == nil {
			e.failf("Alloc(%v, %d) succeeded", bad.dt, bad.n)
			if b != nil {
				protect(func() error { d.Free(b); return nil })
			}
		}
	}
	if err := protect(d.Sync); err != nil {
		e.failf("Sync with nothing queued: %v", err)
	}
	if d.String() == "" {
		e.failf("String() is empty")
	}
}

// memUpload uploads into sub-views of a poisoned buffer, which must keep
// its other bytes.
func memUpload(e *env, dt dtype.DType) {
	const n = 100
	t := e.alloc("buf", dt, n, output, poison(dt, n))
	t.exact = true
	parts := []struct {
		v    view
		data []byte
	}{
		{t.view("a", 5, []int{37}, []int{1}), e.fill(dt, 37, defGen(dt))},
		{t.view("b", 50, []int{2, 3, 4}, []int{12, 4, 1}), e.fill(dt, 24, defGen(dt))},
		{t.view("c", 90, []int{}, []int{}), e.fill(dt, 1, defGen(dt))},
		{t.view("d", 95, []int{3, 1}, []int{1, 7}), e.fill(dt, 3, defGen(dt))}, // contiguous: extent-1 axes do not count
	}
	if !e.call(func(s side) error {
		for _, p := range parts {
			if err := s.d.Upload(s.v(p.v), p.data); err != nil {
				return err
			}
		}
		return nil
	}) {
		return
	}
	want := poison(dt, n)
	sz := dt.Size()
	for _, p := range parts {
		copy(want[p.v.off*sz:], p.data)
	}
	got, err := e.read(1, t)
	if err != nil {
		e.fatalf("dut: Download: %v", err)
	}
	e.report(t, "buf after the uploads", want, got, rule{exact: true}, "want")
}

// memDownload downloads strided views of an input and compares them with
// the bytes gathered on the host.
func memDownload(e *env, dt dtype.DType, n int) {
	t := e.alloc("buf", dt, n, input, e.fill(dt, n, defGen(dt)))
	vs := []view{
		t.view("transposed", 3, []int{4, 6}, []int{1, 4}),
		t.view("stride2", 1, []int{10}, []int{2}),
		t.view("bcast", 20, []int{3, 5}, []int{0, 1}),
		t.view("scalar", 42, []int{}, []int{}),
		t.view("empty", 0, []int{0}, []int{1}),
		t.view("empty2", 7, []int{3, 0}, []int{5, 1}),
		t.view("permuted", 100, []int{2, 3, 4}, []int{1, 8, 2}),
		t.view("contig", 150, []int{50}, []int{1}),
		t.view("bcast-scalar", 199, []int{2, 3}, []int{0, 0}),
	}
	if n >= 1<<20 {
		vs = []view{
			t.view("transposed", 7, []int{1024, 1023}, []int{1, 1024}),
			t.view("contig", 3, []int{1<<20 + 3}, []int{1}),
		}
	}
	sz := dt.Size()
	for _, v := range vs {
		want := make([]byte, numel(v.shape)*sz)
		forEach(v.shape, v.strides, v.off, func(i, o int) { copy(want[i*sz:(i+1)*sz], t.init[o*sz:(o+1)*sz]) })
		var got [2][]byte
		for i, d := range e.devs() {
			got[i] = make([]byte, len(want))
			s := side{d, i}
			if err := protect(func() error { return d.Download(got[i], s.v(v)) }); err != nil {
				e.failf("%s: Download of view %s: %v", which(i), v.describe(), err)
				got[i] = nil
			}
		}
		if err := protect(e.dut.Sync); err != nil {
			e.failf("dut: Sync after Download: %v", err)
		}
		tmp := &tensor{name: "download", dt: dt, n: numel(v.shape)}
		tmp.locs = []locator{{"view", 0, v.shape, device.ContiguousStrides(v.shape)}}
		if got[1] != nil {
			e.report(tmp, "dut's Download of view "+v.describe(), want, got[1], rule{exact: true}, "want")
		}
		if got[0] != nil {
			e.report(tmp, "harness: ref's Download of view "+v.describe(), want, got[0], rule{exact: true}, "want")
		}
	}
	e.compareAll()
}

func (v view) describe() string {
	return fmt.Sprintf("shape %v strides %v offset %d", v.shape, v.strides, v.off)
}

// Copy: every pair of types, and broadcast, strided and transposed views.

type copyLayout struct {
	name     string
	shape    []int
	src, dst layout
}

var copyLayouts = []copyLayout{
	{"contig", []int{7, 131}, contig, contig},
	{"strided", []int{5, 6, 7}, transposed, strided},
	{"bcast", []int{4, 5, 6}, bcast(0, 2), offset},
}

// copyGen is the source of a conversion from s to d: values that every
// conversion defines (in range for integer destinations), with overflows
// and subnormals of the narrower float types.
func copyGen(s, d dtype.DType) gen {
	if !s.IsFloat() {
		return defGen(s)
	}
	switch d {
	case i64, i32:
		return unif(-1000, 1000)
	case u8:
		return unif(0, 250) // in range after rounding to a 16-bit float too
	case boolean:
		return mix(0.3, pick(0, math.Copysign(0, -1)), unif(-2, 2))
	}
	extremes := pick(1e-5, -3e-7, 6e-8, 65519, 65520, -7e4, 1e5, 3.3895314e38)
	if s == f64 {
		extremes = pick(1e-5, -3e-7, 6e-8, 65519, 65520, -7e4, 1e5, 3.4e38, 1e39, -1e300, 1e-40, 1e-300)
	}
	return mix(0.85, unif(-300, 300), extremes)
}

func copyRule(v view, s, d dtype.DType) view {
	v = v.exact()
	if s == f64 && isHalf(d) {
		v.t.ulps = 1 // the CPU rounds through float32
	}
	return v
}

func copyCases() []Case {
	var cs []Case
	for _, s := range dtype.All {
		for _, d := range dtype.All {
			for _, l := range copyLayouts {
				cs = append(cs, Case{Name: fmt.Sprintf("Copy/%s->%s/%s", short(s), short(d), l.name), run: func(e *env) {
					copyCase(e, s, d, l.shape, l.src, l.dst, copyGen(s, d))
				}})
			}
		}
	}
	specials := [][2]dtype.DType{{f32, bf16}, {f32, f16}, {f32, f64}, {f64, f32}, {f32, i64}, {f64, i64}, {f32, boolean},
		{bf16, f32}, {f16, f32}, {bf16, f16}, {f16, bf16}, {bf16, i64}, {f64, bf16}}
	for _, p := range specials {
		cs = append(cs, Case{Name: fmt.Sprintf("Copy/%s->%s/specials", short(p[0]), short(p[1])), run: func(e *env) {
			g := specialGen(unif(-3, 3))
			if p[1] == i64 {
				g = mix(0.2, pick(1e30, -1e30, 9.3e18, -9.3e18), g) // saturate
			}
			copyCase(e, p[0], p[1], []int{9, 29}, strided, contig, g)
		}})
	}
	cs = append(cs,
		Case{Name: "Copy/f32->f32/0d", run: func(e *env) { copyCase(e, f32, f32, []int{}, offset, offset, nil) }},
		Case{Name: "Copy/f32->f16/0d", run: func(e *env) { copyCase(e, f32, f16, []int{}, offset, contig, nil) }},
		Case{Name: "Copy/f32->f16/empty", run: func(e *env) { copyCase(e, f32, f16, []int{3, 0}, contig, contig, nil) }},
		Case{Name: "Copy/f32->f32/extent1", run: func(e *env) {
			copyCase(e, f32, f32, []int{1, 37, 1, 5}, transposed, strided, nil)
		}},
		Case{Name: "Copy/f32->bf16/large", Large: true, run: func(e *env) {
			copyCase(e, f32, bf16, []int{1<<20 + 3}, contig, contig, nil)
		}},
		Case{Name: "Copy/f32->f32/large/transposed", Large: true, run: func(e *env) {
			copyCase(e, f32, f32, []int{1024, 1027}, transposed, contig, nil)
		}},
		Case{Name: "Copy/bf16->f32/large/bcast", Large: true, run: func(e *env) {
			copyCase(e, bf16, f32, []int{1024, 1031}, bcast(0), padded, nil)
		}},
		Case{Name: "Copy/i64->f32/large", Large: true, run: func(e *env) {
			copyCase(e, i64, f32, []int{1<<20 + 1}, contig, contig, nil)
		}},
	)
	return cs
}

func copyCase(e *env, s, d dtype.DType, shape []int, sl, dl layout, g gen) {
	src := e.in("src", s, shape, sl, g)
	dst := copyRule(e.out("dst", d, shape, dl), s, d)
	e.call(func(x side) error { return x.d.Copy(x.v(dst), x.v(src)) })
}

// Fill.

func fillCases() []Case {
	values := map[dtype.DType][]float64{
		f32: {0.1, -2.5, nan, inf}, f64: {0.1, -2.5, nan, math.Inf(-1)},
		bf16: {0.1, -2.5, nan, inf}, f16: {0.1, -2.5, nan, 1e5},
		i64: {7, -3, 1 << 40}, i32: {7, -3}, u8: {250, 0}, boolean: {1, 0, 0.5},
	}
	var cs []Case
	for _, dt := range dtype.All {
		for _, x := range values[dt] {
			for _, l := range []struct {
				lay   layout
				shape []int
			}{{contig, []int{7, 131}}, {strided, []int{5, 6, 7}}, {transposed, []int{3, 4, 5}}} {
				cs = append(cs, Case{Name: fmt.Sprintf("Fill/%s/%s/%s", short(dt), fmtValue(x), l.lay.name), run: func(e *env) {
					fillCase(e, dt, x, l.shape, l.lay)
				}})
			}
		}
	}
	cs = append(cs,
		Case{Name: "Fill/f32/0d", run: func(e *env) { fillCase(e, f32, 3, []int{}, offset) }},
		Case{Name: "Fill/f32/empty", run: func(e *env) { fillCase(e, f32, 3, []int{0, 4}, contig) }},
		Case{Name: "Fill/f32/large", Large: true, run: func(e *env) { fillCase(e, f32, -0.75, []int{1<<20 + 5}, offset) }},
		Case{Name: "Fill/bf16/large/strided", Large: true, run: func(e *env) { fillCase(e, bf16, 0.3, []int{1024, 1025}, padded) }},
	)
	return cs
}

func fmtValue(x float64) string {
	switch {
	case x != x:
		return "nan"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	case x == 1<<40:
		return "2p40"
	}
	return strings.ReplaceAll(fmt.Sprintf("%g", x), "+", "")
}

func fillCase(e *env, dt dtype.DType, x float64, shape []int, l layout) {
	dst := copyRule(e.out("dst", dt, shape, l), f64, dt)
	e.note("value: %v", x)
	e.call(func(s side) error { return s.d.Fill(s.v(dst), x) })
}

// Unary.

type unarySpec struct {
	op     device.UnaryOp
	s, si  float64 // scalar for float and int64 tensors
	label  string  // op name with the scalar when it matters
	g      gen     // input domain
	exact  bool
	int64s bool // defined for int64
	noInf  bool // infinite inputs give an artefact (0·∞), not a definition
}

func unarySpecs() []unarySpec {
	wide := unif(-3, 3)
	specs := []unarySpec{
		{op: device.Neg, g: wide, exact: true, int64s: true},
		{op: device.Exp, g: unif(-5, 5)},
		{op: device.Log, g: unif(0.05, 4)},
		{op: device.Sqrt, g: unif(0, 4)},
		{op: device.Rsqrt, g: unif(0.05, 4)},
		{op: device.Abs, g: wide, exact: true, int64s: true},
		{op: device.Sign, g: mix(0.2, pick(0), wide), exact: true, int64s: true},
		{op: device.Relu, g: mix(0.1, pick(0), wide), exact: true, int64s: true},
		{op: device.Gelu, g: unif(-5, 5), noInf: true},
		{op: device.GeluTanh, g: unif(-5, 5), noInf: true},
		{op: device.Silu, g: unif(-6, 6), noInf: true},
		{op: device.Tanh, g: unif(-4, 4)},
		{op: device.Sigmoid, g: unif(-6, 6)},
		{op: device.AddScalar, s: 0.3, si: 3, g: wide, int64s: true},
		{op: device.MulScalar, s: -1.7, si: -2, g: wide, int64s: true},
		{op: device.RSubScalar, s: 2.5, si: 5, g: wide, int64s: true},
		{op: device.RDivScalar, s: 1.5, g: magn(0.25, 4)},
		{op: device.Square, g: wide, int64s: true},
		{op: device.Reciprocal, g: magn(0.25, 4)},
		{op: device.Sin, g: unif(-10, 10)},
		{op: device.Cos, g: unif(-10, 10)},
		{op: device.Erf, g: unif(-4, 4)},
	}
	for _, p := range []float64{2, 0.5, 3, -1.5, 1, -0.5, -1, -2} { // PyTorch's special exponents and two others
		specs = append(specs, unarySpec{op: device.PowScalar, s: p, label: "pow_scalar=" + fmtValue(p), g: unif(0.05, 3)})
	}
	for i := range specs {
		if specs[i].label == "" {
			specs[i].label = specs[i].op.String()
		}
	}
	return specs
}

type ewLayout struct {
	name      string
	shape     []int
	dst, a, b layout
}

var unaryLayouts = []ewLayout{
	{name: "contig", shape: []int{3, 333}, dst: contig, a: contig},
	{name: "strided", shape: []int{5, 7, 9}, dst: strided, a: transposed},
}

func unaryCases() []Case {
	var cs []Case
	for _, sp := range unarySpecs() {
		for _, dt := range floats {
			for _, l := range unaryLayouts {
				cs = append(cs, Case{Name: fmt.Sprintf("Unary/%s/%s/%s", sp.label, short(dt), l.name), run: func(e *env) {
					unaryCase(e, sp, dt, sp.s, l.shape, l.dst, l.a, sp.g)
				}})
			}
		}
		if sp.int64s {
			for _, l := range unaryLayouts {
				cs = append(cs, Case{Name: fmt.Sprintf("Unary/%s/i64/%s", sp.label, l.name), run: func(e *env) {
					unaryCase(e, sp, i64, sp.si, l.shape, l.dst, l.a, ints(-1000, 1000))
				}})
			}
		}
		for _, dt := range []dtype.DType{f32, bf16} {
			cs = append(cs, Case{Name: fmt.Sprintf("Unary/%s/%s/specials", sp.label, short(dt)), run: func(e *env) {
				g := specialGen(sp.g)
				if sp.noInf {
					g = mix(0.3, pick(nan, 0, math.Copysign(0, -1), 30, -30), sp.g)
				}
				unaryCase(e, sp, dt, sp.s, []int{9, 29}, strided, contig, g)
			}})
		}
	}
	byOp := map[device.UnaryOp]unarySpec{}
	for _, sp := range unarySpecs() {
		byOp[sp.op] = sp
	}
	cs = append(cs,
		Case{Name: "Unary/mul_scalar/f32/inplace", run: func(e *env) { unaryInPlace(e, byOp[device.MulScalar], f32) }},
		Case{Name: "Unary/exp/bf16/inplace", run: func(e *env) { unaryInPlace(e, byOp[device.Exp], bf16) }},
		Case{Name: "Unary/exp/f32/0d", run: func(e *env) {
			unaryCase(e, byOp[device.Exp], f32, 0, []int{}, offset, offset, unif(-2, 2))
		}},
		Case{Name: "Unary/exp/f32/empty", run: func(e *env) {
			unaryCase(e, byOp[device.Exp], f32, 0, []int{0, 5}, contig, contig, unif(-2, 2))
		}},
		Case{Name: "Unary/gelu/f32/large", Large: true, run: func(e *env) {
			unaryCase(e, byOp[device.Gelu], f32, 0, []int{1<<20 + 17}, contig, contig, unif(-5, 5))
		}},
		Case{Name: "Unary/exp/bf16/large", Large: true, run: func(e *env) {
			unaryCase(e, byOp[device.Exp], bf16, 0, []int{1<<20 + 1}, offset, contig, unif(-5, 5))
		}},
		Case{Name: "Unary/mul_scalar/f32/large/strided", Large: true, run: func(e *env) {
			unaryCase(e, byOp[device.MulScalar], f32, 0.7, []int{1024, 1029}, padded, transposed, unif(-3, 3))
		}},
	)
	return cs
}

func unaryCase(e *env, sp unarySpec, dt dtype.DType, scalar float64, shape []int, dl, sl layout, g gen) {
	src := e.in("src", dt, shape, sl, g)
	dst := e.out("dst", dt, shape, dl)
	if sp.exact {
		dst.exact()
	}
	e.note("op %v, scalar %v", sp.op, scalar)
	e.call(func(s side) error { return s.d.Unary(sp.op, s.v(dst), s.v(src), scalar) })
}

func unaryInPlace(e *env, sp unarySpec, dt dtype.DType) {
	x := e.inout("x", dt, []int{17, 67}, strided, sp.g)
	e.note("op %v in place (dst and src are the same view), scalar %v", sp.op, sp.s)
	e.call(func(s side) error { return s.d.Unary(sp.op, s.v(x), s.v(x), sp.s) })
}

// ActivationBackward.

type actSpec struct {
	op    device.ActivationOp
	name  string
	saved gen
	exact bool
}

var actSpecs = []actSpec{
	{device.ReluBackward, "relu", mix(0.3, pick(0, math.Copysign(0, -1)), unif(-1, 2)), true},
	{device.GeluBackward, "gelu", unif(-5, 5), false},
	{device.GeluTanhBackward, "gelu_tanh", unif(-5, 5), false},
	{device.SiluBackward, "silu", unif(-6, 6), false},
	{device.TanhBackward, "tanh", unif(-1, 1), false},
	{device.SigmoidBackward, "sigmoid", unif(0, 1), false},
}

func activationCases() []Case {
	var cs []Case
	for _, sp := range actSpecs {
		for _, dt := range floats {
			cs = append(cs,
				Case{Name: fmt.Sprintf("ActivationBackward/%s/%s/contig", sp.name, short(dt)), run: func(e *env) {
					activationCase(e, sp, dt, []int{3, 333}, contig, contig, contig, unif(-2, 2), sp.saved)
				}},
				Case{Name: fmt.Sprintf("ActivationBackward/%s/%s/strided", sp.name, short(dt)), run: func(e *env) {
					activationCase(e, sp, dt, []int{5, 7, 9}, strided, transposed, offset, unif(-2, 2), sp.saved)
				}},
				// dy one value broadcast (the backward of a sum), over runs
				// longer than any buffer a kernel may copy it into.
				Case{Name: fmt.Sprintf("ActivationBackward/%s/%s/scalar-dy", sp.name, short(dt)), run: func(e *env) {
					activationCase(e, sp, dt, []int{3, 1031}, contig, scalarBcast, contig, unif(-2, 2), sp.saved)
				}})
		}
		cs = append(cs, Case{Name: fmt.Sprintf("ActivationBackward/%s/f32/nan", sp.name), run: func(e *env) {
			activationCase(e, sp, f32, []int{9, 29}, contig, contig, contig,
				mix(0.2, pick(nan), unif(-2, 2)), mix(0.2, pick(nan, 0), sp.saved))
		}})
	}
	cs = append(cs, Case{Name: "ActivationBackward/gelu/f32/large", Large: true, run: func(e *env) {
		activationCase(e, actSpecs[1], f32, []int{1<<20 + 3}, contig, contig, contig, unif(-2, 2), unif(-5, 5))
	}})
	return cs
}

func activationCase(e *env, sp actSpec, dt dtype.DType, shape []int, dxl, dyl, sl layout, gdy, gs gen) {
	dy := e.in("dy", dt, shape, dyl, gdy)
	saved := e.in("saved", dt, shape, sl, gs)
	dx := e.out("dx", dt, shape, dxl)
	if sp.exact {
		dx.exact()
	}
	e.call(func(s side) error { return s.d.ActivationBackward(sp.op, s.v(dx), s.v(dy), s.v(saved)) })
}

// Binary.

type binarySpec struct {
	op     device.BinaryOp
	a, b   gen
	exact  bool
	int64s bool
}

func binarySpecs() []binarySpec {
	w := unif(-3, 3)
	tie := mix(0.3, pick(-1, 0, 1), w)
	return []binarySpec{
		{device.Add, w, w, false, true},
		{device.Sub, w, w, false, true},
		{device.Mul, w, w, false, true},
		{device.Div, w, magn(0.25, 4), false, false},
		{device.Pow, unif(0.05, 3), unif(-2, 2), false, false},
		{device.Maximum, tie, tie, true, true},
		{device.Minimum, tie, tie, true, true},
	}
}

var comparisons = []device.BinaryOp{device.Eq, device.Ne, device.Lt, device.Le, device.Gt, device.Ge}

var binaryLayouts = []ewLayout{
	{name: "contig", shape: []int{3, 333}, dst: contig, a: contig, b: contig},
	{name: "bcast", shape: []int{6, 35, 33}, dst: strided, a: transposed, b: bcast(0, 2)},
	{name: "scalar", shape: []int{7, 131}, dst: offset, a: contig, b: scalarBcast},
}

var bcast4d = ewLayout{name: "bcast4d", shape: []int{2, 3, 5, 7}, dst: transposed, a: bcast(1, 3), b: bcast(0, 2)}

func binaryCases() []Case {
	var cs []Case
	for _, sp := range binarySpecs() {
		for _, dt := range floats {
			ls := binaryLayouts
			if dt == f32 {
				ls = append(ls[:len(ls):len(ls)], bcast4d)
			}
			for _, l := range ls {
				cs = append(cs, Case{Name: fmt.Sprintf("Binary/%v/%s/%s", sp.op, short(dt), l.name), run: func(e *env) {
					binaryCase(e, sp.op, dt, dt, l, sp.a, sp.b, sp.exact)
				}})
			}
		}
		if sp.int64s {
			for _, l := range binaryLayouts[:2] {
				cs = append(cs, Case{Name: fmt.Sprintf("Binary/%v/i64/%s", sp.op, l.name), run: func(e *env) {
					binaryCase(e, sp.op, i64, i64, l, defGen(i64), defGen(i64), true)
				}})
			}
		}
		for _, dt := range []dtype.DType{f32, bf16} {
			cs = append(cs, Case{Name: fmt.Sprintf("Binary/%v/%s/specials", sp.op, short(dt)), run: func(e *env) {
				a, b := specialGen(sp.a), specialGen(sp.b)
				if sp.op == device.Pow {
					a = mix(0.5, pick(nan, inf, math.Inf(-1), 0, math.Copysign(0, -1), -2, 2, 1, -1), sp.a)
					b = mix(0.5, pick(nan, inf, math.Inf(-1), 0, math.Copysign(0, -1), 0.5, -1, 2, 3), sp.b)
				}
				binaryCase(e, sp.op, dt, dt, binaryLayouts[0], a, b, sp.exact)
			}})
		}
	}
	for _, op := range comparisons {
		for _, dt := range dtype.All {
			for _, l := range binaryLayouts[:2] {
				cs = append(cs, Case{Name: fmt.Sprintf("Binary/%v/%s/%s", op, short(dt), l.name), run: func(e *env) {
					binaryCase(e, op, dt, boolean, l, tieGen(dt), tieGen(dt), true)
				}})
			}
		}
		for _, dt := range []dtype.DType{f32, bf16} {
			cs = append(cs, Case{Name: fmt.Sprintf("Binary/%v/%s/specials", op, short(dt)), run: func(e *env) {
				g := specialGen(tieGen(dt))
				binaryCase(e, op, dt, boolean, binaryLayouts[1], g, g, true)
			}})
		}
	}
	add := binarySpecs()[0]
	cs = append(cs,
		Case{Name: "Binary/add/f32/inplace", run: func(e *env) { binaryInPlace(e, device.Add, f32) }},
		Case{Name: "Binary/mul/bf16/inplace", run: func(e *env) { binaryInPlace(e, device.Mul, bf16) }},
		Case{Name: "Binary/add/f32/0d", run: func(e *env) {
			binaryCase(e, device.Add, f32, f32, ewLayout{name: "0d", shape: []int{}, dst: offset, a: offset, b: contig}, add.a, add.b, false)
		}},
		Case{Name: "Binary/add/f32/empty", run: func(e *env) {
			binaryCase(e, device.Add, f32, f32, ewLayout{name: "empty", shape: []int{4, 0}, dst: contig, a: contig, b: contig}, add.a, add.b, false)
		}},
		Case{Name: "Binary/add/f32/large/bcast", Large: true, run: func(e *env) {
			binaryCase(e, device.Add, f32, f32, ewLayout{name: "large", shape: []int{1024, 1031}, dst: contig, a: contig, b: bcast(0)}, add.a, add.b, false)
		}},
		Case{Name: "Binary/mul/bf16/large", Large: true, run: func(e *env) {
			binaryCase(e, device.Mul, bf16, bf16, ewLayout{name: "large", shape: []int{1<<20 + 7}, dst: contig, a: contig, b: offset}, add.a, add.b, false)
		}},
		Case{Name: "Binary/div/f32/large/strided", Large: true, run: func(e *env) {
			binaryCase(e, device.Div, f32, f32, ewLayout{name: "large", shape: []int{1031, 1024}, dst: padded, a: transposed, b: scalarBcast}, add.a, magn(0.25, 4), false)
		}},
		Case{Name: "Binary/lt/f32/large", Large: true, run: func(e *env) {
			binaryCase(e, device.Lt, f32, boolean, ewLayout{name: "large", shape: []int{1<<20 + 9}, dst: contig, a: contig, b: contig}, tieGen(f32), tieGen(f32), true)
		}},
	)
	return cs
}

func binaryCase(e *env, op device.BinaryOp, dt, odt dtype.DType, l ewLayout, ga, gb gen, exact bool) {
	a := e.in("a", dt, l.shape, l.a, ga)
	b := e.in("b", dt, l.shape, l.b, gb)
	dst := e.out("dst", odt, l.shape, l.dst)
	if exact {
		dst.exact()
	}
	e.note("op %v", op)
	e.call(func(s side) error { return s.d.Binary(op, s.v(dst), s.v(a), s.v(b)) })
}

func binaryInPlace(e *env, op device.BinaryOp, dt dtype.DType) {
	x := e.inout("x", dt, []int{17, 67}, strided, unif(-3, 3))
	b := e.in("b", dt, []int{17, 67}, bcast(0), unif(-3, 3))
	e.note("op %v in place (dst and a are the same view)", op)
	e.call(func(s side) error { return s.d.Binary(op, s.v(x), s.v(x), s.v(b)) })
}

// Where.

func whereCases() []Case {
	var cs []Case
	for _, dt := range dtype.All {
		cs = append(cs,
			Case{Name: "Where/" + short(dt) + "/contig", run: func(e *env) {
				whereCase(e, dt, []int{7, 131}, contig, contig, contig, contig, defGen(dt))
			}},
			Case{Name: "Where/" + short(dt) + "/bcast", run: func(e *env) {
				whereCase(e, dt, []int{6, 35, 33}, strided, bcast(0), transposed, bcast(2), defGen(dt))
			}})
	}
	cs = append(cs,
		Case{Name: "Where/f32/specials", run: func(e *env) {
			whereCase(e, f32, []int{9, 29}, contig, contig, contig, scalarBcast, specialGen(unif(-1, 1)))
		}},
		Case{Name: "Where/f32/large", Large: true, run: func(e *env) {
			whereCase(e, f32, []int{1<<20 + 3}, contig, contig, contig, contig, nil)
		}},
	)
	return cs
}

func whereCase(e *env, dt dtype.DType, shape []int, dl, cl, al, bl layout, g gen) {
	cond := e.in("cond", boolean, shape, cl, nil)
	a := e.in("a", dt, shape, al, g)
	b := e.in("b", dt, shape, bl, g)
	dst := e.out("dst", dt, shape, dl).exact()
	e.call(func(s side) error { return s.d.Where(s.v(dst), s.v(cond), s.v(a), s.v(b)) })
}
