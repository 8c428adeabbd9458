package tensor_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// withZeros is an input of shape whose elements at the flat positions zs
// are 0 (the others random in [-1, 1)).
func withZeros(shape []int, zs ...int) input {
	r := rand.New(rand.NewPCG(5, 6))
	v := randVals(r, numelOf(shape))
	for _, z := range zs {
		v[z] = 0
	}
	return input{shape: shape, vals: v}
}

// TestGradientsSortScan checks the gradients of the row ops against
// central differences, zeros among cumprod's and prod's inputs included
// (both are polynomials in each element, so the differences are exact
// enough at 0 too).
func TestGradientsSortScan(t *testing.T) {
	cases := []gradCase{
		{"sin", []input{in(3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Sin() }},
		{"cos", []input{in(3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Cos() }},
		{"erf", []input{in(3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Erf() }},
		{"cumsum", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Cumsum(1) }},
		{"cumsum_dim0_transposed", []input{in(4, 3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].T().Cumsum(0) }},
		{"cumprod", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Cumprod(1) }},
		{"cumprod_zeros", []input{withZeros([]int{4, 5}, 0, 7, 11, 13, 16, 19)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return x[0].Cumprod(1)
		}},
		{"cumprod_zeros_dim0", []input{withZeros([]int{5, 3}, 1, 4, 10, 12)}, func(x []*tensor.Tensor) *tensor.Tensor {
			return x[0].Cumprod(0)
		}},
		{"prod_all", []input{in(2, 3)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].ProdAll() }},
		{"prod_all_one_zero", []input{withZeros([]int{2, 3}, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].ProdAll() }},
		{"prod_dim", []input{in(3, 4)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Prod(1, false) }},
		{"prod_dim_zeros", []input{withZeros([]int{3, 4}, 1, 5, 6)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Prod(-1, true) }},
		{"prod_dim0_zeros", []input{withZeros([]int{3, 4}, 1, 5, 6)}, func(x []*tensor.Tensor) *tensor.Tensor { return x[0].Prod(0, false) }},
		{"sort", []input{in(3, 5)}, func(x []*tensor.Tensor) *tensor.Tensor {
			v, _ := x[0].Sort(1, true, false)
			return v
		}},
		{"topk", []input{in(4, 6)}, func(x []*tensor.Tensor) *tensor.Tensor {
			v, _ := x[0].TopK(2, 0, false, true)
			return v
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkGrad(t, tc) })
	}
}

// TestProdAllSeveralZeros: with two zeros every partial product is 0, and
// PyTorch returns a zero gradient without computing one.
func TestProdAllSeveralZeros(t *testing.T) {
	rt := newRT()
	x := rt.FromFloat64s([]float64{2, 0, 3, 0, math.Inf(1)}, 5)
	if err := x.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	if err := x.ProdAll().Backward(); err != nil {
		t.Fatal(err)
	}
	g, err := x.Grad().Float64s()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g, []float64{0, 0, 0, 0, 0}) {
		t.Errorf("gradient %v, want zeros", g)
	}
}

// TestSortLongRows sorts rows longer than any kernel block (on the CPU:
// one thread a row) against sort.SliceStable, NaN and ties included, in
// both directions and along a strided dimension.
func TestSortLongRows(t *testing.T) {
	rt := newRT()
	const rows, n = 3, 5003
	r := rand.New(rand.NewPCG(7, 8))
	vals := make([]float64, rows*n)
	for i := range vals {
		switch r.IntN(20) {
		case 0:
			vals[i] = math.NaN()
		case 1:
			vals[i] = math.Inf(-1)
		default:
			vals[i] = float64(r.IntN(200)) / 8
		}
	}
	x := rt.FromFloat64s(vals, rows, n)
	for _, desc := range []bool{false, true} {
		for _, transposed := range []bool{false, true} {
			src, dim := x, 1
			if transposed {
				src, dim = x.T().Contiguous().T(), 1 // dimension 1 with stride rows
			}
			v, idx := src.Sort(dim, desc, false)
			got, err := v.Float64s()
			if err != nil {
				t.Fatal(err)
			}
			gi, err := idx.Int64s()
			if err != nil {
				t.Fatal(err)
			}
			for row := range rows {
				want := make([]int, n)
				for i := range want {
					want[i] = i
				}
				key := vals[row*n : (row+1)*n]
				sort.SliceStable(want, func(a, b int) bool {
					x, y := key[want[a]], key[want[b]]
					if desc { // NaN first
						return !math.IsNaN(y) && (math.IsNaN(x) || x > y)
					}
					return !math.IsNaN(x) && (math.IsNaN(y) || x < y) // NaN last
				})
				for j, w := range want {
					if gi[row*n+j] != int64(w) || !sameOrNaN(got[row*n+j], key[w]) {
						t.Fatalf("descending %v, transposed %v: row %d position %d: got %v at %d, want %v at %d",
							desc, transposed, row, j, got[row*n+j], gi[row*n+j], key[w], w)
					}
				}
			}
		}
	}
}

func sameOrNaN(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// TestSortScanDTypes: integer and bool inputs keep PyTorch's result types.
func TestSortScanDTypes(t *testing.T) {
	rt := newRT()
	i32 := rt.FromInt64s([]int64{3, -1, 2}).To(tensor.Int32)
	b := rt.FromInt64s([]int64{1, 0, 1}).To(tensor.Bool)
	for _, tc := range []struct {
		name string
		got  *tensor.Tensor
		want tensor.DType
	}{
		{"cumsum int32", i32.Cumsum(0), tensor.Int64},
		{"cumprod bool", b.Cumprod(0), tensor.Int64},
		{"prod int32", i32.ProdAll(), tensor.Int64},
		{"prod dim bool", b.Prod(0, false), tensor.Int64},
		{"sin int32", i32.Sin(), tensor.Float32},
		{"sort int32", valuesOf(i32.Sort(0, false, false)), tensor.Int32},
		{"sort bool", valuesOf(b.Sort(0, true, false)), tensor.Bool},
		{"topk int32", valuesOf(i32.TopK(2, 0, true, true)), tensor.Int32},
		{"argsort bool", b.Argsort(0, false, false), tensor.Int64},
	} {
		if err := tc.got.Err(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		} else if tc.got.DType() != tc.want {
			t.Errorf("%s: dtype %v, want %v", tc.name, tc.got.DType(), tc.want)
		}
	}
	v, err := valuesOf(i32.Sort(0, false, false)).To(tensor.Int64).Int64s()
	if err != nil || !slices.Equal(v, []int64{-1, 2, 3}) {
		t.Errorf("sort int32: %v, %v", v, err)
	}
}

func valuesOf(a, _ *tensor.Tensor) *tensor.Tensor { return a }

// TestSortScanErrors: bad dimensions and k are errors naming the op.
func TestSortScanErrors(t *testing.T) {
	rt := newRT()
	x := rt.Zeros(tensor.Float32, 2, 3)
	s := rt.Scalar(tensor.Float32, 1)
	for _, tc := range []struct {
		got  *tensor.Tensor
		want string
	}{
		{x.Cumsum(2), "cumsum: dimension 2 out of range"},
		{x.Cumprod(-3), "cumprod: dimension -3 out of range"},
		{s.Cumsum(1), "cumsum: dimension 1 out of range for a 0-dimensional tensor"},
		{valuesOf(x.Sort(5, false, false)), "sort: dimension 5 out of range"},
		{x.Argsort(-4, false, false), "argsort: dimension -4 out of range"},
		{valuesOf(x.TopK(4, 1, true, true)), "topk: k (4) is out of range for dimension 1 of size 3"},
		{valuesOf(x.TopK(-1, 0, true, true)), "topk: k (-1) is out of range"},
		{valuesOf(x.TopK(1, 2, true, true)), "topk: dimension 2 out of range"},
		{x.Prod(2, false), "prod: dimension 2 out of range"},
	} {
		err := tc.got.Err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
}

// TestSortScanReleaseTemporaries: the ops leave no tensor behind but their
// results, forward and backward.
func TestSortScanReleaseTemporaries(t *testing.T) {
	rt := newRT()
	x := rt.FromFloat64s([]float64{3, 0, -1, 2, 0, 5, 1, -2}, 2, 4)
	if err := x.SetRequiresGrad(true); err != nil {
		t.Fatal(err)
	}
	before := rt.Stats().LiveTensors
	ops := map[string]func() []*tensor.Tensor{
		"sin":     func() []*tensor.Tensor { return []*tensor.Tensor{x.Sin()} },
		"erf":     func() []*tensor.Tensor { return []*tensor.Tensor{x.Erf()} },
		"cumsum":  func() []*tensor.Tensor { return []*tensor.Tensor{x.Cumsum(1)} },
		"cumprod": func() []*tensor.Tensor { return []*tensor.Tensor{x.Cumprod(1)} },
		"prod":    func() []*tensor.Tensor { return []*tensor.Tensor{x.Prod(0, false)} },
		"prodAll": func() []*tensor.Tensor { return []*tensor.Tensor{x.ProdAll()} },
		"sort":    func() []*tensor.Tensor { v, i := x.Sort(1, true, false); return []*tensor.Tensor{v, i} },
		"topk":    func() []*tensor.Tensor { v, i := x.TopK(2, 1, true, true); return []*tensor.Tensor{v, i} },
		"argsort": func() []*tensor.Tensor { return []*tensor.Tensor{x.Argsort(0, false, false)} },
	}
	for name, op := range ops {
		outs := op()
		if outs[0].DType().IsFloat() {
			loss := outs[0].SumAll()
			if err := loss.Backward(); err != nil {
				t.Fatalf("%s: backward: %v", name, err)
			}
			loss.Release()
		}
		for _, o := range outs {
			o.Release()
		}
		if g := x.Grad(); g != nil {
			if err := x.SetGrad(nil); err != nil {
				t.Fatal(err)
			}
		}
		if after := rt.Stats().LiveTensors; after != before {
			t.Errorf("%s: %d live tensors after the op and its backward, %d before", name, after, before)
		}
	}
}
