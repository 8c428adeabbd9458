package vmath

import (
	"fmt"
	"math"
	"testing"
)

// TestMaxPool2x2 holds every variant to the Go loop, bit for bit, over
// rows of windows of every count from 1 to 40 (the AVX-512 kernel's full
// chunks of 16 and every tail), odd and even row widths, data with ties
// (small integers), both zeros and NaNs (quiet with payloads, alone and
// several in a window), and checks that nothing past the outputs is
// written.
func TestMaxPool2x2(t *testing.T) {
	const g = 8
	nan1, nan2 := math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00002)
	specials := []float32{0, float32(math.Copysign(0, -1)), nan1, nan2, float32(math.Inf(1)), float32(math.Inf(-1))}
	r := newRand(11)
	for _, k := range variants {
		for ow := 1; ow <= 40; ow++ {
			for _, extra := range []int{0, 1, 3} {
				w, oh := 2*ow+extra, 1+ow%3
				t.Run(fmt.Sprintf("%s/%dx%d/w=%d", k.name, oh, ow, w), func(t *testing.T) {
					x := make([]float32, 2*oh*w)
					for i := range x {
						switch v := r.next() % 16; {
						case v < 3:
							x[i] = specials[r.next()%uint64(len(specials))]
						case v < 9:
							x[i] = float32(r.next()%4) - 2 // ties
						default:
							x[i] = float32(r.norm())
						}
					}
					want, wantAt := make([]float32, oh*ow), make([]int64, oh*ow)
					maxPool2x2Go(want, wantAt, x, w, ow, oh)
					y, ybuf := guarded(oh*ow, g, nil, 0)
					atBuf := make([]int64, oh*ow+2*g)
					for i := range atBuf {
						atBuf[i] = -7
					}
					at := atBuf[g : g+oh*ow : g+oh*ow]
					defer useVariant(k)()
					MaxPool2x2(y, at, x, w, ow, oh)
					for i := range want {
						if math.Float32bits(y[i]) != math.Float32bits(want[i]) || at[i] != wantAt[i] {
							t.Fatalf("window %d: %v at %d, want %v at %d", i, y[i], at[i], want[i], wantAt[i])
						}
					}
					checkGuards(t, "y", ybuf, g)
					for i, v := range atBuf {
						if (i < g || i >= g+oh*ow) && v != -7 {
							t.Fatalf("at's guard element %d written: %d", i, v)
						}
					}
				})
			}
		}
	}
}

// TestMaxPool2x2Order: the order of the taps PyTorch's loop keeps, on
// windows built for it: the first of equal maxima, the first zero of a
// window of zeros (its sign kept), the last NaN.
func TestMaxPool2x2Order(t *testing.T) {
	neg0 := float32(math.Copysign(0, -1))
	nan1, nan2 := math.Float32frombits(0x7fc00001), math.Float32frombits(0x7fc00002)
	for _, tc := range []struct {
		name    string
		taps    [4]float32 // row 0: taps 0, 1; row 1: taps 2, 3
		wantTap int
	}{
		{"first of equal maxima", [4]float32{1, 3, 3, 3}, 1},
		{"maximum below", [4]float32{1, 2, 0, 5}, 3},
		{"zeros", [4]float32{neg0, 0, 0, neg0}, 0},
		{"last NaN", [4]float32{nan1, 5, nan2, 1}, 2},
		{"NaN after the maximum", [4]float32{9, 1, 1, nan1}, 3},
	} {
		for _, k := range variants {
			t.Run(tc.name+"/"+k.name, func(t *testing.T) {
				// 17 copies of the window in a row: one full chunk and a tail.
				const ow = 17
				w := 2 * ow
				x := make([]float32, 2*w)
				for o := range ow {
					x[2*o], x[2*o+1], x[w+2*o], x[w+2*o+1] = tc.taps[0], tc.taps[1], tc.taps[2], tc.taps[3]
				}
				y, at := make([]float32, ow), make([]int64, ow)
				defer useVariant(k)()
				MaxPool2x2(y, at, x, w, ow, 1)
				offsets := [4]int64{0, 1, int64(w), int64(w) + 1}
				for o := range ow {
					want := tc.taps[tc.wantTap]
					if math.Float32bits(y[o]) != math.Float32bits(want) || at[o] != int64(2*o)+offsets[tc.wantTap] {
						t.Fatalf("window %d: %v at %d, want tap %d (%v at %d)", o, y[o], at[o], tc.wantTap, want, int64(2*o)+offsets[tc.wantTap])
					}
				}
			})
		}
	}
}

func TestMaxPool2x2Refuses(t *testing.T) {
	buf, at := make([]float32, 16), make([]int64, 4)
	for _, tc := range []struct {
		call func()
		want string
	}{
		{func() { MaxPool2x2(buf, at, buf, 3, 2, 1) }, "windows of 2×2 in rows of 3"},
		{func() { MaxPool2x2(buf, at, buf[:10], 4, 2, 2) }, "too short"},
		{func() { MaxPool2x2(buf, at[:3], buf, 4, 2, 2) }, "too short"},
	} {
		wantPanic(t, tc.call, tc.want)
	}
}

func BenchmarkMaxPool2x2(b *testing.B) {
	// The CNN's first pooling: 64·16 planes of 28×28, a call a plane.
	const w, ow, oh, planes = 28, 14, 14, 64 * 16
	x := newRand(3).slice(planes*w*2*oh, 1)
	y, at := make([]float32, planes*ow*oh), make([]int64, planes*ow*oh)
	for _, k := range variants {
		b.Run(k.name, func(b *testing.B) {
			defer useVariant(k)()
			for b.Loop() {
				for p := range planes {
					MaxPool2x2(y[p*ow*oh:], at[p*ow*oh:], x[p*w*2*oh:], w, ow, oh)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(planes*ow*oh), "ns/window")
		})
	}
}

// TestMaxPool2x2Backward holds every variant to the scatter (the plane
// cleared, each window's gradient added at its position), bit for bit,
// over the shapes of TestMaxPool2x2 with odd heights too, dy with both
// zeros and NaNs, positions from MaxPool2x2; a position of another window
// is placed as the scatter places it or refused, one outside the plane
// refused.
func TestMaxPool2x2Backward(t *testing.T) {
	r := newRand(12)
	negZero := float32(math.Copysign(0, -1))
	for _, k := range variants {
		for ow := 1; ow <= 40; ow++ {
			for _, extra := range []int{0, 1} {
				w, oh := 2*ow+extra, 1+ow%3
				h := 2*oh + extra
				t.Run(fmt.Sprintf("%s/%dx%d/%dx%d", k.name, oh, ow, h, w), func(t *testing.T) {
					x := r.slice(h*w, 1)
					y, at := make([]float32, oh*ow), make([]int64, oh*ow)
					maxPool2x2Go(y, at, x, w, ow, oh)
					dy := r.slice(oh*ow, 1)
					dy[0], dy[len(dy)-1] = negZero, float32(math.NaN())
					want := make([]float32, h*w)
					for q, g := range dy {
						want[at[q]] += g
					}
					dx, buf := guarded(h*w, 8, r, 1) // stale values, to be overwritten
					defer useVariant(k)()
					if !MaxPool2x2Backward(dx, dy, at, w, h, ow, oh) {
						t.Fatal("reported a position outside its window")
					}
					for i := range want {
						if math.Float32bits(dx[i]) != math.Float32bits(want[i]) {
							t.Fatalf("dx[%d] = %v, want %v", i, dx[i], want[i])
						}
					}
					checkGuards(t, "dx", buf, 8)
					// A position of another window (or of the plane's
					// last element when there is none) is either placed
					// where it points, as the scatter places it, or
					// refused; one outside the plane is refused.
					q := int(r.next() % uint64(oh*ow))
					other := (q + 1) % (oh * ow)
					at[q] = int64(2*(other/ow)*w + 2*(other%ow))
					if other == q {
						at[q] = int64(h*w - 1)
					}
					clear(want)
					for q, g := range dy {
						want[at[q]] += g
					}
					if MaxPool2x2Backward(dx, dy, at, w, h, ow, oh) {
						for i := range want {
							if math.Float32bits(dx[i]) != math.Float32bits(want[i]) {
								t.Fatalf("foreign position %d of window %d: dx[%d] = %v, want %v", at[q], q, i, dx[i], want[i])
							}
						}
					}
					at[q] = int64(h * w)
					if MaxPool2x2Backward(dx, dy, at, w, h, ow, oh) {
						t.Fatalf("position %d outside the %d×%d plane accepted", at[q], h, w)
					}
				})
			}
		}
	}
}

func BenchmarkMaxPool2x2Backward(b *testing.B) {
	// The CNN's first pooling's gradient: 64·16 planes of 28×28.
	const w, h, ow, oh, planes = 28, 28, 14, 14, 64 * 16
	x := newRand(3).slice(planes*w*h, 1)
	dy := newRand(4).slice(planes*ow*oh, 1)
	y, at := make([]float32, planes*ow*oh), make([]int64, planes*ow*oh)
	for p := range planes {
		MaxPool2x2(y[p*ow*oh:], at[p*ow*oh:], x[p*w*h:], w, ow, oh)
	}
	dx := make([]float32, planes*w*h)
	for _, k := range variants {
		b.Run(k.name, func(b *testing.B) {
			defer useVariant(k)()
			for b.Loop() {
				for p := range planes {
					MaxPool2x2Backward(dx[p*w*h:(p+1)*w*h], dy[p*ow*oh:], at[p*ow*oh:], w, h, ow, oh)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(planes*ow*oh), "ns/window")
		})
	}
	b.Run("scatter", func(b *testing.B) {
		for b.Loop() {
			for p := range planes {
				x, a := dx[p*w*h:(p+1)*w*h], at[p*ow*oh:(p+1)*ow*oh]
				clear(x)
				for q, v := range dy[p*ow*oh : (p+1)*ow*oh] {
					x[a[q]] += v
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(planes*ow*oh), "ns/window")
	})
}
