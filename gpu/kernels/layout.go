package kernels

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// The by-value structs of the kernel ABI and their construction from
// shapes and strides. Both mirror common.cuh / reduce.cu field for field;
// the tests check the sizes against the struct declarations clang compiles.

const (
	// MaxDim is the most dimensions an operand may have after coalescing.
	MaxDim = 8
	// MaxOps is the most operands one Layout describes.
	MaxOps = 4

	// LayoutSize is sizeof(ZeLayout).
	LayoutSize = 8*MaxDim + 8*MaxOps*MaxDim + 8 + 4 + 4
	// ReduceSize is sizeof(ZeReduce).
	ReduceSize = 5*8*MaxDim + 8 + 8 + 4 + 4

	maxIndex32 = 1<<32 - 1
)

// Layout is struct ZeLayout: up to MaxOps operands walked together over one
// shape, dimensions innermost first (Shape[0] is the fastest-varying
// extent), strides in elements. Element i in row-major order lives at
// Σ_d idx_d·Stride[k][d] from operand k's element 0.
type Layout struct {
	Shape  [MaxDim]int64
	Stride [MaxOps][MaxDim]int64
	Numel  int64
	NDim   int32
}

// NewLayout describes operands of the given strides walked over shape
// (outermost first, as device.View has them). Like the CPU's walk it drops
// extents of 1 and merges adjacent dimensions wherever every operand allows,
// so that contiguous operands become one dimension however many they had
// (and the kernels need no division). It fails beyond MaxDim dimensions.
//
// It is called for every launch, so it works in fixed-size arrays and
// returns the Layout by value: nothing is allocated.
func NewLayout(shape []int, strides ...[]int) (Layout, error) {
	if len(strides) == 0 || len(strides) > MaxOps {
		return Layout{}, fmt.Errorf("kernels: a layout has 1 to %d operands, not %d", MaxOps, len(strides))
	}
	for k, st := range strides {
		if len(st) != len(shape) {
			return Layout{}, fmt.Errorf("kernels: operand %d has %d strides for %d dimensions", k, len(st), len(shape))
		}
	}
	// Room for twice MaxDim dimensions before coalescing; more spill to
	// the heap, and fail below.
	var extBuf [2 * MaxDim]int64
	var stBuf [MaxOps][2 * MaxDim]int64
	ext := extBuf[:0]
	var st [MaxOps][]int64
	for k := range st {
		st[k] = stBuf[k][:0]
	}
	numel := int64(1)
	for i, e := range shape {
		numel *= int64(e)
		if e == 1 {
			continue
		}
		if n := len(ext); n > 0 {
			merge := true
			for k := range strides {
				merge = merge && st[k][n-1] == int64(strides[k][i])*int64(e)
			}
			if merge {
				ext[n-1] *= int64(e)
				for k := range strides {
					st[k][n-1] = int64(strides[k][i])
				}
				continue
			}
		}
		ext = append(ext, int64(e))
		for k := range strides {
			st[k] = append(st[k], int64(strides[k][i]))
		}
	}
	if len(ext) > MaxDim {
		return Layout{}, fmt.Errorf("kernels: %d dimensions after coalescing, at most %d are supported", len(ext), MaxDim)
	}
	// The kernels index a walk of 2^32 elements or more with one 64-bit
	// division for the outermost dimension and 32-bit ones for the others,
	// which must then hold fewer than 2^32 elements together.
	if len(ext) > 1 && numel > maxIndex32 && numel/ext[0] > maxIndex32 {
		return Layout{}, fmt.Errorf("kernels: a strided walk of shape %v has %d elements inside its outermost dimension, at most %d are supported",
			shape, numel/ext[0], int64(maxIndex32))
	}
	l := Layout{Numel: numel, NDim: 1}
	l.Shape[0] = 1
	if len(ext) > 0 {
		l.NDim = int32(len(ext))
		for d := range ext {
			l.Shape[d] = ext[len(ext)-1-d]
			for k := range strides {
				l.Stride[k][d] = st[k][len(ext)-1-d]
			}
		}
	}
	return l, nil
}

// Bytes is l as the kernels receive it: l's own memory, which has
// ZeLayout's layout on the little-endian hosts CUDA runs on (the test checks
// it against an explicit encoding). Args.Raw copies it.
func (l *Layout) Bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(l)), LayoutSize)
}

// The Go struct must be exactly the C struct's size.
var _ [LayoutSize - unsafe.Sizeof(Layout{})]byte
var _ [unsafe.Sizeof(Layout{}) - LayoutSize]byte

// Offsets returns each operand's element offset of the i-th element in
// row-major order, computed as ze_offsets does (for tests and host-side
// checks).
func (l *Layout) Offsets(i int64, nops int) []int64 {
	off := make([]int64, nops)
	if l.NDim == 1 {
		for k := range off {
			off[k] = i * l.Stride[k][0]
		}
		return off
	}
	nd := int(l.NDim)
	r := uint32(i)
	if l.Numel > maxIndex32 {
		nd--
		inner := l.Numel / l.Shape[nd]
		hi := i / inner
		r = uint32(i - hi*inner)
		for k := range off {
			off[k] = hi * l.Stride[k][nd]
		}
	}
	for d := 0; d < nd; d++ {
		e := uint32(l.Shape[d])
		q := r / e
		for k := range off {
			off[k] += int64(r-q*e) * l.Stride[k][d]
		}
		r = q
	}
	return off
}

// Reduce is struct ZeReduce: the kept dimensions of a reduction (dst's
// extents with the dst and src strides) and the reduced ones (src's extents
// and strides), each coalesced and innermost first.
type Reduce struct {
	KShape, KDst, KSrc [MaxDim]int64
	RShape, RSrc       [MaxDim]int64
	Outputs, RCount    int64
	KDim, RDim         int32
}

// NewReduce describes the reduction of src into dst, which has src's rank:
// the reduced axes are those where dst has extent 1 and src does not. It
// reports whether any axis is reduced (if none, the reduction is a copy and
// r is nil).
func NewReduce(dstShape, dstStrides, srcShape, srcStrides []int) (r *Reduce, reduced bool, err error) {
	if len(dstShape) != len(srcShape) || len(dstStrides) != len(dstShape) || len(srcStrides) != len(srcShape) {
		return nil, false, fmt.Errorf("kernels: reduce of rank %d into rank %d", len(srcShape), len(dstShape))
	}
	var kshape, kdst, ksrc, rshape, rsrc []int
	for i, e := range srcShape {
		if dstShape[i] == 1 && e != 1 {
			rshape = append(rshape, e)
			rsrc = append(rsrc, srcStrides[i])
			continue
		}
		kshape = append(kshape, e)
		kdst = append(kdst, dstStrides[i])
		ksrc = append(ksrc, srcStrides[i])
	}
	if len(rshape) == 0 {
		return nil, false, nil
	}
	kept, err := NewLayout(kshape, kdst, ksrc)
	if err != nil {
		return nil, true, err
	}
	red, err := NewLayout(rshape, rsrc)
	if err != nil {
		return nil, true, err
	}
	r = &Reduce{
		KShape: kept.Shape, KDst: kept.Stride[0], KSrc: kept.Stride[1], Outputs: kept.Numel, KDim: kept.NDim,
		RShape: red.Shape, RSrc: red.Stride[0], RCount: red.Numel, RDim: red.NDim,
	}
	return r, true, nil
}

// Bytes encodes r as the kernels receive it (little-endian).
func (r *Reduce) Bytes() []byte {
	b := make([]byte, 0, ReduceSize)
	for _, a := range [][MaxDim]int64{r.KShape, r.KDst, r.KSrc, r.RShape, r.RSrc} {
		for _, v := range a {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Outputs))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.RCount))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.KDim))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.RDim))
	return b
}
