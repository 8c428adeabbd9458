package gpu

import (
	"fmt"
	"slices"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/kernels"
)

// The ops along one axis (gpu/kernels/sortscan.cu): Scan and Sort, with
// engine/cpu/sortscan.go's semantics.

const famSortScan = "sortscan"

const (
	// sortTile is ZE_SORT_TILE: the elements of the sorting network that
	// sort_tile holds in shared memory (the test checks the source).
	sortTile = 2048
	// scanBlockFrom is the row length from which a block scans each row
	// (a thread scans shorter rows, in the CPU's order).
	scanBlockFrom = 512
)

func init() {
	withI64 := append(slices.Clone(floatSuffixes), "i64")
	keys := []string{"f32", "f64", "i64"}
	kernelsUsed[famSortScan] = slices.Concat(
		kernelNames("scan_", withI64...), kernelNames("sort_init_", withI64...),
		kernelNames("sort_tile_", keys...), kernelNames("sort_step_", keys...),
		kernelNames("sort_write_", "s2", "s4", "s8"))
}

// rowLayout walks the rows of views along axis: their shape and strides
// with the axis taken out (one row when axis is their only dimension).
func rowLayout(axis int, views ...device.View) (kernels.Layout, error) {
	shape := slices.Delete(slices.Clone(views[0].Shape), axis, axis+1)
	var st [kernels.MaxOps][]int
	for i, v := range views {
		st[i] = slices.Delete(slices.Clone(v.Strides), axis, axis+1)
	}
	return kernels.NewLayout(shape, st[:len(views)]...)
}

// checkAxisOp validates the operands of an op along axis as the CPU does:
// equal shapes, an axis inside them.
func (d *Device) checkAxisOp(op string, axis int, views ...device.View) error {
	nd := len(views[0].Shape)
	if axis < 0 || axis >= nd {
		return fmt.Errorf("%v: %s along axis %d of a %d-dimensional view", d, op, axis, nd)
	}
	for _, v := range views[1:] {
		if !slices.Equal(v.Shape, views[0].Shape) {
			return fmt.Errorf("%v: %s of shape %v into shape %v", d, op, views[len(views)-1].Shape, v.Shape)
		}
	}
	return nil
}

// Scan implements device.Device. Rows shorter than scanBlockFrom are
// scanned a thread each, in order, which gives the CPU's bits; longer ones
// a block each, in tiles, which differs from the CPU only by the rounding
// of double (or, for int64, no) accumulators.
func (d *Device) Scan(op device.ScanOp, dst, src device.View, axis int, reverse bool) error {
	if op != device.CumSum && op != device.CumProd {
		return fmt.Errorf("%v: scan op %v", d, op)
	}
	if dst.DType != src.DType {
		return fmt.Errorf("%v: %v of %v into %v", d, op, src.DType, dst.DType)
	}
	if err := d.checkAxisOp(op.String(), axis, dst, src); err != nil {
		return err
	}
	if dst.Numel() == 0 {
		return nil
	}
	sfx := reduceSuffix(src.DType)
	if sfx == "" {
		return fmt.Errorf("%v: %v of %v", d, op, src.DType)
	}
	l, err := rowLayout(axis, dst, src)
	if err != nil {
		return err
	}
	n := src.Shape[axis]
	group := 1
	grid := d.gridFor(l.Numel)
	if n >= scanBlockFrom {
		group = blockSize
		grid = dim1(d.capBlocks(l.Numel, blockSize))
	}
	c := d.call(famSortScan, kname("scan_", sfx))
	c.layout(&l)
	c.ptr(d.ptr(dst))
	c.ptr(d.ptr(src))
	c.i64(int64(n))
	c.i64(int64(dst.Strides[axis]))
	c.i64(int64(src.Strides[axis]))
	c.i32(int32(op))
	c.flag(reverse)
	c.i32(int32(group))
	return c.launch(grid, dim1(blockSize), 0)
}

// Sort implements device.Device with a bitonic network over every row
// padded to a power of two (see sortscan.cu), in scratch memory of 12 or
// 16 bytes an element of the padded rows. values must not overlap src.
func (d *Device) Sort(values, indices, src device.View, axis int, descending bool) error {
	if indices.DType != dtype.Int64 {
		return fmt.Errorf("%v: sort indices must be int64, not %v", d, indices.DType)
	}
	if values.DType != src.DType {
		return fmt.Errorf("%v: sort of %v into %v", d, src.DType, values.DType)
	}
	if err := d.checkAxisOp("sort", axis, values, indices, src); err != nil {
		return err
	}
	if values.Numel() == 0 {
		return nil
	}
	sfx := reduceSuffix(src.DType)
	if sfx == "" {
		return fmt.Errorf("%v: sort of %v", d, src.DType)
	}
	keySfx, keyBytes := "f32", 4 // float32 and the 16-bit floats compare as float
	switch src.DType {
	case dtype.Float64, dtype.Int64:
		keySfx, keyBytes = sfx, 8
	}
	rows, err := rowLayout(axis, src)
	if err != nil {
		return err
	}
	n := int64(src.Shape[axis])
	p2 := int64(1)
	for p2 < n {
		p2 <<= 1
	}
	total := rows.Numel * p2
	keys, releaseKeys, err := d.temp(int(total) * keyBytes)
	if err != nil {
		return err
	}
	defer releaseKeys()
	idx, releaseIdx, err := d.temp(int(total) * 8)
	if err != nil {
		return err
	}
	defer releaseIdx()

	c := d.call(famSortScan, kname("sort_init_", sfx))
	c.layout(&rows)
	c.ptr(d.ptr(src))
	c.i64(n)
	c.i64(int64(src.Strides[axis]))
	c.i64(p2)
	c.ptr(keys)
	c.ptr(idx)
	if err := c.launch(d.gridFor(total), dim1(blockSize), 0); err != nil {
		return err
	}
	network := func(name string, grid cuda.Dim3, args ...int64) error {
		c := d.call(famSortScan, kname(name, keySfx))
		c.ptr(keys)
		c.ptr(idx)
		c.i64(total)
		c.i64(n)
		c.i64(p2)
		for _, a := range args {
			c.i64(a)
		}
		c.flag(descending)
		return c.launch(grid, dim1(blockSize), 0)
	}
	tiles := dim1(d.capBlocks((total+sortTile-1)/sortTile, blockSize))
	if p2 > 1 {
		if err := network("sort_tile_", tiles, 2, min(p2, sortTile)); err != nil {
			return err
		}
	}
	for k := int64(2 * sortTile); k <= p2; k <<= 1 {
		for j := k / 2; j >= sortTile; j >>= 1 {
			if err := network("sort_step_", d.gridFor(total/2), k, j); err != nil {
				return err
			}
		}
		if err := network("sort_tile_", tiles, k, k); err != nil {
			return err
		}
	}

	wl, err := rowLayout(axis, values, indices, src)
	if err != nil {
		return err
	}
	w := d.call(famSortScan, kname("sort_write_", sizeSuffix(src.DType)))
	w.layout(&wl)
	w.ptr(d.ptr(values))
	w.ptr(d.ptr(indices))
	w.ptr(d.ptr(src))
	w.i64(n)
	w.i64(int64(values.Strides[axis]))
	w.i64(int64(indices.Strides[axis]))
	w.i64(int64(src.Strides[axis]))
	w.i64(p2)
	w.ptr(idx)
	return w.launch(d.gridFor(rows.Numel*n), dim1(blockSize), 0)
}
