package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// viewOf makes a contiguous view of shape holding vals (as dt), or, with
// strides, a view of those strides over the same elements.
func viewOf[T any](t *testing.T, d *Device, dt dtype.DType, vals []T, shape []int, strides []int) device.View {
	t.Helper()
	buf, err := d.Alloc(dt, len(vals))
	if err != nil {
		t.Fatal(err)
	}
	copy(elems[T](buf), vals)
	if strides == nil {
		strides = device.ContiguousStrides(shape)
	}
	return device.View{Buf: buf, DType: dt, Shape: shape, Strides: strides}
}

// TestScan checks Scan against sums and products written out: forward and
// reverse, along a strided axis, int64 wrapping, float32 accumulated in
// float64 (as PyTorch's CPU cumsum), and a scan in place.
func TestScan(t *testing.T) {
	d := New(Options{})
	big := int64(math.MaxInt64)
	for _, tc := range []struct {
		name    string
		op      device.ScanOp
		vals    []int64 // int64 case
		f32     []float32
		shape   []int
		strides []int // of src; nil: contiguous
		axis    int
		reverse bool
		want    []float64 // row-major over shape
	}{
		{name: "cumsum rows", op: device.CumSum, vals: []int64{1, 2, 3, 4, 5, 6}, shape: []int{2, 3}, axis: 1,
			want: []float64{1, 3, 6, 4, 9, 15}},
		{name: "cumsum columns", op: device.CumSum, vals: []int64{1, 2, 3, 4, 5, 6}, shape: []int{2, 3}, axis: 0,
			want: []float64{1, 2, 3, 5, 7, 9}},
		{name: "cumsum reverse", op: device.CumSum, vals: []int64{1, 2, 3, 4, 5, 6}, shape: []int{2, 3}, axis: 1, reverse: true,
			want: []float64{6, 5, 3, 15, 11, 6}},
		{name: "cumprod transposed", op: device.CumProd, vals: []int64{1, 2, 3, 4, 5, 6}, shape: []int{3, 2}, strides: []int{1, 3}, axis: 0,
			want: []float64{1, 4, 2, 20, 6, 120}},
		{name: "cumprod reverse", op: device.CumProd, vals: []int64{2, 0, 3, 4}, shape: []int{4}, axis: 0, reverse: true,
			want: []float64{0, 0, 12, 4}},
		{name: "cumsum wraps", op: device.CumSum, vals: []int64{big, 1, 1}, shape: []int{3}, axis: 0,
			want: []float64{float64(big), float64(math.MinInt64), float64(math.MinInt64 + 1)}},
		// 2^24 + 1 + 1: float32 partial sums would stay at 2^24.
		{name: "cumsum float32 in float64", op: device.CumSum, f32: []float32{1 << 24, 1, 1}, shape: []int{3}, axis: 0,
			want: []float64{1 << 24, 1 << 24, 1<<24 + 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src, dst device.View
			if tc.f32 != nil {
				src = viewOf(t, d, dtype.Float32, tc.f32, tc.shape, tc.strides)
				dst = viewOf(t, d, dtype.Float32, make([]float32, len(tc.f32)), tc.shape, nil)
			} else {
				src = viewOf(t, d, dtype.Int64, tc.vals, tc.shape, tc.strides)
				dst = viewOf(t, d, dtype.Int64, make([]int64, len(tc.vals)), tc.shape, nil)
			}
			if err := d.Scan(tc.op, dst, src, tc.axis, tc.reverse); err != nil {
				t.Fatal(err)
			}
			var got []float64
			if tc.f32 != nil {
				for _, v := range elems[float32](dst.Buf)[:len(tc.want)] {
					got = append(got, float64(v))
				}
			} else {
				for _, v := range elems[int64](dst.Buf)[:len(tc.want)] {
					got = append(got, float64(v))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("in place", func(t *testing.T) {
		x := viewOf(t, d, dtype.Float64, []float64{1, 2, 3, 4}, []int{4}, nil)
		if err := d.Scan(device.CumSum, x, x, 0, false); err != nil {
			t.Fatal(err)
		}
		if got := elems[float64](x.Buf)[:4]; !slices.Equal(got, []float64{1, 3, 6, 10}) {
			t.Errorf("got %v", got)
		}
	})
}

// TestSortHalfBits: the 16-bit types are compared as float32 and moved as
// bits, so NaN payloads and signed zeros come back as they were.
func TestSortHalfBits(t *testing.T) {
	d := New(Options{})
	// bfloat16: 1.0, a NaN with a payload, -0, 0.5, +0, -inf.
	in := []uint16{0x3f80, 0x7fc1, 0x8000, 0x3f00, 0x0000, 0xff80}
	for _, tc := range []struct {
		descending bool
		wantIdx    []int64
	}{
		{false, []int64{5, 2, 4, 3, 0, 1}},
		{true, []int64{1, 0, 3, 2, 4, 5}},
	} {
		src := viewOf(t, d, dtype.BFloat16, in, []int{6}, nil)
		vals := viewOf(t, d, dtype.BFloat16, make([]uint16, 6), []int{6}, nil)
		idx := viewOf(t, d, dtype.Int64, make([]int64, 6), []int{6}, nil)
		if err := d.Sort(vals, idx, src, 0, tc.descending); err != nil {
			t.Fatal(err)
		}
		gotIdx := elems[int64](idx.Buf)[:6]
		if !slices.Equal(gotIdx, tc.wantIdx) {
			t.Errorf("descending %v: indices %v, want %v", tc.descending, gotIdx, tc.wantIdx)
		}
		for j, i := range tc.wantIdx {
			if got := elems[uint16](vals.Buf)[j]; got != in[i] {
				t.Errorf("descending %v: value %d is %#x, want %#x", tc.descending, j, got, in[i])
			}
		}
	}
}

// TestSortScanErrors: what the device refuses, it refuses by name.
func TestSortScanErrors(t *testing.T) {
	d := New(Options{})
	f := viewOf(t, d, dtype.Float32, make([]float32, 6), []int{2, 3}, nil)
	i32 := viewOf(t, d, dtype.Int32, make([]int32, 6), []int{2, 3}, nil)
	i64 := viewOf(t, d, dtype.Int64, make([]int64, 6), []int{2, 3}, nil)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{d.Scan(device.CumSum, i32, i32, 1, false), "cpu: cumsum of int32"},
		{d.Scan(device.CumProd, f, f, 2, false), "cpu: cumprod along axis 2 of a 2-dimensional view"},
		{d.Scan(device.ScanOp(7), f, f, 0, false), "cpu: scan op scan(7)"},
		{d.Sort(f, f, f, 1, false), "cpu: sort indices must be int64, not float32"},
		{d.Sort(i32, i64, i32, 1, false), "cpu: sort of int32"},
		{d.Sort(f, i64, f, -1, false), "cpu: sort along axis -1"},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) {
			t.Errorf("got %v, want %q", tc.err, tc.want)
		}
	}
}

// TestSortRun32MatchesComparison sorts rows full of ties, both zeros,
// infinities and NaNs with the integer keys of sortRun32 and with sortRun's
// comparison, both directions, and expects the same values (bits) and the
// same indices.
func TestSortRun32MatchesComparison(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), -float32(math.NaN()), 1, -1, 0x1p-149, -math.MaxFloat32}
	for _, n := range []int{1, 2, 7, 64, 300} {
		rows := 5
		src := make([]float32, rows*n)
		for i := range src {
			if r.IntN(3) == 0 {
				src[i] = specials[r.IntN(len(specials))]
			} else {
				src[i] = float32(r.IntN(7) - 3) // ties
			}
		}
		for _, desc := range []bool{false, true} {
			v := device.View{Shape: []int{rows, n}, Strides: []int{n, 1}, DType: dtype.Float32}
			w1 := rowWalk(1, v, v, v)
			w2 := rowWalk(1, v, v, v)
			vals1, vals2 := make([]float32, rows*n), make([]float32, rows*n)
			idx1, idx2 := make([]int64, rows*n), make([]int64, rows*n)
			id := func(x float32) float32 { return x }
			sortRun32(w1, vals1, idx1, src, n, 1, 1, 1, desc, id)
			sortRun(w2, vals2, idx2, src, n, 1, 1, 1, desc, id)
			for i := range vals1 {
				if math.Float32bits(vals1[i]) != math.Float32bits(vals2[i]) || idx1[i] != idx2[i] {
					t.Fatalf("n=%d descending=%v [%d]: keys give %g at %d, comparison %g at %d", n, desc, i, vals1[i], idx1[i], vals2[i], idx2[i])
				}
			}
		}
	}
}

// TestTopKMatchesSort: for every k of rows with ties, both zeros,
// infinities and NaNs, along the last and the first axis, both directions,
// TopK gives the first k elements of Sort's order, values (bits) and
// indices, on the heap route (float32, bfloat16) and the sorting one
// (float64, int64).
func TestTopKMatchesSort(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(11, 12))
	specials := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 1, -1}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float64, dtype.Int64} {
		for _, shape := range [][]int{{3, 1}, {4, 9}, {2, 70}} {
			n := shape[0] * shape[1]
			src := make([]float64, n)
			for i := range src {
				switch {
				case dt != dtype.Int64 && r.IntN(3) == 0:
					src[i] = specials[r.IntN(len(specials))]
				default:
					src[i] = float64(r.IntN(9) - 4)
				}
			}
			sv := newOperand(t, d, dt, shape, src, contiguous)
			for axis := range 2 {
				for _, largest := range []bool{false, true} {
					sortedV := emptyOperand(t, d, dt, shape, contiguous)
					sortedI := emptyOperand(t, d, dtype.Int64, shape, contiguous)
					if err := d.Sort(sortedV, sortedI, sv, axis, largest); err != nil {
						t.Fatal(err)
					}
					for k := 0; k <= shape[axis]; k++ {
						want := slices.Clone(shape)
						want[axis] = k
						vals := emptyOperand(t, d, dt, want, strided)
						idx := emptyOperand(t, d, dtype.Int64, want, strided)
						if err := d.TopK(vals, idx, sv, axis, k, largest); err != nil {
							t.Fatal(err)
						}
						head := func(v device.View) device.View { v.Shape = want; return v }
						for _, pair := range [][2]device.View{{vals, head(sortedV)}, {idx, head(sortedI)}} {
							got, exp := rawBits(t, d, contiguousCopy(t, d, pair[0])), rawBits(t, d, contiguousCopy(t, d, pair[1]))
							if !slices.Equal(got, exp) {
								t.Fatalf("%v %v axis %d largest=%v k=%d: topk %v, sort %v", dt, shape, axis, largest, k, values(t, d, pair[0]), values(t, d, pair[1]))
							}
						}
					}
				}
			}
		}
	}
}

// TestSortInPlace: the CPU's Sort may write its values over src (the
// integer-key route keeps each row's values before writing them).
func TestSortInPlace(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(15, 16))
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float64} {
		shape := []int{3, 50}
		src := randn(r, 150, 5, dt)
		for _, desc := range []bool{false, true} {
			a := newOperand(t, d, dt, shape, src, contiguous)
			want := emptyOperand(t, d, dt, shape, contiguous)
			wantIdx := emptyOperand(t, d, dtype.Int64, shape, contiguous)
			if err := d.Sort(want, wantIdx, a, 1, desc); err != nil {
				t.Fatal(err)
			}
			idx := emptyOperand(t, d, dtype.Int64, shape, contiguous)
			if err := d.Sort(a, idx, a, 1, desc); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rawBits(t, d, a), rawBits(t, d, want)) || !slices.Equal(rawBits(t, d, idx), rawBits(t, d, wantIdx)) {
				t.Errorf("%v descending=%v: sorting in place gives %v, out of place %v", dt, desc, values(t, d, a)[:8], values(t, d, want)[:8])
			}
		}
	}
}
