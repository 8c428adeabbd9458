package script

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dop251/goja"
	"github.com/tetratelabs/wazero/api"

	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/suggest"
)

// The host functions of the program ABI (docs/wasm-program-abi.md), in
// the "zeroeng" host module beside the hook ABI's. Each returns a status;
// results go through the program's pointers. Every argument is checked
// (handles, pointers and lengths against the program's memory, dtypes,
// shapes): a bad one is a status and a pending failure, never a trap of
// the host.

// ProgramABIMinor is the minor version of the program ABI this host
// implements (abi_info): functions added without breaking programs.
const ProgramABIMinor = 1

// programFunc is a host function of the program ABI: its parameter
// types (all return an i32 status) and what it does.
type programFunc struct {
	params []api.ValueType
	fn     func(p *program, mem api.Memory, s []uint64) wasm.Status
	// exempt functions run even when an earlier call failed and the
	// program has not cleared the failure (they are how it looks at it).
	exempt bool
}

var programFuncs = map[string]programFunc{
	"abi_info":          {params: types(i32), fn: (*program).abiInfo, exempt: true},
	"error_message":     {params: types(i32, i32, i32), fn: (*program).errorMessage, exempt: true},
	"error_clear":       {params: types(), fn: (*program).errorClear, exempt: true},
	"call":              {params: types(i32, i32, i32, i32, i32, i32, i32), fn: (*program).call},
	"call_method":       {params: types(i32, i32, i32, i32, i32, i32, i32, i32), fn: (*program).callMethod},
	"get":               {params: types(i32, i32, i32, i32, i32, i32), fn: (*program).get},
	"set":               {params: types(i32, i32, i32, i32, i32), fn: (*program).set},
	"result_read":       {params: types(i32, i32), fn: (*program).resultRead},
	"release":           {params: types(i32), fn: (*program).release},
	"scope_open":        {params: types(i32), fn: (*program).scopeOpen},
	"scope_close":       {params: types(i32, i32, i32), fn: (*program).scopeClose},
	"grad_enabled":      {params: types(i32, i32), fn: (*program).gradEnabled},
	"tensor_from_bytes": {params: types(i32, i32, i32, i32, i32, i32), fn: (*program).tensorFromBytes},
	"tensor_data":       {params: types(i32, i32, i32, i32), fn: (*program).tensorData},
	"tensor_shape":      {params: types(i32, i32), fn: (*program).tensorShape},
	// 1.1: callbacks and handle-only calls (program_callback.go).
	"function_new":  {params: types(i32, i32), fn: (*program).functionNew},
	"frame_args":    {params: types(i32, i32, i32, i32), fn: (*program).frameArgs},
	"frame_return":  {params: types(i32, i32, i32), fn: (*program).frameReturn},
	"error_set":     {params: types(i32, i32), fn: (*program).errorSet, exempt: true},
	"lookup":        {params: types(i32, i32, i32), fn: (*program).lookup},
	"invoke":        {params: types(i32, i32, i32, i32), fn: (*program).invokeFunc},
	"invoke_method": {params: types(i32, i32, i32, i32, i32, i32), fn: (*program).invokeMethod},
	"forget":        {params: types(i32), fn: (*program).forget},
}

const i32 = api.ValueTypeI32

func types(ts ...api.ValueType) []api.ValueType { return ts }

// maxDims is the most dimensions tensor_shape reports and
// tensor_from_bytes takes.
const maxDims = 16

func init() {
	fns := map[string]wasm.HostFunc{}
	for name, f := range programFuncs {
		name, f := name, f
		fns[name] = wasm.HostFunc{Params: f.params, Results: types(i32), Fn: func(ctx context.Context, mod api.Module, s []uint64) {
			s[0] = uint64(hostCall(ctx, mod, name, f.exempt, f.fn, s))
		}}
	}
	wasm.RegisterProgramFuncs(fns)
	wasm.OutsideHook = func(ctx context.Context, mod api.Module, name string) wasm.Status {
		return hostCall(ctx, mod, name, false, func(p *program, _ api.Memory, _ []uint64) wasm.Status {
			return p.fail(name, wasm.ErrInvalid, fmt.Errorf("%s is a function of the comm-hook ABI (docs/wasm-hook-abi.md): it works only inside a hook, not in a program", name))
		}, nil)
	}
}

// hostCall runs host function name of the program calling it, fn with
// the call's stack s: not at all when the program has ended or goes on
// after a failure it did not clear. (No closure per call: a step makes
// many calls, and each allocation is the collector's work.)
func hostCall(ctx context.Context, mod api.Module, name string, exempt bool, fn func(p *program, mem api.Memory, s []uint64) wasm.Status, s []uint64) (st wasm.Status) {
	p, _ := ctx.Value(programKey{}).(*program)
	if p == nil {
		// A program's function called outside a program (a hook
		// importing it).
		return wasm.ErrInvalid
	}
	if p.exited != nil {
		// The program exited inside a callback or through an API
		// function that exits; a trusted program runs on to its next
		// call.
		mod.CloseWithExitCode(ctx, *p.exited)
		return wasm.ErrInvalid
	}
	if p.pending != nil && !exempt {
		// The program went on after a failure it did not look at: it
		// ends here, with the original message.
		p.abort = p.pending
		mod.CloseWithExitCode(ctx, 1)
		return wasm.ErrInvalid
	}
	p.mod, p.ctx = mod, ctx
	p.hostDepth++
	defer func() {
		p.hostDepth--
		// A Go panic of the API (a bug, not the program's) is the call's
		// failure rather than the process's.
		if v := recover(); v != nil {
			if e, ok := v.(argError); ok { // see native
				st = p.fail(name, wasm.ErrInvalid, errors.New(string(e)))
				return
			}
			st = p.fail(name, wasm.ErrInvalid, fmt.Errorf("internal error: %v", v))
		}
	}()
	return fn(p, mod.Memory(), s)
}

func u32(v uint64) uint32 { return uint32(v) }

// bytesAt returns n bytes of the program's memory at ptr.
func (p *program) bytesAt(fn string, mem api.Memory, ptr, n uint32) ([]byte, wasm.Status) {
	b, ok := mem.Read(ptr, n)
	if !ok {
		return nil, p.fail(fn, wasm.ErrBounds, fmt.Errorf("%d bytes at %d are outside the program's %d bytes of memory", n, ptr, mem.Size()))
	}
	return b, wasm.OK
}

// str returns the string of n bytes at ptr.
func (p *program) str(fn string, mem api.Memory, ptr, n uint32) (string, wasm.Status) {
	b, st := p.bytesAt(fn, mem, ptr, n)
	if st != wasm.OK || len(b) > 64 {
		return string(b), st
	}
	// The names a step calls again and again ("add", "forward") are
	// interned: no string made per call. (A map index by string(b) does
	// not allocate.)
	if s, ok := p.names[string(b)]; ok {
		return s, st
	}
	s := string(b)
	if len(p.names) < 4096 {
		p.names[s] = s
	}
	return s, st
}

// writable checks, before a call makes anything, that the n bytes at ptr
// where its result goes are the program's: a result that could not be
// written would leave what the call made (a tensor, its handle) held
// with no one to release it.
func (p *program) writable(fn string, mem api.Memory, ptr, n uint32) wasm.Status {
	if _, ok := mem.Read(ptr, n); !ok {
		return p.fail(fn, wasm.ErrBounds, fmt.Errorf("the result's %d bytes at %d are outside the program's %d bytes of memory", n, ptr, mem.Size()))
	}
	return wasm.OK
}

// resultWritable checks a JSON result's buffer (out, capacity) and the
// place of its length (lenOut).
func (p *program) resultWritable(fn string, mem api.Memory, out, capacity, lenOut uint32) wasm.Status {
	if st := p.writable(fn, mem, out, capacity); st != wasm.OK {
		return st
	}
	return p.writable(fn, mem, lenOut, 4)
}

// putU32 writes v at ptr.
func (p *program) putU32(fn string, mem api.Memory, ptr, v uint32) wasm.Status {
	if !mem.WriteUint32Le(ptr, v) {
		return p.fail(fn, wasm.ErrBounds, fmt.Errorf("4 bytes at %d are outside the program's %d bytes of memory", ptr, mem.Size()))
	}
	return wasm.OK
}

// abiInfo writes the ABI's major and minor versions (two u32).
func (p *program) abiInfo(mem api.Memory, s []uint64) wasm.Status {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:], wasm.ProgramABIVersion)
	binary.LittleEndian.PutUint32(b[4:], ProgramABIMinor)
	if !mem.Write(u32(s[0]), b[:]) {
		return p.fail("abi_info", wasm.ErrBounds, fmt.Errorf("8 bytes at %d are outside the program's memory", u32(s[0])))
	}
	return wasm.OK
}

// errorMessage writes the pending failure's message (cap bytes at most)
// and its whole length; no failure is the empty message.
func (p *program) errorMessage(mem api.Memory, s []uint64) wasm.Status {
	var msg []byte
	if p.pending != nil {
		msg = []byte(p.pending.Error())
	}
	buf, capacity, lenOut := u32(s[0]), u32(s[1]), u32(s[2])
	if !mem.Write(buf, msg[:min(len(msg), int(capacity))]) || !mem.WriteUint32Le(lenOut, uint32(len(msg))) {
		// No pending failure to write over: this one is the program's.
		return wasm.ErrBounds
	}
	return wasm.OK
}

func (p *program) errorClear(api.Memory, []uint64) wasm.Status {
	p.pending = nil
	return wasm.OK
}

// result writes a call's result as JSON into the program's buffer, or
// keeps it for result_read when it does not fit (ERR_SIZE, not a
// failure: the call happened); its length goes to lenOut either way.
func (p *program) result(fn string, mem api.Memory, v goja.Value, out, capacity, lenOut uint32) wasm.Status {
	b, err := p.toJSON(v)
	if err != nil {
		return p.fail(fn, wasm.ErrLimit, err)
	}
	if st := p.putU32(fn, mem, lenOut, uint32(len(b))); st != wasm.OK {
		return st
	}
	if uint32(len(b)) > capacity {
		p.kept = b
		return wasm.ErrSize
	}
	if !mem.Write(out, b) {
		return p.fail(fn, wasm.ErrBounds, fmt.Errorf("%d bytes at %d are outside the program's memory", len(b), out))
	}
	p.kept = nil
	return wasm.OK
}

// resultRead writes the result a call kept (ERR_SIZE): cap must hold it.
func (p *program) resultRead(mem api.Memory, s []uint64) wasm.Status {
	const fn = "result_read"
	out, capacity := u32(s[0]), u32(s[1])
	if p.kept == nil {
		return p.fail(fn, wasm.ErrInvalid, errors.New("no result is waiting: the last call's fitted its buffer (or was read already)"))
	}
	if uint32(len(p.kept)) > capacity {
		return p.fail(fn, wasm.ErrSize, fmt.Errorf("the result is %d bytes, the buffer %d", len(p.kept), capacity))
	}
	if !mem.Write(out, p.kept) {
		return p.fail(fn, wasm.ErrBounds, fmt.Errorf("%d bytes at %d are outside the program's memory", len(p.kept), out))
	}
	p.kept = nil
	return wasm.OK
}

// args decodes a call's arguments: a JSON array (empty for no bytes).
func (p *program) args(fn string, mem api.Memory, ptr, n uint32) ([]goja.Value, wasm.Status) {
	if n == 0 {
		return nil, wasm.OK
	}
	b, st := p.bytesAt(fn, mem, ptr, n)
	if st != wasm.OK {
		return nil, st
	}
	v, err := p.fromJSON(b)
	if err != nil {
		return nil, p.fail(fn, jsonStatus(err), fmt.Errorf("the arguments: %w", err))
	}
	obj, ok := v.(*goja.Object)
	if !ok || obj.ClassName() != "Array" {
		return nil, p.fail(fn, wasm.ErrInvalid, errors.New("the arguments must be a JSON array"))
	}
	n2 := int(obj.Get("length").ToInteger())
	vals := make([]goja.Value, n2)
	for i := range vals {
		vals[i] = obj.Get(fmt.Sprint(i))
	}
	return vals, wasm.OK
}

// jsonStatus is the status of JSON that did not decode: ERR_HANDLE for a
// handle the program does not hold, ERR_INVALID otherwise.
func jsonStatus(err error) wasm.Status {
	var he handleError
	if errors.As(err, &he) {
		return wasm.ErrHandle
	}
	return wasm.ErrInvalid
}

// invoke calls f (with this, or as a constructor) and returns its value,
// or records the error it raised.
func (p *program) invoke(fn string, what string, f, this goja.Value, args []goja.Value, construct bool) (goja.Value, wasm.Status) {
	v, err := p.r.run(func() (goja.Value, error) {
		if construct {
			ctor, ok := f.(*goja.Object)
			if !ok {
				return nil, fmt.Errorf("%s is not a constructor", what)
			}
			return p.r.vm.New(ctor, args...)
		}
		callable, ok := goja.AssertFunction(f)
		if !ok {
			return nil, fmt.Errorf("%s is not a function (%s)", what, describe(f))
		}
		return callable(this, args...)
	})
	var se *Error
	if errors.As(err, &se) && se.Exit != nil {
		// The API ended the run (SIGTERM's checkpoint exits with status 0
		// after saving): the program ends there, with that status.
		code := uint32(se.Exit.Code)
		p.exited = &code
		p.mod.CloseWithExitCode(p.ctx, code)
		return nil, wasm.ErrCall
	}
	if errors.As(err, &se) && !strings.Contains(se.Message, what) {
		// The message names the call (most of the API's do already).
		err = &Error{Message: what + ": " + se.Message, Cause: se.Cause}
	}
	if err != nil {
		return nil, p.fail(fn, wasm.ErrCall, err)
	}
	return v, wasm.OK
}

// call calls the API function at a dotted path of require("zeroeng")
// ("nn.functional.crossEntropy"; "new nn.Linear" constructs); a
// path to a value that is not a function, with no arguments, reads it
// (dist.rank).
func (p *program) call(mem api.Memory, s []uint64) wasm.Status {
	const fn = "call"
	path, st := p.str(fn, mem, u32(s[0]), u32(s[1]))
	if st != wasm.OK {
		return st
	}
	if st := p.resultWritable(fn, mem, u32(s[4]), u32(s[5]), u32(s[6])); st != wasm.OK {
		return st
	}
	args, st := p.args(fn, mem, u32(s[2]), u32(s[3]))
	if st != wasm.OK {
		return st
	}
	construct := false
	if rest, ok := strings.CutPrefix(path, "new "); ok {
		path, construct = rest, true
	}
	this, v, err := p.resolve(path)
	if err != nil {
		return p.fail(fn, wasm.ErrInvalid, err)
	}
	if _, isFn := goja.AssertFunction(v); !isFn && !construct && len(args) == 0 {
		// A value of the API (dist.rank, metrics.enabled): read.
		return p.result(fn, mem, v, u32(s[4]), u32(s[5]), u32(s[6]))
	}
	res, st := p.invoke(fn, path, v, this, args, construct)
	if st != wasm.OK {
		return st
	}
	return p.result(fn, mem, res, u32(s[4]), u32(s[5]), u32(s[6]))
}

// resolve returns the API's value at a dotted path and the object it is
// a property of.
func (p *program) resolve(path string) (this, v goja.Value, err error) {
	this, v = p.api, p.api
	for _, name := range strings.Split(path, ".") {
		obj, ok := v.(*goja.Object)
		if name == "" || !ok {
			return nil, nil, fmt.Errorf("%q is not a path of the API (require(\"zeroeng\")): %q names nothing", path, name)
		}
		if reservedName(name) {
			return nil, nil, fmt.Errorf("%q is not in the API (require(\"zeroeng\")): %q is not a member a program may reach", path, name)
		}
		this, v = obj, obj.Get(name)
		if v == nil || goja.IsUndefined(v) {
			return nil, nil, fmt.Errorf("%q is not in the API (require(\"zeroeng\"))%s", path, suggestKey(obj, name))
		}
	}
	return this, v, nil
}

// suggestKey names the key of obj closest to name, if one is close.
func suggestKey(obj *goja.Object, name string) string {
	if best := suggest.Closest(name, obj.Keys()); best != "" {
		return fmt.Sprintf(": did you mean %s?", best)
	}
	return ""
}

// member returns the handle of s[0] and the name at s[1], s[2]: what
// call_method, get and set act on.
func (p *program) member(fn string, mem api.Memory, s []uint64) (programHandle, string, wasm.Status) {
	h, err := p.live(u32(s[0]), "")
	if err != nil {
		return programHandle{}, "", p.fail(fn, wasm.ErrHandle, err)
	}
	name, st := p.str(fn, mem, u32(s[1]), u32(s[2]))
	if st == wasm.OK && reservedName(name) {
		return programHandle{}, "", p.fail(fn, wasm.ErrInvalid, fmt.Errorf("%q is not a member a program may reach", name))
	}
	return h, name, st
}

// reservedName reports whether name reaches JavaScript's machinery rather
// than the API: a program that walks to constructor.constructor would
// hold JavaScript's Function, and run any script it likes.
func reservedName(name string) bool {
	switch name {
	case "constructor", "__proto__", "prototype", "caller", "callee", "arguments":
		return true
	}
	return strings.HasPrefix(name, "__")
}

// invokeMember calls method name of h's value with args.
func (p *program) invokeMember(fn string, h programHandle, name string, args []goja.Value) (goja.Value, wasm.Status) {
	obj := h.v.ToObject(p.r.vm)
	m := obj.Get(name)
	if m == nil || goja.IsUndefined(m) {
		return nil, p.fail(fn, wasm.ErrInvalid, fmt.Errorf("a %s has no method %s", h.kind, name))
	}
	return p.invoke(fn, h.kind+"."+name, m, obj, args, false)
}

// callMethod calls method name of handle h's value.
func (p *program) callMethod(mem api.Memory, s []uint64) wasm.Status {
	const fn = "call_method"
	h, name, st := p.member(fn, mem, s)
	if st != wasm.OK {
		return st
	}
	if st := p.resultWritable(fn, mem, u32(s[5]), u32(s[6]), u32(s[7])); st != wasm.OK {
		return st
	}
	args, st := p.args(fn, mem, u32(s[3]), u32(s[4]))
	if st != wasm.OK {
		return st
	}
	res, st := p.invokeMember(fn, h, name, args)
	if st != wasm.OK {
		return st
	}
	return p.result(fn, mem, res, u32(s[5]), u32(s[6]), u32(s[7]))
}

// get reads property name of handle h's value.
func (p *program) get(mem api.Memory, s []uint64) wasm.Status {
	const fn = "get"
	h, name, st := p.member(fn, mem, s)
	if st != wasm.OK {
		return st
	}
	if st := p.resultWritable(fn, mem, u32(s[3]), u32(s[4]), u32(s[5])); st != wasm.OK {
		return st
	}
	var v goja.Value
	if exc := p.r.vm.Try(func() { v = h.v.ToObject(p.r.vm).Get(name) }); exc != nil {
		return p.fail(fn, wasm.ErrCall, fmt.Errorf("%s.%s: %w", h.kind, name, p.r.scriptError(exc)))
	}
	return p.result(fn, mem, v, u32(s[3]), u32(s[4]), u32(s[5]))
}

// set writes property name of handle h's value (JSON).
func (p *program) set(mem api.Memory, s []uint64) wasm.Status {
	const fn = "set"
	h, name, st := p.member(fn, mem, s)
	if st != wasm.OK {
		return st
	}
	b, st := p.bytesAt(fn, mem, u32(s[3]), u32(s[4]))
	if st != wasm.OK {
		return st
	}
	v, err := p.fromJSON(b)
	if err != nil {
		return p.fail(fn, jsonStatus(err), fmt.Errorf("the value: %w", err))
	}
	if _, err := p.r.run(func() (goja.Value, error) { return nil, h.v.ToObject(p.r.vm).Set(name, v) }); err != nil {
		return p.fail(fn, wasm.ErrCall, fmt.Errorf("%s.%s = ...: %w", h.kind, name, err))
	}
	return wasm.OK
}

// release gives handle h back: a tensor the program owns goes back to the
// memory pool (as t.release() does), a borrowed one (a parameter, a
// gradient) and any other value are only forgotten.
func (p *program) release(mem api.Memory, s []uint64) wasm.Status {
	id := u32(s[0])
	h, err := p.handle(id, "")
	if err != nil {
		return p.fail("release", wasm.ErrHandle, err)
	}
	delete(p.handles, id)
	if h.j != nil {
		h.j.releaseWith("by the program's release of its handle")
	}
	return wasm.OK
}

// forget gives handle h back without releasing its tensor, which goes by
// the scripts' lifetime rules (its scope, its generation, autograd's
// needs), as a script's variable going out of scope: what an SDK's
// destructor does, since the tensor may be the API's too (a module's
// buffer, a dataset's data, the receiver an in-place method returns).
func (p *program) forget(mem api.Memory, s []uint64) wasm.Status {
	id := u32(s[0])
	if _, err := p.handle(id, ""); err != nil {
		return p.fail("forget", wasm.ErrHandle, err)
	}
	delete(p.handles, id)
	return wasm.OK
}

// scopeOpen opens a scope (tensor.scope): the tensors made until its
// scope_close go back then, but those it keeps.
func (p *program) scopeOpen(mem api.Memory, s []uint64) wasm.Status {
	p.nscope++
	p.scopes[p.nscope] = p.r.life.openScope()
	if st := p.putU32("scope_open", mem, u32(s[0]), p.nscope); st != wasm.OK {
		p.r.life.closeScope(p.scopes[p.nscope], nil, "at the end of a scope of the program")
		delete(p.scopes, p.nscope)
		return st
	}
	return wasm.OK
}

// scopeClose closes scope id, the innermost, keeping the tensors of the n
// handles at keep (u32 each), which move to the enclosing scope.
func (p *program) scopeClose(mem api.Memory, s []uint64) wasm.Status {
	const fn = "scope_close"
	id, keep, n := u32(s[0]), u32(s[1]), u32(s[2])
	list, ok := p.scopes[id]
	if !ok {
		return p.fail(fn, wasm.ErrHandle, fmt.Errorf("scope %d is not open", id))
	}
	if l := p.r.life.scopes; len(l) == 0 || l[len(l)-1] != list {
		return p.fail(fn, wasm.ErrInvalid, fmt.Errorf("scope %d is not the innermost open scope: close the scopes in the reverse order of their opening", id))
	}
	if int(n) > maxProgramHandles {
		return p.fail(fn, wasm.ErrSize, fmt.Errorf("%d handles to keep", n))
	}
	ids, st := p.bytesAt(fn, mem, keep, 4*n)
	if st != wasm.OK {
		return st
	}
	var kept []*jsTensor
	for i := range n {
		h, err := p.live(binary.LittleEndian.Uint32(ids[4*i:]), "tensor")
		if err != nil {
			return p.fail(fn, wasm.ErrHandle, fmt.Errorf("kept handle %d: %w", i, err))
		}
		kept = append(kept, h.j)
	}
	delete(p.scopes, id)
	p.r.life.closeScope(list, kept, "at the end of the program's scope that made it")
	return wasm.OK
}

// gradEnabled turns autograd's recording on or off (tensor.noGrad) and
// writes whether it was on (u32 0 or 1).
func (p *program) gradEnabled(mem api.Memory, s []uint64) wasm.Status {
	was := uint32(0)
	if p.r.rt.GradEnabled() {
		was = 1
	}
	if st := p.putU32("grad_enabled", mem, u32(s[1]), was); st != wasm.OK {
		return st
	}
	p.r.rt.SetGradEnabled(u32(s[0]) != 0)
	return wasm.OK
}

// dtypeArg is the engine's dtype of ABI code c.
func (p *program) dtypeArg(fn string, c uint32) (dtype.DType, wasm.Status) {
	if int(c) >= len(wasm.DTypeCodes) {
		return dtype.Invalid, p.fail(fn, wasm.ErrDType, fmt.Errorf("dtype code %d (0 float32, 1 float16, 2 bfloat16, 3 int64, 4 float64, 5 int32, 6 uint8, 7 bool)", c))
	}
	return wasm.DTypeCodes[c], wasm.OK
}

// tensorFromBytes makes a tensor of dtype and shape (ndim i64 at shape)
// from nbytes at data, and writes its handle.
func (p *program) tensorFromBytes(mem api.Memory, s []uint64) wasm.Status {
	const fn = "tensor_from_bytes"
	dt, st := p.dtypeArg(fn, u32(s[0]))
	if st != wasm.OK {
		return st
	}
	if st := p.writable(fn, mem, u32(s[5]), 4); st != wasm.OK {
		return st
	}
	ndim := u32(s[2])
	if ndim > maxDims {
		return p.fail(fn, wasm.ErrSize, fmt.Errorf("%d dimensions, at most %d", ndim, maxDims))
	}
	sb, st := p.bytesAt(fn, mem, u32(s[1]), 8*ndim)
	if st != wasm.OK {
		return st
	}
	shape := make([]int, ndim)
	for i := range shape {
		d := int64(binary.LittleEndian.Uint64(sb[8*i:]))
		if d < 0 {
			return p.fail(fn, wasm.ErrSize, fmt.Errorf("dimension %d is %d", i, d))
		}
		shape[i] = int(d)
	}
	if err := tensor.CheckShape(dt, shape...); err != nil {
		return p.fail(fn, wasm.ErrSize, err)
	}
	numel := 1
	for _, d := range shape {
		numel *= d
	}
	if want := numel * dt.Size(); uint32(want) != u32(s[4]) || want > 1<<32-1 {
		return p.fail(fn, wasm.ErrSize, fmt.Errorf("a %v tensor of shape %v is %d bytes, not %d", dt, shape, want, u32(s[4])))
	}
	data, st := p.bytesAt(fn, mem, u32(s[3]), u32(s[4]))
	if st != wasm.OK {
		return st
	}
	t := p.r.rt.FromBytes(dt, data, shape...)
	if err := t.Err(); err != nil {
		return p.fail(fn, wasm.ErrNoMem, err)
	}
	j := &jsTensor{r: p.r, t: t.Persist()}
	j.obj = p.r.vm.NewDynamicObject(j)
	p.r.life.track(j)
	id, err := p.add(programHandle{kind: "tensor", v: j.obj, j: j})
	if err != nil {
		j.releaseWith("")
		return p.fail(fn, wasm.ErrLimit, err)
	}
	return p.putU32(fn, mem, u32(s[5]), id)
}

// tensorArg returns handle v's tensor, alive.
func (p *program) tensorArg(fn string, v uint64) (*jsTensor, wasm.Status) {
	h, err := p.live(u32(v), "tensor")
	if err != nil {
		return nil, p.fail(fn, wasm.ErrHandle, err)
	}
	return h.j, wasm.OK
}

// tensorData writes the bytes of handle h's tensor (row-major, its dtype)
// and their length; a buffer too small takes nothing (ERR_SIZE).
func (p *program) tensorData(mem api.Memory, s []uint64) wasm.Status {
	const fn = "tensor_data"
	j, st := p.tensorArg(fn, s[0])
	if st != wasm.OK {
		return st
	}
	b, err := j.t.Bytes()
	if err != nil {
		return p.fail(fn, wasm.ErrCall, err)
	}
	if st := p.putU32(fn, mem, u32(s[3]), uint32(len(b))); st != wasm.OK {
		return st
	}
	if uint32(len(b)) > u32(s[2]) {
		return wasm.ErrSize // not a failure: the length says what to make room for
	}
	if !mem.Write(u32(s[1]), b) {
		return p.fail(fn, wasm.ErrBounds, fmt.Errorf("%d bytes at %d are outside the program's memory", len(b), u32(s[1])))
	}
	return wasm.OK
}

// tensorShape writes u32 dtype code, u32 ndim, then ndim i64 dimensions.
func (p *program) tensorShape(mem api.Memory, s []uint64) wasm.Status {
	const fn = "tensor_shape"
	j, st := p.tensorArg(fn, s[0])
	if st != wasm.OK {
		return st
	}
	code := slices.Index(wasm.DTypeCodes[:], j.t.DType())
	if code < 0 {
		return p.fail(fn, wasm.ErrDType, fmt.Errorf("the tensor's dtype %v has no code", j.t.DType()))
	}
	shape := j.t.Shape()
	b := binary.LittleEndian.AppendUint32(nil, uint32(code))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(shape)))
	for _, d := range shape {
		b = binary.LittleEndian.AppendUint64(b, uint64(d))
	}
	if !mem.Write(u32(s[1]), b) {
		return p.fail(fn, wasm.ErrBounds, fmt.Errorf("%d bytes at %d are outside the program's memory", len(b), u32(s[1])))
	}
	return wasm.OK
}
