package cpu

import (
	"fmt"
	"math"
	"strings"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The row kernels of the nn layers: softmax, log-softmax, layer norm and
// cross entropy, forward and backward. Each works on contiguous rows over the
// last axis: float32 rows go to engine/cpu/vmath, float64 rows to the
// portable loops below (which follow the same PyTorch formulas), and
// bfloat16/float16 operands are widened to float32 around the float32
// kernel, as PyTorch's CPU kernels compute them in float.

// rowGrain is the number of rows of n elements below which a row loop is not
// split further: about grain elements of work per chunk.
func rowGrain(n int) int { return max(1, grain/max(1, n)) }

// rowShape splits a shape into rows over its last axis; a 0-d tensor is one
// row of one element.
func rowShape(shape []int) (rows, n int) {
	if len(shape) == 0 {
		return 1, 1
	}
	n = shape[len(shape)-1]
	if n == 0 {
		return 0, 0
	}
	return numelOf(shape) / n, n
}

func numelOf(shape []int) int {
	p := 1
	for _, e := range shape {
		p *= e
	}
	return p
}

// rowsOf returns the contiguous elements of a view as a slice.
func rowsOf[T any](v device.View) []T {
	return elems[T](v.Buf)[v.Offset : v.Offset+v.Numel()]
}

// present reports whether an optional operand was given.
func present(v device.View) bool { return v.Buf != nil }

// needContiguous returns an error naming the first operand that is not
// contiguous (names lists the operands' names, separated by ", "): the row
// kernels are only sent contiguous rows.
func needContiguous(op string, names string, vs ...device.View) error {
	for i, v := range vs {
		if present(v) && !v.Contiguous() {
			return fmt.Errorf("cpu: %s: %s is not contiguous (shape %v, strides %v)", op, strings.Split(names, ", ")[i], v.Shape, v.Strides)
		}
	}
	return nil
}

// sameDType returns an error unless every present operand has dtype dt.
func sameDType(op string, dt dtype.DType, vs ...device.View) error {
	for _, v := range vs {
		if present(v) && v.DType != dt {
			return fmt.Errorf("cpu: %s of %v with a %v operand", op, dt, v.DType)
		}
	}
	return nil
}

// presentOperands returns the present views among vs, for widened.
func presentOperands(vs ...*device.View) []*device.View {
	out := vs[:0:0]
	for _, v := range vs {
		if present(*v) {
			out = append(out, v)
		}
	}
	return out
}

// Softmax implements device.Device: softmax or log-softmax over the last
// axis, with PyTorch's formulas (aten/src/ATen/native/cpu/SoftMaxKernel.cpp,
// _vec_softmax_lastdim and _vec_log_softmax_lastdim): the row maximum is
// subtracted before exponentiating, softmax multiplies by the reciprocal of
// the sum, log-softmax subtracts the maximum and then the log of the sum.
func (d *Device) Softmax(dst, src device.View, log bool) error {
	rows, n := rowShape(src.Shape)
	if rows == 0 {
		return nil
	}
	if err := needContiguous("softmax", "dst, src", dst, src); err != nil {
		return err
	}
	if err := sameDType("softmax", dst.DType, src); err != nil {
		return err
	}
	if isHalf(dst.DType) {
		return d.widened([]*device.View{&dst}, []*device.View{&src}, func() error { return d.Softmax(dst, src, log) })
	}
	switch dst.DType {
	case dtype.Float32:
		y, x := rowsOf[float32](dst), rowsOf[float32](src)
		row := vmath.SoftmaxRow
		if log {
			row = vmath.LogSoftmaxRow
		}
		parallel.For(rows, rowGrain(4*n), func(r0, r1 int) {
			for r := r0; r < r1; r++ {
				row(y[r*n:(r+1)*n], x[r*n:(r+1)*n])
			}
		})
	case dtype.Float64:
		y, x := rowsOf[float64](dst), rowsOf[float64](src)
		parallel.For(rows, rowGrain(4*n), func(r0, r1 int) {
			for r := r0; r < r1; r++ {
				softmaxRow64(y[r*n:(r+1)*n], x[r*n:(r+1)*n], log)
			}
		})
	default:
		return fmt.Errorf("cpu: softmax of %v", dst.DType)
	}
	return nil
}

// max64 is the largest element of x, or NaN if any is NaN (as torch.max).
func max64(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		if v != v {
			return v
		}
		if v > m {
			m = v
		}
	}
	return m
}

// softmaxRow64 is the float64 softmax (or log-softmax) of one row.
func softmaxRow64(dst, x []float64, log bool) {
	dst = dst[:len(x)]
	m := max64(x)
	if log {
		s := 0.0
		for _, v := range x {
			s += math.Exp(v - m)
		}
		ls := math.Log(s)
		for i, v := range x {
			dst[i] = (v - m) - ls
		}
		return
	}
	s := 0.0
	for i, v := range x {
		e := math.Exp(v - m)
		dst[i] = e
		s += e
	}
	inv := 1 / s
	for i := range dst {
		dst[i] *= inv
	}
}

// SoftmaxBackward implements device.Device from the saved output y:
// softmax dx = y·(dy − Σ dy·y), log-softmax dx = dy − exp(y)·Σ dy
// (SoftMaxKernel.cpp, _vec_host_softmax_backward_lastdim).
func (d *Device) SoftmaxBackward(dx, dy, y device.View, log bool) error {
	rows, n := rowShape(y.Shape)
	if rows == 0 {
		return nil
	}
	if err := needContiguous("softmax backward", "dx, dy, y", dx, dy, y); err != nil {
		return err
	}
	if err := sameDType("softmax backward", dx.DType, dy, y); err != nil {
		return err
	}
	if isHalf(dx.DType) {
		return d.widened([]*device.View{&dx}, []*device.View{&dy, &y}, func() error { return d.SoftmaxBackward(dx, dy, y, log) })
	}
	switch dx.DType {
	case dtype.Float32:
		gx, gy, yy := rowsOf[float32](dx), rowsOf[float32](dy), rowsOf[float32](y)
		row := vmath.SoftmaxBackwardRow
		if log {
			row = vmath.LogSoftmaxBackwardRow
		}
		parallel.For(rows, rowGrain(2*n), func(r0, r1 int) {
			for r := r0; r < r1; r++ {
				row(gx[r*n:(r+1)*n], gy[r*n:(r+1)*n], yy[r*n:(r+1)*n])
			}
		})
	case dtype.Float64:
		gx, gy, yy := rowsOf[float64](dx), rowsOf[float64](dy), rowsOf[float64](y)
		parallel.For(rows, rowGrain(2*n), func(r0, r1 int) {
			for r := r0; r < r1; r++ {
				softmaxBackwardRow64(gx[r*n:(r+1)*n], gy[r*n:(r+1)*n], yy[r*n:(r+1)*n], log)
			}
		})
	default:
		return fmt.Errorf("cpu: softmax backward of %v", dx.DType)
	}
	return nil
}

// softmaxBackwardRow64 is the float64 backward of one row; dx may alias dy.
func softmaxBackwardRow64(dx, dy, y []float64, log bool) {
	dx, dy = dx[:len(y)], dy[:len(y)]
	s := 0.0
	if log {
		for _, g := range dy {
			s += g
		}
		for i, v := range y {
			dx[i] = dy[i] - math.Exp(v)*s
		}
		return
	}
	for i, v := range y {
		s += dy[i] * v
	}
	for i, v := range y {
		dx[i] = v * (dy[i] - s)
	}
}

// LayerNorm implements device.Device with PyTorch's formulas
// (aten/src/ATen/native/cpu/layer_norm_kernel.cpp,
// LayerNormKernelImplInternal): biased variance, rstd = 1/√(max(var, 0) +
// eps), y = (x·rstd − rstd·mean)·w + b with both w and b, (x − mean)·rstd·w
// + b otherwise. mean and rstd get one value per row.
func (d *Device) LayerNorm(dst, mean, rstd, x, w, b device.View, eps float64) error {
	rows, n := rowShape(x.Shape)
	if rows == 0 {
		return nil
	}
	if err := needContiguous("layer_norm", "dst, mean, rstd, x, w, b", dst, mean, rstd, x, w, b); err != nil {
		return err
	}
	if err := sameDType("layer_norm", x.DType, dst, w, b); err != nil {
		return err
	}
	if mean.Numel() != rows || rstd.Numel() != rows {
		return fmt.Errorf("cpu: layer_norm of %d rows with %d means and %d rstds", rows, mean.Numel(), rstd.Numel())
	}
	if isHalf(x.DType) {
		return d.widened([]*device.View{&dst}, presentOperands(&x, &w, &b), func() error { return d.LayerNorm(dst, mean, rstd, x, w, b, eps) })
	}
	if mean.DType != x.DType || rstd.DType != x.DType {
		return fmt.Errorf("cpu: layer_norm of %v with %v mean and %v rstd", x.DType, mean.DType, rstd.DType)
	}
	switch x.DType {
	case dtype.Float32:
		y, xs, mu, rs := rowsOf[float32](dst), rowsOf[float32](x), rowsOf[float32](mean), rowsOf[float32](rstd)
		ws, bs := optRows[float32](w), optRows[float32](b)
		e := float32(eps)
		parallel.For(rows, rowGrain(3*n), func(r0, r1 int) {
			for r := r0; r < r1; r++ {
				mu[r], rs[r] = vmath.LayerNormRow(y[r*n:(r+1)*n], xs[r*n:(r+1)*n], ws, bs, e)
			}
		})
	case dtype.Float64:
		y, xs, mu, rs := rowsOf[float64](dst), rowsOf[float64](x), rowsOf[float64](mean), rowsOf[float64](rstd)
		ws, bs := optRows[float64](w), optRows[float64](b)
		parallel.For(rows, rowGrain(3*n), func(r0, r1 int) {
			for r := r0; r < r1; r++ {
				mu[r], rs[r] = layerNormRow64(y[r*n:(r+1)*n], xs[r*n:(r+1)*n], ws, bs, eps)
			}
		})
	default:
		return fmt.Errorf("cpu: layer_norm of %v", x.DType)
	}
	return nil
}

// optRows is rowsOf for an optional operand: nil when it is absent.
func optRows[T any](v device.View) []T {
	if !present(v) {
		return nil
	}
	return rowsOf[T](v)
}

// layerNormRow64 is vmath.LayerNormRow in float64.
func layerNormRow64(dst, x, w, b []float64, eps float64) (mean, rstd float64) {
	n := len(x)
	dst = dst[:n]
	s := 0.0
	for _, v := range x {
		s += v
	}
	mean = s / float64(n)
	ss := 0.0
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	rstd = 1 / math.Sqrt(max(ss/float64(n), 0)+eps)
	if w != nil && b != nil {
		scale, bias := rstd, -rstd*mean
		w, b = w[:n], b[:n]
		for i, v := range x {
			dst[i] = (v*scale+bias)*w[i] + b[i]
		}
		return mean, rstd
	}
	for i, v := range x {
		y := (v - mean) * rstd
		if w != nil {
			y *= w[i]
		}
		if b != nil {
			y += b[i]
		}
		dst[i] = y
	}
	return mean, rstd
}

// LayerNormBackward implements device.Device with PyTorch's formulas
// (layer_norm_kernel.cpp, LayerNormBackwardKernelImplInternal):
//
//	ds = Σ dy·w·x,  db = Σ dy·w  (per row)
//	b = (db·mean − ds)·rstd³/N,  c = −b·mean − db·rstd/N
//	dx = rstd·dy·w + b·x + c
//	dw = Σ_rows dy·(x − mean)·rstd,  db = Σ_rows dy
//
// Rows are split into chunks fixed by the shape alone; each chunk sums its
// rows' dw and db into its own partial row, and the partial rows are added
// in chunk order at the end, so that the result is the same bits whatever
// the scheduling and the number of threads.
func (d *Device) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w device.View) error {
	rows, n := rowShape(x.Shape)
	if rows == 0 {
		if n == 0 {
			return nil
		}
		// No rows: the parameter gradients are zero.
		for _, g := range []device.View{dw, db} {
			if present(g) {
				if err := d.Fill(g, 0); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := needContiguous("layer_norm backward", "dx, dw, db, dy, x, mean, rstd, w", dx, dw, db, dy, x, mean, rstd, w); err != nil {
		return err
	}
	if err := sameDType("layer_norm backward", x.DType, dx, dw, db, dy, w); err != nil {
		return err
	}
	if mean.Numel() != rows || rstd.Numel() != rows {
		return fmt.Errorf("cpu: layer_norm backward of %d rows with %d means and %d rstds", rows, mean.Numel(), rstd.Numel())
	}
	if isHalf(x.DType) {
		return d.widened(presentOperands(&dx, &dw, &db), presentOperands(&dy, &x, &w), func() error {
			return d.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w)
		})
	}
	if mean.DType != x.DType || rstd.DType != x.DType {
		return fmt.Errorf("cpu: layer_norm backward of %v with %v mean and %v rstd", x.DType, mean.DType, rstd.DType)
	}
	switch x.DType {
	case dtype.Float32:
		return layerNormBackward(d, dx, dw, db, dy, x, mean, rstd, w, vmath.LayerNormBackwardRow)
	case dtype.Float64:
		return layerNormBackward(d, dx, dw, db, dy, x, mean, rstd, w, layerNormBackwardRow64)
	}
	return fmt.Errorf("cpu: layer_norm backward of %v", x.DType)
}

// lnChunkRows is the number of rows of n elements in each chunk of the layer
// norm backward: at least grain elements, and at most 64 chunks so that the
// partial sums stay small. It depends on the shape only.
func lnChunkRows(rows, n int) int {
	return max(rowGrain(n), (rows+63)/64)
}

func layerNormBackward[T float](d *Device, dx, dw, db, dy, x, mean, rstd, w device.View,
	row func(dx, dw, db, dy, x, w []T, mean, rstd T)) error {
	rows, n := rowShape(x.Shape)
	gx, gw, gb := optRows[T](dx), optRows[T](dw), optRows[T](db)
	gy, xs, mu, rs, ws := rowsOf[T](dy), rowsOf[T](x), rowsOf[T](mean), rowsOf[T](rstd), optRows[T](w)
	per := lnChunkRows(rows, n)
	chunks := (rows + per - 1) / per

	// Partial dw and db rows, one pair per chunk.
	var part []T
	if gw != nil || gb != nil {
		var z T
		dt := dtype.Float32
		if _, ok := any(z).(float64); ok {
			dt = dtype.Float64
		}
		buf, err := d.Alloc(dt, 2*chunks*n)
		if err != nil {
			return err
		}
		defer d.Free(buf)
		part = elems[T](buf)[:2*chunks*n]
	}
	parallel.For(chunks, 1, func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			var pw, pb []T
			if gw != nil {
				pw = part[2*c*n : (2*c+1)*n]
				clear(pw)
			}
			if gb != nil {
				pb = part[(2*c+1)*n : (2*c+2)*n]
				clear(pb)
			}
			for r := c * per; r < min((c+1)*per, rows); r++ {
				var rx []T
				if gx != nil {
					rx = gx[r*n : (r+1)*n]
				}
				row(rx, pw, pb, gy[r*n:(r+1)*n], xs[r*n:(r+1)*n], ws, mu[r], rs[r])
			}
		}
	})
	if part == nil {
		return nil
	}
	// dw[j] = Σ_c partial_c[j], in chunk order, accumulated in float64.
	parallel.For(n, grain/max(1, chunks), func(j0, j1 int) {
		for j := j0; j < j1; j++ {
			var sw, sb float64
			for c := 0; c < chunks; c++ {
				if gw != nil {
					sw += float64(part[2*c*n+j])
				}
				if gb != nil {
					sb += float64(part[(2*c+1)*n+j])
				}
			}
			if gw != nil {
				gw[j] = T(sw)
			}
			if gb != nil {
				gb[j] = T(sb)
			}
		}
	})
	return nil
}

// layerNormBackwardRow64 is vmath.LayerNormBackwardRow in float64: it sets
// dx (if not nil) and adds into dw and db (if not nil).
func layerNormBackwardRow64(dx, dw, db, dy, x, w []float64, mean, rstd float64) {
	n := len(x)
	dy = dy[:n]
	if dw != nil {
		dw = dw[:n]
		for i, v := range x {
			dw[i] += dy[i] * (v - mean) * rstd
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
	for i, v := range x {
		g := dy[i]
		if w != nil {
			g *= w[i]
		}
		ds += g * v
		dbs += g
	}
	scale := 1 / float64(n)
	b := (dbs*mean - ds) * rstd * rstd * rstd * scale
	c := -b*mean - dbs*rstd*scale
	dx = dx[:n]
	for i, v := range x {
		g := dy[i]
		if w != nil {
			g *= w[i]
		}
		dx[i] = rstd*g + b*v + c
	}
}

// CrossEntropy implements device.Device: for each row of logits [N, C] and
// its target t, loss = (1−ε)·nll + ε·smooth with nll = −log_softmax(x)[t]
// and smooth = −Σ_c log_softmax(x)[c] / C, which is how PyTorch composes
// cross_entropy from log_softmax and nll_loss with label smoothing ε
// (aten/src/ATen/native/LossNLL.cpp, cross_entropy_loss_label_smoothing).
// Rows whose target is opt.IgnoreIndex get 0 and are not counted; the
// tensor layer divides the sum by the returned count for the mean, which is
// PyTorch's mean for both terms.
func (d *Device) CrossEntropy(loss, logits, target device.View, opt device.CrossEntropyOptions) (int, error) {
	if len(logits.Shape) != 2 || len(target.Shape) != 1 || target.Shape[0] != logits.Shape[0] || loss.Numel() != logits.Shape[0] || len(loss.Shape) != 1 {
		return 0, fmt.Errorf("cpu: cross_entropy of logits %v, target %v into loss %v", logits.Shape, target.Shape, loss.Shape)
	}
	rows, classes := logits.Shape[0], logits.Shape[1]
	count, err := checkTargets(target, classes, opt.IgnoreIndex)
	if err != nil || rows == 0 {
		return count, err
	}
	if err := needContiguous("cross_entropy", "logits", logits); err != nil {
		return 0, err
	}
	if err := sameDType("cross_entropy", logits.DType, loss); err != nil {
		return 0, err
	}
	if isHalf(logits.DType) {
		return count, d.widened([]*device.View{&loss}, []*device.View{&logits}, func() error {
			_, err := d.CrossEntropy(loss, logits, target, opt)
			return err
		})
	}
	tg := elems[int64](target.Buf)
	eps := opt.LabelSmoothing
	ce := ceRows{rows: rows, tgt: tg, to: target.Offset, ts: target.Strides[0], ignore: opt.IgnoreIndex,
		lo: loss.Offset, ls: loss.Strides[0]}
	switch logits.DType {
	case dtype.Float32:
		x, out := rowsOf[float32](logits), elems[float32](loss.Buf)
		// One log-softmax row of scratch per chunk of rows.
		chunks := min(rows, 4*parallel.Threads())
		buf, err := d.Alloc(dtype.Float32, chunks*classes)
		if err != nil {
			return 0, err
		}
		defer d.Free(buf)
		scratch := elems[float32](buf)
		ce.run(chunks, classes, func(c, r int, t int64) {
			lp := scratch[c*classes : (c+1)*classes]
			vmath.LogSoftmaxRow(lp, x[r*classes:(r+1)*classes])
			l := -float64(lp[t])
			if eps != 0 {
				smooth := -float64(vmath.Sum(lp))
				l = (1-eps)*l + eps/float64(classes)*smooth
			}
			out[ce.lo+r*ce.ls] = float32(l)
		}, func(r int) { out[ce.lo+r*ce.ls] = 0 })
	case dtype.Float64:
		x, out := rowsOf[float64](logits), elems[float64](loss.Buf)
		ce.run(min(rows, 4*parallel.Threads()), classes, func(_, r int, t int64) {
			row := x[r*classes : (r+1)*classes]
			m := max64(row)
			s := 0.0
			for _, v := range row {
				s += math.Exp(v - m)
			}
			ls := math.Log(s)
			l := -((row[t] - m) - ls)
			if eps != 0 {
				smooth := 0.0
				for _, v := range row {
					smooth -= (v - m) - ls
				}
				l = (1-eps)*l + eps/float64(classes)*smooth
			}
			out[ce.lo+r*ce.ls] = l
		}, func(r int) { out[ce.lo+r*ce.ls] = 0 })
	default:
		return 0, fmt.Errorf("cpu: cross_entropy of %v", logits.DType)
	}
	return count, nil
}

// ceRows describes the rows of a cross entropy: the targets (a strided int64
// vector) and the strided per-row operand (loss or dloss).
type ceRows struct {
	rows   int
	tgt    []int64
	to, ts int
	ignore int64
	lo, ls int
}

// run calls row(chunk, r, target) for every counted row and ignored(r) for
// the others, over chunks fixed chunks of rows of n classes in parallel;
// chunk numbers a per-chunk scratch.
func (ce *ceRows) run(chunks, n int, row func(chunk, r int, t int64), ignored func(r int)) {
	per := (ce.rows + chunks - 1) / chunks
	parallel.For(chunks, max(1, rowGrain(4*n)/per), func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			for r := c * per; r < min((c+1)*per, ce.rows); r++ {
				t := ce.tgt[ce.to+r*ce.ts]
				if t == ce.ignore {
					ignored(r)
					continue
				}
				row(c, r, t)
			}
		}
	})
}

// checkTargets counts the rows not ignored and returns an error naming the
// first target outside [0, classes) that is not the ignore index.
func checkTargets(target device.View, classes int, ignore int64) (int, error) {
	if target.DType != dtype.Int64 {
		return 0, fmt.Errorf("cpu: cross_entropy: target must be int64, not %v", target.DType)
	}
	tg := elems[int64](target.Buf)
	count := 0
	for r := 0; r < target.Shape[0]; r++ {
		t := tg[target.Offset+r*target.Strides[0]]
		if t == ignore {
			continue
		}
		if t < 0 || t >= int64(classes) {
			return 0, fmt.Errorf("cross_entropy: target %d at row %d is out of range for %d classes", t, r, classes)
		}
		count++
	}
	return count, nil
}

// CrossEntropyBackward implements device.Device: dlogits[i, c] =
// dloss[i]·(softmax(x_i)[c] − (1−ε)·[c = t_i] − ε/C), the gradient of the
// composition in CrossEntropy (nll_loss backward through log_softmax
// backward); ignored rows get 0. dloss is strided (the tensor layer may
// broadcast one value to every row).
func (d *Device) CrossEntropyBackward(dlogits, dloss, logits, target device.View, opt device.CrossEntropyOptions) error {
	if len(logits.Shape) != 2 || len(target.Shape) != 1 || target.Shape[0] != logits.Shape[0] || len(dloss.Shape) != 1 || dloss.Shape[0] != logits.Shape[0] {
		return fmt.Errorf("cpu: cross_entropy backward of logits %v, target %v, dloss %v", logits.Shape, target.Shape, dloss.Shape)
	}
	rows, classes := logits.Shape[0], logits.Shape[1]
	if _, err := checkTargets(target, classes, opt.IgnoreIndex); err != nil || rows == 0 || classes == 0 {
		return err
	}
	if err := needContiguous("cross_entropy backward", "dlogits, logits", dlogits, logits); err != nil {
		return err
	}
	if err := sameDType("cross_entropy backward", logits.DType, dlogits, dloss); err != nil {
		return err
	}
	if isHalf(logits.DType) {
		return d.widened([]*device.View{&dlogits}, []*device.View{&dloss, &logits}, func() error {
			return d.CrossEntropyBackward(dlogits, dloss, logits, target, opt)
		})
	}
	eps := opt.LabelSmoothing
	ce := ceRows{rows: rows, tgt: elems[int64](target.Buf), to: target.Offset, ts: target.Strides[0],
		ignore: opt.IgnoreIndex, lo: dloss.Offset, ls: dloss.Strides[0]}
	chunks := min(rows, 4*parallel.Threads())
	switch logits.DType {
	case dtype.Float32:
		x, dx, g := rowsOf[float32](logits), rowsOf[float32](dlogits), elems[float32](dloss.Buf)
		ce.run(chunks, classes, func(_, r int, t int64) {
			dr := dx[r*classes : (r+1)*classes]
			vmath.SoftmaxRow(dr, x[r*classes:(r+1)*classes])
			gr := g[ce.lo+r*ce.ls]
			vmath.MulScalar(dr, dr, gr)
			if eps != 0 {
				vmath.AddScalar(dr, dr, float32(-float64(gr)*eps/float64(classes)))
			}
			dr[t] -= float32(float64(gr) * (1 - eps))
			vmath.FlushSubnormal(dr) // scaling by dloss makes more of them
		}, func(r int) { clear(dx[r*classes : (r+1)*classes]) })
	case dtype.Float64:
		x, dx, g := rowsOf[float64](logits), rowsOf[float64](dlogits), elems[float64](dloss.Buf)
		ce.run(chunks, classes, func(_, r int, t int64) {
			dr := dx[r*classes : (r+1)*classes]
			softmaxRow64(dr, x[r*classes:(r+1)*classes], false)
			gr := g[ce.lo+r*ce.ls]
			sh := gr * eps / float64(classes)
			for i := range dr {
				dr[i] = dr[i]*gr - sh
			}
			dr[t] -= gr * (1 - eps)
		}, func(r int) { clear(dx[r*classes : (r+1)*classes]) })
	default:
		return fmt.Errorf("cpu: cross_entropy backward of %v", logits.DType)
	}
	return nil
}
