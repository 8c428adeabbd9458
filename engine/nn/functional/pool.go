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
	if kernel[0] <= 0 || kernel[1] <= 0 {
		return fail("kernel size should be greater than zero, but got kH: %d kW: %d", kernel[0], kernel[1])
	}
	if stride[0] <= 0 || stride[1] <= 0 {
		return fail("stride should be greater than zero, but got dH: %d dW: %d", stride[0], stride[1])
	}
	if dilation[0] <= 0 || dilation[1] <= 0 {
		return fail("dilation should be greater than zero, but got dilationH: %d dilationW: %d", dilation[0], dilation[1])
	}
	if pad[0] < 0 || pad[1] < 0 {
		return fail("pad must be non-negative, but got padH: %d padW: %d", pad[0], pad[1])
	}
	if pad[0] > kernel[0]/2 || pad[1] > kernel[1]/2 {
		return fail("pad should be smaller than or equal to half of kernel size, but got padW = %d, padH = %d, kW = %d, kH = %d", pad[1], pad[0], kernel[1], kernel[0])
	}
	xs := x.Shape()
	if len(xs) != 3 && len(xs) != 4 {
		return fail("expected 3D or 4D (batch mode) tensor for input, but got input of size %v", xs)
	}
	if !x.DType().IsFloat() {
		return fail("expected a floating-point input, got %v", x.DType())
	}
	unbatched := len(xs) == 3
	if unbatched {
		xs = append([]int{1}, xs...)
	}
	for _, d := range xs[1:] {
		if d == 0 {
			return fail("expected input with non-zero sizes for the non-batch dimensions, but got input of size %v", x.Shape())
		}
	}
	n, c, in := xs[0], xs[1], xs[2:]
	outSize := make([]int, 2)
	for i := range 2 {
		outSize[i] = PoolOutputSize(in[i], kernel[i], pad[i], stride[i], dilation[i], o.CeilMode)
	}
	if outSize[0] < 1 || outSize[1] < 1 {
		return fail("given input size: (%dx%dx%d). Calculated output size: (%dx%dx%d). Output size is too small", c, in[0], in[1], c, outSize[0], outSize[1])
	}

	sc := rt.OpenScope()
	defer sc.Close()
	if rt.HasWindowKernels(x.DType()) {
		// The device's kernel, which follows PyTorch's.
		g, _ := windowGeom(n, c, in, kernel, outSize, stride, dilation, pad)
		y, _ := tensor.MaxPool2d(x.Reshape(n, c, in[0], in[1]), g)
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
