package vmath

import (
	"math"
	"testing"
)

var rowLengths = []int{1, 7, 15, 16, 17, 31, 33, 128, 1000, 50257}

func forVariants(t *testing.T, f func(t *testing.T, k *kernels)) {
	for _, k := range variants {
		t.Run(k.name, func(t *testing.T) {
			defer useVariant(k)()
			f(t, k)
		})
	}
}

func softmax64(x []float32) (y []float64, m, lse float64) {
	m = math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	var s float64
	y = make([]float64, len(x))
	for i, v := range x {
		y[i] = math.Exp(float64(v) - m)
		s += y[i]
	}
	for i := range y {
		y[i] /= s
	}
	return y, m, math.Log(s)
}

func TestSoftmaxRows(t *testing.T) {
	forVariants(t, func(t *testing.T, k *kernels) {
		r := newRand(21)
		for _, n := range rowLengths {
			for _, scale := range []float64{1, 30} {
				x := r.slice(n, scale)
				if n > 3 {
					x[1] = float32(math.Inf(-1)) // a masked position
				}
				want, m, lse := softmax64(x)
				y := make([]float32, n)
				SoftmaxRow(y, x)
				ls := make([]float32, n)
				LogSoftmaxRow(ls, x)
				for i := range x {
					// x - max is rounded to float32 first, as in PyTorch: its
					// rounding scales the result by up to e^(|x-max|·2^-24).
					w := float32(want[i])
					if math.Abs(want[i]) < 0x1p-126 {
						w = 0 // subnormal probabilities are flushed
					}
					if !close32(y[i], w, 1e-6+math.Abs(float64(x[i])-m)*0x1p-24, 0x1p-126) {
						t.Fatalf("Softmax n=%d scale=%g [%d] = %g, want %g", n, scale, i, y[i], want[i])
					}
					wl := float64(x[i]) - m - lse
					if math.IsInf(wl, -1) {
						if !math.IsInf(float64(ls[i]), -1) {
							t.Fatalf("LogSoftmax [%d] = %g, want -Inf", i, ls[i])
						}
						continue
					}
					if tol := 1e-6*(math.Abs(float64(x[i])-m)+math.Abs(lse)) + 1e-7; math.Abs(float64(ls[i])-wl) > tol {
						t.Fatalf("LogSoftmax n=%d scale=%g [%d] = %g, want %g", n, scale, i, ls[i], wl)
					}
				}
				// In place.
				cp := append([]float32(nil), x...)
				SoftmaxRow(cp, cp)
				for i := range cp {
					if cp[i] != y[i] {
						t.Fatalf("in-place Softmax [%d] = %g, want %g", i, cp[i], y[i])
					}
				}
			}
		}
		// A fully masked row is NaN, as in PyTorch.
		y := make([]float32, 3)
		SoftmaxRow(y, []float32{float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1))})
		if y[0] == y[0] {
			t.Errorf("Softmax of an all -Inf row = %v, want NaN", y)
		}
		SoftmaxRow(nil, nil) // empty rows are a no-op
	})
}

func TestSoftmaxBackwardRows(t *testing.T) {
	forVariants(t, func(t *testing.T, k *kernels) {
		r := newRand(22)
		for _, n := range rowLengths {
			x, dy := r.slice(n, 2), r.slice(n, 1)
			y := make([]float32, n)
			SoftmaxRow(y, x)
			var dot float64
			for i := range y {
				dot += float64(dy[i]) * float64(y[i])
			}
			dx := make([]float32, n)
			SoftmaxBackwardRow(dx, dy, y)
			for i := range dx {
				want := float64(y[i]) * (float64(dy[i]) - dot)
				tol := 1e-6 * float64(y[i]) * (math.Abs(float64(dy[i])) + math.Abs(dot))
				if math.Abs(float64(dx[i])-want) > tol+1e-45 {
					t.Fatalf("SoftmaxBackward n=%d [%d] = %g, want %g", n, i, dx[i], want)
				}
			}
			ls := make([]float32, n)
			LogSoftmaxRow(ls, x)
			var sum float64
			for _, v := range dy {
				sum += float64(v)
			}
			LogSoftmaxBackwardRow(dx, dy, ls)
			for i := range dx {
				e := math.Exp(float64(ls[i]))
				want := float64(dy[i]) - e*sum
				tol := 1e-6*(math.Abs(float64(dy[i]))+e*math.Abs(sum)) + 1e-12
				if math.Abs(float64(dx[i])-want) > tol {
					t.Fatalf("LogSoftmaxBackward n=%d [%d] = %g, want %g", n, i, dx[i], want)
				}
			}
			// dx may alias dy.
			cp := append([]float32(nil), dy...)
			LogSoftmaxBackwardRow(cp, cp, ls)
			for i := range cp {
				if cp[i] != dx[i] {
					t.Fatalf("LogSoftmaxBackward with dx = dy: [%d] = %g, want %g", i, cp[i], dx[i])
				}
			}
		}
	})
}

func TestLayerNormRow(t *testing.T) {
	forVariants(t, func(t *testing.T, k *kernels) {
		r := newRand(23)
		for _, n := range []int{1, 7, 16, 33, 256, 1000, 4096} {
			for _, affine := range []int{0, 1, 2, 3} { // bit 0: w, bit 1: b
				x := r.slice(n, 3)
				for i := range x {
					x[i] += 5 // an offset that a one-pass variance would lose
				}
				var w, b []float32
				if affine&1 != 0 {
					w = r.slice(n, 1)
				}
				if affine&2 != 0 {
					b = r.slice(n, 1)
				}
				const eps = 1e-5
				y := make([]float32, n)
				mean, rstd := LayerNormRow(y, x, w, b, eps)
				var m, v float64
				for _, xi := range x {
					m += float64(xi)
				}
				m /= float64(n)
				for _, xi := range x {
					v += (float64(xi) - m) * (float64(xi) - m)
				}
				v /= float64(n)
				rs := 1 / math.Sqrt(v+eps)
				if !close32(mean, float32(m), 1e-7, 1e-7) || !close32(rstd, float32(rs), 3e-7, 0) {
					t.Fatalf("n=%d: mean, rstd = %g, %g, want %g, %g", n, mean, rstd, m, rs)
				}
				for i := range y {
					xh := (float64(x[i]) - m) * rs
					want, mag := xh, math.Abs(xh)+1
					if w != nil {
						want *= float64(w[i])
						mag *= math.Abs(float64(w[i]))
					}
					if b != nil {
						want += float64(b[i])
						mag += math.Abs(float64(b[i]))
					}
					if math.Abs(float64(y[i])-want) > 1e-5*mag {
						t.Fatalf("n=%d affine=%d [%d] = %g, want %g", n, affine, i, y[i], want)
					}
				}

				// Backward, against the closed form
				// dx = rstd/N·(N·g - Σg - x̂·Σ(g·x̂)), g = dy·w.
				dy := r.slice(n, 1)
				dx := make([]float32, n)
				dw := make([]float32, n)
				db := make([]float32, n)
				for i := range dw {
					dw[i], db[i] = 1, -1 // they accumulate
				}
				LayerNormBackwardRow(dx, dw, db, dy, x, w, mean, rstd)
				var sg, sgx float64
				g := make([]float64, n)
				xh := make([]float64, n)
				for i := range x {
					g[i] = float64(dy[i])
					if w != nil {
						g[i] *= float64(w[i])
					}
					xh[i] = (float64(x[i]) - float64(mean)) * float64(rstd)
					sg += g[i]
					sgx += g[i] * xh[i]
				}
				fn := float64(n)
				for i := range x {
					want := float64(rstd) / fn * (fn*g[i] - sg - xh[i]*sgx)
					mag := float64(rstd) / fn * (fn*math.Abs(g[i]) + math.Abs(sg) + math.Abs(xh[i]*sgx))
					if math.Abs(float64(dx[i])-want) > 2e-5*mag+1e-7 {
						t.Fatalf("n=%d affine=%d dx[%d] = %g, want %g", n, affine, i, dx[i], want)
					}
					if want := 1 + float64(dy[i])*xh[i]; math.Abs(float64(dw[i])-want) > 1e-6*(1+math.Abs(want)) {
						t.Fatalf("n=%d dw[%d] = %g, want %g", n, i, dw[i], want)
					}
					if want := float32(-1 + float64(dy[i])); db[i] != want {
						t.Fatalf("n=%d db[%d] = %g, want %g", n, i, db[i], want)
					}
				}
				// Optional outputs: dx alone, aliasing dy, must agree.
				cp := append([]float32(nil), dy...)
				LayerNormBackwardRow(cp, nil, nil, cp, x, w, mean, rstd)
				for i := range cp {
					if cp[i] != dx[i] {
						t.Fatalf("n=%d dx aliasing dy: [%d] = %g, want %g", n, i, cp[i], dx[i])
					}
				}
			}
		}
	})
}

func TestFlushSubnormal(t *testing.T) {
	x := []float32{1, -2, 0x1p-126, -0x1p-126, 0x1p-127, -0x1p-149, 0, float32(math.Inf(1)), float32(math.NaN())}
	FlushSubnormal(x)
	want := []float32{1, -2, 0x1p-126, -0x1p-126, 0, 0, 0, float32(math.Inf(1))}
	for i, w := range want {
		if x[i] != w {
			t.Errorf("[%d] = %g, want %g", i, x[i], w)
		}
	}
	if x[8] == x[8] {
		t.Error("NaN was flushed")
	}
}
