package vmath

import "math"

// The row kernels follow PyTorch's vectorized last-dimension kernels
// (aten/src/ATen/native/cpu/SoftMaxKernel.cpp, layer_norm_kernel.cpp) step by
// step, except that their sums accumulate in float64 instead of float32 lanes:
// the result is the same up to rounding and does not drift on long rows.

// SoftmaxRow sets dst = exp(x - max x) / Σ exp(x - max x). Like PyTorch it
// multiplies by the float32 reciprocal of the sum. A row containing NaN or
// +Inf, or made only of -Inf, gives NaN. Empty rows are a no-op.
//
// Unlike PyTorch, probabilities below the smallest normal float32 (1.2e-38)
// are flushed to zero: see FlushSubnormal.
func SoftmaxRow(dst, x []float32) {
	check2("SoftmaxRow", dst, x)
	if len(x) == 0 {
		return
	}
	k := impl
	m := k.max(x)
	s := k.expSubSum(dst, x, m)
	k.mulScalar(dst, dst, 1/float32(s))
	FlushSubnormal(dst)
}

// FlushSubnormal replaces subnormal values (0 < |v| < 2^-126) by zero.
//
// Softmax probabilities of logits far below the row's maximum, and the
// gradients made from them, are subnormal. They carry no information a
// float32 sum can use, but every later multiply-add that reads them takes a
// microcode assist on x86 (10-100× slower): a small GPT's backward pass was
// seen to slow down 3× as its logits spread during training, in PyTorch as
// well. Flushing at the source keeps every later kernel at full speed; the
// results differ from PyTorch's by less than 2^-126 absolute.
func FlushSubnormal(x []float32) {
	for i, v := range x {
		if math.Float32bits(v)&0x7f800000 == 0 {
			x[i] = 0
		}
	}
}

// LogSoftmaxRow sets dst = (x - max x) - log Σ exp(x - max x), with PyTorch's
// two subtractions (and their two roundings).
func LogSoftmaxRow(dst, x []float32) {
	check2("LogSoftmaxRow", dst, x)
	if len(x) == 0 {
		return
	}
	k := impl
	m := k.max(x)
	s := k.sumExpSub(x, m)
	k.subSub(dst, x, m, float32(math.Log(float64(float32(s)))))
}

// SoftmaxBackwardRow sets dx = y·(dy - Σ dy·y), where y is the softmax output.
func SoftmaxBackwardRow(dx, dy, y []float32) {
	check3("SoftmaxBackwardRow", dx, dy, y)
	if len(y) == 0 {
		return
	}
	k := impl
	k.softmaxBwd(dx, dy, y, float32(k.dot(dy, y)))
}

// LogSoftmaxBackwardRow sets dx = dy - exp(y)·Σ dy, where y is the
// log-softmax output.
func LogSoftmaxBackwardRow(dx, dy, y []float32) {
	check3("LogSoftmaxBackwardRow", dx, dy, y)
	if len(y) == 0 {
		return
	}
	k := impl
	k.logSoftmaxBwd(dx, dy, y, float32(k.sum(dy)))
}

// LayerNormRow normalizes one row: dst = (x - mean)·rstd·w + b, with the
// biased variance and rstd = 1/√(var + eps) as PyTorch's layer_norm. w and b
// may be nil (no affine weight or bias). It returns the mean and rstd that
// LayerNormBackwardRow needs (PyTorch saves the same two per row).
//
// Mean and variance are computed in float64 with two passes, then rounded to
// float32, where PyTorch uses a float32 Welford pass; rstd and the output
// follow PyTorch's float32 expressions: with both w and b,
// (x·rstd + (-rstd·mean))·w + b; otherwise (x - mean)·rstd·w + b.
func LayerNormRow(dst, x, w, b []float32, eps float32) (mean, rstd float32) {
	check2("LayerNormRow", dst, x)
	n := len(x)
	checkOpt("LayerNormRow", "w", n, w)
	checkOpt("LayerNormRow", "b", n, b)
	if n == 0 {
		return 0, float32(math.NaN())
	}
	mean64 := impl.sum(x) / float64(n)
	var ss float64
	for _, v := range x {
		d := float64(v) - mean64
		ss += d * d
	}
	mean = float32(mean64)
	variance := float32(ss / float64(n))
	rstd = 1 / float32(math.Sqrt(float64(max(variance, 0)+eps)))

	dst = dst[:n]
	switch {
	case w != nil && b != nil:
		scale, bias := rstd, -rstd*mean
		w, b = w[:n], b[:n]
		for i, v := range x {
			dst[i] = float32(float32(v*scale)+bias)*w[i] + b[i]
		}
	default:
		for i, v := range x {
			y := float32((v - mean) * rstd)
			if w != nil {
				y *= w[i]
			}
			if b != nil {
				y += b[i]
			}
			dst[i] = y
		}
	}
	return mean, rstd
}

// LayerNormBackwardRow computes the gradients of one LayerNormRow given the
// mean and rstd it returned. It sets dx (if not nil) and adds into dw and db
// (if not nil; they accumulate over the rows of a batch). w may be nil
// (weight 1). The formulas are PyTorch's:
//
//	ds = Σ dy·w·x,  dbs = Σ dy·w
//	b  = (dbs·mean - ds)·rstd³/N,  c = -b·mean - dbs·rstd/N
//	dx = rstd·dy·w + b·x + c
//	dw += dy·(x·rstd - rstd·mean),  db += dy
//
// with ds and dbs accumulated in float64.
func LayerNormBackwardRow(dx, dw, db, dy, x, w []float32, mean, rstd float32) {
	check2("LayerNormBackwardRow", dy, x)
	n := len(x)
	checkOpt("LayerNormBackwardRow", "dx", n, dx)
	checkOpt("LayerNormBackwardRow", "dw", n, dw)
	checkOpt("LayerNormBackwardRow", "db", n, db)
	checkOpt("LayerNormBackwardRow", "w", n, w)
	if n == 0 {
		return
	}
	dy = dy[:n]
	// dw and db first: dx may alias dy or x.
	if dw != nil {
		dw = dw[:n]
		a, bb := rstd, -rstd*mean
		for i, v := range x {
			dw[i] += dy[i] * (float32(a*v) + bb)
		}
	}
	if db != nil {
		db = db[:n]
		for i, g := range dy {
			db[i] += g
		}
	}
	if dx == nil {
		return
	}
	var ds, dbs float64
	if w == nil {
		ds = impl.dot(dy, x)
		dbs = impl.sum(dy)
	} else {
		w = w[:n]
		for i, v := range x {
			gw := float64(float32(dy[i] * w[i]))
			ds += gw * float64(v)
			dbs += gw
		}
	}
	scale := 1 / float32(n)
	dsf, dbf := float32(ds), float32(dbs)
	b := float32(float32(dbf*mean)-dsf) * rstd * rstd * rstd * scale
	c := float32(-b*mean) - float32(dbf*rstd)*scale
	dx = dx[:n]
	for i, v := range x {
		g := dy[i]
		if w != nil {
			g = float32(g * w[i])
		}
		dx[i] = float32(float32(rstd*g)+float32(b*v)) + c
	}
}
