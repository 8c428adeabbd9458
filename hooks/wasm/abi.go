package wasm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tetratelabs/wazero/api"

	"github.com/zeroeng/zeroeng/engine/dist"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// ABIVersion is the major version of docs/wasm-hook-abi.md this host
// implements.
const ABIVersion = 1

// Status is what every host function returns to the guest.
type Status uint32

// The statuses of the ABI, in its order.
const (
	OK Status = iota
	ErrInvalid
	ErrHandle
	ErrBounds
	ErrDType
	ErrSize
	ErrComm
	ErrNoMem
	// ErrCall (programs): the API function called raised an error, whose
	// message error_message gives.
	ErrCall
	// ErrLimit (programs): the program holds as many handles as it may.
	ErrLimit
	// ErrOrder (schedules): an action out of its order in the iteration
	// (a bucket acted on before its bucketReady, stepped or sent twice,
	// sent before its step), or a query outside an event.
	ErrOrder
)

var statusNames = [...]string{"OK", "ERR_INVALID", "ERR_HANDLE", "ERR_BOUNDS", "ERR_DTYPE", "ERR_SIZE", "ERR_COMM", "ERR_NOMEM", "ERR_CALL", "ERR_LIMIT", "ERR_ORDER"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status " + strconv.FormatUint(uint64(s), 10)
}

// DTypeCodes maps the dtype codes of the ABIs to the engine's: a hook
// knows the first four, a program all of them.
var DTypeCodes = [...]dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16, dtype.Int64, dtype.Float64, dtype.Int32, dtype.Uint8, dtype.Bool}

// abiDTypes are the hook ABI's.
var abiDTypes = DTypeCodes[:4]

func dtypeFromABI(code uint32) (dtype.DType, bool) {
	if int(code) < len(abiDTypes) {
		return abiDTypes[code], true
	}
	return dtype.Invalid, false
}

func dtypeToABI(dt dtype.DType) uint32 {
	if i := slices.Index(abiDTypes, dt); i >= 0 {
		return uint32(i)
	}
	return ^uint32(0)
}

// abiOps maps the ABI's reduce-op codes to the engine's.
var abiOps = [...]dist.ReduceOp{dist.Sum, dist.Avg, dist.Max, dist.Min, dist.Product}

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
	f64 = api.ValueTypeF64
)

// signature is a function type of the ABI.
type signature struct{ params, results []api.ValueType }

func sig(params []api.ValueType, results ...api.ValueType) signature {
	return signature{params, results}
}

func (s signature) matches(d api.FunctionDefinition) bool {
	return slices.Equal(s.params, d.ParamTypes()) && slices.Equal(s.results, d.ResultTypes())
}

func (s signature) equal(o signature) bool {
	return slices.Equal(s.params, o.params) && slices.Equal(s.results, o.results)
}

func (s signature) String() string { return formatSignature(s.params, s.results) }

func formatSignature(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		var b strings.Builder
		b.WriteByte('(')
		for i, t := range ts {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(api.ValueTypeName(t))
		}
		b.WriteByte(')')
		return b.String()
	}
	return name(params) + " -> " + name(results)
}

// exportSpec is an export of the ABI.
type exportSpec struct {
	name     string
	sig      signature
	required bool
}

var exportSpecs = []exportSpec{
	{"_initialize", sig(nil), false},
	{"alloc", sig([]api.ValueType{i32}, i32), false},
	{"configure", sig([]api.ValueType{i32, i32}, i32), false},
	{"init", sig([]api.ValueType{i32, i32}, i32), false},
	{"on_bucket", sig([]api.ValueType{i32}, i32), true},
	{"on_bucket_done", sig([]api.ValueType{i32}, i32), false},
	{"on_step_end", sig([]api.ValueType{i64}, i32), false},
}

// hostModule is the import module of the host functions.
const hostModule = "zeroeng"

// wasiModule is the WASI module a guest may import from (its functions
// run sandboxed: see runtime.go).
const wasiModule = "wasi_snapshot_preview1"

// kind is one of the module ABIs a Module follows: comm hooks
// (docs/wasm-hook-abi.md) and ZeRO step schedules
// (docs/wasm-schedule-abi.md). Both run in the same sandbox; they differ
// in their marker, their exports and the host functions they may import,
// which work only in an instance of their kind.
type kind struct {
	name    string // "hook", "schedule": in messages
	doc     string
	marker  string // the marker export's name, less its version
	version int    // the major version this host implements
	exports []exportSpec
	// events are the exports a module must have one of at least (none:
	// no such rule).
	events []string
	// host are the host functions a module may import, with their types.
	host map[string]signature
}

// markerName is the marker export of the version this host implements.
func (k *kind) markerName() string { return k.marker + strconv.Itoa(k.version) }

// markerVersion reads the version of export name if it is the kind's
// marker.
func (k *kind) markerVersion(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, k.marker)
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.Atoi(digits)
	return v, err == nil
}

var (
	hookKind = &kind{name: "hook", doc: "docs/wasm-hook-abi.md", marker: "zeroeng_hook_abi_v", version: ABIVersion,
		exports: exportSpecs, host: hostSignatures}
	scheduleKind = &kind{name: "schedule", doc: "docs/wasm-schedule-abi.md", marker: "zeroeng_sched_abi_v", version: ScheduleABIVersion,
		exports: scheduleExportSpecs, events: scheduleEvents, host: scheduleSignatures}
	kinds = []*kind{hookKind, scheduleKind}
)

// Info describes a module as the ABI sees it: what `zeroeng hook check`
// prints.
type Info struct {
	// Name is the module's name in messages (its file name).
	Name string
	// ABIVersion is the major version its marker export declares (0 when
	// it has none).
	ABIVersion int
	// Exports and Imports are the module's functions with their types,
	// sorted ("on_bucket (i32) -> (i32)", "zeroeng.all_reduce ...").
	Exports, Imports []string
	// Memory describes the exported memory ("" when there is none).
	Memory string
	// Problems are the ways it breaks the ABI; a valid module has none.
	Problems []string

	kind *kind // the ABI it was checked against (nil: the hook ABI)
}

// Err is nil for a valid module, or an error listing the problems.
func (in *Info) Err() error {
	if len(in.Problems) == 0 {
		return nil
	}
	k := in.kind
	if k == nil {
		k = hookKind
	}
	return fmt.Errorf("wasm %s %s does not follow the zeroeng %s ABI v%d:\n  %s", k.name, in.Name, k.name, k.version, strings.Join(in.Problems, "\n  "))
}

// inspect checks a compiled module's exports and imports against the ABI
// of kind k.
func inspect(k *kind, name string, exports map[string]api.FunctionDefinition, imports []api.FunctionDefinition, memories map[string]api.MemoryDefinition, importedMemories []api.MemoryDefinition) *Info {
	in := &Info{Name: name, kind: k}
	problem := func(format string, args ...any) { in.Problems = append(in.Problems, fmt.Sprintf(format, args...)) }

	var markers, foreign []string
	for n, d := range exports {
		in.Exports = append(in.Exports, n+" "+formatSignature(d.ParamTypes(), d.ResultTypes()))
		if v, ok := k.markerVersion(n); ok {
			markers = append(markers, n)
			in.ABIVersion = v
		} else if o := markedKind(n); o != "" {
			foreign = append(foreign, fmt.Sprintf("%s, the marker of a zeroeng %s", n, o))
		}
	}
	slices.Sort(in.Exports)
	slices.Sort(foreign)
	switch {
	case len(markers) == 0 && len(foreign) > 0:
		problem("no %s ABI marker: it exports %s, where a zeroeng %s exports %s", k.name, strings.Join(foreign, " and "), k.name, k.markerName())
	case len(markers) == 0:
		problem("no ABI marker: a zeroeng %s exports a function named %s", k.name, k.markerName())
	case len(markers) > 1:
		slices.Sort(markers)
		problem("several ABI markers (%s): a module declares one version", strings.Join(markers, ", "))
		in.ABIVersion = 0
	case in.ABIVersion != k.version:
		problem("built for the %s ABI v%d; this zeroeng implements v%d", k.name, in.ABIVersion, k.version)
	default:
		if d := exports[markers[0]]; len(d.ParamTypes())+len(d.ResultTypes()) != 0 {
			problem("export %s has type %s, want () -> ()", markers[0], formatSignature(d.ParamTypes(), d.ResultTypes()))
		}
	}
	for _, e := range k.exports {
		d, ok := exports[e.name]
		switch {
		case !ok && e.required:
			problem("missing export %s %s", e.name, e.sig)
		case ok && !e.sig.matches(d):
			problem("export %s has type %s, want %s", e.name, formatSignature(d.ParamTypes(), d.ResultTypes()), e.sig)
		}
	}
	if len(k.events) > 0 && !slices.ContainsFunc(k.events, func(e string) bool { _, ok := exports[e]; return ok }) {
		problem("exports none of the events %s: a %s acts in them", strings.Join(k.events, ", "), k.name)
	}
	if _, ok := exports["configure"]; ok {
		if _, ok := exports["alloc"]; !ok {
			problem("exports configure but not alloc, which the host needs to pass the configuration")
		}
	}
	if _, ok := exports["_start"]; ok {
		problem("exports _start: a %s is a reactor (built with -buildmode=c-shared, or with --no-entry), not a command", k.name)
	}

	if m, ok := memories["memory"]; ok {
		max, hasMax := m.Max()
		in.Memory = fmt.Sprintf("memory: %d pages initially", m.Min())
		if hasMax {
			in.Memory += fmt.Sprintf(", at most %d", max)
		}
	} else {
		problem("no exported memory named \"memory\": the host reads and writes guest buffers through it")
	}
	for _, m := range importedMemories {
		mod, n, _ := m.Import()
		problem("imports memory %s.%s: a %s defines its own memory", mod, n, k.name)
	}

	for _, d := range imports {
		mod, n, _ := d.Import()
		in.Imports = append(in.Imports, mod+"."+n+" "+formatSignature(d.ParamTypes(), d.ResultTypes()))
		switch mod {
		case hostModule:
			want, ok := k.host[n]
			switch {
			case !ok && hostKindOf(n) != nil:
				o := hostKindOf(n)
				problem("imports %s.%s, a function of the %s ABI (%s), which works only in a %s, not in a %s", mod, n, o.name, o.doc, o.name, k.name)
			case !ok:
				problem("imports %s.%s, which this host does not provide (%s ABI v%d)", mod, n, k.name, k.version)
			case !want.matches(d):
				problem("imports %s.%s with type %s, want %s", mod, n, formatSignature(d.ParamTypes(), d.ResultTypes()), want)
			}
		case wasiModule:
			// Checked against wazero's WASI when the module is
			// instantiated; the sandbox gives WASI no files, network
			// or environment.
		default:
			problem("imports %s.%s: a %s may import only from %q and %q", mod, n, k.name, hostModule, wasiModule)
		}
	}
	// A module may import one function under two names in its own
	// index space (Go's wasip1 port does): list it once.
	slices.Sort(in.Imports)
	in.Imports = slices.Compact(in.Imports)
	return in
}

// markedKind names the kind of module whose ABI marker name is ("" for
// none), so that a module of one kind given as another is told what it is.
func markedKind(name string) string {
	for _, k := range kinds {
		if _, ok := k.markerVersion(name); ok {
			return k.name
		}
	}
	if programMarker.MatchString(name) {
		return "training program"
	}
	return ""
}

// hostKindOf is the kind whose instances alone may call host function
// name (nil for a function every kind has, or none has).
func hostKindOf(name string) *kind {
	var of *kind
	for _, k := range kinds {
		if _, ok := k.host[name]; ok {
			if of != nil {
				return nil
			}
			of = k
		}
	}
	return of
}
