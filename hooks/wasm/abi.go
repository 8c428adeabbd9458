package wasm

import (
	"fmt"
	"regexp"
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
)

var statusNames = [...]string{"OK", "ERR_INVALID", "ERR_HANDLE", "ERR_BOUNDS", "ERR_DTYPE", "ERR_SIZE", "ERR_COMM", "ERR_NOMEM", "ERR_CALL", "ERR_LIMIT"}

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

var markerPattern = regexp.MustCompile(`^zeroeng_hook_abi_v([0-9]+)$`)

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
	// Problems are the ways it breaks the ABI; a valid hook has none.
	Problems []string
}

// Err is nil for a valid hook, or an error listing the problems.
func (in *Info) Err() error {
	if len(in.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("wasm hook %s does not follow the zeroeng hook ABI v%d:\n  %s", in.Name, ABIVersion, strings.Join(in.Problems, "\n  "))
}

// inspect checks a compiled module's exports and imports against the ABI.
func inspect(name string, exports map[string]api.FunctionDefinition, imports []api.FunctionDefinition, memories map[string]api.MemoryDefinition, importedMemories []api.MemoryDefinition) *Info {
	in := &Info{Name: name}
	problem := func(format string, args ...any) { in.Problems = append(in.Problems, fmt.Sprintf(format, args...)) }

	var markers []string
	for n, d := range exports {
		in.Exports = append(in.Exports, n+" "+formatSignature(d.ParamTypes(), d.ResultTypes()))
		if m := markerPattern.FindStringSubmatch(n); m != nil {
			markers = append(markers, n)
			v, _ := strconv.Atoi(m[1])
			in.ABIVersion = v
		}
	}
	slices.Sort(in.Exports)
	switch {
	case len(markers) == 0:
		problem("no ABI marker: a zeroeng hook exports a function named zeroeng_hook_abi_v%d", ABIVersion)
	case len(markers) > 1:
		slices.Sort(markers)
		problem("several ABI markers (%s): a module declares one version", strings.Join(markers, ", "))
		in.ABIVersion = 0
	case in.ABIVersion != ABIVersion:
		problem("built for the hook ABI v%d; this zeroeng implements v%d", in.ABIVersion, ABIVersion)
	default:
		if d := exports[markers[0]]; len(d.ParamTypes())+len(d.ResultTypes()) != 0 {
			problem("export %s has type %s, want () -> ()", markers[0], formatSignature(d.ParamTypes(), d.ResultTypes()))
		}
	}
	for _, e := range exportSpecs {
		d, ok := exports[e.name]
		switch {
		case !ok && e.required:
			problem("missing export %s %s", e.name, e.sig)
		case ok && !e.sig.matches(d):
			problem("export %s has type %s, want %s", e.name, formatSignature(d.ParamTypes(), d.ResultTypes()), e.sig)
		}
	}
	if _, ok := exports["configure"]; ok {
		if _, ok := exports["alloc"]; !ok {
			problem("exports configure but not alloc, which the host needs to pass the configuration")
		}
	}
	if _, ok := exports["_start"]; ok {
		problem("exports _start: a hook is a reactor (built with -buildmode=c-shared, or with --no-entry), not a command")
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
		problem("imports memory %s.%s: a hook defines its own memory", mod, n)
	}

	for _, d := range imports {
		mod, n, _ := d.Import()
		in.Imports = append(in.Imports, mod+"."+n+" "+formatSignature(d.ParamTypes(), d.ResultTypes()))
		switch mod {
		case hostModule:
			want, ok := hostSignatures[n]
			switch {
			case !ok:
				problem("imports %s.%s, which this host does not provide (ABI v%d)", mod, n, ABIVersion)
			case !want.matches(d):
				problem("imports %s.%s with type %s, want %s", mod, n, formatSignature(d.ParamTypes(), d.ResultTypes()), want)
			}
		case wasiModule:
			// Checked against wazero's WASI when the module is
			// instantiated; the sandbox gives WASI no files, network
			// or environment.
		default:
			problem("imports %s.%s: a hook may import only from %q and %q", mod, n, hostModule, wasiModule)
		}
	}
	// A module may import one function under two names in its own
	// index space (Go's wasip1 port does): list it once.
	slices.Sort(in.Imports)
	in.Imports = slices.Compact(in.Imports)
	return in
}
