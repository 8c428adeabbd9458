package cpu

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/zeroeng/zeroeng/engine/cpu/parallel"
	"github.com/zeroeng/zeroeng/engine/cpu/vmath"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// The kernels of 2-d windows (device.Unfolder, device.MaxPooler): a
// convolution's im2col and its adjoint, and max pooling. Each image plane
// (a sample's channel) is independent, so the planes are split among the
// threads. The composition of IndexSelect and IndexAdd that every device
// runs computed the same with an index per element, read from memory, and
// a copy of the input with a zero appended to each plane; here the
// window's rows are computed, and each output row is a bounds-clipped copy
// (or sum) of an input row when the stride along it is 1.

func checkWindows(op string, g device.WindowGeom, views ...device.View) error {
	if err := g.Check(); err != nil {
		return fmt.Errorf("cpu: %s: %w", op, err)
	}
	for _, v := range views {
		if !v.Contiguous() {
			return fmt.Errorf("cpu: %s: operands must be contiguous", op)
		}
	}
	return nil
}

// Unfold is device.Unfolder's: any dtype, as it only moves elements.
func (d *Device) Unfold(dst, src device.View, g device.WindowGeom) error {
	if err := checkWindows("unfold", g, dst, src); err != nil {
		return err
	}
	k := g.KH * g.KW
	if src.Numel() != g.N*g.C*g.H*g.W || dst.Numel() != g.N*g.C*k*g.OH*g.OW || dst.DType != src.DType {
		return fmt.Errorf("cpu: unfold: %v %v into %v %v for windows %+v", src.DType, src.Shape, dst.DType, dst.Shape, g)
	}
	switch src.DType.Size() {
	case 1:
		unfold(rowsOf[uint8](dst), rowsOf[uint8](src), g)
	case 2:
		unfold(rowsOf[uint16](dst), rowsOf[uint16](src), g)
	case 4:
		unfold(rowsOf[uint32](dst), rowsOf[uint32](src), g)
	case 8:
		unfold(rowsOf[uint64](dst), rowsOf[uint64](src), g)
	default:
		return fmt.Errorf("cpu: unfold of %v", src.DType)
	}
	return nil
}

// rowSpan is the part [lo, hi) of an output row of n windows, o0 the
// input column of its first tap, whose taps fall inside an input row of
// w elements (stride s): the rest read the padding.
func rowSpan(n, o0, s, w int) (lo, hi int) {
	lo, hi = 0, n
	if o0 < 0 {
		lo = (-o0 + s - 1) / s
	}
	if last := o0 + (n-1)*s; last >= w {
		hi = max(0, (w-o0+s-1)/s)
	}
	return min(lo, n), max(min(hi, n), min(lo, n))
}

func unfold[T any](dst, src []T, g device.WindowGeom) {
	plane, cols := g.H*g.W, g.KH*g.KW*g.OH*g.OW
	parallel.For(g.N*g.C, rowGrain(cols), func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			unfoldPlane(dst[p*cols:(p+1)*cols], src[p*plane:(p+1)*plane], g)
		}
	})
}

// unfoldPlane writes the KH·KW rows of OH·OW columns of one image plane
// x into cols.
func unfoldPlane[T any](cols, x []T, g device.WindowGeom) {
	outPlane := g.OH * g.OW
	// With strides of 1 and output rows as long as the input's ("same"
	// padding), a tap's row is one run of the plane shifted by the tap's
	// offset: one copy, then the columns that read the padding zeroed.
	flat := g.SH == 1 && g.SW == 1 && g.OW == g.W
	var zero T
	for i := range g.KH {
		for j := range g.KW {
			row := cols[(i*g.KW+j)*outPlane : (i*g.KW+j+1)*outPlane]
			w0 := j*g.DW - g.PW
			lo, hi := rowSpan(g.OW, w0, g.SW, g.W)
			if flat {
				unfoldShifted(row, x, g, i*g.DH-g.PH, w0, lo, hi)
				continue
			}
			for oh := range g.OH {
				out := row[oh*g.OW : (oh+1)*g.OW]
				ih := oh*g.SH - g.PH + i*g.DH
				if ih < 0 || ih >= g.H {
					clear(out)
					continue
				}
				in := x[ih*g.W : (ih+1)*g.W]
				for ow := range lo {
					out[ow] = zero
				}
				if g.SW == 1 {
					if lo < hi { // else lo+w0 may be outside the row
						copy(out[lo:hi], in[lo+w0:hi+w0])
					}
				} else {
					for ow := lo; ow < hi; ow++ {
						out[ow] = in[ow*g.SW+w0]
					}
				}
				for ow := hi; ow < g.OW; ow++ {
					out[ow] = zero
				}
			}
		}
	}
}

// unfoldShifted writes the row of a tap h0 rows and w0 columns off each
// window's origin when the strides are 1 and OW = W: output position q
// (of row oh = q/OW) reads plane element q + h0·W + w0 where that row
// oh + h0 is in the input and its column in [lo, hi).
func unfoldShifted[T any](row, x []T, g device.WindowGeom, h0, w0, lo, hi int) {
	sp, ok := shiftedSpan(g, h0, w0)
	if !ok {
		clear(row)
		return
	}
	clear(row[:sp.ohLo*g.OW])
	clear(row[sp.ohHi*g.OW:])
	copy(row[sp.q0:sp.q1], x[sp.s0:sp.s1])
	clearPadding(row, g, sp, lo, hi)
}

// shifted is the run a shifted tap row shares with its plane: output rows
// [ohLo, ohHi) are in the input, and row positions [q0, q1) read plane
// elements [s0, s1) (the positions clipped off its ends read the
// padding, in the columns outside [lo, hi)).
type shifted struct{ ohLo, ohHi, q0, q1, s0, s1 int }

// shiftedSpan is the run of the tap h0 rows and w0 columns off each
// window's origin, or false when no position of it reads the input.
func shiftedSpan(g device.WindowGeom, h0, w0 int) (shifted, bool) {
	sp := shifted{ohLo: max(0, -h0), ohHi: min(g.OH, g.H-h0)}
	if sp.ohHi <= sp.ohLo {
		return sp, false
	}
	sp.q0, sp.q1 = sp.ohLo*g.OW, sp.ohHi*g.OW
	sp.s0, sp.s1 = sp.q0+h0*g.W+w0, sp.q1+h0*g.W+w0
	if sp.s0 < 0 {
		sp.q0, sp.s0 = sp.q0-sp.s0, 0
	}
	if plane := g.H * g.W; sp.s1 > plane {
		sp.q1, sp.s1 = sp.q1-(sp.s1-plane), plane
	}
	if sp.q0 >= sp.q1 {
		// All of it clipped (a tap past the plane's ends in every row it
		// reaches): every position reads the padding, and q0 or s1 may lie
		// outside the row or the plane.
		return sp, false
	}
	return sp, true
}

// clearPadding zeroes the positions of the run's rows whose columns are
// outside [lo, hi), which read the padding.
func clearPadding[T any](row []T, g device.WindowGeom, sp shifted, lo, hi int) {
	if lo == 0 && hi == g.OW {
		return
	}
	for oh := sp.ohLo; oh < sp.ohHi; oh++ {
		r := row[oh*g.OW : (oh+1)*g.OW]
		clear(r[:lo])
		clear(r[hi:])
	}
}

// Fold is device.Unfolder's: float32 and float64.
func (d *Device) Fold(dst, src device.View, g device.WindowGeom) error {
	if err := checkWindows("fold", g, dst, src); err != nil {
		return err
	}
	k := g.KH * g.KW
	if dst.Numel() != g.N*g.C*g.H*g.W || src.Numel() != g.N*g.C*k*g.OH*g.OW || dst.DType != src.DType {
		return fmt.Errorf("cpu: fold: %v %v into %v %v for windows %+v", src.DType, src.Shape, dst.DType, dst.Shape, g)
	}
	switch src.DType {
	case dtype.Float32:
		fold(rowsOf[float32](dst), rowsOf[float32](src), g)
	case dtype.Float64:
		fold(rowsOf[float64](dst), rowsOf[float64](src), g)
	default:
		return fmt.Errorf("cpu: fold of %v", src.DType)
	}
	return nil
}

func fold[T float](dst, src []T, g device.WindowGeom) {
	plane, cols := g.H*g.W, g.KH*g.KW*g.OH*g.OW
	parallel.For(g.N*g.C, rowGrain(cols), func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			foldPlane(dst[p*plane:(p+1)*plane], src[p*cols:(p+1)*cols], g, false)
		}
	})
}

// foldPlane overwrites one image plane x with the sum of the entries of
// its KH·KW rows of OH·OW columns cols that unfoldPlane would have read
// from each element.
//
// With mutable set, cols is scratch that foldPlane may overwrite: with
// strides of 1 and OW = W, each tap's row is then added as one run (its
// entries that fall in the padding zeroed first), as unfoldPlane copies
// it.
func foldPlane[T float](x, cols []T, g device.WindowGeom, mutable bool) {
	outPlane := g.OH * g.OW
	flat := mutable && g.SH == 1 && g.SW == 1 && g.OW == g.W
	clear(x)
	for i := range g.KH {
		for j := range g.KW {
			row := cols[(i*g.KW+j)*outPlane : (i*g.KW+j+1)*outPlane]
			w0 := j*g.DW - g.PW
			lo, hi := rowSpan(g.OW, w0, g.SW, g.W)
			if flat {
				foldShifted(x, row, g, i*g.DH-g.PH, w0, lo, hi)
				continue
			}
			for oh := range g.OH {
				ih := oh*g.SH - g.PH + i*g.DH
				if ih < 0 || ih >= g.H {
					continue
				}
				in := x[ih*g.W : (ih+1)*g.W]
				out := row[oh*g.OW : (oh+1)*g.OW]
				if g.SW == 1 {
					if lo >= hi {
						continue // no window reaches the row with this tap; lo+w0 may be outside it
					}
					in, out := in[lo+w0:hi+w0], out[lo:hi]
					for q := range out {
						in[q] += out[q]
					}
				} else {
					for ow := lo; ow < hi; ow++ {
						in[ow*g.SW+w0] += out[ow]
					}
				}
			}
		}
	}
}

// foldShifted adds the row of a tap h0 rows and w0 columns off each
// window's origin into the plane x, the adjoint of unfoldShifted; it
// zeroes the row's entries that read the padding.
func foldShifted[T float](x, row []T, g device.WindowGeom, h0, w0, lo, hi int) {
	sp, ok := shiftedSpan(g, h0, w0)
	if !ok {
		return
	}
	clearPadding(row, g, sp, lo, hi)
	addTo(x[sp.s0:sp.s1], row[sp.q0:sp.q1])
}

// MaxPool2d is device.MaxPooler's: float32 and float64, PyTorch's CPU
// kernel's order (the first maximum of the window in row-major order; a
// NaN wins over any number, and a later NaN over an earlier one).
func (d *Device) MaxPool2d(dst, indices, src device.View, g device.WindowGeom) error {
	withIndices := present(indices)
	if err := checkWindows("max_pool2d", g, dst, indices, src); err != nil {
		return err
	}
	if src.Numel() != g.N*g.C*g.H*g.W || dst.Numel() != g.N*g.C*g.OH*g.OW || dst.DType != src.DType ||
		withIndices && (indices.Numel() != dst.Numel() || indices.DType != dtype.Int64) {
		return fmt.Errorf("cpu: max_pool2d: %v %v into %v %v and %v %v for windows %+v", src.DType, src.Shape, dst.DType, dst.Shape, indices.DType, indices.Shape, g)
	}
	switch src.DType {
	case dtype.Float32:
		maxPool2d(rowsOf[float32](dst), optRows[int64](indices), rowsOf[float32](src), g)
	case dtype.Float64:
		maxPool2d(rowsOf[float64](dst), optRows[int64](indices), rowsOf[float64](src), g)
	default:
		return fmt.Errorf("cpu: max_pool2d of %v", src.DType)
	}
	return nil
}

// pairedWindows reports whether g's windows are 2×2, 2 apart, inside the
// image: the common pooling, which vmath's kernels run.
func pairedWindows(g device.WindowGeom) bool {
	return g.KH == 2 && g.KW == 2 && g.SH == 2 && g.SW == 2 && g.PH == 0 && g.PW == 0 &&
		g.DH == 1 && g.DW == 1 && 2*g.OH <= g.H && 2*g.OW <= g.W
}

func maxPool2d[T float](dst []T, indices []int64, src []T, g device.WindowGeom) {
	plane, outPlane := g.H*g.W, g.OH*g.OW
	// The common pooling, 2×2 windows 2 apart inside the image, without
	// the general loop's bounds per window.
	pairs := pairedWindows(g)
	parallel.For(g.N*g.C, rowGrain(g.KH*g.KW*outPlane), func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			x := src[p*plane : (p+1)*plane]
			y := dst[p*outPlane : (p+1)*outPlane]
			if indices == nil && pairs {
				maxPool2x2Values(y, x, g)
				continue
			}
			var at []int64
			if indices != nil {
				at = indices[p*outPlane : (p+1)*outPlane]
			} else {
				at = make([]int64, outPlane) // positions nobody reads
			}
			if pairs {
				// The common pooling: vmath's kernel, a vector of
				// windows at a time on AVX2 and AVX-512.
				vmath.MaxPool2x2(y, at, x, g.W, g.OW, g.OH)
				continue
			}
			for oh := range g.OH {
				h0 := oh*g.SH - g.PH
				h1 := min(h0+(g.KH-1)*g.DH+1, g.H)
				for h0 < 0 {
					h0 += g.DH
				}
				for ow := range g.OW {
					w0 := ow*g.SW - g.PW
					w1 := min(w0+(g.KW-1)*g.DW+1, g.W)
					for w0 < 0 {
						w0 += g.DW
					}
					// A window whose taps all fall in the padding (a
					// dilation wider than the input allows it) points at
					// the image's nearest element, as no tap can.
					best, where := T(math.Inf(-1)), min(h0, g.H-1)*g.W+min(w0, g.W-1)
					for h := h0; h < h1; h += g.DH {
						row := x[h*g.W : (h+1)*g.W]
						for w := w0; w < w1; w += g.DW {
							if v := row[w]; v > best || v != v {
								best, where = v, h*g.W+w
							}
						}
					}
					y[oh*g.OW+ow], at[oh*g.OW+ow] = best, int64(where)
				}
			}
		}
	})
}

// MaxPool2dBackward is device.MaxPooler's: float32 and float64.
func (d *Device) MaxPool2dBackward(dx, dy, indices device.View, g device.WindowGeom) error {
	if err := checkWindows("max_pool2d backward", g, dx, dy, indices); err != nil {
		return err
	}
	if dx.Numel() != g.N*g.C*g.H*g.W || dy.Numel() != g.N*g.C*g.OH*g.OW || dx.DType != dy.DType ||
		indices.Numel() != dy.Numel() || indices.DType != dtype.Int64 {
		return fmt.Errorf("cpu: max_pool2d backward: %v %v and %v %v into %v %v for windows %+v", dy.DType, dy.Shape, indices.DType, indices.Shape, dx.DType, dx.Shape, g)
	}
	var bad atomic.Bool
	switch dx.DType {
	case dtype.Float32:
		maxPool2dBackward(rowsOf[float32](dx), rowsOf[float32](dy), rowsOf[int64](indices), g, &bad)
	case dtype.Float64:
		maxPool2dBackward(rowsOf[float64](dx), rowsOf[float64](dy), rowsOf[int64](indices), g, &bad)
	default:
		return fmt.Errorf("cpu: max_pool2d backward of %v", dx.DType)
	}
	if bad.Load() {
		return fmt.Errorf("cpu: max_pool2d backward: an index lies outside its %d×%d image", g.H, g.W)
	}
	return nil
}

func maxPool2dBackward[T float](dx, dy []T, indices []int64, g device.WindowGeom, bad *atomic.Bool) {
	plane, outPlane := g.H*g.W, g.OH*g.OW
	pairs := pairedWindows(g)
	parallel.For(g.N*g.C, rowGrain(plane+outPlane), func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			x := dx[p*plane : (p+1)*plane]
			at := indices[p*outPlane : (p+1)*outPlane]
			// 2×2 windows 2 apart, each position in its own window (as
			// the forward leaves them): one pass writing every element.
			if pairs && vmath.MaxPool2x2Backward(x, dy[p*outPlane:(p+1)*outPlane], at, g.W, g.H, g.OW, g.OH) {
				continue
			}
			clear(x)
			for q, v := range dy[p*outPlane : (p+1)*outPlane] {
				i := at[q]
				if uint64(i) >= uint64(len(x)) {
					bad.Store(true)
					return
				}
				x[i] += v
			}
		}
	})
}

// maxPool2x2Values is vmath.MaxPool2x2 without the positions (no gradient
// goes through the pooling: evaluation): the builtin max, which propagates
// a NaN as PyTorch's does. (Of −0 and +0 it may give +0 where PyTorch
// keeps the first: the same number.) It is faster than the vector kernel,
// which finds and writes each window's position too (bench/cnn.js's
// evaluation 225-236 ms this way against 247-256 through the kernel with
// positions nobody reads, 4 interleaved runs).
func maxPool2x2Values[T float](y, x []T, g device.WindowGeom) {
	for oh := range g.OH {
		r0 := x[2*oh*g.W : (2*oh+1)*g.W]
		r1 := x[(2*oh+1)*g.W : (2*oh+2)*g.W]
		ys := y[oh*g.OW : (oh+1)*g.OW]
		for ow := range ys {
			w := 2 * ow
			ys[ow] = max(r0[w], r0[w+1], r1[w], r1[w+1])
		}
	}
}
