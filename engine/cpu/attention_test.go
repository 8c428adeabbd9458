package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// attnShape is the shape of one attention test.
type attnShape struct{ b, h, tq, tk, d int }

// attentionRef computes probs [B,H,Tq,Tk] and out [B,H,Tq,D] in float64 from
// contiguous row-major q, k, v.
func attentionRef(s attnShape, q, k, v []float64, scale float64, causal bool) (probs, out []float64) {
	probs = make([]float64, s.b*s.h*s.tq*s.tk)
	out = make([]float64, s.b*s.h*s.tq*s.d)
	for hd := 0; hd < s.b*s.h; hd++ {
		qh, kh, vh := q[hd*s.tq*s.d:], k[hd*s.tk*s.d:], v[hd*s.tk*s.d:]
		p, o := probs[hd*s.tq*s.tk:], out[hd*s.tq*s.d:]
		for i := 0; i < s.tq; i++ {
			row := p[i*s.tk : (i+1)*s.tk]
			m := math.Inf(-1)
			for j := range row {
				if causal && j > i {
					row[j] = math.Inf(-1)
					continue
				}
				dot := 0.0
				for c := 0; c < s.d; c++ {
					dot += qh[i*s.d+c] * kh[j*s.d+c]
				}
				row[j] = dot * scale
				m = math.Max(m, row[j])
			}
			sum := 0.0
			for j := range row {
				row[j] = math.Exp(row[j] - m)
				sum += row[j]
			}
			for j := range row {
				row[j] /= sum
				for c := 0; c < s.d; c++ {
					o[i*s.d+c] += row[j] * vh[j*s.d+c]
				}
			}
		}
	}
	return probs, out
}

// attentionBackwardRef differentiates attentionRef given its probabilities.
func attentionBackwardRef(s attnShape, q, k, v, probs, dout []float64, scale float64) (dq, dk, dv []float64) {
	dq = make([]float64, len(q))
	dk, dv = make([]float64, len(k)), make([]float64, len(v))
	for hd := 0; hd < s.b*s.h; hd++ {
		qh, kh, vh := q[hd*s.tq*s.d:], k[hd*s.tk*s.d:], v[hd*s.tk*s.d:]
		p, do := probs[hd*s.tq*s.tk:], dout[hd*s.tq*s.d:]
		dqh, dkh, dvh := dq[hd*s.tq*s.d:], dk[hd*s.tk*s.d:], dv[hd*s.tk*s.d:]
		dp := make([]float64, s.tk)
		for i := 0; i < s.tq; i++ {
			sum := 0.0
			for j := 0; j < s.tk; j++ {
				dp[j] = 0
				for c := 0; c < s.d; c++ {
					dp[j] += do[i*s.d+c] * vh[j*s.d+c]
				}
				sum += dp[j] * p[i*s.tk+j]
			}
			for j := 0; j < s.tk; j++ {
				pij := p[i*s.tk+j]
				ds := pij * (dp[j] - sum) * scale
				for c := 0; c < s.d; c++ {
					dqh[i*s.d+c] += ds * kh[j*s.d+c]
					dkh[j*s.d+c] += ds * qh[i*s.d+c]
					dvh[j*s.d+c] += pij * do[i*s.d+c]
				}
			}
		}
	}
	return dq, dk, dv
}

// packedViews returns three [B, H, T, D] views into one [B, T, 3, H, D]
// buffer, as the tensor layer makes q, k and v from one projection: the
// strides are (T·3·H·D, D, 3·H·D, 1).
func packedViews(t testing.TB, d *Device, dt dtype.DType, b, h, tt, dim int) [3]device.View {
	t.Helper()
	whole := emptyOperand(t, d, dt, []int{b, tt, 3, h, dim}, contiguous)
	var out [3]device.View
	for i := range out {
		out[i] = device.View{Buf: whole.Buf, DType: dt, Offset: i * h * dim, Shape: []int{b, h, tt, dim},
			Strides: []int{tt * 3 * h * dim, dim, 3 * h * dim, 1}}
	}
	return out
}

// transposedView returns a [B, H, T, D] view of a [B, T, H, D] buffer, the
// layout of the attention output before the caller's transpose(1, 2).
func transposedView(t testing.TB, d *Device, dt dtype.DType, b, h, tt, dim int) device.View {
	t.Helper()
	whole := emptyOperand(t, d, dt, []int{b, tt, h, dim}, contiguous)
	return device.View{Buf: whole.Buf, DType: dt, Shape: []int{b, h, tt, dim}, Strides: []int{tt * h * dim, dim, h * dim, 1}}
}

func fill(t testing.TB, d *Device, v device.View, data []float64) {
	t.Helper()
	if err := d.Copy(v, hostView(dtype.Float64, v.Shape, data)); err != nil {
		t.Fatal(err)
	}
}

func TestAttention(t *testing.T) {
	shapes := []attnShape{
		{1, 1, 1, 1, 1},
		{1, 1, 5, 5, 3},
		{2, 3, 7, 7, 16},
		{2, 2, 33, 33, 8},
		{1, 2, 70, 70, 64},
		{1, 1, 4, 9, 5}, // more keys than queries
		{1, 3, 9, 4, 5}, // more queries than keys
		{1, 2, 3, 3, 0}, // empty heads
		{2, 1, 0, 3, 4}, // no queries
	}
	d := New(Options{})
	r := rand.New(rand.NewPCG(19, 20))
	for _, s := range shapes {
		for _, dt := range testDTypes {
			for _, causal := range []bool{false, true} {
				for _, packed := range []bool{false, true} {
					if packed && s.tq != s.tk {
						continue
					}
					name := fmt.Sprintf("%dx%dx%dx%dx%d/%v/causal=%v/packed=%v", s.b, s.h, s.tq, s.tk, s.d, dt, causal, packed)
					t.Run(name, func(t *testing.T) {
						testAttention(t, d, r, s, dt, causal, packed)
					})
				}
			}
		}
	}
}

func testAttention(t *testing.T, d *Device, r *rand.Rand, s attnShape, dt dtype.DType, causal, packed bool) {
	qs := randn(r, s.b*s.h*s.tq*s.d, 1, dt)
	ks := randn(r, s.b*s.h*s.tk*s.d, 1, dt)
	vs := randn(r, s.b*s.h*s.tk*s.d, 1, dt)
	dos := randn(r, s.b*s.h*s.tq*s.d, 1, dt)
	scale := 1 / math.Sqrt(float64(max(s.d, 1)))
	qshape, kshape := []int{s.b, s.h, s.tq, s.d}, []int{s.b, s.h, s.tk, s.d}

	var q, k, v, out, dout, dq, dk, dv device.View
	if packed {
		qkv := packedViews(t, d, dt, s.b, s.h, s.tq, s.d)
		q, k, v = qkv[0], qkv[1], qkv[2]
		grads := packedViews(t, d, dt, s.b, s.h, s.tq, s.d)
		dq, dk, dv = grads[0], grads[1], grads[2]
		out = transposedView(t, d, dt, s.b, s.h, s.tq, s.d)
		dout = transposedView(t, d, dt, s.b, s.h, s.tq, s.d)
	} else {
		q, k, v = emptyOperand(t, d, dt, qshape, contiguous), emptyOperand(t, d, dt, kshape, contiguous), emptyOperand(t, d, dt, kshape, contiguous)
		dq, dk, dv = emptyOperand(t, d, dt, qshape, contiguous), emptyOperand(t, d, dt, kshape, contiguous), emptyOperand(t, d, dt, kshape, contiguous)
		out, dout = emptyOperand(t, d, dt, qshape, contiguous), emptyOperand(t, d, dt, qshape, contiguous)
	}
	fill(t, d, q, qs)
	fill(t, d, k, ks)
	fill(t, d, v, vs)
	fill(t, d, dout, dos)
	probs := emptyOperand(t, d, dt, []int{s.b, s.h, s.tq, s.tk}, contiguous)
	if err := d.Attention(out, probs, q, k, v, scale, causal); err != nil {
		t.Fatal(err)
	}
	wantP, wantOut := attentionRef(s, qs, ks, vs, scale, causal)
	ps := values(t, d, probs)
	tol := 4 * tolerance(dt)
	assertClose(t, "probs", ps, wantP, tol)
	assertClose(t, "out", values(t, d, out), wantOut, tol)
	if causal {
		for i, p := range ps {
			row, col := (i/s.tk)%s.tq, i%s.tk
			if col > row && p != 0 {
				t.Fatalf("probs[%d] (query %d, key %d) = %v, want exactly 0", i, row, col, p)
			}
		}
	}

	if err := d.AttentionBackward(dq, dk, dv, dout, q, k, v, probs, scale); err != nil {
		t.Fatal(err)
	}
	// The reference differentiates from the kept probabilities, rounded as
	// the kernel keeps them.
	wantDq, wantDk, wantDv := attentionBackwardRef(s, qs, ks, vs, ps, dos, scale)
	assertClose(t, "dq", values(t, d, dq), wantDq, 2*tol)
	assertClose(t, "dk", values(t, d, dk), wantDk, 2*tol)
	assertClose(t, "dv", values(t, d, dv), wantDv, 2*tol)
}

// TestAttentionSequentialHeads runs fewer heads than threads (products and
// softmax parallelised instead of heads) against the parallel-heads path.
func TestAttentionSequentialHeads(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(21, 22))
	all := parallel.Threads()
	defer parallel.SetThreads(all)
	parallel.SetThreads(max(all, 4)) // more threads than heads on any machine
	for _, causal := range []bool{false, true} {
		testAttention(t, d, r, attnShape{1, 1, 300, 300, 32}, dtype.Float32, causal, true)
		testAttention(t, d, r, attnShape{1, 3, 100, 100, 24}, dtype.Float64, causal, false)
		testAttention(t, d, r, attnShape{1, 2, 40, 40, 16}, dtype.BFloat16, causal, true)
	}
}

// TestAttentionLayouts checks inputs the products cannot read in place (a
// strided last axis, rows broadcast along T) against contiguous copies, and
// that such outputs are refused.
func TestAttentionLayouts(t *testing.T) {
	d := New(Options{})
	r := rand.New(rand.NewPCG(25, 26))
	f := dtype.Float64
	s := attnShape{2, 2, 6, 6, 5}
	shape := []int{s.b, s.h, s.tq, s.d}
	qs, ks := randn(r, numel(shape), 1, f), randn(r, numel(shape), 1, f)
	q := newOperand(t, d, f, shape, qs, strided) // last axis strided
	k := newOperand(t, d, f, shape, ks, contiguous)
	// v and dout: one row per head, broadcast along T (stride 0).
	one := []int{s.b, s.h, 1, s.d}
	vrow, dorow := randn(r, numel(one), 1, f), randn(r, numel(one), 1, f)
	v := newOperand(t, d, f, one, vrow, contiguous)
	dout := newOperand(t, d, f, one, dorow, contiguous)
	for _, x := range []*device.View{&v, &dout} {
		x.Shape, x.Strides = shape, []int{s.h * s.d, s.d, 0, 1}
	}
	vs, dos := make([]float64, numel(shape)), make([]float64, numel(shape))
	forEach(shape, func(pos []int, i int) {
		j := (pos[0]*s.h+pos[1])*s.d + pos[3]
		vs[i], dos[i] = vrow[j], dorow[j]
	})
	out := emptyOperand(t, d, f, shape, contiguous)
	probs := emptyOperand(t, d, f, []int{s.b, s.h, s.tq, s.tk}, contiguous)
	if err := d.Attention(out, probs, q, k, v, 0.5, true); err != nil {
		t.Fatal(err)
	}
	wantP, wantOut := attentionRef(s, qs, ks, vs, 0.5, true)
	assertClose(t, "probs", values(t, d, probs), wantP, 1e-12)
	assertClose(t, "out", values(t, d, out), wantOut, 1e-12)
	dq := emptyOperand(t, d, f, shape, strided)
	dk := emptyOperand(t, d, f, shape, contiguous)
	dv := emptyOperand(t, d, f, shape, contiguous)
	if err := d.AttentionBackward(dq, dk, dv, dout, q, k, v, probs, 0.5); err == nil {
		t.Error("attention backward into a dq with a strided last axis: no error")
	}
	dq = emptyOperand(t, d, f, shape, contiguous)
	if err := d.AttentionBackward(dq, dk, dv, dout, q, k, v, probs, 0.5); err != nil {
		t.Fatal(err)
	}
	wantDq, wantDk, wantDv := attentionBackwardRef(s, qs, ks, vs, wantP, dos, 0.5)
	assertClose(t, "dq", values(t, d, dq), wantDq, 1e-12)
	assertClose(t, "dk", values(t, d, dk), wantDk, 1e-12)
	assertClose(t, "dv", values(t, d, dv), wantDv, 1e-12)

	overlap := out
	overlap.Strides = []int{s.h * s.tq * s.d, s.tq * s.d, 2, 1}
	if err := d.Attention(overlap, probs, q, k, v, 0.5, false); err == nil {
		t.Error("attention into an output with overlapping rows: no error")
	}
}

func BenchmarkAttention(b *testing.B) {
	// The GPT bench: B 8, H 4, T 128, D 64, causal, q, k, v from one
	// [B, T, 3, H, D] projection.
	const bb, h, tt, dim = 8, 4, 128, 64
	d := New(Options{})
	r := rand.New(rand.NewPCG(1, 1))
	f := dtype.Float32
	qkv := packedViews(b, d, f, bb, h, tt, dim)
	grads := packedViews(b, d, f, bb, h, tt, dim)
	for _, v := range qkv {
		fill(b, d, v, randn(r, bb*h*tt*dim, 1, f))
	}
	out := transposedView(b, d, f, bb, h, tt, dim)
	dout := transposedView(b, d, f, bb, h, tt, dim)
	fill(b, d, dout, randn(r, bb*h*tt*dim, 1, f))
	probs := emptyOperand(b, d, f, []int{bb, h, tt, tt}, contiguous)
	scale := 1 / math.Sqrt(dim)
	for _, causal := range []bool{true, false} {
		// Useful flops of the unmasked computation: 2 products forward,
		// 4 backward, of 2·T·T·D each.
		flops := float64(bb*h) * 2 * tt * tt * dim
		fwd := func() error { return d.Attention(out, probs, qkv[0], qkv[1], qkv[2], scale, causal) }
		bwd := func() error {
			return d.AttentionBackward(grads[0], grads[1], grads[2], dout, qkv[0], qkv[1], qkv[2], probs, scale)
		}
		if err := fwd(); err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name  string
			fn    func() error
			flops float64
		}{{"forward", fwd, 2 * flops}, {"backward", bwd, 4 * flops}, {"both", func() error {
			if err := fwd(); err != nil {
				return err
			}
			return bwd()
		}, 6 * flops}} {
			b.Run(fmt.Sprintf("causal=%v/%s", causal, c.name), func(b *testing.B) {
				for b.Loop() {
					if err := c.fn(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(c.flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
