package functional

import (
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// PoolOptions are torch.nn.functional.max_pool2d's arguments. Each list
// holds one value for both spatial dimensions or one per dimension;
// Stride nil (or empty) means KernelSize, Padding nil 0, Dilation nil 1.
type PoolOptions struct {
	KernelSize, Stride, Padding, Dilation []int
	CeilMode                              bool
}

// PoolOutputSize is the length of one spatial dimension of a pooling's
// output, PyTorch's pooling_output_shape: with ceilMode the last window
// may run past the input, but must start inside it or its left padding.
func PoolOutputSize(in, kernel, pad, stride, dilation int, ceilMode bool) int {
	num := in + 2*pad - dilation*(kernel-1) - 1
	if ceilMode {
		num += stride - 1
	}
	out := floorDiv(num, stride) + 1
	if ceilMode && (out-1)*stride >= in+pad {
		out--
	}
	return out
}

// MaxPool2d is torch.nn.functional.max_pool2d over input [N, C, H, W] or
// unbatched [C, H, W]. The gradient of each output goes to the first
// maximum of its window in row-major order, as PyTorch's does; padding
// never wins (a window of −∞ picks its first element inside the input).
//
// Like the convolutions, it gathers each window's elements with one
// index_select (indices computed on the host; the taps outside the input
// read a −∞ appended to each row) and takes the maximum over them, so it
// runs on every device and autograd derives its backward.
func MaxPool2d(x *tensor.Tensor, o PoolOptions) *tensor.Tensor {
	const op = "max_pool2d"
	if x.Err() != nil {
		return x
	}
	rt := x.Runtime()
	fail := func(format string, args ...any) *tensor.Tensor {
		return rt.Failed(fmt.Errorf("nn: "+op+": "+format, args...))
	}
	kernel, err := perDim(o.KernelSize, 2, 0, "kernel_size")
	if err != nil || len(o.KernelSize) == 0 {
		return fail("kernel_size must be one integer or 2, got %v", o.KernelSize)
	}
	stride, err := perDim(o.Stride, 2, 0, "stride")
	if err != nil {
		return fail("%v", err)
	}
	if len(o.Stride) == 0 {
		copy(stride, kernel)
	}
	pad, err := perDim(o.Padding, 2, 0, "padding")
	if err != nil {
		return fail("%v", err)
	}
	dilation, err := perDim(o.Dilation, 2, 1, "dilation")
	if err != nil {
		return fail("%v", err)
	}
	n, c, in, outSize, unbatched, bad := poolWindows(op, x, kernel, stride, pad, dilation, o.CeilMode)
	if bad != nil {
		return bad
	}

	sc := rt.OpenScope()
	defer sc.Close()
	if rt.HasWindowKernels(x.DType()) {
		// The device's kernel, which follows PyTorch's.
		g, _ := windowGeom(n, c, in, kernel, outSize, stride, dilation, pad)
		y := tensor.MaxPool2d(x.Reshape(n, c, in[0], in[1]), g)
		if unbatched {
			y = y.Squeeze(0)
		}
		sc.Keep(y)
		return y
	}
	taps, positions := prod(kernel), prod(outSize)
	idx := rt.FromInt64s(windowIndices(in, kernel, outSize, stride, dilation, pad, true), positions*taps)
	rows := tensor.Cat([]*tensor.Tensor{x.Reshape(n*c, in[0]*in[1]), rt.Full(x.DType(), math.Inf(-1), n*c, 1)}, 1)
	windows := rows.IndexSelect(1, idx).Reshape(n*c, positions, taps)
	// The gradient goes to the maximum's tap: the first of equal maxima
	// (Max's), but the last NaN of a window with several, as PyTorch's
	// kernel takes val > max || isnan(val) in tap order (the in-input taps
	// come first here, in that order). Finding the last NaN costs passes
	// over every window (3× the pooling's time), so it runs only when the
	// output may hold a NaN: its sum, one reduction read on the host, is NaN
	// then (or when infinities of both signs meet, which only costs the
	// exact path).
	y, first := windows.Max(2, true)
	if sum, err := y.Sum(nil, false).Item(); err == nil && math.IsNaN(sum) {
		isNaN := windows.Ne(windows)
		lastNaN := isNaN.Flip(2).To(tensor.Float32).Argmax(2, true).RSubScalar(float64(taps - 1))
		y = windows.Gather(2, tensor.Where(isNaN.Any([]int{2}, true), lastNaN, first))
	} else if err != nil {
		return rt.Failed(fmt.Errorf("nn: %s: %w", op, err))
	}
	y = y.Reshape(n, c, outSize[0], outSize[1])
	if unbatched {
		y = y.Squeeze(0)
	}
	sc.Keep(y)
	return y
}

// AvgPoolOptions are torch.nn.functional.avg_pool2d's arguments. Each
// list holds one value for both spatial dimensions or one per dimension;
// Stride nil (or empty) means KernelSize, Padding nil 0.
type AvgPoolOptions struct {
	KernelSize, Stride, Padding []int
	CeilMode                    bool
	// ExcludePad is PyTorch's count_include_pad=False: each window is
	// divided by its taps inside the input rather than by its size (the
	// zero value is PyTorch's default, count_include_pad=True).
	ExcludePad bool
	// DivisorOverride, when not 0, divides every window's sum instead.
	DivisorOverride int
}

// AvgPool2d is torch.nn.functional.avg_pool2d over input [N, C, H, W] or
// unbatched [C, H, W].
//
// With padding counted, a window's divisor is its size clipped to the
// padded input (PyTorch's pool_size: with ceilMode a window hanging past
// the right padding counts only the part inside it); without, the number
// of its taps inside the input. Like MaxPool2d's fallback it gathers the
// taps with one index_select and reduces them, so it runs on every device
// and autograd derives its backward.
func AvgPool2d(x *tensor.Tensor, o AvgPoolOptions) *tensor.Tensor {
	const op = "avg_pool2d"
	if x.Err() != nil {
		return x
	}
	rt := x.Runtime()
	fail := func(format string, args ...any) *tensor.Tensor {
		return rt.Failed(fmt.Errorf("nn: "+op+": "+format, args...))
	}
	kernel, err := perDim(o.KernelSize, 2, 0, "kernel_size")
	if err != nil || len(o.KernelSize) == 0 {
		return fail("kernel_size must either be a single int, or a tuple of two ints, got %v", o.KernelSize)
	}
	stride, err := perDim(o.Stride, 2, 0, "stride")
	if err != nil {
		return fail("stride must either be omitted, a single int, or a tuple of two ints, got %v", o.Stride)
	}
	if len(o.Stride) == 0 {
		copy(stride, kernel)
	}
	pad, err := perDim(o.Padding, 2, 0, "padding")
	if err != nil {
		return fail("padding must either be a single int, or a tuple of two ints, got %v", o.Padding)
	}
	n, c, in, outSize, unbatched, bad := poolWindows(op, x, kernel, stride, pad, []int{1, 1}, o.CeilMode)
	if bad != nil {
		return bad
	}
	var taps [2][][]int
	var divisors [2][]float64
	for d := range 2 {
		taps[d] = make([][]int, kernel[d])
		for t := range kernel[d] {
			taps[d][t] = make([]int, outSize[d])
		}
		divisors[d] = make([]float64, outSize[d])
		for i := range outSize[d] {
			start := i*stride[d] - pad[d]
			end := min(start+kernel[d], in[d]+pad[d])
			size := end - start // PyTorch's pool_size, before clipping to the input
			inside := min(end, in[d]) - max(start, 0)
			for t := range kernel[d] {
				p := start + t
				if p < 0 || p >= in[d] {
					p = -1
				}
				taps[d][t][i] = p
			}
			if o.ExcludePad {
				divisors[d][i] = float64(inside)
			} else {
				divisors[d][i] = float64(size)
			}
		}
	}
	div := outer(divisors)
	if o.DivisorOverride != 0 {
		for i := range div {
			div[i] = float64(o.DivisorOverride)
		}
	}
	return windowMean(x, n, c, in, taps, div, unbatched)
}

// AdaptiveAvgPool2d is torch.nn.functional.adaptive_avg_pool2d over input
// [N, C, H, W] or unbatched [C, H, W]: output row i averages input rows
// floor(i·H/oh) up to ceil((i+1)·H/oh), likewise for columns. outputSize
// holds one value for both dimensions or one per dimension; a value of −1
// (PyTorch's None) keeps the input's size.
func AdaptiveAvgPool2d(x *tensor.Tensor, outputSize []int) *tensor.Tensor {
	const op = "adaptive_avg_pool2d"
	if x.Err() != nil {
		return x
	}
	rt := x.Runtime()
	fail := func(format string, args ...any) *tensor.Tensor {
		return rt.Failed(fmt.Errorf("nn: "+op+": "+format, args...))
	}
	size, err := perDim(outputSize, 2, 0, "output_size")
	if err != nil || len(outputSize) == 0 {
		return fail("output_size must be 2, got %v", outputSize)
	}
	n, c, in, unbatched, bad := poolInput(x, op)
	if bad != nil {
		return bad
	}
	for d := range 2 {
		if size[d] == -1 {
			size[d] = in[d]
		}
		if size[d] <= 0 {
			// PyTorch returns an empty tensor for 0; none of the
			// composed ops here takes an empty window list.
			return fail("output_size must be positive (or null for the input's size), got %v", outputSize)
		}
	}
	if size[0] == 1 && size[1] == 1 {
		// PyTorch's own shortcut, and one reduction instead of a gather.
		sc := rt.OpenScope()
		defer sc.Close()
		y := x.Mean([]int{-2, -1}, true)
		sc.Keep(y)
		return y
	}
	var taps [2][][]int
	var divisors [2][]float64
	for d := range 2 {
		starts, ends := make([]int, size[d]), make([]int, size[d])
		widest := 0
		for i := range size[d] {
			starts[i] = i * in[d] / size[d]
			ends[i] = ((i+1)*in[d] + size[d] - 1) / size[d]
			widest = max(widest, ends[i]-starts[i])
		}
		taps[d] = make([][]int, widest)
		for t := range widest {
			taps[d][t] = make([]int, size[d])
			for i := range size[d] {
				p := starts[i] + t
				if p >= ends[i] {
					p = -1 // a narrower window: the tap reads the appended zero
				}
				taps[d][t][i] = p
			}
		}
		divisors[d] = make([]float64, size[d])
		for i := range size[d] {
			divisors[d][i] = float64(ends[i] - starts[i])
		}
	}
	return windowMean(x, n, c, in, taps, outer(divisors), unbatched)
}

// poolWindows checks a 2-d pooling's windows as PyTorch's pooling does
// (positive kernel, stride and dilation; padding at most half the
// kernel) and its input (poolInput), and returns the input's extents and
// the output's [OH, OW].
func poolWindows(op string, x *tensor.Tensor, kernel, stride, pad, dilation []int, ceilMode bool) (n, c int, in, outSize []int, unbatched bool, bad *tensor.Tensor) {
	fail := func(format string, args ...any) *tensor.Tensor {
		return x.Runtime().Failed(fmt.Errorf("nn: "+op+": "+format, args...))
	}
	switch {
	case kernel[0] <= 0 || kernel[1] <= 0:
		bad = fail("kernel size should be greater than zero, but got kH: %d kW: %d", kernel[0], kernel[1])
	case stride[0] <= 0 || stride[1] <= 0:
		bad = fail("stride should be greater than zero, but got dH: %d dW: %d", stride[0], stride[1])
	case dilation[0] <= 0 || dilation[1] <= 0:
		bad = fail("dilation should be greater than zero, but got dilationH: %d dilationW: %d", dilation[0], dilation[1])
	case pad[0] < 0 || pad[1] < 0:
		bad = fail("pad must be non-negative, but got padH: %d padW: %d", pad[0], pad[1])
	case pad[0] > kernel[0]/2 || pad[1] > kernel[1]/2:
		bad = fail("pad should be smaller than or equal to half of kernel size, but got padW = %d, padH = %d, kW = %d, kH = %d", pad[1], pad[0], kernel[1], kernel[0])
	}
	if bad != nil {
		return 0, 0, nil, nil, false, bad
	}
	if n, c, in, unbatched, bad = poolInput(x, op); bad != nil {
		return 0, 0, nil, nil, false, bad
	}
	outSize = make([]int, 2)
	for i := range 2 {
		outSize[i] = PoolOutputSize(in[i], kernel[i], pad[i], stride[i], dilation[i], ceilMode)
	}
	if outSize[0] < 1 || outSize[1] < 1 {
		return 0, 0, nil, nil, false, fail("given input size: (%dx%dx%d). Calculated output size: (%dx%dx%d). Output size is too small", c, in[0], in[1], c, outSize[0], outSize[1])
	}
	return n, c, in, outSize, unbatched, nil
}

// poolInput checks a 2-D pooling's input, [N, C, H, W] or [C, H, W], and
// returns its batch, channels and spatial size.
func poolInput(x *tensor.Tensor, op string) (n, c int, in []int, unbatched bool, bad *tensor.Tensor) {
	fail := func(format string, args ...any) *tensor.Tensor {
		return x.Runtime().Failed(fmt.Errorf("nn: "+op+": "+format, args...))
	}
	xs := x.Shape()
	if len(xs) != 3 && len(xs) != 4 {
		return 0, 0, nil, false, fail("expected 3D or 4D (batch mode) tensor for input, but got input of size %v", xs)
	}
	if !x.DType().IsFloat() {
		return 0, 0, nil, false, fail("expected a floating-point input, got %v", x.DType())
	}
	unbatched = len(xs) == 3
	if unbatched {
		xs = append([]int{1}, xs...)
	}
	for _, d := range xs[1:] {
		if d == 0 {
			return 0, 0, nil, false, fail("expected input with non-zero sizes for the non-batch dimensions, but got input of size %v", x.Shape())
		}
	}
	return xs[0], xs[1], xs[2:], unbatched, nil
}

// outer is the divisor of each output position (row-major) from the
// per-dimension factors: every divisor used here is a product of one
// length per dimension.
func outer(f [2][]float64) []float64 {
	out := make([]float64, 0, len(f[0])*len(f[1]))
	for _, a := range f[0] {
		for _, b := range f[1] {
			out = append(out, a*b)
		}
	}
	return out
}

// windowMean sums, for each output position, the input elements its taps
// read and divides by the position's divisor. taps[d][t][i] is the input
// coordinate along spatial dimension d that tap t of output i reads, or −1
// where it reads zero (padding, or past a narrower window's end). The
// taps are gathered with one index_select from each row with a zero
// appended, so autograd's scatter-add is the backward.
func windowMean(x *tensor.Tensor, n, c int, in []int, taps [2][][]int, divisors []float64, unbatched bool) *tensor.Tensor {
	rt := x.Runtime()
	kh, kw := len(taps[0]), len(taps[1])
	oh, ow := len(taps[0][0]), len(taps[1][0])
	spatial, positions := in[0]*in[1], oh*ow
	idx := make([]int64, 0, kh*kw*positions)
	for th := range kh {
		for tw := range kw {
			for i := range oh {
				for j := range ow {
					ph, pw := taps[0][th][i], taps[1][tw][j]
					if ph < 0 || pw < 0 {
						idx = append(idx, int64(spatial))
					} else {
						idx = append(idx, int64(ph*in[1]+pw))
					}
				}
			}
		}
	}
	sc := rt.OpenScope()
	defer sc.Close()
	rows := tensor.Cat([]*tensor.Tensor{x.Reshape(n*c, spatial), rt.Zeros(x.DType(), n*c, 1)}, 1)
	sums := rows.IndexSelect(1, rt.FromInt64s(idx, len(idx))).Reshape(n*c, kh*kw, positions).Sum([]int{1}, false)
	y := sums.Div(rt.FromFloat64s(divisors, positions).To(x.DType())).Reshape(n, c, oh, ow)
	if unbatched {
		y = y.Squeeze(0)
	}
	sc.Keep(y)
	return y
}

// Dropout2d is torch.nn.functional.dropout2d (PyTorch 1.13's
// feature_dropout): when training, each channel of each sample — input
// [N, C, ...], at least 2 dimensions — is zeroed with probability p as a
// whole, the kept ones scaled by 1/(1−p). A 3-D input is (N, C, L), as
// PyTorch 1.13 reads it, not an unbatched (C, H, W).
//
// The mask [N, C, 1, ...] is Dropout's over ones, drawn from x's runtime's
// generator as PyTorch's bernoulli_ draws it, so the channels kept match
// PyTorch's from the same seed.
func Dropout2d(x *tensor.Tensor, p float64, training bool) *tensor.Tensor {
	if x.Err() != nil {
		return x
	}
	rt := x.Runtime()
	if p < 0 || p > 1 {
		return rt.Failed(fmt.Errorf("nn: dropout2d: dropout probability has to be between 0 and 1, but got %v", p))
	}
	if !training || p == 0 || x.Numel() == 0 {
		return tensor.Dropout(x, p, false, rt.Generator())
	}
	xs := x.Shape()
	if len(xs) < 2 {
		return rt.Failed(fmt.Errorf("nn: dropout2d: Feature dropout requires at least 2 dimensions in the input, got input of size %v", xs))
	}
	if !x.DType().IsFloat() {
		return rt.Failed(fmt.Errorf("nn: dropout2d: not implemented for %v", x.DType()))
	}
	noise := make([]int, len(xs))
	for i := range noise {
		noise[i] = 1
	}
	noise[0], noise[1] = xs[0], xs[1]
	sc := rt.OpenScope()
	defer sc.Close()
	var mask *tensor.Tensor
	if p == 1 {
		// PyTorch multiplies by zero without drawing (NaN and ±Inf
		// inputs become NaN); the float64 mask would be 0/0 here.
		mask = rt.Zeros(x.DType(), noise...)
	} else {
		mask = tensor.Dropout(rt.Ones(x.DType(), noise...), p, true, rt.Generator())
	}
	y := x.Mul(mask)
	sc.Keep(y)
	return y
}
