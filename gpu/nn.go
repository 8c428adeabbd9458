package gpu

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cuda"
)

// The row kernels of the nn layers (gpu/kernels/nn.cu): softmax,
// log-softmax, layer norm and cross entropy, forward and backward, over
// contiguous rows of the last axis, with engine/cpu/nn.go's semantics.

// rowShape splits a shape into rows over its last axis; a 0-d tensor is one
// row of one element (engine/cpu's rowShape).
func rowShape(shape []int) (rows, n int) {
	if len(shape) == 0 {
		return 1, 1
	}
	n = shape[len(shape)-1]
	if n == 0 {
		return 0, 0
	}
	numel := 1
	for _, e := range shape {
		numel *= e
	}
	return numel / n, n
}

// rowLaunch picks the launch of the call's row kernel: a warp per row for
// rows of up to 1024 elements (several rows per block), else a block per
// row of about n/8 threads (a power of two, 128 to 1024, and at most what
// the kernel's __launch_bounds__ and the device allow), so that each
// thread handles a few elements and the block's reductions stay short.
// The group argument of the kernels is 32 or the block size, the two
// shapes their reductions support.
func (c *call) rowLaunch(rows, n int) (group int, grid, block cuda.Dim3) {
	d := c.d
	g, b := 32, blockSize
	if n > 1024 {
		limit := 1024
		if m := d.dev.MaxThreadsPerBlock; m > 0 {
			limit = min(limit, m)
		}
		if decl, err := c.declaration(); err == nil {
			limit = min(limit, decl.maxThreads)
		} // else the launch fails, naming the kernel
		limit = max(128, 1<<(bits.Len(uint(limit))-1)) // a power of two
		g = min(limit, max(128, 1<<bits.Len(uint((n+7)/8-1))))
		b = g
	}
	perBlock := int64(b / g)
	return g, dim1(d.capBlocks((int64(rows)+perBlock-1)/perBlock, b)), dim1(b)
}

// needContiguous returns an error naming the first present operand that
// is not contiguous (the row kernels read rows as plain arrays).
func (d *Device) needContiguous(op, names string, vs ...device.View) error {
	for i, v := range vs {
		if v.Buf != nil && !v.Contiguous() {
			return fmt.Errorf("%v: %s: %s is not contiguous (shape %v, strides %v)", d, op, strings.Split(names, ", ")[i], v.Shape, v.Strides)
		}
	}
	return nil
}

// sameFloat returns an error unless dt is a float type and every present
// operand has it.
func (d *Device) sameFloat(op string, dt dtype.DType, vs ...device.View) error {
	if !isFloat(dt) {
		return fmt.Errorf("%v: %s of %v", d, op, dt)
	}
	for _, v := range vs {
		if v.Buf != nil && v.DType != dt {
			return fmt.Errorf("%v: %s of %v with a %v operand", d, op, dt, v.DType)
		}
	}
	return nil
}

// statType is the type of LayerNorm's mean and rstd for inputs of dt:
// float32 for the 16-bit types (which compute in float32), dt otherwise.
func statType(dt dtype.DType) dtype.DType {
	if dt == dtype.BFloat16 || dt == dtype.Float16 {
		return dtype.Float32
	}
	return dt
}

// Softmax implements device.Device.
func (d *Device) Softmax(dst, src device.View, log bool) error {
	rows, n := rowShape(src.Shape)
	if rows == 0 {
		return nil
	}
	if err := d.needContiguous("softmax", "dst, src", dst, src); err != nil {
		return err
	}
	if err := d.sameFloat("softmax", dst.DType, src); err != nil {
		return err
	}
	c := d.call(famNN, kname("softmax_", typeSuffix(dst.DType)))
	group, grid, block := c.rowLaunch(rows, n)
	c.ptr(d.ptr(dst))
	c.ptr(d.ptr(src))
	c.i64(int64(rows))
	c.i64(int64(n))
	c.flag(log)
	c.i32(int32(group))
	return c.launch(grid, block, 0)
}

// SoftmaxBackward implements device.Device from the saved output y.
func (d *Device) SoftmaxBackward(dx, dy, y device.View, log bool) error {
	rows, n := rowShape(y.Shape)
	if rows == 0 {
		return nil
	}
	if err := d.needContiguous("softmax backward", "dx, dy, y", dx, dy, y); err != nil {
		return err
	}
	if err := d.sameFloat("softmax backward", dx.DType, dy, y); err != nil {
		return err
	}
	c := d.call(famNN, kname("softmax_bwd_", typeSuffix(dx.DType)))
	group, grid, block := c.rowLaunch(rows, n)
	c.ptr(d.ptr(dx))
	c.ptr(d.ptr(dy))
	c.ptr(d.ptr(y))
	c.i64(int64(rows))
	c.i64(int64(n))
	c.flag(log)
	c.i32(int32(group))
	return c.launch(grid, block, 0)
}

// LayerNorm implements device.Device: mean and rstd per row (float32 for
// the 16-bit types), w and b optional.
func (d *Device) LayerNorm(dst, mean, rstd, x, w, b device.View, eps float64) error {
	rows, n := rowShape(x.Shape)
	if rows == 0 {
		return nil
	}
	if err := d.needContiguous("layer_norm", "dst, mean, rstd, x, w, b", dst, mean, rstd, x, w, b); err != nil {
		return err
	}
	if err := d.sameFloat("layer_norm", x.DType, dst, w, b); err != nil {
		return err
	}
	if st := statType(x.DType); mean.DType != st || rstd.DType != st {
		return fmt.Errorf("%v: layer_norm of %v with %v mean and %v rstd", d, x.DType, mean.DType, rstd.DType)
	}
	if mean.Numel() != rows || rstd.Numel() != rows {
		return fmt.Errorf("%v: layer_norm of %d rows with %d means and %d rstds", d, rows, mean.Numel(), rstd.Numel())
	}
	c := d.call(famNN, kname("layernorm_", typeSuffix(x.DType)))
	group, grid, block := c.rowLaunch(rows, n)
	c.ptr(d.ptr(dst))
	c.ptr(d.ptr(mean))
	c.ptr(d.ptr(rstd))
	c.ptr(d.ptr(x))
	c.ptr(d.optPtr(w))
	c.ptr(d.optPtr(b))
	c.i64(int64(rows))
	c.i64(int64(n))
	c.f64(eps)
	c.i32(int32(group))
	return c.launch(grid, block, 0)
}

// LayerNormBackward implements device.Device. dx is a row kernel; dw and db
// are column sums over the rows, computed in two passes (per-chunk partial
// sums in double, then their sum in chunk order) so that the result does
// not depend on scheduling. Any of dx, dw, db may be absent.
func (d *Device) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w device.View) error {
	rows, n := rowShape(x.Shape)
	if rows == 0 {
		if n == 0 {
			return nil
		}
		// No rows: the parameter gradients are zero.
		for _, g := range []device.View{dw, db} {
			if g.Buf != nil {
				if err := d.Fill(g, 0); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := d.needContiguous("layer_norm backward", "dx, dw, db, dy, x, mean, rstd, w", dx, dw, db, dy, x, mean, rstd, w); err != nil {
		return err
	}
	if err := d.sameFloat("layer_norm backward", x.DType, dx, dw, db, dy, w); err != nil {
		return err
	}
	if st := statType(x.DType); mean.DType != st || rstd.DType != st {
		return fmt.Errorf("%v: layer_norm backward of %v with %v mean and %v rstd", d, x.DType, mean.DType, rstd.DType)
	}
	if mean.Numel() != rows || rstd.Numel() != rows {
		return fmt.Errorf("%v: layer_norm backward of %d rows with %d means and %d rstds", d, rows, mean.Numel(), rstd.Numel())
	}
	sfx := typeSuffix(x.DType)
	if dx.Buf != nil {
		c := d.call(famNN, kname("layernorm_bwd_dx_", sfx))
		group, grid, block := c.rowLaunch(rows, n)
		c.ptr(d.ptr(dx))
		c.ptr(d.ptr(dy))
		c.ptr(d.ptr(x))
		c.ptr(d.ptr(mean))
		c.ptr(d.ptr(rstd))
		c.ptr(d.optPtr(w))
		c.i64(int64(rows))
		c.i64(int64(n))
		c.i32(int32(group))
		if err := c.launch(grid, block, 0); err != nil {
			return err
		}
	}
	if dw.Buf == nil && db.Buf == nil {
		return nil
	}
	// Chunks of rows: enough (column, chunk) threads to fill the GPU, at
	// most 65535 (the grid's y limit).
	colBlocks := (n + blockSize - 1) / blockSize
	threads := max(1, d.dev.SMs) * 2048
	chunks := min(rows, 65535, max(1, threads/(colBlocks*blockSize)))
	chunk := (rows + chunks - 1) / chunks
	chunks = (rows + chunk - 1) / chunk
	scratch, release, err := d.temp(2 * chunks * n * 8)
	if err != nil {
		return err
	}
	defer release()
	var pw, pb cuda.DevicePtr
	if dw.Buf != nil {
		pw = scratch
	}
	if db.Buf != nil {
		pb = scratch + cuda.DevicePtr(chunks*n*8)
	}
	c := d.call(famNN, kname("layernorm_bwd_dwdb_", sfx))
	c.ptr(pw)
	c.ptr(pb)
	c.ptr(d.ptr(dy))
	c.ptr(d.ptr(x))
	c.ptr(d.ptr(mean))
	c.ptr(d.ptr(rstd))
	c.i64(int64(rows))
	c.i64(int64(n))
	c.i64(int64(chunk))
	if err := c.launch(cuda.Dim3{X: uint32(colBlocks), Y: uint32(chunks), Z: 1}, dim1(blockSize), 0); err != nil {
		return err
	}
	f := d.call(famNN, kname("layernorm_bwd_finish_", sfx))
	f.ptr(d.optPtr(dw))
	f.ptr(d.optPtr(db))
	f.ptr(pw)
	f.ptr(pb)
	f.i64(int64(n))
	f.i64(int64(chunks))
	return f.launch(d.gridFor(int64(n)), dim1(blockSize), 0)
}

// zeroWords clears n 8-byte words of scratch memory (the error flags).
func (d *Device) zeroWords(p cuda.DevicePtr, n int) error {
	l, err := layoutOf([]int{n}, device.View{Strides: []int{1}})
	if err != nil {
		return err
	}
	c := d.call(famElementwise, "fill_s8")
	c.layout(&l)
	c.ptr(p)
	c.i64(0)
	return c.launch(d.gridFor(int64(n)), dim1(blockSize), 0)
}

// readWord reads one 8-byte word of device memory (waiting for the
// compute stream).
func (d *Device) readWord(p cuda.DevicePtr) (uint64, error) {
	var b [8]byte
	if err := d.read(b[:], p); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// elemAddr is the address of element i of v along its first axis.
func (d *Device) elemAddr(v device.View, i int) cuda.DevicePtr {
	return d.ptr(v) + cuda.DevicePtr(int64(i)*int64(v.Strides[0])*int64(v.DType.Size()))
}

// crossEntropyCheck queues the validation of the targets into flags (two
// words, see cross_entropy_check in nn.cu).
func (d *Device) crossEntropyCheck(flags cuda.DevicePtr, target device.View, rows, classes int, ignore int64) error {
	if err := d.zeroWords(flags, 2); err != nil {
		return err
	}
	c := d.call(famNN, "cross_entropy_check")
	c.ptr(d.ptr(target))
	c.i64(int64(target.Strides[0]))
	c.i64(int64(rows))
	c.i64(int64(classes))
	c.i64(ignore)
	c.ptr(flags)
	return c.launch(d.gridFor(int64(rows)), dim1(blockSize), 0)
}

// crossEntropyResult waits for the flags and returns the number of rows
// counted, or the CPU's error for the first target out of range.
func (d *Device) crossEntropyResult(flags cuda.DevicePtr, target device.View, classes int) (int, error) {
	var b [16]byte
	if err := d.read(b[:], flags); err != nil {
		return 0, err
	}
	count := binary.LittleEndian.Uint64(b[:8])
	if bad := binary.LittleEndian.Uint64(b[8:]); bad != 0 {
		row := ^bad
		if row >= uint64(target.Shape[0]) || count > uint64(target.Shape[0]) {
			return 0, fmt.Errorf("%v: cross_entropy: the target check reported row %d of %d", d, row, target.Shape[0])
		}
		t, err := d.readWord(d.elemAddr(target, int(row)))
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("cross_entropy: target %d at row %d is out of range for %d classes", int64(t), row, classes)
	}
	return int(count), nil
}

// CrossEntropy implements device.Device. The targets are checked on the
// device before the losses are computed (an error leaves loss untouched);
// the row count and the check's outcome are read back, so the call waits
// for the GPU.
func (d *Device) CrossEntropy(loss, logits, target device.View, opt device.CrossEntropyOptions) (int, error) {
	if len(logits.Shape) != 2 || len(target.Shape) != 1 || target.Shape[0] != logits.Shape[0] || loss.Numel() != logits.Shape[0] || len(loss.Shape) != 1 {
		return 0, fmt.Errorf("%v: cross_entropy of logits %v, target %v into loss %v", d, logits.Shape, target.Shape, loss.Shape)
	}
	if target.DType != dtype.Int64 {
		return 0, fmt.Errorf("%v: cross_entropy: target must be int64, not %v", d, target.DType)
	}
	if logits.Shape[0] == 0 {
		return 0, nil
	}
	if err := d.needContiguous("cross_entropy", "logits", logits); err != nil {
		return 0, err
	}
	if err := d.sameFloat("cross_entropy", logits.DType, loss); err != nil {
		return 0, err
	}
	return d.crossEntropyRun(kname("cross_entropy_", typeSuffix(logits.DType)), loss, loss.Strides[0], logits, target, opt)
}

// crossEntropyRun is the forward's and the backward's common part: the
// targets are checked on the device, kernel runs over the rows with its
// output (the losses, or the logits' gradients with dloss) in front of
// the shared arguments, and the check's outcome is read back.
func (d *Device) crossEntropyRun(kernel string, out device.View, stride int, logits, target device.View, opt device.CrossEntropyOptions, extra ...device.View) (int, error) {
	rows, classes := logits.Shape[0], logits.Shape[1]
	flags, release, err := d.temp(16)
	if err != nil {
		return 0, err
	}
	defer release()
	if err := d.crossEntropyCheck(flags, target, rows, classes, opt.IgnoreIndex); err != nil {
		return 0, err
	}
	// With no classes every target is ignored or the check failed: the
	// kernel then writes nothing.
	c := d.call(famNN, kernel)
	group, grid, block := c.rowLaunch(rows, classes)
	c.ptr(d.ptr(out))
	for _, v := range extra {
		c.ptr(d.ptr(v))
	}
	c.i64(int64(stride))
	c.ptr(d.ptr(logits))
	c.ptr(d.ptr(target))
	c.i64(int64(target.Strides[0]))
	c.i64(int64(rows))
	c.i64(int64(classes))
	c.i64(opt.IgnoreIndex)
	c.f64(opt.LabelSmoothing)
	c.ptr(flags)
	c.i32(int32(group))
	if err := c.launch(grid, block, 0); err != nil {
		return 0, err
	}
	return d.crossEntropyResult(flags, target, classes)
}

// CrossEntropyBackward implements device.Device; dloss is strided (its
// stride may be 0). Like the forward it checks the targets and waits for
// the outcome.
func (d *Device) CrossEntropyBackward(dlogits, dloss, logits, target device.View, opt device.CrossEntropyOptions) error {
	if len(logits.Shape) != 2 || len(target.Shape) != 1 || target.Shape[0] != logits.Shape[0] || len(dloss.Shape) != 1 || dloss.Shape[0] != logits.Shape[0] {
		return fmt.Errorf("%v: cross_entropy backward of logits %v, target %v, dloss %v", d, logits.Shape, target.Shape, dloss.Shape)
	}
	if target.DType != dtype.Int64 {
		return fmt.Errorf("%v: cross_entropy: target must be int64, not %v", d, target.DType)
	}
	if logits.Shape[0] == 0 {
		return nil
	}
	if err := d.needContiguous("cross_entropy backward", "dlogits, logits", dlogits, logits); err != nil {
		return err
	}
	if err := d.sameFloat("cross_entropy backward", logits.DType, dlogits, dloss); err != nil {
		return err
	}
	_, err := d.crossEntropyRun(kname("cross_entropy_bwd_", typeSuffix(logits.DType)), dlogits, dloss.Strides[0], logits, target, opt, dloss)
	return err
}
