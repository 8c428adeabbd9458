package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/kernels"
)

// The indexing ops (gpu/kernels/index.cu) with engine/cpu/index.go's
// semantics. Every op first queues index_check, which records the first
// index out of range in a flag; the op's kernels do nothing when the flag
// is set, and the op reads the flag back at the end (waiting for the GPU)
// to return the CPU's error. So an error leaves the destination as it was,
// as on the CPU, at the price of a wait per call.
//
// IndexAdd and ScatterAdd add with atomics: float sums may differ from the
// CPU's (which adds in index order) by rounding, and from run to run. The
// 16-bit types accumulate in a float32 copy of dst, rounded back once, as
// the CPU does.

// indexCheck runs index_check over the index view into a fresh flag; the
// caller releases the flag after its kernels.
func (d *Device) indexCheck(index device.View, extent int) (flag cuda.DevicePtr, release func(), err error) {
	if index.DType != dtype.Int64 {
		return 0, nil, fmt.Errorf("%v: index must be int64, not %v", d, index.DType)
	}
	flag, release, err = d.temp(8)
	if err != nil {
		return 0, nil, err
	}
	if err = d.zeroWords(flag, 1); err == nil && index.Numel() > 0 {
		var l kernels.Layout
		if l, err = layoutOf(index.Shape, index); err == nil {
			c := d.call(famIndex, "index_check")
			c.layout(&l)
			c.ptr(d.ptr(index))
			c.i64(int64(extent))
			c.ptr(flag)
			err = c.launch(d.gridFor(l.Numel), dim1(blockSize), 0)
		}
	}
	if err != nil {
		release()
		return 0, nil, err
	}
	return flag, release, nil
}

// indexResult reads the flag back and returns the CPU's error for the
// first index out of range.
func (d *Device) indexResult(op string, flag cuda.DevicePtr, index device.View, axis, extent int) error {
	if index.Numel() == 0 {
		return nil // nothing was checked; nothing to wait for
	}
	bad, err := d.readWord(flag)
	if err != nil || bad == 0 {
		return err
	}
	if ^bad >= uint64(index.Numel()) {
		return fmt.Errorf("%v: %s: the index check reported position %d of %d", d, op, ^bad, index.Numel())
	}
	pos := unravel(int(^bad), index.Shape)
	off := 0
	for i, p := range pos {
		off += p * index.Strides[i]
	}
	v, err := d.readWord(d.ptr(index) + cuda.DevicePtr(int64(off)*8))
	if err != nil {
		return err
	}
	var at string
	if len(pos) == 1 {
		at = strconv.Itoa(pos[0])
	} else {
		parts := make([]string, len(pos))
		for i, p := range pos {
			parts[i] = strconv.Itoa(p)
		}
		at = "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Errorf("%s: index %d at position %s is out of range for dimension %d of size %d", op, int64(v), at, axis, extent)
}

// unravel converts a row-major linear position into a multi-index.
func unravel(i int, shape []int) []int {
	pos := make([]int, len(shape))
	for dd := len(shape) - 1; dd >= 0; dd-- {
		if shape[dd] > 0 {
			pos[dd] = i % shape[dd]
			i /= shape[dd]
		}
	}
	return pos
}

// withStride returns strides with the one at axis replaced.
func withStride(strides []int, axis, stride int) []int {
	s := append([]int(nil), strides...)
	s[axis] = stride
	return s
}

// alongAxis returns rank strides, all 0 but stride at axis.
func alongAxis(rank, axis, stride int) []int {
	s := make([]int, rank)
	s[axis] = stride
	return s
}

func checkIndex1D(op string, index device.View) error {
	if len(index.Shape) != 1 || index.DType != dtype.Int64 {
		return fmt.Errorf("gpu: %s: index must be a 1-D int64 tensor, not %v of shape %v", op, index.DType, index.Shape)
	}
	return nil
}

// gatherKernel queues index_gather: dst[o0] = src[o1 + index[o2]·sa] over the
// walk of shape with the given strides of dst, src (0 along the axis) and
// index.
func (d *Device) gatherKernel(dst, src, index device.View, shape, dstSt, srcSt, idxSt []int, sa int, flag cuda.DevicePtr) error {
	l, err := layoutOf(shape, device.View{Strides: dstSt}, device.View{Strides: srcSt}, device.View{Strides: idxSt})
	if err != nil || l.Numel == 0 {
		return err
	}
	c := d.call(famIndex, kname("index_gather_", sizeSuffix(dst.DType)))
	c.layout(&l)
	c.ptr(d.ptr(dst))
	c.ptr(d.ptr(src))
	c.ptr(d.ptr(index))
	c.i64(int64(sa))
	c.ptr(flag)
	return c.launch(d.gridFor(l.Numel), dim1(blockSize), 0)
}

// IndexSelect implements device.Device: dst[..., i, ...] =
// src[..., index[i], ...] along axis, for every dtype.
func (d *Device) IndexSelect(dst, src, index device.View, axis int) error {
	if err := checkIndex1D("index_select", index); err != nil {
		return err
	}
	if dst.DType != src.DType {
		return fmt.Errorf("%v: index_select of %v into %v", d, src.DType, dst.DType)
	}
	extent := src.Shape[axis]
	flag, release, err := d.indexCheck(index, extent)
	if err != nil {
		return err
	}
	defer release()
	if dst.Numel() > 0 {
		rank := len(dst.Shape)
		err := d.gatherKernel(dst, src, index, dst.Shape, dst.Strides, withStride(src.Strides, axis, 0),
			alongAxis(rank, axis, index.Strides[0]), src.Strides[axis], flag)
		if err != nil {
			return err
		}
	}
	return d.indexResult("index_select", flag, index, axis, extent)
}

// Gather implements device.Device with torch.gather's semantics: dst has
// index's shape, dst[i][j][k] = src[i][index[i][j][k]][k] for axis 1.
func (d *Device) Gather(dst, src, index device.View, axis int) error {
	if dst.DType != src.DType {
		return fmt.Errorf("%v: gather of %v into %v", d, src.DType, dst.DType)
	}
	extent := src.Shape[axis]
	flag, release, err := d.indexCheck(index, extent)
	if err != nil {
		return err
	}
	defer release()
	if dst.Numel() > 0 {
		err := d.gatherKernel(dst, src, index, index.Shape, dst.Strides, withStride(src.Strides, axis, 0),
			index.Strides, src.Strides[axis], flag)
		if err != nil {
			return err
		}
	}
	return d.indexResult("gather", flag, index, axis, extent)
}

// accumulateKernel adds src into dst at the indices: over the walk of shape
// with src's strides, dst's strides (0 along axis) and index's, the kernel
// adds src[o0] into dst[o1 + index[o2]·dst.Strides[axis]]. 16-bit
// destinations go through a float32 copy.
func (d *Device) accumulateKernel(dst, src, index device.View, axis int, shape, srcSt, idxSt []int, flag cuda.DevicePtr) error {
	sfx := typeSuffix(dst.DType)
	half := dst.DType == dtype.BFloat16 || dst.DType == dtype.Float16
	acc := dst // where the kernel adds
	if half {
		buf, err := d.Alloc(dtype.Float32, dst.Numel())
		if err != nil {
			return err
		}
		defer d.Free(buf)
		acc = device.View{Buf: buf, DType: dtype.Float32, Shape: dst.Shape, Strides: device.ContiguousStrides(dst.Shape)}
		if err := d.Copy(acc, dst); err != nil {
			return err
		}
	}
	l, err := layoutOf(shape, device.View{Strides: srcSt}, device.View{Strides: withStride(acc.Strides, axis, 0)},
		device.View{Strides: idxSt})
	if err != nil {
		return err
	}
	if l.Numel > 0 {
		c := d.call(famIndex, kname("index_add_", sfx))
		c.layout(&l)
		c.ptr(d.ptr(acc))
		c.ptr(d.ptr(src))
		c.ptr(d.ptr(index))
		c.i64(int64(acc.Strides[axis]))
		c.ptr(flag)
		if err := c.launch(d.gridFor(l.Numel), dim1(blockSize), 0); err != nil {
			return err
		}
	}
	if half {
		// Unchanged values round-trip exactly, so this leaves dst as it
		// was when the index check failed.
		return d.Copy(dst, acc)
	}
	return nil
}

func accumulates(dt dtype.DType) bool { return isFloat(dt) || dt == dtype.Int64 }

// IndexAdd implements device.Device: dst[..., index[i], ...] +=
// src[..., i, ...] along axis.
func (d *Device) IndexAdd(dst, src, index device.View, axis int) error {
	if err := checkIndex1D("index_add", index); err != nil {
		return err
	}
	if dst.DType != src.DType || !accumulates(dst.DType) {
		return fmt.Errorf("%v: index_add of %v into %v", d, src.DType, dst.DType)
	}
	extent := dst.Shape[axis]
	flag, release, err := d.indexCheck(index, extent)
	if err != nil {
		return err
	}
	defer release()
	if src.Numel() > 0 {
		err := d.accumulateKernel(dst, src, index, axis, src.Shape, src.Strides, alongAxis(len(src.Shape), axis, index.Strides[0]), flag)
		if err != nil {
			return err
		}
	}
	return d.indexResult("index_add", flag, index, axis, extent)
}

// ScatterAdd implements device.Device with Tensor.scatter_add_'s
// semantics: dst[i][index[i][j][k]][k] += src[i][j][k] for axis 1, over
// index's shape.
func (d *Device) ScatterAdd(dst, src, index device.View, axis int) error {
	if dst.DType != src.DType || !accumulates(dst.DType) {
		return fmt.Errorf("%v: scatter_add of %v into %v", d, src.DType, dst.DType)
	}
	extent := dst.Shape[axis]
	flag, release, err := d.indexCheck(index, extent)
	if err != nil {
		return err
	}
	defer release()
	if index.Numel() > 0 {
		if err := d.accumulateKernel(dst, src, index, axis, index.Shape, src.Strides, index.Strides, flag); err != nil {
			return err
		}
	}
	return d.indexResult("scatter_add", flag, index, axis, extent)
}
