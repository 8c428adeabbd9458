package devicetest

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Scan, Sort and Reduce's products.

// axisShape is a shape and the axis an op works along.
type axisShape struct {
	shape []int
	axis  int
}

func (a axisShape) String() string { return fmt.Sprintf("%s/axis=%d", shapeName(a.shape), a.axis) }

// axisShapes are the shapes of the ops along one axis: short rows (a
// thread each on a GPU), rows longer than a block, than 4096 and than a
// 2048-element sorting tile, along contiguous and strided axes.
var axisShapes = []axisShape{
	{[]int{1000}, 0},
	{[]int{37, 129}, 0},
	{[]int{37, 129}, 1},
	{[]int{4, 5, 33}, 0},
	{[]int{4, 5, 33}, 1},
	{[]int{4, 5, 33}, 2},
	{[]int{1, 7}, 0},
	{[]int{6, 1}, 1},
	{[]int{2, 513}, 1},
	{[]int{3, 2048}, 1},
	{[]int{2, 2049}, 1},
	{[]int{3, 5000}, 1},
	{[]int{5000, 3}, 0},
}

var scanOps = []device.ScanOp{device.CumSum, device.CumProd}

// scanGen is the input of a scan: values whose running products stay near
// 1 for cumprod, and small integers that wrap eventually for int64.
func scanGen(op device.ScanOp, dt dtype.DType) gen {
	switch {
	case dt == i64 && op == device.CumProd:
		return pick(-3, -2, -1, 1, 2, 3)
	case dt == i64:
		return ints(-1000, 1000)
	case op == device.CumProd:
		return magn(0.99, 1.01)
	}
	return unif(-1, 1)
}

func scanCases() []Case {
	var cs []Case
	add := func(op device.ScanOp, dt dtype.DType, as axisShape, reverse bool, lname string, sl, dl layout, g gen, large bool) {
		dir := "forward"
		if reverse {
			dir = "reverse"
		}
		cs = append(cs, Case{
			Name:  fmt.Sprintf("Scan/%v/%s/%v/%s/%s", op, short(dt), as, dir, lname),
			Large: large,
			run:   func(e *env) { scanCase(e, op, dt, as, reverse, sl, dl, g) },
		})
	}
	for _, op := range scanOps {
		for _, reverse := range []bool{false, true} {
			for _, as := range axisShapes {
				add(op, f32, as, reverse, "contig", contig, contig, nil, false)
			}
			for _, as := range []axisShape{axisShapes[2], axisShapes[4], axisShapes[11], axisShapes[12]} {
				add(op, f32, as, reverse, "strided", transposed, strided, nil, false)
				for _, dt := range []dtype.DType{f64, bf16, f16, i64} {
					add(op, dt, as, reverse, "contig", contig, contig, nil, false)
				}
				add(op, f64, as, reverse, "strided", strided, transposed, nil, false)
			}
			add(op, f32, axisShape{[]int{9, 29}, 1}, reverse, "specials", contig, contig, specialGen(scanGen(op, f32)), false)
		}
		add(op, f32, axisShape{[]int{0, 5}, 1}, false, "empty", contig, contig, nil, false)
		add(op, f32, axisShape{[]int{5, 0}, 1}, false, "empty-axis", contig, contig, nil, false)
		add(op, f32, axisShape{[]int{1<<20 + 3}, 0}, false, "large", offset, contig, nil, true)
		add(op, bf16, axisShape{[]int{1024, 1031}, 0}, true, "large", contig, padded, nil, true)
		for _, dt := range []dtype.DType{f32, i64} {
			cs = append(cs, Case{Name: fmt.Sprintf("Scan/%v/%s/inplace", op, short(dt)), run: func(e *env) {
				x := e.inout("x", dt, []int{7, 600}, strided, scanGen(op, dt))
				x.sums(600, 1) // rows scanned in tiles on a GPU (ignored for int64)
				e.note("%v along axis 1 in place (dst and src are the same view)", op)
				e.call(func(s side) error { return s.d.Scan(op, s.v(x), s.v(x), 1, false) })
			}})
		}
	}
	return cs
}

func scanCase(e *env, op device.ScanOp, dt dtype.DType, as axisShape, reverse bool, sl, dl layout, g gen) {
	if g == nil {
		g = scanGen(op, dt)
	}
	src := e.in("src", dt, as.shape, sl, g)
	dst := e.out("dst", dt, as.shape, dl)
	if n := as.shape[as.axis]; n > 1 {
		// Long rows may be scanned in tiles whose double accumulators
		// associate differently.
		dst.sums(n, 1)
	}
	e.note("%v along axis %d, reverse %v", op, as.axis, reverse)
	e.call(func(s side) error { return s.d.Scan(op, s.v(dst), s.v(src), as.axis, reverse) })
}

func sortCases() []Case {
	var cs []Case
	add := func(dt dtype.DType, as axisShape, descending bool, lname string, sl, vl, il layout, g gen, large bool) {
		dir := "ascending"
		if descending {
			dir = "descending"
		}
		cs = append(cs, Case{
			Name:  fmt.Sprintf("Sort/%s/%v/%s/%s", short(dt), as, dir, lname),
			Large: large,
			run:   func(e *env) { sortCase(e, dt, as, descending, sl, vl, il, g) },
		})
	}
	for _, descending := range []bool{false, true} {
		for _, as := range axisShapes {
			add(f32, as, descending, "contig", contig, contig, contig, nil, false)
		}
		for _, as := range []axisShape{axisShapes[2], axisShapes[4], axisShapes[11], axisShapes[12]} {
			add(f32, as, descending, "strided", transposed, strided, transposed, nil, false)
			for _, dt := range []dtype.DType{f64, bf16, f16, i64} {
				add(dt, as, descending, "contig", contig, contig, contig, nil, false)
			}
		}
		for _, dt := range []dtype.DType{f32, f64, bf16} {
			add(dt, axisShape{[]int{9, 29}, 1}, descending, "specials", contig, contig, contig, specialGen(tieGen(dt)), false)
			add(dt, axisShape{[]int{2, 4099}, 1}, descending, "specials", contig, contig, contig, specialGen(tieGen(dt)), false)
		}
		add(f32, axisShape{[]int{3, 300}, 1}, descending, "all-equal", contig, contig, contig, pick(0.5), false)
		add(f32, axisShape{[]int{3, 300}, 1}, descending, "signed-zeros", contig, contig, contig, pick(0, math.Copysign(0, -1), nan, -1), false)
	}
	add(f32, axisShape{[]int{0, 5}, 1}, false, "empty", contig, contig, contig, nil, false)
	add(f32, axisShape{[]int{5, 0}, 1}, true, "empty-axis", contig, contig, contig, nil, false)
	add(f32, axisShape{[]int{1<<20 + 3}, 0}, false, "large", offset, contig, offset, unif(-1, 1), true)
	add(f32, axisShape{[]int{64, 16411}, 1}, true, "large", contig, offset, offset, nil, true)
	add(bf16, axisShape{[]int{1031, 1024}, 0}, false, "large", transposed, padded, contig, nil, true)
	return cs
}

func sortCase(e *env, dt dtype.DType, as axisShape, descending bool, sl, vl, il layout, g gen) {
	if g == nil {
		g = tieGen(dt)
	}
	src := e.in("src", dt, as.shape, sl, g)
	vals := e.out("values", dt, as.shape, vl).exact()
	idx := e.out("indices", i64, as.shape, il)
	e.note("sort along axis %d, descending %v", as.axis, descending)
	e.call(func(s side) error { return s.d.Sort(s.v(vals), s.v(idx), s.v(src), as.axis, descending) })
}

// prodCases are Reduce's products, of values near 1 so that products of
// thousands of elements neither vanish nor overflow.
func prodCases() []Case {
	var cs []Case
	near1 := magn(0.98, 1.02)
	add := func(dt dtype.DType, rs reduceShape, lname string, sl, dl layout, g gen, large bool) {
		cs = append(cs, Case{
			Name:  fmt.Sprintf("Reduce/prod/%s/%s/%s/%s", short(dt), shapeName(rs.shape), axesName(rs.axes), lname),
			Large: large,
			run:   func(e *env) { reduceCase(e, device.Prod, dt, rs, sl, dl, g) },
		})
	}
	for _, rs := range reduceShapes {
		add(f32, rs, "contig", contig, contig, near1, false)
		add(f32, rs, "strided", transposed, strided, near1, false)
	}
	for _, dt := range []dtype.DType{f64, bf16, f16, i64} {
		g := near1
		if dt == i64 {
			g = pick(-1, 1, 1, 2, -3)
		}
		for _, rs := range []reduceShape{reduceShapes[2], reduceShapes[3], reduceShapes[8], reduceShapes[11], reduceShapes[14]} {
			add(dt, rs, "contig", contig, contig, g, false)
		}
		add(dt, reduceShapes[12], "strided", transposed, strided, g, false)
	}
	for _, dt := range []dtype.DType{f32, bf16} {
		for _, rs := range []reduceShape{{[]int{9, 29}, []int{1}}, {[]int{9, 29}, []int{0}}} {
			add(dt, rs, "specials", contig, contig, specialGen(near1), false)
		}
	}
	add(f32, reduceShape{[]int{0, 5}, []int{0}}, "empty", contig, contig, nil, false)
	add(f32, reduceShape{[]int{1<<20 + 3}, []int{0}}, "large", offset, contig, magn(0.9999, 1.0001), true)
	add(f64, reduceShape{[]int{1024, 1025}, []int{0}}, "large", contig, contig, magn(0.999, 1.001), true)
	return cs
}

// sortScanUnsupportedCases are the element types the CPU rejects.
func sortScanUnsupportedCases() []Case {
	var cs []Case
	add := func(name string, run func(e *env)) { cs = append(cs, Case{Name: "Unsupported/" + name, run: run}) }
	shape := []int{5, 7}
	for _, dt := range []dtype.DType{i32, u8, boolean} {
		add("Scan/cumsum/"+short(dt), func(e *env) {
			src, dst := e.in("src", dt, shape, contig, nil), e.out("dst", dt, shape, contig)
			e.expectError(func(s side) error { return s.d.Scan(device.CumSum, s.v(dst), s.v(src), 1, false) })
		})
		add("Sort/"+short(dt), func(e *env) {
			src, vals, idx := e.in("src", dt, shape, contig, nil), e.out("values", dt, shape, contig), e.out("indices", i64, shape, contig)
			e.expectError(func(s side) error { return s.d.Sort(s.v(vals), s.v(idx), s.v(src), 1, false) })
		})
	}
	for _, op := range []device.UnaryOp{device.Sin, device.Cos, device.Erf} {
		add(fmt.Sprintf("Unary/%v/i64", op), func(e *env) {
			src, dst := e.in("src", i64, shape, contig, nil), e.out("dst", i64, shape, contig)
			e.expectError(func(s side) error { return s.d.Unary(op, s.v(dst), s.v(src), 0) })
		})
	}
	add("Scan/cumprod/f32-into-f64", func(e *env) {
		src, dst := e.in("src", f32, shape, contig, nil), e.out("dst", f64, shape, contig)
		e.expectError(func(s side) error { return s.d.Scan(device.CumProd, s.v(dst), s.v(src), 0, false) })
	})
	add("Sort/f32/i32-indices", func(e *env) {
		src, vals, idx := e.in("src", f32, shape, contig, nil), e.out("values", f32, shape, contig), e.out("indices", i32, shape, contig)
		e.expectError(func(s side) error { return s.d.Sort(s.v(vals), s.v(idx), s.v(src), 1, false) })
	})
	add("Sort/f32/axis-out-of-range", func(e *env) {
		src, vals, idx := e.in("src", f32, shape, contig, nil), e.out("values", f32, shape, contig), e.out("indices", i64, shape, contig)
		e.expectError(func(s side) error { return s.d.Sort(s.v(vals), s.v(idx), s.v(src), 2, false) })
	})
	return cs
}
