package devicetest

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
)

// DefaultSeed seeds the inputs unless DEVICETEST_SEED or Options.Seed says
// otherwise.
const DefaultSeed uint64 = 0x5eed_0d15_c0de

// SeedEnv names the environment variable that overrides the seed: a number
// (decimal or 0x hex), or "random" for one taken from the clock.
const SeedEnv = "DEVICETEST_SEED"

// TF32Tol is the tolerance of float32 Gemm and Attention with Options.TF32.
const TF32Tol = 3e-4

// Options configure a run of the suite.
type Options struct {
	// Seed seeds the inputs; 0 means DefaultSeed. DEVICETEST_SEED, when
	// set, wins over it.
	Seed uint64
	// Short skips the Large cases (about 1<<20 elements and more).
	// Conformance and ConformanceWith set it under go test -short.
	Short bool
	// TF32 loosens float32 Gemm, Attention and AttentionBackward to TF32Tol,
	// for devices that multiply float32 matrices on TF32 tensor cores.
	TF32 bool
	// Tol overrides the tolerance of floating-point outputs. A key is
	// "Op/dtype", "Op" or "dtype", where Op is the first element of a case
	// name ("Gemm", "Unary", "AttentionBackward") and dtype the short
	// ("f32", "bf16") or long ("float32", "bfloat16") name of the compared
	// output's type; the most specific key wins. It does not loosen the
	// outputs that must be exact.
	Tol map[string]float64
	// Filter, when not nil, selects the cases to run by name.
	Filter func(name string) bool
	// IgnoreLeaks turns off the check that the device under test holds no
	// more live buffers after a case than before it.
	IgnoreLeaks bool
}

// Failure is one problem found by a case.
type Failure struct {
	Case string // the case's name, "Unary/gelu/bf16/strided"
	Msg  string // what differed, the operands' layouts and the seed
}

func (f Failure) String() string { return f.Case + ": " + f.Msg }

// Case is one check of the suite: an op on one set of operands.
type Case struct {
	// Name is "Op/...": the method of device.Device (or "Memory",
	// "Unsupported", "IndexError") and what the case varies.
	Name string
	// Large cases have about 1<<20 elements or more; Options.Short skips
	// them.
	Large bool
	run   func(e *env)
}

// Cases returns every case of the suite, in the order Check runs them: the
// error cases come last.
func Cases() []Case {
	var cs []Case
	for _, group := range []func() []Case{
		memoryCases, copyCases, fillCases, unaryCases, activationCases, binaryCases, whereCases,
		reduceCases, prodCases, argMaxCases, sumSquaresCases, scanCases, sortCases, gemmCases,
		softmaxCases, layerNormCases, crossEntropyCases, attentionCases,
		indexSelectCases, indexAddCases, gatherCases, scatterAddCases,
		adamCases, sgdCases,
		unsupportedCases, sortScanUnsupportedCases, indexErrorCases,
	} {
		cs = append(cs, group()...)
	}
	return cs
}

// selected returns the cases opts selects.
func selected(opts Options) []Case {
	var out []Case
	for _, c := range Cases() {
		if c.Large && opts.Short {
			continue
		}
		if opts.Filter != nil && !opts.Filter(c.Name) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// Seed returns the seed a run with opts uses: DEVICETEST_SEED if it is set,
// else opts.Seed, else DefaultSeed. With DEVICETEST_SEED=random every call
// returns a new one.
func Seed(opts Options) uint64 {
	if v := strings.TrimSpace(os.Getenv(SeedEnv)); v != "" {
		if v == "random" {
			return uint64(time.Now().UnixNano())
		}
		if s, err := strconv.ParseUint(v, 0, 64); err == nil {
			return s
		}
	}
	if opts.Seed != 0 {
		return opts.Seed
	}
	return DefaultSeed
}

// Conformance runs every case as a subtest of t, checking that dut computes
// every op like ref (a CPU device from engine/cpu). Under go test -short the
// Large cases are skipped.
func Conformance(t *testing.T, ref, dut device.Device) {
	t.Helper()
	ConformanceWith(t, ref, dut, Options{})
}

// ConformanceWith is Conformance with options.
func ConformanceWith(t *testing.T, ref, dut device.Device, opts Options) {
	t.Helper()
	if testing.Short() {
		opts.Short = true
	}
	if v := os.Getenv(SeedEnv); v != "" {
		if _, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64); err != nil && strings.TrimSpace(v) != "random" {
			t.Fatalf("devicetest: %s=%q is neither a number nor \"random\"", SeedEnv, v)
		}
	}
	seed := Seed(opts)
	parent := t.Name()
	for _, c := range selected(opts) {
		t.Run(c.Name, func(t *testing.T) {
			for _, f := range runCase(ref, dut, c, opts, seed, "^"+parent+"$/") {
				t.Error(f.Msg)
			}
		})
	}
}

// Check runs the cases opts selects and returns their failures (nil when dut
// conforms).
func Check(ref, dut device.Device, opts Options) []Failure {
	seed := Seed(opts)
	var out []Failure
	for _, c := range selected(opts) {
		out = append(out, runCase(ref, dut, c, opts, seed, ".*/")...)
	}
	return out
}

// RunCase runs one case (whatever opts.Filter and opts.Short say) and
// returns its failures.
func RunCase(ref, dut device.Device, c Case, opts Options) []Failure {
	return runCase(ref, dut, c, opts, Seed(opts), ".*/")
}

// abortCase unwinds a case after a failure that makes the rest meaningless.
type abortCase struct{}

// runCase runs c; runPrefix is the -run pattern of the test that runs it,
// for the rerun hint.
func runCase(ref, dut device.Device, c Case, opts Options, seed uint64, runPrefix string) []Failure {
	h := fnv.New64a()
	h.Write([]byte(c.Name))
	e := &env{
		ref: ref, dut: dut, opts: opts, name: c.Name, seed: seed, runPrefix: runPrefix,
		r: rand.New(rand.NewPCG(seed, h.Sum64())),
	}
	e.op, _, _ = strings.Cut(c.Name, "/")
	var before device.MemStats
	statsErr := protect(func() error { before = dut.MemStats(); return nil })
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(abortCase); !ok {
					e.failf("harness panic: %v\n%s", r, debug.Stack())
				}
			}
		}()
		c.run(e)
	}()
	e.release()
	if statsErr == nil && !opts.IgnoreLeaks {
		var after device.MemStats
		if err := protect(func() error { after = dut.MemStats(); return nil }); err != nil {
			e.failf("MemStats: %v", err)
		} else if after.LiveBuffers != before.LiveBuffers {
			e.failf("dut holds %d live buffers after the case, %d before: the op leaked (or freed) memory it did not allocate for the caller (Options.IgnoreLeaks turns this check off)",
				after.LiveBuffers, before.LiveBuffers)
		}
	}
	if len(e.fails) == 0 {
		return nil
	}
	ctx := e.context()
	out := make([]Failure, len(e.fails))
	for i, m := range e.fails {
		out[i] = Failure{Case: c.Name, Msg: m + ctx}
	}
	return out
}

// env is what a case works with: both devices, its random source, the
// operands it has made and the failures it has found.
type env struct {
	ref, dut  device.Device
	opts      Options
	name, op  string
	seed      uint64
	runPrefix string
	r         *rand.Rand
	ts        []*tensor
	notes     []string // operand descriptions that are not tensors' views
	fails     []string
}

func (e *env) devs() [2]device.Device { return [2]device.Device{e.ref, e.dut} }

func (e *env) failf(format string, args ...any) {
	e.fails = append(e.fails, fmt.Sprintf(format, args...))
}

// fatalf records a failure and ends the case.
func (e *env) fatalf(format string, args ...any) {
	e.failf(format, args...)
	panic(abortCase{})
}

// note adds a line to the operand descriptions of failure messages.
func (e *env) note(format string, args ...any) {
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
}

// context describes the operands and the seed, for failure messages.
func (e *env) context() string {
	var b strings.Builder
	if len(e.ts) > 0 || len(e.notes) > 0 {
		b.WriteString("\noperands:")
		for _, t := range e.ts {
			for _, line := range t.describe() {
				b.WriteString("\n  " + line)
			}
		}
		for _, n := range e.notes {
			b.WriteString("\n  " + n)
		}
	}
	fmt.Fprintf(&b, "\nseed %d: rerun with %s=%d go test -run '%s%s$'", e.seed, SeedEnv, e.seed, e.runPrefix, e.name)
	return b.String()
}

// release frees every buffer of the case on both devices.
func (e *env) release() {
	for _, t := range e.ts {
		for i, d := range e.devs() {
			if t.buf[i] == nil {
				continue
			}
			b := t.buf[i]
			if err := protect(func() error { d.Free(b); return nil }); err != nil {
				e.failf("%s: Free of %s: %v", which(i), t.name, err)
			}
			t.buf[i] = nil
		}
	}
}

func which(i int) string {
	if i == 0 {
		return "ref"
	}
	return "dut"
}

// protect calls fn and turns a panic into an error.
func protect(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return fn()
}

// role says how an op uses a tensor.
type role uint8

const (
	input  role = iota // read only: must come back unchanged
	output             // written: poisoned before the op
	inout              // read and written (accumulators, optimizer state)
)

// tensor is a buffer allocated on both devices with the same initial bytes.
type tensor struct {
	name  string
	dt    dtype.DType
	n     int // elements
	role  role
	init  []byte
	buf   [2]device.Buffer // ref, dut
	views []string         // descriptions of the views made of it
	locs  []locator        // the views, to name a mismatching element

	// Comparison of an output.
	exact  bool    // values must be equal
	ulps   int     // with exact: half-precision values may differ by this many ulps
	terms  int     // size-aware tolerance: terms summed into one element
	scale  float64 // their magnitude
	tolMul float64 // multiplies the dtype tolerance
	floor  float64 // the relative tolerance applies to max(floor, |ref|)
}

type locator struct {
	name          string
	off           int
	shape, stride []int
}

// view is a strided region of a tensor, as device.View without the buffer.
type view struct {
	t       *tensor
	off     int
	shape   []int
	strides []int
}

// none is the empty view (device.View with a nil Buf).
var none view

// side is one of the two devices while a case calls an op on it.
type side struct {
	d device.Device
	i int // 0 ref, 1 dut
}

// v is the device.View of v on this side. Shape and strides are copies, so
// that a device that modifies them cannot change what the other one sees.
func (s side) v(v view) device.View {
	if v.t == nil {
		return device.View{}
	}
	return device.View{Buf: v.t.buf[s.i], DType: v.t.dt, Offset: v.off, Shape: slices.Clone(v.shape), Strides: slices.Clone(v.strides)}
}

// gemmOp is a device.GemmOperand without the buffer.
type gemmOp struct {
	t           *tensor
	off, ld, bs int
	trans       bool
}

func (s side) g(o gemmOp) device.GemmOperand {
	return device.GemmOperand{Buf: o.t.buf[s.i], DType: o.t.dt, Offset: o.off, Ld: o.ld, BatchStride: o.bs, Trans: o.trans}
}

func flatView(b device.Buffer, dt dtype.DType, n int) device.View {
	return device.View{Buf: b, DType: dt, Shape: []int{n}, Strides: []int{1}}
}

// alloc makes a tensor of n elements on both devices and uploads init to
// both.
func (e *env) alloc(name string, dt dtype.DType, n int, r role, init []byte) *tensor {
	t := &tensor{name: name, dt: dt, n: n, role: r, init: init, scale: 1, tolMul: 1, floor: 1}
	e.ts = append(e.ts, t)
	for i, d := range e.devs() {
		var b device.Buffer
		err := protect(func() (err error) { b, err = d.Alloc(dt, n); return err })
		if err == nil && b == nil {
			err = errors.New("nil buffer")
		}
		if err != nil {
			e.fatalf("%s: Alloc(%v, %d) for %s: %v", which(i), dt, n, name, err)
		}
		t.buf[i] = b
		if b.Bytes() < n*dt.Size() {
			e.fatalf("%s: Alloc(%v, %d) returned a buffer of %d bytes", which(i), dt, n, b.Bytes())
		}
		if n == 0 {
			continue
		}
		if err := protect(func() error { return d.Upload(flatView(b, dt, n), init) }); err != nil {
			e.fatalf("%s: Upload of %s: %v", which(i), name, err)
		}
	}
	return t
}

// guard is the number of elements after the last one a view addresses that
// every buffer has, to catch writes past the end.
const guard = 2

// extent is the number of buffer elements a view spans from element 0.
func extent(off int, shape, strides []int) int {
	if numel(shape) == 0 {
		return off
	}
	end := off
	for i, s := range shape {
		end += (s - 1) * strides[i]
	}
	return end + 1
}

func numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// tensorFor makes a tensor holding one view of shape laid out by l, with
// values from g (nil: poison).
func (e *env) tensorFor(name string, dt dtype.DType, shape []int, l layout, r role, g gen, vals []float64) view {
	off, st := l.fn(shape)
	n := extent(off, shape, st) + guard
	var init []byte
	if r == output {
		init = poison(dt, n)
	} else {
		if g == nil {
			g = defGen(dt)
		}
		init = e.fill(dt, n, g)
		if vals != nil {
			forEach(shape, st, off, func(i, o int) { put(dt, init, o, vals[i]) })
		}
	}
	t := e.alloc(name, dt, n, r, init)
	return t.view(name, off, shape, st)
}

// in is an input of shape laid out by l with values from g (nil: the
// dtype's default).
func (e *env) in(name string, dt dtype.DType, shape []int, l layout, g gen) view {
	return e.tensorFor(name, dt, shape, l, input, g, nil)
}

// inVals is an input whose elements, in row-major order, are vals.
func (e *env) inVals(name string, dt dtype.DType, shape []int, l layout, vals []float64) view {
	return e.tensorFor(name, dt, shape, l, input, nil, vals)
}

// out is a poisoned output.
func (e *env) out(name string, dt dtype.DType, shape []int, l layout) view {
	return e.tensorFor(name, dt, shape, l, output, nil, nil)
}

// inout is an output that the op also reads, with initial values from g.
func (e *env) inout(name string, dt dtype.DType, shape []int, l layout, g gen) view {
	return e.tensorFor(name, dt, shape, l, inout, g, nil)
}

// fill returns n elements of dt drawn from g.
func (e *env) fill(dt dtype.DType, n int, g gen) []byte {
	b := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		put(dt, b, i, g(e.r))
	}
	return b
}

// view records and returns a view of t.
func (t *tensor) view(name string, off int, shape, strides []int) view {
	t.views = append(t.views, fmt.Sprintf("%s: %v shape %v strides %v offset %d", name, t.dt, shape, strides, off))
	t.locs = append(t.locs, locator{name, off, shape, strides})
	return view{t: t, off: off, shape: shape, strides: strides}
}

// Comparison settings of a view's tensor; they return the view for chaining.

// exact makes the tensor compare equal values.
func (v view) exact() view { v.t.exact = true; return v }

// relative lowers the floor under which the tolerance is absolute, for
// outputs much smaller than 1 whose relative error stays small
// (probabilities).
func (v view) relative(floor float64) view { v.t.floor = floor; return v }

// sums declares that each element sums n terms of magnitude about scale.
func (v view) sums(n int, scale float64) view {
	v.t.terms, v.t.scale = n, scale
	return v
}

func (t *tensor) describe() []string {
	kind := [...]string{"input", "output", "in-out"}[t.role]
	if len(t.views) == 1 && strings.HasPrefix(t.views[0], t.name+":") {
		return []string{fmt.Sprintf("%s (%s, buffer of %d)", t.views[0], kind, t.n)}
	}
	out := []string{fmt.Sprintf("%s: %v buffer of %d (%s)", t.name, t.dt, t.n, kind)}
	for _, v := range t.views {
		out = append(out, "  "+v)
	}
	return out
}

// call runs fn on the reference, then on the device under test and its
// Sync, requires both to succeed or both to fail, and when both succeeded
// compares every tensor of the case. It reports whether both succeeded.
func (e *env) call(fn func(s side) error) bool {
	refErr := protect(func() error { return fn(side{e.ref, 0}) })
	if refErr == nil {
		refErr = protect(e.ref.Sync)
	}
	dutErr := protect(func() error { return fn(side{e.dut, 1}) })
	syncErr := protect(e.dut.Sync)
	switch {
	case refErr != nil && dutErr == nil && syncErr == nil:
		e.failf("the reference returned an error and dut did not (neither from the op nor from Sync): %v", refErr)
		return false
	case refErr != nil:
		return false // both failed: they agree
	case dutErr != nil:
		e.failf("dut returned an error where the reference did not: %v", dutErr)
		return false
	case syncErr != nil:
		e.failf("dut: Sync after the op: %v", syncErr)
		return false
	}
	e.compareAll()
	return true
}

// expectError runs fn on both devices and requires both to fail (dut from
// the op or from the following Sync).
func (e *env) expectError(fn func(s side) error) {
	refErr := protect(func() error { return fn(side{e.ref, 0}) })
	dutErr := protect(func() error { return fn(side{e.dut, 1}) })
	syncErr := protect(e.dut.Sync)
	if refErr == nil {
		e.failf("harness: the reference accepted a call this case expects it to reject")
	}
	if dutErr == nil && syncErr == nil {
		e.failf("dut returned no error, from the op or from the Sync after it (the reference: %v)", refErr)
	}
}

// compareAll compares the outputs of both devices and checks that dut left
// its inputs alone.
func (e *env) compareAll() {
	for _, t := range e.ts {
		e.compare(t)
	}
}

func (e *env) read(i int, t *tensor) ([]byte, error) {
	b := make([]byte, t.n*t.dt.Size())
	if t.n == 0 {
		return b, nil
	}
	d := e.devs()[i]
	err := protect(func() error { return d.Download(b, flatView(t.buf[i], t.dt, t.n)) })
	return b, err
}

func (e *env) compare(t *tensor) {
	db, err := e.read(1, t)
	if err != nil {
		e.failf("dut: Download of %s: %v", t.name, err)
		return
	}
	if t.role == input {
		if !bytes.Equal(db, t.init) {
			e.report(t, "dut modified input "+t.name, t.init, db, rule{exact: true}, "ref")
		}
		return
	}
	rb, err := e.read(0, t)
	if err != nil {
		e.failf("harness: ref: Download of %s: %v", t.name, err)
		return
	}
	e.report(t, t.name, rb, db, e.ruleFor(t), "ref")
}

// rule is how the elements of one output are compared.
type rule struct {
	exact bool
	ulps  int     // with exact, for half types: allowed distance in ulps
	tol   float64 // relative tolerance, on max(floor, |ref|)
	floor float64 // 1 unless the output is known to be small
	abs   float64 // size-aware absolute allowance
}

func (r rule) String() string {
	switch {
	case r.exact && r.ulps > 0:
		return fmt.Sprintf("allowed: %d ulp", r.ulps)
	case r.exact:
		return "allowed: exact"
	case r.abs > 0:
		return fmt.Sprintf("allowed: |dut−ref| ≤ %.3g·max(%g,|ref|) + %.3g", r.tol, r.floor, r.abs)
	}
	return fmt.Sprintf("allowed: |dut−ref| ≤ %.3g·max(%g,|ref|)", r.tol, r.floor)
}

// tol is the tolerance of a floating-point output of dt in this case.
func (e *env) tol(dt dtype.DType) float64 {
	for _, k := range []string{e.op + "/" + short(dt), e.op + "/" + dt.String(), e.op, short(dt), dt.String()} {
		if v, ok := e.opts.Tol[k]; ok {
			return v
		}
	}
	if e.opts.TF32 && dt == dtype.Float32 && (e.op == "Gemm" || strings.HasPrefix(e.op, "Attention")) {
		return TF32Tol
	}
	return defaultTol(dt)
}

func defaultTol(dt dtype.DType) float64 {
	switch dt {
	case dtype.Float32:
		return 1e-5
	case dtype.Float64:
		return 1e-12
	case dtype.BFloat16:
		return 1e-2
	case dtype.Float16:
		return 1e-3
	}
	return 0
}

func (e *env) ruleFor(t *tensor) rule {
	if !t.dt.IsFloat() {
		return rule{exact: true}
	}
	if t.exact {
		return rule{exact: true, ulps: t.ulps}
	}
	r := rule{tol: e.tol(t.dt) * t.tolMul, floor: t.floor}
	if t.terms > 1 {
		acc := dtype.Float32
		if t.dt == dtype.Float64 {
			acc = dtype.Float64
		}
		r.abs = e.tol(acc) * t.scale * math.Sqrt(float64(t.terms))
	}
	return r
}

// check compares one pair of floating-point elements; err is the error
// relative to max(floor, |ref|), +Inf for a NaN or infinity in the wrong
// place.
func (r rule) check(a, b float64) (ok bool, err float64) {
	switch {
	case b != b:
		if a != a {
			return true, 0
		}
		return false, math.Inf(1)
	case a != a:
		return false, math.Inf(1)
	case math.IsInf(a, 0) || math.IsInf(b, 0):
		if a == b {
			return true, 0
		}
		return false, math.Inf(1)
	}
	floor := r.floor
	if floor == 0 {
		floor = 1
	}
	d := math.Abs(a-b) / math.Max(floor, math.Abs(b))
	if r.exact {
		return a == b, d
	}
	return math.Abs(a-b) <= r.tol*math.Max(floor, math.Abs(b))+r.abs, d
}

type mismatch struct {
	i        int
	ref, dut string
	err      float64
}

// report compares the bytes of t from both sides and records a failure
// listing the first mismatches.
func (e *env) report(t *tensor, what string, rb, db []byte, r rule, refName string) {
	dt := t.dt
	var first []mismatch
	count := 0
	worst := mismatch{i: -1}
	for i := 0; i < t.n; i++ {
		var ok bool
		var err float64
		switch {
		case !dt.IsFloat():
			sz := dt.Size()
			ok = bytes.Equal(rb[i*sz:(i+1)*sz], db[i*sz:(i+1)*sz])
			if !ok {
				err = math.Abs(float64(getI(dt, db, i) - getI(dt, rb, i)))
			}
		case r.exact && r.ulps > 0 && (dt == dtype.BFloat16 || dt == dtype.Float16):
			a, b := getF(dt, db, i), getF(dt, rb, i)
			if a != a || b != b {
				ok, err = r.check(a, b)
			} else {
				u := ulpDist(getBits16(rb, i), getBits16(db, i))
				ok, err = u <= r.ulps, float64(u)
			}
		default:
			ok, err = r.check(getF(dt, db, i), getF(dt, rb, i))
		}
		if ok {
			continue
		}
		count++
		m := mismatch{i: i, ref: format(dt, rb, i), dut: format(dt, db, i), err: err}
		if t.role != input && isPoison(db, i, dt.Size()) {
			m.dut += " [poison: never written]"
		}
		if len(first) < 6 {
			first = append(first, m)
		}
		if worst.i < 0 || err > worst.err {
			worst = m
		}
	}
	if count == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%v, buffer of %d): %d elements differ; %s", what, dt, t.n, count, r)
	idx := make([]int, 0, len(first)+1)
	for _, m := range first {
		idx = append(idx, m.i)
	}
	idx = append(idx, worst.i)
	where := t.locate(idx)
	for _, m := range first {
		fmt.Fprintf(&b, "\n  [%d]%s: %s %s, dut %s (error %.3g)", m.i, where[m.i], refName, m.ref, m.dut, m.err)
	}
	fmt.Fprintf(&b, "\n  largest error %.3g at [%d]%s: %s %s, dut %s", worst.err, worst.i, where[worst.i], refName, worst.ref, worst.dut)
	e.failf("%s", b.String())
}

// isPoison reports whether element i of b still holds the poison bytes.
func isPoison(b []byte, i, size int) bool {
	for _, x := range b[i*size : (i+1)*size] {
		if x != 0xFF {
			return false
		}
	}
	return true
}

// locate names the view elements at the given buffer indices ("dst[1 2]"),
// or marks them as outside every view.
func (t *tensor) locate(idx []int) map[int]string {
	want := map[int]bool{}
	for _, i := range idx {
		want[i] = true
	}
	out := map[int]string{}
	for _, l := range t.locs {
		if numel(l.shape) > 1<<24 {
			continue
		}
		forEach(l.shape, l.stride, l.off, func(i, o int) {
			if want[o] {
				if _, done := out[o]; !done {
					out[o] = fmt.Sprintf(" %s%v", l.name, unravel(i, l.shape))
				}
			}
		})
	}
	for _, i := range idx {
		if _, ok := out[i]; !ok {
			out[i] = " (outside every view: gap or guard)"
		}
	}
	return out
}

func unravel(i int, shape []int) []int {
	pos := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			pos[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return pos
}

// forEach calls fn with the row-major position and the buffer offset of
// every element of a view.
func forEach(shape, strides []int, off int, fn func(i, o int)) {
	n := numel(shape)
	if n == 0 {
		return
	}
	idx := make([]int, len(shape))
	o := off
	for i := 0; i < n; i++ {
		fn(i, o)
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			o += strides[d]
			if idx[d] < shape[d] {
				break
			}
			o -= strides[d] * shape[d]
			idx[d] = 0
		}
	}
}

// compareScalar compares a value both devices returned (SumSquares), with
// the rule of an output of dt summing n terms of magnitude scale.
func (e *env) compareScalar(what string, dt dtype.DType, ref, dut float64, n int, scale float64) {
	t := &tensor{dt: dt, terms: n, scale: scale, tolMul: 1, floor: 1}
	r := e.ruleFor(t)
	if ok, err := r.check(dut, ref); !ok {
		e.failf("%s: ref %v, dut %v (error %.3g); %s", what, ref, dut, err, r)
	}
}
