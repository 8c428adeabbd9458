// Package script owns the JavaScript side of zeroeng: one goja runtime per
// rank with CommonJS require, console and process, the built-in module
// require("zeroeng") that exposes the engine with PyTorch's names in
// camelCase (tensor, nn, optim, io, dist, zero, amp, ...; docs/api.md), the
// lifetime rules that give the engine's memory back deterministically, and
// the formatting of script errors with file:line:column and the JS stack.
// It also runs training programs compiled to WebAssembly, with the same
// host API (program.go, docs/wasm-program-abi.md), and loads Wasm comm
// hooks and schedules through hooks/wasm.
//
// A Runtime is not safe for concurrent use (goja runtimes are not); each
// rank runs its own on its own goroutine.
package script

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
	"github.com/dop251/goja_nodejs/require"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/tensor"
	"github.com/zeroeng/zeroeng/engine/trace"
	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/safefile"
	"github.com/zeroeng/zeroeng/zero"
)

// Options configure a Runtime.
type Options struct {
	// Rank and WorldSize place the runtime among the job's ranks.
	Rank, WorldSize int
	// LocalRank is the rank's place among the ranks of its node (its
	// GPU), LOCAL_RANK in a job of several processes.
	LocalRank int
	// LocalWorldSize is the number of ranks on the rank's node
	// (LOCAL_WORLD_SIZE): dist.newSubgroups' default size.
	LocalWorldSize int
	// Seed seeds the rank's default generator (torch.manual_seed).
	Seed uint64
	// Args are the script's arguments: process.argv is
	// ["zeroeng", <script path>, Args...].
	Args []string
	// Stdout and Stderr receive console output (os.Stdout/os.Stderr when
	// nil). Prefix, when set, starts every console line ("[1] ").
	Stdout, Stderr io.Writer
	Prefix         string
	// AutoRelease turns on the generational release of the tensors a
	// script creates (see lifetime.go); scripts run with it, the REPL
	// without.
	AutoRelease bool
	// Runtime is the tensor runtime to use; a new CPU one when nil.
	Runtime *tensor.Runtime
	// Metrics receives one JSON object per line from the script's metrics
	// (the --metrics file); nil discards them.
	Metrics io.Writer
	// Group is the rank's handle on the job's process group (RunJob sets
	// it); nil makes the runtime a job of one rank.
	Group dist.ProcessGroup
	// Interactive says that Stdout is a terminal whose last line progress
	// output may redraw; Quiet silences progress output.
	Interactive, Quiet bool
	// Hooks are the command line's settings for Wasm comm hooks.
	Hooks WasmHookOptions
	// Stop, shared by a job's ranks, asks scripts with a checkpoint
	// Manager to save and exit (SIGTERM); nil when nothing can ask.
	Stop *StopRequest
	// Trace, when set, records the rank's passes, steps and spans (the
	// --trace file; RunJob also gives it to the process group).
	Trace *trace.Recorder
	// Program holds the limits of a WebAssembly training program
	// (RunProgram): its memory (--wasm-memory-mb), and whether it is
	// compiled without the loop checks (--wasm-trusted).
	Program wasm.Config
	// ProgramDirs are the host directories a program sees (--dir); it
	// has no other files.
	ProgramDirs []wasm.Dir
}

// Runtime is one rank's JavaScript runtime.
type Runtime struct {
	vm      *goja.Runtime
	rt      *tensor.Runtime
	opts    Options
	req     *require.RequireModule
	module  *goja.Object // require("zeroeng")
	methods map[string]goja.Value
	life    lifetime
	// inspectSym is Symbol.for("nodejs.util.inspect.custom"): an object
	// with a method under it prints as what the method returns (as in
	// Node); modules and optimizers use it for PyTorch's forms.
	inspectSym *goja.Symbol

	// wasmHooks and wasmSchedules are the rank's Wasm hook and schedule
	// instances, which RunJob interrupts from another goroutine when a
	// rank fails (hooks_native.go).
	hooksMu          sync.Mutex
	wasmHooks        []*wasm.Hook
	wasmSchedules    []*wasm.Schedule
	hooksInterrupted bool // interruptHooks ran: later instances stop as they are made

	ddps []*ddp.DDP // the models the script wrapped, finished at its end

	// ZeRO stage 3 (zero_stage3.go): the plan of the units zero.fullyShard
	// marked, which knows the stage-3 optimizer that shards them once it
	// is made (zeroPlan, stage3).
	plan *zero.Plan
	// lazyInit counts the zero.init calls running: while one does, new
	// tensors of the factories and of the layers' initialisations are
	// lazy (tensor.Lazy), as are loaded safetensors files.
	lazyInit int

	// required records the files loaded through require (their line 1 is
	// shifted by the module wrapper) and the last module asked for.
	required    map[string]bool
	lastRequire string

	interrupted atomic.Bool
	// lastWrapped is the tensor wrap made last: a training program's call
	// whose result is it finds it without goja's Export, which allocates
	// (program.go's valueHandle).
	lastWrapped *jsTensor
	// progCancel stops the rank's training program (program.go).
	progMu     sync.Mutex
	progCancel func()
	// group is the rank's process group of all ranks; groups maps the
	// script's group objects to theirs (for options such as processGroup).
	group  dist.ProcessGroup
	groups map[*goja.Object]dist.ProcessGroup
	// worldObject is the dist module scripts see: the group of all ranks.
	worldObject *goja.Object
	ownWorld    *dist.World // the one-rank world of a runtime outside a job
	// inCollective counts the waits on collectives in progress (the REPL
	// aborts the process group when Ctrl-C finds a rank blocked in one).
	inCollective atomic.Int32
	// closers end what the script made that outlives a call (Wasm hook
	// instances), when the runtime closes.
	closers []func()
	// steppedInBackward are the ZeRO optimizers whose step runs inside
	// backward (an overlap hook): what needs the whole gradient before a
	// step refuses their parameters (refuseSteppedInBackward).
	steppedInBackward []*zero.Optimizer
}

// New makes a runtime with the host API installed.
func New(opts Options) (*Runtime, error) {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.WorldSize <= 0 {
		opts.WorldSize = 1
	}
	rt := opts.Runtime
	if rt == nil {
		rt = tensor.NewRuntime(cpu.New(cpu.Options{Index: opts.Rank}), opts.Seed)
	}
	if opts.Trace != nil {
		rt.SetTrace(opts.Trace, opts.Rank)
	}
	r := &Runtime{vm: goja.New(), rt: rt, opts: opts, required: map[string]bool{}}
	r.vm.SetParserOptions(parser.WithDisableSourceMaps)
	r.vm.SetMaxCallStackSize(maxCallDepth)
	r.life.init(r, opts.AutoRelease)
	reg := require.NewRegistry(require.WithLoader(r.sourceLoader))
	reg.RegisterNativeModule("zeroeng", func(vm *goja.Runtime, module *goja.Object) {
		module.Set("exports", r.zeroengModule())
	})
	r.req = reg.Enable(r.vm)
	if err := r.installGlobals(); err != nil {
		return nil, err
	}
	return r, nil
}

// moduleWrapper is what goja_nodejs's require puts before a module's first
// line; positions on that line are shifted by its length.
const moduleWrapper = "(function(exports,require,module,__filename,__dirname){"

// sourceLoader reads CommonJS modules from disk for require. It checks the
// syntax itself, so that a syntax error reports the file's own line and
// column (the module wrapper would shift them), and it remembers what was
// asked for, to name a module that cannot be found.
func (r *Runtime) sourceLoader(path string) ([]byte, error) {
	if r.lastRequire == "" {
		r.lastRequire = path
	}
	b, err := safefile.ReadFile(filepath.FromSlash(path), maxSourceBytes)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, require.ModuleFileDoesNotExistError
		}
		return nil, err
	}
	r.lastRequire = ""
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return b, nil // require parses it as JSON, not as a program
	}
	if _, err := parser.ParseFile(nil, path, string(b), 0); err != nil {
		return nil, syntaxError(err, string(b))
	}
	r.required[path] = true
	return b, nil
}

// maxCallDepth bounds the script's call depth: a recursion that does not
// end fails with a RangeError instead of growing the stack without limit.
const maxCallDepth = 10000

// maxSourceBytes bounds a script or module file (and a JSON one that
// require reads).
const maxSourceBytes = 256 << 20

// VM exposes the goja runtime (for the REPL's completion).
func (r *Runtime) VM() *goja.Runtime { return r.vm }

// Tensors is the rank's tensor runtime.
func (r *Runtime) Tensors() *tensor.Runtime { return r.rt }

// zeroengModule builds require("zeroeng") once.
func (r *Runtime) zeroengModule() *goja.Object {
	if r.module != nil {
		return r.module
	}
	m := r.vm.NewObject()
	must(m.Set("tensor", r.tensorModule()))
	must(m.Set("dist", r.distModule()))
	must(m.Set("io", r.ioModule()))
	must(m.Set("data", r.dataModule()))
	must(m.Set("progress", r.progressModule()))
	must(m.Set("metrics", r.metricsModule()))
	must(m.Set("checkpoint", r.checkpointModule()))
	must(m.Set("amp", r.ampModule()))
	must(m.Set("trace", r.traceModule()))
	must(m.Set("device", r.deviceModule()))
	must(m.Set("version", Version))
	native := r.vm.NewObject()
	r.nativeNN(native)
	r.nativeOptim(native)
	r.nativeDDP(native)
	r.nativeZero(native)
	// The module system, the layers and the optimizers' JavaScript faces
	// are written in JavaScript over the native functions (prelude.js).
	prelude, err := r.runPrelude()
	if err != nil {
		panic(r.vm.NewGoError(fmt.Errorf("zeroeng: internal prelude: %w", err)))
	}
	fn, _ := goja.AssertFunction(prelude)
	exports, err := fn(goja.Undefined(), m, native)
	if err != nil {
		panic(r.vm.NewGoError(fmt.Errorf("zeroeng: internal prelude: %w", err)))
	}
	r.module = exports.ToObject(r.vm)
	return r.module
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// installGlobals sets console, process and require("zeroeng") shortcuts.
func (r *Runtime) installGlobals() error {
	console := r.newConsole()
	if err := r.vm.Set("console", console); err != nil {
		return err
	}
	process := r.vm.NewObject()
	argv := []any{"zeroeng"}
	for _, a := range r.opts.Args {
		argv = append(argv, a)
	}
	must(process.Set("argv", argv))
	env := r.vm.NewObject()
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			must(env.Set(k, v))
		}
	}
	must(process.Set("env", env))
	must(process.Set("platform", "linux"))
	must(process.Set("pid", os.Getpid()))
	r.method(process, "exit", func(call goja.FunctionCall) goja.Value {
		code := int(call.Argument(0).ToInteger())
		panic(r.vm.NewGoError(&ExitError{Code: code}))
	})
	if err := r.vm.Set("process", process); err != nil {
		return err
	}
	return r.vm.Set("performance", r.newPerformance())
}

// newPerformance is Node's and the browsers' performance object, for timing
// a training loop finer than Date.now's milliseconds: now() is the time in
// milliseconds, with a fraction, on a monotonic clock that starts when the
// runtime is made; timeOrigin is that start as Unix milliseconds.
func (r *Runtime) newPerformance() *goja.Object {
	origin := time.Now()
	perf := r.vm.NewObject()
	must(perf.Set("timeOrigin", float64(origin.UnixMicro())/1e3))
	r.method(perf, "now", func(call goja.FunctionCall) goja.Value {
		if len(call.Arguments) > 0 {
			r.throwf("performance.now: takes no arguments, got %d", len(call.Arguments))
		}
		return r.vm.ToValue(float64(time.Since(origin).Nanoseconds()) / 1e6)
	})
	return perf
}

// ExitError is process.exit(code) called by the script.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("process.exit(%d)", e.Code) }

// RunFile runs a script file as the main CommonJS module.
func (r *Runtime) RunFile(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return &Error{Message: fmt.Sprintf("cannot open script %s: %v", path, errors.Unwrap(err))}
	}
	argv := []any{"zeroeng", path}
	for _, a := range r.opts.Args {
		argv = append(argv, a)
	}
	must(r.vm.Get("process").ToObject(r.vm).Set("argv", argv))
	_, err = r.run(func() (goja.Value, error) { return r.req.Require(abs) })
	if err == nil {
		err = r.finishBackward()
	}
	return err
}

// MadeDDP reports whether the script wrapped a model in
// DistributedDataParallel (which zeroeng run --hook applies to).
func (r *Runtime) MadeDDP() bool { return len(r.ddps) > 0 }

// finishBackward waits, once the script has ended, for the gradient
// reductions its last backward pass left running (DDP overlaps them with
// backward, and only the next use of the gradients waits for them), so
// that a failure there — a comm hook's — is the script's error rather
// than lost.
func (r *Runtime) finishBackward() error {
	for _, d := range r.ddps {
		if !d.Pending() {
			continue // its errors, if any, were the script's to see
		}
		if err := d.Finalize(); err != nil {
			return &Error{Message: "after the script's end, the gradient reduction of its last backward pass failed: " + err.Error(), Cause: err}
		}
	}
	return nil
}

// RunString runs source text as a script named name (no module wrapper:
// top-level declarations are globals, as in a REPL).
func (r *Runtime) RunString(name, src string) (goja.Value, error) {
	if _, err := parser.ParseFile(nil, name, src, 0); err != nil {
		return nil, syntaxError(err, src) // with the script's own position
	}
	return r.run(func() (goja.Value, error) { return r.vm.RunScript(name, src) })
}

// run executes f, turning every failure into an *Error.
func (r *Runtime) run(f func() (goja.Value, error)) (v goja.Value, err error) {
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(argError); ok { // read outside any host function (see native)
				err = &Error{Message: "TypeError: " + string(e)}
				return
			}
			err = &Error{Message: fmt.Sprintf("internal error: %v", p)}
		}
	}()
	v, err = f()
	if err != nil {
		return nil, r.scriptError(err)
	}
	return v, nil
}

// Interrupt stops the running script as soon as possible (SIGINT, another
// rank failed); the run returns an *Error with Interrupted set.
func (r *Runtime) Interrupt(reason string) {
	r.interrupted.Store(true)
	r.vm.Interrupt(reason)
	r.interruptProgram()
}

// ClearInterrupt makes the runtime usable again after an interrupt (the
// REPL after Ctrl-C).
func (r *Runtime) ClearInterrupt() {
	r.interrupted.Store(false)
	r.vm.ClearInterrupt()
}

// Close releases the tensors the script still holds.
func (r *Runtime) Close() {
	endStatusLine(r)
	for _, c := range r.closers {
		c()
	}
	r.closers = nil
	r.life.releaseAll()
	if r.ownWorld != nil {
		r.ownWorld.Close()
	}
}
