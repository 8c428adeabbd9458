package gpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/kernels"
)

// reduceSuffix is the kernel suffix of the types Reduce and ArgMax
// support (the CPU's: floats and int64), "" otherwise.
func reduceSuffix(dt dtype.DType) string {
	if isFloat(dt) || dt == dtype.Int64 {
		return typeSuffix(dt)
	}
	return ""
}

// Reduce implements device.Device.
//
// The reduction is described by a kernels.Reduce (kept and reduced
// dimensions, coalesced). Two kernels cover the layouts:
//
//   - reduce_rows, a group of threads per output, when the innermost
//     reduced dimension is contiguous (softmax-like sums over the last
//     axis) or when nothing is contiguous and outputs are few;
//   - reduce_cols, a thread per output, when the innermost kept dimension
//     is contiguous in src (the sum over the rows of [N, C]): neighbouring
//     threads then read neighbouring elements.
//
// Outputs too few to fill the GPU split their reduced elements into chunks
// whose partial results (double, or int64) go to scratch memory, folded in
// chunk order by reduce_finish: the result does not depend on scheduling.
func (d *Device) Reduce(op device.ReduceOp, dst, src device.View) error {
	if len(dst.Shape) != len(src.Shape) {
		return fmt.Errorf("%v: reduce of rank %d into rank %d", d, len(src.Shape), len(dst.Shape))
	}
	if dst.Numel() == 0 {
		return nil
	}
	if op > device.Prod {
		return fmt.Errorf("%v: reduction %v", d, op)
	}
	sfx := reduceSuffix(src.DType)
	if sfx == "" || dst.DType != src.DType {
		return fmt.Errorf("%v: reduction of %v into %v", d, src.DType, dst.DType)
	}
	if src.Numel() == 0 {
		switch op {
		case device.Sum:
			return d.Fill(dst, 0)
		case device.Prod:
			return d.Fill(dst, 1)
		}
		return fmt.Errorf("%v: max/min of an empty tensor", d)
	}
	r, reduced, err := kernels.NewReduce(dst.Shape, dst.Strides, src.Shape, src.Strides)
	if err != nil {
		return err
	}
	if !reduced {
		return d.Copy(dst, src)
	}
	outputs, count := r.Outputs, r.RCount
	threads := int64(max(1, d.dev.SMs) * 2048) // what the GPU holds at once
	innerContig := r.RSrc[0] == 1 || r.RShape[0] == 1
	keptContig := r.KSrc[0] == 1 && r.KShape[0] > 1
	// Short reductions into many outputs run a thread per output whatever
	// the layout: a warp would leave most of its lanes idle.
	cols := !innerContig && (keptContig || outputs >= threads/4) || count < 32 && outputs >= threads/8

	var group, block int
	var splits, chunk int64
	if cols {
		block = blockSize
		// Enough (output, chunk) units for every thread, chunks of at
		// least 64 elements.
		splits = max(1, min((threads+outputs-1)/outputs, count/64))
	} else {
		// A warp per output for short reductions, a block for long ones.
		group, block = 32, blockSize
		if count >= 4096 {
			group = blockSize
		}
		groupsInFlight := threads / int64(group)
		splits = max(1, min((groupsInFlight+outputs-1)/outputs, count/int64(group*16)))
	}
	chunk = (count + splits - 1) / splits
	splits = (count + chunk - 1) / chunk

	var partial cuda.DevicePtr
	release := func() {}
	if splits > 1 {
		// Both accumulator types (double, int64) are 8 bytes.
		if partial, release, err = d.temp(int(outputs * splits * 8)); err != nil {
			return err
		}
	}
	defer release()

	var c *call
	var grid cuda.Dim3
	if cols {
		c = d.call(famReduce, kname("reduce_cols_", sfx))
		grid = dim1(d.blocksFor(outputs*splits, block))
	} else {
		c = d.call(famReduce, kname("reduce_rows_", sfx))
		perBlock := int64(block / group)
		grid = dim1(d.capBlocks((outputs*splits+perBlock-1)/perBlock, block))
	}
	c.reduce(r)
	c.ptr(d.ptr(dst))
	c.ptr(d.ptr(src))
	c.ptr(partial)
	c.i64(splits)
	c.i64(chunk)
	c.i32(int32(op))
	if !cols {
		c.i32(int32(group))
	}
	if err := c.launch(grid, dim1(block), 0); err != nil {
		return err
	}
	if splits == 1 {
		return nil
	}
	// rows wrote partial[o*splits + s], cols partial[s*outputs + o].
	pso, pss := splits, int64(1)
	if cols {
		pso, pss = 1, outputs
	}
	f := d.call(famReduce, kname("reduce_finish_", sfx))
	f.reduce(r)
	f.ptr(d.ptr(dst))
	f.ptr(partial)
	f.i64(splits)
	f.i64(pso)
	f.i64(pss)
	f.i32(int32(op))
	return f.launch(d.gridFor(outputs), dim1(blockSize), 0)
}

// ArgMax implements device.Device: the first index of the maximum along
// axis, NaN counting as the maximum (its first occurrence), as engine/cpu.
// A thread scans each output's axis, or a warp when the axis is long and
// either contiguous (coalesced reads) or the outputs are too few to keep
// the GPU busy one thread each.
func (d *Device) ArgMax(values, indices, src device.View, axis int) error {
	if values.Numel() == 0 {
		return nil
	}
	if src.Shape[axis] == 0 {
		return fmt.Errorf("%v: argmax over an empty dimension", d)
	}
	if indices.DType != dtype.Int64 {
		return fmt.Errorf("%v: argmax indices must be int64, not %v", d, indices.DType)
	}
	sfx := reduceSuffix(src.DType)
	if sfx == "" || values.DType != src.DType {
		return fmt.Errorf("%v: argmax of %v", d, src.DType)
	}
	l, err := layoutOf(values.Shape, values, indices, src)
	if err != nil {
		return err
	}
	n, stride := int64(src.Shape[axis]), int64(src.Strides[axis])
	outputs := l.Numel
	group := int64(1)
	if n >= 64 && (stride == 1 || outputs <= int64(max(1, d.dev.SMs)*64)) {
		group = 32
	}
	c := d.call(famReduce, kname("argmax_", sfx))
	c.layout(&l)
	c.ptr(d.ptr(values))
	c.ptr(d.ptr(indices))
	c.ptr(d.ptr(src))
	c.i64(n)
	c.i64(stride)
	c.i32(int32(group))
	return c.launch(dim1(d.blocksFor(outputs*group, blockSize)), dim1(blockSize), 0)
}

// SumSquares implements device.Device: Σx² in float64. Each block sums its
// share in double (the squares of float32 values are exact there); the
// host adds the blocks' partial sums in order.
func (d *Device) SumSquares(x device.View) (float64, error) {
	if !x.Contiguous() {
		return 0, fmt.Errorf("%v: sum of squares of a non-contiguous view", d)
	}
	n := x.Numel()
	if n == 0 {
		return 0, nil
	}
	if !isFloat(x.DType) {
		// As the CPU: other types are summed as float32 copies.
		buf, err := d.Alloc(dtype.Float32, n)
		if err != nil {
			return 0, err
		}
		defer d.Free(buf)
		tmp := device.View{Buf: buf, DType: dtype.Float32, Shape: x.Shape, Strides: device.ContiguousStrides(x.Shape)}
		if err := d.Copy(tmp, x); err != nil {
			return 0, err
		}
		return d.SumSquares(tmp)
	}
	blocks := min(d.blocksFor(int64(n), blockSize), 1024)
	partial, release, err := d.temp(blocks * 8)
	if err != nil {
		return 0, err
	}
	defer release()
	c := d.call(famReduce, kname("sumsq_", typeSuffix(x.DType)))
	c.ptr(d.ptr(x))
	c.i64(int64(n))
	c.ptr(partial)
	if err := c.launch(dim1(blocks), dim1(blockSize), 0); err != nil {
		return 0, err
	}
	host := make([]byte, blocks*8)
	if err := d.read(host, partial); err != nil {
		return 0, err
	}
	total := 0.0
	for i := range blocks {
		total += math.Float64frombits(binary.LittleEndian.Uint64(host[8*i:]))
	}
	return total, nil
}
