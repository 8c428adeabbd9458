package zeroeng

import (
	"fmt"
	"unsafe"
)

// Functions of the program as values of the API (ABI 1.1): a Go function
// made with Func is a function handle that anything taking a function
// takes — nn.utils.checkpoint, zero.init, a comm hook, a module's forward
// set to it — and the host calls it back, on the program's own stack,
// while the call that led to it runs.

// funcs are the program's functions, by the id the host calls them with.
var funcs []func(args []any) (any, error)

// Func makes fn a function of the API. Its arguments come as results do
// (Tensor, Object, float64, []any, map[string]any); their handles are
// the call's, forgotten by the host when fn returns. What it returns is
// encoded as Call's arguments are; a Tensor or Object it returns passes
// to the caller, and the program must not use or release it after. An
// error it returns is the function's error, which reaches whatever
// called it and, through it, the program's call that led there.
func Func(fn func(args []any) (any, error)) (Object, error) {
	funcs = append(funcs, fn)
	var h int32
	if err := fail(functionNew(int32(len(funcs)-1), unsafe.Pointer(&h))); err != nil {
		funcs = funcs[:len(funcs)-1]
		return Object{}, err
	}
	return Object{Handle{ID: h, Kind: "function"}}, nil
}

// callback is the export the host calls a function of the program
// through: it reads the frame's arguments, runs the function and hands
// back its result, or its error (status 1).
//
//go:wasmexport zeroeng_callback
func callback(id, frame int32) (status int32) {
	defer func() {
		if v := recover(); v != nil {
			status = setError(fmt.Sprintf("panic: %v", v))
		}
	}()
	// The outer call's result goes to buffer once this function has
	// returned: the calls made in here use their own.
	outer := buffer
	buffer = make([]byte, 1024)
	defer func() { buffer = outer }()
	if id < 0 || int(id) >= len(funcs) {
		return setError(fmt.Sprintf("zeroeng: the host called function %d, which the program never made", id))
	}
	buf := make([]byte, 1024)
	var n uint32
	st := frameArgs(frame, ptr(buf), int32(len(buf)), unsafe.Pointer(&n))
	if Status(st) == ErrSize {
		buf = make([]byte, n)
		st = resultRead(ptr(buf), int32(len(buf)))
	}
	if st != 0 {
		return st // the host's failure is pending: the function's error
	}
	v, err := decode(buf[:n])
	if err != nil {
		return setError(err.Error())
	}
	args, _ := v.([]any)
	res, err := funcs[id](args)
	if err != nil {
		return setError(err.Error())
	}
	if res == nil {
		return 0
	}
	b, err := appendJSON(nil, res)
	if err != nil {
		return setError(err.Error())
	}
	return frameReturn(frame, ptr(b), int32(len(b)))
}

// setError records msg as the program's failure and returns the status
// that makes the function fail with it.
func setError(msg string) int32 {
	b := []byte(msg)
	errorSet(ptr(b), int32(len(b)))
	return 1
}

// Lookup returns the API's value at path ("nn.functional.relu") as a
// handle, for Invoke.
func Lookup(path string) (Object, error) {
	p := []byte(path)
	var h int32
	if err := fail(lookup(ptr(p), int32(len(p)), unsafe.Pointer(&h))); err != nil {
		return Object{}, err
	}
	return Object{Handle{ID: h, Kind: "function"}}, nil
}

// argRecord is an argument of a handle-only call: tag 0 a handle, 1 a
// number, 2 undefined.
type argRecord struct {
	tag    uint32
	handle int32
	number float64
}

// records encodes the arguments of a handle-only call: Tensor, Object,
// Handle, numbers (NaN and infinities too: a record carries the float64
// bit for bit), nil for undefined.
func records(dst []argRecord, args []any) ([]argRecord, error) {
	if len(args) > maxArgs {
		return nil, fmt.Errorf("zeroeng: %d arguments, at most %d", len(args), maxArgs)
	}
	for i, a := range args {
		var r argRecord
		switch x := a.(type) {
		case Tensor:
			r = argRecord{handle: x.ID}
		case Object:
			r = argRecord{handle: x.ID}
		case Handle:
			r = argRecord{handle: x.ID}
		case float64:
			r = argRecord{tag: 1, number: x}
		case float32:
			r = argRecord{tag: 1, number: float64(x)}
		case int:
			r = argRecord{tag: 1, number: float64(x)}
		case int64:
			r = argRecord{tag: 1, number: float64(x)}
		case int32:
			r = argRecord{tag: 1, number: float64(x)}
		case nil:
			r = argRecord{tag: 2}
		default:
			return nil, fmt.Errorf("zeroeng: argument %d is a %T: a handle-only call takes handles and numbers (Method takes anything JSON encodes)", i, a)
		}
		dst = append(dst, r)
	}
	return dst, nil
}

// Op calls method name of the handle's value with handles and numbers,
// without JSON (invoke_method), and returns its tensor result: the fast
// path for a step's many small operations (t.Op("add", u)). A method
// that returns undefined gives the zero Tensor (ID 0).
func (h Handle) Op(name string, args ...any) (Tensor, error) {
	recs, err := records(opArgs[:0], args)
	if err != nil {
		return Tensor{}, err
	}
	// The name's bytes as they are: the host only reads them.
	st := invokeMethod(h.ID, unsafe.Pointer(unsafe.StringData(name)), int32(len(name)), unsafe.Pointer(unsafe.SliceData(recs)), int32(len(recs)), unsafe.Pointer(&opOut))
	if err := fail(st); err != nil {
		return Tensor{}, err
	}
	return Tensor{Handle{ID: opOut, Kind: "tensor"}}, nil
}

// opArgs and opOut are the handle-only calls' arguments and result, kept
// out of the garbage collector's way (a step makes many such calls). A
// function of the program called back inside a call may use them again:
// the host has read the arguments before it calls anything, and writes
// the result after.
var (
	opArgs [maxArgs]argRecord
	opOut  int32
)

// maxArgs is the most arguments a handle-only call takes.
const maxArgs = 64

// Invoke calls the function handle (from Lookup or Func) with handles and
// numbers, without JSON, and returns its tensor result.
func (h Handle) Invoke(args ...any) (Tensor, error) {
	recs, err := records(opArgs[:0], args)
	if err != nil {
		return Tensor{}, err
	}
	if err := fail(invoke(h.ID, unsafe.Pointer(unsafe.SliceData(recs)), int32(len(recs)), unsafe.Pointer(&opOut))); err != nil {
		return Tensor{}, err
	}
	return Tensor{Handle{ID: opOut, Kind: "tensor"}}, nil
}
