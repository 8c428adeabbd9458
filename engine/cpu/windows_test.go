package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// windowCases are geometries the window kernels must get right: padding
// on both sides, strides and dilations other than 1, one-row images (a
// 1-d convolution), windows that run past the input (ceil mode, "same"
// padding's extra column), a 1×1 kernel, taps that reach no position of
// a row.
var windowCases = []device.WindowGeom{
	{N: 2, C: 3, H: 5, W: 6, KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1, OH: 3, OW: 4},
	{N: 1, C: 2, H: 7, W: 6, KH: 3, KW: 2, SH: 2, SW: 1, PH: 1, PW: 2, DH: 1, DW: 1, OH: 4, OW: 9},
	{N: 2, C: 2, H: 7, W: 5, KH: 3, KW: 3, SH: 1, SW: 2, PH: 1, PW: 1, DH: 2, DW: 1, OH: 5, OW: 3},
	{N: 3, C: 1, H: 1, W: 9, KH: 1, KW: 4, SH: 1, SW: 3, DH: 1, DW: 2, PW: 1, OH: 1, OW: 3},
	{N: 1, C: 2, H: 6, W: 6, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 4}, // ceil mode
	{N: 1, C: 1, H: 4, W: 5, KH: 2, KW: 2, SH: 1, SW: 1, PH: 0, PW: 0, DH: 1, DW: 1, OH: 4, OW: 5}, // "same": one more after
	{N: 2, C: 3, H: 4, W: 4, KH: 1, KW: 1, SH: 1, SW: 1, DH: 1, DW: 1, OH: 4, OW: 4},
	{N: 2, C: 3, H: 6, W: 7, KH: 2, KW: 2, SH: 2, SW: 2, DH: 1, DW: 1, OH: 3, OW: 3}, // pooling's 2×2, an odd width
	// Taps that reach no position of a row (kernels wider than a 1-wide
	// row and its padding) on both routes of the fold and the unfold:
	// strided rows, and rows that are the whole plane.
	{N: 1, C: 6, H: 8, W: 1, KH: 4, KW: 5, SH: 2, SW: 1, PH: 1, PW: 2, DH: 2, DW: 1, OH: 2, OW: 1},
	{N: 1, C: 3, H: 1, W: 1, KH: 2, KW: 3, SH: 1, SW: 1, PH: 1, PW: 2, DH: 1, DW: 2, OH: 2, OW: 1},
}

// tapAt is the input position tap (i, j) of window (oh, ow) reads, or
// false in the padding.
func tapAt(g device.WindowGeom, i, j, oh, ow int) (int, bool) {
	h, w := oh*g.SH-g.PH+i*g.DH, ow*g.SW-g.PW+j*g.DW
	return h*g.W + w, h >= 0 && h < g.H && w >= 0 && w < g.W
}

// TestUnfoldFold: Unfold writes each window's taps (zero in the padding)
// where device.Unfolder says, for float32 and float64 and, as it only
// moves elements, bfloat16; Fold is its adjoint (⟨Unfold x, c⟩ = ⟨x,
// Fold c⟩, each input element the sum of the taps that read it).
func TestUnfoldFold(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(1, 2))
	for ci, g := range windowCases {
		for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64, dtype.BFloat16} {
			t.Run(fmt.Sprintf("%d/%v", ci, dt), func(t *testing.T) {
				k, plane, out := g.KH*g.KW, g.H*g.W, g.OH*g.OW
				xs := make([]float64, g.N*g.C*plane)
				for i := range xs {
					xs[i] = float64(r.IntN(64) - 32)
				}
				x := newOperand(t, d, dt, []int{g.N, g.C, g.H, g.W}, xs, contiguous)
				cols := newOperand(t, d, dt, []int{g.N, g.C * k, out}, make([]float64, g.N*g.C*k*out), contiguous)
				if err := d.Unfold(cols, x, g); err != nil {
					t.Fatal(err)
				}
				got := values(t, d, cols)
				for p := range g.N * g.C {
					for i := range g.KH {
						for j := range g.KW {
							for o := range out {
								want := 0.0
								if at, in := tapAt(g, i, j, o/g.OW, o%g.OW); in {
									want = xs[p*plane+at]
								}
								if v := got[(p*k+i*g.KW+j)*out+o]; v != want {
									t.Fatalf("plane %d tap (%d, %d) window %d: %v, want %v", p, i, j, o, v, want)
								}
							}
						}
					}
				}
				if dt == dtype.BFloat16 {
					return
				}
				cs := make([]float64, len(got))
				for i := range cs {
					cs[i] = float64(r.IntN(64) - 32)
				}
				c := newOperand(t, d, dt, cols.Shape, cs, contiguous)
				dx := newOperand(t, d, dt, x.Shape, make([]float64, len(xs)), contiguous)
				if err := d.Fold(dx, c, g); err != nil {
					t.Fatal(err)
				}
				folded := values(t, d, dx)
				want := make([]float64, len(xs))
				for p := range g.N * g.C {
					for i := range g.KH {
						for j := range g.KW {
							for o := range out {
								if at, in := tapAt(g, i, j, o/g.OW, o%g.OW); in {
									want[p*plane+at] += cs[(p*k+i*g.KW+j)*out+o]
								}
							}
						}
					}
				}
				for i := range want {
					if folded[i] != want[i] {
						t.Fatalf("fold: element %d is %v, want %v", i, folded[i], want[i])
					}
				}
			})
		}
	}
}

// TestMaxPool2dKernel: each window's maximum and its position, the first
// of equal maxima in row-major window order, the last NaN of several (a
// NaN wins over any number), padding never, as PyTorch's CPU kernel.
func TestMaxPool2dKernel(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(3, 4))
	for ci, g := range windowCases {
		if g.PH > g.KH/2 || g.PW > g.KW/2 {
			continue // padding a pooling refuses: windows wholly in it
		}
		for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
			t.Run(fmt.Sprintf("%d/%v", ci, dt), func(t *testing.T) { checkMaxPool(t, d, r, dt, g) })
		}
	}
}

// TestMaxPool2dRandomGeometries: TestMaxPool2dKernel's checks on random
// small geometries (kernels 1-4, strides 1-3, dilations 1-2, the padding
// PyTorch allows, sizes 1-9, floor and ceil mode's extra window).
func TestMaxPool2dRandomGeometries(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(5, 6))
	tries := 1000
	if testing.Short() {
		tries = 150
	}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			for range tries {
				g := device.WindowGeom{N: 1 + r.IntN(2), C: 1 + r.IntN(3), H: 1 + r.IntN(9), W: 1 + r.IntN(9),
					KH: 1 + r.IntN(4), KW: 1 + r.IntN(4), SH: 1 + r.IntN(3), SW: 1 + r.IntN(3), DH: 1 + r.IntN(2), DW: 1 + r.IntN(2)}
				g.PH, g.PW = r.IntN(g.KH/2+1), r.IntN(g.KW/2+1)
				spanH, spanW := g.DH*(g.KH-1)+1, g.DW*(g.KW-1)+1
				if g.H+2*g.PH < spanH || g.W+2*g.PW < spanW {
					continue // no window
				}
				g.OH, g.OW = (g.H+2*g.PH-spanH)/g.SH+1, (g.W+2*g.PW-spanW)/g.SW+1
				if r.IntN(2) == 0 && (g.OH-1)*g.SH-g.PH < g.H-1 {
					g.OH++ // ceil mode's window past the input, which starts inside it
				}
				if !everyWindowReads(g) {
					continue
				}
				func() {
					defer func() { // also after a t.Fatal in the check
						if t.Failed() {
							t.Logf("geometry %+v", g)
						}
					}()
					checkMaxPool(t, d, r, dt, g)
				}()
				if t.Failed() {
					return
				}
			}
		})
	}
}

// everyWindowReads reports whether every window of g has a tap in the
// input, as a pooling needs.
func everyWindowReads(g device.WindowGeom) bool {
	for oh := range g.OH {
		for ow := range g.OW {
			found := false
			for i := range g.KH {
				for j := range g.KW {
					if _, in := tapAt(g, i, j, oh, ow); in {
						found = true
					}
				}
			}
			if !found {
				return false
			}
		}
	}
	return true
}

// checkMaxPool holds MaxPool2d and its backward on g to the definition,
// on random values with ties, NaNs and -Inf.
func checkMaxPool(t *testing.T, d *Device, r *rand.Rand, dt dtype.DType, g device.WindowGeom) {
	t.Helper()
	plane, out := g.H*g.W, g.OH*g.OW
	xs := make([]float64, g.N*g.C*plane)
	for i := range xs {
		switch v := r.IntN(12); {
		case v == 0:
			xs[i] = math.NaN()
		case v == 1:
			xs[i] = math.Inf(-1)
		default:
			xs[i] = float64(v % 4) // ties
		}
	}
	x := newOperand(t, d, dt, []int{g.N, g.C, g.H, g.W}, xs, contiguous)
	y := newOperand(t, d, dt, []int{g.N, g.C, g.OH, g.OW}, make([]float64, g.N*g.C*out), contiguous)
	idx := newOperand(t, d, dtype.Int64, y.Shape, make([]float64, g.N*g.C*out), contiguous)
	if err := d.MaxPool2d(y, idx, x, g); err != nil {
		t.Fatal(err)
	}
	ys, is := values(t, d, y), values(t, d, idx)
	// The maxima alone (no indices: evaluation) are the same.
	y2 := newOperand(t, d, dt, y.Shape, make([]float64, len(ys)), contiguous)
	if err := d.MaxPool2d(y2, device.View{}, x, g); err != nil {
		t.Fatal(err)
	}
	for i, v := range values(t, d, y2) {
		if !(v == ys[i] || math.IsNaN(v) && math.IsNaN(ys[i])) {
			t.Fatalf("without indices, output %d is %v; with them %v", i, v, ys[i])
		}
	}
	for p := range g.N * g.C {
		for o := range out {
			best, where := math.Inf(-1), -1
			for i := range g.KH {
				for j := range g.KW {
					at, in := tapAt(g, i, j, o/g.OW, o%g.OW)
					if !in {
						continue
					}
					if where < 0 {
						where = at
					}
					if v := xs[p*plane+at]; v > best || math.IsNaN(v) {
						best, where = v, at
					}
				}
			}
			gv, gi := ys[p*out+o], int(is[p*out+o])
			if gi != where || !(gv == best || math.IsNaN(gv) && math.IsNaN(best)) {
				t.Fatalf("plane %d window %d: %v at %d, want %v at %d", p, o, gv, gi, best, where)
			}
		}
	}

	// The backward adds each window's gradient at its maximum
	// (overlapping windows may share one).
	dys := make([]float64, len(ys))
	for i := range dys {
		dys[i] = float64(r.IntN(16) - 8)
	}
	want := make([]float64, len(xs))
	for i, v := range dys {
		want[i/out*plane+int(is[i])] += v
	}
	dy := newOperand(t, d, dt, y.Shape, dys, contiguous)
	dx := emptyOperand(t, d, dt, x.Shape, contiguous)
	poison(t, d, dx)
	if err := d.MaxPool2dBackward(dx, dy, idx, g); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "dx", values(t, d, dx), want, 0)
}

// TestMaxPool2dBackwardRefuses: an index outside its image (not one
// MaxPool2d wrote) is an error, not a write elsewhere.
func TestMaxPool2dBackwardRefuses(t *testing.T) {
	d := New(Options{})
	g := device.WindowGeom{N: 1, C: 2, H: 4, W: 4, KH: 2, KW: 2, SH: 2, SW: 2, DH: 1, DW: 1, OH: 2, OW: 2}
	for _, bad := range []float64{16, -1} {
		idx := newOperand(t, d, dtype.Int64, []int{1, 2, 2, 2}, []float64{0, 1, 4, 5, 0, 2, 8, bad}, contiguous)
		dy := newOperand(t, d, dtype.Float32, []int{1, 2, 2, 2}, make([]float64, 8), contiguous)
		dx := emptyOperand(t, d, dtype.Float32, []int{1, 2, 4, 4}, contiguous)
		if err := d.MaxPool2dBackward(dx, dy, idx, g); err == nil || !strings.Contains(err.Error(), "outside") {
			t.Errorf("index %v: %v", bad, err)
		}
	}
}

// TestMaxPool2dBackwardForeignPositions: positions inside the image but
// outside their own windows (not from MaxPool2d, which the 2×2 route's
// one pass assumes) are scattered where they point, as PyTorch's
// backward does, not dropped.
func TestMaxPool2dBackwardForeignPositions(t *testing.T) {
	d := New(Options{})
	g := device.WindowGeom{N: 1, C: 1, H: 4, W: 4, KH: 2, KW: 2, SH: 2, SW: 2, DH: 1, DW: 1, OH: 2, OW: 2}
	idx := newOperand(t, d, dtype.Int64, []int{1, 1, 2, 2}, []float64{0, 1, 1, 15}, contiguous)
	dy := newOperand(t, d, dtype.Float32, []int{1, 1, 2, 2}, []float64{1, 2, 4, 8}, contiguous)
	dx := emptyOperand(t, d, dtype.Float32, []int{1, 1, 4, 4}, contiguous)
	poison(t, d, dx)
	if err := d.MaxPool2dBackward(dx, dy, idx, g); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, 16)
	want[0], want[1], want[15] = 1, 2+4, 8
	assertClose(t, "dx", values(t, d, dx), want, 0)
}
