// Package nvrtc owns the run-time binding to NVIDIA's runtime compiler,
// NVRTC (libnvrtc): compiling CUDA C++ source to PTX or CUBIN in process.
// It only binds: which kernels to compile, for which architecture, and the
// caching of the results belong to package gpu.
//
// The library is found by gpu/libs (Spec: libnvrtc.so.13, .12 or .11.2,
// including the folder nvidia/cuda_nvrtc/lib of NVIDIA's Python wheels) and
// called with purego, so the binary builds without cgo and without the CUDA
// toolkit. Every call's nvrtcResult is checked: a failure is an *Error
// naming the call, the program and the result (from nvrtcGetErrorString),
// with the compiler's log for a failed compilation.
//
// The C signatures bound here are those of nvrtc.h (CUDA 11.2 to 13);
// nvrtcGetCUBIN (11.1) and nvrtcGetSupportedArchs (11.2) are used when the
// library exports them.
package nvrtc

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"github.com/zeroeng/zeroeng/gpu/libs"
)

// Spec describes NVRTC for gpu/libs: newest major first; the wheel of CUDA
// 11 names its library libnvrtc.so.11.2.
var Spec = libs.Spec{
	Name:    "NVRTC",
	Sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"},
	Symbol:  "nvrtcCompileProgram",
	// NVRTC opens its builtins library by name at every compilation: from
	// a wheel's folder, which the loader does not search, that fails with
	// NVRTC_ERROR_BUILTIN_OPERATION_FAILURE unless it is loaded first.
	Deps: []string{"libnvrtc-builtins.so.*"},
}

// nvrtcResult values (nvrtc.h).
const (
	success     = 0  // NVRTC_SUCCESS
	compilation = 6  // NVRTC_ERROR_COMPILATION
	numResults  = 18 // NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED (17, CUDA 13) + 1
)

// resultNames are the names of nvrtcResult values, for an Error built
// without the library's nvrtcGetErrorString.
var resultNames = [numResults]string{
	"NVRTC_SUCCESS",
	"NVRTC_ERROR_OUT_OF_MEMORY",
	"NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
	"NVRTC_ERROR_INVALID_INPUT",
	"NVRTC_ERROR_INVALID_PROGRAM",
	"NVRTC_ERROR_INVALID_OPTION",
	"NVRTC_ERROR_COMPILATION",
	"NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
	"NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
	"NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
	"NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
	"NVRTC_ERROR_INTERNAL_ERROR",
	"NVRTC_ERROR_TIME_FILE_WRITE_FAILED",
	"NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED",
	"NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED",
	"NVRTC_ERROR_PCH_CREATE",
	"NVRTC_ERROR_CANCELLED",
	"NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED",
}

// Error is a failed NVRTC call.
type Error struct {
	Call string // the function and the program: "nvrtcCompileProgram(elementwise.cu)"
	Code int    // the nvrtcResult
	Log  string // the program's log, for a failed compilation
	name string // nvrtcGetErrorString(Code), when the library was asked
}

func (e *Error) Error() string {
	s := e.Call + ": " + e.Name()
	if log := strings.TrimSpace(e.Log); log != "" {
		s += ": " + log
	}
	return s
}

// Name is the nvrtcResult's name: "NVRTC_ERROR_COMPILATION".
func (e *Error) Name() string {
	switch {
	case e.name != "":
		return e.name
	case e.Code >= 0 && e.Code < numResults:
		return resultNames[e.Code]
	}
	return fmt.Sprintf("nvrtcResult %d", e.Code)
}

// Lib is a loaded NVRTC. Its methods may be called from several goroutines
// (NVRTC is thread-safe for distinct programs, and each Compile makes its
// own).
type Lib struct {
	Lib          *libs.Library
	Major, Minor int // nvrtcVersion

	getErrorString, createProgram, destroyProgram, compileProgram uintptr
	getPTXSize, getPTX, getLogSize, getLog                        uintptr
	getCUBINSize, getCUBIN                                        uintptr // 0 before NVRTC 11.1
	numSupportedArchs, supportedArchs                             uintptr // 0 before NVRTC 11.2
}

// Load finds NVRTC (gpu/libs) and binds it, once per process; later calls
// return the same Lib or the same error.
func Load() (*Lib, error) { return load() }

// LoadFrom loads and binds the library at path, without caching: for
// tests and for a user's explicit choice.
func LoadFrom(path string) (*Lib, error) { return loadFrom(path) }

var load, loadFrom = libs.Loaders(Spec, bind)

func bind(lib *libs.Library) (*Lib, error) {
	l := &Lib{Lib: lib}
	syms := lib.Symbols()
	var version uintptr
	syms.Need(&version, "nvrtcVersion")
	syms.Need(&l.getErrorString, "nvrtcGetErrorString")
	syms.Need(&l.createProgram, "nvrtcCreateProgram")
	syms.Need(&l.destroyProgram, "nvrtcDestroyProgram")
	syms.Need(&l.compileProgram, "nvrtcCompileProgram")
	syms.Need(&l.getPTXSize, "nvrtcGetPTXSize")
	syms.Need(&l.getPTX, "nvrtcGetPTX")
	syms.Need(&l.getLogSize, "nvrtcGetProgramLogSize")
	syms.Need(&l.getLog, "nvrtcGetProgramLog")
	if err := syms.Err(); err != nil {
		return nil, err
	}
	l.getCUBINSize = syms.Optional("nvrtcGetCUBINSize")
	l.getCUBIN = syms.Optional("nvrtcGetCUBIN")
	l.numSupportedArchs = syms.Optional("nvrtcGetNumSupportedArchs")
	l.supportedArchs = syms.Optional("nvrtcGetSupportedArchs")
	if l.getCUBINSize == 0 || l.getCUBIN == 0 {
		l.getCUBINSize, l.getCUBIN = 0, 0
	}
	if l.numSupportedArchs == 0 || l.supportedArchs == 0 {
		l.numSupportedArchs, l.supportedArchs = 0, 0
	}

	// nvrtcResult nvrtcVersion(int *major, int *minor)
	var major, minor int32
	if r := call(version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor))); r != success {
		return nil, l.err("nvrtcVersion", r, "")
	}
	l.Major, l.Minor = int(major), int(minor)
	return l, nil
}

// err makes the Error of a failed call, named by nvrtcGetErrorString.
func (l *Lib) err(fn string, r int32, log string) *Error {
	// const char *nvrtcGetErrorString(nvrtcResult result)
	name := goString(callPtr(l.getErrorString, uintptr(r)))
	if name == "" || strings.Contains(name, "unknown") {
		name = "" // the package's own table, or the number
	}
	return &Error{Call: fn, Code: int(r), Log: log, name: name}
}

// Output is what a compilation produced.
type Output struct {
	// PTX is the PTX text as nvrtcGetPTX writes it, including its
	// terminating NUL byte, which cuModuleLoadData needs. It may be nil
	// when the program was compiled for a real architecture (-arch=sm_XX)
	// and the library gave no PTX.
	PTX []byte
	// CUBIN is the CUBIN for an option -arch=sm_XX (a real architecture),
	// when the library has nvrtcGetCUBIN; nil otherwise.
	CUBIN []byte
	// Log is the compiler's log: warnings, or nothing.
	Log string
}

// Compile compiles one translation unit named name (used in messages and in
// the compiler's log). headers maps the names that #include directives use
// to the headers' sources; opts are NVRTC's options, passed in order. With
// an option -arch=sm_XX or --gpu-architecture=sm_XX (a real architecture)
// it returns a CUBIN when the library has nvrtcGetCUBIN; with compute_XX,
// PTX only.
func (l *Lib) Compile(src, name string, headers map[string]string, opts []string) (*Output, error) {
	prog := "(" + name + ")"
	if name == "" {
		prog = ""
	}
	var cs cstrings
	defer cs.unpin()

	includeNames := make([]string, 0, len(headers))
	for n := range headers {
		includeNames = append(includeNames, n)
	}
	sort.Strings(includeNames) // deterministic: the same input makes the same program
	contents := make([]string, len(includeNames))
	for i, n := range includeNames {
		contents[i] = headers[n]
	}
	hdrs, names := cs.array(contents), cs.array(includeNames)
	var nameArg uintptr
	if name != "" {
		nameArg = cs.str(name)
	}

	// nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src,
	//     const char *name, int numHeaders, const char * const *headers,
	//     const char * const *includeNames)
	var p uintptr
	if r := call(l.createProgram, uintptr(unsafe.Pointer(&p)), cs.str(src), nameArg,
		uintptr(len(includeNames)), hdrs, names); r != success {
		return nil, l.err("nvrtcCreateProgram"+prog, r, "")
	}
	// nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
	defer func() { call(l.destroyProgram, uintptr(unsafe.Pointer(&p))) }()

	// nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions,
	//     const char * const *options)
	r := call(l.compileProgram, p, uintptr(len(opts)), cs.array(opts))
	log, logErr := l.log(p, prog)
	if r != success {
		return nil, l.err("nvrtcCompileProgram"+prog, r, log)
	}
	if logErr != nil {
		return nil, logErr
	}
	out := &Output{Log: log}

	wantCUBIN := realArch(opts)
	var err error
	out.PTX, err = l.bytes(p, l.getPTXSize, l.getPTX, "nvrtcGetPTX"+prog)
	if err != nil && !(wantCUBIN && l.getCUBIN != 0) {
		return nil, err
	}
	if wantCUBIN && l.getCUBIN != 0 {
		out.CUBIN, err = l.bytes(p, l.getCUBINSize, l.getCUBIN, "nvrtcGetCUBIN"+prog)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// log reads the program's log, without its terminating NUL.
func (l *Lib) log(p uintptr, prog string) (string, error) {
	b, err := l.bytes(p, l.getLogSize, l.getLog, "nvrtcGetProgramLog"+prog)
	if err != nil {
		return "", err
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b), nil
}

// bytes reads one of the program's outputs with its size and copy
// functions, nvrtcResult f(nvrtcProgram, size_t *) and
// nvrtcResult g(nvrtcProgram, char *).
func (l *Lib) bytes(p, sizeFn, getFn uintptr, what string) ([]byte, error) {
	var n uint64
	if r := call(sizeFn, p, uintptr(unsafe.Pointer(&n))); r != success {
		return nil, l.err(what+"Size", r, "")
	}
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, n)
	if r := call(getFn, p, uintptr(unsafe.Pointer(&b[0]))); r != success {
		return nil, l.err(what, r, "")
	}
	return b, nil
}

// realArch reports whether the options ask for a real architecture
// (sm_XX), for which NVRTC makes a CUBIN: -arch=sm_90,
// --gpu-architecture=sm_90a, or the value in the next option. The last
// architecture option counts.
func realArch(opts []string) bool {
	real := false
	for i, o := range opts {
		v, ok := "", false
		for _, flag := range []string{"-arch", "--gpu-architecture"} {
			if rest, found := strings.CutPrefix(o, flag+"="); found {
				v, ok = rest, true
			} else if o == flag && i+1 < len(opts) {
				v, ok = opts[i+1], true
			}
		}
		if ok {
			real = strings.HasPrefix(v, "sm_")
		}
	}
	return real
}

// SupportedArchs lists the architectures this NVRTC compiles for, as
// numbers (90 for sm_90), from nvrtcGetSupportedArchs. The error wraps
// errors.ErrUnsupported when the library predates it (NVRTC < 11.2).
func (l *Lib) SupportedArchs() ([]int, error) {
	if l.supportedArchs == 0 {
		return nil, fmt.Errorf("nvrtc: %s (%s) has no nvrtcGetSupportedArchs: %w", l.Lib.Spec.Name, l.Lib.Path, errors.ErrUnsupported)
	}
	// nvrtcResult nvrtcGetNumSupportedArchs(int *numArchs)
	var n int32
	if r := call(l.numSupportedArchs, uintptr(unsafe.Pointer(&n))); r != success {
		return nil, l.err("nvrtcGetNumSupportedArchs", r, "")
	}
	if n <= 0 {
		return nil, nil
	}
	// nvrtcResult nvrtcGetSupportedArchs(int *supportedArchs)
	archs := make([]int32, n)
	if r := call(l.supportedArchs, uintptr(unsafe.Pointer(&archs[0]))); r != success {
		return nil, l.err("nvrtcGetSupportedArchs", r, "")
	}
	out := make([]int, n)
	for i, a := range archs {
		out[i] = int(a)
	}
	return out, nil
}

// cstrings makes NUL-terminated copies of Go strings, and arrays of
// pointers to them, for one call: the strings are pinned, so that an array
// (Go memory holding Go pointers) may be passed to C.
type cstrings struct {
	pin runtime.Pinner
}

// str returns the address of a pinned NUL-terminated copy of s.
func (c *cstrings) str(s string) uintptr {
	b := make([]byte, len(s)+1)
	copy(b, s)
	c.pin.Pin(&b[0])
	return uintptr(unsafe.Pointer(&b[0]))
}

// array returns the address of a pinned array of pointers to copies of ss,
// or 0 for none.
func (c *cstrings) array(ss []string) uintptr {
	if len(ss) == 0 {
		return 0
	}
	ptrs := make([]*byte, len(ss))
	for i, s := range ss {
		b := make([]byte, len(s)+1)
		copy(b, s)
		c.pin.Pin(&b[0])
		ptrs[i] = &b[0]
	}
	c.pin.Pin(&ptrs[0])
	return uintptr(unsafe.Pointer(&ptrs[0]))
}

func (c *cstrings) unpin() { c.pin.Unpin() }

// goString copies the NUL-terminated C string at p (0: "").
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	// The conversion goes through a pointer so that vet does not take the
	// address of C memory held in a uintptr for a misuse of unsafe.Pointer.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}
