package devicetest

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// IndexSelect, IndexAdd, Gather and ScatterAdd.

type indexSpec struct {
	name  string
	dst   []int // IndexAdd / ScatterAdd destination; IndexSelect / Gather source
	src   []int // IndexAdd / ScatterAdd source; unused otherwise
	index []int
	axis  int
	large bool
}

// indexValues draws n indices in [0, extent).
func (e *env) indexValues(n, extent int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(e.r.IntN(extent))
	}
	return v
}

var indexLayouts = []struct {
	name            string
	big, small, idx layout
}{
	{"contig", contig, contig, contig},
	{"strided", transposed, strided, strided},
}

func indexSelectCases() []Case {
	specs := []indexSpec{
		{name: "embedding", dst: []int{50, 33}, index: []int{20}, axis: 0},
		{name: "columns", dst: []int{8, 40}, index: []int{12}, axis: 1},
		{name: "middle", dst: []int{4, 9, 7}, index: []int{5}, axis: 1},
		{name: "empty", dst: []int{50, 33}, index: []int{0}, axis: 0},
	}
	var cs []Case
	for i, sp := range specs {
		dts := []dtype.DType{f32, i64}
		if i == 0 {
			dts = dtype.All
		}
		for _, dt := range dts {
			for _, l := range indexLayouts {
				cs = append(cs, Case{Name: fmt.Sprintf("IndexSelect/%s/%s/%s", short(dt), sp.name, l.name), run: func(e *env) {
					src := e.in("src", dt, sp.dst, l.big, nil)
					index := e.inVals("index", i64, sp.index, l.idx, e.indexValues(sp.index[0], sp.dst[sp.axis]))
					shape := append([]int(nil), sp.dst...)
					shape[sp.axis] = sp.index[0]
					dst := e.out("dst", dt, shape, l.small).exact()
					e.note("axis %d", sp.axis)
					e.call(func(s side) error { return s.d.IndexSelect(s.v(dst), s.v(src), s.v(index), sp.axis) })
				}})
			}
		}
	}
	cs = append(cs, Case{Name: "IndexSelect/f32/embedding/large", Large: true, run: func(e *env) {
		src := e.in("src", f32, []int{4099, 256}, contig, nil)
		index := e.inVals("index", i64, []int{4096}, contig, e.indexValues(4096, 4099))
		dst := e.out("dst", f32, []int{4096, 256}, contig).exact()
		e.call(func(s side) error { return s.d.IndexSelect(s.v(dst), s.v(src), s.v(index), 0) })
	}})
	return cs
}

// maxCount returns the largest number of additions into one element of
// dst when slice i of the indexed axis goes to index[i].
func maxCount(idx []float64) int {
	c := map[float64]int{}
	m := 0
	for _, v := range idx {
		c[v]++
		m = max(m, c[v])
	}
	return m
}

func indexAddCases() []Case {
	specs := []indexSpec{
		{name: "embedding", dst: []int{50, 33}, src: []int{20, 33}, index: []int{20}, axis: 0},
		{name: "columns", dst: []int{8, 40}, src: []int{8, 12}, index: []int{12}, axis: 1},
		{name: "middle", dst: []int{4, 9, 7}, src: []int{4, 6, 7}, index: []int{6}, axis: 1},
		{name: "embedding", dst: []int{4099, 256}, src: []int{4096, 256}, index: []int{4096}, axis: 0, large: true},
	}
	var cs []Case
	for i, sp := range specs {
		dts := []dtype.DType{f32}
		if i == 0 {
			dts = []dtype.DType{f32, f64, i64, bf16, f16}
		}
		ls := indexLayouts
		if sp.large {
			ls = ls[:1]
		}
		for _, dt := range dts {
			for _, l := range ls {
				name := fmt.Sprintf("IndexAdd/%s/%s/%s", short(dt), sp.name, l.name)
				if sp.large {
					name += "/large"
				}
				cs = append(cs, Case{Name: name, Large: sp.large, run: func(e *env) {
					iv := e.indexValues(sp.index[0], sp.dst[sp.axis])
					dst := e.inout("dst", dt, sp.dst, l.small, nil)
					src := e.in("src", dt, sp.src, l.big, nil)
					index := e.inVals("index", i64, sp.index, l.idx, iv)
					accumulate(dst, maxCount(iv))
					e.note("axis %d", sp.axis)
					e.call(func(s side) error { return s.d.IndexAdd(s.v(dst), s.v(src), s.v(index), sp.axis) })
				}})
			}
		}
	}
	return cs
}

// accumulate sets the tolerance of a destination that receives up to n
// additions per element.
func accumulate(dst view, n int) {
	dst.sums(n+1, 1)
	if isHalf(dst.t.dt) {
		dst.t.tolMul = float64(max(1, n))
	}
}

func gatherSpecs() []indexSpec {
	return []indexSpec{
		{name: "axis1", dst: []int{6, 9, 7}, index: []int{6, 5, 7}, axis: 1},
		{name: "smaller", dst: []int{6, 9, 7}, index: []int{4, 5, 3}, axis: 1},
		{name: "axis0", dst: []int{6, 9, 7}, index: []int{10, 9, 7}, axis: 0},
		{name: "axis2", dst: []int{6, 9, 7}, index: []int{6, 9, 12}, axis: 2},
		{name: "rank1", dst: []int{100}, index: []int{37}, axis: 0},
	}
}

func gatherCases() []Case {
	var cs []Case
	for i, sp := range gatherSpecs() {
		dts := []dtype.DType{f32}
		if i == 0 {
			dts = dtype.All
		}
		for _, dt := range dts {
			for _, l := range indexLayouts {
				cs = append(cs, Case{Name: fmt.Sprintf("Gather/%s/%s/%s", short(dt), sp.name, l.name), run: func(e *env) {
					gatherCase(e, dt, sp, l.big, l.small, l.idx)
				}})
			}
		}
	}
	cs = append(cs, Case{Name: "Gather/f32/large", Large: true, run: func(e *env) {
		gatherCase(e, f32, indexSpec{dst: []int{1024, 1031}, index: []int{1024, 1024}, axis: 1}, contig, contig, contig)
	}})
	return cs
}

func gatherCase(e *env, dt dtype.DType, sp indexSpec, sl, dl, il layout) {
	src := e.in("src", dt, sp.dst, sl, nil)
	index := e.inVals("index", i64, sp.index, il, e.indexValues(numel(sp.index), sp.dst[sp.axis]))
	dst := e.out("dst", dt, sp.index, dl).exact()
	e.note("axis %d", sp.axis)
	e.call(func(s side) error { return s.d.Gather(s.v(dst), s.v(src), s.v(index), sp.axis) })
}

func scatterAddCases() []Case {
	var cs []Case
	specs := gatherSpecs()[:4]
	specs = append(specs, indexSpec{name: "larger-src", dst: []int{6, 9, 7}, src: []int{6, 8, 7}, index: []int{6, 5, 7}, axis: 1})
	for i, sp := range specs {
		dts := []dtype.DType{f32}
		if i == 0 {
			dts = []dtype.DType{f32, f64, i64, bf16, f16}
		}
		for _, dt := range dts {
			for _, l := range indexLayouts {
				cs = append(cs, Case{Name: fmt.Sprintf("ScatterAdd/%s/%s/%s", short(dt), sp.name, l.name), run: func(e *env) {
					scatterAddCase(e, dt, sp, l.small, l.big, l.idx)
				}})
			}
		}
	}
	cs = append(cs, Case{Name: "ScatterAdd/f32/large", Large: true, run: func(e *env) {
		scatterAddCase(e, f32, indexSpec{dst: []int{1024, 64}, index: []int{1024, 1024}, axis: 1}, contig, contig, contig)
	}})
	return cs
}

func scatterAddCase(e *env, dt dtype.DType, sp indexSpec, dl, sl, il layout) {
	srcShape := sp.src
	if srcShape == nil {
		srcShape = sp.index
	}
	iv := e.indexValues(numel(sp.index), sp.dst[sp.axis])
	dst := e.inout("dst", dt, sp.dst, dl, nil)
	src := e.in("src", dt, srcShape, sl, nil)
	index := e.inVals("index", i64, sp.index, il, iv)
	// The largest number of additions into one element of dst.
	counts := map[int]int{}
	m := 0
	forEach(sp.index, device.ContiguousStrides(sp.index), 0, func(i, _ int) {
		pos := unravel(i, sp.index)
		pos[sp.axis] = int(iv[i])
		k := 0
		for d, p := range pos {
			k = k*sp.dst[d] + p
		}
		counts[k]++
		m = max(m, counts[k])
	})
	accumulate(dst, m)
	e.note("axis %d", sp.axis)
	e.call(func(s side) error { return s.d.ScatterAdd(s.v(dst), s.v(src), s.v(index), sp.axis) })
}
