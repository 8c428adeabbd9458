package script

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/dop251/goja"
)

// newConsole builds console.log/info/debug (to Stdout) and warn/error (to
// Stderr), formatting values as Node's console does and tensors as PyTorch
// prints them.
func (r *Runtime) newConsole() *goja.Object {
	c := r.vm.NewObject()
	logTo := func(w io.Writer) func(goja.FunctionCall) goja.Value {
		return func(call goja.FunctionCall) goja.Value {
			r.writeLines(w, r.formatArgs(call.Arguments))
			return goja.Undefined()
		}
	}
	for _, name := range []string{"log", "info", "debug"} {
		r.method(c, name, logTo(r.opts.Stdout))
	}
	for _, name := range []string{"warn", "error"} {
		r.method(c, name, logTo(r.opts.Stderr))
	}
	return c
}

// outputMu keeps the lines of ranks that share a writer whole, and
// guards statusLine.
var outputMu sync.Mutex

// statusLine is the progress bar last drawn on a terminal and not yet
// finished. Any other output clears it first and draws it again below
// (what tqdm's write does), so that printed lines and the bar never run
// together, whichever rank prints.
var statusLine struct {
	w     io.Writer // nil: no bar on screen
	text  string    // the bar as drawn: "\r...\x1b[K"
	owner *Runtime
}

// writeOutput writes s to w around the status line; the caller holds
// outputMu.
func writeOutput(w io.Writer, s string) (int, error) {
	if statusLine.w == nil {
		return io.WriteString(w, s)
	}
	io.WriteString(statusLine.w, "\r\x1b[K")
	n, err := io.WriteString(w, s)
	io.WriteString(statusLine.w, statusLine.text)
	return n, err
}

// endStatusLine ends the line of a bar that r drew and never finished
// (the script ended or failed mid-epoch), so that what follows starts on a
// line of its own.
func endStatusLine(r *Runtime) {
	outputMu.Lock()
	defer outputMu.Unlock()
	if statusLine.w != nil && statusLine.owner == r {
		io.WriteString(statusLine.w, "\n")
		statusLine.w, statusLine.owner = nil, nil
	}
}

// sharedWriter writes to w under outputMu, around a progress bar: output
// that does not come through the console (a Wasm hook's, the command's
// own messages) but shares its writers.
type sharedWriter struct{ w io.Writer }

func (s sharedWriter) Write(p []byte) (int, error) {
	outputMu.Lock()
	defer outputMu.Unlock()
	return writeOutput(s.w, string(p))
}

// SharedWriter returns a writer for w that keeps whole lines against the
// scripts' output and clears and redraws a progress bar around them: for
// a command's own messages printed while a job runs.
func SharedWriter(w io.Writer) io.Writer { return sharedWriter{w} }

// writeLines writes text with the rank prefix at the start of every line.
func (r *Runtime) writeLines(w io.Writer, text string) {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		b.WriteString(r.opts.Prefix)
		b.WriteString(line)
		b.WriteByte('\n')
	}
	outputMu.Lock()
	defer outputMu.Unlock()
	writeOutput(w, b.String())
}

// formatArgs implements util.format: %s %d %i %f %j %o %O %% in a first
// string argument, then the remaining values inspected and joined by spaces.
func (r *Runtime) formatArgs(args []goja.Value) string {
	if len(args) == 0 {
		return ""
	}
	var b strings.Builder
	rest := args
	if s, ok := stringOf(args[0]); ok && strings.Contains(s, "%") {
		rest = args[1:]
		for i := 0; i < len(s); i++ {
			if s[i] != '%' || i+1 == len(s) {
				b.WriteByte(s[i])
				continue
			}
			verb := s[i+1]
			if verb == '%' {
				b.WriteByte('%')
				i++
				continue
			}
			if !strings.ContainsRune("sdifjoO", rune(verb)) || len(rest) == 0 {
				b.WriteByte('%')
				continue
			}
			v := rest[0]
			rest = rest[1:]
			i++
			switch verb {
			case 's':
				if str, ok := stringOf(v); ok {
					b.WriteString(str)
				} else {
					b.WriteString(r.inspect(v, 1))
				}
			case 'd', 'i':
				f := v.ToFloat()
				if verb == 'i' {
					f = math.Trunc(f)
				}
				b.WriteString(formatNumber(f))
			case 'f':
				b.WriteString(formatNumber(v.ToFloat()))
			case 'j':
				raw, err := jsonOf(r.vm, v)
				if err != nil {
					raw = "[Circular]"
				}
				b.WriteString(raw)
			default:
				b.WriteString(r.inspect(v, 2))
			}
		}
	} else {
		b.WriteString(r.inspectTop(args[0]))
		rest = args[1:]
	}
	for _, v := range rest {
		b.WriteByte(' ')
		b.WriteString(r.inspectTop(v))
	}
	return b.String()
}

func jsonOf(vm *goja.Runtime, v goja.Value) (string, error) {
	stringify, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("stringify"))
	out, err := stringify(goja.Undefined(), v)
	if err != nil {
		return "", err
	}
	return out.String(), nil
}

// inspectTop prints strings bare and everything else inspected.
func (r *Runtime) inspectTop(v goja.Value) string {
	if s, ok := stringOf(v); ok {
		return s
	}
	return r.inspect(v, 2)
}

func formatNumber(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == math.Trunc(f) && math.Abs(f) < 1e21:
		if f == 0 && math.Signbit(f) {
			return "-0"
		}
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// inspect formats a value as Node's util.inspect does, to depth levels of
// nesting; tensors print like PyTorch.
func (r *Runtime) inspect(v goja.Value, depth int) string {
	switch {
	case v == nil || goja.IsUndefined(v):
		return "undefined"
	case goja.IsNull(v):
		return "null"
	}
	obj, isObj := v.(*goja.Object)
	if !isObj {
		switch x := v.Export().(type) {
		case string:
			return strconv.Quote(x)
		case float64:
			return formatNumber(x)
		case int64:
			return strconv.FormatInt(x, 10)
		}
		return v.String()
	}
	if j := asJSTensor(obj); j != nil {
		if j.released != "" {
			return "tensor(<released " + j.released + ">)"
		}
		return r.repr(j.t)
	}
	if f, ok := hidden(obj, "__future").(*futureState); ok {
		return r.inspectFuture(f, depth)
	}
	if h, ok := hidden(obj, "__optimizer").(*jsOptimizer); ok {
		return r.optimizerRepr(h.opt.Kind().String(), h.groups)
	}
	if s, ok := r.inspectCustom(obj, depth); ok {
		return s
	}
	if _, ok := goja.AssertFunction(obj); ok {
		name := obj.Get("name")
		if class := obj.ClassName(); class == "Function" && name != nil && name.String() != "" {
			if strings.Contains(name.String(), "/") { // a Go symbol (see Runtime.native)
				return "[Function (native)]"
			}
			return "[Function: " + name.String() + "]"
		}
		return "[Function (anonymous)]"
	}
	switch obj.ClassName() {
	case "Error":
		if st := obj.Get("stack"); st != nil && !goja.IsUndefined(st) {
			return st.String()
		}
		return obj.String()
	case "Date", "RegExp":
		return obj.String()
	}
	if depth < 0 {
		if obj.ClassName() == "Array" {
			return "[Array]"
		}
		return "[Object]"
	}
	if obj.ClassName() == "Array" {
		n := int(obj.Get("length").ToInteger())
		parts := make([]string, 0, min(n, 101))
		for i := 0; i < n && i < 100; i++ {
			parts = append(parts, r.inspect(obj.Get(strconv.Itoa(i)), depth-1))
		}
		if n > 100 {
			parts = append(parts, fmt.Sprintf("... %d more items", n-100))
		}
		if n == 0 {
			return "[]"
		}
		return joinInspected("[", parts, "]")
	}
	keys := obj.Keys()
	if isPlain := obj.ClassName() == "Object"; !isPlain {
		sort.Strings(keys)
	}
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		key := k
		if !isIdentifier(k) {
			key = strconv.Quote(k)
		}
		parts = append(parts, key+": "+r.inspect(obj.Get(k), depth-1))
	}
	prefix := ""
	if ctor := obj.Get("constructor"); ctor != nil {
		if c, ok := ctor.(*goja.Object); ok {
			if name := c.Get("name"); name != nil && name.String() != "Object" && name.String() != "" {
				prefix = name.String() + " "
			}
		}
	}
	if len(parts) == 0 {
		return prefix + "{}"
	}
	return prefix + joinInspected("{", parts, "}")
}

// joinInspected puts short lists on one line and long ones on several.
func joinInspected(open string, parts []string, close string) string {
	total := 0
	multi := false
	for _, p := range parts {
		total += len(p) + 2
		multi = multi || strings.Contains(p, "\n")
	}
	if total <= 72 && !multi {
		return open + " " + strings.Join(parts, ", ") + " " + close
	}
	return open + "\n  " + strings.ReplaceAll(strings.Join(parts, ",\n"), "\n", "\n  ") + "\n" + close
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}
