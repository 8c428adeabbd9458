package tensor

import (
	"github.com/zeroeng/zeroeng/engine/device"
)

// HasBatchNormKernel reports whether rt's device has fused batch
// normalisation kernels (device.BatchNormer) for tensors of dt (float32
// and float64). nn's batch_norm composes other ops where it has not.
func (rt *Runtime) HasBatchNormKernel(dt DType) bool {
	_, ok := rt.dev.(device.BatchNormer)
	return ok && (dt == Float32 || dt == Float64)
}

// BatchNormArgs are BatchNorm's: the affine parameters and running
// statistics (each may be nil), and torch.nn.functional.batch_norm's
// training, momentum and eps.
type BatchNormArgs struct {
	Weight, Bias            *Tensor
	RunningMean, RunningVar *Tensor
	Training                bool
	Momentum, Eps           float64
}

// BatchNorm is torch.nn.functional.batch_norm over x [N, C, *] with the
// device's fused kernels (HasBatchNormKernel): in training, each
// channel's statistics over the batch (the running ones, when given,
// updated in place with the unbiased variance), otherwise the running
// ones. It records one node, whose backward is the device's.
func BatchNorm(x *Tensor, a BatchNormArgs) *Tensor {
	const op = "batch_norm"
	rt, bad := check(op, x)
	if bad != nil {
		return bad
	}
	bn, ok := rt.dev.(device.BatchNormer)
	if !ok {
		return rt.fail(op, "device %v has no batch norm kernels", rt.dev)
	}
	if len(x.shape) < 2 {
		return rt.fail(op, "expected an input of at least 2 dimensions [N, C, *], got %v", x.shape)
	}
	c := x.shape[1]
	count := x.Numel() / max(c, 1)
	xc, release := dense(x)
	defer release()
	var mean, invstd *Tensor
	var err error
	rt.NoGrad(func() {
		// The statistics are vectors of C: composed of ops, in a scope
		// that keeps only mean and invstd.
		sc := rt.OpenScope()
		defer sc.Close()
		defer func() { sc.Keep(mean, invstd) }()
		if a.Training {
			m64, v64 := rt.Empty(Float64, c), rt.Empty(Float64, c)
			if err = firstError(m64.Err(), v64.Err()); err != nil {
				return
			}
			if err = kernel(func() error { return bn.BatchNormStats(m64.view(), v64.view(), xc.view()) }); err != nil {
				return
			}
			mean = m64.To(x.dt)
			invstd = v64.DivScalar(float64(count)).AddScalar(a.Eps).Rsqrt().To(x.dt)
			if a.RunningMean != nil {
				m := a.Momentum
				newMean := m64.MulScalar(m).Add(a.RunningMean.To(Float64).MulScalar(1 - m))
				newVar := v64.DivScalar(float64(count - 1)).MulScalar(m).Add(a.RunningVar.To(Float64).MulScalar(1 - m))
				if err = a.RunningMean.CopyFrom(newMean); err == nil {
					err = a.RunningVar.CopyFrom(newVar)
				}
			}
		} else {
			mean = a.RunningMean.To(x.dt).Contiguous()
			invstd = a.RunningVar.To(Float64).AddScalar(a.Eps).Rsqrt().To(x.dt).Contiguous()
		}
		if err == nil {
			err = firstError(mean.Err(), invstd.Err())
		}
	})
	if err != nil {
		mean.Release()
		invstd.Release()
		return rt.failErr(op, err)
	}
	defer mean.Release()
	defer invstd.Release()
	var wv, bv device.View
	var wc, bc *Tensor
	if a.Weight != nil {
		wc = a.Weight.Contiguous()
		defer wc.Release()
		wv = wc.view()
	}
	if a.Bias != nil {
		bc = a.Bias.Contiguous()
		defer bc.Release()
		bv = bc.view()
	}
	y, err := rt.empty(x.dt, x.shape)
	if err != nil {
		return rt.failErr(op, err)
	}
	if err := kernel(func() error { return bn.BatchNorm(y.view(), xc.view(), mean.view(), invstd.view(), wv, bv) }); err != nil {
		y.Release()
		return rt.failErr(op, err)
	}
	if n := y.record("NativeBatchNormBackward", x, a.Weight, a.Bias); n != nil {
		sx, sm, si := n.save(xc), n.save(mean), n.save(invstd)
		var sw *Tensor
		if wc != nil {
			sw = n.save(wc)
		}
		training, shape := a.Training, x.shape
		n.backward = func(g *Tensor) []*Tensor {
			rt := g.rt
			gc, release := dense(g)
			defer release()
			var dx, dw, db *Tensor
			var dxv, dwv, dbv, swv device.View
			var err error
			if n.needs(0) {
				if dx, err = rt.empty(g.dt, shape); err != nil {
					return []*Tensor{rt.failErr(op, err)}
				}
				dxv = dx.view()
			}
			if sw != nil && n.needs(1) {
				if dw, err = rt.empty(g.dt, []int{c}); err != nil {
					dx.Release()
					return []*Tensor{rt.failErr(op, err)}
				}
				dwv = dw.view()
			}
			if a.Bias != nil && n.needs(2) {
				if db, err = rt.empty(g.dt, []int{c}); err != nil {
					dx.Release()
					dw.Release()
					return []*Tensor{rt.failErr(op, err)}
				}
				dbv = db.view()
			}
			if sw != nil {
				swv = sw.view()
			}
			if err := kernel(func() error {
				return bn.BatchNormBackward(dxv, dwv, dbv, gc.view(), sx.view(), sm.view(), si.view(), swv, training)
			}); err != nil {
				dx.Release()
				dw.Release()
				db.Release()
				return []*Tensor{rt.failErr(op, err)}
			}
			return []*Tensor{dx, dw, db}
		}
	}
	return y
}
