package wasm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/zeroeng/zeroeng/internal/safefile"
)

// Training programs (docs/wasm-program-abi.md): a WASI command whose
// _start is the whole training run, one instance per rank, on the same
// sandbox as the hooks (the shared runtimes, the compilation cache, the
// memory limit, the loop checks that let Ctrl-C and a failed rank stop
// it). This package runs them; the host functions of the program ABI are
// the scripting layer's (package script registers them), because they are
// its API: they find the calling rank's instance in the context of the
// call, as the hook functions find their Hook.

// ProgramABIVersion is the major version of docs/wasm-program-abi.md this
// host implements.
const ProgramABIVersion = 1

// HostFunc is a host function of the program ABI.
type HostFunc struct {
	Params, Results []api.ValueType
	Fn              api.GoModuleFunc
}

var (
	programFuncsMu sync.Mutex
	programFuncs   = map[string]HostFunc{}
	programsUsed   bool // a runtime was made: too late to register
)

// RegisterProgramFuncs adds functions to the host module "zeroeng", for
// programs: the scripting layer calls it from an init function, before
// any module is compiled. A name the hook ABI or an earlier registration
// took is a programming error.
func RegisterProgramFuncs(fns map[string]HostFunc) {
	programFuncsMu.Lock()
	defer programFuncsMu.Unlock()
	if programsUsed {
		panic("wasm: RegisterProgramFuncs after a module was compiled")
	}
	for name, f := range fns {
		if _, ok := hostFuncs[name]; ok {
			panic("wasm: program host function " + name + " is a hook host function")
		}
		if _, ok := programFuncs[name]; ok {
			panic("wasm: program host function " + name + " registered twice")
		}
		programFuncs[name] = f
	}
}

// OutsideHook is what a function of the hook ABI does when it is called
// outside a hook — by a training program, which may import it (the
// scripting layer sets it, with RegisterProgramFuncs): the program's
// failure, naming the function. Unset, the function returns ERR_INVALID.
var OutsideHook func(ctx context.Context, mod api.Module, name string) Status

// programHostFuncs returns the registered functions, closing the
// registration.
func programHostFuncs() map[string]HostFunc {
	programFuncsMu.Lock()
	defer programFuncsMu.Unlock()
	programsUsed = true
	return programFuncs
}

var programMarker = regexp.MustCompile(`^zeroeng_program_abi_v([0-9]+)$`)

// Program is a compiled training program, valid against the ABI. One
// Program serves every rank of the process: each runs its own instance.
type Program struct {
	name string
	cfg  Config
	rt   *sharedRuntime
	cm   wazero.CompiledModule
	info *Info
}

// Name is the program's name in messages (its file name).
func (p *Program) Name() string { return p.name }

// Info describes the program's exports and imports.
func (p *Program) Info() *Info { return p.info }

// Config is what the program was compiled for.
func (p *Program) Config() Config { return p.cfg }

// LoadProgram reads and compiles the program at path (see
// CompileProgram).
func LoadProgram(path string, cfg Config) (*Program, error) {
	b, err := safefile.ReadFile(path, MaxModuleBytes)
	if err != nil {
		return nil, fmt.Errorf("wasm program: %w", err)
	}
	return CompileProgram(filepath.Base(path), b, cfg)
}

// CompileProgram compiles a training program for the limits of cfg and
// checks it against the ABI. The compiled code is shared by every caller
// in the process that passes the same bytes and limits, and cached on
// disk.
func CompileProgram(name string, wasm []byte, cfg Config) (*Program, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := looksLikeWasm(wasm); err != nil {
		return nil, fmt.Errorf("wasm program %s: %w", name, err)
	}
	s, cm, err := compileFor(cfg, wasm)
	if err != nil {
		return nil, fmt.Errorf("wasm program %s: %w", name, err)
	}
	info := inspectProgram(name, cm.ExportedFunctions(), cm.ImportedFunctions(), cm.ExportedMemories(), cm.ImportedMemories())
	if err := info.ProgramErr(); err != nil {
		return nil, err
	}
	return &Program{name: name, cfg: cfg, rt: s, cm: cm, info: info}, nil
}

// CheckProgram compiles wasm and describes it against the program ABI
// without running anything: `zeroeng check`. The error is for bytes that
// are not a WebAssembly module at all; ABI problems are in Info.Problems.
func CheckProgram(name string, wasm []byte) (*Info, error) {
	if err := looksLikeWasm(wasm); err != nil {
		return nil, fmt.Errorf("wasm program %s: %w", name, err)
	}
	s, err := runtimeFor(runtimeKey{memoryPages: DefaultMemoryLimitMB * 16, uncached: true})
	if err != nil {
		return nil, err
	}
	if err := prescan(wasm); err != nil {
		return nil, fmt.Errorf("wasm program %s: %w", name, err)
	}
	cm, err := s.rt.CompileModule(context.Background(), wasm)
	if err != nil {
		return nil, fmt.Errorf("wasm program %s: invalid WebAssembly: %w", name, err)
	}
	defer cm.Close(context.Background())
	return inspectProgram(name, cm.ExportedFunctions(), cm.ImportedFunctions(), cm.ExportedMemories(), cm.ImportedMemories()), nil
}

// ProgramErr is nil for a valid program, or an error listing the
// problems.
func (in *Info) ProgramErr() error {
	if len(in.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("wasm program %s does not follow the zeroeng program ABI v%d:\n  %s", in.Name, ProgramABIVersion, strings.Join(in.Problems, "\n  "))
}

// inspectProgram checks a compiled module's exports and imports against
// the program ABI.
func inspectProgram(name string, exports map[string]api.FunctionDefinition, imports []api.FunctionDefinition, memories map[string]api.MemoryDefinition, importedMemories []api.MemoryDefinition) *Info {
	in := &Info{Name: name}
	problem := func(format string, args ...any) { in.Problems = append(in.Problems, fmt.Sprintf(format, args...)) }
	var markers []string
	for n, d := range exports {
		in.Exports = append(in.Exports, n+" "+formatSignature(d.ParamTypes(), d.ResultTypes()))
		if m := programMarker.FindStringSubmatch(n); m != nil {
			markers = append(markers, n)
			in.ABIVersion, _ = strconv.Atoi(m[1])
		}
	}
	slices.Sort(in.Exports)
	switch {
	case len(markers) == 0:
		problem("no ABI marker: a zeroeng training program exports a function named zeroeng_program_abi_v%d", ProgramABIVersion)
	case len(markers) > 1:
		slices.Sort(markers)
		problem("several ABI markers (%s): a program declares one version", strings.Join(markers, ", "))
		in.ABIVersion = 0
	case in.ABIVersion != ProgramABIVersion:
		problem("built for the program ABI v%d; this zeroeng implements v%d", in.ABIVersion, ProgramABIVersion)
	}
	if d, ok := exports["_start"]; !ok {
		problem("no _start export: a training program is a WASI command (its main function is the run)")
	} else if len(d.ParamTypes())+len(d.ResultTypes()) != 0 {
		problem("export _start has type %s, want () -> ()", formatSignature(d.ParamTypes(), d.ResultTypes()))
	}
	if d, ok := exports["_initialize"]; ok && len(d.ParamTypes())+len(d.ResultTypes()) != 0 {
		problem("export _initialize has type %s, want () -> () (a WASI reactor's initialisation, called before _start)", formatSignature(d.ParamTypes(), d.ResultTypes()))
	}
	if d, ok := exports["zeroeng_callback"]; ok && !sig([]api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, api.ValueTypeI32).matches(d) {
		problem("export zeroeng_callback has type %s, want (i32, i32) -> i32 (the program's functions, ABI 1.1)", formatSignature(d.ParamTypes(), d.ResultTypes()))
	}
	if m, ok := memories["memory"]; ok {
		in.Memory = fmt.Sprintf("memory: %d pages initially", m.Min())
		if max, ok := m.Max(); ok {
			in.Memory += fmt.Sprintf(", at most %d", max)
		}
	} else {
		problem("no exported memory named \"memory\": the host reads and writes the program's buffers through it")
	}
	for _, m := range importedMemories {
		mod, n, _ := m.Import()
		problem("imports memory %s.%s: a program defines its own memory", mod, n)
	}
	funcs := programHostFuncs()
	for _, d := range imports {
		mod, n, _ := d.Import()
		in.Imports = append(in.Imports, mod+"."+n+" "+formatSignature(d.ParamTypes(), d.ResultTypes()))
		switch mod {
		case hostModule:
			var want signature
			if f, ok := funcs[n]; ok {
				want = sig(f.Params, f.Results...)
			} else if s, ok := hostSignatures[n]; ok {
				want = s
			} else {
				problem("imports %s.%s, which this host does not provide (program ABI v%d)", mod, n, ProgramABIVersion)
				continue
			}
			if !want.matches(d) {
				problem("imports %s.%s with type %s, want %s", mod, n, formatSignature(d.ParamTypes(), d.ResultTypes()), want)
			}
		case wasiModule:
		default:
			problem("imports %s.%s: a program may import only from %q and %q", mod, n, hostModule, wasiModule)
		}
	}
	slices.Sort(in.Imports)
	in.Imports = slices.Compact(in.Imports)
	return in
}

// Dir is a host directory a program sees through WASI (zeroeng run
// --dir): at Guest, read-only unless Writable. A program has no other
// files.
type Dir struct {
	Host, Guest string
	Writable    bool
}

// ParseDir reads --dir's value: HOST (seen at the same path), HOST:GUEST,
// and either with :ro (the default) or :rw. HOST must be a directory.
func ParseDir(s string) (Dir, error) {
	parts := strings.Split(s, ":")
	var d Dir
	if n := len(parts); n > 1 && (parts[n-1] == "rw" || parts[n-1] == "ro") {
		d.Writable = parts[n-1] == "rw"
		parts = parts[:n-1]
	}
	switch len(parts) {
	case 1:
		d.Host, d.Guest = parts[0], parts[0]
	case 2:
		d.Host, d.Guest = parts[0], parts[1]
	default:
		return Dir{}, fmt.Errorf("--dir %q: want HOST, HOST:GUEST, with :ro or :rw", s)
	}
	if d.Host == "" || d.Guest == "" {
		return Dir{}, fmt.Errorf("--dir %q: an empty path", s)
	}
	abs, err := filepath.Abs(d.Host)
	if err != nil {
		return Dir{}, fmt.Errorf("--dir %q: %w", s, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return Dir{}, fmt.Errorf("--dir %q: %s is not a directory", s, abs)
	}
	if d.Guest == d.Host {
		d.Guest = abs
	}
	if !strings.HasPrefix(d.Guest, "/") {
		return Dir{}, fmt.Errorf("--dir %q: the program's path %q must be absolute", s, d.Guest)
	}
	d.Host = abs
	return d, nil
}

// ExitError is a program's end by proc_exit with a status other than 0.
type ExitError struct{ Code uint32 }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Run instantiates the program and runs its _start with args (args[0]
// is the program's name) and the writers; ctx carries what the host
// functions need (the caller's per-instance state) and cancelling it
// stops the guest at its next loop check (an untrusted program). It
// returns nil when _start returns or the program exits with status 0, an
// *ExitError for another status, and otherwise the trap, which names the
// function that failed (from the name section).
func (p *Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer, dirs ...Dir) error {
	// The clocks and the random source are the host's (wazero's defaults
	// are fakes, deterministic for tests): a program times its epochs,
	// and its own random numbers are not the engine's seeded ones.
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().
		WithArgs(args...).WithStdout(stdout).WithStderr(stderr).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().WithRandSource(rand.Reader)
	if len(dirs) > 0 {
		fs := wazero.NewFSConfig()
		for _, d := range dirs {
			if d.Writable {
				fs = fs.WithDirMount(d.Host, d.Guest)
			} else {
				fs = fs.WithReadOnlyDirMount(d.Host, d.Guest)
			}
		}
		cfg = cfg.WithFSConfig(fs)
	}
	mod, err := p.rt.rt.InstantiateModule(withGuestMemory(ctx), p.cm, cfg)
	if err != nil {
		return ExitStatus(err)
	}
	defer mod.Close(context.Background())
	// A WASI reactor (a C program built with -mexec-model=reactor, whose
	// exports wasm-ld does not wrap with its constructors and
	// destructors) is initialised once, first.
	if init := mod.ExportedFunction("_initialize"); init != nil {
		if _, err := init.Call(ctx); err != nil {
			return ExitStatus(err)
		}
	}
	start := mod.ExportedFunction("_start")
	_, err = start.Call(ctx)
	return ExitStatus(err)
}

// ExitStatus turns the error of a call into a program (its _start, or a
// function it exports that the host calls) into Run's result: nil for
// its end or proc_exit(0), an *ExitError for another status, the trap or
// the interruption otherwise.
func ExitStatus(err error) error {
	var ee *sys.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() == 0:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() != sys.ExitCodeContextCanceled && ee.ExitCode() != sys.ExitCodeDeadlineExceeded:
		return &ExitError{Code: ee.ExitCode()}
	}
	return err
}
