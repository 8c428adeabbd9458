package cpu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Shared helpers of the nn, index and attention tests: operands built from
// float64 data in any dtype and layout, read back as float64 in row-major
// order, and compared against float64 references.

// layout selects how a test operand is stored.
type layout int

const (
	contiguous layout = iota
	// strided stores the axes in reverse order, each padded by one
	// element, at a non-zero offset: no two strides are what a
	// contiguous tensor would have.
	strided
)

func (l layout) String() string {
	if l == strided {
		return "strided"
	}
	return "contiguous"
}

// newOperand returns a view of shape in dt holding data (row-major).
func newOperand(t testing.TB, d *Device, dt dtype.DType, shape []int, data []float64, l layout) device.View {
	t.Helper()
	n := 1
	for _, e := range shape {
		n *= e
	}
	if len(data) != n {
		t.Fatalf("newOperand: %d values for shape %v", len(data), shape)
	}
	v := emptyOperand(t, d, dt, shape, l)
	src := hostView(dtype.Float64, shape, data)
	if err := d.Copy(v, src); err != nil {
		t.Fatal(err)
	}
	return v
}

// emptyOperand returns an uninitialised view (filled with NaN where the type
// has one, so that an element a kernel forgets to write shows up).
func emptyOperand(t testing.TB, d *Device, dt dtype.DType, shape []int, l layout) device.View {
	t.Helper()
	if l == contiguous {
		n := 1
		for _, e := range shape {
			n *= e
		}
		buf, err := d.Alloc(dt, n)
		if err != nil {
			t.Fatal(err)
		}
		v := device.View{Buf: buf, DType: dt, Shape: append([]int(nil), shape...), Strides: device.ContiguousStrides(shape)}
		poison(t, d, v)
		return v
	}
	const offset = 3
	strides := make([]int, len(shape))
	size := 1
	for i := 0; i < len(shape); i++ { // axis 0 varies fastest
		strides[i] = size
		size *= shape[i] + 1
	}
	buf, err := d.Alloc(dt, offset+size)
	if err != nil {
		t.Fatal(err)
	}
	whole := device.View{Buf: buf, DType: dt, Shape: []int{offset + size}, Strides: []int{1}}
	poison(t, d, whole)
	return device.View{Buf: buf, DType: dt, Offset: offset, Shape: append([]int(nil), shape...), Strides: strides}
}

func poison(t testing.TB, d *Device, v device.View) {
	t.Helper()
	val := math.NaN()
	if !v.DType.IsFloat() {
		val = -7777
	}
	if err := d.Fill(v, val); err != nil {
		t.Fatal(err)
	}
}

// hostView wraps float64 values in a contiguous view of a fresh buffer that
// belongs to no device (kernels only read it).
func hostView(dt dtype.DType, shape []int, data []float64) device.View {
	b := &Buffer{data: make([]byte, 8*len(data))}
	for i, x := range data {
		binary.LittleEndian.PutUint64(b.data[8*i:], math.Float64bits(x))
	}
	return device.View{Buf: b, DType: dt, Shape: shape, Strides: device.ContiguousStrides(shape)}
}

// indexOperand returns an int64 view of the given indices.
func indexOperand(t testing.TB, d *Device, shape []int, idx []int64, l layout) device.View {
	t.Helper()
	data := make([]float64, len(idx))
	for i, x := range idx {
		data[i] = float64(x)
	}
	return newOperand(t, d, dtype.Int64, shape, data, l)
}

// values reads a view back as float64, row-major.
func values(t testing.TB, d *Device, v device.View) []float64 {
	t.Helper()
	n := v.Numel()
	host := &Buffer{data: make([]byte, 8*n)}
	dst := device.View{Buf: host, DType: dtype.Float64, Shape: v.Shape, Strides: device.ContiguousStrides(v.Shape)}
	if n > 0 {
		if err := d.Copy(dst, v); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(host.data[8*i:]))
	}
	return out
}

// rawBits reads the bytes a view addresses, for bit-exact comparisons.
func rawBits(t testing.TB, d *Device, v device.View) []byte {
	t.Helper()
	out := make([]byte, v.Numel()*v.DType.Size())
	if err := d.Download(out, v); err != nil {
		t.Fatal(err)
	}
	return out
}

// randn returns n normally distributed values, rounded to dt so that the
// float64 reference sees exactly the kernel's inputs.
func randn(r *rand.Rand, n int, scale float64, dt dtype.DType) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = roundTo(dt, r.NormFloat64()*scale)
	}
	return out
}

func roundTo(dt dtype.DType, x float64) float64 {
	switch dt {
	case dtype.Float32:
		return float64(float32(x))
	case dtype.BFloat16:
		return float64(dtype.BF16FromFloat32(float32(x)).Float32())
	case dtype.Float16:
		return float64(dtype.F16FromFloat32(float32(x)).Float32())
	case dtype.Int64:
		return math.Round(x)
	}
	return x
}

// tolerance is the relative error allowed for a result of dt computed from
// values of magnitude about 1.
func tolerance(dt dtype.DType) float64 {
	switch dt {
	case dtype.Float32:
		return 2e-5
	case dtype.BFloat16:
		return 2e-2
	case dtype.Float16:
		return 3e-3
	}
	return 1e-12
}

// assertClose fails unless |got−want| ≤ tol·(1+|want|) everywhere.
func assertClose(t testing.TB, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		if !(math.Abs(got[i]-want[i]) <= tol*(1+math.Abs(want[i]))) {
			if bad < 5 {
				t.Errorf("%s[%d] = %.9g, want %.9g", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(got))
	}
}

// numel is the product of a shape.
func numel(shape []int) int {
	n := 1
	for _, e := range shape {
		n *= e
	}
	return n
}

// forEach calls fn with every multi-index of shape in row-major order, and
// its linear position.
func forEach(shape []int, fn func(pos []int, i int)) {
	n := numel(shape)
	pos := make([]int, len(shape))
	for i := 0; i < n; i++ {
		fn(pos, i)
		for dd := len(shape) - 1; dd >= 0; dd-- {
			pos[dd]++
			if pos[dd] < shape[dd] {
				break
			}
			pos[dd] = 0
		}
	}
}

// linear is the row-major position of pos in shape.
func linear(shape, pos []int) int {
	i := 0
	for dd, p := range pos {
		i = i*shape[dd] + p
	}
	return i
}

var testDTypes = []dtype.DType{dtype.Float32, dtype.Float64, dtype.BFloat16}

// softmaxRef is the float64 softmax (or log-softmax) of rows of n.
func softmaxRef(x []float64, n int, log bool) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for i, v := range row {
			if log {
				out[r*n+i] = v - m - math.Log(s)
			} else {
				out[r*n+i] = math.Exp(v-m) / s
			}
		}
	}
	return out
}

func softmaxBackwardRef(dy, y []float64, n int, log bool) []float64 {
	out := make([]float64, len(y))
	for r := 0; r < len(y)/n; r++ {
		s := 0.0
		for i := r * n; i < (r+1)*n; i++ {
			if log {
				s += dy[i]
			} else {
				s += dy[i] * y[i]
			}
		}
		for i := r * n; i < (r+1)*n; i++ {
			if log {
				out[i] = dy[i] - math.Exp(y[i])*s
			} else {
				out[i] = y[i] * (dy[i] - s)
			}
		}
	}
	return out
}

// rowShapes are the shapes of the row kernels' tests: no rows, one row, one
// element, rows shorter and longer than a vector, odd sizes, more than two
// dimensions.
var rowShapes = [][]int{{0, 5}, {1, 1}, {1, 5}, {3, 7}, {4, 33}, {2, 3, 100}, {37, 513}, {5, 1000}}

func TestSoftmax(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(11, 12))
	for _, shape := range rowShapes {
		for _, dt := range testDTypes {
			for _, log := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%v/log=%v", shape, dt, log), func(t *testing.T) {
					n := shape[len(shape)-1]
					xs := randn(r, numel(shape), 4, dt)
					x := newOperand(t, d, dt, shape, xs, contiguous)
					y := emptyOperand(t, d, dt, shape, contiguous)
					if err := d.Softmax(y, x, log); err != nil {
						t.Fatal(err)
					}
					ys := values(t, d, y)
					assertClose(t, "y", ys, softmaxRef(xs, n, log), tolerance(dt))

					// The backward from the kernel's own output, rounded
					// as the autograd graph would keep it.
					dys := randn(r, numel(shape), 1, dt)
					dy := newOperand(t, d, dt, shape, dys, contiguous)
					dx := emptyOperand(t, d, dt, shape, contiguous)
					if err := d.SoftmaxBackward(dx, dy, y, log); err != nil {
						t.Fatal(err)
					}
					assertClose(t, "dx", values(t, d, dx), softmaxBackwardRef(dys, ys, n, log), 4*tolerance(dt))
				})
			}
		}
	}
}

func TestSoftmaxExtremes(t *testing.T) {
	d := New(Options{})
	inf := math.Inf(1)
	cases := []struct {
		x, soft, logSoft []float64
	}{
		{[]float64{-inf, 0, -inf}, []float64{0, 1, 0}, []float64{-inf, 0, -inf}},
		{[]float64{1000, 1000}, []float64{0.5, 0.5}, []float64{-math.Ln2, -math.Ln2}},
		{[]float64{-1000, 0}, []float64{0, 1}, []float64{-1000, 0}},
	}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.Float64} {
		for _, c := range cases {
			x := newOperand(t, d, dt, []int{1, len(c.x)}, c.x, contiguous)
			for _, log := range []bool{false, true} {
				y := emptyOperand(t, d, dt, x.Shape, contiguous)
				if err := d.Softmax(y, x, log); err != nil {
					t.Fatal(err)
				}
				want := c.soft
				if log {
					want = c.logSoft
				}
				got := values(t, d, y)
				for i := range got {
					if got[i] != want[i] && math.Abs(got[i]-want[i]) > 1e-6 {
						t.Errorf("%v softmax(log=%v) of %v = %v, want %v", dt, log, c.x, got, want)
						break
					}
				}
			}
		}
	}
}

// layerNormRef returns y, mean and rstd of rows of n in float64.
func layerNormRef(x, w, b []float64, n int, eps float64) (y, mean, rstd []float64) {
	rows := len(x) / n
	y = make([]float64, len(x))
	mean, rstd = make([]float64, rows), make([]float64, rows)
	for r := 0; r < rows; r++ {
		row := x[r*n : (r+1)*n]
		m, v := 0.0, 0.0
		for _, e := range row {
			m += e
		}
		m /= float64(n)
		for _, e := range row {
			v += (e - m) * (e - m)
		}
		v /= float64(n)
		rs := 1 / math.Sqrt(v+eps)
		mean[r], rstd[r] = m, rs
		for i, e := range row {
			o := (e - m) * rs
			if w != nil {
				o *= w[i]
			}
			if b != nil {
				o += b[i]
			}
			y[r*n+i] = o
		}
	}
	return y, mean, rstd
}

// layerNormBackwardRef differentiates layerNormRef given its mean and rstd.
func layerNormBackwardRef(dy, x, w, mean, rstd []float64, n int) (dx, dw, db []float64) {
	rows := len(x) / n
	dx, dw, db = make([]float64, len(x)), make([]float64, n), make([]float64, n)
	for r := 0; r < rows; r++ {
		m, rs := mean[r], rstd[r]
		// With xh = (x−m)·rs and g = dy·w:
		// dx = rs·(g − mean(g) − xh·mean(g·xh)).
		var sg, sgx float64
		for i := 0; i < n; i++ {
			g := dy[r*n+i]
			if w != nil {
				g *= w[i]
			}
			xh := (x[r*n+i] - m) * rs
			sg += g
			sgx += g * xh
			dw[i] += dy[r*n+i] * xh
			db[i] += dy[r*n+i]
		}
		for i := 0; i < n; i++ {
			g := dy[r*n+i]
			if w != nil {
				g *= w[i]
			}
			xh := (x[r*n+i] - m) * rs
			dx[r*n+i] = rs * (g - sg/float64(n) - xh*sgx/float64(n))
		}
	}
	return dx, dw, db
}

func TestLayerNorm(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(13, 14))
	const eps = 1e-5
	affines := []struct{ w, b bool }{{true, true}, {false, false}, {true, false}, {false, true}}
	for _, shape := range rowShapes {
		for _, dt := range testDTypes {
			for _, aff := range affines {
				t.Run(fmt.Sprintf("%v/%v/w=%v,b=%v", shape, dt, aff.w, aff.b), func(t *testing.T) {
					n := shape[len(shape)-1]
					rows := numel(shape) / n
					statDT := dt
					if isHalf(dt) {
						statDT = dtype.Float32
					}
					xs := randn(r, numel(shape), 2, dt)
					for i := range xs { // an offset the mean must remove
						xs[i] = roundTo(dt, xs[i]+1.5)
					}
					x := newOperand(t, d, dt, shape, xs, contiguous)
					var ws, bs []float64
					var w, b device.View
					if aff.w {
						ws = randn(r, n, 1, dt)
						w = newOperand(t, d, dt, []int{n}, ws, contiguous)
					}
					if aff.b {
						bs = randn(r, n, 1, dt)
						b = newOperand(t, d, dt, []int{n}, bs, contiguous)
					}
					y := emptyOperand(t, d, dt, shape, contiguous)
					mean := emptyOperand(t, d, statDT, []int{rows}, contiguous)
					rstd := emptyOperand(t, d, statDT, []int{rows}, contiguous)
					if err := d.LayerNorm(y, mean, rstd, x, w, b, eps); err != nil {
						t.Fatal(err)
					}
					wantY, wantMean, wantRstd := layerNormRef(xs, ws, bs, n, eps)
					tol := tolerance(dt)
					if n == 1 {
						tol = 1e-3 // rstd = 1/√eps magnifies the rounding of x − mean
					}
					assertClose(t, "y", values(t, d, y), wantY, 4*tol)
					means, rstds := values(t, d, mean), values(t, d, rstd)
					assertClose(t, "mean", means, wantMean, tolerance(statDT))
					if n > 1 {
						assertClose(t, "rstd", rstds, wantRstd, tolerance(statDT))
					}

					dys := randn(r, numel(shape), 1, dt)
					dy := newOperand(t, d, dt, shape, dys, contiguous)
					dx := emptyOperand(t, d, dt, shape, contiguous)
					var dw, db device.View
					if aff.w {
						dw = emptyOperand(t, d, dt, []int{n}, contiguous)
					}
					if aff.b {
						db = emptyOperand(t, d, dt, []int{n}, contiguous)
					}
					if err := d.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w); err != nil {
						t.Fatal(err)
					}
					wantDx, wantDw, wantDb := layerNormBackwardRef(dys, xs, ws, means, rstds, n)
					if n > 1 {
						assertClose(t, "dx", values(t, d, dx), wantDx, 8*tolerance(dt))
					}
					if aff.w {
						assertClose(t, "dw", values(t, d, dw), wantDw, 8*tolerance(dt))
					}
					if aff.b {
						assertClose(t, "db", values(t, d, db), wantDb, 8*tolerance(dt))
					}
				})
			}
		}
	}
}

// TestLayerNormTorch compares with values computed by PyTorch 1.13
// (float32, eps 1e-5).
func TestLayerNormTorch(t *testing.T) {
	x := []float64{2.0516176223754883, 0.02401655912399292, 0.6053371429443359, -1.109177827835083, 3.5559911727905273, 1.290675401687622, 1.4621027708053589, 1.017307996749878, 0.7154206037521362, 1.3941407203674316, -0.2834482192993164, -3.412796974182129, -0.5016061067581177, 6.628054141998291, 1.7195746898651123, 0.8203834295272827, 1.916879653930664, -0.12888002395629883}
	w := []float64{2.0037777423858643, 0.6621911525726318, 0.5332217216491699, 2.748873233795166, -0.3840780258178711, -1.962258219718933}
	b := []float64{-0.30899786949157715, -0.4268203377723694, 0.4503966271877289, -0.0022214562632143497, -0.19801591336727142, 1.775763750076294}
	dy := []float64{0.5886339545249939, -0.8904569149017334, -0.16911523044109344, 1.931160569190979, 1.0118638277053833, -1.4364064931869507, -1.1298598051071167, -0.1360345333814621, 1.6354095935821533, 0.6547407507896423, 0.44053012132644653, 1.1415079832077026, 0.018564576283097267, -1.8058050870895386, 0.9254348874092102, -0.3753443658351898, 1.0330873727798462, -0.6866509318351746}
	wantY := []float64{1.0148922204971313, -0.8927798271179199, 0.2837669253349304, -4.032571315765381, -0.8405710458755493, 1.4840470552444458, 1.2442517280578613, -0.08736228197813034, 0.6287298798561096, 2.0183300971984863, -0.1000300943851471, 5.900747776031494, -2.2179958820343018, 0.9467083215713501, 0.4452292323112488, -1.0782543420791626, -0.22646667063236237, 3.3346943855285645}
	wantDx := []float64{0.37303853034973145, -1.8566663265228271, -1.2226122617721558, 1.5313493013381958, 0.08893132209777832, 1.085959553718567, -1.4786709547042847, -0.07765816152095795, 0.5702362656593323, 0.9379214644432068, 0.22043989598751068, -0.17226843535900116, -0.148229718208313, 0.017214708030223846, 0.26010239124298096, -0.47432634234428406, -0.09879010915756226, 0.4440290629863739}
	wantDw := []float64{-0.5046005249023438, -3.188786506652832, 0.5908339023590088, -2.203242063522339, 1.656967282295227, -2.0676608085632324}
	wantDb := []float64{-0.5226612687110901, -2.832296371459961, 2.3917293548583984, 2.210556983947754, 2.4854812622070312, -0.9815494418144226}
	d := New(Options{})
	f := dtype.Float32
	xv := newOperand(t, d, f, []int{3, 6}, x, contiguous)
	wv := newOperand(t, d, f, []int{6}, w, contiguous)
	bv := newOperand(t, d, f, []int{6}, b, contiguous)
	y := emptyOperand(t, d, f, []int{3, 6}, contiguous)
	mean := emptyOperand(t, d, f, []int{3}, contiguous)
	rstd := emptyOperand(t, d, f, []int{3}, contiguous)
	if err := d.LayerNorm(y, mean, rstd, xv, wv, bv, 1e-5); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "y", values(t, d, y), wantY, 1e-6)
	dx := emptyOperand(t, d, f, []int{3, 6}, contiguous)
	dw := emptyOperand(t, d, f, []int{6}, contiguous)
	db := emptyOperand(t, d, f, []int{6}, contiguous)
	if err := d.LayerNormBackward(dx, dw, db, newOperand(t, d, f, []int{3, 6}, dy, contiguous), xv, mean, rstd, wv); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "dx", values(t, d, dx), wantDx, 1e-6)
	assertClose(t, "dw", values(t, d, dw), wantDw, 1e-6)
	assertClose(t, "db", values(t, d, db), wantDb, 1e-6)
}

// TestLayerNormBackwardDeterministic checks that dw and db are the same bits
// from run to run and whatever the number of threads.
func TestLayerNormBackwardDeterministic(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(15, 16))
	const rows, n = 1024, 256
	f := dtype.Float32
	x := newOperand(t, d, f, []int{rows, n}, randn(r, rows*n, 1, f), contiguous)
	w := newOperand(t, d, f, []int{n}, randn(r, n, 1, f), contiguous)
	dy := newOperand(t, d, f, []int{rows, n}, randn(r, rows*n, 1, f), contiguous)
	y := emptyOperand(t, d, f, []int{rows, n}, contiguous)
	mean := emptyOperand(t, d, f, []int{rows}, contiguous)
	rstd := emptyOperand(t, d, f, []int{rows}, contiguous)
	if err := d.LayerNorm(y, mean, rstd, x, w, device.View{}, 1e-5); err != nil {
		t.Fatal(err)
	}
	run := func() []byte {
		dx := emptyOperand(t, d, f, []int{rows, n}, contiguous)
		dw := emptyOperand(t, d, f, []int{n}, contiguous)
		db := emptyOperand(t, d, f, []int{n}, contiguous)
		if err := d.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w); err != nil {
			t.Fatal(err)
		}
		return append(append(rawBits(t, d, dx), rawBits(t, d, dw)...), rawBits(t, d, db)...)
	}
	first := run()
	all := parallel.Threads()
	defer parallel.SetThreads(all)
	for _, threads := range []int{all, 1, 3, all} {
		parallel.SetThreads(threads)
		if !bytes.Equal(run(), first) {
			t.Fatalf("layer_norm backward on %d threads gives different bits", threads)
		}
	}
}

// crossEntropyRef returns the per-row losses, the count and the gradient of
// Σ dloss·loss.
func crossEntropyRef(x []float64, c int, tg []int64, dloss []float64, opt device.CrossEntropyOptions) (loss []float64, count int, grad []float64) {
	n := len(tg)
	loss, grad = make([]float64, n), make([]float64, n*c)
	eps := opt.LabelSmoothing
	for r := 0; r < n; r++ {
		if tg[r] == opt.IgnoreIndex {
			continue
		}
		count++
		row := x[r*c : (r+1)*c]
		lp := softmaxRef(row, c, true)
		sum := 0.0
		for _, v := range lp {
			sum += v
		}
		loss[r] = (1-eps)*-lp[tg[r]] + eps*-sum/float64(c)
		for i := range row {
			g := math.Exp(lp[i]) - eps/float64(c)
			if int64(i) == tg[r] {
				g -= 1 - eps
			}
			grad[r*c+i] = dloss[r] * g
		}
	}
	return loss, count, grad
}

func TestCrossEntropy(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(17, 18))
	shapes := [][2]int{{1, 1}, {1, 5}, {6, 5}, {7, 33}, {64, 512}, {3, 1000}, {0, 4}}
	opts := []device.CrossEntropyOptions{{IgnoreIndex: -100}, {IgnoreIndex: -100, LabelSmoothing: 0.1}, {IgnoreIndex: 2}, {IgnoreIndex: 0, LabelSmoothing: 0.25}}
	for _, s := range shapes {
		for _, dt := range testDTypes {
			for _, opt := range opts {
				for _, bcast := range []bool{false, true} {
					n, c := s[0], s[1]
					t.Run(fmt.Sprintf("%dx%d/%v/ignore=%d,eps=%v/bcast=%v", n, c, dt, opt.IgnoreIndex, opt.LabelSmoothing, bcast), func(t *testing.T) {
						xs := randn(r, n*c, 3, dt)
						tg := randIndices(r, n, c)
						for i := range tg {
							if i%3 == 1 && opt.IgnoreIndex < 0 {
								tg[i] = opt.IgnoreIndex
							}
						}
						logits := newOperand(t, d, dt, []int{n, c}, xs, contiguous)
						target := indexOperand(t, d, []int{n}, tg, strided)
						loss := emptyOperand(t, d, dt, []int{n}, strided)
						count, err := d.CrossEntropy(loss, logits, target, opt)
						if err != nil {
							t.Fatal(err)
						}
						dls := randn(r, n, 1, dt)
						dloss := newOperand(t, d, dt, []int{n}, dls, contiguous)
						if bcast && n > 0 {
							for i := range dls {
								dls[i] = dls[0]
							}
							dloss.Shape, dloss.Strides = []int{n}, []int{0}
						}
						wantLoss, wantCount, wantGrad := crossEntropyRef(xs, c, tg, dls, opt)
						if count != wantCount {
							t.Errorf("count = %d, want %d", count, wantCount)
						}
						assertClose(t, "loss", values(t, d, loss), wantLoss, 2*tolerance(dt))
						dx := emptyOperand(t, d, dt, []int{n, c}, contiguous)
						if err := d.CrossEntropyBackward(dx, dloss, logits, target, opt); err != nil {
							t.Fatal(err)
						}
						assertClose(t, "dlogits", values(t, d, dx), wantGrad, 2*tolerance(dt))
					})
				}
			}
		}
	}
}

// TestCrossEntropyTorch compares with PyTorch 1.13 (float32): per-row losses
// with reduction="none", and the gradient of the mean, whose 1/count the
// tensor layer folds into dloss.
func TestCrossEntropyTorch(t *testing.T) {
	x := []float64{5.780745983123779, 4.461852073669434, 2.7021515369415283, -6.316562652587891, 2.0352554321289062, -3.703634738922119, -0.12920242547988892, -4.814001083374023, -2.256405830383301, 4.946168899536133, -1.1774358749389648, -4.210821151733398, -2.1836438179016113, -1.678290605545044, -2.306516647338867, 2.2873361110687256, 4.926950931549072, -0.4787924289703369, -1.4921926259994507, 5.1520843505859375, 0.9566409587860107, -1.2735569477081299, 0.9171627759933472, -2.323777675628662, 0.10473702847957611, 0.9633090496063232, 4.720800399780273, -1.8034261465072632, -3.822453498840332, 6.3683552742004395, -3.7039594650268555, -1.463741660118103, -4.254179954528809, 2.688804864883423, 0.14971615374088287}
	tg := []int64{0, 6, -100, 3, 2}
	cases := []struct {
		eps        float64
		loss, grad []float64
		mean       float64
	}{
		{0, []float64{0.2925747036933899, 6.629672527313232, 0.0, 4.674668312072754, 10.099664688110352}, []float64{-0.06341512501239777, 0.04989857226610184, 0.008587364107370377, 1.040115989781043e-06, 0.004407887347042561, 1.4186070984578691e-05, 0.0005060791154392064, 1.4351197933137883e-05, 0.00018519849982112646, 0.2487000823020935, 0.0005447887815535069, 2.623287400638219e-05, 0.0001991762692341581, -0.2496698498725891, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0005877221701666713, 0.005255204625427723, 0.00020562074496410787, -0.2476678490638733, 0.005503394640982151, 0.23576992750167847, 0.0003459813306108117, 9.125361430051271e-06, 0.24325519800186157, -0.24998973309993744, 9.652182779973373e-05, 5.925890945945866e-06, 0.0061383796855807304, 0.0004845532530453056}, 5.424144744873047},
		{0.2, []float64{1.3107067346572876, 6.618998050689697, 0.0, 4.658322811126709, 9.474228858947754}, []float64{-0.020557984709739685, 0.04275571554899216, 0.001444506924599409, -0.007141816895455122, -0.002734969835728407, -0.0071286712773144245, -0.006636777892708778, -0.00712850596755743, -0.006957658566534519, 0.24155722558498383, -0.006598068401217461, -0.007116624154150486, -0.006943680811673403, -0.20681270956993103, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.006555134896188974, -0.0018876525573432446, -0.006937236525118351, -0.2048107087612152, -0.0016394625417888165, 0.2286270707845688, -0.006796875968575478, -0.007133731618523598, 0.2361123412847519, -0.20713259279727936, -0.007046335376799107, -0.007136931177228689, -0.001004477497190237, -0.006658304017037153}, 5.51556396484375},
	}
	d := New(Options{})
	f := dtype.Float32
	logits := newOperand(t, d, f, []int{5, 7}, x, contiguous)
	target := indexOperand(t, d, []int{5}, tg, contiguous)
	for _, c := range cases {
		opt := device.CrossEntropyOptions{IgnoreIndex: -100, LabelSmoothing: c.eps}
		loss := emptyOperand(t, d, f, []int{5}, contiguous)
		count, err := d.CrossEntropy(loss, logits, target, opt)
		if err != nil {
			t.Fatal(err)
		}
		got := values(t, d, loss)
		assertClose(t, "loss", got, c.loss, 1e-6)
		sum := 0.0
		for _, l := range got {
			sum += l
		}
		if count != 4 || math.Abs(sum/float64(count)-c.mean) > 1e-6 {
			t.Errorf("mean = %v/%d, want %v", sum, count, c.mean)
		}
		dloss := newOperand(t, d, f, []int{1}, []float64{0.25}, contiguous)
		dloss.Shape, dloss.Strides = []int{5}, []int{0}
		dx := emptyOperand(t, d, f, []int{5, 7}, contiguous)
		if err := d.CrossEntropyBackward(dx, dloss, logits, target, opt); err != nil {
			t.Fatal(err)
		}
		assertClose(t, "grad", values(t, d, dx), c.grad, 1e-6)
	}
}

func TestCrossEntropyErrors(t *testing.T) {
	d := New(Options{})
	f := dtype.Float32
	logits := newOperand(t, d, f, []int{5, 10}, make([]float64, 50), contiguous)
	cases := []struct {
		tg   []int64
		want []string
	}{
		{[]int64{1, 2, -100, 12, 3}, []string{"cross_entropy", "target 12", "row 3", "10 classes"}},
		{[]int64{1, -1, 2, 3, 4}, []string{"target -1", "row 1"}},
		{[]int64{1, 2, 3, 4, 10}, []string{"target 10", "row 4"}},
	}
	for _, c := range cases {
		target := indexOperand(t, d, []int{5}, c.tg, contiguous)
		loss := newOperand(t, d, f, []int{5}, []float64{7, 7, 7, 7, 7}, contiguous)
		opt := device.CrossEntropyOptions{IgnoreIndex: -100}
		_, err := d.CrossEntropy(loss, logits, target, opt)
		dx := newOperand(t, d, f, []int{5, 10}, make([]float64, 50), contiguous)
		errB := d.CrossEntropyBackward(dx, loss, logits, target, opt)
		for _, e := range []error{err, errB} {
			if e == nil {
				t.Errorf("targets %v: no error", c.tg)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(e.Error(), w) {
					t.Errorf("error %q does not mention %q", e, w)
				}
			}
		}
		assertClose(t, "untouched loss", values(t, d, loss), []float64{7, 7, 7, 7, 7}, 0)
	}
}

func BenchmarkSoftmax(b *testing.B) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(1, 1))
	const rows, n = 1024, 512
	f := dtype.Float32
	x := newOperand(b, d, f, []int{rows, n}, randn(r, rows*n, 2, f), contiguous)
	y := emptyOperand(b, d, f, []int{rows, n}, contiguous)
	dy := newOperand(b, d, f, []int{rows, n}, randn(r, rows*n, 1, f), contiguous)
	benchThreads(b, "forward", 2*rows*n*4, func() error { return d.Softmax(y, x, false) })
	benchThreads(b, "log", 2*rows*n*4, func() error { return d.Softmax(y, x, true) })
	benchThreads(b, "backward", 3*rows*n*4, func() error { return d.SoftmaxBackward(x, dy, y, false) })
}

func BenchmarkLayerNorm(b *testing.B) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(1, 1))
	const rows, n = 1024, 256
	f := dtype.Float32
	x := newOperand(b, d, f, []int{rows, n}, randn(r, rows*n, 2, f), contiguous)
	w := newOperand(b, d, f, []int{n}, randn(r, n, 1, f), contiguous)
	bias := newOperand(b, d, f, []int{n}, randn(r, n, 1, f), contiguous)
	y := emptyOperand(b, d, f, []int{rows, n}, contiguous)
	dy := newOperand(b, d, f, []int{rows, n}, randn(r, rows*n, 1, f), contiguous)
	dx := emptyOperand(b, d, f, []int{rows, n}, contiguous)
	dw := emptyOperand(b, d, f, []int{n}, contiguous)
	db := emptyOperand(b, d, f, []int{n}, contiguous)
	mean := emptyOperand(b, d, f, []int{rows}, contiguous)
	rstd := emptyOperand(b, d, f, []int{rows}, contiguous)
	benchThreads(b, "forward", 2*rows*n*4, func() error { return d.LayerNorm(y, mean, rstd, x, w, bias, 1e-5) })
	benchThreads(b, "backward", 3*rows*n*4, func() error { return d.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w) })
}

func BenchmarkCrossEntropy(b *testing.B) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(1, 1))
	const rows, n = 1024, 512
	f := dtype.Float32
	x := newOperand(b, d, f, []int{rows, n}, randn(r, rows*n, 2, f), contiguous)
	target := indexOperand(b, d, []int{rows}, randIndices(r, rows, n), contiguous)
	loss := emptyOperand(b, d, f, []int{rows}, contiguous)
	dloss := newOperand(b, d, f, []int{1}, []float64{1.0 / rows}, contiguous)
	dloss.Shape, dloss.Strides = []int{rows}, []int{0}
	dx := emptyOperand(b, d, f, []int{rows, n}, contiguous)
	opt := device.CrossEntropyOptions{IgnoreIndex: -100}
	benchThreads(b, "forward", rows*n*4, func() error { _, err := d.CrossEntropy(loss, x, target, opt); return err })
	benchThreads(b, "backward", 2*rows*n*4, func() error { return d.CrossEntropyBackward(dx, dloss, x, target, opt) })
}
