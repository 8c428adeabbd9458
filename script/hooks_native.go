package script

import (
	"encoding/json"
	"time"

	"github.com/dop251/goja"

	"github.com/zeroeng/zeroeng/engine/ddp"
	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/zero"
)

// WasmHookOptions are the command line's settings for Wasm comm hooks
// (docs/wasm-hook-abi.md) and Wasm step schedules
// (docs/wasm-schedule-abi.md).
type WasmHookOptions struct {
	// Path, when set, is the hook every DistributedDataParallel starts
	// with (zeroeng run --hook); a registerCommHook replaces it.
	Path string
	// Config is handed to that hook's configure export.
	Config string
	// Limits and OnError are the defaults of every Wasm hook the job
	// makes; a script's options override them. Limits are the Wasm
	// schedules' defaults too.
	Limits  wasm.Config
	OnError wasm.Policy
	// Schedule, when set, is the step schedule of a
	// zero.hookWithZeroSchedule given none (zeroeng run --zero-schedule),
	// and ScheduleConfig is handed to its configure export.
	Schedule       string
	ScheduleConfig string
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
	r.checkKeys(fn, opts, "memoryLimitMB", "timeoutMs", "onError", "config", "trusted")
	cfg := r.wasmLimits(fn, opts)
	policy, err := wasm.ParsePolicy(optString(opts, "onError", r.opts.Hooks.OnError.String()))
	if err != nil {
		r.throw(err)
	}
	return r.newWasmHook(pg, path, cfg, wasm.Options{OnError: policy, Configuration: r.wasmConfiguration(fn, opts)})
}

// wasmLimits reads the options memoryLimitMB, timeoutMs and trusted of a
// Wasm module (defaults: zeroeng run's --hook-* flags).
func (r *Runtime) wasmLimits(fn string, opts *goja.Object) wasm.Config {
	def := r.opts.Hooks.Limits
	ms := r.optNumber(fn, opts, "timeoutMs", float64(def.Timeout)/1e6)
	if !(ms >= 0 && ms <= maxHookTimeoutMs) { // NaN fails too
		r.throwRangef("%s: timeoutMs must be a number of milliseconds from 0 (no limit) to %d (a day), got %v", fn, maxHookTimeoutMs, ms)
	}
	return wasm.Config{
		MemoryLimitMB: r.optInt(fn, opts, "memoryLimitMB", def.MemoryLimitMB),
		Timeout:       time.Duration(ms * 1e6),
		Trusted:       optBool(opts, "trusted", def.Trusted),
	}
}

// wasmConfiguration reads the option config of a Wasm module: a string
// as it is, another value as JSON; nil when there is none.
func (r *Runtime) wasmConfiguration(fn string, opts *goja.Object) []byte {
	v := optValue(opts, "config")
	if v == nil {
		return nil
	}
	if s, ok := stringOf(v); ok {
		return []byte(s)
	}
	config, err := json.Marshal(v.Export())
	if err != nil {
		r.throwf("%s: option config: %v", fn, err)
	}
	return config
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
	if r.hooksInterrupted {
		h.Interrupt() // made after the job's stop: it stops too
	}
	r.hooksMu.Unlock()
	return h.CommHook()
}

// interruptHooks stops this rank's calls into Wasm hooks and schedules
// where they can be stopped (see wasm.Hook.Interrupt); they fail from
// then on.
//
// It stays: an instance made afterwards (a rank still setting up when
// another failed) is interrupted as it is made, so that none of its calls
// can run forever after the job's stop.
func (r *Runtime) interruptHooks() {
	r.hooksMu.Lock()
	defer r.hooksMu.Unlock()
	r.hooksInterrupted = true
	for _, h := range r.wasmHooks {
		h.Interrupt()
	}
	for _, s := range r.wasmSchedules {
		s.Interrupt()
	}
}

// wasmSchedule makes this rank's instance of the Wasm step schedule
// (docs/wasm-schedule-abi.md) described by the object
// hooks.wasmSchedule(path, options) returned: options are memoryLimitMB,
// timeoutMs, trusted and config, as hooks.wasm's. There is no onError: a
// schedule has no fallback, since updates cannot be undone.
func (r *Runtime) wasmSchedule(pg dist.ProcessGroup, o *goja.Object) zero.Schedule {
	const fn = "hooks.wasmSchedule"
	opts, _ := optValue(o, "options").(*goja.Object)
	r.checkKeys(fn, opts, "memoryLimitMB", "timeoutMs", "config", "trusted")
	return r.newWasmSchedule(pg, o.Get("path").String(), r.wasmLimits(fn, opts), r.wasmConfiguration(fn, opts))
}

// commandLineSchedule is the schedule of zeroeng run --zero-schedule, for
// a zero.hookWithZeroSchedule given none.
func (r *Runtime) commandLineSchedule(pg dist.ProcessGroup) zero.Schedule {
	def := r.opts.Hooks
	if def.Schedule == "" {
		r.throwf("zero.hookWithZeroSchedule: no schedule given and no --zero-schedule on the command line")
	}
	var config []byte
	if def.ScheduleConfig != "" {
		config = []byte(def.ScheduleConfig)
	}
	return r.newWasmSchedule(pg, def.Schedule, def.Limits, config)
}

// newWasmSchedule loads the schedule module at path (compiled once per
// process) and instantiates it for this rank of pg, the group whose
// buckets it schedules, until the runtime closes.
func (r *Runtime) newWasmSchedule(pg dist.ProcessGroup, path string, cfg wasm.Config, config []byte) zero.Schedule {
	m, err := wasm.LoadSchedule(path, cfg)
	if err != nil {
		r.throw(err)
	}
	s, err := m.NewSchedule(pg, wasm.ScheduleOptions{Configuration: config,
		Stdout: sharedWriter{r.opts.Stdout}, Stderr: sharedWriter{r.opts.Stderr}, Prefix: r.opts.Prefix})
	if err != nil {
		r.throw(err)
	}
	r.hooksMu.Lock()
	r.wasmSchedules = append(r.wasmSchedules, s)
	if r.hooksInterrupted {
		s.Interrupt()
	}
	r.hooksMu.Unlock()
	r.closers = append(r.closers, func() { s.Close() })
	return s
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
