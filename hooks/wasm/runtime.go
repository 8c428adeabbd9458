package wasm

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/zeroeng/zeroeng/internal/safefile"
)

// DefaultMemoryLimitMB bounds a hook's linear memory, and as much again
// the host tensors it makes, unless Config says otherwise.
const DefaultMemoryLimitMB = 512

// Config is what a module is compiled for: the limits that shape the
// wazero runtime it runs on.
type Config struct {
	// MemoryLimitMB bounds the guest's linear memory (and the host
	// tensors it makes); 0 means DefaultMemoryLimitMB. At most 4096.
	MemoryLimitMB int
	// Timeout bounds the wall time of every call into the guest, host
	// calls included; 0 means no limit.
	Timeout time.Duration
	// Trusted compiles the module without the check wazero puts in every
	// loop, which is what lets a guest be interrupted (Ctrl-C, a failed
	// rank, Timeout) and lets Go's scheduler and garbage collector stop
	// it: loops run faster (docs/benchmarks.md), but a guest that never
	// returns then stalls the whole process, signals included. For
	// modules one wrote oneself.
	Trusted bool
}

func (c Config) memoryLimitMB() int {
	if c.MemoryLimitMB == 0 {
		return DefaultMemoryLimitMB
	}
	return c.MemoryLimitMB
}

func (c Config) validate() error { return c.validateFor(hookKind) }

// validateFor checks the limits of a module of kind k.
func (c Config) validateFor(k *kind) error {
	if c.MemoryLimitMB < 0 || c.MemoryLimitMB > 4096 {
		return fmt.Errorf("wasm %s: memory limit %d MiB is outside 1..4096 (WebAssembly's 32-bit memory)", k.name, c.MemoryLimitMB)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("wasm %s: negative time limit %v", k.name, c.Timeout)
	}
	if c.Timeout > 0 && c.Trusted {
		return fmt.Errorf("wasm %s: a time limit needs the loop checks that a trusted module is compiled without", k.name)
	}
	return nil
}

// runtimeKey identifies the wazero runtimes that differ in compiled code
// or limits; each is made once per process and shared.
type runtimeKey struct {
	memoryPages uint32
	unchecked   bool // Config.Trusted
	uncached    bool // Check's: nothing it compiles is kept
}

type sharedRuntime struct {
	rt   wazero.Runtime
	wasi map[string]api.FunctionDefinition
}

var (
	runtimesMu sync.Mutex
	runtimes   = map[runtimeKey]*sharedRuntime{}
	cacheOnce  sync.Once
	cache      wazero.CompilationCache
	cacheDir   string // the on-disk cache's directory, "" for none

	compiledMu sync.Mutex
	compiled   = map[compiledKey]*compiledEntry{}
)

type compiledKey struct {
	sum [sha256.Size]byte
	rt  runtimeKey
}

// compiledEntry is compiled once; every Module over the same bytes and
// limits shares it.
type compiledEntry struct {
	once sync.Once
	cm   wazero.CompiledModule
	err  error
}

// CacheDirEnv names the variable that moves the on-disk compilation
// cache ("off" keeps compiled code in memory only).
const CacheDirEnv = "ZEROENG_WASM_CACHE"

// compilationCache is the process's cache of compiled code, on disk
// (under the user's cache directory) so that a module compiles once per
// machine rather than once per run.
func compilationCache() wazero.CompilationCache {
	cacheOnce.Do(func() {
		dir := os.Getenv(CacheDirEnv)
		if dir == "" {
			if base, err := os.UserCacheDir(); err == nil {
				dir = filepath.Join(base, "zeroeng", "wasm")
			}
		}
		if dir != "" && dir != "off" {
			if c, err := wazero.NewCompilationCacheWithDir(dir); err == nil {
				cache, cacheDir = c, dir
				return
			}
		}
		cache = wazero.NewCompilationCache()
	})
	return cache
}

// clearCache removes the entries of wazero's folders in the cache
// directory (not the folders, which the open cache writes into, and
// nothing else the user may keep there).
func clearCache(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "wazero-") {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		files, _ := os.ReadDir(sub)
		for _, f := range files {
			os.RemoveAll(filepath.Join(sub, f.Name()))
		}
	}
}

// runtimeFor returns the shared runtime for the limits, with WASI and
// the host module instantiated.
func runtimeFor(key runtimeKey) (*sharedRuntime, error) {
	runtimesMu.Lock()
	defer runtimesMu.Unlock()
	if s, ok := runtimes[key]; ok {
		return s, nil
	}
	ctx := context.Background()
	cfg := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(key.memoryPages).
		// The memory is reserved at its limit (pages the guest never
		// touches cost nothing): it never moves, which the host's views
		// of it across calls need, and host calls stay cheaper than with
		// a memory that grows (measured: 2.4-2.9 against 3.0-3.7 µs a
		// small op from a C program).
		WithMemoryCapacityFromMax(true).
		WithCloseOnContextDone(!key.unchecked)
	if !key.uncached {
		cfg = cfg.WithCompilationCache(compilationCache())
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("wasm hook: WASI: %w", err)
	}
	if err := instantiateHost(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("wasm hook: host module: %w", err)
	}
	s := &sharedRuntime{rt: rt, wasi: rt.Module(wasiModule).ExportedFunctionDefinitions()}
	runtimes[key] = s
	return s, nil
}

// Module is a compiled module, valid against its ABI: a comm hook
// (Load, Compile) or a ZeRO step schedule (LoadSchedule,
// CompileSchedule). One Module serves every rank of the process: each
// makes its own instance with NewHook or NewSchedule.
type Module struct {
	name string
	kind *kind
	cfg  Config
	rt   *sharedRuntime
	cm   wazero.CompiledModule
	info *Info
}

// Name is the module's name in messages.
func (m *Module) Name() string { return m.name }

// Info describes the module's exports and imports.
func (m *Module) Info() *Info { return m.info }

// Load reads and compiles the hook module at path (see Compile).
func Load(path string, cfg Config) (*Module, error) { return load(hookKind, path, cfg) }

// LoadSchedule reads and compiles the step schedule module at path (see
// CompileSchedule).
func LoadSchedule(path string, cfg Config) (*Module, error) { return load(scheduleKind, path, cfg) }

func load(k *kind, path string, cfg Config) (*Module, error) {
	b, err := safefile.ReadFile(path, MaxModuleBytes)
	if err != nil {
		return nil, fmt.Errorf("wasm %s: %w", k.name, err)
	}
	return compileKind(k, filepath.Base(path), b, cfg)
}

// Compile compiles a hook module for the limits of cfg and checks it
// against the ABI. The compiled code is shared by every caller in the
// process that passes the same bytes and limits, and cached on disk.
func Compile(name string, wasm []byte, cfg Config) (*Module, error) {
	return compileKind(hookKind, name, wasm, cfg)
}

// CompileSchedule is Compile for a ZeRO step schedule
// (docs/wasm-schedule-abi.md): a module with the schedule ABI's marker,
// exports and imports; a hook is refused, saying so.
func CompileSchedule(name string, wasm []byte, cfg Config) (*Module, error) {
	return compileKind(scheduleKind, name, wasm, cfg)
}

func compileKind(k *kind, name string, wasm []byte, cfg Config) (*Module, error) {
	if err := cfg.validateFor(k); err != nil {
		return nil, err
	}
	s, cm, err := compileFor(cfg, wasm)
	if err != nil {
		return nil, fmt.Errorf("wasm %s %s: %w", k.name, name, err)
	}
	info := inspectCompiled(k, name, cm, s, hasStartSection(wasm))
	if err := info.Err(); err != nil {
		return nil, err
	}
	return &Module{name: name, kind: k, cfg: cfg, rt: s, cm: cm, info: info}, nil
}

// compileFor compiles wasm on the shared runtime for cfg's (valid)
// limits.
func compileFor(cfg Config, wasm []byte) (*sharedRuntime, wazero.CompiledModule, error) {
	key := runtimeKey{memoryPages: uint32(cfg.memoryLimitMB()) * 16, unchecked: cfg.Trusted}
	s, err := runtimeFor(key)
	if err != nil {
		return nil, nil, err
	}
	cm, err := compile(s, key, wasm)
	return s, cm, err
}

func compile(s *sharedRuntime, key runtimeKey, wasm []byte) (wazero.CompiledModule, error) {
	if err := prescan(wasm); err != nil {
		return nil, err
	}
	ck := compiledKey{sha256.Sum256(wasm), key}
	compiledMu.Lock()
	e, ok := compiled[ck]
	if !ok {
		e = &compiledEntry{}
		compiled[ck] = e
	}
	compiledMu.Unlock()
	e.once.Do(func() {
		e.cm, e.err = s.rt.CompileModule(context.Background(), wasm)
		if e.err != nil && strings.Contains(e.err.Error(), "compilationcache") && cacheDir != "" {
			// A damaged entry of the on-disk cache (a crash while it was
			// written, a disk error): clear the cache, compile afresh.
			fmt.Fprintf(os.Stderr, "zeroeng: the Wasm compilation cache in %s was damaged (%v); cleared it and compiled again\n", cacheDir, e.err)
			clearCache(cacheDir)
			e.cm, e.err = s.rt.CompileModule(context.Background(), wasm)
		}
		if e.err != nil {
			e.err = fmt.Errorf("invalid WebAssembly: %w", e.err)
		}
	})
	return e.cm, e.err
}

func inspectCompiled(k *kind, name string, cm wazero.CompiledModule, s *sharedRuntime, start bool) *Info {
	info := inspect(k, name, cm.ExportedFunctions(), cm.ImportedFunctions(), cm.ExportedMemories(), cm.ImportedMemories())
	if start {
		info.Problems = append(info.Problems, fmt.Sprintf("has a start function (a WebAssembly start section), which would run as each rank instantiates the module, outside the %s's calls: a %s initializes in _initialize or its init export", k.name, k.name))
	}
	for _, d := range cm.ImportedFunctions() {
		mod, n, _ := d.Import()
		if mod != wasiModule {
			continue
		}
		switch w, ok := s.wasi[n]; {
		case !ok:
			info.Problems = append(info.Problems, fmt.Sprintf("imports %s.%s, which is not a WASI preview 1 function", mod, n))
		case !(signature{w.ParamTypes(), w.ResultTypes()}).matches(d):
			info.Problems = append(info.Problems, fmt.Sprintf("imports %s.%s with type %s, want %s", mod, n,
				formatSignature(d.ParamTypes(), d.ResultTypes()), formatSignature(w.ParamTypes(), w.ResultTypes())))
		}
	}
	return info
}

// Check compiles wasm and describes it against the hook ABI without
// running anything: `zeroeng hook check`. The error is for bytes that are
// not a WebAssembly module at all; ABI problems are in Info.Problems.
func Check(name string, wasm []byte) (*Info, error) { return check(hookKind, name, wasm) }

// CheckSchedule is Check against the step schedule ABI.
func CheckSchedule(name string, wasm []byte) (*Info, error) { return check(scheduleKind, name, wasm) }

func check(k *kind, name string, wasm []byte) (*Info, error) {
	s, err := runtimeFor(runtimeKey{memoryPages: DefaultMemoryLimitMB * 16, uncached: true})
	if err != nil {
		return nil, err
	}
	// Checked modules are not kept: a check is a one-off (and the
	// fuzzer checks millions).
	if err := prescan(wasm); err != nil {
		return nil, fmt.Errorf("wasm %s %s: %w", k.name, name, err)
	}
	cm, err := s.rt.CompileModule(context.Background(), wasm)
	if err != nil {
		return nil, fmt.Errorf("wasm %s %s: invalid WebAssembly: %w", k.name, name, err)
	}
	defer cm.Close(context.Background())
	return inspectCompiled(k, name, cm, s, hasStartSection(wasm)), nil
}

func looksLikeWasm(b []byte) error {
	if len(b) < 4 || string(b[:4]) != "\x00asm" {
		return errors.New("not a WebAssembly module (it does not start with \\0asm)")
	}
	return nil
}
