package script

import (
	"encoding/json"
	"time"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/hooks/wasm"
)

// WasmHookOptions are the command line's settings for Wasm comm hooks
// (docs/wasm-hook-abi.md).
type WasmHookOptions struct {
	// Path, when set, is the hook every DistributedDataParallel starts
	// with (zeroeng run --hook); a registerCommHook replaces it.
	Path string
	// Config is handed to that hook's configure export.
	Config string
	// Limits and OnError are the defaults of every Wasm hook the job
	// makes; a script's options override them.
	Limits  wasm.Config
	OnError wasm.Policy
}

// maxHookTimeoutMs bounds timeoutMs: a day, far beyond any hook call, and
// far inside what a time.Duration holds.
const maxHookTimeoutMs = 24 * 60 * 60 * 1000

// wasmHook makes this rank's instance of the Wasm hook described by the
// object hooks.wasm(path, options) returned: options are memoryLimitMB,
// timeoutMs, onError ("abort" or "fallback"), config (a string, or a
// value passed as JSON) and trusted (compiled without loop checks: faster,
// but a call cannot be interrupted, so it excludes timeoutMs); all but
// config default to zeroeng run's --hook-* flags.
func (r *Runtime) wasmHook(pg dist.ProcessGroup, o *goja.Object) ddp.CommHook {
	const fn = "hooks.wasm"
	path := o.Get("path").String()
	opts, _ := optValue(o, "options").(*goja.Object)
	def := r.opts.Hooks
	r.checkKeys(fn, opts, "memoryLimitMB", "timeoutMs", "onError", "config", "trusted")
	ms := r.optNumber(fn, opts, "timeoutMs", float64(def.Limits.Timeout)/1e6)
	if !(ms >= 0 && ms <= maxHookTimeoutMs) { // NaN fails too
		r.throwRangef("%s: timeoutMs must be a number of milliseconds from 0 (no limit) to %d (a day), got %v", fn, maxHookTimeoutMs, ms)
	}
	cfg := wasm.Config{
		MemoryLimitMB: r.optInt(fn, opts, "memoryLimitMB", def.Limits.MemoryLimitMB),
		Timeout:       time.Duration(ms * 1e6),
		Trusted:       optBool(opts, "trusted", def.Limits.Trusted),
	}
	policy, err := wasm.ParsePolicy(optString(opts, "onError", def.OnError.String()))
	if err != nil {
		r.throw(err)
	}
	var config []byte
	if v := optValue(opts, "config"); v != nil {
		if s, ok := v.Export().(string); ok {
			config = []byte(s)
		} else if config, err = json.Marshal(v.Export()); err != nil {
			r.throwf("%s: option config: %v", fn, err)
		}
	}
	return r.newWasmHook(pg, path, cfg, wasm.Options{OnError: policy, Configuration: config})
}

// newWasmHook loads the module at path (compiled once per process) and
// instantiates it for this rank, until the runtime closes.
func (r *Runtime) newWasmHook(pg dist.ProcessGroup, path string, cfg wasm.Config, o wasm.Options) ddp.CommHook {
	m, err := wasm.Load(path, cfg)
	if err != nil {
		r.throw(err)
	}
	o.Stdout, o.Stderr, o.Prefix = sharedWriter{r.opts.Stdout}, sharedWriter{r.opts.Stderr}, r.opts.Prefix
	h, err := m.NewHook(pg, r.rt, o)
	if err != nil {
		r.throw(err)
	}
	r.closers = append(r.closers, func() { h.Close() })
	r.hooksMu.Lock()
	r.wasmHooks = append(r.wasmHooks, h)
	r.hooksMu.Unlock()
	return h.CommHook()
}

// interruptHooks stops this rank's calls into Wasm hooks where they can be
// stopped (see wasm.Hook.Interrupt); the hooks fail from then on.
func (r *Runtime) interruptHooks() {
	r.hooksMu.Lock()
	defer r.hooksMu.Unlock()
	for _, h := range r.wasmHooks {
		h.Interrupt()
	}
}

// defaultWasmHook is the hook of zeroeng run --hook, for a new DDP.
func (r *Runtime) defaultWasmHook(pg dist.ProcessGroup) ddp.CommHook {
	def := r.opts.Hooks
	var config []byte
	if def.Config != "" {
		config = []byte(def.Config)
	}
	return r.newWasmHook(pg, def.Path, def.Limits, wasm.Options{OnError: def.OnError, Configuration: config})
}
