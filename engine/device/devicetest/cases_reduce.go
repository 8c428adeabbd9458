package devicetest

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Reduce, ArgMax and SumSquares.

type reduceShape struct {
	shape []int
	axes  []int
}

var reduceShapes = []reduceShape{
	{[]int{1000}, []int{0}},
	{[]int{1}, []int{0}},
	{[]int{37, 129}, []int{0}},
	{[]int{37, 129}, []int{1}},
	{[]int{37, 129}, []int{0, 1}},
	{[]int{6, 35, 33}, []int{0}},
	{[]int{6, 35, 33}, []int{1}},
	{[]int{6, 35, 33}, []int{2}},
	{[]int{6, 35, 33}, []int{0, 2}},
	{[]int{6, 35, 33}, []int{0, 1, 2}},
	{[]int{6, 35, 33}, []int{}},
	{[]int{3, 4, 5, 17}, []int{1, 3}},
	{[]int{3, 4, 5, 17}, []int{0, 2}},
	{[]int{3, 4, 5, 17}, []int{3}},
	{[]int{3, 4, 5, 17}, []int{0, 1, 2, 3}},
	{[]int{4, 1, 9}, []int{1, 2}},
}

var reduceOps = []struct {
	op   device.ReduceOp
	name string
}{{device.Sum, "sum"}, {device.Max, "max"}, {device.Min, "min"}}

func shapeName(shape []int) string {
	if len(shape) == 0 {
		return "0d"
	}
	parts := make([]string, len(shape))
	for i, s := range shape {
		parts[i] = strconv.Itoa(s)
	}
	return strings.Join(parts, "x")
}

func axesName(axes []int) string {
	if len(axes) == 0 {
		return "axes=none"
	}
	parts := make([]string, len(axes))
	for i, a := range axes {
		parts[i] = strconv.Itoa(a)
	}
	return "axes=" + strings.Join(parts, ",")
}

func reduceCases() []Case {
	var cs []Case
	add := func(op device.ReduceOp, opName string, dt dtype.DType, rs reduceShape, lname string, sl, dl layout, g gen, large bool) {
		cs = append(cs, Case{
			Name:  fmt.Sprintf("Reduce/%s/%s/%s/%s/%s", opName, short(dt), shapeName(rs.shape), axesName(rs.axes), lname),
			Large: large,
			run:   func(e *env) { reduceCase(e, op, dt, rs, sl, dl, g) },
		})
	}
	for _, o := range reduceOps {
		for _, rs := range reduceShapes {
			add(o.op, o.name, f32, rs, "contig", contig, contig, nil, false)
			add(o.op, o.name, f32, rs, "strided", transposed, strided, nil, false)
		}
		for _, dt := range []dtype.DType{f64, bf16, f16, i64} {
			for _, rs := range []reduceShape{reduceShapes[2], reduceShapes[3], reduceShapes[8], reduceShapes[11], reduceShapes[14]} {
				add(o.op, o.name, dt, rs, "contig", contig, contig, nil, false)
			}
			add(o.op, o.name, dt, reduceShapes[12], "strided", transposed, strided, nil, false)
		}
		for _, dt := range []dtype.DType{f32, bf16} {
			for _, rs := range []reduceShape{{[]int{9, 29}, []int{1}}, {[]int{9, 29}, []int{0}}} {
				add(o.op, o.name, dt, rs, "specials", contig, contig, specialGen(unif(-1, 1)), false)
			}
		}
	}
	add(device.Sum, "sum", f32, reduceShape{[]int{0, 5}, []int{0}}, "empty", contig, contig, nil, false)
	add(device.Sum, "sum", f32, reduceShape{[]int{1<<20 + 3}, []int{0}}, "large", offset, contig, nil, true)
	add(device.Sum, "sum", f32, reduceShape{[]int{4096, 257}, []int{0}}, "large", contig, contig, nil, true)
	add(device.Sum, "sum", f32, reduceShape{[]int{257, 4096}, []int{1}}, "large", contig, strided, nil, true)
	add(device.Max, "max", f32, reduceShape{[]int{1<<20 + 3}, []int{0}}, "large", contig, contig, nil, true)
	add(device.Sum, "sum", bf16, reduceShape{[]int{1031, 1024}, []int{1}}, "large", transposed, contig, nil, true)
	add(device.Min, "min", f64, reduceShape{[]int{1024, 1025}, []int{0}}, "large", contig, contig, nil, true)
	add(device.Sum, "sum", i64, reduceShape{[]int{1<<20 + 1}, []int{0}}, "large", contig, contig, nil, true)
	return cs
}

func reduceCase(e *env, op device.ReduceOp, dt dtype.DType, rs reduceShape, sl, dl layout, g gen) {
	dshape := append([]int(nil), rs.shape...)
	for _, a := range rs.axes {
		dshape[a] = 1
	}
	src := e.in("src", dt, rs.shape, sl, g)
	dst := e.out("dst", dt, dshape, dl)
	if op == device.Sum || op == device.Prod {
		dst.sums(max(1, numel(rs.shape)/max(1, numel(dshape))), 1)
	} else {
		dst.exact()
	}
	e.note("op %v over %v", op, rs.axes)
	e.call(func(s side) error { return s.d.Reduce(op, s.v(dst), s.v(src)) })
}

type argMaxShape struct {
	shape []int
	axis  int
}

func argMaxCases() []Case {
	shapes := []argMaxShape{{[]int{1000}, 0}, {[]int{37, 129}, 0}, {[]int{37, 129}, 1},
		{[]int{4, 5, 33}, 0}, {[]int{4, 5, 33}, 1}, {[]int{4, 5, 33}, 2}, {[]int{1, 7}, 0}}
	var cs []Case
	add := func(dt dtype.DType, as argMaxShape, lname string, sl, vl, il layout, g gen, large bool) {
		cs = append(cs, Case{
			Name:  fmt.Sprintf("ArgMax/%s/%s/axis=%d/%s", short(dt), shapeName(as.shape), as.axis, lname),
			Large: large,
			run:   func(e *env) { argMaxCase(e, dt, as, sl, vl, il, g) },
		})
	}
	for _, as := range shapes {
		add(f32, as, "contig", contig, contig, contig, nil, false)
		add(f32, as, "strided", transposed, strided, transposed, nil, false)
	}
	for _, dt := range []dtype.DType{f64, bf16, f16, i64} {
		add(dt, shapes[2], "contig", contig, contig, contig, nil, false)
		add(dt, shapes[4], "strided", transposed, strided, transposed, nil, false)
	}
	for _, dt := range []dtype.DType{f32, bf16} {
		add(dt, argMaxShape{[]int{9, 29}, 1}, "specials", contig, contig, contig, specialGen(tieGen(dt)), false)
	}
	add(f32, argMaxShape{[]int{3, 8}, 1}, "-inf", contig, contig, contig, pick(math.Inf(-1)), false)
	add(f32, argMaxShape{[]int{1<<20 + 3}, 0}, "large", contig, contig, contig, unif(-1, 1), true)
	add(f32, argMaxShape{[]int{64, 16411}, 1}, "large", contig, offset, offset, nil, true)
	return cs
}

func argMaxCase(e *env, dt dtype.DType, as argMaxShape, sl, vl, il layout, g gen) {
	if g == nil {
		g = tieGen(dt)
	}
	dshape := append([]int(nil), as.shape...)
	dshape[as.axis] = 1
	src := e.in("src", dt, as.shape, sl, g)
	vals := e.out("values", dt, dshape, vl).exact()
	idx := e.out("indices", i64, dshape, il)
	e.call(func(s side) error { return s.d.ArgMax(s.v(vals), s.v(idx), s.v(src), as.axis) })
}

func sumSquaresCases() []Case {
	var cs []Case
	for _, dt := range floats {
		for _, n := range []int{0, 1, 1000, 4099} {
			cs = append(cs, Case{Name: fmt.Sprintf("SumSquares/%s/%d", short(dt), n), run: func(e *env) { sumSquaresCase(e, dt, n) }})
		}
	}
	for _, dt := range []dtype.DType{f32, bf16} {
		cs = append(cs, Case{Name: fmt.Sprintf("SumSquares/%s/large", short(dt)), Large: true, run: func(e *env) { sumSquaresCase(e, dt, 1<<20+7) }})
	}
	return cs
}

func sumSquaresCase(e *env, dt dtype.DType, n int) {
	x := e.in("x", dt, []int{n}, offset, unif(-2, 2))
	var res [2]float64
	if e.call(func(s side) error {
		v, err := s.d.SumSquares(s.v(x))
		res[s.i] = v
		return err
	}) {
		e.compareScalar("SumSquares", accType(dt), res[0], res[1], n, 4)
	}
}
