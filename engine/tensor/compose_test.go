package tensor_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// The ops of compose.go. Their PyTorch parity (values and gradients from
// torch 1.13, linspace bit for bit) is checked from JavaScript by
// script/ops_test.go; these tests cover the Go API: results, gradients
// against finite differences, PyTorch's subgradients, in-place rules and
// errors.

func f64p(v float64) *float64 { return &v }

// composeVals reads any tensor as float64s, failing the test on an error.
func composeVals(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	if err := x.Err(); err != nil {
		t.Fatal(err)
	}
	v, err := x.Float64s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sameVals compares exactly, NaN equal to NaN.
func sameVals(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) })
}

func TestComposeForward(t *testing.T) {
	rt := newRT()
	nan, inf := math.NaN(), math.Inf(1)
	x := rt.FromFloat64s([]float64{-2, -0.5, 0, 0.5, 2, nan}, 6)
	m := rt.FromFloat64s([]float64{3, -4, 0, 1, 0, 0}, 2, 3)
	ints := rt.FromInt64s([]int64{1, 2, 3}, 3)
	cases := []struct {
		name  string
		got   func() *tensor.Tensor
		shape []int
		dt    tensor.DType
		want  []float64
	}{
		{"clamp both", func() *tensor.Tensor { return x.Clamp(f64p(-1), f64p(1)) }, []int{6}, tensor.Float64, []float64{-1, -0.5, 0, 0.5, 1, nan}},
		{"clamp min", func() *tensor.Tensor { return x.Clamp(f64p(0), nil) }, []int{6}, tensor.Float64, []float64{0, 0, 0, 0.5, 2, nan}},
		{"clamp max", func() *tensor.Tensor { return x.Clamp(nil, f64p(0)) }, []int{6}, tensor.Float64, []float64{-2, -0.5, 0, 0, 0, nan}},
		{"clamp min above max", func() *tensor.Tensor { return x.Clamp(f64p(1), f64p(-1)) }, []int{6}, tensor.Float64, []float64{-1, -1, -1, -1, -1, nan}},
		{"clamp NaN bound with another", func() *tensor.Tensor { return x.Clamp(f64p(0), f64p(nan)) }, []int{6}, tensor.Float64, []float64{nan, nan, nan, nan, nan, nan}},
		{"clamp lone NaN bound", func() *tensor.Tensor { return x.Clamp(f64p(nan), nil) }, []int{6}, tensor.Float64, []float64{-2, -0.5, 0, 0.5, 2, nan}},
		{"clamp int by fraction is float32", func() *tensor.Tensor { return ints.Clamp(f64p(1.5), nil) }, []int{3}, tensor.Float32, []float64{1.5, 2, 3}},
		{"clamp int stays int", func() *tensor.Tensor { return ints.Clamp(nil, f64p(2)) }, []int{3}, tensor.Int64, []float64{1, 2, 2}},
		{"clamp bool is int64", func() *tensor.Tensor { return ints.GtScalar(1).Clamp(f64p(0), nil) }, []int{3}, tensor.Int64, []float64{0, 1, 1}},
		{"clamp uint8 wraps -1", func() *tensor.Tensor { return ints.To(tensor.Uint8).Clamp(f64p(-1), nil) }, []int{3}, tensor.Uint8, []float64{255, 255, 255}},
		{"clamp tensors broadcast", func() *tensor.Tensor {
			return rt.FromFloat64s([]float64{1, 2}, 2).ClampTensor(rt.FromFloat64s([]float64{0, 5}, 2, 1), nil)
		}, []int{2, 2}, tensor.Float64, []float64{1, 2, 5, 5}},
		{"clamp tensor 0-d float64 keeps float32", func() *tensor.Tensor {
			return rt.FromFloat32s([]float32{1, 3}, 2).ClampTensor(nil, rt.Scalar(tensor.Float64, 2))
		}, []int{2}, tensor.Float32, []float64{1, 2}},
		{"clamp tensor 1-d float64 promotes", func() *tensor.Tensor {
			return rt.FromFloat32s([]float32{1, 3}, 2).ClampTensor(nil, rt.FromFloat64s([]float64{2}, 1))
		}, []int{2}, tensor.Float64, []float64{1, 2}},
		{"norm 2", func() *tensor.Tensor { return m.Norm(2, nil, false) }, nil, tensor.Float64, []float64{math.Sqrt(26)}},
		{"norm 2 dim keepdim", func() *tensor.Tensor { return m.Norm(2, []int{1}, true) }, []int{2, 1}, tensor.Float64, []float64{5, 1}},
		{"norm 1", func() *tensor.Tensor { return m.Norm(1, []int{-1}, false) }, []int{2}, tensor.Float64, []float64{7, 1}},
		{"norm inf", func() *tensor.Tensor { return m.Norm(inf, []int{1}, false) }, []int{2}, tensor.Float64, []float64{4, 1}},
		{"norm -inf", func() *tensor.Tensor { return m.Norm(-inf, []int{0}, false) }, []int{3}, tensor.Float64, []float64{1, 0, 0}},
		{"norm 0 counts", func() *tensor.Tensor { return m.Norm(0, nil, false) }, nil, tensor.Float64, []float64{3}},
		{"norm 3", func() *tensor.Tensor { return m.Norm(3, []int{1}, false) }, []int{2}, tensor.Float64, []float64{math.Pow(91, 1.0/3), 1}},
		{"norm -1 with a zero", func() *tensor.Tensor { return m.Norm(-1, []int{1}, false) }, []int{2}, tensor.Float64, []float64{0, 0}},
		{"norm of nothing", func() *tensor.Tensor { return rt.Zeros(tensor.Float32, 0, 3).Norm(-inf, []int{0}, false) }, []int{3}, tensor.Float32, []float64{0, 0, 0}},
		{"norm NaN", func() *tensor.Tensor { return x.Norm(inf, nil, false) }, nil, tensor.Float64, []float64{nan}},
		{"norm bfloat16", func() *tensor.Tensor { return m.To(tensor.BFloat16).Norm(2, []int{1}, false) }, []int{2}, tensor.BFloat16, []float64{5, 1}},
		{"frobenius two dims", func() *tensor.Tensor { return m.FrobeniusNorm([]int{0, 1}, true) }, []int{1, 1}, tensor.Float64, []float64{math.Sqrt(26)}},
		{"repeat", func() *tensor.Tensor { return rt.FromFloat64s([]float64{1, 2}, 2).Repeat(2, 2) }, []int{2, 4}, tensor.Float64, []float64{1, 2, 1, 2, 1, 2, 1, 2}},
		{"repeat 0-d", func() *tensor.Tensor { return rt.Scalar(tensor.Float32, 3).Repeat(3) }, []int{3}, tensor.Float32, []float64{3, 3, 3}},
		{"repeat zero", func() *tensor.Tensor { return m.Repeat(1, 0, 2) }, []int{1, 0, 6}, tensor.Float64, []float64{}},
		{"repeat_interleave dim", func() *tensor.Tensor { return m.RepeatInterleave(2, 0) }, []int{4, 3}, tensor.Float64, []float64{3, -4, 0, 3, -4, 0, 1, 0, 0, 1, 0, 0}},
		{"repeat_interleave flat", func() *tensor.Tensor { return ints.RepeatInterleaveFlat(2) }, []int{6}, tensor.Int64, []float64{1, 1, 2, 2, 3, 3}},
		{"flip two dims", func() *tensor.Tensor { return m.Flip(0, -1) }, []int{2, 3}, tensor.Float64, []float64{0, 0, 1, 0, -4, 3}},
		{"flip bool", func() *tensor.Tensor { return ints.GtScalar(1).Flip(0) }, []int{3}, tensor.Bool, []float64{1, 1, 0}},
		{"flip none copies", func() *tensor.Tensor { return ints.Flip() }, []int{3}, tensor.Int64, []float64{1, 2, 3}},
		{"all dim", func() *tensor.Tensor { return m.All([]int{1}, false) }, []int{2}, tensor.Bool, []float64{0, 0}},
		{"any dim keepdim", func() *tensor.Tensor { return m.Any([]int{1}, true) }, []int{2, 1}, tensor.Bool, []float64{1, 1}},
		{"all NaN is true", func() *tensor.Tensor { return x.Narrow(0, 4, 2).All(nil, false) }, nil, tensor.Bool, []float64{1}},
		{"all of nothing", func() *tensor.Tensor { return rt.Zeros(tensor.Float32, 0).All(nil, false) }, nil, tensor.Bool, []float64{1}},
		{"any of nothing", func() *tensor.Tensor { return rt.Zeros(tensor.Float32, 0).Any(nil, false) }, nil, tensor.Bool, []float64{0}},
		{"all uint8 is uint8", func() *tensor.Tensor { return ints.To(tensor.Uint8).All(nil, false) }, nil, tensor.Uint8, []float64{1}},
		{"eye", func() *tensor.Tensor { return rt.Eye(tensor.Float32, 2, 3) }, []int{2, 3}, tensor.Float32, []float64{1, 0, 0, 0, 1, 0}},
		{"eye bool empty", func() *tensor.Tensor { return rt.Eye(tensor.Bool, 0, 2) }, []int{0, 2}, tensor.Bool, []float64{}},
		{"linspace", func() *tensor.Tensor { return rt.Linspace(tensor.Float32, 0, 1, 5) }, []int{5}, tensor.Float32, []float64{0, 0.25, 0.5, 0.75, 1}},
		{"linspace one", func() *tensor.Tensor { return rt.Linspace(tensor.Float64, 2, 9, 1) }, []int{1}, tensor.Float64, []float64{2}},
		{"linspace none", func() *tensor.Tensor { return rt.Linspace(tensor.Float64, 2, 9, 0) }, []int{0}, tensor.Float64, []float64{}},
		{"linspace int64 truncates", func() *tensor.Tensor { return rt.Linspace(tensor.Int64, -1.7, 10.3, 7) }, []int{7}, tensor.Int64, []float64{-1, 0, 2, 4, 6, 8, 10}},
		{"linspace infinite end", func() *tensor.Tensor { return rt.Linspace(tensor.Float32, 0, inf, 5) }, []int{5}, tensor.Float32, []float64{nan, inf, nan, nan, nan}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.got()
			if err := got.Err(); err != nil {
				t.Fatal(err)
			}
			if got.DType() != c.dt || !slices.Equal(got.Shape(), c.shape) && len(got.Shape())+len(c.shape) > 0 {
				t.Fatalf("%v %v, want %v %v", got.DType(), got.Shape(), c.dt, c.shape)
			}
			if v := composeVals(t, got); !sameVals(v, c.want) {
				t.Errorf("got %v, want %v", v, c.want)
			}
		})
	}
}

// TestComposeUnbind: unbind gives views along dim.
func TestComposeUnbind(t *testing.T) {
	rt := newRT()
	m := rt.FromFloat64s([]float64{1, 2, 3, 4, 5, 6}, 2, 3)
	parts := m.Unbind(-1)
	if len(parts) != 3 {
		t.Fatalf("%d parts", len(parts))
	}
	for i, p := range parts {
		if v := composeVals(t, p); !slices.Equal(v, []float64{float64(i + 1), float64(i + 4)}) || !slices.Equal(p.Shape(), []int{2}) {
			t.Errorf("part %d: %v %v", i, p.Shape(), v)
		}
	}
	if err := parts[1].Fill(9); err != nil {
		t.Fatal(err)
	}
	if v := composeVals(t, m); !slices.Equal(v, []float64{1, 9, 3, 4, 9, 6}) {
		t.Errorf("unbind parts are not views: writing one gave %v", v)
	}
	if parts := rt.Zeros(tensor.Float32, 0, 2).Unbind(0); len(parts) != 0 {
		t.Errorf("unbind of an empty dimension: %d parts", len(parts))
	}
}

// TestComposeNewTensors: repeat, repeat_interleave and flip return new
// memory even where the composition reduces to a view.
func TestComposeNewTensors(t *testing.T) {
	rt := newRT()
	m := rt.FromFloat64s([]float64{1, 2, 3, 4}, 2, 2)
	for name, r := range map[string]*tensor.Tensor{
		"repeat":            m.Repeat(1, 1),
		"repeat_interleave": m.RepeatInterleave(1, 0),
		"flip of size 1":    m.Narrow(0, 0, 1).Flip(0),
	} {
		if err := r.Fill(0); err != nil {
			t.Fatal(err)
		}
		if v := composeVals(t, m); !slices.Equal(v, []float64{1, 2, 3, 4}) {
			t.Errorf("%s: writing the result changed the input to %v", name, v)
		}
	}
}

func TestComposeGradients(t *testing.T) {
	// Inputs away from the points where the ops are not differentiable
	// (clamp's bounds, norm's zeros and ties), compared with finite
	// differences.
	away := input{shape: []int{2, 4}, vals: []float64{-0.9, -0.3, 0.2, 0.7, 0.45, -0.65, 0.05, 0.95}}
	cases := []gradCase{
		{"clamp", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Clamp(f64p(-0.5), f64p(0.5)) }},
		{"clamp min", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Clamp(f64p(0), nil) }},
		{"clamp tensors", []input{away, {shape: []int{4}, vals: []float64{-0.5, -0.4, 0.3, 0.1}}, {shape: []int{2, 1}, vals: []float64{0.6, 0.4}}},
			func(x []*tensor.Tensor) *tensor.Tensor { return x[0].ClampTensor(x[1], x[2]) }},
		{"clamp tensors min above max", []input{away, {shape: []int{1}, vals: []float64{0.8}}, {shape: []int{1}, vals: []float64{0.1}}},
			func(x []*tensor.Tensor) *tensor.Tensor { return x[0].ClampTensor(x[1], x[2]) }},
		{"clamp tensor max", []input{away, {shape: []int{2, 4}, vals: []float64{0, 0, 0, 0, 1, 1, -1, -1}}},
			func(x []*tensor.Tensor) *tensor.Tensor { return x[0].ClampTensor(nil, x[1]) }},
		{"norm 2", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Norm(2, []int{1}, false) }},
		{"norm 1 all", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Norm(1, nil, false) }},
		{"norm 3 keepdim", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Norm(3, []int{0}, true) }},
		{"norm 1.5", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Norm(1.5, []int{1}, false) }},
		{"norm 0.5", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Norm(0.5, []int{1}, false) }},
		{"norm -2", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Norm(-2, []int{0}, false) }},
		{"norm inf", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Norm(math.Inf(1), []int{1}, false) }},
		{"norm -inf", []input{away}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Norm(math.Inf(-1), []int{0}, true) }},
		{"frobenius", []input{in(2, 3, 2)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].FrobeniusNorm([]int{0, 2}, false) }},
		{"repeat", []input{in(2, 3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Repeat(2, 1, 2) }},
		{"repeat_interleave", []input{in(2, 3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].RepeatInterleave(3, 1) }},
		{"flip", []input{in(2, 3, 2)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Flip(0, 1) }},
		{"unbind", []input{in(3, 2)}, func(x []*tensor.Tensor) *tensor.Tensor {
			p := x[0].Unbind(0)
			return p[0].Mul(p[2]).Add(p[1])
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkGrad(t, tc) })
	}
}

// TestComposeSubgradients: where the ops are not differentiable, the
// gradient is PyTorch's.
func TestComposeSubgradients(t *testing.T) {
	rt := newRT()
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		name string
		x    []float64
		f    func(x *tensor.Tensor) *tensor.Tensor
		want []float64 // nil: no gradient
	}{
		{"clamp passes at its bounds", []float64{-1, 0, 1, 2}, func(x *tensor.Tensor) *tensor.Tensor { return x.Clamp(f64p(0), f64p(1)) }, []float64{0, 1, 1, 0}},
		{"clamp min above max", []float64{-1, 0, 1, 2}, func(x *tensor.Tensor) *tensor.Tensor { return x.Clamp(f64p(1), f64p(0)) }, []float64{0, 0, 0, 0}},
		{"clamp NaN", []float64{nan, 0}, func(x *tensor.Tensor) *tensor.Tensor { return x.Clamp(f64p(-1), nil) }, []float64{0, 1}},
		{"clamp lone NaN bound", []float64{1, 2}, func(x *tensor.Tensor) *tensor.Tensor { return x.Clamp(nil, f64p(nan)) }, []float64{0, 0}},
		{"norm 2 of zeros", []float64{0, 0}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(2, nil, false) }, []float64{0, 0}},
		{"norm 3 of zeros", []float64{0, 0}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(3, nil, false) }, []float64{0, 0}},
		{"norm 1 at zero", []float64{0, -2}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(1, nil, false) }, []float64{0, -1}},
		{"norm 0.5 at zero", []float64{0, 4}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(0.5, nil, false) }, []float64{0, 1}},
		{"norm inf ties split", []float64{3, -3, 1}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(inf, nil, false) }, []float64{0.5, -0.5, 0}},
		{"norm inf with NaN", []float64{1, nan, -1}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(inf, nil, false) }, []float64{0, 0, 0}},
		{"norm 1 with NaN", []float64{1, nan, -1}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(1, nil, false) }, []float64{1, 0, -1}},
		{"norm -inf ties split", []float64{-1, 1, 2}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(-inf, nil, false) }, []float64{-0.5, 0.5, 0}},
		{"norm 0 has none", []float64{1, 0}, func(x *tensor.Tensor) *tensor.Tensor { return x.Norm(0, nil, false) }, nil},
		{"frobenius two dims of zeros is NaN", []float64{0, 0}, func(x *tensor.Tensor) *tensor.Tensor {
			return x.Reshape(1, 2).FrobeniusNorm([]int{0, 1}, false)
		}, []float64{nan, nan}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := rt.FromFloat64s(c.x, len(c.x))
			if err := x.SetRequiresGrad(true); err != nil {
				t.Fatal(err)
			}
			y := c.f(x)
			if !y.RequiresGrad() {
				t.Fatal("the result does not require grad")
			}
			if err := y.SumAll().Backward(); err != nil {
				t.Fatal(err)
			}
			if c.want == nil {
				if x.Grad() != nil {
					t.Errorf("gradient %v, want none", composeVals(t, x.Grad()))
				}
				return
			}
			if x.Grad() == nil {
				t.Fatal("no gradient")
			}
			if g := composeVals(t, x.Grad()); !sameVals(g, c.want) {
				t.Errorf("gradient %v, want %v", g, c.want)
			}
		})
	}
}

// TestComposeGradientTypes: clamp's bounds of another type get gradients
// of their own type; a float16 norm differentiates in float16.
func TestComposeGradientTypes(t *testing.T) {
	rt := newRT()
	x := rt.FromFloat32s([]float32{-1, 0.5, 2}, 3)
	lo := rt.FromFloat64s([]float64{0, 0, 0}, 3)
	h := rt.FromFloat32s([]float32{3, 4}, 2).To(tensor.Float16)
	for _, p := range []*tensor.Tensor{x, lo, h} {
		if err := p.SetRequiresGrad(true); err != nil {
			t.Fatal(err)
		}
	}
	y := x.ClampTensor(lo, nil)
	if y.DType() != tensor.Float64 {
		t.Fatalf("result %v", y.DType())
	}
	if err := y.SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	if x.Grad().DType() != tensor.Float32 || lo.Grad().DType() != tensor.Float64 {
		t.Errorf("gradient types %v, %v", x.Grad().DType(), lo.Grad().DType())
	}
	if g := composeVals(t, lo.Grad()); !slices.Equal(g, []float64{1, 0, 0}) {
		t.Errorf("min's gradient %v", g)
	}
	n := h.Norm(2, nil, false)
	if err := n.Backward(); err != nil {
		t.Fatal(err)
	}
	if g := composeVals(t, h.Grad()); h.Grad().DType() != tensor.Float16 || math.Abs(g[0]-0.6) > 1e-3 || math.Abs(g[1]-0.8) > 1e-3 {
		t.Errorf("float16 norm gradient %v %v, want float16 [0.6 0.8]", h.Grad().DType(), g)
	}
}

func TestComposeInPlace(t *testing.T) {
	rt := newRT()
	cases := []struct {
		name  string
		x     func() *tensor.Tensor
		op    func(x *tensor.Tensor) error
		want  []float64
		dt    tensor.DType
		error string
	}{
		{"sub_ tensor alpha", func() *tensor.Tensor { return rt.FromFloat32s([]float32{1, 2, 3}) },
			func(x *tensor.Tensor) error { return x.SubInPlace(rt.FromFloat32s([]float32{1}), 0.5) }, []float64{0.5, 1.5, 2.5}, tensor.Float32, ""},
		{"sub_ float64 into float32", func() *tensor.Tensor { return rt.FromFloat32s([]float32{1, 2}) },
			func(x *tensor.Tensor) error { return x.SubInPlace(rt.FromFloat64s([]float64{0.25, 1}, 2), 1) }, []float64{0.75, 1}, tensor.Float32, ""},
		{"sub_ int64 into int32", func() *tensor.Tensor { return rt.FromInt64s([]int64{1, 2, 3}).To(tensor.Int32) },
			func(x *tensor.Tensor) error { return x.SubInPlace(rt.FromInt64s([]int64{2}), 1) }, []float64{-1, 0, 1}, tensor.Int32, ""},
		{"sub_ uint8 wraps", func() *tensor.Tensor { return rt.FromInt64s([]int64{1, 2, 3}).To(tensor.Uint8) },
			func(x *tensor.Tensor) error { return x.SubScalarInPlace(5, 1) }, []float64{252, 253, 254}, tensor.Uint8, ""},
		{"sub_ number alpha", func() *tensor.Tensor { return rt.FromFloat64s([]float64{1, 2}, 2) },
			func(x *tensor.Tensor) error { return x.SubScalarInPlace(2, -3) }, []float64{7, 8}, tensor.Float64, ""},
		{"sub_ self", func() *tensor.Tensor { return rt.FromFloat64s([]float64{1, 2}, 2) },
			func(x *tensor.Tensor) error { return x.SubInPlace(x, 1) }, []float64{0, 0}, tensor.Float64, ""},
		{"sub_ overlapping view", func() *tensor.Tensor { return rt.FromFloat64s([]float64{1, 2, 3}, 3) },
			func(x *tensor.Tensor) error { return x.SubInPlace(x.Narrow(0, 0, 1), 1) }, []float64{0, 1, 2}, tensor.Float64, ""},
		{"sub_ int by a fraction", func() *tensor.Tensor { return rt.FromInt64s([]int64{1}) },
			func(x *tensor.Tensor) error { return x.SubScalarInPlace(1.5, 1) }, nil, 0, "can't be cast"},
		{"sub_ int fractional alpha", func() *tensor.Tensor { return rt.FromInt64s([]int64{1}) },
			func(x *tensor.Tensor) error { return x.SubInPlace(rt.FromInt64s([]int64{1}), 0.5) }, nil, 0, "alpha must not be a floating point"},
		{"sub_ int by float tensor", func() *tensor.Tensor { return rt.FromInt64s([]int64{1}) },
			func(x *tensor.Tensor) error { return x.SubInPlace(rt.FromFloat32s([]float32{1}), 1) }, nil, 0, "result type float32 can't be cast to the desired output type int64"},
		{"sub_ bool", func() *tensor.Tensor { return rt.FromInt64s([]int64{1}).To(tensor.Bool) },
			func(x *tensor.Tensor) error { return x.SubScalarInPlace(1, 1) }, nil, 0, "bool tensor is not supported"},
		{"sub_ broadcast grows", func() *tensor.Tensor { return rt.FromFloat32s([]float32{1, 2, 3}) },
			func(x *tensor.Tensor) error { return x.SubInPlace(rt.Zeros(tensor.Float32, 2, 3), 1) }, nil, 0, "doesn't match the broadcast shape [2 3]"},
		{"div_ tensor", func() *tensor.Tensor { return rt.FromFloat32s([]float32{1, 2, 3}) },
			func(x *tensor.Tensor) error { return x.DivInPlace(rt.FromFloat64s([]float64{2}, 1)) }, []float64{0.5, 1, 1.5}, tensor.Float32, ""},
		{"div_ float64 by int", func() *tensor.Tensor { return rt.FromFloat64s([]float64{1, 3}, 2) },
			func(x *tensor.Tensor) error { return x.DivInPlace(rt.FromInt64s([]int64{2})) }, []float64{0.5, 1.5}, tensor.Float64, ""},
		{"div_ int", func() *tensor.Tensor { return rt.FromInt64s([]int64{1}) },
			func(x *tensor.Tensor) error { return x.DivInPlace(rt.FromInt64s([]int64{2})) }, nil, 0, "result type float32 can't be cast"},
		{"clamp_ numbers", func() *tensor.Tensor { return rt.FromFloat32s([]float32{-2, 0, 2}) },
			func(x *tensor.Tensor) error { return x.ClampInPlace(f64p(-1), f64p(1)) }, []float64{-1, 0, 1}, tensor.Float32, ""},
		{"clamp_ int", func() *tensor.Tensor { return rt.FromInt64s([]int64{-2, 0, 2}) },
			func(x *tensor.Tensor) error { return x.ClampInPlace(nil, f64p(1)) }, []float64{-2, 0, 1}, tensor.Int64, ""},
		{"clamp_ uint8", func() *tensor.Tensor { return rt.FromInt64s([]int64{1, 2, 3}).To(tensor.Uint8) },
			func(x *tensor.Tensor) error { return x.ClampInPlace(f64p(2), f64p(2)) }, []float64{2, 2, 2}, tensor.Uint8, ""},
		{"clamp_ NaN bound", func() *tensor.Tensor { return rt.FromFloat32s([]float32{-2, 0, 2}) },
			func(x *tensor.Tensor) error { return x.ClampInPlace(f64p(0), f64p(math.NaN())) }, []float64{math.NaN(), math.NaN(), math.NaN()}, tensor.Float32, ""},
		{"clamp_ int by a fraction", func() *tensor.Tensor { return rt.FromInt64s([]int64{1}) },
			func(x *tensor.Tensor) error { return x.ClampInPlace(f64p(1.5), nil) }, nil, 0, "result type float32 can't be cast"},
		{"clamp_ tensors", func() *tensor.Tensor { return rt.FromFloat32s([]float32{1, 2}) },
			func(x *tensor.Tensor) error { return x.ClampTensorInPlace(nil, rt.FromFloat64s([]float64{1.5}, 1)) }, []float64{1, 1.5}, tensor.Float32, ""},
		{"clamp_ tensors broadcast grows", func() *tensor.Tensor { return rt.FromFloat32s([]float32{1, 2}) },
			func(x *tensor.Tensor) error { return x.ClampTensorInPlace(rt.Zeros(tensor.Float32, 2, 1), nil) }, nil, 0, "doesn't match the broadcast shape"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := c.x()
			err := c.op(x)
			if c.error != "" {
				if err == nil || !strings.Contains(err.Error(), c.error) {
					t.Fatalf("error %v, want one containing %q", err, c.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := composeVals(t, x); x.DType() != c.dt || !sameVals(got, c.want) {
				t.Errorf("%v %v, want %v %v", x.DType(), got, c.dt, c.want)
			}
		})
	}
}

// TestComposeInPlaceAutograd: sub_, div_ and clamp_ follow autograd's
// in-place rules: a tensor that requires grad refuses them with grad mode
// on, and a write invalidates what backward saved.
func TestComposeInPlaceAutograd(t *testing.T) {
	rt := newRT()
	ops := map[string]func(x *tensor.Tensor) error{
		"sub_":   func(x *tensor.Tensor) error { return x.SubScalarInPlace(1, 1) },
		"div_":   func(x *tensor.Tensor) error { return x.DivInPlace(rt.FromFloat32s([]float32{2})) },
		"clamp_": func(x *tensor.Tensor) error { return x.ClampInPlace(f64p(0), nil) },
	}
	for name, op := range ops {
		w := param(t, rt, []float32{1, 2})
		if err := op(w); err == nil || !strings.Contains(err.Error(), "leaf") {
			t.Errorf("%s on a leaf requiring grad: %v", name, err)
		}
		rt.NoGrad(func() {
			if err := op(w); err != nil {
				t.Errorf("%s under NoGrad: %v", name, err)
			}
		})
		// An operand that requires grad would lose its gradient.
		if err := rt.FromFloat32s([]float32{1, 2}).SubInPlace(w, 1); err == nil || !strings.Contains(err.Error(), "an operand requires grad") {
			t.Errorf("sub_ by a tensor that requires grad: %v", err)
		}
		if err := rt.FromFloat32s([]float32{1, 2}).ClampTensorInPlace(nil, w); err == nil || !strings.Contains(err.Error(), "an operand requires grad") {
			t.Errorf("clamp_ by a tensor that requires grad: %v", err)
		}
		x := rt.FromFloat32s([]float32{1, 2})
		y := w.Mul(x).SumAll()
		if err := op(x); err != nil {
			t.Fatal(err)
		}
		if err := y.Backward(); err == nil || !strings.Contains(err.Error(), "in-place") {
			t.Errorf("backward after %s on a saved tensor: %v", name, err)
		}
	}
}

func TestComposeErrors(t *testing.T) {
	rt := newRT()
	m := rt.Zeros(tensor.Float32, 2, 3)
	ints := rt.FromInt64s([]int64{1, 2})
	cases := []struct {
		name string
		got  *tensor.Tensor
		want string
	}{
		{"clamp without bounds", m.Clamp(nil, nil), "clamp: at least one of min or max"},
		{"clamp tensor without bounds", m.ClampTensor(nil, nil), "clamp: at least one of min or max"},
		{"clamp bound overflows uint8", ints.To(tensor.Uint8).Clamp(f64p(300), nil), "min 300 cannot be converted to type uint8"},
		{"clamp bound overflows float32", m.Clamp(nil, f64p(1e39)), "max 1e+39 cannot be converted to type float32"},
		{"clamp shapes", m.ClampTensor(rt.Zeros(tensor.Float32, 2), nil), "cannot be broadcast"},
		{"norm of integers", ints.Norm(2, nil, false), "norm: input dtype should be either floating point"},
		{"norm dim", m.Norm(2, []int{2}, false), "norm: dimension 2 out of range"},
		{"norm repeated dim", m.Norm(2, []int{1, -1}, false), "norm: dimension -1 appears more than once"},
		{"frobenius three dims", rt.Zeros(tensor.Float32, 1, 1, 1).FrobeniusNorm([]int{0, 1, 2}, false), "at most 2 dimensions"},
		{"frobenius same dims", m.FrobeniusNorm([]int{1, -1}, false), "expected dims to be different"},
		{"repeat too few sizes", m.Repeat(2), "can not be smaller than number of dimensions"},
		{"repeat negative", m.Repeat(1, -1), "negative dimension -1"},
		{"repeat_interleave negative", m.RepeatInterleave(-1, 0), "repeats can not be negative"},
		{"repeat_interleave 0-d dim", rt.Scalar(tensor.Float32, 1).RepeatInterleave(2, 0), "tensor has no dimensions"},
		{"repeat_interleave dim", m.RepeatInterleave(2, 2), "dimension 2 out of range"},
		{"flip dim", m.Flip(2), "flip: dimension 2 out of range"},
		{"flip repeated dim", m.Flip(0, -2), "dim 0 appears multiple times"},
		{"unbind 0-d", rt.Scalar(tensor.Float32, 1).Unbind(0)[0], "tensor has no dimensions"},
		{"unbind dim", m.Unbind(-3)[0], "unbind: dimension -3 out of range"},
		{"all dim", m.All([]int{5}, false), "all: dimension 5 out of range"},
		{"any dim", m.Any([]int{-3}, false), "any: dimension -3 out of range"},
		{"eye n", rt.Eye(tensor.Float32, -1, 2), "n must be greater or equal to 0, got -1"},
		{"eye m", rt.Eye(tensor.Float32, 1, -2), "m must be greater or equal to 0, got -2"},
		{"linspace steps", rt.Linspace(tensor.Float32, 0, 1, -1), "number of steps must be non-negative"},
		{"linspace bool", rt.Linspace(tensor.Bool, 0, 1, 2), "not implemented for dtype bool"},
		{"linspace uint8 start", rt.Linspace(tensor.Uint8, -3.5, 1, 2), "start -3.5 cannot be converted to type uint8"},
		{"linspace float32 end", rt.Linspace(tensor.Float32, 0, 1e39, 2), "end 1e+39 cannot be converted to type float32"},
	}
	for _, c := range cases {
		if err := c.got.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestResultType(t *testing.T) {
	rt := newRT()
	v := func(dt tensor.DType) *tensor.Tensor { return rt.Zeros(dt, 2) }
	s := func(dt tensor.DType) *tensor.Tensor { return rt.Zeros(dt) }
	cases := []struct {
		ts   []*tensor.Tensor
		want tensor.DType
	}{
		{[]*tensor.Tensor{v(tensor.Float32), v(tensor.Float64)}, tensor.Float64},
		{[]*tensor.Tensor{v(tensor.Float32), s(tensor.Float64)}, tensor.Float32},
		{[]*tensor.Tensor{v(tensor.Int64), s(tensor.Float64)}, tensor.Float64},
		{[]*tensor.Tensor{v(tensor.Int32), s(tensor.Int64)}, tensor.Int32},
		{[]*tensor.Tensor{s(tensor.Int32), s(tensor.Int64)}, tensor.Int64},
		{[]*tensor.Tensor{v(tensor.Bool), s(tensor.Int64)}, tensor.Int64},
		{[]*tensor.Tensor{v(tensor.BFloat16), v(tensor.Float16)}, tensor.Float32},
		{[]*tensor.Tensor{v(tensor.Float16), nil, s(tensor.Float64)}, tensor.Float16},
		{[]*tensor.Tensor{s(tensor.Uint8)}, tensor.Uint8},
	}
	for i, c := range cases {
		if got := tensor.ResultType(c.ts...); got != c.want {
			t.Errorf("case %d: %v, want %v", i, got, c.want)
		}
	}
}

// TestLinspaceFloat32IsFused: below two vectors of steps every float32
// value is start + i·step (end - (steps-1-i)·step) rounded once; compare
// with exact arithmetic.
func TestLinspaceFloat32IsFused(t *testing.T) {
	rt := newRT()
	r := rand.New(rand.NewPCG(7, 8))
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		p.Mul(p, new(big.Float).SetFloat64(float64(b)))
		p.Add(p, new(big.Float).SetFloat64(float64(c)))
		f, _ := p.SetPrec(24).Float32()
		return f
	}
	for trial := 0; trial < 300; trial++ {
		start, end := float32(r.Float64()*200-100), float32(r.Float64()*200-100)
		steps := 2 + r.IntN(14) // below two vectors: no lanes
		got, err := rt.Linspace(tensor.Float32, float64(start), float64(end), steps).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		step := (end - start) / float32(steps-1)
		for i, g := range got {
			want := exact(step, float32(i), start)
			if i >= steps/2 {
				want = exact(-step, float32(steps-1-i), end)
			}
			if g != want {
				t.Fatalf("linspace(%v, %v, %d)[%d] = %v, want %v", start, end, steps, i, g, want)
			}
		}
	}
}

// TestComposeReleasesTemporaries: outside any scope, a composed op leaves
// nothing alive but its result.
func TestComposeReleasesTemporaries(t *testing.T) {
	rt := newRT()
	x := rt.FromFloat64s([]float64{-2, 0.5, 3, -1, 0, 2}, 2, 3)
	row, col, one := x.Narrow(0, 1, 1), x.Narrow(1, 0, 1), rt.Scalar(tensor.Float32, 1)
	ops := map[string]func() *tensor.Tensor{
		"clamp":             func() *tensor.Tensor { return x.Clamp(f64p(-1), f64p(1)) },
		"clamp tensor":      func() *tensor.Tensor { return x.ClampTensor(row, nil) },
		"norm":              func() *tensor.Tensor { return x.Norm(3, []int{1}, false) },
		"frobenius":         func() *tensor.Tensor { return x.FrobeniusNorm([]int{0, 1}, false) },
		"repeat":            func() *tensor.Tensor { return x.Repeat(2, 1) },
		"repeat_interleave": func() *tensor.Tensor { return x.RepeatInterleaveFlat(2) },
		"flip":              func() *tensor.Tensor { return x.Flip(0, 1) },
		"all":               func() *tensor.Tensor { return x.All([]int{0}, true) },
		"eye":               func() *tensor.Tensor { return rt.Eye(tensor.Float32, 3, 3) },
		"linspace":          func() *tensor.Tensor { return rt.Linspace(tensor.Float32, 0, 1, 40) },
	}
	inPlace := map[string]func() error{
		"sub_":   func() error { return x.SubInPlace(one, 2) },
		"div_":   func() error { return x.DivInPlace(row) },
		"clamp_": func() error { return x.ClampTensorInPlace(nil, col) },
	}
	for name, op := range ops {
		before := rt.Stats().LiveTensors
		out := op()
		if err := out.Err(); err != nil {
			t.Fatal(err)
		}
		out.Release()
		if after := rt.Stats().LiveTensors; after != before {
			t.Errorf("%s: %d tensors alive after, %d before", name, after, before)
		}
	}
	for name, op := range inPlace {
		before := rt.Stats().LiveTensors
		if err := op(); err != nil {
			t.Fatal(err)
		}
		if after := rt.Stats().LiveTensors; after != before {
			t.Errorf("%s: %d tensors alive after, %d before", name, after, before)
		}
	}
}

// TestClampOnePassMatchesTwoOps: float32 clamp with two numbers takes the
// device's one-pass kernel where it has one (device.Clamper) and gives
// the bits of Maximum and then Minimum, contiguous or not (a transposed
// input takes the two ops), NaNs and both zeros included, and its
// gradient is clamp's.
func TestClampOnePassMatchesTwoOps(t *testing.T) {
	rt := newRT()
	negZero := float32(math.Copysign(0, -1))
	data := make([]float32, 6*50)
	r := rand.New(rand.NewPCG(4, 5))
	for i := range data {
		data[i] = float32(r.NormFloat64() * 2)
		switch i % 11 {
		case 3:
			data[i] = float32(math.NaN())
		case 5:
			data[i] = negZero
		case 7:
			data[i] = float32(math.Inf(-1))
		}
	}
	for _, b := range [][2]float64{{-1, 1}, {0, 0}, {1, -1}, {-0.5, math.Inf(1)}} {
		for _, transposed := range []bool{false, true} {
			x := rt.FromFloat32s(data, 6, 50)
			if transposed {
				x = x.T()
			}
			got, err := x.Clamp(f64p(b[0]), f64p(b[1])).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			want, err := x.Maximum(rt.Scalar(tensor.Float32, b[0])).Minimum(rt.Scalar(tensor.Float32, b[1])).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("bounds %v, transposed %v: element %d = %v, want %v", b, transposed, i, got[i], want[i])
				}
			}
		}
	}
	x := rt.FromFloat32s([]float32{-2, -1, 0, 1, 2})
	if err := x.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	if err := x.Clamp(f64p(-1), f64p(1)).SumAll().Backward(); err != nil {
		t.Fatal(err)
	}
	if g := composeVals(t, x.Grad()); !sameVals(g, []float64{0, 1, 1, 1, 0}) {
		t.Fatalf("gradient %v, want [0 1 1 1 0]", g)
	}
}
