package rand

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"testing"
)

// The 10000th output of MT19937 seeded with 5489 is 4123659995 (C++11
// [rand.predef]); PyTorch's engine is the standard one.
func TestMT19937Standard(t *testing.T) {
	g := New(5489)
	var v uint32
	for i := 0; i < 10000; i++ {
		v = g.Uint32()
	}
	if v != 4123659995 {
		t.Fatalf("10000th output = %d, want 4123659995", v)
	}
}

func TestSeedUsesLow32Bits(t *testing.T) {
	a, b := New(5), New(1<<32+5)
	for i := 0; i < 1000; i++ {
		if x, y := a.Uint32(), b.Uint32(); x != y {
			t.Fatalf("draw %d: %d != %d", i, x, y)
		}
	}
	if b.InitialSeed() != 1<<32+5 {
		t.Errorf("InitialSeed = %d", b.InitialSeed())
	}
}

func TestUint64IsHighThenLow(t *testing.T) {
	a, b := New(9), New(9)
	for i := 0; i < 100; i++ {
		hi, lo := a.Uint32(), a.Uint32()
		if got := b.Uint64(); got != uint64(hi)<<32|uint64(lo) {
			t.Fatalf("Uint64 = %#x, want %#x", got, uint64(hi)<<32|uint64(lo))
		}
	}
}

// drawAll exercises every fill and returns everything as float64s.
func drawAll(g *Generator) []float64 {
	var out []float64
	f32 := make([]float32, 37)
	f64 := make([]float64, 21)
	ints := make([]int64, 9)
	add32 := func() {
		for _, v := range f32 {
			out = append(out, float64(v))
		}
	}
	g.Normal32(f32[:5], 0.5, 2) // leaves a cached sample
	add32()
	g.Uniform32(f32, -1, 1)
	add32()
	g.Normal32(f32, 0, 1)
	add32()
	g.Normal64(f64, 0, 1)
	out = append(out, f64...)
	g.Normal64(f64[:3], 0, 1)
	out = append(out, f64...)
	g.Uniform64(f64, 0, 3)
	out = append(out, f64...)
	g.RandInt64(ints, -7, 7)
	g.RandInt64(ints[:4], 0, 1<<40)
	for _, v := range ints {
		out = append(out, float64(v))
	}
	for _, v := range g.Randperm(13) {
		out = append(out, float64(v))
	}
	g.Bernoulli32(f32, 0.3)
	add32()
	g.DropoutMask32(f32, 0.4)
	add32()
	out = append(out, float64(g.Uint32()), float64(g.Uint64()))
	return out
}

func equalBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

func TestDeterminism(t *testing.T) {
	for _, seed := range []uint64{0, 1, 42, 1<<40 + 7, math.MaxUint64} {
		a, b := drawAll(New(seed)), drawAll(New(seed))
		if !equalBits(a, b) {
			t.Errorf("seed %d: two generators disagree", seed)
		}
		g := New(seed + 1)
		g.Uint32()
		g.Seed(seed) // reseeding also drops the cached normal sample
		if !equalBits(a, drawAll(g)) {
			t.Errorf("seed %d: Seed does not reset the generator", seed)
		}
	}
}

// Uniform fills draw one value per element in order, so they can be split.
func TestUniformSplits(t *testing.T) {
	whole := make([]float32, 100)
	New(3).Uniform32(whole, -2, 5)
	g := New(3)
	parts := make([]float32, 100)
	g.Uniform32(parts[:37], -2, 5)
	g.Uniform32(parts[37:], -2, 5)
	for i := range whole {
		if whole[i] != parts[i] {
			t.Fatalf("element %d: %v != %v", i, whole[i], parts[i])
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	// Positions: just seeded (left == 1), mid-block with a cached normal
	// sample, and on both sides of a twist.
	for _, skip := range []int{0, 3, 622, 623, 624, 625, 1500} {
		g := New(77)
		for i := 0; i < skip; i++ {
			g.Uint32()
		}
		if skip == 3 {
			g.Normal32(make([]float32, 1), 0, 1) // cache a sample
		}
		st := g.State()
		want := drawAll(g)

		h := New(1)
		h.Normal64(make([]float64, 1), 0, 1) // a stale cached sample must be replaced
		if err := h.SetState(st); err != nil {
			t.Fatalf("skip %d: %v", skip, err)
		}
		if !bytes.Equal(h.State(), st) {
			t.Fatalf("skip %d: State after SetState differs", skip)
		}
		if !equalBits(drawAll(h), want) {
			t.Errorf("skip %d: restored generator diverges", skip)
		}
		if h.InitialSeed() != 77 {
			t.Errorf("skip %d: InitialSeed = %d", skip, h.InitialSeed())
		}

		// The PyTorch layout carries the same information.
		k := New(2)
		if err := k.SetTorchState(New(0).TorchState()); err != nil {
			t.Fatal(err)
		}
		if err := k.SetState(st); err != nil {
			t.Fatal(err)
		}
		ts := k.TorchState()
		if err := k.SetTorchState(ts); err != nil {
			t.Fatalf("skip %d: %v", skip, err)
		}
		if !bytes.Equal(k.State(), st) {
			t.Errorf("skip %d: TorchState round trip changes the state", skip)
		}
	}
}

func TestSetStateRejectsMalformed(t *testing.T) {
	good := New(5).State()
	mod := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	le := binary.LittleEndian
	cases := map[string][]byte{
		"nil":       nil,
		"short":     good[:100],
		"long":      append(append([]byte(nil), good...), 0),
		"magic":     mod(func(b []byte) []byte { b[0] = 'X'; return b }),
		"version":   mod(func(b []byte) []byte { le.PutUint32(b[4:], 2); return b }),
		"flags":     mod(func(b []byte) []byte { le.PutUint32(b[24:], 9); return b }),
		"unseeded":  mod(func(b []byte) []byte { le.PutUint32(b[24:], 0); return b }),
		"left0":     mod(func(b []byte) []byte { le.PutUint32(b[16:], 0); return b }),
		"left625":   mod(func(b []byte) []byte { le.PutUint32(b[16:], 625); return b }),
		"next625":   mod(func(b []byte) []byte { le.PutUint32(b[20:], 625); return b }),
		"overreach": mod(func(b []byte) []byte { le.PutUint32(b[16:], 300); le.PutUint32(b[20:], 400); return b }),
	}
	for name, b := range cases {
		g := New(9)
		before := g.State()
		if err := g.SetState(b); err == nil {
			t.Errorf("%s: SetState accepted a malformed state", name)
		}
		if !bytes.Equal(g.State(), before) {
			t.Errorf("%s: failed SetState changed the generator", name)
		}
	}

	tgood := New(5).TorchState()
	tmod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), tgood...)
		f(b)
		return b
	}
	tcases := map[string][]byte{
		"short":    tgood[:5048], // the pre-1.5 legacy size is not accepted
		"unseeded": tmod(func(b []byte) { le.PutUint32(b[12:], 0) }),
		"left0":    tmod(func(b []byte) { le.PutUint32(b[8:], 0) }),
		"leftneg":  tmod(func(b []byte) { le.PutUint32(b[8:], 0xffffffff) }),
		"next":     tmod(func(b []byte) { le.PutUint64(b[16:], 1<<40) }),
	}
	for name, b := range tcases {
		g := New(9)
		if err := g.SetTorchState(b); err == nil {
			t.Errorf("torch %s: SetTorchState accepted a malformed state", name)
		}
	}
}

// Random corruption must give an error or a usable generator, never a panic.
func TestSetStateNeverPanics(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	good := New(5).State()
	tgood := New(5).TorchState()
	for i := 0; i < 5000; i++ {
		for _, base := range [][]byte{good, tgood} {
			b := append([]byte(nil), base...)
			for j := r.IntN(4); j >= 0; j-- {
				b[r.IntN(len(b))] = byte(r.Uint32())
			}
			if r.IntN(10) == 0 {
				b = b[:r.IntN(len(b)+1)]
			}
			g := New(1)
			if g.SetState(b) == nil {
				drawAll(g)
			}
			g = New(1)
			if g.SetTorchState(b) == nil {
				drawAll(g)
			}
		}
	}
}

func FuzzSetState(f *testing.F) {
	f.Add(New(5).State())
	f.Add(New(5).TorchState())
	f.Fuzz(func(t *testing.T, b []byte) {
		g := New(1)
		if g.SetState(b) == nil {
			drawAll(g)
		}
		g = New(1)
		if g.SetTorchState(b) == nil {
			drawAll(g)
		}
	})
}

func TestPanicsOnInvalidArguments(t *testing.T) {
	g := New(0)
	for name, f := range map[string]func(){
		"uniform from>to":   func() { g.Uniform32(make([]float32, 1), 1, 0) },
		"uniform NaN":       func() { g.Uniform64(make([]float64, 1), math.NaN(), 1) },
		"uniform overflow":  func() { g.Uniform32(make([]float32, 1), -3e38, 3e38) },
		"normal std<0":      func() { g.Normal32(make([]float32, 20), 0, -1) },
		"randint empty":     func() { g.RandInt64(make([]int64, 1), 3, 3) },
		"randperm negative": func() { g.Randperm(-1) },
		"bernoulli p>1":     func() { g.Bernoulli32(make([]float32, 1), 1.5) },
		"dropout p<0":       func() { g.DropoutMask32(make([]float32, 1), -0.1) },
		"linear shape":      func() { LinearInit(g, make([]float32, 5), nil, 2, 3) },
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

func TestDropoutEdges(t *testing.T) {
	g := New(0)
	m := make([]float32, 10)
	g.DropoutMask32(m, 0)
	g.DropoutMask32(m[:5], 1)
	for i, v := range m {
		want := float32(1)
		if i < 5 {
			want = 0
		}
		if v != want {
			t.Fatalf("mask[%d] = %v, want %v", i, v, want)
		}
	}
	if g.Uint32() != New(0).Uint32() {
		t.Error("p = 0 or 1 must not draw")
	}
}

// The weight bound of the default Linear init is one ulp below 1/sqrt(fan_in)
// in float64 (a**2 is 5.000000000000001); values from Python.
func TestLinearBounds(t *testing.T) {
	for _, c := range []struct {
		fan  int
		w, b uint64
		wf32 float32
	}{
		{4, 0x3fdfffffffffffff, 0x3fe0000000000000, 0.5},
		{100, 0x3fb9999999999999, 0x3fb999999999999a, 0.1},
		{768, 0x3fa279a74590331c, 0x3fa279a74590331d, float32(1 / math.Sqrt(768))},
	} {
		w, b := LinearBounds(c.fan)
		if math.Float64bits(w) != c.w || math.Float64bits(b) != c.b {
			t.Errorf("fan %d: bounds %x %x", c.fan, math.Float64bits(w), math.Float64bits(b))
		}
		if float32(w) != c.wf32 {
			t.Errorf("fan %d: float32 weight bound %v, want %v", c.fan, float32(w), c.wf32)
		}
	}
}

// fma32 must round a*b+c once, like vfmadd*ss; check against exact rational
// arithmetic, including inputs built to hit float32 halfway points.
func TestFMA32(t *testing.T) {
	exact := func(a, b, c float32) float32 {
		x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetFloat64(float64(c)))
		f, _ := x.Float32()
		return f
	}
	r := mrand.New(mrand.NewPCG(3, 4))
	check := func(a, b, c float32) {
		if got, want := fma32(a, b, c), exact(a, b, c); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%v, %v, %v) = %v, want %v", a, b, c, got, want)
		}
	}
	for i := 0; i < 200000; i++ {
		a := math.Float32frombits(r.Uint32()&0x3fffffff | 0x20000000)
		b := math.Float32frombits(r.Uint32()&0x3fffffff | 0x20000000)
		if r.IntN(2) == 0 {
			a = -a
		}
		p := float64(a) * float64(b)
		// c near -a*b's float32 neighbours, so that the sum has few bits and
		// double rounding in float64 is likely; or a plain random value.
		var c float32
		switch r.IntN(3) {
		case 0:
			c = -float32(p)
		case 1:
			c = math.Float32frombits(math.Float32bits(float32(p)) + uint32(r.IntN(5)) - 2)
		default:
			c = math.Float32frombits(r.Uint32()&0x3fffffff | 0x20000000)
		}
		check(a, b, c)
	}
	// A product whose exact value lies just off a float32 halfway point: the
	// float64 sum rounds onto the halfway point, float32 must not round again
	// the wrong way.
	a := float32(1 + 0x1p-12)
	check(a, a, 0x1p-48)
	check(a, a, -0x1p-48)
	check(a, -a, 0x1p-60)
	check(0x1p-100, 0x1p-40, 0) // subnormal result
	check(0x1p-70, 0x1p-70, 0x1p-149)
}

// The avx_mathfun constants are float literals converted by the C compiler;
// these are the bits in libtorch_cpu.so.
func TestAVXConstants(t *testing.T) {
	for _, c := range []struct {
		v    float32
		bits uint32
	}{
		{cephesSQRTHF, 0x3f3504f3}, {logP0, 0x3d9021bb}, {logP1, 0xbdebd1b8}, {logP2, 0x3def251a},
		{logP3, 0xbdfe5d4f}, {logP4, 0x3e11e9bf}, {logP5, 0xbe2aae50}, {logP6, 0x3e4cceac},
		{logP7, 0xbe7ffffc}, {logP8, 0x3eaaaaaa}, {logQ1, 0xb95e8083}, {logQ2, 0x3f318000},
		{minusDP1, 0xbf490000}, {minusDP2, 0xb97da000}, {minusDP3, 0xb3222169},
		{sincofP0, 0xb94ca1f9}, {sincofP1, 0x3c08839e}, {sincofP2, 0xbe2aaaa3},
		{coscofP0, 0x37ccf5ce}, {coscofP1, 0xbab6061a}, {coscofP2, 0x3d2aaaa5},
		{cephesFOPI, 0x3fa2f983}, {twoPiF32, 0x40c90fdb},
	} {
		if math.Float32bits(c.v) != c.bits {
			t.Errorf("%v has bits %#x, want %#x", c.v, math.Float32bits(c.v), c.bits)
		}
	}
}

const benchN = 16 << 20

func BenchmarkUniform32(b *testing.B) {
	g := New(0)
	dst := make([]float32, benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		g.Uniform32(dst, -1, 1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchN, "ns/elem")
}

func BenchmarkNormal32(b *testing.B) {
	g := New(0)
	dst := make([]float32, benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		g.Normal32(dst, 0, 1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchN, "ns/elem")
}

// BenchmarkNormal32Go is BenchmarkNormal32 with the portable transform.
func BenchmarkNormal32Go(b *testing.B) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	useAVX2 = false
	BenchmarkNormal32(b)
}

func BenchmarkNormal64(b *testing.B) {
	g := New(0)
	dst := make([]float64, benchN)
	b.SetBytes(8 * benchN)
	for b.Loop() {
		g.Normal64(dst, 0, 1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchN, "ns/elem")
}

// The fast FMA mode of the float32 normal kernel must agree with the exact
// mode it falls back to, block for block, including on inputs with few
// significant bits (where float64 sums are often exact and on float32
// halfway points) and with means and stds that make results tiny.
func TestNormalFastMatchesExact(t *testing.T) {
	r := mrand.New(mrand.NewPCG(5, 6))
	params := [][2]float32{{0, 1}, {0.5, 2}, {-3, 0.02}, {1, 1e-30}, {0, 1e-38}, {0, 0}}
	suspects := 0
	for i := 0; i < 60000; i++ {
		var d [16]float32
		for j := range d {
			switch r.IntN(3) {
			case 0:
				d[j] = float32(r.Uint32()>>8) * 0x1p-24
			case 1:
				d[j] = float32(r.IntN(256)) / 256
			default:
				d[j] = float32(r.Uint32()>>8|1) * 0x1p-24 * float32(r.IntN(2))
			}
		}
		p := params[i%len(params)]
		m, s := splat(p[0]), splat(p[1])
		var u1, u2, fast1, fast2, ex1, ex2 v8
		copy(u1[:], d[:8])
		copy(u2[:], d[8:])
		k := fmaLanes{}
		k.reset()
		k.normal16(&fast1, &fast2, &u1, &u2, &m, &s)
		e := fmaLanes{exact: true}
		e.normal16(&ex1, &ex2, &u1, &u2, &m, &s)
		if k.suspect() {
			suspects++
			continue // normal16AVX2 would redo this block exactly
		}
		for j := range fast1 {
			if math.Float32bits(fast1[j]) != math.Float32bits(ex1[j]) || math.Float32bits(fast2[j]) != math.Float32bits(ex2[j]) {
				t.Fatalf("block %v mean %v std %v lane %d: fast %v %v, exact %v %v",
					d, p[0], p[1], j, fast1[j], fast2[j], ex1[j], ex2[j])
			}
		}
	}
	// Only the tiny stds (1e-38: subnormal products) should need the
	// fallback; the rest must mostly be checked here.
	if suspects > 60000/len(params)+1000 {
		t.Errorf("%d of 60000 blocks fell back to exact mode", suspects)
	}
	t.Logf("%d of 60000 blocks fell back to exact mode", suspects)
}

// The portable Go transform must reproduce PyTorch as well as the assembly
// one (TestFixtures uses the assembly where the CPU has AVX2 and FMA)...
func TestFixturesPureGo(t *testing.T) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	useAVX2 = false
	TestFixtures(t)
}

// ...and so must its exact fallback alone.
func TestFixturesExactFMA(t *testing.T) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	useAVX2 = false
	forceExactFMA = true
	defer func() { forceExactFMA = false }()
	TestFixtures(t)
}

// The assembly transform must agree bit for bit with the Go one, on the
// uniforms the generator produces (multiples of 2^-24 in [0, 1), 0 and the
// largest included) and on arbitrary floats in [0, 1), with means and stds
// that make the results tiny or subnormal.
func TestNormalAVX2MatchesGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 and FMA assembly on this machine")
	}
	r := mrand.New(mrand.NewPCG(7, 8))
	params := [][2]float32{{0, 1}, {0.5, 2}, {-3, 0.02}, {1, 1e-30}, {0, 1e-38}, {0, 0}, {-0.25, 3.5}, {1e30, 1e-10}}
	const blocks = 64
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := 0; i < n; i++ {
		d := make([]float32, 16*blocks)
		for j := range d {
			switch r.IntN(5) {
			case 0:
				d[j] = float32(r.Uint32()>>8) * 0x1p-24
			case 1:
				d[j] = float32(r.IntN(256)) / 256
			case 2:
				d[j] = [...]float32{0, 0x1p-24, 1 - 0x1p-24, 0.5, 0.25, 0.125, 0.75}[r.IntN(7)]
			case 3:
				d[j] = float32(r.Float64()) * 0.99999994 // any float in [0, 1)
			default:
				d[j] = math.Float32frombits(r.Uint32() % 0x3f800000) // any bits below 1
			}
		}
		p := params[i%len(params)]
		want := append([]float32(nil), d...)
		normalBlocksGo(want, p[0], p[1])
		normalBlocksAVX2(&d[0], blocks, p[0], p[1])
		for j := range d {
			if math.Float32bits(d[j]) != math.Float32bits(want[j]) {
				t.Fatalf("mean %v std %v element %d: assembly %v, Go %v", p[0], p[1], j, d[j], want[j])
			}
		}
	}
}
