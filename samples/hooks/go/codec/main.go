// Command codec is a data-plane codec in the guest: the bf16 compression of the bf16 sample,
// with the float32 -> bfloat16 -> float32 conversions done by the module's own code on the
// bucket's bytes instead of by the host's copy primitive. It shows what a codec the host
// has no primitive for would look like, and what guest compute costs.
//
// on_bucket reads the float32 bucket chunk by chunk, multiplies it by 1/world and rounds it
// to bfloat16 (round to nearest even, NaN stays NaN, as PyTorch's float -> bfloat16), writes
// the bit patterns into a bfloat16 host tensor (one per bucket index, reused every step)
// and sums that tensor across the ranks; on_bucket_done widens the sum back into the bucket.
// Only float32 buckets are taken. With a host whose copy rounds as PyTorch's .to(), the
// results are bit-identical to the bf16 sample's.
package main

import (
	"errors"
	"math"
	"unsafe"

	"github.com/zeroeng/zeroeng/samples/hooks/go/hookabi"
)

func main() {}

// chunk is how many elements go through guest memory per host call.
const chunk = 1 << 16

type wire struct {
	h     hookabi.Handle
	numel int
}

var (
	inv   float32           // 1/world
	wires = map[int]*wire{} // bucket index -> its bfloat16 tensor
	f32   = make([]float32, chunk)
	u16   = make([]uint16, chunk)
)

//go:wasmexport init
func initHook(rank, world int32) int32 {
	inv = float32(1) / float32(world)
	return 0
}

// toBFloat16 rounds src*scale to bfloat16 bit patterns in dst (len(dst) >= len(src)),
// scaling src in place.
//
// Go's wasm code pays for every loop iteration, every branch and every float <-> bits
// conversion, so the float multiply has a loop of its own, four elements an iteration, and
// the rounding reads the products' bits as uint64s and rounds two floats at once in each
// (round2), four an iteration.
func toBFloat16(dst []uint16, src []float32, scale float32) {
	dst = dst[:len(src)]
	n := len(src) &^ 3
	for i := 0; i < n; i += 4 {
		s := src[i : i+4 : i+4]
		s[0] *= scale
		s[1] *= scale
		s[2] *= scale
		s[3] *= scale
	}
	s64 := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(src))), n/2)
	d64 := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(dst))), n/4)
	for i := range d64 {
		s := s64[2*i : 2*i+2 : 2*i+2]
		d64[i] = uint64(round2(s[0])) | uint64(round2(s[1]))<<32
	}
	for i := n; i < len(src); i++ {
		src[i] *= scale
		dst[i] = uint16(round2(uint64(math.Float32bits(src[i]))))
	}
}

// round2 rounds the two float32s whose bits v holds (the first in the low half) to
// bfloat16, as PyTorch does (to nearest even; every NaN becomes the quiet NaN 0x7fc0), and
// returns the two bfloat16s, the first in the low half. It works on both 32-bit lanes at
// once: on the magnitudes (below 2^31, so no carry crosses a lane), the sign put back after.
func round2(v uint64) uint32 {
	const (
		abs  = 0x7fffffff_7fffffff
		sgn  = 0x80000000_80000000
		one  = 0x00000001_00000001
		half = 0x00007fff_00007fff
		nanb = 0x007fffff_007fffff // m+nanb has bit 31 set iff m > 0x7f800000: a NaN
		lo16 = 0x0000ffff_0000ffff
		qnan = 0x00007fc0_00007fc0
	)
	m := v & abs
	r := (m+half+(m>>16)&one)>>16&lo16 | (v&sgn)>>16
	nan := ((m + nanb) & sgn) >> 31 * 0xffff // 0xffff in the lanes holding a NaN
	r = r&^nan | qnan&nan
	return uint32(r | r>>16)
}

// fromBFloat16 widens bfloat16 bit patterns to float32 bits (exact), four at a time: each
// uint64 of src holds four of them, and each uint64 of dst two float32s.
func fromBFloat16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	n := len(src) &^ 3
	s64 := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(src))), n/4)
	d64 := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(dst))), n/2)
	for i, v := range s64 {
		d := d64[2*i : 2*i+2 : 2*i+2]
		d[0] = (v&0xffff)<<16 | (v&0xffff0000)<<32
		d[1] = (v>>32&0xffff)<<16 | (v>>48)<<48
	}
	for i := n; i < len(src); i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}

var errNoWire = errors.New("on_bucket_done for a bucket that on_bucket did not see")

func wireFor(index, numel int) (*wire, error) {
	w := wires[index]
	if w != nil && w.numel == numel {
		return w, nil
	}
	if w != nil {
		if err := hookabi.TensorFree(w.h); err != nil {
			return nil, err
		}
		delete(wires, index)
	}
	h, err := hookabi.TensorNew(hookabi.BFloat16, numel)
	if err != nil {
		return nil, err
	}
	w = &wire{h: h, numel: numel}
	wires[index] = w
	return w, nil
}

func encode(b hookabi.Handle) error {
	info, err := hookabi.BucketInfo(b)
	if err != nil {
		return err
	}
	if info.DType != hookabi.Float32 {
		return hookabi.ErrDType
	}
	w, err := wireFor(info.Index, info.Numel)
	if err != nil {
		return err
	}
	for off := 0; off < info.Numel; off += chunk {
		n := min(chunk, info.Numel-off)
		if err := hookabi.Read(b, off, f32[:n]); err != nil {
			return err
		}
		toBFloat16(u16, f32[:n], inv)
		if err := hookabi.Write(w.h, off, u16[:n]); err != nil {
			return err
		}
	}
	return hookabi.AllReduce(w.h, hookabi.Sum)
}

func decode(b hookabi.Handle) error {
	info, err := hookabi.BucketInfo(b)
	if err != nil {
		return err
	}
	w := wires[info.Index]
	if w == nil || w.numel != info.Numel {
		return errNoWire
	}
	for off := 0; off < info.Numel; off += chunk {
		n := min(chunk, info.Numel-off)
		if err := hookabi.Read(w.h, off, u16[:n]); err != nil {
			return err
		}
		fromBFloat16(f32, u16[:n])
		if err := hookabi.Write(b, off, f32[:n]); err != nil {
			return err
		}
	}
	return nil
}

//go:wasmexport on_bucket
func onBucket(b hookabi.Handle) int32 { return hookabi.Result(encode(b)) }

//go:wasmexport on_bucket_done
func onBucketDone(b hookabi.Handle) int32 { return hookabi.Result(decode(b)) }
