package vmath

import (
	"math"
	"sync"
)

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
	k.mulScalarFlush(dst, dst, 1/float32(s))
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
// (SoftmaxRow fuses it into its last multiply.)
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

// lnChunk is the length of the row pieces the layer-norm kernels stage in a
// stack buffer: they run as a few passes of vector kernels over data that
// stays in L1.
const lnChunk = 256

// lnScratch holds the staging buffers: a pool rather than a stack array,
// which would escape to the heap through the kernel function values.
var lnScratch = sync.Pool{New: func() any { return new([lnChunk]float32) }}

// LayerNormRow normalizes one row: dst = (x - mean)·rstd·w + b, with the
// biased variance and rstd = 1/√(var + eps) as PyTorch's layer_norm. w and b
// may be nil (no affine weight or bias). It returns the mean and rstd that
// LayerNormBackwardRow needs (PyTorch saves the same two per row).
//
// Mean and variance are computed in float64 (the variance from the float32
// deviations x - mean), then rounded to float32, where PyTorch uses a float32
// Welford pass; rstd and the output follow PyTorch's float32 expressions:
// with both w and b, (x·rstd + (-rstd·mean))·w + b; otherwise
// (x - mean)·rstd·w + b, each operation rounded.
func LayerNormRow(dst, x, w, b []float32, eps float32) (mean, rstd float32) {
	check2("LayerNormRow", dst, x)
	n := len(x)
	checkOpt("LayerNormRow", "w", n, w)
	checkOpt("LayerNormRow", "b", n, b)
	if n == 0 {
		return 0, float32(math.NaN())
	}
	k := impl
	mean64 := k.sum(x) / float64(n)
	mean = float32(mean64)
	tmp := lnScratch.Get().(*[lnChunk]float32)
	defer lnScratch.Put(tmp)
	var ss float64
	for lo := 0; lo < n; lo += lnChunk {
		t := tmp[:min(lnChunk, n-lo)]
		k.addScalar(t, x[lo:lo+len(t)], -mean)
		ss += k.sumSquares(t)
	}
	variance := float32(ss / float64(n))
	rstd = 1 / float32(math.Sqrt(float64(max(variance, 0)+eps)))
	dst = dst[:n]
	if w != nil && b != nil {
		k.mulScalar(dst, x, rstd)
		k.addScalar(dst, dst, -rstd*mean)
		k.mul(dst, dst, w[:n])
		k.add(dst, dst, b[:n])
		return mean, rstd
	}
	k.addScalar(dst, x, -mean)
	k.mulScalar(dst, dst, rstd)
	if w != nil {
		k.mul(dst, dst, w[:n])
	}
	if b != nil {
		k.add(dst, dst, b[:n])
	}
	return mean, rstd
}

// LayerNormBackwardRow computes the gradients of one LayerNormRow given the
// mean and rstd it returned. It sets dx (if not nil) and adds into dw and db
// (if not nil; they accumulate over the rows of a batch). w may be nil
// (weight 1). dx may alias dy or x. The formulas are PyTorch's:
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
	k := impl
	tmp := lnScratch.Get().(*[lnChunk]float32)
	defer lnScratch.Put(tmp)
	// dw and db first: dx may alias dy or x.
	if dw != nil {
		for lo := 0; lo < n; lo += lnChunk {
			t := tmp[:min(lnChunk, n-lo)]
			hi := lo + len(t)
			k.mulScalar(t, x[lo:hi], rstd)
			k.addScalar(t, t, -rstd*mean)
			k.mul(t, t, dy[lo:hi])
			k.add(dw[lo:hi], dw[lo:hi], t)
		}
	}
	if db != nil {
		k.add(db[:n], db[:n], dy[:n])
	}
	if dx == nil {
		return
	}
	var ds, dbs float64
	if w == nil {
		ds = k.dot(dy[:n], x)
		dbs = k.sum(dy[:n])
	} else {
		for lo := 0; lo < n; lo += lnChunk {
			t := tmp[:min(lnChunk, n-lo)]
			hi := lo + len(t)
			k.mul(t, dy[lo:hi], w[lo:hi])
			ds += k.dot(t, x[lo:hi])
			dbs += k.sum(t)
		}
	}
	scale := 1 / float32(n)
	dsf, dbf := float32(ds), float32(dbs)
	b := float32(float32(dbf*mean)-dsf) * rstd * rstd * rstd * scale
	c := float32(-b*mean) - float32(dbf*rstd)*scale
	for lo := 0; lo < n; lo += lnChunk {
		t := tmp[:min(lnChunk, n-lo)]
		hi := lo + len(t)
		if w != nil {
			k.mul(t, dy[lo:hi], w[lo:hi])
			k.mulScalar(t, t, rstd)
		} else {
			k.mulScalar(t, dy[lo:hi], rstd)
		}
		k.axpy(t, b, x[lo:hi]) // rstd·g + b·x, fused
		k.addScalar(dx[lo:hi], t, c)
	}
}
