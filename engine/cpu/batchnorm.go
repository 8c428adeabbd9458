package cpu

import (
	"fmt"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// Batch normalisation's kernels (device.BatchNormer), as PyTorch's CPU
// ones compute it on contiguous [N, C, S] input: statistics accumulated
// in float64, per channel, two passes (mean, then the squared
// deviations); the output as x·α + β; the backward from two sums per
// channel (Σdy and Σdy·(x − mean)) and one pass. The composition of
// reductions and broadcast arithmetic that every device runs made about
// ten passes over the batch for the forward and backward. Each pass is a
// vmath loop: AVX2 or AVX-512 for float32, Go for float64.

// bnShape reads [N, C, S] from x's shape.
func bnShape(x device.View) (n, c, s int, err error) {
	if len(x.Shape) < 2 {
		return 0, 0, 0, fmt.Errorf("cpu: batch_norm of shape %v: want [N, C, ...]", x.Shape)
	}
	n, c, s = x.Shape[0], x.Shape[1], 1
	for _, d := range x.Shape[2:] {
		s *= d
	}
	return n, c, s, nil
}

// channelGrain is how many channels of n·s elements make a chunk.
func channelGrain(n, s int) int { return rowGrain(n * s) }

func (d *Device) BatchNormStats(mean, varSum, x device.View) error {
	n, c, s, err := bnShape(x)
	if err != nil {
		return err
	}
	if err := needContiguous("batch_norm", "mean, varSum, x", mean, varSum, x); err != nil {
		return err
	}
	if mean.DType != dtype.Float64 || varSum.DType != dtype.Float64 || mean.Numel() != c || varSum.Numel() != c {
		return fmt.Errorf("cpu: batch_norm: statistics of %d channels as %v %v and %v %v", c, mean.DType, mean.Shape, varSum.DType, varSum.Shape)
	}
	m, v := rowsOf[float64](mean), rowsOf[float64](varSum)
	switch x.DType {
	case dtype.Float32:
		bnStats(m, v, rowsOf[float32](x), n, c, s)
	case dtype.Float64:
		bnStats(m, v, rowsOf[float64](x), n, c, s)
	default:
		return fmt.Errorf("cpu: batch_norm of %v", x.DType)
	}
	return nil
}

func bnStats[T float](mean, varSum []float64, x []T, n, c, s int) {
	count := float64(n * s)
	parallel.For(c, channelGrain(n, s), func(c0, c1 int) {
		for ch := c0; ch < c1; ch++ {
			var sum float64
			for i := range n {
				sum += vmath.Sum64(x[(i*c+ch)*s : (i*c+ch+1)*s])
			}
			mu := sum / count
			var dev float64
			for i := range n {
				dev += vmath.SumSquaredDeviations(x[(i*c+ch)*s:(i*c+ch+1)*s], mu)
			}
			mean[ch], varSum[ch] = mu, dev
		}
	})
}

func (d *Device) BatchNorm(y, x, mean, invstd, w, b device.View) error {
	n, c, s, err := bnShape(x)
	if err != nil {
		return err
	}
	if err := needContiguous("batch_norm", "y, x, mean, invstd, w, b", y, x, mean, invstd, w, b); err != nil {
		return err
	}
	if err := sameDType("batch_norm", x.DType, y, mean, invstd, w, b); err != nil {
		return err
	}
	switch x.DType {
	case dtype.Float32:
		bnForward(rowsOf[float32](y), rowsOf[float32](x), rowsOf[float32](mean), rowsOf[float32](invstd), optRows[float32](w), optRows[float32](b), n, c, s)
	case dtype.Float64:
		bnForward(rowsOf[float64](y), rowsOf[float64](x), rowsOf[float64](mean), rowsOf[float64](invstd), optRows[float64](w), optRows[float64](b), n, c, s)
	default:
		return fmt.Errorf("cpu: batch_norm of %v", x.DType)
	}
	return nil
}

func bnForward[T float](y, x, mean, invstd, w, b []T, n, c, s int) {
	parallel.For(n*c, rowGrain(s), func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			ch := p % c
			alpha := invstd[ch]
			if w != nil {
				alpha *= w[ch]
			}
			beta := -mean[ch] * alpha
			if b != nil {
				beta += b[ch]
			}
			vmath.ScaleShift(y[p*s:(p+1)*s], x[p*s:(p+1)*s], alpha, beta)
		}
	})
}

func (d *Device) BatchNormBackward(dx, dw, db, dy, x, mean, invstd, w device.View, training bool) error {
	n, c, s, err := bnShape(x)
	if err != nil {
		return err
	}
	if err := needContiguous("batch_norm_backward", "dx, dw, db, dy, x, mean, invstd, w", dx, dw, db, dy, x, mean, invstd, w); err != nil {
		return err
	}
	if err := sameDType("batch_norm_backward", x.DType, dx, dw, db, dy, mean, invstd, w); err != nil {
		return err
	}
	switch x.DType {
	case dtype.Float32:
		bnBackward(optRows[float32](dx), optRows[float32](dw), optRows[float32](db), rowsOf[float32](dy), rowsOf[float32](x),
			rowsOf[float32](mean), rowsOf[float32](invstd), optRows[float32](w), n, c, s, training)
	case dtype.Float64:
		bnBackward(optRows[float64](dx), optRows[float64](dw), optRows[float64](db), rowsOf[float64](dy), rowsOf[float64](x),
			rowsOf[float64](mean), rowsOf[float64](invstd), optRows[float64](w), n, c, s, training)
	default:
		return fmt.Errorf("cpu: batch_norm_backward of %v", x.DType)
	}
	return nil
}

// bnBackward follows PyTorch's batch_norm_backward_cpu: per channel the
// sums of dy and of dy·(x − mean) in float64, then dx in one pass.
func bnBackward[T float](dx, dw, db, dy, x, mean, invstd, w []T, n, c, s int, training bool) {
	count := float64(n * s)
	parallel.For(c, channelGrain(n, s), func(c0, c1 int) {
		for ch := c0; ch < c1; ch++ {
			mu, is := float64(mean[ch]), float64(invstd[ch])
			var sum, dot float64
			for i := range n {
				g, in := dy[(i*c+ch)*s:(i*c+ch+1)*s], x[(i*c+ch)*s:(i*c+ch+1)*s]
				sum += vmath.Sum64(g)
				dot += vmath.DotDeviations(g, in, mu)
			}
			if dw != nil {
				dw[ch] = T(dot * is)
			}
			if db != nil {
				db[ch] = T(sum)
			}
			if dx == nil {
				continue
			}
			wc := 1.0
			if w != nil {
				wc = float64(w[ch])
			}
			// dx = dy·a + x·b + e, the formula's terms per channel.
			a := is * wc
			var b, e float64
			if training {
				k := dot * is * is / count
				b = -k * a
				e = (k*mu - sum/count) * a
			}
			ta, tb, te := T(a), T(b), T(e)
			for i := range n {
				at := (i*c + ch) * s
				vmath.ScaleAdd2(dx[at:at+s], dy[at:at+s], x[at:at+s], ta, tb, te)
			}
		}
	})
}
