package cpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/gemm"
	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// convCases are windowCases's geometries with output channels, and
// batches large enough to split the weight gradient into several blocks.
func convCases() []struct {
	g device.WindowGeom
	o int
} {
	cases := []struct {
		g device.WindowGeom
		o int
	}{}
	for i, g := range windowCases {
		cases = append(cases, struct {
			g device.WindowGeom
			o int
		}{g, 1 + i%4})
	}
	big := device.WindowGeom{N: 37, C: 4, H: 9, W: 8, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 9, OW: 8}
	direct := device.WindowGeom{N: 21, C: 5, H: 3, W: 4, KH: 1, KW: 1, SH: 1, SW: 1, DH: 1, DW: 1, OH: 3, OW: 4}
	// "Same" convolutions whose taps reach past the whole image, and
	// dilated ones: the unfolding of shifted runs of the plane.
	wide := device.WindowGeom{N: 3, C: 2, H: 3, W: 3, KH: 7, KW: 7, SH: 1, SW: 1, PH: 3, PW: 3, DH: 1, DW: 1, OH: 3, OW: 3}
	dilated := device.WindowGeom{N: 2, C: 4, H: 6, W: 5, KH: 3, KW: 3, SH: 1, SW: 1, PH: 2, PW: 2, DH: 2, DW: 2, OH: 6, OW: 5}
	// Padding wider than the kernel reaches: outputs that read nothing
	// but padding (the input gradient cannot be a windows product).
	overpadded := device.WindowGeom{N: 2, C: 2, H: 3, W: 4, KH: 1, KW: 3, SH: 1, SW: 1, PH: 1, PW: 2, DH: 1, DW: 1, OH: 5, OW: 6}
	// Output rows longer than any kernel tile, and not a multiple of one.
	long := device.WindowGeom{N: 3, C: 5, H: 4, W: 37, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 37}
	// A window past the input's end on each side (one more output than
	// the padding makes), and 7 taps reaching over the whole image.
	after := device.WindowGeom{N: 2, C: 4, H: 4, W: 5, KH: 2, KW: 2, SH: 1, SW: 1, DH: 1, DW: 1, OH: 4, OW: 5}
	reach := device.WindowGeom{N: 2, C: 6, H: 3, W: 3, KH: 7, KW: 7, SH: 1, SW: 1, PH: 3, PW: 3, DH: 1, DW: 1, OH: 3, OW: 3}
	// Rows of whole kernel tiles (16 and 32 columns), which the windows
	// products do not flatten.
	tiled := device.WindowGeom{N: 2, C: 4, H: 3, W: 32, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 3, OW: 32}
	tiledStrided := device.WindowGeom{N: 2, C: 5, H: 4, W: 64, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 2, OW: 32}
	for _, c := range []struct {
		g device.WindowGeom
		o int
	}{{big, 6}, {direct, 7}, {wide, 3}, {dilated, 2}, {overpadded, 3}, {long, 13}, {after, 3}, {reach, 2}, {tiled, 7}, {tiledStrided, 3},
		{positioned[0], 32}, {positioned[1], 64}, {positioned[2], 32}} {
		cases = append(cases, c)
	}
	for _, g := range append(slices.Clone(phasedCases), foldedStridedCases...) {
		cases = append(cases, struct {
			g device.WindowGeom
			o int
		}{g, 5})
	}
	return cases
}

// positioned are geometries whose forward is a positions product on
// machines with a positions kernel (32 or 64 output channels, rows of 14,
// 28 and 16 that the windows products would flatten; TestConv2dPositions):
// 14-position tiles, a stride of 2 with two tiles a row, and a ResNet's
// 32→32 convolution in 8-position tiles, whose input gradient (32 input
// channels) is a positions product too.
var positioned = []device.WindowGeom{
	{N: 3, C: 3, H: 5, W: 14, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 5, OW: 14},
	{N: 2, C: 4, H: 7, W: 56, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 28},
	{N: 2, C: 32, H: 5, W: 16, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 5, OW: 16},
}

// TestConv2dPositions: the forwards of positioned take the positions
// product where this machine has a kernel for it (and are checked against
// the definition by TestConv2dKernel), and so does an input gradient of
// 32 channels; one of 16 stays a windows product; both read the output
// gradient padded once for both gradients (spreadIn).
func TestConv2dPositions(t *testing.T) {
	if gemm.PositionsTile[float32](32, 14) == 0 {
		t.Skip("no positions kernel on this machine (AVX-512 only)")
	}
	for i, o := range []int{32, 64, 32} {
		if !newConv[float32](positioned[i], o).posFwd {
			t.Errorf("%+v, %d channels: the forward is not a positions product", positioned[i], o)
		}
		if newConv[float64](positioned[i], o).posFwd {
			t.Errorf("%+v, %d channels: float64 took the positions product, which has no kernel", positioned[i], o)
		}
	}
	if c := newConv[float32](positioned[2], 32); !c.posBack || !c.spreadIn {
		t.Errorf("%+v: input gradient positions %v, spread in the padded output gradient %v; want both", positioned[2], c.posBack, c.spreadIn)
	}
	cnn := device.WindowGeom{N: 64, C: 16, H: 14, W: 14, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 14, OW: 14}
	if c := newConv[float32](cnn, 32); !c.posFwd || c.posBack || !c.spreadIn {
		t.Errorf("the CNN's 16→32 convolution: forward positions %v, input gradient %v, spread in the padded output gradient %v; want true, false, true",
			c.posFwd, c.posBack, c.spreadIn)
	}
}

// TestConv2dSpreadIn: where the weight gradient's spread output gradient
// is read from the input gradient's padded one, and where it cannot be:
// rows of other widths, no padding row after the last (qh = 0: the last
// row's spread zeros would be the next channel's first row), a strided
// input gradient (phases). Every geometry's gradients are checked against
// the definition by TestConv2dKernel and TestConv2dRandomGeometries.
func TestConv2dSpreadIn(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    device.WindowGeom
		want bool
	}{
		{"3×3, padding 1", device.WindowGeom{N: 2, C: 4, H: 9, W: 8, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 9, OW: 8}, true},
		{"3×3, no padding", device.WindowGeom{N: 2, C: 4, H: 9, W: 8, KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1, OH: 7, OW: 6}, true},
		{"3×3, padding 2 (qh = 0)", device.WindowGeom{N: 2, C: 4, H: 5, W: 5, KH: 3, KW: 3, SH: 1, SW: 1, PH: 2, PW: 2, DH: 1, DW: 1, OH: 7, OW: 7}, false},
		{"5×3, padding 2 and 1", device.WindowGeom{N: 2, C: 4, H: 6, W: 7, KH: 5, KW: 3, SH: 1, SW: 1, PH: 2, PW: 1, DH: 1, DW: 1, OH: 6, OW: 7}, true},
		{"3×3 of stride 2", phasedCases[0], false},
		{"3 channels (the fold)", device.WindowGeom{N: 2, C: 3, H: 9, W: 8, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 9, OW: 8}, false},
	} {
		if got := newConv[float32](tc.g, 5).spreadIn; got != tc.want {
			t.Errorf("%s: spreadIn %v, want %v", tc.name, got, tc.want)
		}
	}
}

// phasedCases are strided geometries whose input gradient is a windows
// product a phase (backPhases): odd sizes (phases of different extents),
// unequal strides, four taps a phase, an extra output past the input
// (ceil mode), a phase whose taps read ahead (a negative P), an input
// shorter than the stride, and PyTorch's stride-2 3×3 downsampling.
var phasedCases = []device.WindowGeom{
	{N: 2, C: 4, H: 7, W: 9, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 5},
	{N: 2, C: 5, H: 9, W: 6, KH: 3, KW: 2, SH: 2, SW: 1, PH: 1, PW: 0, DH: 1, DW: 1, OH: 5, OW: 5},
	{N: 2, C: 4, H: 8, W: 8, KH: 4, KW: 4, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 4},
	{N: 2, C: 4, H: 6, W: 6, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 4},
	{N: 2, C: 4, H: 7, W: 7, KH: 3, KW: 3, SH: 2, SW: 2, PH: 2, PW: 2, DH: 1, DW: 1, OH: 5, OW: 5},
	{N: 2, C: 4, H: 1, W: 6, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 1, OW: 3},
	{N: 3, C: 16, H: 16, W: 16, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 8, OW: 8},
}

// foldedStridedCases are strided geometries of 4 or more channels whose
// input gradient stays a fold: kernels smaller than the stride (phases no
// tap reaches; PyTorch's 1×1 downsampling, padded or not), fewer than two
// taps a phase (stride 3, non-overlapping patches, a short row), a
// dilated kernel.
var foldedStridedCases = []device.WindowGeom{
	{N: 2, C: 6, H: 8, W: 7, KH: 1, KW: 1, SH: 2, SW: 2, DH: 1, DW: 1, OH: 4, OW: 4},
	{N: 2, C: 4, H: 8, W: 9, KH: 2, KW: 2, SH: 3, SW: 3, DH: 1, DW: 1, OH: 3, OW: 3},
	{N: 3, C: 16, H: 16, W: 16, KH: 1, KW: 1, SH: 2, SW: 2, DH: 1, DW: 1, OH: 8, OW: 8},
	{N: 1, C: 4, H: 6, W: 6, KH: 1, KW: 1, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 4},
	{N: 2, C: 4, H: 10, W: 11, KH: 3, KW: 3, SH: 3, SW: 3, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 4},
	{N: 2, C: 4, H: 8, W: 8, KH: 4, KW: 4, SH: 4, SW: 4, DH: 1, DW: 1, OH: 2, OW: 2},
	{N: 2, C: 4, H: 1, W: 5, KH: 1, KW: 3, SH: 2, SW: 2, PW: 1, DH: 1, DW: 1, OH: 1, OW: 3},
	{N: 1, C: 4, H: 9, W: 9, KH: 3, KW: 3, SH: 2, SW: 2, PH: 2, PW: 2, DH: 2, DW: 2, OH: 5, OW: 5},
}

// TestConv2dPhases: the input gradients of phasedCases take the phases'
// windows products, one phase at least with taps that read ahead, and
// those of foldedStridedCases the fold (both checked against the
// definition by TestConv2dKernel).
func TestConv2dPhases(t *testing.T) {
	ahead := false
	for i, g := range phasedCases {
		c := newConv[float32](g, 5)
		if c.phases == nil || c.windowsBack {
			t.Errorf("phasedCases[%d] %+v: phases %d, windowsBack %v", i, g, len(c.phases), c.windowsBack)
		}
		for _, ph := range c.phases {
			ahead = ahead || ph.padH < 0 || ph.padW < 0
		}
	}
	if !ahead {
		t.Error("no phase of phasedCases reads ahead (a negative padding)")
	}
	for i, g := range foldedStridedCases {
		if c := newConv[float32](g, 5); c.phases != nil || c.windowsBack {
			t.Errorf("foldedStridedCases[%d] %+v: phases %d, windowsBack %v", i, g, len(c.phases), c.windowsBack)
		}
	}
}

// convRef is the convolution in float64 from its definition, tap by tap:
// y, and for dy the gradients of input, weight and bias.
func convRef(g device.WindowGeom, o int, x, w, b, dy []float64) (y, dx, dw, db []float64) {
	k, plane, out := g.KH*g.KW, g.H*g.W, g.OH*g.OW
	ck := g.C * k
	y = make([]float64, g.N*o*out)
	dx, dw, db = make([]float64, len(x)), make([]float64, len(w)), make([]float64, o)
	for n := range g.N {
		for r := range o {
			for p := range out {
				s := 0.0
				if b != nil {
					s = b[r]
				}
				g0 := dy[(n*o+r)*out+p]
				db[r] += g0
				for c := range g.C {
					for i := range g.KH {
						for j := range g.KW {
							at, in := tapAt(g, i, j, p/g.OW, p%g.OW)
							if !in {
								continue
							}
							xi := (n*g.C+c)*plane + at
							wi := r*ck + (c*g.KH+i)*g.KW + j
							s += w[wi] * x[xi]
							dx[xi] += w[wi] * g0
							dw[wi] += x[xi] * g0
						}
					}
				}
				y[(n*o+r)*out+p] = s
			}
		}
	}
	return y, dx, dw, db
}

// TestConv2dKernel: device.Convolver's forward and backward against the
// definition, for every geometry of the window kernels (padding, strides,
// dilations, one-row images, 1×1 kernels that need no columns) and
// batches split into blocks; with and without bias, in float32 and
// float64, each gradient alone or all at once.
func TestConv2dKernel(t *testing.T) { testConv2dKernel(t) }

// TestConv2dKernelIm2col runs TestConv2dKernel's cases through the route
// a sample too large for the windows products' int32 offsets takes:
// im2col and packed GEMMs for the forward and both gradients.
func TestConv2dKernelIm2col(t *testing.T) {
	defer func(m int64) { windowsMax = m }(windowsMax)
	windowsMax = 0
	if c := newConv[float32](convCases()[8].g, 2); c.windows || c.windowsBack || c.windowsGrad {
		t.Fatal("windowsMax = 0 still takes the windows products")
	}
	testConv2dKernel(t)
}

// TestConv2dRandomGeometries: the forward and both gradients of random
// small geometries (strides 1-3, kernels 1-5, paddings 0-2, dilations 1-2,
// sizes 1-9, 1-6 channels) against the definition, in float32 and
// float64, on the windows products' route and on im2col's, so that the
// routes a geometry chooses (windows, phases, fold, direct) are checked
// beyond the cases written down; some take the phases. It found taps that
// reach no position of a row panicking in the fold and the unfold.
func TestConv2dRandomGeometries(t *testing.T) {
	defer func(m int64) { windowsMax = m }(windowsMax)
	d := New(Options{})
	tries := 2000
	if testing.Short() {
		tries = 150
	}
	for _, route := range []struct {
		name string
		max  int64
	}{{"windows", windowsMax}, {"im2col", 0}} {
		for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
			t.Run(fmt.Sprintf("%s/%v", route.name, dt), func(t *testing.T) {
				windowsMax = route.max
				r := rand.New(rand.NewPCG(7, uint64(dt)))
				phased, spread := 0, 0
				for range tries {
					g := device.WindowGeom{N: 1 + r.IntN(2), C: 1 + r.IntN(6), H: 1 + r.IntN(9), W: 1 + r.IntN(9),
						KH: 1 + r.IntN(5), KW: 1 + r.IntN(5), SH: 1 + r.IntN(3), SW: 1 + r.IntN(3),
						PH: r.IntN(3), PW: r.IntN(3), DH: 1 + r.IntN(2), DW: 1 + r.IntN(2)}
					if g.H+2*g.PH < g.DH*(g.KH-1)+1 || g.W+2*g.PW < g.DW*(g.KW-1)+1 {
						continue // no output
					}
					g.OH = (g.H+2*g.PH-g.DH*(g.KH-1)-1)/g.SH + 1
					g.OW = (g.W+2*g.PW-g.DW*(g.KW-1)-1)/g.SW + 1
					o := 1 + r.IntN(3)
					if c := newConv[float32](g, o); c.phases != nil {
						phased++
					} else if c.spreadIn {
						spread++
					}
					checkConvGeometry(t, d, dt, g, o, r)
					if t.Failed() {
						return
					}
				}
				if route.max != 0 && (phased == 0 || spread == 0) {
					t.Errorf("of the random geometries, %d took the phases and %d read the spread output gradient from the padded one; want some of each", phased, spread)
				}
			})
		}
	}
}

// checkConvGeometry runs the forward and both gradients of g with o
// output channels on random operands and holds them to the definition.
func checkConvGeometry(t *testing.T, d *Device, dt dtype.DType, g device.WindowGeom, o int, r *rand.Rand) {
	t.Helper()
	ck, out := g.C*g.KH*g.KW, g.OH*g.OW
	xs, ws, dys := randn(r, g.N*g.C*g.H*g.W, 1, dt), randn(r, o*ck, 1, dt), randn(r, g.N*o*out, 1, dt)
	wantY, wantDx, wantDw, _ := convRef(g, o, xs, ws, nil, dys)
	x := newOperand(t, d, dt, []int{g.N, g.C, g.H, g.W}, xs, contiguous)
	w := newOperand(t, d, dt, []int{o, g.C, g.KH, g.KW}, ws, contiguous)
	dy := newOperand(t, d, dt, []int{g.N, o, g.OH, g.OW}, dys, contiguous)
	y := emptyOperand(t, d, dt, dy.Shape, contiguous)
	dx := emptyOperand(t, d, dt, x.Shape, contiguous)
	dw := emptyOperand(t, d, dt, w.Shape, contiguous)
	for _, v := range []device.View{y, dx, dw} {
		poison(t, d, v)
	}
	if err := d.Conv2d(y, x, w, device.View{}, g); err != nil {
		t.Fatalf("%+v: %v", g, err)
	}
	if err := d.Conv2dBackward(dx, dw, device.View{}, dy, x, w, g); err != nil {
		t.Fatalf("%+v: %v", g, err)
	}
	tol := 10 * tolerance(dt)
	what := fmt.Sprintf("%+v o=%d: ", g, o)
	assertClose(t, what+"y", values(t, d, y), wantY, tol)
	assertClose(t, what+"dx", values(t, d, dx), wantDx, tol)
	assertClose(t, what+"dw", values(t, d, dw), wantDw, tol)
}

func testConv2dKernel(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(3, 4))
	for ci, tc := range convCases() {
		g, o := tc.g, tc.o
		for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
			for _, withBias := range []bool{true, false} {
				t.Run(fmt.Sprintf("%d/%v/bias=%v", ci, dt, withBias), func(t *testing.T) {
					ck, out := g.C*g.KH*g.KW, g.OH*g.OW
					xs := randn(r, g.N*g.C*g.H*g.W, 1, dt)
					ws := randn(r, o*ck, 1, dt)
					dys := randn(r, g.N*o*out, 1, dt)
					var bs []float64
					var bias device.View
					if withBias {
						bs = randn(r, o, 1, dt)
						bias = newOperand(t, d, dt, []int{o}, bs, contiguous)
					}
					wantY, wantDx, wantDw, wantDb := convRef(g, o, xs, ws, bs, dys)
					x := newOperand(t, d, dt, []int{g.N, g.C, g.H, g.W}, xs, contiguous)
					w := newOperand(t, d, dt, []int{o, g.C, g.KH, g.KW}, ws, contiguous)
					dy := newOperand(t, d, dt, []int{g.N, o, g.OH, g.OW}, dys, contiguous)
					y := emptyOperand(t, d, dt, dy.Shape, contiguous)
					poison(t, d, y)
					if err := d.Conv2d(y, x, w, bias, g); err != nil {
						t.Fatal(err)
					}
					tol := 10 * tolerance(dt)
					assertClose(t, "y", values(t, d, y), wantY, tol)

					dx := emptyOperand(t, d, dt, x.Shape, contiguous)
					dw := emptyOperand(t, d, dt, w.Shape, contiguous)
					db := emptyOperand(t, d, dt, []int{o}, contiguous)
					for _, v := range []device.View{dx, dw, db} {
						poison(t, d, v)
					}
					if err := d.Conv2dBackward(dx, dw, db, dy, x, w, g); err != nil {
						t.Fatal(err)
					}
					assertClose(t, "dx", values(t, d, dx), wantDx, tol)
					assertClose(t, "dw", values(t, d, dw), wantDw, tol)
					assertClose(t, "dbias", values(t, d, db), wantDb, tol)
					all := [][]byte{rawBits(t, d, dx), rawBits(t, d, dw)}

					// Each gradient alone is the same, bit for bit.
					for i, v := range []device.View{dx, dw} {
						poison(t, d, v)
						views := []device.View{{}, {}}
						views[i] = v
						if err := d.Conv2dBackward(views[0], views[1], device.View{}, dy, x, w, g); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(rawBits(t, d, v), all[i]) {
							t.Errorf("gradient %d alone differs from its value beside the other", i)
						}
					}
				})
			}
		}
	}
}

// TestConv2dKernelThreads: the forward and both gradients are the same
// bit for bit on 1, 2, 3 and 8 threads (the weight gradient's sum over
// samples runs in blocks chosen from the batch alone), both when the
// batch splits into blocks and when it is one block, on the windows
// products' route and on im2col's.
func TestConv2dKernelThreads(t *testing.T) {
	defer func(m int64) { windowsMax = m }(windowsMax)
	for _, max := range []int64{windowsMax, 0} { // the windows products, then im2col
		windowsMax = max
		testConv2dKernelThreads(t)
	}
}

func testConv2dKernelThreads(t *testing.T) {
	d := New(Options{})
	defer parallel.SetThreads(0)
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		g device.WindowGeom
		o int
	}{
		{device.WindowGeom{N: 23, C: 3, H: 10, W: 9, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 10, OW: 9}, 5},
		{device.WindowGeom{N: 1, C: 3, H: 10, W: 9, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 5, OW: 5}, 5},
		// 4 or more channels: the input gradient as a windows product;
		// rows of whole kernel tiles.
		{device.WindowGeom{N: 19, C: 5, H: 8, W: 7, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 8, OW: 7}, 5},
		{device.WindowGeom{N: 2, C: 4, H: 4, W: 32, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 4, OW: 32}, 5},
		// Strided, 4 or more channels: the input gradient a product a
		// phase; one sample (every thread in each product) and several.
		{device.WindowGeom{N: 1, C: 6, H: 11, W: 34, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 6, OW: 17}, 5},
		{device.WindowGeom{N: 9, C: 4, H: 9, W: 9, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 5, OW: 5}, 5},
		// 32 output channels of a 14-wide image: the forward a
		// positions product where the machine has its kernel.
		{device.WindowGeom{N: 7, C: 4, H: 5, W: 14, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: 5, OW: 14}, 32},
	} {
		g, o := tc.g, tc.o
		ck, out := g.C*g.KH*g.KW, g.OH*g.OW
		x := newOperand(t, d, dtype.Float32, []int{g.N, g.C, g.H, g.W}, randn(r, g.N*g.C*g.H*g.W, 1, dtype.Float32), contiguous)
		w := newOperand(t, d, dtype.Float32, []int{o, ck}, randn(r, o*ck, 1, dtype.Float32), contiguous)
		b := newOperand(t, d, dtype.Float32, []int{o}, randn(r, o, 1, dtype.Float32), contiguous)
		dy := newOperand(t, d, dtype.Float32, []int{g.N, o, out}, randn(r, g.N*o*out, 1, dtype.Float32), contiguous)
		var first [][]byte
		for _, threads := range []int{1, 2, 3, 8} {
			parallel.SetThreads(threads)
			y := emptyOperand(t, d, dtype.Float32, dy.Shape, contiguous)
			dx := emptyOperand(t, d, dtype.Float32, x.Shape, contiguous)
			dw := emptyOperand(t, d, dtype.Float32, w.Shape, contiguous)
			db := emptyOperand(t, d, dtype.Float32, b.Shape, contiguous)
			if err := d.Conv2d(y, x, w, b, g); err != nil {
				t.Fatal(err)
			}
			if err := d.Conv2dBackward(dx, dw, db, dy, x, w, g); err != nil {
				t.Fatal(err)
			}
			got := [][]byte{rawBits(t, d, y), rawBits(t, d, dx), rawBits(t, d, dw), rawBits(t, d, db)}
			if first == nil {
				first = got
				continue
			}
			for i, name := range []string{"y", "dx", "dw", "dbias"} {
				if !bytes.Equal(got[i], first[i]) {
					t.Errorf("N=%d: %s on %d threads differs from 1 thread", g.N, name, threads)
				}
			}
		}
	}
}

// TestConv2dKernelRefuses: operands that do not match the geometry are
// errors naming the shapes, never a panic.
func TestConv2dKernelRefuses(t *testing.T) {
	d := New(Options{})
	g := device.WindowGeom{N: 2, C: 3, H: 5, W: 5, KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1, OH: 3, OW: 3}
	f32 := func(shape ...int) device.View {
		return emptyOperand(t, d, dtype.Float32, shape, contiguous)
	}
	x, w, y := f32(2, 3, 5, 5), f32(4, 3, 3, 3), f32(2, 4, 3, 3)
	for name, err := range map[string]error{
		"input":      d.Conv2d(y, f32(2, 3, 5, 4), w, device.View{}, g),
		"weight":     d.Conv2d(y, x, f32(4, 3, 3, 2), device.View{}, g),
		"output":     d.Conv2d(f32(2, 4, 3, 2), x, w, device.View{}, g),
		"bias":       d.Conv2d(y, x, w, f32(3), g),
		"dtype":      d.Conv2d(y, x, emptyOperand(t, d, dtype.Float64, w.Shape, contiguous), device.View{}, g),
		"bfloat16":   d.Conv2d(emptyOperand(t, d, dtype.BFloat16, y.Shape, contiguous), emptyOperand(t, d, dtype.BFloat16, x.Shape, contiguous), emptyOperand(t, d, dtype.BFloat16, w.Shape, contiguous), device.View{}, g),
		"dx":         d.Conv2dBackward(f32(2, 3, 5), device.View{}, device.View{}, y, x, w, g),
		"dw":         d.Conv2dBackward(device.View{}, f32(4, 3, 3), device.View{}, y, x, w, g),
		"dbias":      d.Conv2dBackward(device.View{}, device.View{}, f32(5), y, x, w, g),
		"geometry":   d.Conv2d(y, x, w, device.View{}, device.WindowGeom{N: 2, C: 3, H: 5, W: 5, KH: 3, KW: 3, SH: 0, SW: 1, DH: 1, DW: 1, OH: 3, OW: 3}),
		"transposed": d.Conv2d(y, x, emptyOperand(t, d, dtype.Float32, w.Shape, strided), device.View{}, g),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestConv2dBiasOnce: the output with a bias is the output without it
// plus the bias, one rounding per element (as PyTorch's slow_conv2d,
// which starts the output from the bias and adds the product), whether
// the bias is added while flattened rows are packed (a 14-wide image), the
// product starts from it (32 wide) or a positions product's scratch tile
// does (14 wide, 32 channels), in float32 and float64.
func TestConv2dBiasOnce(t *testing.T) {
	d := New(Options{})
	for _, tc := range []struct{ hw, o int }{{14, 7}, {32, 7}, {14, 32}} {
		hw, o := tc.hw, tc.o
		for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
			t.Run(fmt.Sprintf("%d/%d/%v", hw, o, dt), func(t *testing.T) {
				g := device.WindowGeom{N: 3, C: 5, H: hw, W: hw, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, OH: hw, OW: hw}
				r := rand.New(rand.NewPCG(3, uint64(hw)))
				x := newOperand(t, d, dt, []int{g.N, g.C, g.H, g.W}, randn(r, g.N*g.C*g.H*g.W, 1, dt), contiguous)
				w := newOperand(t, d, dt, []int{o, g.C * 9}, randn(r, o*g.C*9, 1, dt), contiguous)
				bias := newOperand(t, d, dt, []int{o}, randn(r, o, 1, dt), contiguous)
				y := emptyOperand(t, d, dt, []int{g.N, o, hw * hw}, contiguous)
				y0 := emptyOperand(t, d, dt, []int{g.N, o, hw * hw}, contiguous)
				if err := d.Conv2d(y, x, w, bias, g); err != nil {
					t.Fatal(err)
				}
				if err := d.Conv2d(y0, x, w, device.View{}, g); err != nil {
					t.Fatal(err)
				}
				got, plain, b := values(t, d, y), values(t, d, y0), values(t, d, bias)
				for i := range got {
					want := plain[i] + b[i/(hw*hw)%o]
					if dt == dtype.Float32 {
						want = float64(float32(plain[i]) + float32(b[i/(hw*hw)%o]))
					}
					if got[i] != want {
						t.Fatalf("y[%d] = %v, want %v + bias = %v", i, got[i], plain[i], want)
					}
				}
			})
		}
	}
}

// TestPaddingWidth holds the padded row's width: the right padding shared
// with the next row's left for a rows product (tile 0), and for a
// flattened windows product the width of the fewest tiles of 32, the
// widest of those. TestConv2dRandomGeometries holds the results.
func TestPaddingWidth(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		cols, k, pad, stride int
		tile, want, wantRows int
	}{
		{"14 wide, 3×3, padding 1", 14, 3, 1, 1, 32, 16, 15}, // 14·16 = 7 tiles; 14·15 too, the last partial
		{"28 wide, 3×3, padding 1", 28, 3, 1, 1, 32, 29, 29}, // 28·29 = 26 tiles against 28·30's 27
		{"32 wide, 3×3, padding 1", 32, 3, 1, 1, 32, 33, 33}, // not flattened: the narrowest
		{"8 wide, 3×3, padding 1", 8, 3, 1, 1, 32, 10, 9},    // 8·10 and 8·9 are 3 tiles
		{"14 wide, 3×3, no padding", 14, 3, 0, 1, 32, 14, 14},
		{"14 wide, 5×5, padding 2", 14, 5, 2, 1, 32, 16, 16}, // 14·16 = 7 tiles against 14·18's 8
		{"1×1, padding 2", 5, 1, 2, 1, 32, 9, 9},
		{"32 wide, 3×3 of stride 2, padding 1", 32, 3, 1, 2, 32, 17, 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := (tc.cols+2*tc.pad-tc.k)/tc.stride + 1
			for _, c := range []struct{ tile, want int }{{tc.tile, tc.want}, {0, tc.wantRows}} {
				p := newPadding(1, tc.cols, tc.cols, tc.k, tc.k, tc.stride, tc.stride, tc.pad, tc.pad, 1, 1, out, out, c.tile)
				if p.w != c.want {
					t.Errorf("tile %d: width %d, want %d", c.tile, p.w, c.want)
				}
			}
		})
	}
}
