package script

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/tetratelabs/wazero/api"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/hooks/wasm"
)

// Training programs in WebAssembly (docs/wasm-program-abi.md). A program is
// a WASI command that every rank runs, as it would run a script; its host
// functions reach the same API as require("zeroeng") — the very functions
// and methods the scripts call, with their option checks, errors and
// tensor lifetimes — by name: call("nn.functional.crossEntropy", args)
// with the arguments as JSON, handles standing for tensors and objects.
// There is no second implementation of anything a script can do: the
// program's calls are dispatched to the JavaScript API's functions (most
// of them Go functions), and what the API returns comes back as JSON.

// IsProgram reports whether path names a WebAssembly training program
// rather than a script: a regular file whose first bytes are WebAssembly's
// magic. (Anything else is the script path's to refuse: opening a FIFO to
// look would wait for a writer.)
func IsProgram(path string) bool {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "\x00asm"
}

// program is one rank's instance of a training program.
type program struct {
	r    *Runtime
	name string
	api  *goja.Object // require("zeroeng")
	// objectProto and functionProto tell plain data and plain functions
	// from the API's objects (isPlain, appendJSON).
	objectProto, functionProto *goja.Object

	handles map[uint32]programHandle
	next    uint32
	scopes  map[uint32]*tensorList
	nscope  uint32

	// pending is the failure of a host call the program has not cleared
	// (error_clear): the next call, or the end of the program, fails the
	// rank with it. result is a call's result that did not fit the
	// program's buffer (kept), until result_read takes it.
	pending error
	kept    []byte
	// abort is the failure that ended the program: a call after a
	// failure it did not clear.
	abort error

	// What the host calls into the program with (callbacks): the
	// instance, the context of its run, and how many host calls of the
	// program are running (callbacks run only inside one).
	prog      *wasm.Program
	mod       api.Module
	ctx       context.Context
	hostDepth int
	// frames are the running callbacks, innermost last; given collects
	// the handles a frame gives out or takes back (program_callback.go).
	frames      []*programFrame
	nframe      uint32
	given       *[]uint32
	callbackFns []api.Function // zeroeng_callback, one for each depth of nesting
	argBufs     [][]goja.Value // invoke's arguments, one for each depth of host calls
	names       map[string]string
	// exited is the status the program ended with, by proc_exit in a
	// callback or by an API function that exits (SIGTERM's checkpoint).
	exited *uint32
}

// programHandle is what a handle stands for: a tensor (j) or another value
// of the API (a module, an optimizer, a function).
type programHandle struct {
	kind string // "tensor", "object", "function"
	v    goja.Value
	j    *jsTensor
	// this is what a function from lookup is called on: the object it
	// was read from.
	this goja.Value
}

// maxProgramHandles bounds the handles a program holds at once: a program
// that never releases them fails with ERR_LIMIT rather than exhausting the
// host's memory.
var maxProgramHandles = 1 << 20 // a variable for the tests

type programKey struct{}

// RunProgram runs the WebAssembly training program at path on this rank:
// its arguments are the script arguments (Options.Args), its output the
// rank's. It returns what RunFile would for a script: nil, an *Error for
// a failure (a host call's error the program did not clear, a trap naming
// the function), with Exit for a proc_exit with a status other than 0 and
// Interrupted when the run was stopped from outside.
func (r *Runtime) RunProgram(path string) (err error) {
	interrupted := &Error{Message: "interrupted", Interrupted: true}
	if r.interrupted.Load() { // another rank failed before this one started
		return interrupted
	}
	prog, err := wasm.LoadProgram(path, r.opts.Program)
	if err != nil {
		return &Error{Message: err.Error()}
	}
	p := &program{r: r, prog: prog, name: prog.Name(), handles: map[uint32]programHandle{}, scopes: map[uint32]*tensorList{}, names: map[string]string{},
		objectProto:   r.vm.Get("Object").ToObject(r.vm).Get("prototype").ToObject(r.vm),
		functionProto: r.vm.Get("Function").ToObject(r.vm).Get("prototype").ToObject(r.vm)}
	if _, err := r.run(func() (goja.Value, error) {
		v, err := r.req.Require("zeroeng")
		if err == nil {
			p.api = v.ToObject(r.vm)
		}
		return v, err
	}); err != nil {
		if r.interrupted.Load() { // the interrupt stopped the API's loading
			return interrupted
		}
		return err
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), programKey{}, p))
	defer cancel()
	r.progMu.Lock()
	r.progCancel = cancel
	r.progMu.Unlock()
	// An interrupt that came while the program loaded (another rank failed
	// first) found nothing to cancel: it stops the program before it runs.
	// (Either this load sees it or the interrupt sees progCancel.)
	if r.interrupted.Load() {
		cancel()
	}
	defer func() {
		r.progMu.Lock()
		r.progCancel = nil
		r.progMu.Unlock()
	}()
	stdout := &programOutput{r: r, w: r.opts.Stdout}
	stderr := &programOutput{r: r, w: r.opts.Stderr}
	defer stdout.flush()
	defer stderr.flush()
	args := append([]string{filepath.Base(path)}, r.opts.Args...)
	runErr := prog.Run(ctx, args, stdout, stderr, r.opts.ProgramDirs...)
	var exit *wasm.ExitError
	switch {
	case p.exited != nil:
		return &Error{Message: fmt.Sprintf("%s exited with status %d", p.name, *p.exited), Exit: &ExitError{Code: int(*p.exited)}}
	case p.abort != nil:
		return &Error{Message: fmt.Sprintf("%v (the program called the host again without clearing the failure: error_message, error_clear)", p.abort)}
	case r.interrupted.Load() && runErr != nil:
		return &Error{Message: "interrupted", Interrupted: true}
	case errors.As(runErr, &exit):
		return &Error{Message: fmt.Sprintf("%s exited with status %d", p.name, exit.Code), Exit: &ExitError{Code: int(exit.Code)}}
	case runErr != nil && strings.Contains(runErr.Error(), "stack overflow"):
		return &Error{Message: fmt.Sprintf("%s: %v: its calls nest deeper than its stack (a function that recurses without end?)", p.name, runErr)}
	case runErr != nil:
		return &Error{Message: fmt.Sprintf("%s: %v", p.name, runErr)}
	case p.pending != nil:
		return &Error{Message: fmt.Sprintf("%s ended with a failed host call it did not clear: %v", p.name, p.pending)}
	}
	return r.finishBackward()
}

// interruptProgram stops this rank's training program, if one runs, at
// its next loop check.
func (r *Runtime) interruptProgram() {
	r.progMu.Lock()
	defer r.progMu.Unlock()
	if r.progCancel != nil {
		r.progCancel()
	}
}

// fail records the failure of the host call fn, the program's to look at
// (error_message) and clear, and returns its status.
func (p *program) fail(fn string, st wasm.Status, err error) wasm.Status {
	msg := err.Error()
	var se *Error
	if errors.As(err, &se) {
		msg = se.Message // without a script position or stack: the program has none
	}
	var oom *device.OutOfMemoryError
	if st == wasm.ErrCall && errors.As(err, &oom) {
		st = wasm.ErrNoMem
	}
	// The message is the program's to read as UTF-8, whatever bytes the
	// program put in a name it gave.
	msg = strings.ToValidUTF8(msg, string(utf8.RuneError))
	p.pending = &Error{Message: fmt.Sprintf("%s: host call %s failed (%v): %s", p.name, fn, st, msg), Cause: err}
	return st
}

// add gives v a handle.
func (p *program) add(h programHandle) (uint32, error) {
	if len(p.handles) >= maxProgramHandles {
		return 0, fmt.Errorf("the program holds %d handles, the most it may: release the ones it no longer needs", maxProgramHandles)
	}
	for {
		p.next++
		if p.next == 0 {
			p.next = 1
		}
		if _, taken := p.handles[p.next]; !taken {
			break
		}
	}
	p.handles[p.next] = h
	if p.given != nil {
		*p.given = append(*p.given, p.next)
	}
	return p.next, nil
}

// handleError is a handle the program does not hold, or whose tensor
// went: ERR_HANDLE, wherever the handle was given (JSON included).
type handleError struct{ error }

func (e handleError) Unwrap() error { return e.error }

// live returns handle id, of kind when kind is not "", whose tensor (if
// it is one) is still there.
func (p *program) live(id uint32, kind string) (programHandle, error) {
	h, err := p.handle(id, kind)
	if err != nil {
		return programHandle{}, handleError{err}
	}
	if h.j != nil && (h.j.released != "" || h.j.t.Released()) {
		why := h.j.released
		if why == "" {
			why = "by the engine"
		}
		return programHandle{}, handleError{fmt.Errorf("handle %d's tensor was released %s", id, why)}
	}
	return h, nil
}

// handle returns handle id, of kind when kind is not "", its tensor gone
// or not (release forgets either).
func (p *program) handle(id uint32, kind string) (programHandle, error) {
	h, ok := p.handles[id]
	switch {
	case !ok:
		return programHandle{}, fmt.Errorf("handle %d is not one the program holds (never given, or released)", id)
	case kind != "" && h.kind != kind:
		return programHandle{}, fmt.Errorf("handle %d is a %s, not a %s", id, h.kind, kind)
	}
	return h, nil
}

// programOutput writes a program's output (WASI stdout or stderr) to the
// rank's writer line by line, with the rank's prefix, as console.log does.
type programOutput struct {
	r   *Runtime
	w   io.Writer
	buf []byte
}

func (o *programOutput) Write(b []byte) (int, error) {
	o.buf = append(o.buf, b...)
	if i := bytes.LastIndexByte(o.buf, '\n'); i >= 0 {
		o.r.writeLines(o.w, string(o.buf[:i]))
		o.buf = append(o.buf[:0], o.buf[i+1:]...)
	}
	return len(b), nil
}

func (o *programOutput) flush() {
	if len(o.buf) > 0 {
		o.r.writeLines(o.w, string(o.buf))
		o.buf = o.buf[:0]
	}
}

// The JSON of the bridge: arguments are a JSON array; a handle is
// {"$": h}; a number JSON cannot hold is {"$num": "NaN"} ("Infinity",
// "-Infinity"). Results are JSON too, a tensor or any value that is not
// plain data (a module, an optimizer, a function) becoming a new handle:
// {"$": h, "type": "tensor"}.

// fromJSON decodes the JSON value at the start of b into a script value,
// keeping the order of an object's keys.
func (p *program) fromJSON(b []byte) (goja.Value, error) {
	d := jsonDecoder{p: p, b: b}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if d.space(); d.i != len(d.b) {
		return nil, fmt.Errorf("JSON: unexpected %q after the value at byte %d", d.b[d.i], d.i)
	}
	return v, nil
}

// toJSON encodes v, giving handles to what is not plain data.
func (p *program) toJSON(v goja.Value) ([]byte, error) {
	return p.appendJSON(nil, v, 0)
}

const maxJSONDepth = 64

func (p *program) appendJSON(b []byte, v goja.Value, depth int) ([]byte, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("the result nests deeper than %d levels (a cycle?)", maxJSONDepth)
	}
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return append(b, "null"...), nil
	}
	obj, ok := v.(*goja.Object)
	if !ok {
		switch x := v.Export().(type) {
		case bool:
			return appendBool(b, x), nil
		case int64:
			return appendNumber(b, float64(x)), nil
		case float64:
			return appendNumber(b, x), nil
		case string:
			return appendJSONString(b, x), nil
		}
		return appendJSONString(b, v.String()), nil
	}
	if h, ok := p.valueHandle(v); ok {
		return p.appendHandle(b, h)
	}
	switch {
	case obj.ClassName() == "Array":
		n := int(obj.Get("length").ToInteger()) // an array's: 0 to 2^32-1
		// Each element takes at least "null," (a.length = 4e9 is an array
		// of no elements, and 20 GB of JSON).
		if err := hostRoom(n, len("null,")); err != nil {
			return nil, fmt.Errorf("an array of length %d: its JSON %w", n, err)
		}
		b = append(b, '[')
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = p.appendJSON(b, obj.Get(fmt.Sprint(i)), depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case p.isPlain(obj):
		b = append(b, '{')
		for i, k := range obj.Keys() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var err error
			if b, err = p.appendJSON(b, obj.Get(k), depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, fmt.Errorf("internal error: %s is neither data nor a value a handle stands for", describe(v))
}

// valueHandle returns the handle v needs, or nil when v is data (a
// primitive, an array, a plain object): a tensor, a function, any other
// object (a module, an optimizer).
func (p *program) valueHandle(v goja.Value) (programHandle, bool) {
	obj, ok := v.(*goja.Object)
	if !ok || obj.ClassName() == "Array" {
		return programHandle{}, false
	}
	// Most results are the tensor the call just made; Export (which
	// allocates, and copies a plain object) finds the others.
	if j := p.r.lastWrapped; j != nil && j.obj == obj {
		return programHandle{kind: "tensor", v: v, j: j}, true
	}
	if j := asJSTensor(obj); j != nil {
		return programHandle{kind: "tensor", v: v, j: j}, true
	}
	if _, isFn := goja.AssertFunction(v); isFn && obj.Prototype() == p.functionProto {
		// A function; a module is callable too, but an object of a class.
		return programHandle{kind: "function", v: v}, true
	}
	if p.isPlain(obj) {
		return programHandle{}, false
	}
	return programHandle{kind: "object", v: v}, true
}

// isPlain reports whether obj is plain data: an object whose prototype is
// Object.prototype and that has no methods of its own (a state dict,
// options, a memory report), not an instance of a class or an object of
// the API (an optimizer, whose methods are its own properties).
func (p *program) isPlain(obj *goja.Object) bool {
	if proto := obj.Prototype(); proto != nil && proto != p.objectProto {
		return false
	}
	for _, k := range obj.Keys() {
		if _, isFn := goja.AssertFunction(obj.Get(k)); isFn {
			return false
		}
	}
	return true
}

func (p *program) appendHandle(b []byte, h programHandle) ([]byte, error) {
	id, err := p.add(h)
	if err != nil {
		return nil, err
	}
	b = append(b, `{"$":`...)
	b = fmt.Appendf(b, "%d", id)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, h.kind)
	return append(b, '}'), nil
}

func appendBool(b []byte, x bool) []byte {
	if x {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

func appendNumber(b []byte, x float64) []byte {
	switch {
	case math.IsNaN(x):
		return append(b, `{"$num":"NaN"}`...)
	case math.IsInf(x, 1):
		return append(b, `{"$num":"Infinity"}`...)
	case math.IsInf(x, -1):
		return append(b, `{"$num":"-Infinity"}`...)
	case x == math.Trunc(x) && math.Abs(x) < 1e15:
		return fmt.Appendf(b, "%d", int64(x))
	}
	return fmt.Appendf(b, "%v", x)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// jsonDecoder parses JSON into script values.
type jsonDecoder struct {
	p *program
	b []byte
	i int
}

func (d *jsonDecoder) space() {
	for d.i < len(d.b) && strings.IndexByte(" \t\r\n", d.b[d.i]) >= 0 {
		d.i++
	}
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("JSON at byte %d: %s", d.i, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) value(depth int) (goja.Value, error) {
	vm := d.p.r.vm
	if depth > maxJSONDepth {
		return nil, d.errorf("nested deeper than %d levels", maxJSONDepth)
	}
	if d.i >= len(d.b) {
		return nil, d.errorf("unexpected end")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		d.i++
		var vals []any
		d.space()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			return vm.NewArray(), nil
		}
		for {
			d.space()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			vals = append(vals, v)
			d.space()
			if d.i >= len(d.b) {
				return nil, d.errorf("unterminated array")
			}
			if d.b[d.i] == ']' {
				d.i++
				return vm.NewArray(vals...), nil
			}
			if d.b[d.i] != ',' {
				return nil, d.errorf("want , or ] in an array, got %q", d.b[d.i])
			}
			d.i++
		}
	case c == '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		return vm.ToValue(s), nil
	case c == 't' && bytes.HasPrefix(d.b[d.i:], []byte("true")):
		d.i += 4
		return vm.ToValue(true), nil
	case c == 'f' && bytes.HasPrefix(d.b[d.i:], []byte("false")):
		d.i += 5
		return vm.ToValue(false), nil
	case c == 'n' && bytes.HasPrefix(d.b[d.i:], []byte("null")):
		d.i += 4
		return goja.Null(), nil
	case c == '-' || c >= '0' && c <= '9':
		j := jsonNumberEnd(d.b, d.i)
		if j == d.i || j < len(d.b) && strings.IndexByte("+-.eE0123456789", d.b[j]) >= 0 {
			// Not a number, or one followed by what only a number
			// would have (1-2, 1.2.3): the whole of it is the bad
			// number.
			k := d.i + 1
			for k < len(d.b) && strings.IndexByte("+-.eE0123456789", d.b[k]) >= 0 {
				k++
			}
			return nil, d.errorf("bad number %q", d.b[d.i:k])
		}
		x, err := strconv.ParseFloat(string(d.b[d.i:j]), 64)
		if err != nil {
			// Beyond float64 (1e999): JavaScript would read Infinity,
			// which the program did not write.
			return nil, d.errorf("the number %.40q is beyond float64's range", d.b[d.i:j])
		}
		d.i = j
		return vm.ToValue(x), nil
	}
	return nil, d.errorf("unexpected %q", d.b[d.i])
}

// jsonNumberEnd returns where the JSON number at b[i:] ends (i when there
// is none): -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. What follows
// is the caller's to refuse ([1-2] is a number and then "-2").
func jsonNumberEnd(b []byte, i int) int {
	start := i
	digits := func() bool {
		k := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > k
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return start
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return start
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return start
		}
	}
	return i
}

// object parses an object: a handle ({"$": h}), a special number
// ({"$num": "NaN"}), or a plain object, its keys in order.
func (d *jsonDecoder) object(depth int) (goja.Value, error) {
	vm := d.p.r.vm
	d.i++
	obj := vm.NewObject()
	var keys []string
	var vals []goja.Value
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return obj, nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.errorf("want a key in an object")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.errorf("want : after key %q", k)
		}
		d.i++
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		keys, vals = append(keys, k), append(vals, v)
		d.space()
		if d.i >= len(d.b) {
			return nil, d.errorf("unterminated object")
		}
		if d.b[d.i] == '}' {
			d.i++
			break
		}
		if d.b[d.i] != ',' {
			return nil, d.errorf("want , or } in an object, got %q", d.b[d.i])
		}
		d.i++
	}
	if len(keys) == 1 && keys[0] == "$" {
		var id float64
		switch x := vals[0].Export().(type) {
		case int64:
			id = float64(x)
		case float64:
			id = x
		default:
			return nil, d.errorf(`handle %q is not a handle number`, vals[0].String())
		}
		if id != math.Trunc(id) || id < 1 || id > math.MaxUint32 {
			return nil, d.errorf("handle %v is not a handle number", vals[0])
		}
		h, err := d.p.live(uint32(id), "")
		if err != nil {
			return nil, err
		}
		if d.p.given != nil {
			*d.p.given = append(*d.p.given, uint32(id))
		}
		return h.v, nil
	}
	if len(keys) == 1 && keys[0] == "$f64" {
		// A number as its IEEE 754 bits: for a program whose language
		// cannot write the shortest digits that read back cheaply (C).
		bits, err := strconv.ParseUint(vals[0].String(), 16, 64)
		if err != nil || len(vals[0].String()) != 16 {
			return nil, d.errorf(`{"$f64": %q}: want the number's 64 bits as 16 hexadecimal digits`, vals[0].String())
		}
		return vm.ToValue(math.Float64frombits(bits)), nil
	}
	if len(keys) == 1 && keys[0] == "$num" {
		switch vals[0].String() {
		case "NaN":
			return vm.ToValue(math.NaN()), nil
		case "Infinity":
			return vm.ToValue(math.Inf(1)), nil
		case "-Infinity":
			return vm.ToValue(math.Inf(-1)), nil
		}
		return nil, d.errorf(`{"$num": %q}: want "NaN", "Infinity" or "-Infinity"`, vals[0].String())
	}
	for i, k := range keys {
		if err := obj.Set(k, vals[i]); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// str parses a JSON string.
func (d *jsonDecoder) str() (string, error) {
	start := d.i
	d.i++
	var b strings.Builder
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return b.String(), nil
		case c == '\\':
			if d.i+1 >= len(d.b) {
				return "", d.errorf("unterminated string")
			}
			d.i++
			switch e := d.b[d.i]; e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'u':
				if d.i+4 >= len(d.b) {
					return "", d.errorf("bad \\u escape")
				}
				var r rune
				if _, err := fmt.Sscanf(string(d.b[d.i+1:d.i+5]), "%04x", &r); err != nil {
					return "", d.errorf("bad \\u escape")
				}
				b.WriteRune(r)
				d.i += 4
			default:
				return "", d.errorf("bad escape \\%c", e)
			}
			d.i++
		case c < 0x20:
			return "", d.errorf("control character in a string")
		default:
			b.WriteByte(c)
			d.i++
		}
	}
	d.i = start
	return "", d.errorf("unterminated string")
}
