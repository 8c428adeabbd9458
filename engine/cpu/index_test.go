package cpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

var indexDTypes = []dtype.DType{dtype.Float32, dtype.Float64, dtype.Int64, dtype.BFloat16}

func randIndices(r *rand.Rand, n, extent int) []int64 {
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(r.IntN(extent))
	}
	return idx
}

func withExtent(shape []int, axis, ext int) []int {
	out := append([]int(nil), shape...)
	out[axis] = ext
	return out
}

func indexSelectRef(src []float64, shape []int, idx []int64, axis int) []float64 {
	dshape := withExtent(shape, axis, len(idx))
	out := make([]float64, numel(dshape))
	sp := make([]int, len(shape))
	forEach(dshape, func(pos []int, i int) {
		copy(sp, pos)
		sp[axis] = int(idx[pos[axis]])
		out[i] = src[linear(shape, sp)]
	})
	return out
}

func gatherRef(src []float64, shape []int, idx []int64, ishape []int, axis int) []float64 {
	out := make([]float64, numel(ishape))
	sp := make([]int, len(shape))
	forEach(ishape, func(pos []int, i int) {
		copy(sp, pos)
		sp[axis] = int(idx[i])
		out[i] = src[linear(shape, sp)]
	})
	return out
}

func indexAddRef(dst []float64, dshape []int, src []float64, sshape []int, idx []int64, axis int) []float64 {
	out := append([]float64(nil), dst...)
	dp := make([]int, len(dshape))
	forEach(sshape, func(pos []int, i int) {
		copy(dp, pos)
		dp[axis] = int(idx[pos[axis]])
		out[linear(dshape, dp)] += src[i]
	})
	return out
}

func scatterAddRef(dst []float64, dshape []int, src []float64, idx []int64, ishape []int, axis int) []float64 {
	out := append([]float64(nil), dst...)
	dp := make([]int, len(dshape))
	forEach(ishape, func(pos []int, i int) {
		copy(dp, pos)
		dp[axis] = int(idx[i])
		out[linear(dshape, dp)] += src[i]
	})
	return out
}

// indexLayouts are the (data, index) layouts every index op is tested in.
var indexLayouts = [][2]layout{{contiguous, contiguous}, {strided, contiguous}, {contiguous, strided}, {strided, strided}}

func TestIndexSelect(t *testing.T) {
	cases := []struct {
		shape []int
		axis  int
		k     int
	}{
		{[]int{10}, 0, 4},
		{[]int{7, 5}, 0, 9}, // more indices than rows: duplicates
		{[]int{7, 5}, 1, 3},
		{[]int{3, 4, 5}, 1, 6},
		{[]int{3, 4, 5}, 2, 2},
		{[]int{512, 67}, 0, 300}, // an embedding: rows longer than a vector
		{[]int{4, 3}, 0, 0},
		{[]int{1, 1}, 1, 1},
	}
	d := New(Options{})
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		for _, dt := range indexDTypes {
			for _, ls := range indexLayouts {
				name := fmt.Sprintf("%v/axis%d/k%d/%v/%v-%v", c.shape, c.axis, c.k, dt, ls[0], ls[1])
				t.Run(name, func(t *testing.T) {
					data := randn(r, numel(c.shape), 3, dt)
					idx := randIndices(r, c.k, c.shape[c.axis])
					src := newOperand(t, d, dt, c.shape, data, ls[0])
					index := indexOperand(t, d, []int{c.k}, idx, ls[1])
					dst := emptyOperand(t, d, dt, withExtent(c.shape, c.axis, c.k), ls[0])
					if err := d.IndexSelect(dst, src, index, c.axis); err != nil {
						t.Fatal(err)
					}
					// A move: exact in every type.
					assertClose(t, "dst", values(t, d, dst), indexSelectRef(data, c.shape, idx, c.axis), 0)
				})
			}
		}
	}
}

func TestGather(t *testing.T) {
	cases := []struct {
		shape, ishape []int
		axis          int
	}{
		{[]int{10}, []int{4}, 0},
		{[]int{4, 6}, []int{4, 3}, 1},
		{[]int{4, 6}, []int{7, 6}, 0},
		{[]int{5, 6}, []int{3, 2}, 1}, // src larger than index on the other axis
		{[]int{3, 4, 5}, []int{3, 4, 9}, 2},
		{[]int{3, 4, 5}, []int{2, 6, 5}, 1},
		{[]int{64, 300}, []int{64, 1}, 1}, // picking the target logit
		{[]int{3, 1}, []int{3, 1}, 1},
		{[]int{3, 2}, []int{0, 2}, 0},
	}
	d := New(Options{})
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range cases {
		for _, dt := range indexDTypes {
			for _, ls := range indexLayouts {
				name := fmt.Sprintf("%v/%v/axis%d/%v/%v-%v", c.shape, c.ishape, c.axis, dt, ls[0], ls[1])
				t.Run(name, func(t *testing.T) {
					data := randn(r, numel(c.shape), 3, dt)
					idx := randIndices(r, numel(c.ishape), c.shape[c.axis])
					src := newOperand(t, d, dt, c.shape, data, ls[0])
					index := indexOperand(t, d, c.ishape, idx, ls[1])
					dst := emptyOperand(t, d, dt, c.ishape, ls[0])
					if err := d.Gather(dst, src, index, c.axis); err != nil {
						t.Fatal(err)
					}
					assertClose(t, "dst", values(t, d, dst), gatherRef(data, c.shape, idx, c.ishape, c.axis), 0)
				})
			}
		}
	}
}

// accTolerance is the tolerance of a sum of a few values of magnitude about
// 3 computed in dt.
func accTolerance(dt dtype.DType) float64 {
	switch dt {
	case dtype.Float64, dtype.Int64:
		return 1e-12
	case dtype.Float32:
		return 1e-6
	}
	return 1e-2
}

func TestIndexAdd(t *testing.T) {
	cases := []struct {
		dshape []int
		axis   int
		k      int
	}{
		{[]int{10}, 0, 25},
		{[]int{6, 5}, 0, 4},
		{[]int{6, 5}, 0, 30},
		{[]int{6, 5}, 1, 11},
		{[]int{3, 4, 5}, 1, 7},
		{[]int{3, 4, 5}, 2, 1},
		{[]int{50, 300}, 0, 2000}, // embedding gradient: parallel over columns
		{[]int{2000, 3}, 1, 5},
		{[]int{4, 3}, 0, 0},
	}
	d := New(Options{})
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range cases {
		for _, dt := range indexDTypes {
			for _, ls := range indexLayouts {
				name := fmt.Sprintf("%v/axis%d/k%d/%v/%v-%v", c.dshape, c.axis, c.k, dt, ls[0], ls[1])
				t.Run(name, func(t *testing.T) {
					sshape := withExtent(c.dshape, c.axis, c.k)
					base := randn(r, numel(c.dshape), 3, dt)
					data := randn(r, numel(sshape), 3, dt)
					idx := randIndices(r, c.k, c.dshape[c.axis])
					dst := newOperand(t, d, dt, c.dshape, base, ls[0])
					src := newOperand(t, d, dt, sshape, data, ls[0])
					index := indexOperand(t, d, []int{c.k}, idx, ls[1])
					if err := d.IndexAdd(dst, src, index, c.axis); err != nil {
						t.Fatal(err)
					}
					want := indexAddRef(base, c.dshape, data, sshape, idx, c.axis)
					tol := accTolerance(dt)
					if dt == dtype.Float32 {
						tol *= float64(c.k)
					}
					assertClose(t, "dst", values(t, d, dst), want, tol)
				})
			}
		}
	}
}

func TestScatterAdd(t *testing.T) {
	cases := []struct {
		dshape, ishape []int
		axis           int
	}{
		{[]int{10}, []int{25}, 0},
		{[]int{4, 6}, []int{4, 8}, 1},
		{[]int{4, 6}, []int{9, 6}, 0},
		{[]int{5, 6}, []int{3, 2}, 1}, // index smaller than dst on the other axis
		{[]int{3, 4, 5}, []int{3, 7, 5}, 1},
		{[]int{3, 4, 5}, []int{2, 3, 11}, 2},
		{[]int{40, 300}, []int{3000, 300}, 0}, // parallel over columns
		{[]int{3, 2}, []int{0, 2}, 0},
	}
	d := New(Options{})
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range cases {
		for _, dt := range indexDTypes {
			for _, ls := range indexLayouts {
				name := fmt.Sprintf("%v/%v/axis%d/%v/%v-%v", c.dshape, c.ishape, c.axis, dt, ls[0], ls[1])
				t.Run(name, func(t *testing.T) {
					base := randn(r, numel(c.dshape), 3, dt)
					data := randn(r, numel(c.ishape), 3, dt)
					idx := randIndices(r, numel(c.ishape), c.dshape[c.axis])
					dst := newOperand(t, d, dt, c.dshape, base, ls[0])
					src := newOperand(t, d, dt, c.ishape, data, ls[0])
					index := indexOperand(t, d, c.ishape, idx, ls[1])
					if err := d.ScatterAdd(dst, src, index, c.axis); err != nil {
						t.Fatal(err)
					}
					want := scatterAddRef(base, c.dshape, data, idx, c.ishape, c.axis)
					tol := accTolerance(dt)
					if dt == dtype.Float32 {
						tol *= float64(c.ishape[c.axis])
					}
					assertClose(t, "dst", values(t, d, dst), want, tol)
				})
			}
		}
	}
}

// TestIndexAddDeterministic runs the parallel accumulations several times,
// on several numbers of threads: the bits must not depend on how the work
// was scheduled.
func TestIndexAddDeterministic(t *testing.T) {
	all := parallel.Threads()
	defer parallel.SetThreads(all)
	threads := []int{all, 1, 3, all}
	d := New(Options{})
	r := rand.New(rand.NewPCG(9, 10))
	const rows, cols, k = 64, 512, 4096
	data := randn(r, k*cols, 1, dtype.Float32)
	idx := randIndices(r, k, rows)
	src := newOperand(t, d, dtype.Float32, []int{k, cols}, data, contiguous)
	index := indexOperand(t, d, []int{k}, idx, contiguous)
	run := func() []byte {
		dst := newOperand(t, d, dtype.Float32, []int{rows, cols}, make([]float64, rows*cols), contiguous)
		if err := d.IndexAdd(dst, src, index, 0); err != nil {
			t.Fatal(err)
		}
		return rawBits(t, d, dst)
	}
	first := run()
	for _, n := range threads {
		parallel.SetThreads(n)
		if !bytes.Equal(run(), first) {
			t.Fatalf("index_add on %d threads gives different bits", n)
		}
	}
	sidx := randIndices(r, k*cols, rows)
	sindex := indexOperand(t, d, []int{k, cols}, sidx, contiguous)
	runScatter := func() []byte {
		dst := newOperand(t, d, dtype.Float32, []int{rows, cols}, make([]float64, rows*cols), contiguous)
		if err := d.ScatterAdd(dst, src, sindex, 0); err != nil {
			t.Fatal(err)
		}
		return rawBits(t, d, dst)
	}
	first = runScatter()
	for _, n := range threads {
		parallel.SetThreads(n)
		if !bytes.Equal(runScatter(), first) {
			t.Fatalf("scatter_add on %d threads gives different bits", n)
		}
	}
}

// TestBroadcastIndex gathers and scatters with an index that is the same
// along the last axis (stride 0), as expand() makes it.
func TestBroadcastIndex(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(23, 24))
	const rows, cols, ext = 5, 70, 9
	f := dtype.Float32
	idx := randIndices(r, rows, ext)
	index := indexOperand(t, d, []int{rows, 1}, idx, contiguous)
	index.Shape, index.Strides = []int{rows, cols}, []int{1, 0}
	full := make([]int64, rows*cols)
	for i := range full {
		full[i] = idx[i/cols]
	}
	ishape := []int{rows, cols}

	data := randn(r, ext*cols, 1, f)
	src := newOperand(t, d, f, []int{ext, cols}, data, contiguous)
	dst := emptyOperand(t, d, f, ishape, strided)
	if err := d.Gather(dst, src, index, 0); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "gather", values(t, d, dst), gatherRef(data, []int{ext, cols}, full, ishape, 0), 0)

	base := randn(r, ext*cols, 1, f)
	upd := randn(r, rows*cols, 1, f)
	acc := newOperand(t, d, f, []int{ext, cols}, base, strided)
	if err := d.ScatterAdd(acc, newOperand(t, d, f, ishape, upd, contiguous), index, 0); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "scatter_add", values(t, d, acc), scatterAddRef(base, []int{ext, cols}, upd, full, ishape, 0), 1e-6)
}

// TestIndexErrors checks that an out-of-range index is reported with its
// value, position and the extent, and that nothing was written.
func TestIndexErrors(t *testing.T) {
	d := New(Options{})
	dt := dtype.Float32
	src := newOperand(t, d, dt, []int{4, 10}, make([]float64, 40), contiguous)
	ones := make([]float64, 40)
	for i := range ones {
		ones[i] = 1
	}
	cases := []struct {
		name string
		run  func(dst device.View) error
		want []string
	}{
		{"index_select", func(dst device.View) error {
			index := indexOperand(t, d, []int{4}, []int64{0, 9, 12, 1}, strided)
			return d.IndexSelect(dst, src, index, 1)
		}, []string{"index_select", "index 12", "position 2", "size 10"}},
		{"index_select/negative", func(dst device.View) error {
			index := indexOperand(t, d, []int{4}, []int64{0, -1, 2, 3}, contiguous)
			return d.IndexSelect(dst, src, index, 1)
		}, []string{"index -1", "position 1"}},
		{"index_add", func(dst device.View) error {
			s := newOperand(t, d, dt, []int{4, 4}, make([]float64, 16), contiguous)
			index := indexOperand(t, d, []int{4}, []int64{3, 2, 1, 10}, contiguous)
			return d.IndexAdd(dst, s, index, 1)
		}, []string{"index_add", "index 10", "position 3", "size 4"}},
		{"gather", func(dst device.View) error {
			index := indexOperand(t, d, []int{4, 4}, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 44, 5}, strided)
			return d.Gather(dst, src, index, 1)
		}, []string{"gather", "index 44", "position [3, 2]", "size 10"}},
		{"scatter_add", func(dst device.View) error {
			s := newOperand(t, d, dt, []int{2, 4}, make([]float64, 8), contiguous)
			index := indexOperand(t, d, []int{2, 4}, []int64{0, 1, 2, 3, 3, 2, -5, 0}, contiguous)
			return d.ScatterAdd(dst, s, index, 0)
		}, []string{"scatter_add", "index -5", "position [1, 2]", "size 4"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := newOperand(t, d, dt, []int{4, 4}, ones[:16], contiguous)
			err := c.run(dst)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			assertClose(t, "untouched dst", values(t, d, dst), ones[:16], 0)
		})
	}
}

func BenchmarkEmbedding(b *testing.B) {
	// The GPT bench's token embedding: vocabulary 512, d 256, B·T = 1024.
	d := New(Options{})
	r := rand.New(rand.NewPCG(1, 1))
	const vocab, dim, n = 512, 256, 1024
	table := newOperand(b, d, dtype.Float32, []int{vocab, dim}, randn(r, vocab*dim, 1, dtype.Float32), contiguous)
	index := indexOperand(b, d, []int{n}, randIndices(r, n, vocab), contiguous)
	out := emptyOperand(b, d, dtype.Float32, []int{n, dim}, contiguous)
	benchThreads(b, "select", 2*n*dim*4, func() error { return d.IndexSelect(out, table, index, 0) })
	benchThreads(b, "add", 3*n*dim*4, func() error { return d.IndexAdd(table, out, index, 0) })
}

// benchThreads runs fn as sub-benchmarks on one thread and on all of them,
// reporting bytes moved per second.
func benchThreads(b *testing.B, name string, bytes int64, fn func() error) {
	all := parallel.Threads()
	for _, n := range []int{1, all} {
		b.Run(fmt.Sprintf("%s/threads=%d", name, n), func(b *testing.B) {
			parallel.SetThreads(n)
			defer parallel.SetThreads(all)
			b.SetBytes(bytes)
			for b.Loop() {
				if err := fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
