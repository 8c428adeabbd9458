// Package kernels owns the CUDA C sources of zeroeng's GPU kernels, the
// description of their entry points, and the on-disk cache of compiled
// images. It compiles nothing itself: the gpu package hands Source to NVRTC
// on the user's machine at run time (the binary is built without cgo and
// without the CUDA toolkit) and keeps the result in a Cache.
//
// # Families
//
// The kernels come in families, one .cu file each, named after the CPU file
// whose semantics they reproduce (engine/cpu/elementwise.go → elementwise.cu,
// and so on): elementwise, reduce, nn, index, attention, optim, sortscan. A
// family is one NVRTC program and one module: Source returns common.cuh
// followed by the family's file, with #line directives so that compiler
// messages name the right file and line. The sources include no header at
// all (NVRTC's include path is not guaranteed); common.cuh defines what
// they share: bfloat16/float16 conversions bit-exact with engine/dtype, the
// strided layout, warp and group reductions, the shared row-softmax code.
//
// # Kernel ABI
//
// Entry points are extern "C" __global__ with unmangled names made of an
// operation and a type suffix: f32, f64, bf16, f16, i64, i32, u8, b (bool)
// for kernels that compute, s1, s2, s4, s8 (element size in bytes) for
// kernels that only move bits (copy_s4, where_s2, index_gather_s8), two
// suffixes for conversions (convert_<dst>_<src>). Parameters are
//
//   - pointers (8 bytes) to an operand's element 0, that is the buffer's
//     base plus the view's offset times the element size; an optional
//     operand that is absent is a null pointer;
//   - int (4 bytes) for op codes (the numeric values of device.UnaryOp,
//     ActivationOp, BinaryOp, ReduceOp), flags and group sizes;
//   - long long (8 bytes) for counts, extents and strides, in elements;
//   - double (8 bytes) for scalars, float (4 bytes) where a kernel wants a
//     value already rounded to float32 by the host (the optimizer steps);
//   - a Layout or Reduce struct by value (8-byte aligned) for strided
//     operands: shapes and strides with dimensions innermost first (see
//     Layout). The host coalesces dimensions first and refuses more than
//     MaxDim.
//
// Kernels use grid-stride loops with 64-bit indices, so any grid size is
// correct; the launch shape only changes speed, except for kernels with a
// group parameter: the row kernels and reduce_rows take a warp (32) or the
// whole block (blockDim.x) per row or output, argmax a thread (1) or a warp
// (32), scan a thread (1) or the whole block, and their reductions assume
// exactly those shapes; sort_tile holds ZE_SORT_TILE elements whatever its
// block size. The two
// validation kernels, index_check and cross_entropy_check, carry no
// suffix; they record the first bad index or target in a flag the host
// zeroes before and reads after, and the kernels that follow them do
// nothing when it is set.
//
// Kernels lists every entry point with its parameters' C types, sizes and
// alignments, read from the sources themselves (see Kernels), so that the
// gpu package can check the arguments it packs against what the kernel
// declares.
//
// # Numerics
//
// The CPU engine is the reference, formula by formula: float32 and the
// 16-bit types compute in float (the CPU widens the 16-bit types to float32
// and rounds the results once), float64 in double, and sums accumulate in
// double (int64 for int64), as the CPU's do. Where the CPU rounds a product
// before an addition that can cancel, or fuses it (the optimizer steps,
// layer norm), the kernels say so explicitly with __fmul_rn, fmaf and the
// like, so that NVRTC's contraction of a·b+c (on by default) cannot change
// the result. Elsewhere results differ from the CPU's by rounding only:
// CUDA's float transcendentals (within 1-4 ulp), the order of sums, and the
// order of the atomic additions of IndexAdd and ScatterAdd, which also
// varies from run to run.
//
// # Testing without a GPU
//
// The tests compile every family with clang's CUDA front end when clang is
// installed. Package kernelstest compiles the families as host C++ with an
// emulation of CUDA's builtins, so that a fake driver can run the kernels
// for real and the engine's conformance suite can compare them with the
// CPU engine.
//
// # Cache
//
// Compiled images are stored under a Key derived from the full source, the
// target architecture, the compiler's version and the compiler options, in
// a directory chosen by DefaultCache: $ZEROENG_KERNEL_CACHE, or
// os.UserCacheDir()/zeroeng/kernels; ZEROENG_KERNEL_CACHE=off disables it.
// Writes are atomic (temporary file, fsync, rename) and every file carries
// a checksum, so neither a crash nor a concurrent reader ever sees half an
// image.
package kernels

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

//go:embed common.cuh *.cu
var sources embed.FS

const commonFile = "common.cuh"

// Families lists the kernel families, in alphabetical order.
func Families() []string {
	entries, err := fs.Glob(sources, "*.cu")
	if err != nil {
		panic(err) // the pattern is constant
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e, ".cu"))
	}
	slices.Sort(out)
	return out
}

func read(name string) (string, error) {
	b, err := sources.ReadFile(name)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func familyText(family string) (common, fam string, err error) {
	if family == "" || strings.ContainsAny(family, "/\\.") {
		return "", "", fmt.Errorf("kernels: no family %q", family)
	}
	if common, err = read(commonFile); err != nil {
		return "", "", err
	}
	if fam, err = read(family + ".cu"); err != nil {
		return "", "", fmt.Errorf("kernels: no family %q", family)
	}
	return common, fam, nil
}

// Source returns the complete CUDA C++ translation unit of a family:
// common.cuh, then the family's .cu, each preceded by a #line directive.
func Source(family string) (string, error) {
	common, fam, err := familyText(family)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(common) + len(fam) + 64)
	fmt.Fprintf(&b, "#line 1 %q\n", commonFile)
	b.WriteString(common)
	if !strings.HasSuffix(common, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "#line 1 %q\n", path.Base(family+".cu"))
	b.WriteString(fam)
	return b.String(), nil
}

// Param is one parameter of a kernel.
type Param struct {
	Type  string // C type, typedefs resolved: "const float*", "long long", "ZeLayout"
	Name  string
	Size  int // bytes
	Align int // bytes
}

// Signature is one kernel entry point.
type Signature struct {
	Name   string
	Params []Param
	// MaxThreads is the kernel's __launch_bounds__: the most threads a
	// block it may be launched with; 0 when the source declares none.
	// The compiler fits the kernel's registers to it (at 1024 threads, 64
	// a thread), so a launch with more threads would fail with
	// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.
	MaxThreads int
}

// Kernels returns the entry points of a family in source order.
//
// The sources write every kernel's signature out in full, one short
// definition per kernel and type (unary_f32, unary_f64, ...) whose body
// calls a shared template: a search for a kernel's name finds its
// parameters, and so does a fake driver that looks names up in the source
// text. Kernels reads those declarations from the source itself rather
// than from a second, hand-written table that could drift: it strips
// comments, resolves typedefs (i64 → long long), and collects every
// `extern "C" __global__ void name(params)`. It also expands function-like
// macros (parameter substitution, ## pasting, rescanning; no #if, no #),
// should a family ever stamp kernels out with one. The tests check the
// result against the entry points clang emits when clang is installed.
func Kernels(family string) ([]Signature, error) {
	kernelsOnce.Do(parseAll)
	r, ok := parsed[family]
	if !ok {
		if _, _, err := familyText(family); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("kernels: family %q was not parsed", family)
	}
	if r.err != nil {
		return nil, r.err
	}
	return slices.Clone(r.sigs), nil
}

// Lookup returns the signature of one kernel of a family.
func Lookup(family, kernel string) (Signature, error) {
	sigs, err := Kernels(family)
	if err != nil {
		return Signature{}, err
	}
	for _, s := range sigs {
		if s.Name == kernel {
			return s, nil
		}
	}
	return Signature{}, fmt.Errorf("kernels: family %s has no kernel %s", family, kernel)
}

type parseResult struct {
	sigs []Signature
	err  error
}

var (
	kernelsOnce sync.Once
	parsed      map[string]parseResult
)

func parseAll() {
	parsed = make(map[string]parseResult)
	for _, f := range Families() {
		common, fam, err := familyText(f)
		if err != nil {
			parsed[f] = parseResult{err: err}
			continue
		}
		sigs, err := parseKernels(common + "\n" + fam)
		if err != nil {
			err = fmt.Errorf("kernels: family %s: %w", f, err)
		}
		parsed[f] = parseResult{sigs, err}
	}
}

// ---------------------------------------------------------------------------
// The mini preprocessor.

type macro struct {
	params []string
	body   []string // tokens
}

var (
	defineRe  = regexp.MustCompile(`^\s*#\s*define\s+([A-Za-z_]\w*)\(([^)]*)\)(.*)$`)
	typedefRe = regexp.MustCompile(`\btypedef\s+([^;{}]+?)\s+([A-Za-z_]\w*)\s*;`)
)

// parseKernels extracts the kernel signatures of one translation unit.
func parseKernels(src string) ([]Signature, error) {
	text := stripComments(src)
	text = strings.ReplaceAll(text, "\\\r\n", " ")
	text = strings.ReplaceAll(text, "\\\n", " ")

	macros := make(map[string]*macro)
	var code strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "#") {
			code.WriteString(line)
			code.WriteByte('\n')
			continue
		}
		m := defineRe.FindStringSubmatch(line)
		if m == nil {
			continue // other directives (#pragma, object-like #define, #line) do not shape signatures
		}
		var params []string
		for _, p := range strings.Split(m[2], ",") {
			if p = strings.TrimSpace(p); p != "" {
				params = append(params, p)
			}
		}
		macros[m[1]] = &macro{params: params, body: tokenize(m[3])}
	}

	typedefs := make(map[string][]string)
	for _, m := range typedefRe.FindAllStringSubmatch(code.String(), -1) {
		typedefs[m[2]] = tokenize(m[1])
	}

	toks, err := expand(tokenize(code.String()), macros, nil, 0)
	if err != nil {
		return nil, err
	}
	var sigs []Signature
	seen := make(map[string]bool)
	for i := 0; i+5 < len(toks); i++ {
		if toks[i] != "extern" || toks[i+1] != `"C"` || toks[i+2] != "__global__" {
			continue
		}
		start := i
		i += 3
		maxThreads := 0
		if toks[i] == "__launch_bounds__" {
			n, next, err := launchBounds(toks, i+1)
			if err != nil {
				return nil, fmt.Errorf("kernel declaration near %q: %w", strings.Join(toks[start:min(len(toks), start+8)], " "), err)
			}
			maxThreads, i = n, next
		}
		if i+2 >= len(toks) || toks[i] != "void" || !isIdent(toks[i+1]) || toks[i+2] != "(" {
			return nil, fmt.Errorf("malformed kernel declaration near %q", strings.Join(toks[start:min(len(toks), start+10)], " "))
		}
		name := toks[i+1]
		first := i + 3 // the first token after "("
		end := first
		for depth := 1; end < len(toks) && depth > 0; end++ {
			switch toks[end] {
			case "(":
				depth++
			case ")":
				depth--
			}
		}
		params, err := parseParams(toks[first:end-1], typedefs)
		if err != nil {
			return nil, fmt.Errorf("kernel %s: %w", name, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("kernel %s is defined twice", name)
		}
		seen[name] = true
		sigs = append(sigs, Signature{Name: name, Params: params, MaxThreads: maxThreads})
		i = end - 1
	}
	return sigs, nil
}

// launchBounds reads the "( maxThreads [, minBlocks [, maxBlocksPerCluster]] )"
// after a __launch_bounds__ that starts at toks[i], and returns maxThreads
// and the index of the token after ")". Only integer literals are taken:
// the bound is part of the kernel's contract with the host, which reads it
// from here, so it must not depend on macros the parser does not expand.
func launchBounds(toks []string, i int) (maxThreads, next int, err error) {
	if i >= len(toks) || toks[i] != "(" {
		return 0, 0, errors.New("__launch_bounds__ without its arguments")
	}
	var args []string
	j := i + 1
	for ; j < len(toks) && toks[j] != ")"; j++ {
		if toks[j] != "," {
			args = append(args, toks[j])
		}
	}
	if j == len(toks) || len(args) == 0 || len(args) > 3 {
		return 0, 0, errors.New("__launch_bounds__ needs one to three arguments")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > 1024 {
		return 0, 0, fmt.Errorf("__launch_bounds__(%s): the maximum threads a block must be an integer literal from 1 to 1024", args[0])
	}
	return n, j + 1, nil
}

// stripComments removes // and /* */ comments, keeping string and character
// literals (and line breaks, so that directives stay on their lines).
func stripComments(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(s) && s[j] != c && s[j] != '\n' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j, len(s)-1)
			b.WriteString(s[i : j+1])
			i = j
		case c == '/' && i+1 < len(s) && s[i+1] == '/':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			if i < len(s) {
				b.WriteByte('\n')
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				j = len(s) - i - 2
			}
			b.WriteString(strings.Repeat("\n", strings.Count(s[i:i+2+j], "\n")))
			b.WriteByte(' ')
			i += j + 3
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// tokenize splits C source into identifiers, numbers, string and character
// literals, "##" and single punctuation characters. Whitespace separates
// tokens and is dropped.
func tokenize(s string) []string {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case isIdentStart(c) || isDigit(c):
			j := i + 1
			for j < len(s) && (isIdentStart(s[j]) || isDigit(s[j]) || (isDigit(c) && s[j] == '.')) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(s))
			toks = append(toks, s[i:j])
			i = j
		case c == '#' && i+1 < len(s) && s[i+1] == '#':
			toks = append(toks, "##")
			i += 2
		default:
			toks = append(toks, string(c))
			i++
		}
	}
	return toks
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdent(s string) bool    { return s != "" && isIdentStart(s[0]) }

// expand replaces invocations of function-like macros in toks, rescanning
// each expansion with the macro itself disabled (as cpp's hide set does).
func expand(toks []string, macros map[string]*macro, disabled []string, depth int) ([]string, error) {
	if depth > 32 {
		return nil, fmt.Errorf("macro expansion nests too deeply")
	}
	var out []string
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		m, ok := macros[t]
		if !ok || slices.Contains(disabled, t) || i+1 >= len(toks) || toks[i+1] != "(" {
			out = append(out, t)
			continue
		}
		args, next, err := macroArgs(toks, i+1)
		if err != nil {
			return nil, fmt.Errorf("invocation of %s: %w", t, err)
		}
		if len(args) == 1 && len(args[0]) == 0 && len(m.params) == 0 {
			args = nil
		}
		if len(args) != len(m.params) {
			return nil, fmt.Errorf("%s takes %d arguments, given %d", t, len(m.params), len(args))
		}
		body := substitute(m, args)
		exp, err := expand(body, macros, append(slices.Clone(disabled), t), depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, exp...)
		i = next - 1
	}
	return out, nil
}

// macroArgs splits the arguments of the invocation whose "(" is at open;
// next is the index after the closing ")".
func macroArgs(toks []string, open int) (args [][]string, next int, err error) {
	depth := 0
	cur := []string{}
	for i := open; i < len(toks); i++ {
		switch t := toks[i]; t {
		case "(":
			depth++
			if depth == 1 {
				continue
			}
		case ")":
			depth--
			if depth == 0 {
				return append(args, cur), i + 1, nil
			}
		case ",":
			if depth == 1 {
				args = append(args, cur)
				cur = []string{}
				continue
			}
		}
		cur = append(cur, toks[i])
	}
	return nil, 0, fmt.Errorf("unbalanced parentheses")
}

// substitute replaces the parameters in m's body and applies ## pasting.
func substitute(m *macro, args [][]string) []string {
	var out []string
	paste := false
	for _, t := range m.body {
		if t == "##" {
			paste = true
			continue
		}
		rep := []string{t}
		if k := slices.Index(m.params, t); k >= 0 {
			rep = args[k]
		}
		if paste && len(out) > 0 && len(rep) > 0 {
			out[len(out)-1] += rep[0]
			rep = rep[1:]
		}
		paste = false
		out = append(out, rep...)
	}
	return out
}

// parseParams reads a kernel's parameter list.
func parseParams(toks []string, typedefs map[string][]string) ([]Param, error) {
	if len(toks) == 0 || len(toks) == 1 && toks[0] == "void" {
		return nil, nil
	}
	var params []Param
	var cur []string
	flush := func() error {
		if len(cur) < 2 || !isIdent(cur[len(cur)-1]) {
			return fmt.Errorf("cannot read parameter %q", strings.Join(cur, " "))
		}
		name := cur[len(cur)-1]
		ctype := resolveType(cur[:len(cur)-1], typedefs)
		size, align, ok := typeSize(ctype)
		if !ok {
			return fmt.Errorf("parameter %s has type %q of unknown size", name, ctype)
		}
		params = append(params, Param{Type: ctype, Name: name, Size: size, Align: align})
		cur = cur[:0]
		return nil
	}
	for _, t := range toks {
		if t == "," {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		cur = append(cur, t)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return params, nil
}

// resolveType expands typedefs and normalises spacing: "const float*".
func resolveType(toks []string, typedefs map[string][]string) string {
	var words []string
	for _, t := range toks {
		if td, ok := typedefs[t]; ok {
			words = append(words, strings.Fields(resolveType(td, typedefs))...)
			continue
		}
		words = append(words, t)
	}
	s := strings.Join(words, " ")
	return strings.ReplaceAll(s, " *", "*")
}

// structTypes are the by-value structs of the ABI with their size and
// alignment (checked against Layout and Reduce, and against clang's PTX).
var structTypes = map[string][2]int{
	"ZeLayout": {LayoutSize, 8},
	"ZeReduce": {ReduceSize, 8},
}

func typeSize(ctype string) (size, align int, ok bool) {
	if strings.HasSuffix(ctype, "*") {
		return 8, 8, true
	}
	base := strings.TrimPrefix(ctype, "const ")
	switch base {
	case "int", "unsigned", "unsigned int", "float":
		return 4, 4, true
	case "long long", "long long int", "unsigned long long", "unsigned long long int", "double":
		return 8, 8, true
	}
	if s, ok := structTypes[base]; ok {
		return s[0], s[1], true
	}
	return 0, 0, false
}

// ParamBytes is the size of a signature's parameter buffer, laid out as the
// CUDA driver's kernelParams pointers expect each value: at its natural
// alignment, in order.
func (s Signature) ParamBytes() int {
	n := 0
	for _, p := range s.Params {
		n = (n+p.Align-1)/p.Align*p.Align + p.Size
	}
	return n
}

// String is the C declaration of the kernel.
func (s Signature) String() string {
	parts := make([]string, len(s.Params))
	for i, p := range s.Params {
		parts[i] = p.Type + " " + p.Name
	}
	return s.Name + "(" + strings.Join(parts, ", ") + ")"
}

// Sizes lists the parameter sizes, for comparisons with packed arguments.
func (s Signature) Sizes() []int {
	out := make([]int, len(s.Params))
	for i, p := range s.Params {
		out[i] = p.Size
	}
	return out
}
