package device

import "fmt"

// Windows over images: the kernels of 2-d convolutions and poolings. They
// are optional (a device implements them or not, as database/sql's
// drivers implement optional interfaces): every device runs these layers
// through Gather, IndexSelect and IndexAdd, and a device that has kernels
// of its own for the windows says so by implementing these interfaces.

// WindowGeom is the geometry of the windows of a 2-d convolution or
// pooling over an input [N, C, H, W]: windows of KH×KW taps, the taps
// DH and DW apart (dilation), the windows SH and SW apart (stride),
// starting PH rows above and PW columns left of the input (padding:
// taps there read zero, or are skipped by a pooling), OH×OW of them.
type WindowGeom struct {
	N, C, H, W int
	KH, KW     int
	SH, SW     int
	PH, PW     int
	DH, DW     int
	OH, OW     int
}

// Check reports a geometry no kernel can run: extents that are not
// positive, windows that leave no output, outputs that do not fit.
func (g WindowGeom) Check() error {
	for _, v := range []int{g.KH, g.KW, g.SH, g.SW, g.DH, g.DW} {
		if v <= 0 {
			return fmt.Errorf("window geometry %+v: kernel, stride and dilation must be positive", g)
		}
	}
	for _, v := range []int{g.N, g.C, g.H, g.W, g.OH, g.OW, g.PH, g.PW} {
		if v < 0 {
			return fmt.Errorf("window geometry %+v: negative extent", g)
		}
	}
	return nil
}

// Unfolder is implemented by devices with kernels for a convolution's
// im2col (torch.nn.functional.unfold) and its adjoint (fold).
type Unfolder interface {
	// Unfold writes the windows of src [N, C, H, W] into dst
	// [N, C·KH·KW, OH·OW], both contiguous:
	//
	//	dst[n, (c·KH + i)·KW + j, oh·OW + ow] = src[n, c, oh·SH − PH + i·DH, ow·SW − PW + j·DW]
	//
	// and 0 where that falls outside the input.
	Unfold(dst, src View, g WindowGeom) error
	// Fold overwrites dst [N, C, H, W] with the sum, for each element, of
	// the entries of src [N, C·KH·KW, OH·OW] that Unfold would have read
	// from it (the adjoint of Unfold: the gradient of its input).
	Fold(dst, src View, g WindowGeom) error
}

// MaxPooler is implemented by devices with a kernel for 2-d max pooling.
type MaxPooler interface {
	// MaxPool2d writes the maximum of each window of src [N, C, H, W]
	// into dst [N, C, OH, OW] and into indices (int64, dst's shape) the
	// flat position h·W + w of that maximum in its image, all
	// contiguous. Taps in the padding are skipped; of equal values the
	// first in row-major window order wins, and a NaN wins over any
	// number (PyTorch's max_pool2d). indices may be an empty view (Buf
	// nil): the maxima alone, for a pooling no gradient goes through.
	MaxPool2d(dst, indices, src View, g WindowGeom) error
	// MaxPool2dBackward overwrites dx [N, C, H, W] with max pooling's
	// gradient: each element of dy [N, C, OH, OW] added at the position
	// in its image that indices (MaxPool2d's) holds for it.
	MaxPool2dBackward(dx, dy, indices View, g WindowGeom) error
}

// BatchNormer is implemented by devices with fused kernels for batch
// normalisation over x [N, C, S] (contiguous; S the product of the
// spatial extents, 1 for [N, C]), per channel c.
type BatchNormer interface {
	// BatchNormStats writes each channel's mean and sum of squared
	// deviations Σ(x − mean)² into mean and varSum (float64, C elements),
	// accumulated in float64 (PyTorch's CPU kernels' accumulator type).
	BatchNormStats(mean, varSum, x View) error
	// BatchNorm writes y = x·α + β with α = invstd·w and β = b − mean·α
	// per channel, as PyTorch's CPU kernel transforms its input; w and b
	// may be empty views (1 and 0); mean and invstd are x's dtype.
	BatchNorm(y, x, mean, invstd, w, b View) error
	// BatchNormBackward writes dx (when present) and per channel
	// dw = Σ dy·(x − mean)·invstd and db = Σ dy (when present): with
	// training, through the batch's statistics,
	//
	//	dx = (dy − (x − mean)·invstd²·Σdy(x − mean)/count − Σdy/count)·invstd·w
	//
	// and with fixed (running) statistics dx = dy·invstd·w.
	BatchNormBackward(dx, dw, db, dy, x, mean, invstd, w View, training bool) error
}

// Convolver is implemented by devices with kernels for a 2-d convolution
// (groups 1) that never hold the whole batch's columns: each sample's
// im2col is made and used while it is in cache. Over x [N, C, H, W],
// w [O, C·KH·KW] and cols(n) = the sample's Unfold [C·KH·KW, OH·OW], all
// contiguous, with bias [O] optional (an empty view):
type Convolver interface {
	// Conv2d writes y[n] [O, OH·OW] = w · cols(n) (+ bias per row).
	Conv2d(y, x, w, bias View, g WindowGeom) error
	// Conv2dBackward writes, for dy [N, O, OH·OW], each of the present
	// (non-empty) views: dx[n] = Fold(wᵀ · dy[n]), dw = Σn dy[n] · cols(n)ᵀ
	// and dbias = Σ over n and positions of dy. The sums over samples run
	// in an order that depends on N and the shapes alone, never on the
	// threads, so that results repeat bit for bit.
	Conv2dBackward(dx, dw, dbias, dy, x, w View, g WindowGeom) error
}
