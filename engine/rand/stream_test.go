package rand

import (
	"bytes"
	"fmt"
	"math"
	"testing"
)

// streamSizes are the fill sizes the stream tests cover: below the
// vectorised normal path, at and around its blocks of 16 and its redrawn
// tail, and one past a million (several engine twists and the worker pool).
var streamSizes = []int{0, 1, 15, 16, 17, 31, 32, 33, 1000, 1<<20 + 5}

// streamFill is one of the four fills with its stream.
type streamFill struct {
	name   string
	wide   bool
	whole  func(g *Generator, n int) []float64 // the fill as it always was
	stream func(g *Generator, n int) *Stream
}

var streamFills = []streamFill{
	{"uniform32", false, func(g *Generator, n int) []float64 {
		v := make([]float32, n)
		g.Uniform32(v, -0.3, 0.7)
		return widen(v)
	}, func(g *Generator, n int) *Stream { return g.Uniform32Stream(n, -0.3, 0.7) }},
	{"rand32", false, func(g *Generator, n int) []float64 {
		v := make([]float32, n)
		g.Uniform32(v, 0, 1)
		return widen(v)
	}, func(g *Generator, n int) *Stream { return g.Uniform32Stream(n, 0, 1) }},
	{"uniform64", true, func(g *Generator, n int) []float64 {
		v := make([]float64, n)
		g.Uniform64(v, -2, 3)
		return v
	}, func(g *Generator, n int) *Stream { return g.Uniform64Stream(n, -2, 3) }},
	{"normal32", false, func(g *Generator, n int) []float64 {
		v := make([]float32, n)
		g.Normal32(v, 0.25, 0.02)
		return widen(v)
	}, func(g *Generator, n int) *Stream { return g.Normal32Stream(n, 0.25, 0.02) }},
	{"normal64", true, func(g *Generator, n int) []float64 {
		v := make([]float64, n)
		g.Normal64(v, -1, 3)
		return v
	}, func(g *Generator, n int) *Stream { return g.Normal64Stream(n, -1, 3) }},
}

func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// read reads k elements of s as float64s.
func (f streamFill) read(s *Stream, k int) []float64 {
	if f.wide {
		v := make([]float64, k)
		s.Read64(v)
		return v
	}
	v := make([]float32, k)
	s.Read32(v)
	return widen(v)
}

// startGen returns a generator with a cached Box-Muller sample (five
// normals drawn), so that fills below 16 elements start from the cache and
// larger ones must leave it alone.
func startGen() *Generator {
	g := New(2024)
	g.Normal32(make([]float32, 5), 0, 1)
	return g
}

func sameBits(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestStreamMatchesWholeFill: read in chunks of any size, skipped in part
// (ranges starting and ending inside a block of 16, across the redrawn
// tail), or skipped whole, a stream gives exactly the whole fill's values
// and leaves the generator in the whole fill's state.
func TestStreamMatchesWholeFill(t *testing.T) {
	for _, f := range streamFills {
		for _, n := range streamSizes {
			gw := startGen()
			want := f.whole(gw, n)
			wantState := gw.State()
			check := func(what string, g *Generator, got []float64, lo int) {
				t.Helper()
				sameBits(t, fmt.Sprintf("%s n=%d %s", f.name, n, what), got, want[lo:lo+len(got)])
				if !bytes.Equal(g.State(), wantState) {
					t.Fatalf("%s n=%d %s: generator state differs from the whole fill's", f.name, n, what)
				}
			}
			chunks := []int{1, 7, 16, 100, 4096, 65536}
			if n > 100000 {
				chunks = []int{7, 16, 1000, 65536}
			}
			for _, c := range chunks {
				g := startGen()
				s := f.stream(g, n)
				var got []float64
				for s.Pos() < n {
					got = append(got, f.read(s, min(c, n-s.Pos()))...)
				}
				s.Finish()
				check(fmt.Sprintf("chunks of %d", c), g, got, 0)
			}
			// Reading everything needs no Finish.
			g := startGen()
			got := f.read(f.stream(g, n), n)
			check("whole", g, got, 0)

			g = startGen()
			f.stream(g, n).Finish()
			check("skipped whole", g, nil, 0)

			for _, r := range streamRanges(n) {
				g := startGen()
				s := f.stream(g, n)
				s.Skip(r[0])
				got := f.read(s, r[1]-r[0])
				s.Finish()
				s.Finish()
				check(fmt.Sprintf("range [%d, %d)", r[0], r[1]), g, got, r[0])
			}
			// Ranges read one after another with skips between them.
			if n >= 33 {
				g := startGen()
				s := f.stream(g, n)
				s.Skip(3)
				a := f.read(s, 10)
				s.Skip(0)
				s.Skip(n - 33)
				b := f.read(s, 20)
				s.Finish()
				sameBits(t, fmt.Sprintf("%s n=%d skips", f.name, n), append(a, b...), append(append([]float64(nil), want[3:13]...), want[n-20:]...))
				if !bytes.Equal(g.State(), wantState) {
					t.Fatalf("%s n=%d skips: generator state differs", f.name, n)
				}
			}
		}
	}
}

// streamRanges returns ranges [lo, hi) of a fill of n elements: empty,
// single elements, inside one block of 16, across blocks, over the start
// of the redrawn tail (n-16) and the last full block, and the whole.
func streamRanges(n int) [][2]int {
	var rs [][2]int
	add := func(lo, hi int) {
		lo, hi = max(lo, 0), min(hi, n)
		if lo <= hi {
			rs = append(rs, [2]int{lo, hi})
		}
	}
	add(0, 0)
	add(n, n)
	add(0, n)
	add(0, 1)
	add(n-1, n)
	add(3, 9)
	add(5, 40)
	add(16, 32)
	add(n/2, n/2+1)
	add(n-17, n-15)
	add(n-16, n)
	add(n-20, n-3)
	add(n&^15-5, n&^15+1)
	add(n&^15-16, n-16)
	add(n/3+1, 2*n/3+7)
	return rs
}

// TestStreamPureGo runs the stream test on the portable transform.
func TestStreamPureGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("TestStreamMatchesWholeFill already runs the portable transform")
	}
	defer func(v bool) { useAVX2 = v }(useAVX2)
	useAVX2 = false
	TestStreamMatchesWholeFill(t)
}

func TestStreamMisuse(t *testing.T) {
	g := New(1)
	for name, f := range map[string]func(){
		"Read64 of float32":   func() { g.Normal32Stream(20, 0, 1).Read64(make([]float64, 1)) },
		"Read32 of float64":   func() { g.Uniform64Stream(20, 0, 1).Read32(make([]float32, 1)) },
		"read past the end":   func() { g.Uniform32Stream(3, 0, 1).Read32(make([]float32, 4)) },
		"skip past the end":   func() { g.Normal32Stream(40, 0, 1).Skip(41) },
		"negative skip":       func() { g.Normal32Stream(40, 0, 1).Skip(-1) },
		"negative size":       func() { g.Normal32Stream(-1, 0, 1) },
		"negative std":        func() { g.Normal64Stream(3, 0, -1) },
		"bounds out of order": func() { g.Uniform32Stream(3, 1, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func BenchmarkNormal32Stream(b *testing.B) {
	g := New(0)
	dst := make([]float32, 64<<10)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		s := g.Normal32Stream(benchN, 0, 1)
		for s.Pos() < benchN {
			s.Read32(dst[:min(len(dst), benchN-s.Pos())])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchN, "ns/elem")
}

func BenchmarkSkipNormal32(b *testing.B) {
	g := New(0)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		g.Normal32Stream(benchN, 0, 1).Finish()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchN, "ns/elem")
}
