package vmath

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestCopyRows: every run length up to a few vectors (each tail of the
// 32-, 16-, 8- and 4-byte moves, each mask of the AVX-512 loop), strides
// wider than the runs, the elements between and after the runs untouched,
// on every variant of this CPU.
func TestCopyRows(t *testing.T) {
	defer func(k *kernels) { impl = k }(impl)
	for _, k := range variants {
		impl = k
		t.Run(k.name, testCopyRows)
	}
}

func testCopyRows(t *testing.T) {
	for _, rows := range []int{1, 2, 5} {
		for cols := 0; cols <= 35; cols++ {
			for _, pad := range []int{0, 3} {
				t.Run(fmt.Sprintf("%dx%d+%d", rows, cols, pad), func(t *testing.T) {
					ss, ds := cols+pad+1, cols+2*pad
					src := make([]float32, max(0, (rows-1)*ss+cols))
					for i := range src {
						src[i] = float32(i + 1)
					}
					n := max(0, (rows-1)*ds+cols)
					dst, buf := guarded(n, 8, nil, 0)
					CopyRows(dst, ds, src, ss, rows, cols)
					for i, v := range dst {
						r, c := i/max(ds, 1), i%max(ds, 1)
						want := math.Float32frombits(guardBits)
						if c < cols {
							want = src[r*ss+c]
						}
						if math.Float32bits(v) != math.Float32bits(want) {
							t.Fatalf("dst[%d] = %v, want %v", i, v, want)
						}
					}
					for i, v := range buf {
						if (i < 8 || i >= 8+n) && math.Float32bits(v) != guardBits {
							t.Fatalf("guard element %d written", i)
						}
					}
				})
			}
		}
	}
}

func TestCopyRowsRefuses(t *testing.T) {
	buf := make([]float32, 10)
	for _, tc := range []struct {
		call func()
		want string
	}{
		{func() { CopyRows(buf, 4, buf, 4, 3, 3) }, "dst has length 10, want 11"},
		{func() { CopyRows(buf, 3, buf[:6], 4, 2, 3) }, "src has length 6, want 7"},
		{func() { CopyRows(buf, 3, buf, 3, -1, 3) }, "negative extent"},
	} {
		wantPanic(t, tc.call, tc.want)
	}
}

func BenchmarkCopyRows(b *testing.B) {
	const rows, cols = 16 * 14, 14
	src := make([]float32, rows*cols)
	dst := make([]float32, rows*(cols+2))
	defer func(k *kernels) { impl = k }(impl)
	for _, k := range variants {
		impl = k
		b.Run("CopyRows/"+k.name, func(b *testing.B) {
			for b.Loop() {
				CopyRows(dst, cols+2, src, cols, rows, cols)
			}
		})
	}
	b.Run("copy", func(b *testing.B) {
		for b.Loop() {
			for r := range rows {
				copy(dst[r*(cols+2):r*(cols+2)+cols], src[r*cols:(r+1)*cols])
			}
		}
	})
}

// TestDeinterleaveRows splits rows of every length up to a few of the
// kernels' 4-pair steps, odd and even, with strides wider than the runs,
// checks each element against its place in src and every other element
// (between the runs, around the slices) untouched, then interleaves the
// halves back into a copy of the rows.
func TestDeinterleaveRows(t *testing.T) {
	const g = 8
	for _, rows := range []int{1, 2, 5} {
		for cols := 0; cols <= 19; cols++ {
			for _, pad := range []int{0, 3} {
				t.Run(fmt.Sprintf("%dx%d+%d", rows, cols, pad), func(t *testing.T) {
					ss, es, os := cols+pad, (cols+1)/2+pad+1, cols/2+2*pad
					extent := func(stride, run int) int { return max(0, (rows-1)*stride+run) }
					src := make([]float32, extent(ss, cols))
					for i := range src {
						src[i] = float32(i + 1)
					}
					even, ebuf := guarded(extent(es, (cols+1)/2), g, nil, 0)
					odd, obuf := guarded(extent(os, cols/2), g, nil, 0)
					DeinterleaveRows(even, es, odd, os, src, ss, rows, cols)
					check := func(name string, got []float32, stride, run, parity int) {
						t.Helper()
						for i, v := range got {
							want := math.Float32frombits(guardBits)
							if r, c := i/max(stride, 1), i%max(stride, 1); c < run {
								want = src[r*ss+2*c+parity]
							}
							if math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("%s[%d] = %v, want %v", name, i, v, want)
							}
						}
					}
					check("even", even, es, (cols+1)/2, 0)
					check("odd", odd, os, cols/2, 1)
					checkGuards(t, "even", ebuf, g)
					checkGuards(t, "odd", obuf, g)

					ds := cols + pad
					dst, dbuf := guarded(extent(ds, cols), g, nil, 0)
					InterleaveRows(dst, ds, even, es, odd, os, rows, cols)
					for i, v := range dst {
						want := math.Float32frombits(guardBits)
						if r, c := i/max(ds, 1), i%max(ds, 1); c < cols {
							want = src[r*ss+c]
						}
						if math.Float32bits(v) != math.Float32bits(want) {
							t.Fatalf("dst[%d] = %v, want %v", i, v, want)
						}
					}
					checkGuards(t, "dst", dbuf, g)
				})
			}
		}
	}
}

func TestInterleaveRefuses(t *testing.T) {
	buf := make([]float32, 10)
	for _, tc := range []struct {
		call func()
		want string
	}{
		{func() { DeinterleaveRows(buf, 2, buf, 2, buf, 4, 3, 3) }, "src has length 10, want 11"},
		{func() { DeinterleaveRows(buf[:5], 2, buf, 2, buf, 3, 3, 3) }, "even has length 5, want 6"},
		{func() { InterleaveRows(buf, 4, buf, 2, buf[:4], 2, 3, 2) }, "odd has length 4, want 5"},
		{func() { InterleaveRows(buf, 4, buf, -2, buf, 2, 3, 2) }, "negative extent"},
	} {
		wantPanic(t, tc.call, tc.want)
	}
}

// TestCopyRowsAdd: every run length across the 8-, 4- and 1-float steps
// and the AVX-512 loop's masks, strides wider than the runs, each element
// the float32 sum of its source and s (special values included), and
// nothing else written, on every variant of this CPU.
func TestCopyRowsAdd(t *testing.T) {
	defer func(k *kernels) { impl = k }(impl)
	for _, k := range variants {
		impl = k
		t.Run(k.name, testCopyRowsAdd)
	}
}

func testCopyRowsAdd(t *testing.T) {
	const g = 8
	specials := []float32{float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1)), 1e-45, 3.4e38}
	for _, s := range []float32{0.25, float32(math.Copysign(0, -1)), float32(math.Inf(-1))} {
		for _, rows := range []int{1, 3} {
			for cols := 0; cols <= 35; cols++ {
				t.Run(fmt.Sprintf("%v/%dx%d", s, rows, cols), func(t *testing.T) {
					ss, ds := cols+2, cols+3
					src := make([]float32, max(0, (rows-1)*ss+cols))
					for i := range src {
						src[i] = float32(i)*0.37 - 2
						if i%7 == 3 {
							src[i] = specials[i%len(specials)]
						}
					}
					dst, buf := guarded(max(0, (rows-1)*ds+cols), g, nil, 0)
					CopyRowsAdd(dst, ds, src, ss, rows, cols, s)
					for i, v := range dst {
						want := math.Float32frombits(guardBits)
						if r, c := i/ds, i%ds; c < cols {
							want = src[r*ss+c] + s
						}
						if math.Float32bits(v) != math.Float32bits(want) && !(v != v && want != want) {
							t.Fatalf("dst[%d] = %v, want %v", i, v, want)
						}
					}
					checkGuards(t, "dst", buf, g)
				})
			}
		}
	}
}

// wantPanic runs call and fails the test unless it panics with a message
// that contains want.
func wantPanic(t *testing.T, call func(), want string) {
	t.Helper()
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, want) {
			t.Errorf("panic %q, want one naming %q", msg, want)
		}
	}()
	call()
}

// TestInterleaveRowsFloat64: the float64 route (the Go loops) splits each
// row by parity and joins it back, odd lengths included, and CopyRowsAdd
// adds once.
func TestInterleaveRowsFloat64(t *testing.T) {
	const rows, cols, stride = 3, 7, 9
	src := make([]float64, (rows-1)*stride+cols)
	for i := range src {
		src[i] = float64(i) + 0.5
	}
	even, odd := make([]float64, rows*4), make([]float64, rows*3)
	DeinterleaveRows(even, 4, odd, 3, src, stride, rows, cols)
	back := make([]float64, len(src))
	InterleaveRows(back, stride, even, 4, odd, 3, rows, cols)
	sum := make([]float64, len(src))
	CopyRowsAdd(sum, stride, src, stride, rows, cols, 0.25)
	for r := range rows {
		for c := range cols {
			i := r*stride + c
			half := even[r*4+c/2]
			if c%2 == 1 {
				half = odd[r*3+c/2]
			}
			if half != src[i] || back[i] != src[i] || sum[i] != src[i]+0.25 {
				t.Fatalf("row %d column %d: split %v, joined %v, plus 0.25 %v; want %v", r, c, half, back[i], sum[i], src[i])
			}
		}
	}
}

// TestCopyPlanes: blocks of every shape below into planes spaced wider
// than they are, float32 and float64, on every variant: each element in
// its place, the rest (between the rows and planes, and the guards around
// dst) untouched.
func TestCopyPlanes(t *testing.T) {
	defer func(k *kernels) { impl = k }(impl)
	for _, k := range variants {
		impl = k
		t.Run(k.name, func(t *testing.T) {
			for _, c := range []struct{ planes, rows, cols int }{{1, 1, 1}, {3, 14, 14}, {2, 5, 17}, {4, 2, 33}, {1, 3, 16}} {
				t.Run(fmt.Sprintf("%dx%dx%d", c.planes, c.rows, c.cols), func(t *testing.T) {
					testCopyPlanes[float32](t, c.planes, c.rows, c.cols)
					testCopyPlanes[float64](t, c.planes, c.rows, c.cols)
				})
			}
		})
	}
}

func testCopyPlanes[T ~float32 | ~float64](t *testing.T, planes, rows, cols int) {
	t.Helper()
	ss, sp := cols+1, (cols+1)*rows+2
	ds, dp := cols+3, (cols+3)*(rows+2)
	src := make([]T, (planes-1)*sp+(rows-1)*ss+cols)
	for i := range src {
		src[i] = T(i + 1)
	}
	const guard = 4
	n := (planes-1)*dp + (rows-1)*ds + cols
	buf := make([]T, n+2*guard)
	for i := range buf {
		buf[i] = -1
	}
	CopyPlanes(buf[guard:guard+n], ds, dp, src, ss, sp, planes, rows, cols)
	for i, v := range buf {
		want := T(-1)
		if j := i - guard; j >= 0 && j < n {
			p, r, c := j/dp, j%dp/ds, j%dp%ds
			if r < rows && c < cols {
				want = src[p*sp+r*ss+c]
			}
		}
		if v != want {
			t.Fatalf("%T: element %d (of dst: %d) is %v, want %v", v, i, i-guard, v, want)
		}
	}
}

func TestCopyPlanesRefuses(t *testing.T) {
	buf := make([]float32, 40)
	for _, tc := range []struct {
		call func()
		want string
	}{
		{func() { CopyPlanes(buf[:30], 4, 20, buf, 3, 9, 2, 3, 3) }, "dst has length 30, want 31"},
		{func() { CopyPlanes(buf, 3, 9, buf[:17], 3, 9, 2, 3, 3) }, "src has length 17, want 18"},
		{func() { CopyPlanes(buf, 3, 9, buf, 3, 9, -1, 3, 3) }, "negative extent"},
	} {
		wantPanic(t, tc.call, tc.want)
	}
}
