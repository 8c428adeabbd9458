package cuda

import (
	"encoding/binary"
	"math"
	"runtime"
	"unsafe"
)

// Args builds a kernel's arguments for Function.Launch. Each method adds
// one argument, in the kernel's parameter order:
//
//	var a cuda.Args
//	a.Reset().Ptr(out).Ptr(in).I32(n).F32(scale)
//
// An Args is reused across launches: after the first few, Reset and the
// adding methods do not allocate. An Args must not be changed during a
// Launch that uses it, nor used by two launches at once.
type Args struct {
	// buf holds the values, each at its alignment from the start, which
	// is how the kernel's parameter space lays them out (the driver,
	// given a pointer per value, copies them there itself). At launch, the
	// kernelParams array is written after them, in buf's spare capacity:
	// one object to pin rather than two.
	buf  []byte
	offs []uint32 // where each value starts in buf
}

// Reset removes all arguments, keeping the memory.
func (a *Args) Reset() *Args {
	a.buf = a.buf[:0]
	a.offs = a.offs[:0]
	return a
}

// Len returns the number of arguments.
func (a *Args) Len() int { return len(a.offs) }

// add appends an argument of size bytes at the given alignment (a power
// of two) and returns its bytes.
func (a *Args) add(size, align int) []byte {
	start := len(a.buf)
	off := (start + align - 1) &^ (align - 1)
	end := off + size
	if end > cap(a.buf) {
		// Whole multiples of 64 bytes put the buffer in a size class whose
		// objects are 16-byte aligned, the largest alignment a kernel
		// parameter has in practice (float4, __align__(16) structs).
		n := max(2*cap(a.buf), (end+63)&^63, 256)
		b := make([]byte, end, n)
		copy(b, a.buf)
		a.buf = b
	} else {
		a.buf = a.buf[:end]
	}
	clear(a.buf[start:off]) // padding
	a.offs = append(a.offs, uint32(off))
	return a.buf[off:end]
}

// Ptr adds a device pointer (a T* parameter).
func (a *Args) Ptr(p DevicePtr) *Args {
	binary.NativeEndian.PutUint64(a.add(8, 8), uint64(p))
	return a
}

// I32 adds an int (int32_t).
func (a *Args) I32(v int32) *Args {
	binary.NativeEndian.PutUint32(a.add(4, 4), uint32(v))
	return a
}

// U32 adds an unsigned int (uint32_t).
func (a *Args) U32(v uint32) *Args {
	binary.NativeEndian.PutUint32(a.add(4, 4), v)
	return a
}

// I64 adds a long long (int64_t); also for size_t, as uint64 bits.
func (a *Args) I64(v int64) *Args {
	binary.NativeEndian.PutUint64(a.add(8, 8), uint64(v))
	return a
}

// F32 adds a float.
func (a *Args) F32(v float32) *Args {
	binary.NativeEndian.PutUint32(a.add(4, 4), math.Float32bits(v))
	return a
}

// F64 adds a double.
func (a *Args) F64(v float64) *Args {
	binary.NativeEndian.PutUint64(a.add(8, 8), math.Float64bits(v))
	return a
}

// Raw adds a C struct passed by value: b is copied, and must hold the
// struct's bytes as the device lays them out, padding included; align is
// the struct's alignment, a power of two. (A C++ empty struct is one byte.)
func (a *Args) Raw(b []byte, align int) *Args {
	if len(b) == 0 {
		panic("cuda: Args.Raw of no bytes")
	}
	if align <= 0 || align&(align-1) != 0 {
		panic("cuda: Args.Raw alignment is not a power of two")
	}
	copy(a.add(len(b), align), b)
	return a
}

// kernelParams writes the kernelParams array, the address of each value,
// after the values in buf, pins buf, and returns the array's address (0
// when there are no arguments). pin.Unpin must be called once the launch
// returns.
//
// Pinning is what makes this safe under Go's rules: the driver reads the
// array, and through it the values, during cuLaunchKernel, but the call
// passes only a uintptr, which keeps nothing alive or in place, and the
// array holds the values' addresses as plain integers, which the garbage
// collector does not see. A pinned object is neither freed nor moved until
// unpinned, so C may read it through any pointer. (The array and values
// share one allocation to pin one object, about 65ns; a Pinner reuses its
// memory, so launches stay allocation-free.)
func (a *Args) kernelParams(pin *runtime.Pinner) uintptr {
	if len(a.offs) == 0 {
		return 0
	}
	at := (len(a.buf) + 7) &^ 7
	end := at + 8*len(a.offs)
	if end > cap(a.buf) {
		b := make([]byte, len(a.buf), max(2*cap(a.buf), (end+63)&^63))
		copy(b, a.buf)
		a.buf = b
	}
	base := unsafe.Pointer(unsafe.SliceData(a.buf))
	pin.Pin(base)
	array := a.buf[at:end]
	for i, off := range a.offs {
		binary.NativeEndian.PutUint64(array[8*i:], uint64(uintptr(base)+uintptr(off)))
	}
	return uintptr(base) + uintptr(at)
}
