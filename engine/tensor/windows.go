package tensor

import (
	"github.com/zeroeng/zeroeng/engine/device"
)

// WindowGeom is the geometry of 2-d windows over an input [N, C, H, W]
// (device.WindowGeom): what Unfold2d and MaxPool2d compute over.
type WindowGeom = device.WindowGeom

// HasWindowKernels reports whether rt's device has its own kernels for
// Unfold2d and MaxPool2d (device.Unfolder, device.MaxPooler) for tensors
// of dt (the kernels take float32 and float64). The layers that use them
// compose other ops where it has not.
func (rt *Runtime) HasWindowKernels(dt DType) bool {
	_, unfold := rt.dev.(device.Unfolder)
	_, pool := rt.dev.(device.MaxPooler)
	return unfold && pool && (dt == Float32 || dt == Float64)
}

// Unfold2d is torch.nn.functional.unfold over x [N, C, H, W] with the
// windows of g: [N, C·KH·KW, OH·OW], each column a window's taps
// (zero in the padding), as a convolution's im2col. Its gradient folds
// the columns back (the sum over the windows that read each element).
// The device must have the kernels (HasWindowKernels).
func Unfold2d(x *Tensor, g WindowGeom) *Tensor {
	const op = "unfold"
	rt, bad := check(op, x)
	if bad != nil {
		return bad
	}
	u, ok := rt.dev.(device.Unfolder)
	if !ok {
		return rt.fail(op, "device %v has no unfold kernel", rt.dev)
	}
	xc, release, bad := windowInput(op, x, g)
	if bad != nil {
		return bad
	}
	defer release()
	out, err := rt.empty(x.dt, []int{g.N, g.C * g.KH * g.KW, g.OH * g.OW})
	if err != nil {
		return rt.failErr(op, err)
	}
	if err := kernel(func() error { return u.Unfold(out.view(), xc.view(), g) }); err != nil {
		out.Release()
		return rt.failErr(op, err)
	}
	if n := out.record("Im2ColBackward", x); n != nil {
		in := x.shape
		n.backward = func(gr *Tensor) []*Tensor {
			rt := gr.rt
			gc, release := dense(gr)
			defer release()
			dx, err := rt.empty(gr.dt, in)
			if err != nil {
				return []*Tensor{rt.failErr("fold", err)}
			}
			if err := kernel(func() error { return u.Fold(dx.view(), gc.view(), g) }); err != nil {
				dx.Release()
				return []*Tensor{rt.failErr("fold", err)}
			}
			return []*Tensor{dx}
		}
	}
	return out
}

// MaxPool2d is torch.nn.functional.max_pool2d over x [N, C, H, W] with
// the windows of g: each window's maximum [N, C, OH, OW]. When the result
// is recorded for autograd the device also finds each maximum's flat
// position h·W + w in its image, where the gradient goes; otherwise (no
// gradient: evaluation) the maxima alone. The device must have the kernel
// (HasWindowKernels).
func MaxPool2d(x *Tensor, g WindowGeom) *Tensor {
	const op = "max_pool2d"
	rt, bad := check(op, x)
	if bad != nil {
		return bad
	}
	mp, ok := rt.dev.(device.MaxPooler)
	if !ok {
		return rt.fail(op, "device %v has no max pooling kernel", rt.dev)
	}
	xc, release, bad := windowInput(op, x, g)
	if bad != nil {
		return bad
	}
	defer release()
	shape := []int{g.N, g.C, g.OH, g.OW}
	values, err := rt.empty(x.dt, shape)
	if err != nil {
		return rt.failErr(op, err)
	}
	var indices *Tensor
	var iv device.View
	if rt.noGrad == 0 && x.requiresGrad {
		if indices, err = rt.empty(Int64, shape); err != nil {
			values.Release()
			return rt.failErr(op, err)
		}
		defer indices.Release()
		iv = indices.view()
	}
	if err := kernel(func() error { return mp.MaxPool2d(values.view(), iv, xc.view(), g) }); err != nil {
		values.Release()
		return rt.failErr(op, err)
	}
	if n := values.record("MaxPool2DWithIndicesBackward", x); n != nil {
		saved := n.save(indices)
		in := x.shape
		n.backward = func(gr *Tensor) []*Tensor {
			rt := gr.rt
			gc, release := dense(gr)
			defer release()
			dx, err := rt.empty(gr.dt, in)
			if err != nil {
				return []*Tensor{rt.failErr(op, err)}
			}
			if err := kernel(func() error { return mp.MaxPool2dBackward(dx.view(), gc.view(), saved.view(), g) }); err != nil {
				dx.Release()
				return []*Tensor{rt.failErr(op, err)}
			}
			return []*Tensor{dx}
		}
	}
	return values
}

// windowInput checks that x is the [N, C, H, W] input g's windows are
// over and that g can run, and returns x contiguous (dense) with its
// release, or a tensor carrying why not.
func windowInput(op string, x *Tensor, g WindowGeom) (xc *Tensor, release func(), bad *Tensor) {
	rt := x.rt
	if len(x.shape) != 4 || x.shape[0] != g.N || x.shape[1] != g.C || x.shape[2] != g.H || x.shape[3] != g.W {
		return nil, nil, rt.fail(op, "input of shape %v for windows over [%d, %d, %d, %d]", x.shape, g.N, g.C, g.H, g.W)
	}
	if err := g.Check(); err != nil {
		return nil, nil, rt.failErr(op, err)
	}
	xc, release = dense(x)
	return xc, release, nil
}

// HasConvKernel reports whether rt's device has its own kernels for a
// 2-d convolution (device.Convolver) for tensors of dt (float32 and
// float64). nn's convolutions compose Unfold2d and a matmul, or other
// ops, where it has not.
func (rt *Runtime) HasConvKernel(dt DType) bool {
	_, ok := rt.dev.(device.Convolver)
	return ok && (dt == Float32 || dt == Float64)
}

// Conv2d is torch.nn.functional.conv2d with groups 1 over x [N, C, H, W]
// with the windows of g, weight [O, C, KH, KW] and bias [O] (nil for
// none): [N, O, OH, OW], computed by the device's kernels
// (HasConvKernel). It records one node, ConvolutionBackward0, as
// PyTorch does, whose backward is the device's.
func Conv2d(x, weight, bias *Tensor, g WindowGeom) *Tensor {
	const op = "conv2d"
	rt, bad := check(op, x, weight)
	if bad != nil {
		return bad
	}
	if bias != nil {
		if _, bad := check(op, bias); bad != nil {
			return bad
		}
	}
	cv, ok := rt.dev.(device.Convolver)
	if !ok {
		return rt.fail(op, "device %v has no convolution kernels", rt.dev)
	}
	ws := weight.shape
	if len(ws) != 4 || ws[1] != g.C || ws[2] != g.KH || ws[3] != g.KW {
		return rt.fail(op, "weight of shape %v for windows of %d×%d over %d channels", ws, g.KH, g.KW, g.C)
	}
	if bias != nil && (len(bias.shape) != 1 || bias.shape[0] != ws[0]) {
		return rt.fail(op, "bias of shape %v for %d output channels", bias.shape, ws[0])
	}
	if weight.dt != x.dt || bias != nil && bias.dt != x.dt {
		return rt.fail(op, "input %v, weight %v: the dtypes must match", x.dt, weight.dt)
	}
	xc, release, bad := windowInput(op, x, g)
	if bad != nil {
		return bad
	}
	defer release()
	wc, releaseW := dense(weight)
	defer releaseW()
	var bv device.View
	if bias != nil {
		bc, releaseB := dense(bias)
		defer releaseB()
		bv = bc.view()
	}
	y, err := rt.empty(x.dt, []int{g.N, ws[0], g.OH, g.OW})
	if err != nil {
		return rt.failErr(op, err)
	}
	if err := kernel(func() error { return cv.Conv2d(y.view(), xc.view(), wc.view(), bv, g) }); err != nil {
		y.Release()
		return rt.failErr(op, err)
	}
	if n := y.record("ConvolutionBackward", x, weight, bias); n != nil {
		sx, sw := n.save(xc), n.save(wc)
		xShape, wShape := x.shape, weight.shape
		hasBias := bias != nil
		n.backward = func(gr *Tensor) []*Tensor {
			rt := gr.rt
			gc, release := dense(gr)
			defer release()
			grads := make([]*Tensor, 3)
			var views [3]device.View
			for i, shape := range [][]int{xShape, wShape, {wShape[0]}} {
				if !n.needs(i) || i == 2 && !hasBias {
					continue
				}
				t, err := rt.empty(gr.dt, shape)
				if err != nil {
					releaseAll(grads)
					return []*Tensor{rt.failErr(op, err)}
				}
				grads[i], views[i] = t, t.view()
			}
			if err := kernel(func() error {
				return cv.Conv2dBackward(views[0], views[1], views[2], gc.view(), sx.view(), sw.view(), g)
			}); err != nil {
				releaseAll(grads)
				return []*Tensor{rt.failErr(op, err)}
			}
			return grads
		}
	}
	return y
}

// releaseAll releases the tensors of ts that are not nil.
func releaseAll(ts []*Tensor) {
	for _, t := range ts {
		if t != nil {
			t.Release()
		}
	}
}
