package rand

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// bigPrec is the precision of the math/big reference, far beyond the 2^-100
// that sincos aims at.
const bigPrec = 400

// bigPi is π to 150 decimal digits (about 498 bits).
var bigPi, _, _ = big.ParseFloat("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482534211706798214808651328230664709384460955058223172535940813", 10, bigPrec, big.ToNearestEven)

func newBig(x float64) *big.Float { return new(big.Float).SetPrec(bigPrec).SetFloat64(x) }

// bigSincos returns sin x and cos x to about bigPrec bits: x is reduced by
// the nearest multiple of π/2, then the Taylor series are summed until the
// terms vanish.
func bigSincos(x float64) (sin, cos *big.Float) {
	pio2 := new(big.Float).SetPrec(bigPrec).Quo(bigPi, newBig(2))
	q, _ := new(big.Float).SetPrec(bigPrec).Quo(newBig(x), pio2).Float64()
	n := math.Round(q)
	r := newBig(x)
	r.Sub(r, new(big.Float).SetPrec(bigPrec).Mul(pio2, newBig(n)))
	z := new(big.Float).SetPrec(bigPrec).Mul(r, r)
	series := func(term *big.Float, k int) *big.Float {
		sum := new(big.Float).SetPrec(bigPrec).Set(term)
		for ; term.Sign() != 0 && term.MantExp(nil)-sum.MantExp(nil) > -bigPrec-8; k += 2 {
			term.Mul(term, z)
			term.Quo(term, newBig(float64(-k*(k+1))))
			sum.Add(sum, term)
		}
		return sum
	}
	s := series(new(big.Float).SetPrec(bigPrec).Set(r), 2)
	c := series(newBig(1), 1)
	switch int(n) & 3 {
	case 1:
		s, c = c, s.Neg(s)
	case 2:
		s, c = s.Neg(s), c.Neg(c)
	case 3:
		s, c = c.Neg(c), s
	}
	return s, c
}

// relErr returns |(hi + lo) - want| / |want| as a float64.
func relErr(hi, lo float64, want *big.Float) float64 {
	d := newBig(hi)
	d.Add(d, newBig(lo))
	d.Sub(d, want)
	d.Quo(d, want)
	f, _ := d.Float64()
	return math.Abs(f)
}

func TestSincosConstants(t *testing.T) {
	// pio2: the first 200 bits of π/2, 50 at a time.
	rest := new(big.Float).SetPrec(bigPrec).Quo(bigPi, newBig(2))
	for i, p := range pio2 {
		piece := new(big.Float).SetPrec(50).SetMode(big.ToNearestEven).Set(rest)
		want, _ := piece.Float64()
		if p != want {
			t.Errorf("pio2[%d] = %x, want %x", i, p, want)
		}
		rest.Sub(rest, newBig(want))
	}
	if e := rest.MantExp(nil); e > -208 {
		t.Errorf("pio2 leaves %v of π/2 (exponent %d)", rest, e)
	}

	// 1/k! as double-words (hi = 1/k! rounded, lo = the rest rounded),
	// with the signs of the series.
	invFact := func(k int) (hi, lo float64) {
		f := newBig(1)
		for i := 2; i <= k; i++ {
			f.Quo(f, newBig(float64(i)))
		}
		if k/2%2 == 1 { // the signs alternate from -1/2! and -1/3!
			f.Neg(f)
		}
		hi, _ = f.Float64()
		lo, _ = f.Sub(f, newBig(hi)).Float64()
		return hi, lo
	}
	check := func(name string, k int, hi, lo float64, tail bool) {
		wh, wl := invFact(k)
		if hi != wh || (!tail && lo != wl) {
			t.Errorf("%s: %x %x, want ±1/%d! = %x %x", name, hi, lo, k, wh, wl)
		}
	}
	for j, c := range sinQ {
		check("sinQ", 2*j+3, c[0], c[1], false)
	}
	for j, c := range sinQTail {
		check("sinQTail", 2*(j+len(sinQ))+3, c, 0, true)
	}
	for j, c := range cosR {
		check("cosR", 2*j+2, c[0], c[1], false)
	}
	for j, c := range cosRTail {
		check("cosRTail", 2*(j+len(cosR))+2, c, 0, true)
	}
}

// sincosArgs returns test arguments: the generator's angles 2π·u for
// random 53-bit u, and the neighbourhoods of the multiples of π/4 (where
// the reduction changes quadrant or cancels), of 0 and of the largest
// angle, then a few random ones up to sincosMax and their negatives.
func sincosArgs(random int) []float64 {
	r := mrand.New(mrand.NewPCG(11, 12))
	var xs []float64
	for i := 0; i < random; i++ {
		xs = append(xs, float64(2*math.Pi)*float64(r.Uint64()>>11)*0x1p-53)
	}
	near := func(v float64) {
		up, dn := v, v
		for i := 0; i < 4; i++ {
			xs = append(xs, up, dn)
			up, dn = math.Nextafter(up, math.Inf(1)), math.Nextafter(dn, 0)
		}
	}
	for k := 1; k <= 15; k++ {
		near(float64(k) * math.Pi / 4)
	}
	near(float64(2*math.Pi) * (1 - 0x1p-53))
	xs = append(xs, 0, float64(2*math.Pi)*0x1p-53, 0x1p-1074, 0x1p-30, 0x1p-26, 0x1p-20)
	for i := 0; i < random/10; i++ {
		x := r.Float64() * sincosMax
		xs = append(xs, x, -x)
	}
	return xs
}

// TestSincosAccuracy checks the double-word results against math/big
// (relative error below 2^-100) and that sincos rounds them correctly.
func TestSincosAccuracy(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	worst := 0.0
	for _, x := range sincosArgs(n) {
		ws, wc := bigSincos(x)
		s, c := sincos(x)
		if ax := math.Abs(x); ax != 0 {
			k, rh, rl := reducePio2(ax)
			sh, sl, ch, cl := sincosDW(rh, rl)
			if k&1 == 1 {
				sh, sl, ch, cl = ch, cl, sh, sl
			}
			if sh < 0 {
				sh, sl = -sh, -sl
			}
			if ch < 0 {
				ch, cl = -ch, -cl
			}
			es := relErr(sh, sl, new(big.Float).Abs(ws))
			ec := relErr(ch, cl, new(big.Float).Abs(wc))
			worst = max(worst, es, ec)
			if es > 0x1p-100 || ec > 0x1p-100 {
				t.Errorf("x = %v (%#x): relative errors %g, %g (2^%.1f, 2^%.1f)", x, math.Float64bits(x), es, ec, math.Log2(es), math.Log2(ec))
			}
		}
		fs, _ := ws.Float64()
		fc, _ := wc.Float64()
		if math.Float64bits(s) != math.Float64bits(fs) || math.Float64bits(c) != math.Float64bits(fc) {
			t.Errorf("sincos(%v [%#x]) = %v, %v; correctly rounded %v, %v", x, math.Float64bits(x), s, c, fs, fc)
		}
	}
	t.Logf("largest relative error of the double-words: 2^%.1f", math.Log2(worst))
}

func TestSincosSpecial(t *testing.T) {
	for _, c := range []struct{ x, s, c float64 }{
		{0, 0, 1},
		{math.Copysign(0, -1), math.Copysign(0, -1), 1},
		{0x1p-1074, 0x1p-1074, 1},
		{-0x1p-1074, -0x1p-1074, 1},
	} {
		s, co := sincos(c.x)
		if math.Float64bits(s) != math.Float64bits(c.s) || co != c.c {
			t.Errorf("sincos(%v) = %v, %v; want %v, %v", c.x, s, co, c.s, c.c)
		}
	}
	// Outside its range sincos defers to math.Sincos.
	for _, x := range []float64{13, -100, 1e300, math.Inf(1), math.NaN()} {
		s, c := sincos(x)
		ws, wc := math.Sincos(x)
		if !(s == ws || s != s && ws != ws) || !(c == wc || c != c && wc != wc) {
			t.Errorf("sincos(%v) = %v, %v; math.Sincos %v, %v", x, s, c, ws, wc)
		}
	}
}

func BenchmarkSincos(b *testing.B) {
	xs := sincosArgs(1024)[:1024]
	var sum float64
	for b.Loop() {
		for _, x := range xs {
			s, c := sincos(x)
			sum += s + c
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(xs)), "ns/call")
	_ = sum
}

// The fixture written by testdata/gen_sincos_glibc.py.
type sincosFixture struct {
	Libc        string      `json:"libc"`
	Seed        uint64      `json:"seed"`
	N           int         `json:"n"`
	ThetaSHA256 string      `json:"theta_sha256"`
	LibmSHA256  string      `json:"libm_sha256"`
	Chunk       int         `json:"chunk"`
	ChunkSHA256 []string    `json:"chunk_sha256"`
	Disagree    [][5]any    `json:"disagree"` // index, libm sin, cos, correctly rounded sin, cos
	Edges       [][5]string `json:"edges"`    // theta, libm sin, cos, correctly rounded sin, cos
}

func hexF64(t *testing.T, s string) float64 {
	t.Helper()
	u, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return math.Float64frombits(u)
}

// ulpDiff returns the distance between a and b in units in the last place,
// for finite values of the same sign.
func ulpDiff(a, b float64) uint64 {
	x, y := math.Float64bits(a), math.Float64bits(b)
	return max(x, y) - min(x, y)
}

// TestSincosGlibc compares sincos with the C library's sincos that PyTorch
// calls (glibc, whose results testdata/sincos_glibc.json records for 200,000
// of the generator's angles): they must agree everywhere except at the
// recorded angles, where glibc is off by one ulp and sincos is correctly
// rounded (checked here against math/big, as the generator checked it
// against mpmath).
func TestSincosGlibc(t *testing.T) {
	js, err := os.ReadFile("testdata/sincos_glibc.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx sincosFixture
	if err := json.Unmarshal(js, &fx); err != nil {
		t.Fatal(err)
	}

	// The angles, drawn as PyTorch draws them.
	theta := make([]float64, fx.N)
	New(fx.Seed).Uniform64(theta, 0, 1)
	for i, u := range theta {
		theta[i] = float64(2*math.Pi) * u
	}
	if sum := sha256.Sum256(leBytes(theta)); hex.EncodeToString(sum[:]) != fx.ThetaSHA256 {
		t.Fatal("the angles differ from the generator script's")
	}

	// Ours, with glibc's results put back where they are known to differ.
	got := make([]float64, 2*fx.N)
	for i, x := range theta {
		got[2*i], got[2*i+1] = sincos(x)
	}
	checkOneULP := func(x, ours, cr, libm float64, what string) {
		t.Helper()
		if math.Float64bits(ours) != math.Float64bits(cr) {
			t.Errorf("%s(%v [%#x]) = %v, correctly rounded %v", what, x, math.Float64bits(x), ours, cr)
		}
		if d := ulpDiff(cr, libm); d > 1 {
			t.Errorf("%s(%v): glibc %v is %d ulps from the correctly rounded %v", what, x, libm, d, cr)
		}
	}
	var diffSin, diffCos int
	for _, row := range fx.Disagree {
		i := int(row[0].(float64))
		x := theta[i]
		ls, lc := hexF64(t, row[1].(string)), hexF64(t, row[2].(string))
		rs, rc := hexF64(t, row[3].(string)), hexF64(t, row[4].(string))
		// mpmath's correct rounding, confirmed with math/big.
		ws, wc := bigSincos(x)
		if fs, _ := ws.Float64(); fs != rs {
			t.Errorf("sin(%v): fixture says %v, math/big %v", x, rs, fs)
		}
		if fc, _ := wc.Float64(); fc != rc {
			t.Errorf("cos(%v): fixture says %v, math/big %v", x, rc, fc)
		}
		checkOneULP(x, got[2*i], rs, ls, "sin")
		checkOneULP(x, got[2*i+1], rc, lc, "cos")
		if ls != rs {
			diffSin++
		}
		if lc != rc {
			diffCos++
		}
		got[2*i], got[2*i+1] = ls, lc
	}
	raw := leBytes(got)
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != fx.LibmSHA256 {
		bad := 0
		for c, want := range fx.ChunkSHA256 {
			lo := 16 * fx.Chunk * c
			sum := sha256.Sum256(raw[lo:min(len(raw), lo+16*fx.Chunk)])
			if hex.EncodeToString(sum[:8]) != want {
				if bad++; bad <= 5 {
					t.Errorf("angles %d to %d: results differ from glibc's beyond the recorded ones", c*fx.Chunk, (c+1)*fx.Chunk-1)
				}
			}
		}
		t.Errorf("sincos differs from %s at more than the %d recorded angles (%d chunks)", fx.Libc, len(fx.Disagree), bad)
	}
	t.Logf("%s: sincos agrees at %d of %d angles; differs in %d sin and %d cos values of %d, by one ulp, where sincos is correctly rounded",
		fx.Libc, fx.N-len(fx.Disagree), fx.N, diffSin, diffCos, 2*fx.N)

	// Edges: ours must be the correctly rounded value; count glibc's misses.
	misses := 0
	for _, row := range fx.Edges {
		x := hexF64(t, row[0])
		s, c := sincos(x)
		ls, lc := hexF64(t, row[1]), hexF64(t, row[2])
		rs, rc := hexF64(t, row[3]), hexF64(t, row[4])
		checkOneULP(x, s, rs, ls, "sin")
		checkOneULP(x, c, rc, lc, "cos")
		if ls != rs || lc != rc {
			misses++
		}
	}
	t.Logf("edge angles: glibc differs from correct rounding at %d of %d", misses, len(fx.Edges))
}
