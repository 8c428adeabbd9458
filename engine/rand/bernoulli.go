package rand

import "fmt"

// Bernoulli32 fills dst with 1 (probability p) or 0, as Tensor.bernoulli_(p)
// with a scalar p on a contiguous float32 tensor.
//
// Debian's PyTorch is built without MKL (torch.backends.mkl.is_available()
// is False), so bernoulli_scalar_kernel is the portable
// templates::cpu::bernoulli_kernel: per element one 53-bit double uniform (a
// 64-bit draw) compared with p, 1 when u < p. (An MKL build instead seeds a
// VSL stream from one 32-bit draw and produces different masks.) p outside
// [0, 1] panics.
func (g *Generator) Bernoulli32(dst []float32, p float64) {
	if !(p >= 0 && p <= 1) {
		panic(fmt.Sprintf("rand: bernoulli expects 0 <= p <= 1, got %v", p))
	}
	var u [256]float64
	for len(dst) > 0 {
		n := min(len(dst), len(u))
		g.fillUniform01x64(u[:n])
		for i := range dst[:n] {
			if u[i] < p {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
		dst = dst[n:]
	}
}

// DropoutMask32 fills mask with the noise that
// torch.nn.functional.dropout(x, p, training=True) multiplies a contiguous
// float32 input by on the CPU, so that the dropout output is x[i]*mask[i],
// rounded to float32, bit for bit.
//
// The CPU path is at::native::_dropout (ATen/native/Dropout.cpp; the fused
// native_dropout is used only on CUDA): noise.bernoulli_(1-p), then
// noise.div_(1-p), then input*noise. The divisor 1-p is computed in double
// and rounded to float32, so a kept element's mask value is
// float32(1)/float32(1-p), not float32(1/(1-p)). p == 0 draws nothing and
// keeps everything; p == 1 draws nothing and zeroes everything (PyTorch
// multiplies by 0 then, so NaN and Inf inputs become NaN). p outside [0, 1]
// panics.
func (g *Generator) DropoutMask32(mask []float32, p float64) {
	if !(p >= 0 && p <= 1) {
		panic(fmt.Sprintf("rand: dropout probability has to be between 0 and 1, but got %v", p))
	}
	switch p {
	case 0:
		for i := range mask {
			mask[i] = 1
		}
		return
	case 1:
		for i := range mask {
			mask[i] = 0
		}
		return
	}
	q := 1 - p
	scale := 1 / float32(q)
	var u [256]float64
	for len(mask) > 0 {
		n := min(len(mask), len(u))
		g.fillUniform01x64(u[:n])
		for i := range mask[:n] {
			if u[i] < q {
				mask[i] = scale
			} else {
				mask[i] = 0
			}
		}
		mask = mask[n:]
	}
}
