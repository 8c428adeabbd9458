package script

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
	"github.com/dop251/goja_nodejs/require"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/internal/hostmem"
	"github.com/zeroeng/zeroeng/internal/suggest"
)

// Error is a script failure as the user sees it: one message with the
// script position, and the JavaScript stack. It never carries a Go stack.
type Error struct {
	// Message is the error's text ("tensor: matmul: shapes [8 3] and [4 5]
	// cannot be multiplied"); Position is "file:line:column" of the
	// innermost script frame when known.
	Message  string
	Position string
	// Stack lists the JavaScript frames, innermost first.
	Stack []string
	// Interrupted is set when the script was stopped from outside (SIGINT,
	// another rank's failure); Exit holds process.exit's code.
	Interrupted bool
	Exit        *ExitError
	// Cause is the engine error behind the message, when there is one.
	Cause error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Position != "" {
		b.WriteString(e.Position)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	for _, f := range e.Stack {
		b.WriteString("\n    at ")
		b.WriteString(f)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Cause }

// scriptError converts what goja returns into an *Error.
func (r *Runtime) scriptError(err error) error {
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	var intr *goja.InterruptedError
	if errors.As(err, &intr) {
		e := &Error{Message: fmt.Sprint(intr.Value()), Interrupted: true}
		e.fillStack(intr.Stack(), r.required)
		return e
	}
	var overflow *goja.StackOverflowError
	if errors.As(err, &overflow) {
		e := &Error{Message: fmt.Sprintf("RangeError: maximum call stack size exceeded (%d calls deep): a recursion that does not end?", maxCallDepth)}
		stack := overflow.Stack()
		// The deepest frames say where; the rest repeat them.
		e.fillStack(stack[:min(len(stack), 10)], r.required)
		return e
	}
	var list parser.ErrorList
	if errors.As(err, &list) {
		return syntaxError(list)
	}
	var syn *goja.CompilerSyntaxError
	if errors.As(err, &syn) {
		e := &Error{Message: "SyntaxError: " + syn.Message}
		if syn.File != nil {
			p := syn.File.Position(syn.Offset)
			e.Position = fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column)
		}
		return e
	}
	var exc *goja.Exception
	if errors.As(err, &exc) {
		e := &Error{Message: exceptionMessage(exc)}
		if exc.Unwrap() == nil {
			e.Message = r.suggestMethod(e.Message)
		}
		if errors.Is(exc, require.InvalidModuleError) {
			e.Message = "Cannot find module"
			if r.lastRequire != "" {
				e.Message += " " + r.lastRequire
			}
			r.lastRequire = ""
		}
		if ee := (*ExitError)(nil); errors.As(exc, &ee) {
			e.Exit = ee
		}
		if cause := exc.Unwrap(); cause != nil {
			e.Cause = cause
			var ee *ExitError
			if errors.As(cause, &ee) {
				e.Exit = ee
			}
		}
		e.fillStack(exc.Stack(), r.required)
		return e
	}
	// Parser errors from require of a module, and anything else.
	return &Error{Message: err.Error(), Cause: err}
}

// noMember is goja's message for a call of a property that is undefined
// (m.foward(x)); it does not say of what object.
const noMember = "TypeError: Object has no member '"

// suggestMethod adds to goja's message for the call of a missing method
// the API's name nearest to the one called: "TypeError: Object has no
// method 'foward': did you mean 'forward'?", as misspelt options get. The
// object is not known by then, so the names are those of the API: tensor
// methods, the modules' functions and the methods of their classes
// (nn.Module's and every layer's, the optimizers'). Other messages, and a
// name with none near it, are returned as they are.
func (r *Runtime) suggestMethod(msg string) string {
	name, ok := strings.CutPrefix(msg, noMember)
	if !ok || !strings.HasSuffix(name, "'") || r.module == nil {
		return msg
	}
	name = strings.TrimSuffix(name, "'")
	if s := suggest.Closest(name, r.apiNames()); s != "" && s != name {
		return fmt.Sprintf("TypeError: Object has no method '%s': did you mean '%s'?", name, s)
	}
	return msg
}

// apiNames lists the callable names of the API: the tensor methods, and
// the functions of require("zeroeng")'s modules and, for classes, the
// methods along their prototype chains.
func (r *Runtime) apiNames() []string {
	seen := map[string]bool{}
	var names []string
	add := func(n string) {
		if !seen[n] && n != "constructor" && !strings.HasPrefix(n, "_") {
			seen[n] = true
			names = append(names, n)
		}
	}
	for n := range r.methods {
		add(n)
	}
	visited := map[*goja.Object]bool{}
	var walk func(o *goja.Object, depth int)
	walk = func(o *goja.Object, depth int) {
		if o == nil || visited[o] || depth > 2 {
			return
		}
		visited[o] = true
		for _, k := range o.GetOwnPropertyNames() {
			v, ok := getQuietly(o, k).(*goja.Object)
			if !ok {
				continue // a plain value: not called
			}
			if _, fn := goja.AssertFunction(v); fn {
				add(k)
				if p, ok := v.Get("prototype").(*goja.Object); ok {
					for ; p != nil && !visited[p]; p = p.Prototype() {
						visited[p] = true
						for _, m := range p.GetOwnPropertyNames() {
							add(m)
						}
					}
				}
				continue
			}
			walk(v, depth+1)
		}
	}
	walk(r.module, 0)
	return names
}

// getQuietly is o[k], or nil where reading it throws (a getter's error
// has no place in another error's message).
func getQuietly(o *goja.Object, k string) (v goja.Value) {
	defer func() {
		if recover() != nil {
			v = nil
		}
	}()
	return o.Get(k)
}

// syntaxError formats a parser error with the file's own position; src,
// when given, is the source, for a hint where the error has a usual cause.
func syntaxError(err error, src ...string) error {
	var list parser.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		p := list[0].Position
		msg := "SyntaxError: " + list[0].Message
		if len(list) > 1 {
			msg += fmt.Sprintf(" (and %d more errors)", len(list)-1)
		}
		if len(src) > 0 && isModuleSyntax(src[0], p.Line) {
			msg += `: scripts are CommonJS modules: write const { tensor, nn } = require("zeroeng") instead of import, and module.exports = ... instead of export`
		}
		return &Error{Message: msg, Position: fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column)}
	}
	return &Error{Message: "SyntaxError: " + err.Error()}
}

// isModuleSyntax reports whether line (from 1) of src is an ES module
// import or export statement.
func isModuleSyntax(src string, line int) bool {
	lines := strings.Split(src, "\n")
	if line < 1 || line > len(lines) {
		return false
	}
	l := strings.TrimSpace(lines[line-1])
	return strings.HasPrefix(l, "import ") || strings.HasPrefix(l, "import{") || strings.HasPrefix(l, "export ")
}

// exceptionMessage is the thrown value as text: "Name: message" for Error
// objects, the engine's message for errors raised by host calls.
func exceptionMessage(exc *goja.Exception) string {
	v := exc.Value()
	if v == nil {
		return "exception"
	}
	if obj, ok := v.(*goja.Object); ok {
		if cause := exc.Unwrap(); cause != nil {
			return cause.Error()
		}
		name, msg := obj.Get("name"), obj.Get("message")
		if msg != nil && !goja.IsUndefined(msg) {
			if name != nil && !goja.IsUndefined(name) && name.String() != "" {
				return name.String() + ": " + msg.String()
			}
			return msg.String()
		}
	}
	return "Uncaught " + v.String()
}

// fillStack records the script frames (native frames are the host API and
// say nothing to the user). Columns on the first line of files loaded by
// require are corrected for the module wrapper.
func (e *Error) fillStack(frames []goja.StackFrame, required map[string]bool) {
	for _, f := range frames {
		p := f.Position()
		if p.Filename == "" {
			continue
		}
		if p.Line == 1 && required[p.Filename] {
			p.Column -= len(moduleWrapper)
		}
		loc := fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column)
		if e.Position == "" && p.Filename != preludeName {
			e.Position = loc
		}
		if name := f.FuncName(); name != "" {
			loc = name + " (" + loc + ")"
		}
		e.Stack = append(e.Stack, loc)
	}
}

// throw raises err in the script as a JavaScript Error whose message is
// err's text (with memoryHint's, for an out-of-memory error); Error.Unwrap
// gives err back to Go.
func (r *Runtime) throw(err error) {
	if hint := r.memoryHint(err); hint != "" {
		err = &hintedError{err, hint}
	}
	panic(r.vm.NewGoError(err))
}

// hintedError is an engine error with a hint of the script's likely
// mistake after its message.
type hintedError struct {
	error
	hint string
}

func (e *hintedError) Error() string { return e.error.Error() + e.hint }
func (e *hintedError) Unwrap() error { return e.error }

// memoryHint is, for an out-of-memory error (the device's limit,
// --max-memory, or the machine's memory), the lifetime rule the script
// most likely broke, when it did: tensors made outside any tensor.scope
// before the first backward pass are never given back automatically, so a
// loop that makes them without a backward pass (an evaluation, data
// preparation) grows until it fails. The hint is given only when many of
// those tensors are alive and hold most of the device's live memory;
// otherwise "" (a model too large for the limit is not a lifetime
// mistake, and a wrong hint would send the reader the wrong way).
func (r *Runtime) memoryHint(err error) string {
	var oom *device.OutOfMemoryError
	var host *hostmem.Error
	if !errors.As(err, &oom) && !errors.As(err, &host) {
		return ""
	}
	n, bytes := r.life.unreleased()
	live := r.rt.Device().MemStats().LiveBytes
	if n < minHintTensors || bytes < live/2 {
		return ""
	}
	when, rule := " before the first backward()", "such tensors are never given back automatically, as if kept with t.keep()"
	if !r.life.auto { // the REPL
		when, rule = "", "none is given back automatically here"
	}
	return fmt.Sprintf(" (%d tensors made outside any tensor.scope%s are alive, viewing %s of the %s live: %s; "+
		"if a loop makes them, run its body in tensor.scope(() => ...) or give them back with t.release(): "+
		`see "Tensor lifetimes" in the README)`,
		n, when, hostmem.Size(min(bytes, live)), hostmem.Size(live), rule)
}

// minHintTensors is the fewest alive tensors that make memoryHint speak: a
// loop's leak leaves many; a setup (a dataset, a few constants) few.
const minHintTensors = 64

// throwf raises a TypeError: the host API was called wrongly (an argument
// of the wrong type, a missing one, an unknown option), as Python raises
// TypeError for such calls, so that a script can tell them apart with
// instanceof.
func (r *Runtime) throwf(format string, args ...any) {
	panic(r.vm.NewTypeError(fmt.Sprintf(format, args...)))
}

// throwRangef raises a RangeError: an argument of the right type with a
// value the call does not accept (a negative learning rate, a rank out of
// range), where Python raises ValueError.
func (r *Runtime) throwRangef(format string, args ...any) {
	ctor, ok := goja.AssertConstructor(r.vm.Get("RangeError"))
	if !ok {
		r.throwf(format, args...)
	}
	obj, err := ctor(nil, r.vm.ToValue(fmt.Sprintf(format, args...)))
	if err != nil {
		panic(err)
	}
	panic(obj)
}
