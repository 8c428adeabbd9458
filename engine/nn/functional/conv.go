package functional

import (
	"fmt"
	"strings"

	"github.com/zeroeng/zeroeng/engine/tensor"
)

// ConvOptions are the keyword arguments of torch.nn.functional.conv1d and
// conv2d. Each list has one entry per spatial dimension; a nil list takes
// PyTorch's default (stride 1, padding 0, dilation 1).
type ConvOptions struct {
	Stride, Padding, Dilation []int
	// PaddingString is "same" or "valid", PyTorch's string padding, in
	// place of Padding ("" for numbers). "same" pads d·(k−1) in all,
	// half before and the rest (one more when odd) after, as PyTorch does.
	PaddingString string
	Groups        int // 0 means 1
}

// Conv1d is torch.nn.functional.conv1d: input [N, C, L] or unbatched
// [C, L], weight [O, C/groups, k], bias [O] or nil.
func Conv1d(x, weight, bias *tensor.Tensor, o ConvOptions) *tensor.Tensor {
	return conv("conv1d", 1, x, weight, bias, o)
}

// Conv2d is torch.nn.functional.conv2d: input [N, C, H, W] or unbatched
// [C, H, W], weight [O, C/groups, kH, kW], bias [O] or nil.
func Conv2d(x, weight, bias *tensor.Tensor, o ConvOptions) *tensor.Tensor {
	return conv("conv2d", 2, x, weight, bias, o)
}

// ConvOutputSize is the length of one spatial dimension of a
// convolution's output: ⌊(in + padBefore + padAfter − d·(k−1) − 1) / s⌋ + 1.
func ConvOutputSize(in, padBefore, padAfter, kernel, stride, dilation int) int {
	return floorDiv(in+padBefore+padAfter-dilation*(kernel-1)-1, stride) + 1
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// conv runs a convolution of groups 1 over 1 or 2 spatial dimensions on
// the device's convolution kernels where it has them (tensor.Conv2d);
// otherwise it lowers it to engine ops that exist on every device: the input, flattened per sample and given one
// extra zero element, is gathered into columns [N, C·K, L] (K kernel
// taps, L output positions; taps that fall in the padding read the zero)
// with one index_select whose indices are computed here on the host, and
// the columns meet the weight in one batched matmul per group. Autograd
// derives the backward from those ops (index_select's is a scatter-add),
// so gradients need no code of their own.
func conv(op string, nd int, x, weight, bias *tensor.Tensor, o ConvOptions) *tensor.Tensor {
	if err := firstErr(x, weight, bias); err != nil {
		return failed(x, err)
	}
	rt := x.Runtime()
	fail := func(format string, args ...any) *tensor.Tensor {
		return rt.Failed(fmt.Errorf("nn: "+op+": "+format, args...))
	}
	xs, ws := x.Shape(), weight.Shape()
	if len(xs) != nd+1 && len(xs) != nd+2 {
		return fail("expected %dD (unbatched) or %dD (batched) input to %s, but got input of size: %v", nd+1, nd+2, op, xs)
	}
	if len(ws) != nd+2 {
		return fail("expected a %d-dimensional weight [out_channels, in_channels/groups, kernel...], got weight of size %v", nd+2, ws)
	}
	if !x.DType().IsFloat() {
		return fail("expected a floating-point input, got %v", x.DType())
	}
	if weight.DType() != x.DType() || (bias != nil && bias.DType() != x.DType()) {
		desc := ""
		if bias != nil {
			desc = fmt.Sprintf(", bias %v", bias.DType())
		}
		return fail("input (%v) and weight (%v%s) must have the same dtype", x.DType(), weight.DType(), desc)
	}
	unbatched := len(xs) == nd+1
	if unbatched {
		xs = append([]int{1}, xs...)
	}
	groups := o.Groups
	if groups == 0 {
		groups = 1
	}
	if groups < 0 {
		return fail("non-positive groups is not supported")
	}
	n, c, out := xs[0], xs[1], ws[0]
	in, kernel := xs[2:], ws[2:]
	stride, err := perDim(o.Stride, nd, 1, "stride")
	if err != nil {
		return fail("%v", err)
	}
	dilation, err := perDim(o.Dilation, nd, 1, "dilation")
	if err != nil {
		return fail("%v", err)
	}
	for i := range nd {
		if stride[i] <= 0 {
			return fail("non-positive stride is not supported")
		}
		if dilation[i] <= 0 {
			return fail("dilation should be greater than zero")
		}
	}
	before, after := make([]int, nd), make([]int, nd)
	switch o.PaddingString {
	case "":
		pad, err := perDim(o.Padding, nd, 0, "padding")
		if err != nil {
			return fail("%v", err)
		}
		for i, p := range pad {
			if p < 0 {
				return fail("negative padding is not supported")
			}
			before[i], after[i] = p, p
		}
	case "valid":
	case "same":
		for i := range nd {
			if stride[i] != 1 {
				return fail("padding='same' is not supported for strided convolutions")
			}
			total := dilation[i] * (kernel[i] - 1)
			before[i], after[i] = total/2, total-total/2
		}
	default:
		return fail("invalid padding string: %q (\"same\" or \"valid\")", o.PaddingString)
	}
	if out%groups != 0 {
		return fail("given groups=%d, expected weight to be divisible by %d at dimension 0, but got weight of size %v instead", groups, groups, ws)
	}
	if ws[1]*groups != c {
		return fail("given groups=%d, weight of size %v, expected input%v to have %d channels, but got %d channels instead", groups, ws, xs, ws[1]*groups, c)
	}
	if bias != nil && (bias.Dim() != 1 || bias.Shape()[0] != out) {
		return fail("given weight of size %v, expected bias to be 1-dimensional with %d elements, but got bias of size %v instead", ws, out, bias.Shape())
	}
	outSize := make([]int, nd)
	for i := range nd {
		if in[i]+before[i]+after[i] < dilation[i]*(kernel[i]-1)+1 {
			padded, ks := make([]string, nd), make([]string, nd)
			for j := range nd {
				padded[j] = fmt.Sprint(in[j] + before[j] + after[j])
				ks[j] = fmt.Sprint(dilation[j]*(kernel[j]-1) + 1)
			}
			return fail("calculated padded input size per channel: (%s). Kernel size: (%s). Kernel size can't be greater than actual input size", strings.Join(padded, " x "), strings.Join(ks, " x "))
		}
		outSize[i] = ConvOutputSize(in[i], before[i], after[i], kernel[i], stride[i], dilation[i])
	}

	sc := rt.OpenScope()
	defer sc.Close()
	if g, ok := windowGeom(n, c, in, kernel, outSize, stride, dilation, before); ok && groups == 1 && rt.HasConvKernel(x.DType()) {
		// The device's convolution: im2col and a GEMM per sample, the
		// columns never all in memory at once.
		y := tensor.Conv2d(x.Reshape(n, c, g.H, g.W), weight.Reshape(out, c, g.KH, g.KW), bias, g)
		if nd == 1 {
			y = y.Reshape(n, out, outSize[0])
		}
		if unbatched {
			y = y.Squeeze(0)
		}
		sc.Keep(y)
		return y
	}
	spatial, taps, positions := prod(in), prod(kernel), prod(outSize)
	cg := c / groups
	var cols *tensor.Tensor // [N, C·K, L]
	if g, ok := windowGeom(n, c, in, kernel, outSize, stride, dilation, before); ok && rt.HasWindowKernels(x.DType()) {
		// The device's im2col: the windows' rows copied from the input's.
		cols = tensor.Unfold2d(x.Reshape(n, c, g.H, g.W), g)
	} else {
		idx := rt.FromInt64s(windowIndices(in, kernel, outSize, stride, dilation, before, false), taps*positions)
		// Every (sample, channel) row gets a zero at its end for the taps in
		// the padding.
		rows := tensor.Cat([]*tensor.Tensor{x.Reshape(n*c, spatial), rt.Zeros(x.DType(), n*c, 1)}, 1)
		cols = rows.IndexSelect(1, idx).Reshape(n, c*taps, positions) // [N·C, K·L] as [N, C·K, L]
	}
	var y *tensor.Tensor
	if groups == 1 {
		// One weight for the whole batch: the matmul broadcasts it
		// without a copy.
		y = weight.Reshape(out, c*taps).Matmul(cols)
	} else {
		y = weight.Reshape(groups, out/groups, cg*taps).Matmul(cols.Reshape(n, groups, cg*taps, positions))
	}
	y = y.Reshape(append([]int{n, out}, outSize...)...)
	if bias != nil {
		bshape := make([]int, nd+2)
		for i := range bshape {
			bshape[i] = 1
		}
		bshape[1] = out
		y = y.Add(bias.Reshape(bshape...))
	}
	if unbatched {
		y = y.Squeeze(0)
	}
	sc.Keep(y)
	return y
}

// windowGeom is the geometry of 1-d or 2-d windows (a 1-d input is an
// image of one row), for the devices' window kernels; false for more
// dimensions.
func windowGeom(n, c int, in, kernel, outSize, stride, dilation, before []int) (tensor.WindowGeom, bool) {
	switch len(in) {
	case 1:
		return tensor.WindowGeom{N: n, C: c, H: 1, W: in[0], KH: 1, KW: kernel[0], SH: 1, SW: stride[0],
			DH: 1, DW: dilation[0], PW: before[0], OH: 1, OW: outSize[0]}, true
	case 2:
		return tensor.WindowGeom{N: n, C: c, H: in[0], W: in[1], KH: kernel[0], KW: kernel[1], SH: stride[0], SW: stride[1],
			DH: dilation[0], DW: dilation[1], PH: before[0], PW: before[1], OH: outSize[0], OW: outSize[1]}, true
	}
	return tensor.WindowGeom{}, false
}

// windowIndices lists, for each kernel tap (row-major) and each output
// position (row-major), the flat index of the input element the tap reads
// (row-major over the spatial dimensions in), or prod(in), one past the
// input (the padding element appended to each row), where the tap falls
// outside the input.
//
// With validFirst (max pooling) the layout is output position, then tap,
// and each window lists the taps inside the input first, in row-major
// order, then the padding ones: a window of equal values (or of −∞) then
// picks its first element inside the input, as PyTorch's max pooling
// does, never a padding element.
func windowIndices(in, kernel, outSize, stride, dilation, before []int, validFirst bool) []int64 {
	nd := len(in)
	spatial, taps, positions := prod(in), prod(kernel), prod(outSize)
	// pos[d][t][o]: the input coordinate tap t reads for output o along
	// dimension d, or -1 outside the input.
	pos := make([][][]int, nd)
	for d := range nd {
		pos[d] = make([][]int, kernel[d])
		for t := range kernel[d] {
			pos[d][t] = make([]int, outSize[d])
			for o := range outSize[d] {
				p := o*stride[d] - before[d] + t*dilation[d]
				if p < 0 || p >= in[d] {
					p = -1
				}
				pos[d][t][o] = p
			}
		}
	}
	pad := int64(spatial)
	out := make([]int64, taps*positions)
	tap, at := make([]int, nd), make([]int, nd)
	for t := range taps {
		unravel(t, kernel, tap)
		for o := range positions {
			unravel(o, outSize, at)
			off := int64(0)
			for d := range nd {
				p := pos[d][tap[d]][at[d]]
				if p < 0 {
					off = pad
					break
				}
				off = off*int64(in[d]) + int64(p)
			}
			out[t*positions+o] = off
		}
	}
	if !validFirst {
		return out
	}
	byWindow := make([]int64, 0, taps*positions)
	for o := range positions {
		n := 0
		for t := range taps {
			if off := out[t*positions+o]; off != pad {
				byWindow = append(byWindow, off)
				n++
			}
		}
		for ; n < taps; n++ {
			byWindow = append(byWindow, pad)
		}
	}
	return byWindow
}

// unravel writes the row-major coordinates of flat index i in shape.
func unravel(i int, shape, coords []int) {
	for d := len(shape) - 1; d >= 0; d-- {
		coords[d] = i % shape[d]
		i /= shape[d]
	}
}

func prod(xs []int) int {
	p := 1
	for _, x := range xs {
		p *= x
	}
	return p
}

// perDim expands a per-dimension argument: nil takes def, one value is
// used for every dimension (PyTorch's int for a tuple), else there must be
// one per dimension.
func perDim(v []int, nd, def int, what string) ([]int, error) {
	out := make([]int, nd)
	switch len(v) {
	case 0:
		for i := range out {
			out[i] = def
		}
	case 1:
		for i := range out {
			out[i] = v[0]
		}
	case nd:
		copy(out, v)
	default:
		return nil, fmt.Errorf("%s must be one integer or %d, got %v", what, nd, v)
	}
	return out, nil
}

// firstErr is the error of the first failed tensor (nil ones are absent
// optional arguments).
func firstErr(ts ...*tensor.Tensor) error {
	for _, t := range ts {
		if t != nil && t.Err() != nil {
			return t.Err()
		}
	}
	return nil
}

// failed returns x, or err as a failed tensor of x's runtime when x itself
// is fine (another argument failed).
func failed(x *tensor.Tensor, err error) *tensor.Tensor {
	if x.Err() != nil {
		return x
	}
	return x.Runtime().Failed(err)
}
