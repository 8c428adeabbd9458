package tensor_test

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/rand"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// randomCase is a fill with its reference: the whole fill as the engine
// always computed it, on a Go slice (wide: float64), before the rounding to
// the tensor's type.
type randomCase struct {
	name string
	fill tensor.RandomFill
	ref  func(g *rand.Generator, n int, wide bool) []float64
}

func refUniform(from, to float64) func(*rand.Generator, int, bool) []float64 {
	return func(g *rand.Generator, n int, wide bool) []float64 {
		if wide {
			v := make([]float64, n)
			g.Uniform64(v, from, to)
			return v
		}
		v := make([]float32, n)
		g.Uniform32(v, from, to)
		return widen32(v)
	}
}

func refNormal(mean, std float64) func(*rand.Generator, int, bool) []float64 {
	return func(g *rand.Generator, n int, wide bool) []float64 {
		if wide {
			v := make([]float64, n)
			g.Normal64(v, mean, std)
			return v
		}
		v := make([]float32, n)
		g.Normal32(v, mean, std)
		return widen32(v)
	}
}

// refTruncNormal is torch.nn.init.trunc_normal_ as script/init_native.go
// computed it, with the uniform draw of uniform_ (PyTorch's).
func refTruncNormal(mean, std, a, b float64) func(*rand.Generator, int, bool) []float64 {
	return func(g *rand.Generator, n int, wide bool) []float64 {
		cdf := func(x float64) float64 { return (1 + math.Erf(x/math.Sqrt2)) / 2 }
		lo, hi := 2*cdf((a-mean)/std)-1, 2*cdf((b-mean)/std)-1
		u := refUniform(lo, hi)(g, n, wide)
		round := func(v float64) float64 { return float64(float32(v)) }
		if wide {
			round = func(v float64) float64 { return v }
		}
		scale, shift, fa, fb := round(std*math.Sqrt2), round(mean), round(a), round(b)
		for i, v := range u {
			x := round(math.Erfinv(v))
			x = round(x * scale)
			x = round(x + shift)
			u[i] = math.Min(math.Max(x, fa), fb)
		}
		return u
	}
}

func widen32(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

var randomCases = []randomCase{
	{"uniform", tensor.Uniform(-0.3, 0.7), refUniform(-0.3, 0.7)},
	{"rand", tensor.Uniform(0, 1), refUniform(0, 1)},
	{"normal", tensor.Normal(0.25, 0.02), refNormal(0.25, 0.02)},
	{"randn", tensor.Normal(0, 1), refNormal(0, 1)},
	{"truncNormal", tensor.TruncNormal(0.5, 2, -1, 3), refTruncNormal(0.5, 2, -1, 3)},
}

var randomSizes = []int{0, 1, 15, 16, 17, 31, 32, 33, 1000, 1<<20 + 5}

var randomDTypes = []tensor.DType{tensor.Float32, tensor.Float64, tensor.BFloat16, tensor.Float16}

// newGen returns a generator with a cached Box-Muller sample, which fills
// below 16 normal elements use and larger ones leave alone.
func newGen() *rand.Generator {
	g := rand.New(99)
	g.Normal32(make([]float32, 3), 0, 1)
	return g
}

// rounded returns ref's values rounded to dt, as float64s.
func rounded(t *testing.T, rt *tensor.Runtime, dt tensor.DType, ref []float64) []float64 {
	t.Helper()
	if dt == tensor.Float64 || dt == tensor.Float32 || len(ref) == 0 {
		return ref
	}
	src := make([]float32, len(ref))
	for i, v := range ref {
		src[i] = float32(v)
	}
	h := rt.FromFloat32s(src, len(src))
	c := h.To(dt)
	out, err := c.Float64s()
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	c.Release()
	return out
}

func values64(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	v, err := x.Float64s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func equalValues(t *testing.T, what string, got, want []float64) {
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

// TestFillRandomMatchesWholeFill: FillRandom in place (contiguous and
// strided), FillRandomRange over ranges at odd boundaries, Advance, Rand,
// Randn, UniformFill and NormalFill give exactly the values of the whole
// fill on a Go slice, rounded once to the tensor's type, and leave the
// generator as that fill does, for every fill, size and floating type.
func TestFillRandomMatchesWholeFill(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	for _, c := range randomCases {
		for _, dt := range randomDTypes {
			for _, n := range randomSizes {
				if n > 1<<20 && testing.Short() && (dt == tensor.BFloat16 || dt == tensor.Float16) {
					continue // the float32 fill at this size, rounded as at every other
				}
				name := fmt.Sprintf("%s/%v/%d", c.name, dt, n)
				gw := newGen()
				want := rounded(t, rt, dt, c.ref(gw, n, dt == tensor.Float64))
				wantState := gw.State()
				sameState := func(what string, g *rand.Generator) {
					t.Helper()
					if !bytes.Equal(g.State(), wantState) {
						t.Fatalf("%s %s: the generator's state differs from the whole fill's", name, what)
					}
				}
				inScope(rt, func() {
					// In place, contiguous.
					g := newGen()
					x := rt.Empty(dt, n)
					if err := x.FillRandom(g, c.fill); err != nil {
						t.Fatal(err)
					}
					equalValues(t, name+" FillRandom", values64(t, x), want)
					sameState("FillRandom", g)

					// A strided view: every other element of a [n, 2] tensor.
					g = newGen()
					base := rt.Zeros(dt, n, 2)
					col := base.Narrow(1, 1, 1)
					if err := col.FillRandom(g, c.fill); err != nil {
						t.Fatal(err)
					}
					sameState("strided", g)
					if n > 0 { // (reading an empty view at an offset fails in the CPU device's Download)
						equalValues(t, name+" strided", values64(t, col), want)
						if z := values64(t, base.Narrow(1, 0, 1)); z[0] != 0 || z[n-1] != 0 {
							t.Fatalf("%s strided: wrote outside the view", name)
						}
					}

					// Ranges.
					for _, r := range fillRanges(n) {
						g := newGen()
						x := rt.Empty(dt, r[1]-r[0])
						if err := x.FillRandomRange(g, c.fill, n, r[0]); err != nil {
							t.Fatal(err)
						}
						equalValues(t, fmt.Sprintf("%s range [%d, %d)", name, r[0], r[1]), values64(t, x), want[r[0]:r[1]])
						sameState(fmt.Sprintf("range [%d, %d)", r[0], r[1]), g)
					}

					g = newGen()
					if err := c.fill.Advance(g, dt, n); err != nil {
						t.Fatal(err)
					}
					sameState("Advance", g)
				})
			}
		}
	}
	// The creators and the old fills are FillRandom.
	for _, dt := range randomDTypes {
		for _, n := range []int{5, 33, 1000} {
			inScope(rt, func() {
				wide := dt == tensor.Float64
				g := newGen()
				ref := rounded(t, rt, dt, refUniform(0, 1)(g, n, wide))
				ref = append(ref, rounded(t, rt, dt, refNormal(0, 1)(g, n, wide))...)
				ref = append(ref, rounded(t, rt, dt, refUniform(-2, 5)(g, n, wide))...)
				ref = append(ref, rounded(t, rt, dt, refNormal(3, 0.5)(g, n, wide))...)
				g = newGen()
				var got []float64
				got = append(got, values64(t, rt.RandWith(g, dt, n))...)
				got = append(got, values64(t, rt.RandnWith(g, dt, n))...)
				x := rt.Empty(dt, n)
				if err := x.UniformFill(g, -2, 5); err != nil {
					t.Fatal(err)
				}
				got = append(got, values64(t, x)...)
				if err := x.NormalFill(g, 3, 0.5); err != nil {
					t.Fatal(err)
				}
				got = append(got, values64(t, x)...)
				equalValues(t, fmt.Sprintf("Rand, Randn, UniformFill, NormalFill %v %d", dt, n), got, ref)
			})
		}
	}
}

// fillRanges returns ranges [lo, hi) of a fill of n elements at odd
// boundaries: inside a block of 16, across blocks, across the start of the
// redrawn tail (n-16) and the end of the last full block, empty and whole.
func fillRanges(n int) [][2]int {
	var rs [][2]int
	add := func(lo, hi int) {
		lo, hi = max(lo, 0), min(hi, n)
		if lo <= hi {
			rs = append(rs, [2]int{lo, hi})
		}
	}
	add(0, n)
	add(n/2, n/2)
	add(0, 1)
	add(n-1, n)
	add(3, 13)
	add(7, 40)
	add(n-17, n-14)
	add(n-20, n)
	add(n&^15-3, n&^15+2)
	add(n/3+5, 2*n/3+11)
	return rs
}

// A transposed view is filled in its own row-major order, as copy_ of a
// new tensor of its shape would fill it.
func TestFillRandomTransposed(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	for _, c := range randomCases {
		for _, shape := range [][2]int{{3, 7}, {5, 40}, {300, 301}, {2, 70000}, {70000, 3}} {
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				inScope(rt, func() {
					n := shape[0] * shape[1]
					gw := newGen()
					want := rounded(t, rt, dt, c.ref(gw, n, false))
					x := rt.Empty(dt, shape[0], shape[1]).T()
					g := newGen()
					if err := x.FillRandom(g, c.fill); err != nil {
						t.Fatal(err)
					}
					equalValues(t, fmt.Sprintf("%s %v transposed %v", c.name, dt, shape), values64(t, x), want)
					if !bytes.Equal(g.State(), gw.State()) {
						t.Fatalf("%s %v transposed %v: generator state differs", c.name, dt, shape)
					}
				})
			}
		}
	}
}

func TestFillRandomErrors(t *testing.T) {
	rt := tensor.NewRuntime(cpu.New(cpu.Options{}), 0)
	g := rand.New(1)
	x := rt.Empty(tensor.Float32, 10)
	ints := rt.Empty(tensor.Int64, 10)
	for name, err := range map[string]error{
		"negative std":      x.FillRandom(g, tensor.Normal(0, -1)),
		"bounds reversed":   x.FillRandom(g, tensor.Uniform(1, 0)),
		"trunc std 0":       x.FillRandom(g, tensor.TruncNormal(0, 0, -2, 2)),
		"trunc a >= b":      x.FillRandom(g, tensor.TruncNormal(0, 1, 2, 2)),
		"integer tensor":    ints.FillRandom(g, tensor.Normal(0, 1)),
		"empty RandomFill":  x.FillRandom(g, tensor.RandomFill{}),
		"range past end":    x.FillRandomRange(g, tensor.Normal(0, 1), 15, 6),
		"negative lo":       x.FillRandomRange(g, tensor.Normal(0, 1), 15, -1),
		"advance integer":   tensor.Normal(0, 1).Advance(g, tensor.Int64, 5),
		"advance negative":  tensor.Normal(0, 1).Advance(g, tensor.Float32, -5),
		"rand of integers":  rt.Rand(tensor.Int64, 3).Err(),
		"randn of negative": rt.Randn(tensor.Float32, -3).Err(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if !bytes.Equal(g.State(), rand.New(1).State()) {
		t.Error("a refused fill drew from the generator")
	}
}

// TestFillRandomMemory: initialising a 64 MiB tensor in place takes at most
// 1 MiB more device memory (the peak of live bytes) and allocates less than
// 8 MiB on the Go heap, with every initialiser, in float32 (in place), in
// bfloat16 (through a float32 chunk) and through a strided view.
func TestFillRandomMemory(t *testing.T) {
	const n = 16 << 20 // 64 MiB of float32
	rt := tensor.NewRuntime(cpu.New(cpu.Options{MaxMemory: 64<<20 + 1<<20}), 0)
	g := rand.New(3)
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		x := rt.Empty(dt, n)
		views := map[string]*tensor.Tensor{"contiguous": x}
		if dt == tensor.BFloat16 {
			views["strided"] = x.View(1<<12, 1<<12).T()
		}
		for vname, v := range views {
			for _, c := range randomCases {
				rt.ResetPeakMemStats()
				before := rt.Stats()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				alloc := ms.TotalAlloc
				if err := v.FillRandom(g, c.fill); err != nil {
					t.Fatalf("%v %s %s: %v", dt, vname, c.name, err)
				}
				runtime.ReadMemStats(&ms)
				peak := rt.Stats().PeakBytes - before.LiveBytes
				heap := ms.TotalAlloc - alloc
				t.Logf("%v %s %s: device peak +%d KiB, Go heap +%d KiB", dt, vname, c.name, peak>>10, heap>>10)
				if peak > 1<<20 {
					t.Errorf("%v %s %s: the device's peak rose by %d bytes", dt, vname, c.name, peak)
				}
				if heap >= 8<<20 {
					t.Errorf("%v %s %s: %d bytes allocated on the Go heap", dt, vname, c.name, heap)
				}
			}
		}
		x.Release()
	}
}

// inScope runs f with a scope open, releasing its tensors after.
func inScope(rt *tensor.Runtime, f func()) {
	s := rt.OpenScope()
	defer s.Close()
	f()
}
