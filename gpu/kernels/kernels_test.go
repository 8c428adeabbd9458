package kernels

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/device"
)

var wantFamilies = []string{"attention", "elementwise", "index", "nn", "optim", "reduce", "sortscan"}

func TestFamilies(t *testing.T) {
	if got := Families(); !slices.Equal(got, wantFamilies) {
		t.Fatalf("Families() = %v, want %v", got, wantFamilies)
	}
}

func TestSource(t *testing.T) {
	for _, f := range Families() {
		src, err := Source(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(src, "#line 1 \"common.cuh\"\n") {
			t.Errorf("%s: source does not start with common.cuh's #line", f)
		}
		marker := "\n#line 1 \"" + f + ".cu\"\n"
		i := strings.Index(src, marker)
		if i < 0 {
			t.Fatalf("%s: no #line for %s.cu", f, f)
		}
		// The family's first line must follow the directive: NVRTC's
		// messages then name the right line.
		fam, _ := read(f + ".cu")
		if src[i+len(marker):] != fam {
			t.Errorf("%s: the family's text does not follow its #line directive", f)
		}
		if strings.Contains(src, "#include") {
			t.Errorf("%s: the sources must not #include anything (NVRTC has no include path)", f)
		}
	}
	for _, bad := range []string{"", "nope", "../kernels", "common", "elementwise.cu"} {
		if _, err := Source(bad); err == nil {
			t.Errorf("Source(%q) did not fail", bad)
		}
	}
}

// suffixes are the type suffixes of the naming scheme.
var (
	typeSuffixes = []string{"f32", "f64", "bf16", "f16", "i64", "i32", "u8", "b"}
	sizeSuffixes = []string{"s1", "s2", "s4", "s8"}
)

func TestKernelsParse(t *testing.T) {
	total := 0
	for _, f := range Families() {
		sigs, err := Kernels(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(sigs) == 0 {
			t.Errorf("%s: no kernels", f)
		}
		total += len(sigs)
		for _, s := range sigs {
			for _, p := range s.Params {
				if p.Size == 0 || p.Align == 0 || p.Name == "" {
					t.Errorf("%s: %v: bad parameter %+v", f, s, p)
				}
			}
			// Every kernel says how many threads a block it takes, so
			// that the compiler fits its registers to that and the host
			// never launches more (gpu's launches check).
			if s.MaxThreads != 256 && s.MaxThreads != 1024 {
				t.Errorf("%s: %s declares __launch_bounds__(%d), want 256, or 1024 for a row kernel", f, s.Name, s.MaxThreads)
			}
		}
	}
	if _, err := Kernels("nope"); err == nil {
		t.Error("Kernels of an unknown family did not fail")
	}

	// Spot checks of the expansion: pasted names, substituted types,
	// resolved typedefs, structs by value.
	checks := []struct {
		family, kernel, decl string
	}{
		{"elementwise", "unary_f32", "unary_f32(ZeLayout L, float* dst, const float* src, int op, double s)"},
		{"elementwise", "unary_i64", "unary_i64(ZeLayout L, long long* dst, const long long* src, int op, long long s)"},
		{"elementwise", "convert_bf16_f32", "convert_bf16_f32(ZeLayout L, ze_bf16* dst, const float* src)"},
		{"elementwise", "fill_s8", "fill_s8(ZeLayout L, unsigned long long* dst, unsigned long long bits)"},
		{"elementwise", "where_s2", "where_s2(ZeLayout L, unsigned short* dst, const unsigned char* cond, const unsigned short* a, const unsigned short* b)"},
		{"reduce", "reduce_rows_bf16", "reduce_rows_bf16(ZeReduce R, ze_bf16* dst, const ze_bf16* src, double* partial, long long splits, long long chunk, int op, int group)"},
		{"reduce", "reduce_finish_i64", "reduce_finish_i64(ZeReduce R, long long* dst, const long long* partial, long long splits, long long pso, long long pss, int op)"},
		{"nn", "layernorm_f16", "layernorm_f16(ze_f16* dst, float* mean, float* rstd, const ze_f16* x, const ze_f16* w, const ze_f16* b, long long rows, long long n, double eps, int group)"},
		{"nn", "cross_entropy_check", "cross_entropy_check(const long long* target, long long ts, long long rows, long long classes, long long ignore, unsigned long long* flags)"},
		{"index", "index_add_bf16", "index_add_bf16(ZeLayout L, float* dst, const ze_bf16* src, const long long* index, long long da, const unsigned long long* flag)"},
		{"optim", "sgd_f32", "sgd_f32(float* p, const float* g, float* buf, long long n, float gsign, float wd, float mom, float damp, float neg_lr, int mode)"},
		{"attention", "attn_softmax_f64", "attn_softmax_f64(double* p, long long rows, long long tq, long long tk, int causal, int group)"},
	}
	for _, c := range checks {
		s, err := Lookup(c.family, c.kernel)
		if err != nil {
			t.Error(err)
			continue
		}
		if got := s.String(); got != c.decl {
			t.Errorf("%s:\n got %s\nwant %s", c.kernel, got, c.decl)
		}
	}
	s, _ := Lookup("elementwise", "unary_f32")
	if got, want := s.ParamBytes(), LayoutSize+8+8+4+4+8; got != want {
		t.Errorf("unary_f32 parameter bytes = %d, want %d", got, want)
	}
	if got := s.Sizes(); !slices.Equal(got, []int{LayoutSize, 8, 8, 4, 8}) {
		t.Errorf("unary_f32 sizes = %v", got)
	}
	if _, err := Lookup("elementwise", "unary_u8"); err == nil {
		t.Error("Lookup of a missing kernel did not fail")
	}
}

// TestNamingScheme holds every kernel name to <op>_<suffix>, and the
// families to the kernels the gpu package launches: all conversions between
// the eight types, one per size for the moves.
func TestNamingScheme(t *testing.T) {
	all := make(map[string]bool)
	for _, f := range Families() {
		sigs, _ := Kernels(f)
		for _, s := range sigs {
			all[s.Name] = true
			name := s.Name
			if name == "cross_entropy_check" || name == "index_check" {
				continue
			}
			i := strings.LastIndexByte(name, '_')
			if i < 0 {
				t.Errorf("%s: no type suffix", name)
				continue
			}
			suffix := name[i+1:]
			if !slices.Contains(typeSuffixes, suffix) && !slices.Contains(sizeSuffixes, suffix) {
				t.Errorf("%s: unknown suffix %q", name, suffix)
			}
		}
	}
	for _, d := range typeSuffixes {
		for _, s := range typeSuffixes {
			if d != s && !all["convert_"+d+"_"+s] {
				t.Errorf("no convert_%s_%s", d, s)
			}
		}
	}
	// Each name is written out in its family's source, not pasted
	// together: a search for it finds its definition, and so does the fake
	// driver of gpu's tests, which looks names up in the source text.
	for _, f := range Families() {
		src, _ := read(f + ".cu")
		sigs, _ := Kernels(f)
		for _, s := range sigs {
			if !regexp.MustCompile(`\b` + s.Name + `\b`).MatchString(src) {
				t.Errorf("%s: the name %s does not appear in %s.cu", f, s.Name, f)
			}
		}
	}
	for _, s := range sizeSuffixes {
		for _, op := range []string{"copy_", "fill_", "where_", "index_gather_"} {
			if !all[op+s] {
				t.Errorf("no %s%s", op, s)
			}
		}
	}
}

// TestOpCodes checks the op-code enums of the sources against the device
// constants whose numeric values the gpu package passes.
func TestOpCodes(t *testing.T) {
	all := ""
	for _, f := range Families() {
		s, _ := read(f + ".cu")
		all += s
	}
	enum := regexp.MustCompile(`\b(UN|ACT|BIN|RED|SCAN)_([A-Z_]+) = (\d+)`)
	got := make(map[string]int)
	for _, m := range enum.FindAllStringSubmatch(all, -1) {
		v, _ := strconv.Atoi(m[3])
		got[m[1]+"_"+m[2]] = v
	}
	want := map[string]int{
		"ACT_RELU_BACKWARD":      int(device.ReluBackward),
		"ACT_GELU_BACKWARD":      int(device.GeluBackward),
		"ACT_GELU_TANH_BACKWARD": int(device.GeluTanhBackward),
		"ACT_SILU_BACKWARD":      int(device.SiluBackward),
		"ACT_TANH_BACKWARD":      int(device.TanhBackward),
		"ACT_SIGMOID_BACKWARD":   int(device.SigmoidBackward),
		"RED_SUM":                int(device.Sum),
		"RED_MAX":                int(device.Max),
		"RED_MIN":                int(device.Min),
		"RED_PROD":               int(device.Prod),
		"SCAN_CUMSUM":            int(device.CumSum),
		"SCAN_CUMPROD":           int(device.CumProd),
	}
	for op := device.UnaryOp(0); !strings.HasPrefix(op.String(), "unary("); op++ {
		want["UN_"+strings.ToUpper(op.String())] = int(op)
	}
	for op := device.Add; op <= device.Ge; op++ {
		want["BIN_"+strings.ToUpper(op.String())] = int(op)
	}
	for name, v := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s is not defined in the sources", name)
		case g != v:
			t.Errorf("%s = %d in the sources, %d in engine/device", name, g, v)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s in the sources has no device constant", name)
		}
	}
}

func TestParserMacros(t *testing.T) {
	src := `
typedef long long i64;
typedef i64 idx_t;
#define PASTE(a, b) a##_##b
#define K(SFX, T) \
    extern "C" __global__ void PASTE(k, SFX)(T* x, const T* y, /* comment, with comma */ idx_t n) { \
        if (n) { x[0] = y[0]; } \
    }
#define TYPES(M) M(f32, float) M(f64, double)
TYPES(K)
// extern "C" __global__ void commented_out(int a)
extern "C" __global__ void plain(int a, float b,
                                 double c) {}
extern "C" __global__ void noargs() {}
extern "C" __global__ __launch_bounds__(1024) void bounded(int a) {}
extern "C" __global__ __launch_bounds__(256, 2) void bounded2() {}
`
	sigs, err := parseKernels(src)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range sigs {
		got = append(got, s.String())
	}
	want := []string{
		"k_f32(float* x, const float* y, long long n)",
		"k_f64(double* x, const double* y, long long n)",
		"plain(int a, float b, double c)",
		"noargs()",
		"bounded(int a)",
		"bounded2()",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var bounds []int
	for _, s := range sigs {
		bounds = append(bounds, s.MaxThreads)
	}
	if want := []int{0, 0, 0, 0, 1024, 256}; !slices.Equal(bounds, want) {
		t.Errorf("MaxThreads %v, want %v", bounds, want)
	}
	for _, bad := range []string{
		`extern "C" __global__ void k(mystery_t a) {}`,
		`#define K(a) extern "C" __global__ void k_##a(int x) {}
K(1, 2)`,
		`extern "C" __global__ void k(int a) {} extern "C" __global__ void k(int a) {}`,
		`extern "C" __global__ __launch_bounds__ void k(int a) {}`,
		`extern "C" __global__ __launch_bounds__() void k(int a) {}`,
		`extern "C" __global__ __launch_bounds__(2048) void k(int a) {}`,
		`extern "C" __global__ __launch_bounds__(BLOCK) void k(int a) {}`,
		`extern "C" __global__ __launch_bounds__(256) k(int a) {}`,
		`extern "C" __global__ __launch_bounds__(256 void k(int a) {}`,
	} {
		if _, err := parseKernels(bad); err == nil {
			t.Errorf("parseKernels accepted %q", bad)
		}
	}
}

func TestLayoutCoalesce(t *testing.T) {
	cases := []struct {
		shape   []int
		strides [][]int
		ndim    int32
		inner   int64 // Shape[0]
	}{
		{[]int{2, 3, 4}, [][]int{{12, 4, 1}, {12, 4, 1}}, 1, 24},                         // contiguous
		{[]int{2, 3, 4}, [][]int{{12, 4, 1}, {0, 0, 0}}, 1, 24},                          // scalar broadcast
		{[]int{2, 3, 4}, [][]int{{12, 4, 1}, {0, 1, 0}}, 3, 4},                           // broadcast middle
		{[]int{5, 1, 1, 7}, [][]int{{7, 7, 7, 1}, {7, 99, 1, 1}}, 1, 35},                 // extent-1 dims dropped
		{[]int{4, 6}, [][]int{{1, 4}}, 2, 6},                                             // transposed
		{[]int{1, 1}, [][]int{{1, 1}, {0, 0}}, 1, 1},                                     // one element
		{[]int{}, [][]int{{}, {}}, 1, 1},                                                 // 0-d
		{[]int{3, 0, 2}, [][]int{{2, 2, 1}}, 2, 0},                                       // empty (never launched)
		{[]int{2, 2, 2, 2, 2, 2, 2, 2}, [][]int{{-128, 64, 32, 16, 8, 4, 2, 1}}, 2, 128}, // negative outer stride
	}
	for _, c := range cases {
		l, err := NewLayout(c.shape, c.strides...)
		if err != nil {
			t.Fatalf("%v: %v", c.shape, err)
		}
		if l.NDim != c.ndim || l.Shape[0] != c.inner {
			t.Errorf("%v %v: ndim %d inner %d, want %d %d", c.shape, c.strides, l.NDim, l.Shape[0], c.ndim, c.inner)
		}
		if b := l.Bytes(); !bytes.Equal(b, encodeLayout(&l)) {
			t.Errorf("%v: Bytes is %d bytes that differ from the little-endian encoding of ZeLayout", c.shape, len(b))
		}
	}
	// Nine dimensions that cannot merge are refused.
	shape := []int{2, 2, 2, 2, 2, 2, 2, 2, 2}
	st := []int{1, 2, 4, 8, 16, 32, 64, 128, 256}
	if _, err := NewLayout(shape, st); err == nil {
		t.Error("a 9-dimensional layout was accepted")
	}
	if _, err := NewLayout([]int{2}, []int{1}, []int{1}, []int{1}, []int{1}, []int{1}); err == nil {
		t.Error("a 5-operand layout was accepted")
	}
}

// TestLayoutOffsets checks, on random views, that the offsets a kernel
// computes from the coalesced layout (Offsets mirrors ze_offsets) are those
// of the original shape and strides, element by element in row-major order.
func TestLayoutOffsets(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 300; iter++ {
		rank := rng.Intn(6)
		shape := make([]int, rank)
		for i := range shape {
			shape[i] = 1 + rng.Intn(4)
		}
		nops := 1 + rng.Intn(MaxOps)
		strides := make([][]int, nops)
		for k := range strides {
			strides[k] = make([]int, rank)
			acc := 1
			perm := rng.Perm(rank)
			for _, i := range perm {
				switch rng.Intn(5) {
				case 0:
					strides[k][i] = 0 // broadcast
				case 1:
					strides[k][i] = -acc
					acc *= shape[i]
				default:
					strides[k][i] = acc
					acc *= shape[i]
				}
			}
			if rng.Intn(2) == 0 { // row-major contiguous
				acc = 1
				for i := rank - 1; i >= 0; i-- {
					strides[k][i] = acc
					acc *= shape[i]
				}
			}
		}
		l, err := NewLayout(shape, strides...)
		if err != nil {
			t.Fatal(err)
		}
		numel := 1
		for _, e := range shape {
			numel *= e
		}
		if l.Numel != int64(numel) {
			t.Fatalf("numel %d, want %d", l.Numel, numel)
		}
		idx := make([]int, rank)
		for i := 0; i < numel; i++ {
			got := l.Offsets(int64(i), nops)
			for k := 0; k < nops; k++ {
				want := 0
				for d := range idx {
					want += idx[d] * strides[k][d]
				}
				if got[k] != int64(want) {
					t.Fatalf("shape %v strides %v: element %d operand %d at %d, want %d", shape, strides, i, k, got[k], want)
				}
			}
			for d := rank - 1; d >= 0; d-- {
				if idx[d]++; idx[d] < shape[d] {
					break
				}
				idx[d] = 0
			}
		}
	}
}

// TestLayoutHuge checks the indexing of walks of 2^32 elements and more,
// where the outermost index takes a 64-bit division and the rest 32-bit
// ones, at sample positions.
func TestLayoutHuge(t *testing.T) {
	shape := []int{7, 3, 1 << 30}
	strides := [][]int{{3 << 31, 1, 3}, {0, 1 << 30, 1}} // nothing merges
	l, err := NewLayout(shape, strides...)
	if err != nil {
		t.Fatal(err)
	}
	if l.NDim != 3 || l.Numel != 7*3<<30 {
		t.Fatalf("layout %+v", l)
	}
	rng := rand.New(rand.NewSource(2))
	for n := 0; n < 10000; n++ {
		i := rng.Int63n(l.Numel)
		if n < 4 {
			i = []int64{0, l.Numel - 1, 3 << 30, 3<<30 - 1}[n]
		}
		idx := []int64{i / (3 << 30), i / (1 << 30) % 3, i % (1 << 30)}
		got := l.Offsets(i, 2)
		for k := range strides {
			want := int64(0)
			for d := range idx {
				want += idx[d] * int64(strides[k][d])
			}
			if got[k] != want {
				t.Fatalf("element %d operand %d: offset %d, want %d", i, k, got[k], want)
			}
		}
	}
	// Inner dimensions of 2^32 elements or more are refused.
	if _, err := NewLayout([]int{2, 3, 1 << 31}, []int{1, 2, 6}); err == nil {
		t.Error("a walk with 3·2^31 elements inside its outermost dimension was accepted")
	}
}

func TestNewReduce(t *testing.T) {
	// Sum of [4, 5, 6] over axes 0 and 2 into [1, 5, 1].
	r, reduced, err := NewReduce([]int{1, 5, 1}, []int{5, 1, 1}, []int{4, 5, 6}, []int{30, 6, 1})
	if err != nil || !reduced {
		t.Fatal(err, reduced)
	}
	if r.Outputs != 5 || r.RCount != 24 || r.KDim != 1 || r.KSrc[0] != 6 || r.KDst[0] != 1 {
		t.Errorf("kept: %+v", r)
	}
	if r.RDim != 2 || r.RShape[0] != 6 || r.RSrc[0] != 1 || r.RShape[1] != 4 || r.RSrc[1] != 30 {
		t.Errorf("reduced: %+v", r)
	}
	if b := r.Bytes(); len(b) != ReduceSize {
		t.Errorf("reduce encodes to %d bytes, want %d", len(b), ReduceSize)
	}
	// Rows of a contiguous [3, 8] into [3, 1]: one reduced dimension of
	// stride 1.
	r, _, _ = NewReduce([]int{3, 1}, []int{1, 1}, []int{3, 8}, []int{8, 1})
	if r.RDim != 1 || r.RShape[0] != 8 || r.RSrc[0] != 1 || r.Outputs != 3 || r.KSrc[0] != 8 {
		t.Errorf("rows: %+v", r)
	}
	// A full reduction keeps one output.
	r, _, _ = NewReduce([]int{1, 1}, []int{1, 1}, []int{3, 8}, []int{8, 1})
	if r.Outputs != 1 || r.RCount != 24 || r.RDim != 1 {
		t.Errorf("full: %+v", r)
	}
	// Nothing reduced: a copy.
	if r, reduced, err := NewReduce([]int{3, 1}, []int{1, 1}, []int{3, 1}, []int{1, 1}); r != nil || reduced || err != nil {
		t.Errorf("no reduced axis: %v %v %v", r, reduced, err)
	}
	if _, _, err := NewReduce([]int{3}, []int{1}, []int{3, 1}, []int{1, 1}); err == nil {
		t.Error("rank mismatch accepted")
	}
}

// encodeLayout writes struct ZeLayout field by field, little-endian, with
// its 4 bytes of tail padding zero: what Bytes must equal.
func encodeLayout(l *Layout) []byte {
	b := make([]byte, 0, LayoutSize)
	for _, v := range l.Shape {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	for k := range l.Stride {
		for _, v := range l.Stride[k] {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(l.Numel))
	b = binary.LittleEndian.AppendUint32(b, uint32(l.NDim))
	return binary.LittleEndian.AppendUint32(b, 0)
}
