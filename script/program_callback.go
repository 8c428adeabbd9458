package script

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/tetratelabs/wazero/api"

	"github.com/zeroeng/zeroeng/hooks/wasm"
)

// ABI 1.1 (docs/wasm-program-abi.md): the program's own functions as
// values of the API (callbacks), and calls whose arguments and result are
// handles and numbers, with no JSON on either side.
//
// A callback is a script function that calls the program's export
// zeroeng_callback(id, frame): whatever takes a function — nn.utils.checkpoint,
// zero.init, a comm hook, a module's forward — takes it, and calls it on
// the rank's goroutine, inside the host call of the program that led to
// it, as it would call a script's function. The guest's stack is wazero's
// own, so host and guest frames nest as deeply as the guest's stack
// allows.

// callbackExport is the export every callback of a program calls.
const callbackExport = "zeroeng_callback"

// maxFrames bounds how deeply the program's functions nest.
const maxFrames = 1000

// maxInvokeArgs bounds the arguments of invoke and invoke_method.
const maxInvokeArgs = 64

// programFrame is one running call of a callback.
type programFrame struct {
	id   uint32
	args []goja.Value
	// given are the handles the frame gave out for its arguments and the
	// handles its return value named: forgotten when it returns.
	given []uint32
	ret   goja.Value
}

// functionNew makes a function value that calls the program's callback
// export with the program's id, and writes its handle.
func (p *program) functionNew(mem api.Memory, s []uint64) wasm.Status {
	const fn = "function_new"
	id := u32(s[0])
	if st := p.writable(fn, mem, u32(s[1]), 4); st != wasm.OK {
		return st
	}
	f := p.mod.ExportedFunction(callbackExport)
	if f == nil {
		return p.fail(fn, wasm.ErrInvalid, fmt.Errorf("the program exports no %s(id i32, frame i32) -> i32, which its functions call", callbackExport))
	}
	if d := f.Definition(); !slices.Equal(d.ParamTypes(), types(i32, i32)) || !slices.Equal(d.ResultTypes(), types(i32)) {
		return p.fail(fn, wasm.ErrInvalid, fmt.Errorf("the program's %s has the wrong type: want (i32, i32) -> i32", callbackExport))
	}
	v := p.r.vm.ToValue(func(call goja.FunctionCall) goja.Value {
		return p.callback(id, call.Arguments)
	})
	h, err := p.add(programHandle{kind: "function", v: v})
	if err != nil {
		return p.fail(fn, wasm.ErrLimit, err)
	}
	return p.putU32(fn, mem, u32(s[1]), h)
}

// callback runs the program's callback id with args in a new frame and
// returns what it returned; a failure throws, as a script function's
// error does.
func (p *program) callback(id uint32, args []goja.Value) goja.Value {
	if p.hostDepth == 0 {
		// Called from outside a host call of the program (another
		// goroutine, or after it ended): the guest is not where it can
		// take a call.
		p.r.throwf("the program's function %d was called while the program was not calling the host", id)
	}
	if len(p.frames) >= maxFrames {
		// Each level holds a host stack too: a function that calls
		// itself without end would exhaust the process's, not the
		// guest's.
		p.r.throw(fmt.Errorf("the program's functions nest %d deep, the most they may: a function that calls itself without end?", maxFrames))
	}
	// A wazero function keeps its call's stack: a call nested in another
	// of the same function needs a function of its own (one per depth,
	// kept), or it would run on the outer call's stack and corrupt it.
	for len(p.callbackFns) <= len(p.frames) {
		p.callbackFns = append(p.callbackFns, p.mod.ExportedFunction(callbackExport))
	}
	f := p.callbackFns[len(p.frames)]
	p.nframe++
	fr := &programFrame{id: p.nframe, args: slices.Clone(args)}
	p.frames = append(p.frames, fr)
	depth := p.hostDepth
	res, err := f.Call(p.ctx, uint64(id), uint64(fr.id))
	p.hostDepth = depth
	p.frames = p.frames[:len(p.frames)-1]
	for _, h := range fr.given {
		// Forgotten, not released: the arguments are the caller's, the
		// returned values are now the caller's.
		delete(p.handles, h)
	}
	pending := p.pending
	p.pending = nil
	switch {
	case p.exited != nil:
		panic(p.r.vm.NewGoError(&ExitError{Code: int(*p.exited)}))
	case err != nil:
		p.r.throw(fmt.Errorf("the program's function %d: %w", id, p.exit(err)))
	case pending != nil:
		// The program's message, without the program's name, which the
		// call that led here puts in front again.
		p.r.throw(fmt.Errorf("the program's function %d failed: %s", id, strings.TrimPrefix(pending.Error(), p.name+": ")))
	case int32(res[0]) != 0:
		p.r.throw(fmt.Errorf("the program's function %d returned status %d", id, int32(res[0])))
	}
	if fr.ret == nil {
		return goja.Undefined()
	}
	return fr.ret
}

// exit turns a callback's end by proc_exit into the program's: the module
// is closed with the status, so the outer guest frames stop too.
func (p *program) exit(err error) error {
	err = wasm.ExitStatus(err)
	var exit *wasm.ExitError
	if err == nil || errors.As(err, &exit) {
		code := uint32(0)
		if exit != nil {
			code = exit.Code
		}
		p.exited = &code
		return &ExitError{Code: int(code)}
	}
	return err
}

// frame returns the running frame id names: only the innermost one.
func (p *program) frame(fn string, id uint32) (*programFrame, wasm.Status) {
	if len(p.frames) == 0 || p.frames[len(p.frames)-1].id != id {
		running := "none is running"
		if len(p.frames) > 0 {
			running = fmt.Sprintf("the innermost running one is %d", p.frames[len(p.frames)-1].id)
		}
		return nil, p.fail(fn, wasm.ErrHandle, fmt.Errorf("frame %d is not the innermost running callback's (%s)", id, running))
	}
	return p.frames[len(p.frames)-1], wasm.OK
}

// frameArgs writes the running callback's arguments as a JSON array; the
// handles it gives out are the frame's.
func (p *program) frameArgs(mem api.Memory, s []uint64) wasm.Status {
	const fn = "frame_args"
	fr, st := p.frame(fn, u32(s[0]))
	if st != wasm.OK {
		return st
	}
	if st := p.resultWritable(fn, mem, u32(s[1]), u32(s[2]), u32(s[3])); st != wasm.OK {
		return st
	}
	p.given = &fr.given
	defer func() { p.given = nil }()
	return p.result(fn, mem, p.r.vm.NewArray(anySlice(fr.args)...), u32(s[1]), u32(s[2]), u32(s[3]))
}

func anySlice(vs []goja.Value) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// frameReturn sets the running callback's return value (JSON); the
// handles it names pass to the caller.
func (p *program) frameReturn(mem api.Memory, s []uint64) wasm.Status {
	const fn = "frame_return"
	fr, st := p.frame(fn, u32(s[0]))
	if st != wasm.OK {
		return st
	}
	b, st := p.bytesAt(fn, mem, u32(s[1]), u32(s[2]))
	if st != wasm.OK {
		return st
	}
	p.given = &fr.given
	v, err := p.fromJSON(b)
	p.given = nil
	if err != nil {
		return p.fail(fn, jsonStatus(err), fmt.Errorf("the value: %w", err))
	}
	fr.ret = v
	return wasm.OK
}

// errorSet records the program's own failure, pending.
func (p *program) errorSet(mem api.Memory, s []uint64) wasm.Status {
	msg, st := p.str("error_set", mem, u32(s[0]), u32(s[1]))
	if st != wasm.OK {
		return st
	}
	// An SDK passing on a host call's failure gives its message, which
	// names the program already.
	msg = strings.ToValidUTF8(strings.TrimPrefix(msg, p.name+": "), string(utf8.RuneError))
	if msg == "" {
		msg = "(the program set an empty error message)"
	}
	p.pending = &Error{Message: fmt.Sprintf("%s: %s", p.name, msg)}
	return wasm.OK
}

// lookup writes a handle to the API's value at a dotted path.
func (p *program) lookup(mem api.Memory, s []uint64) wasm.Status {
	const fn = "lookup"
	path, st := p.str(fn, mem, u32(s[0]), u32(s[1]))
	if st != wasm.OK {
		return st
	}
	if st := p.writable(fn, mem, u32(s[2]), 4); st != wasm.OK {
		return st
	}
	this, v, err := p.resolve(path)
	if err != nil {
		return p.fail(fn, wasm.ErrInvalid, err)
	}
	h, ok := p.valueHandle(v)
	if !ok {
		return p.fail(fn, wasm.ErrInvalid, fmt.Errorf("%q is data (%s), not a function or an object: call reads it", path, describe(v)))
	}
	h.this = this
	id, err := p.add(h)
	if err != nil {
		return p.fail(fn, wasm.ErrLimit, err)
	}
	return p.putU32(fn, mem, u32(s[2]), id)
}

// invokeArgs decodes n argument records at ptr: u32 tag (0 a handle, 1 a
// number, 2 undefined), u32 handle, f64 number.
func (p *program) invokeArgs(fn string, mem api.Memory, ptr, n uint32) ([]goja.Value, wasm.Status) {
	if n > maxInvokeArgs {
		return nil, p.fail(fn, wasm.ErrSize, fmt.Errorf("%d arguments, at most %d", n, maxInvokeArgs))
	}
	b, st := p.bytesAt(fn, mem, ptr, 16*n)
	if st != wasm.OK {
		return nil, st
	}
	// One buffer per depth of host calls (a callback's calls nest inside
	// this one's): the API clones what it keeps, as it does for goja's
	// own argument stack.
	for len(p.argBufs) < p.hostDepth {
		p.argBufs = append(p.argBufs, make([]goja.Value, 0, 8))
	}
	args := append(p.argBufs[p.hostDepth-1][:0], make([]goja.Value, n)...)
	p.argBufs[p.hostDepth-1] = args
	for i := range args {
		rec := b[16*i:]
		switch tag := binary.LittleEndian.Uint32(rec); tag {
		case 0:
			h, err := p.live(binary.LittleEndian.Uint32(rec[4:]), "")
			if err != nil {
				return nil, p.fail(fn, wasm.ErrHandle, fmt.Errorf("argument %d: %w", i, err))
			}
			args[i] = h.v
		case 1:
			args[i] = p.r.vm.ToValue(math.Float64frombits(binary.LittleEndian.Uint64(rec[8:])))
		case 2:
			args[i] = goja.Undefined()
		default:
			return nil, p.fail(fn, wasm.ErrInvalid, fmt.Errorf("argument %d has tag %d (0 a handle, 1 a number, 2 undefined)", i, tag))
		}
	}
	return args, wasm.OK
}

// resultHandle writes the handle of a handle-only call's result (0 for
// undefined or null); data is the JSON calls' to return.
func (p *program) resultHandle(fn, what string, mem api.Memory, v goja.Value, out uint32) wasm.Status {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return p.putU32(fn, mem, out, 0)
	}
	h, ok := p.valueHandle(v)
	if !ok {
		return p.fail(fn, wasm.ErrInvalid, fmt.Errorf("%s returned data (%s), which a handle does not stand for: call and call_method return data as JSON", what, describe(v)))
	}
	id, err := p.add(h)
	if err != nil {
		return p.fail(fn, wasm.ErrLimit, err)
	}
	return p.putU32(fn, mem, out, id)
}

// invokeFunc calls function handle f with handle and number arguments.
func (p *program) invokeFunc(mem api.Memory, s []uint64) wasm.Status {
	const fn = "invoke"
	h, err := p.handle(u32(s[0]), "function")
	if err != nil {
		return p.fail(fn, wasm.ErrHandle, err)
	}
	if st := p.writable(fn, mem, u32(s[3]), 4); st != wasm.OK {
		return st
	}
	args, st := p.invokeArgs(fn, mem, u32(s[1]), u32(s[2]))
	if st != wasm.OK {
		return st
	}
	this := h.this
	if this == nil {
		this = goja.Undefined()
	}
	res, st := p.invoke(fn, "function", h.v, this, args, false)
	if st != wasm.OK {
		return st
	}
	return p.resultHandle(fn, "the function", mem, res, u32(s[3]))
}

// invokeMethod calls method name of handle h's value with handle and
// number arguments.
func (p *program) invokeMethod(mem api.Memory, s []uint64) wasm.Status {
	const fn = "invoke_method"
	h, name, st := p.member(fn, mem, s)
	if st != wasm.OK {
		return st
	}
	if st := p.writable(fn, mem, u32(s[5]), 4); st != wasm.OK {
		return st
	}
	args, st := p.invokeArgs(fn, mem, u32(s[3]), u32(s[4]))
	if st != wasm.OK {
		return st
	}
	res, st := p.invokeMember(fn, h, name, args)
	if st != wasm.OK {
		return st
	}
	return p.resultHandle(fn, h.kind+"."+name, mem, res, u32(s[5]))
}
