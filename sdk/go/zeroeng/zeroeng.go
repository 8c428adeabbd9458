// Package zeroeng is the Go SDK of zeroeng's WebAssembly training programs
// (docs/wasm-program-abi.md): a program built with GOOS=wasip1 GOARCH=wasm
// that imports this package trains with zeroeng's API — the very API
// scripts reach with require("zeroeng") — by name:
//
//	model, err := zeroeng.Call("nn.Linear", 784, 256)
//	loss, err := zeroeng.Call("nn.functional.crossEntropy", logits, labels)
//	err = loss.(zeroeng.Tensor).Method("backward")
//
// Arguments are Go values that encode as JSON (numbers, strings, bools,
// slices, maps, structs) and the handles Tensor and Object; results come
// back as those too (float64 for numbers, []any and map[string]any for
// arrays and plain objects). Every failure is an error carrying the host's
// message. Handles are released with Release; a Scope releases the tensors
// made inside it.
package zeroeng

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"
)

// Status is a host function's result (docs/wasm-program-abi.md).
type Status int32

const (
	OK       Status = 0
	ErrSize  Status = 5
	ErrCall  Status = 8
	ErrLimit Status = 9
)

var statusNames = [...]string{"OK", "ERR_INVALID", "ERR_HANDLE", "ERR_BOUNDS", "ERR_DTYPE", "ERR_SIZE", "ERR_COMM", "ERR_NOMEM", "ERR_CALL", "ERR_LIMIT"}

func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status " + strconv.Itoa(int(s))
}

// Error is a failed host call: its status and the host's message. The
// failure is cleared on the host when the Error is made, so the program
// may go on.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string { return e.Message }

// fail turns a status into an Error with the host's message, and clears
// the failure on the host.
func fail(st int32) error {
	if st == 0 {
		return nil
	}
	buf := make([]byte, 512)
	var n uint32
	errorMessage(unsafe.Pointer(&buf[0]), int32(len(buf)), unsafe.Pointer(&n))
	if int(n) > len(buf) {
		buf = make([]byte, n)
		errorMessage(unsafe.Pointer(&buf[0]), int32(len(buf)), unsafe.Pointer(&n))
	}
	errorClear()
	return &Error{Status: Status(st), Message: string(buf[:n])}
}

// ABIVersion returns the host's ABI major and minor versions.
func ABIVersion() (major, minor uint32) {
	var v [2]uint32
	abiInfo(unsafe.Pointer(&v[0]))
	return v[0], v[1]
}

// Handle is a host value the program holds: a tensor, or another value of
// the API (a module, an optimizer, a function).
type Handle struct {
	ID   int32
	Kind string
}

// Tensor is a handle on a tensor.
type Tensor struct{ Handle }

// Object is a handle on another value of the API.
type Object struct{ Handle }

// MarshalJSON encodes a handle as the ABI's {"$": id}.
func (h Handle) MarshalJSON() ([]byte, error) {
	return []byte(`{"$":` + strconv.Itoa(int(h.ID)) + `}`), nil
}

// Release gives the handle back: an owned tensor goes back to the memory
// pool; a parameter, a gradient or another value is only forgotten.
func (h Handle) Release() error { return fail(release(h.ID)) }

// Forget gives the handle back and leaves its tensor to the scripts'
// lifetime rules (its scope, its generation, autograd), as a script's
// variable going out of scope: for a tensor the API may hold too (a
// module's buffer, the receiver an in-place method returns), which
// Release would free under it.
func (h Handle) Forget() error { return fail(forget(h.ID)) }

// buffer is the scratch the results come into.
var buffer = make([]byte, 4096)

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// finish decodes a result written into buffer (or kept by the host).
func finish(st int32, n uint32) (any, error) {
	if Status(st) == ErrSize {
		if int(n) > len(buffer) {
			buffer = make([]byte, n)
		}
		st = resultRead(ptr(buffer), int32(len(buffer)))
	}
	if err := fail(st); err != nil {
		return nil, err
	}
	return decode(buffer[:n])
}

func encode(args []any) ([]byte, error) {
	if len(args) == 0 {
		return nil, nil
	}
	// One buffer for every call's arguments: the host reads them before
	// it calls anything back.
	b := append(argsBuf[:0], '[')
	for i, a := range args {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendJSON(b, a); err != nil {
			return nil, err
		}
	}
	argsBuf = append(b, ']')
	return argsBuf, nil
}

var argsBuf = make([]byte, 0, 1024)

// Call calls the API function at path ("tensor.randn",
// "nn.functional.crossEntropy"; "new nn.Linear" constructs) with
// args and returns its result.
func Call(path string, args ...any) (any, error) {
	a, err := encode(args)
	if err != nil {
		return nil, err
	}
	p := []byte(path)
	var n uint32
	st := hostCall(ptr(p), int32(len(p)), ptr(a), int32(len(a)), ptr(buffer), int32(len(buffer)), unsafe.Pointer(&n))
	return finish(st, n)
}

// Method calls method name of the handle's value.
func (h Handle) Method(name string, args ...any) (any, error) {
	a, err := encode(args)
	if err != nil {
		return nil, err
	}
	nb := []byte(name)
	var n uint32
	st := hostCallMethod(h.ID, ptr(nb), int32(len(nb)), ptr(a), int32(len(a)), ptr(buffer), int32(len(buffer)), unsafe.Pointer(&n))
	return finish(st, n)
}

// Get reads property name of the handle's value.
func (h Handle) Get(name string) (any, error) {
	nb := []byte(name)
	var n uint32
	st := hostGet(h.ID, ptr(nb), int32(len(nb)), ptr(buffer), int32(len(buffer)), unsafe.Pointer(&n))
	return finish(st, n)
}

// Set writes property name of the handle's value.
func (h Handle) Set(name string, v any) error {
	b, err := appendJSON(nil, v)
	if err != nil {
		return err
	}
	nb := []byte(name)
	return fail(hostSet(h.ID, ptr(nb), int32(len(nb)), ptr(b), int32(len(b))))
}

// decode turns a result's JSON into Go values: handles become Tensor and
// Object, numbers float64.
func decode(b []byte) (any, error) { return parseJSON(b) }

// T calls the API function at path and returns its tensor result.
func T(path string, args ...any) (Tensor, error) {
	v, err := Call(path, args...)
	if err != nil {
		return Tensor{}, err
	}
	t, ok := v.(Tensor)
	if !ok {
		return Tensor{}, fmt.Errorf("zeroeng: %s returned %T, not a tensor", path, v)
	}
	return t, nil
}

// O calls the API function at path and returns its object result.
func O(path string, args ...any) (Object, error) {
	v, err := Call(path, args...)
	if err != nil {
		return Object{}, err
	}
	o, ok := v.(Object)
	if !ok {
		return Object{}, fmt.Errorf("zeroeng: %s returned %T, not an object", path, v)
	}
	return o, nil
}

// M calls method name and returns its tensor result.
func (h Handle) M(name string, args ...any) (Tensor, error) {
	v, err := h.Method(name, args...)
	if err != nil {
		return Tensor{}, err
	}
	t, ok := v.(Tensor)
	if !ok {
		return Tensor{}, fmt.Errorf("zeroeng: %s.%s returned %T, not a tensor", h.Kind, name, v)
	}
	return t, nil
}

// Item is the value of a one-element tensor (t.item()).
func (t Tensor) Item() (float64, error) {
	v, err := t.Method("item")
	if err != nil {
		return 0, err
	}
	f, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("zeroeng: item returned %T", v)
	}
	return f, nil
}

// DType codes of the ABI.
const (
	Float32 int32 = iota
	Float16
	BFloat16
	Int64
	Float64
	Int32
	Uint8
	Bool
)

// FromBytes makes a tensor of dtype and shape from its bytes (row-major,
// little-endian).
func FromBytes(dtype int32, data []byte, shape ...int64) (Tensor, error) {
	var h int32
	st := tensorFromBytes(dtype, unsafe.Pointer(unsafe.SliceData(shape)), int32(len(shape)), ptr(data), int32(len(data)), unsafe.Pointer(&h))
	if err := fail(st); err != nil {
		return Tensor{}, err
	}
	return Tensor{Handle{ID: h, Kind: "tensor"}}, nil
}

// FromFloat32s makes a float32 tensor of shape from v.
func FromFloat32s(v []float32, shape ...int64) (Tensor, error) {
	return FromBytes(Float32, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)), shape...)
}

// Bytes returns the tensor's bytes (row-major, its dtype).
func (t Tensor) Bytes() ([]byte, error) {
	var n uint32
	if st := tensorRead(t.ID, nil, 0, unsafe.Pointer(&n)); Status(st) != ErrSize && st != 0 {
		return nil, fail(st)
	}
	b := make([]byte, n)
	return b, fail(tensorRead(t.ID, ptr(b), int32(n), unsafe.Pointer(&n)))
}

// Shape returns the tensor's dtype code and shape.
func (t Tensor) Shape() (dtype int32, shape []int64, err error) {
	var info [2 + 2*16]uint32
	if err := fail(tensorInfo(t.ID, unsafe.Pointer(&info[0]))); err != nil {
		return 0, nil, err
	}
	nd := int(info[1])
	shape = make([]int64, nd)
	for i := range shape {
		shape[i] = int64(info[2+2*i]) | int64(info[3+2*i])<<32
	}
	return int32(info[0]), shape, nil
}

// Scope runs fn and then releases every tensor made while it ran, except
// those fn returns, which belong to the enclosing scope from then on
// (tensor.scope, which keeps what its function returns).
func Scope(fn func() (keep []Tensor, err error)) error {
	var id int32
	if err := fail(scopeOpen(unsafe.Pointer(&id))); err != nil {
		return err
	}
	keep, err := fn()
	ids := make([]int32, len(keep))
	for i, t := range keep {
		ids[i] = t.ID
	}
	var p unsafe.Pointer
	if len(ids) > 0 {
		p = unsafe.Pointer(&ids[0])
	}
	if cerr := fail(scopeClose(id, p, int32(len(ids)))); err == nil {
		err = cerr
	}
	return err
}

// NoGrad runs fn with autograd's recording off (tensor.noGrad).
func NoGrad(fn func() error) error {
	var was int32
	if err := fail(gradEnabled(0, unsafe.Pointer(&was))); err != nil {
		return err
	}
	err := fn()
	var ignored int32
	gradEnabled(was, unsafe.Pointer(&ignored))
	return err
}

// Must returns v, or ends the program with err's message (status 1): for
// programs that let any failure end them.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(errors.New(err.Error()))
	}
	return v
}
