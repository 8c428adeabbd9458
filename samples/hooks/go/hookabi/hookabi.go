// Package hookabi is the guest side of zeroeng's WebAssembly comm-hook ABI, version 1
// (docs/wasm-hook-abi.md), for hooks written in Go and built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o hook.wasm .
//
// It owns three things and nothing else:
//
//   - the marker export zeroeng_hook_abi_v1: importing this package makes a module a
//     version 1 hook, so a hook must not declare the marker itself;
//   - a binding for every host function of import module "zeroeng", with the ABI's exact
//     wasm signatures;
//   - typed wrappers over them: results decoded from the little-endian out-buffers
//     (bucket_info, bucket_param, tensor_info, norm), statuses turned into errors of type
//     [Status], and [Read] / [Write] moving Go slices to and from host tensors.
//
// The hook's own exports (on_bucket, and init, on_bucket_done, on_step_end, alloc,
// configure as it needs them) are declared by the hook's main package with //go:wasmexport;
// [Result] turns the error a hook function returns into the i32 status the export returns.
//
// Handles, like everything the host hands out, are only valid on the instance that got
// them; every call comes from the host's single thread for the rank, so a hook needs no
// locking and must not block on goroutines.
package hookabi

import (
	"encoding/binary"
	"errors"
	"strconv"
	"unsafe"
)

//go:wasmexport zeroeng_hook_abi_v1
func abiV1() {}

// Status is the i32 status of a host function; 0 is success and is never returned as an
// error.
type Status int32

// The host's statuses.
const (
	OK         Status = 0
	ErrInvalid Status = 1 // an argument is out of range: unknown dtype or op, k > numel, bad root
	ErrHandle  Status = 2 // not a live handle
	ErrBounds  Status = 3 // a guest range outside memory, or a byte range outside the tensor
	ErrDType   Status = 4 // a dtype the operation does not take, or mixed dtypes
	ErrSize    Status = 5 // element counts that do not fit together
	ErrComm    Status = 6 // a collective failed
	ErrNoMem   Status = 7 // the hook's host tensors would exceed its memory limit
)

// ErrGuest is not a host status: it is what [Result] returns for an error that is not a
// Status (a guest-side failure, whose text Result writes to stderr, that is the rank's log).
const ErrGuest Status = 100

var statusNames = [...]string{"OK", "ERR_INVALID", "ERR_HANDLE", "ERR_BOUNDS", "ERR_DTYPE",
	"ERR_SIZE", "ERR_COMM", "ERR_NOMEM"}

// Error returns the ABI's name of the status, such as "ERR_BOUNDS".
func (s Status) Error() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status " + strconv.Itoa(int(s))
}

func check(s int32) error {
	if s == 0 {
		return nil
	}
	return Status(s)
}

// Result is the status an export returns for err: 0 for nil, the status for a Status (or an
// error wrapping one), and ErrGuest for any other error, after writing it to stderr.
func Result(err error) int32 {
	if err == nil {
		return 0
	}
	var s Status
	if errors.As(err, &s) {
		return int32(s)
	}
	println("hook error:", err.Error())
	return int32(ErrGuest)
}

// DType is an element type code.
type DType int32

// The dtype codes.
const (
	Float32  DType = 0
	Float16  DType = 1
	BFloat16 DType = 2
	Int64    DType = 3
)

// Size is the size of one element in bytes (0 for an unknown code).
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	case Int64:
		return 8
	}
	return 0
}

// ReduceOp is a reduce-op code.
type ReduceOp int32

// The reduce-op codes.
const (
	Sum     ReduceOp = 0
	Avg     ReduceOp = 1
	Max     ReduceOp = 2
	Min     ReduceOp = 3
	Product ReduceOp = 4
)

// Handle names a host tensor: a bucket's gradient buffer or a tensor made by [TensorNew].
type Handle int32

// Bucket is bucket_info's record.
type Bucket struct {
	Index     int    // 0 is the first bucket of an iteration
	Flags     uint32 // bit 0: the last bucket of the iteration
	Numel     int    // number of elements
	DType     DType
	NumParams int   // number of parameters in the bucket
	Step      int64 // synchronised iterations completed before this one
	Rank      int
	WorldSize int
}

// Last reports whether the bucket is the last one of its iteration.
func (b Bucket) Last() bool { return b.Flags&1 != 0 }

// BucketInfo describes bucket b.
func BucketInfo(b Handle) (Bucket, error) {
	var out [40]byte
	if err := check(bucketInfo(int32(b), unsafe.Pointer(&out))); err != nil {
		return Bucket{}, err
	}
	le := binary.LittleEndian
	return Bucket{
		Index:     int(le.Uint32(out[0:])),
		Flags:     le.Uint32(out[4:]),
		Numel:     int(le.Uint64(out[8:])),
		DType:     DType(le.Uint32(out[16:])),
		NumParams: int(le.Uint32(out[20:])),
		Step:      int64(le.Uint64(out[24:])),
		Rank:      int(le.Uint32(out[32:])),
		WorldSize: int(le.Uint32(out[36:])),
	}, nil
}

// Param is bucket_param's record: where a parameter's gradient lies in its bucket.
type Param struct {
	Offset int // element offset in the bucket
	Numel  int
	Name   string // PyTorch naming, such as "module.0.weight"
}

// BucketParam describes parameter i (0-based) of bucket b, with its whole name.
func BucketParam(b Handle, i int) (Param, error) {
	var out [24]byte
	var name [128]byte
	if err := check(bucketParam(int32(b), int32(i), unsafe.Pointer(&out), unsafe.Pointer(&name), int32(len(name)))); err != nil {
		return Param{}, err
	}
	le := binary.LittleEndian
	p := Param{Offset: int(le.Uint64(out[0:])), Numel: int(le.Uint64(out[8:]))}
	n := int(le.Uint32(out[16:]))
	if n <= len(name) {
		p.Name = string(name[:n])
		return p, nil
	}
	long := make([]byte, n)
	if err := check(bucketParam(int32(b), int32(i), unsafe.Pointer(&out), unsafe.Pointer(&long[0]), int32(n))); err != nil {
		return Param{}, err
	}
	p.Name = string(long)
	return p, nil
}

// Tensor is tensor_info's record.
type Tensor struct {
	DType DType
	Numel int
}

// TensorNew makes a zero-filled host tensor; the guest frees it with [TensorFree] (or
// leaves it to the instance's end).
func TensorNew(dt DType, numel int) (Handle, error) {
	var h int32
	if err := check(tensorNew(int32(dt), int64(numel), unsafe.Pointer(&h))); err != nil {
		return 0, err
	}
	return Handle(h), nil
}

// TensorFree frees a tensor made by TensorNew.
func TensorFree(h Handle) error { return check(tensorFree(int32(h))) }

// TensorInfo describes tensor h.
func TensorInfo(h Handle) (Tensor, error) {
	var out [16]byte
	if err := check(tensorInfo(int32(h), unsafe.Pointer(&out))); err != nil {
		return Tensor{}, err
	}
	le := binary.LittleEndian
	return Tensor{DType: DType(le.Uint32(out[0:])), Numel: int(le.Uint64(out[8:]))}, nil
}

// TensorRead copies len(dst) bytes of h's data, from byteOffset, into dst.
func TensorRead(h Handle, byteOffset int, dst []byte) error {
	return check(tensorRead(int32(h), int64(byteOffset), unsafe.Pointer(unsafe.SliceData(dst)), int32(len(dst))))
}

// TensorWrite copies src into h's data at byteOffset.
func TensorWrite(h Handle, byteOffset int, src []byte) error {
	return check(tensorWrite(int32(h), int64(byteOffset), unsafe.Pointer(unsafe.SliceData(src)), int32(len(src))))
}

// Elem is a Go type whose memory is a tensor element's little-endian bytes: float32 for
// float32, uint16 for the bit patterns of float16 and bfloat16, int64 for int64.
type Elem interface {
	~float32 | ~uint16 | ~int16 | ~int64 | ~uint64 | ~int32 | ~uint32 | ~float64 | ~uint8
}

func bytesOf[E Elem](s []E) []byte {
	var e E
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(e)))
}

// Read fills dst with h's elements from element elemOffset on, in one host call; E must
// have the size of h's elements.
func Read[E Elem](h Handle, elemOffset int, dst []E) error {
	var e E
	return TensorRead(h, elemOffset*int(unsafe.Sizeof(e)), bytesOf(dst))
}

// Write stores src into h's elements from element elemOffset on, in one host call; E must
// have the size of h's elements.
func Write[E Elem](h Handle, elemOffset int, src []E) error {
	var e E
	return TensorWrite(h, elemOffset*int(unsafe.Sizeof(e)), bytesOf(src))
}

// AllReduce reduces h in place across the ranks (asynchronous).
func AllReduce(h Handle, op ReduceOp) error { return check(allReduce(int32(h), int32(op))) }

// Broadcast copies rank root's h into every rank's h (asynchronous).
func Broadcast(h Handle, root int) error { return check(broadcast(int32(h), int32(root))) }

// ReduceScatter reduces in, which holds world-size blocks of out's size, and leaves block
// rank of the result in out (asynchronous).
func ReduceScatter(out, in Handle, op ReduceOp) error {
	return check(reduceScatter(int32(out), int32(in), int32(op)))
}

// AllGather puts rank r's in into block r of out, which holds world-size blocks
// (asynchronous).
func AllGather(out, in Handle) error { return check(allGather(int32(out), int32(in))) }

// Copy copies src into dst element by element, converting the dtype (round to nearest even).
func Copy(dst, src Handle) error { return check(copyTensor(int32(dst), int32(src))) }

// Scale multiplies h by factor in place.
func Scale(h Handle, factor float64) error { return check(scale(int32(h), factor)) }

// Sign sets dst to the sign (-1, 0 or 1) of src.
func Sign(dst, src Handle) error { return check(sign(int32(dst), int32(src))) }

// Norm returns the p-norm of h, for p 1, 2 or +Inf.
func Norm(h Handle, p float64) (float64, error) {
	var out float64
	if err := check(norm(int32(h), p, unsafe.Pointer(&out))); err != nil {
		return 0, err
	}
	return out, nil
}

// TopK writes the k elements of src of largest magnitude, in decreasing magnitude, into
// values (src's dtype) and their indices into indices (int64).
func TopK(src Handle, k int, values, indices Handle) error {
	return check(topk(int32(src), int64(k), int32(values), int32(indices)))
}

// ScatterAdd adds values[i] to dst[indices[i]].
func ScatterAdd(dst, indices, values Handle) error {
	return check(scatterAdd(int32(dst), int32(indices), int32(values)))
}

// Log writes msg as one line of the rank's log.
func Log(msg string) error {
	return check(hostLog(unsafe.Pointer(unsafe.StringData(msg)), int32(len(msg))))
}
