//go:build darwin || freebsd || linux || netbsd

package cublas

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/zeroeng/zeroeng/gpu/libs"
	"github.com/zeroeng/zeroeng/internal/fake"
)

// open loads the fake cuBLAS (internal/fake/cublas.c) through the
// binding, with its records reset, and makes a handle.
func open(t testing.TB) (*Lib, *Handle, *fake.CUBLASControl) {
	t.Helper()
	c := fake.OpenCUBLAS(t)
	l, err := LoadFrom(c.Path())
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Create()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Destroy(); err != nil {
			t.Error(err)
		}
	})
	return l, h, c
}

// hostBuf is host memory that stands for device memory: the fake cuBLAS
// reads and writes it. It is pinned for the test, as memory whose address
// C keeps must be.
func hostBuf[T float32 | float64 | byte](t testing.TB, n int) ([]T, uint64) {
	t.Helper()
	b := make([]T, max(n, 1))
	var p runtime.Pinner
	p.Pin(&b[0])
	t.Cleanup(p.Unpin)
	return b, uint64(uintptr(unsafe.Pointer(&b[0])))
}

func TestLoadFrom(t *testing.T) {
	l, _, c := open(t)
	if l.Version != 120405 {
		t.Errorf("version %d, want the fake's 12.4.5 as 120405", l.Version)
	}
	if l.Lib.Path != c.Path() || l.setWorkspace == 0 || l.statusName == 0 {
		t.Errorf("library %s, optional functions %x %x", l.Lib.Path, l.setWorkspace, l.statusName)
	}
}

// TestLoad checks that Load either finds a real cuBLAS or says why not.
func TestLoad(t *testing.T) {
	l, err := Load()
	if err != nil {
		var nf *libs.NotFoundError
		if !errors.As(err, &nf) {
			t.Fatalf("Load: %v (%T), want a libs.NotFoundError", err, err)
		}
		t.Logf("no cuBLAS here: %v", err)
		return
	}
	t.Logf("cuBLAS %d at %s", l.Version, l.Lib.Path)
}

func TestHandle(t *testing.T) {
	l, h, c := open(t)
	live := c.LiveHandles() // 1, and any an earlier test's failed Destroy left
	if live < 1 {
		t.Fatalf("%d live handles after Create", live)
	}
	const stream = uintptr(0x7f00_1234_5678)
	if err := h.SetStream(stream); err != nil {
		t.Fatal(err)
	}
	if got := c.Stream(h.Raw()); got != stream {
		t.Errorf("stream %#x, want %#x", got, stream)
	}
	const ws = uint64(0x7f00_dead_0000)
	if err := h.SetWorkspace(ws, 4<<20); err != nil {
		t.Fatal(err)
	}
	if p, n := c.Workspace(h.Raw()); p != ws || n != 4<<20 {
		t.Errorf("workspace %#x, %d bytes; want %#x, %d", p, n, ws, 4<<20)
	}
	if err := h.SetMathMode(TF32TensorOpMath | DisallowReducedPrecisionReduction); err != nil {
		t.Fatal(err)
	}
	if got := c.MathMode(h.Raw()); got != 19 {
		t.Errorf("math mode %d, want 3|16", got)
	}

	h2, err := l.Create()
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := h2.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if c.LiveHandles() != live {
		t.Errorf("%d live handles after Create and Destroy, want %d", c.LiveHandles(), live)
	}
	for name, err := range map[string]error{
		"SetStream":    h2.SetStream(0),
		"SetWorkspace": h2.SetWorkspace(0, 0),
		"SetMathMode":  h2.SetMathMode(DefaultMath),
		"Gemm":         h2.GemmStridedBatched(OpN, OpN, 1, 1, 1, 1, 0, R32F, 1, 0, 0, R32F, 1, 0, 0, 0, R32F, 1, 0, 1, Compute32F),
	} {
		if !errors.Is(err, errDestroyed) {
			t.Errorf("%s after Destroy: %v", name, err)
		}
	}

	noWS := *l
	noWS.setWorkspace = 0
	h3 := &Handle{lib: &noWS, h: h.h}
	if err := h3.SetWorkspace(ws, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetWorkspace without cublasSetWorkspace_v2: %v, want errors.ErrUnsupported", err)
	}
}

// gemmCase is one strided batched product, column-major.
type gemmCase struct {
	name                      string
	transA, transB            Op
	m, n, k                   int
	lda, ldb, ldc             int
	strideA, strideB, strideC int64
	batch                     int
	alpha, beta               float64
	nanC                      bool // C starts as NaN: beta = 0 must not read it
}

// need is the number of elements an operand spans: batch blocks stride
// apart, each cols columns ld apart of rows elements.
func need(rows, cols, ld int, stride int64, batch int) int {
	if rows == 0 || cols == 0 || batch == 0 {
		return 0
	}
	return int(stride)*(batch-1) + ld*(cols-1) + rows
}

func (g gemmCase) shapes() (ar, ac, br, bc int) {
	ar, ac = g.m, g.k
	if g.transA != OpN {
		ar, ac = g.k, g.m
	}
	br, bc = g.k, g.n
	if g.transB != OpN {
		br, bc = g.n, g.k
	}
	return
}

// refGemm computes the case in float64 on c, in place, and the scale of
// each element's rounding error.
func refGemm(g gemmCase, a, b, c []float64) (scale []float64) {
	scale = make([]float64, len(c))
	for q := 0; q < g.batch; q++ {
		for j := 0; j < g.n; j++ {
			for i := 0; i < g.m; i++ {
				var s, abs float64
				for p := 0; p < g.k; p++ {
					ai := i + p*g.lda
					if g.transA != OpN {
						ai = p + i*g.lda
					}
					bi := p + j*g.ldb
					if g.transB != OpN {
						bi = j + p*g.ldb
					}
					x, y := a[int(g.strideA)*q+ai], b[int(g.strideB)*q+bi]
					s += x * y
					abs += math.Abs(x * y)
				}
				ci := int(g.strideC)*q + i + j*g.ldc
				v, sc := g.alpha*s, math.Abs(g.alpha)*abs
				if g.beta != 0 {
					v += g.beta * c[ci]
					sc += math.Abs(g.beta * c[ci])
				}
				c[ci], scale[ci] = v, sc
			}
		}
	}
	return scale
}

var gemmCases = []gemmCase{
	{name: "NN square", transA: OpN, transB: OpN, m: 4, n: 4, k: 4, lda: 4, ldb: 4, ldc: 4, batch: 1, alpha: 1},
	{name: "TN non-square", transA: OpT, transB: OpN, m: 3, n: 5, k: 2, lda: 2, ldb: 2, ldc: 3, batch: 1, alpha: 1},
	{name: "NT non-square", transA: OpN, transB: OpT, m: 5, n: 3, k: 4, lda: 5, ldb: 3, ldc: 5, batch: 1, alpha: 1},
	{name: "TT with ld above the rows", transA: OpT, transB: OpT, m: 3, n: 4, k: 5, lda: 7, ldb: 6, ldc: 5, batch: 1, alpha: 1},
	{name: "batch 3, strides with gaps, alpha 0.5 beta -2", transA: OpN, transB: OpN, m: 3, n: 2, k: 4,
		lda: 5, ldb: 4, ldc: 4, strideA: 5*4 + 3, strideB: 4*2 + 1, strideC: 4*2 + 2, batch: 3, alpha: 0.5, beta: -2},
	{name: "batch 2 transposed, shared A (stride 0)", transA: OpT, transB: OpT, m: 2, n: 3, k: 3,
		lda: 3, ldb: 4, ldc: 2, strideA: 0, strideB: 4 * 3, strideC: 2 * 3, batch: 2, alpha: -1.5, beta: 0.25},
	{name: "beta 0 does not read C", transA: OpN, transB: OpT, m: 3, n: 3, k: 2, lda: 3, ldb: 3, ldc: 4,
		batch: 1, alpha: 2, nanC: true},
	{name: "k 0 scales C", transA: OpN, transB: OpN, m: 2, n: 2, k: 0, lda: 2, ldb: 1, ldc: 2, batch: 1, alpha: 1, beta: 3},
}

// TestGemm runs each case through the binding on the fake, which computes
// it, and compares C (all of its buffer: what lies between the columns and
// the batches must be untouched) with a float64 reference.
func TestGemm(t *testing.T) {
	_, h, c := open(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range gemmCases {
		for _, f64 := range []bool{false, true} {
			name := g.name + "/float32"
			if f64 {
				name = g.name + "/float64"
			}
			t.Run(name, func(t *testing.T) {
				ar, ac, br, bc := g.shapes()
				na, nb, nc := need(ar, ac, g.lda, g.strideA, g.batch), need(br, bc, g.ldb, g.strideB, g.batch), need(g.m, g.n, g.ldc, g.strideC, g.batch)
				a, b, cref := make([]float64, max(na, 1)), make([]float64, max(nb, 1)), make([]float64, max(nc, 1))
				for _, s := range [][]float64{a, b, cref} {
					for i := range s {
						s[i] = float64(float32(rng.Float64()*2 - 1))
					}
				}
				if g.nanC {
					for i := range cref {
						cref[i] = math.NaN()
					}
				}
				dt, compute := R32F, Compute32F
				if f64 {
					dt, compute = R64F, Compute64F
				}
				var ga, gb, gc uint64
				var got func() []float64
				if f64 {
					ba, pa := hostBuf[float64](t, na)
					bb, pb := hostBuf[float64](t, nb)
					bcc, pc := hostBuf[float64](t, nc)
					copy(ba, a)
					copy(bb, b)
					copy(bcc, cref)
					ga, gb, gc = pa, pb, pc
					got = func() []float64 { return bcc }
				} else {
					ba, pa := hostBuf[float32](t, na)
					bb, pb := hostBuf[float32](t, nb)
					bcc, pc := hostBuf[float32](t, nc)
					for i := range a {
						ba[i] = float32(a[i])
					}
					for i := range b {
						bb[i] = float32(b[i])
					}
					for i := range cref {
						bcc[i] = float32(cref[i])
					}
					ga, gb, gc = pa, pb, pc
					got = func() []float64 {
						out := make([]float64, len(bcc))
						for i, v := range bcc {
							out[i] = float64(v)
						}
						return out
					}
				}
				if err := h.GemmStridedBatched(g.transA, g.transB, g.m, g.n, g.k, g.alpha,
					ga, dt, g.lda, g.strideA, gb, dt, g.ldb, g.strideB,
					g.beta, gc, dt, g.ldc, g.strideC, g.batch, compute); err != nil {
					t.Fatal(err)
				}
				scale := refGemm(g, a, b, cref)
				tol := 1e-6
				if f64 {
					tol = 1e-14
				}
				out := got()
				for i := range cref {
					if math.IsNaN(cref[i]) && math.IsNaN(out[i]) {
						continue
					}
					if math.Abs(out[i]-cref[i]) > tol*(scale[i]+1) {
						t.Fatalf("C[%d] = %v, want %v (tolerance %g)", i, out[i], cref[i], tol*(scale[i]+1))
					}
				}

				last := c.Last()
				want := fake.GemmCall{Calls: last.Calls, Handle: uint64(h.Raw()),
					TransA: int64(g.transA), TransB: int64(g.transB), M: int64(g.m), N: int64(g.n), K: int64(g.k),
					Alpha: g.alpha, AlphaBits: uint64(math.Float32bits(float32(g.alpha))),
					A: ga, AType: int64(dt), LDA: int64(g.lda), StrideA: g.strideA,
					B: gb, BType: int64(dt), LDB: int64(g.ldb), StrideB: g.strideB,
					Beta: g.beta, BetaBits: uint64(math.Float32bits(float32(g.beta))),
					C: gc, CType: int64(dt), LDC: int64(g.ldc), StrideC: g.strideC,
					Batch: int64(g.batch), Compute: int64(compute), Algo: int64(AlgoDefault), Computed: 1}
				if f64 {
					want.AlphaBits, want.BetaBits = math.Float64bits(g.alpha), math.Float64bits(g.beta)
				}
				if last != want {
					t.Errorf("the fake received\n%+v\nwant\n%+v", last, want)
				}
			})
		}
	}
}

// TestGemmTypes checks the data and compute types, the algorithm and the
// scalars' encoding for each compute type, as the fake received them.
func TestGemmTypes(t *testing.T) {
	_, h, c := open(t)
	_, p := hostBuf[byte](t, 64)
	tests := []struct {
		name                string
		aType, bType, cType DataType
		compute             ComputeType
		algo                Algo
		alpha, beta         float64
		alphaBits, betaBits uint64
	}{
		{"bf16 in float32", R16BF, R16BF, R16BF, Compute32F, AlgoDefault, 0.5, -2, 0x3f000000, 0xc0000000},
		{"fp16 with fp32 output, TF32", R16F, R16F, R32F, Compute32FFastTF32, AlgoDefault, 1, 0, 0x3f800000, 0},
		{"bf16 fast", R32F, R32F, R32F, Compute32FFast16BF, AlgoDefaultTensorOp, 0.25, 1, 0x3e800000, 0x3f800000},
		{"half scalars", R16F, R16F, R16F, Compute16F, AlgoDefault, 0.5, -2, 0x3800, 0xc000},
		{"double scalars", R64F, R64F, R64F, Compute64FPedantic, AlgoDefault, 0.1, -3, math.Float64bits(0.1), math.Float64bits(-3)},
		{"int scalars", R8I, R8I, R32I, Compute32I, AlgoDefault, 3, -1, 3, 0xffffffff},
		{"float scalars, pedantic", R32F, R32F, R32F, Compute32FPedantic, 5, 0.1, 0, uint64(math.Float32bits(0.1)), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 1×1 products of one element each: the fake reads only the
			// first bytes of the buffer.
			err := h.GemmStridedBatchedAlgo(OpT, OpN, 1, 1, 1, tt.alpha, p, tt.aType, 1, 0, p, tt.bType, 1, 0,
				tt.beta, p+32, tt.cType, 1, 0, 1, tt.compute, tt.algo)
			if err != nil {
				t.Fatal(err)
			}
			g := c.Last()
			if g.AType != int64(tt.aType) || g.BType != int64(tt.bType) || g.CType != int64(tt.cType) ||
				g.Compute != int64(tt.compute) || g.Algo != int64(tt.algo) || g.TransA != 1 || g.TransB != 0 {
				t.Errorf("types %d %d %d, compute %d, algo %d, ops %d %d", g.AType, g.BType, g.CType, g.Compute, g.Algo, g.TransA, g.TransB)
			}
			if g.AlphaBits != tt.alphaBits || g.BetaBits != tt.betaBits {
				t.Errorf("alpha bits %#x, beta bits %#x; want %#x, %#x", g.AlphaBits, g.BetaBits, tt.alphaBits, tt.betaBits)
			}
		})
	}
}

func TestGemmErrors(t *testing.T) {
	l, h, c := open(t)
	_, p := hostBuf[float32](t, 64)
	gemm := func(m, lda int, alpha float64, compute ComputeType) error {
		return h.GemmStridedBatched(OpN, OpN, m, 2, 2, alpha, p, R32F, lda, 0, p, R32F, 2, 0, 0, p, R32F, max(m, 1), 0, 1, compute)
	}
	tests := []struct {
		name    string
		fail    string // the function the fake fails
		status  int    // with this status
		run     func() error
		want    string // the message
		status2 int    // the Error's Status, or 0 for an error before any call
	}{
		{name: "lda below m", run: func() error { return gemm(4, 3, 1, Compute32F) },
			want: "cublasGemmStridedBatchedEx: CUBLAS_STATUS_INVALID_VALUE", status2: 7},
		{name: "negative m", run: func() error { return gemm(-1, 2, 1, Compute32F) },
			want: "cublasGemmStridedBatchedEx: CUBLAS_STATUS_INVALID_VALUE", status2: 7},
		{name: "execution failed", fail: "cublasGemmStridedBatchedEx", status: 13, run: func() error { return gemm(2, 2, 1, Compute32F) },
			want: "cublasGemmStridedBatchedEx: CUBLAS_STATUS_EXECUTION_FAILED", status2: 13},
		{name: "a status the package does not know", fail: "cublasGemmStridedBatchedEx", status: 42,
			run: func() error { return gemm(2, 2, 1, Compute32F) }, want: "cublasGemmStridedBatchedEx: CUBLAS_STATUS_UNKNOWN", status2: 42},
		{name: "create", fail: "cublasCreate_v2", status: 3, run: func() error { _, err := l.Create(); return err },
			want: "cublasCreate_v2: CUBLAS_STATUS_ALLOC_FAILED", status2: 3},
		{name: "set stream", fail: "cublasSetStream_v2", status: 1, run: func() error { return h.SetStream(1) },
			want: "cublasSetStream_v2: CUBLAS_STATUS_NOT_INITIALIZED", status2: 1},
		{name: "set workspace", fail: "cublasSetWorkspace_v2", status: 7, run: func() error { return h.SetWorkspace(p, 64) },
			want: "cublasSetWorkspace_v2: CUBLAS_STATUS_INVALID_VALUE", status2: 7},
		{name: "set math mode", fail: "cublasSetMathMode", status: 15, run: func() error { return h.SetMathMode(PedanticMath) },
			want: "cublasSetMathMode: CUBLAS_STATUS_NOT_SUPPORTED", status2: 15},
		{name: "destroy", fail: "cublasDestroy_v2", status: 14, run: func() error {
			h2, err := l.Create()
			if err != nil {
				return err
			}
			err = h2.Destroy()
			c.Reset()
			if h2.Raw() == 0 {
				return errors.New("the handle was forgotten after a failed Destroy")
			}
			if err2 := h2.Destroy(); err2 != nil {
				return err2
			}
			return err
		}, want: "cublasDestroy_v2: CUBLAS_STATUS_INTERNAL_ERROR", status2: 14},
		{name: "m beyond int32", run: func() error { return gemm(math.MaxInt32+1, 2, 1, Compute32F) },
			want: "cublas: GemmStridedBatched: m = 2147483648 does not fit cuBLAS's 32-bit int"},
		{name: "int scalar not an int", run: func() error { return gemm(2, 2, 0.5, Compute32I) },
			want: "cublas: GemmStridedBatched: alpha: 0.5 is not an int for compute type 72"},
		{name: "unknown compute type", run: func() error { return gemm(2, 2, 1, 5) },
			want: "cublas: GemmStridedBatched: alpha: unknown compute type 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.Reset()
			if tt.fail != "" {
				c.Fail(tt.fail, tt.status)
			}
			err := tt.run()
			c.Reset()
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v\nwant  %s", err, tt.want)
			}
			var e *Error
			if errors.As(err, &e) != (tt.status2 != 0) || (e != nil && e.Status != tt.status2) {
				t.Errorf("error %#v, want an *Error with status %d", err, tt.status2)
			}
			if tt.status2 == 0 && c.Last().Calls != 0 {
				t.Error("the library was called")
			}
		})
	}
}

// TestGemmConcurrent runs products from several goroutines on one handle
// while the garbage collector runs, which would catch scalars or
// pointers not kept alive during the call.
func TestGemmConcurrent(t *testing.T) {
	_, h, _ := open(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	defer close(stop)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, pa := hostBuf[float32](t, 4)
			b, pb := hostBuf[float32](t, 4)
			cc, pc := hostBuf[float32](t, 4)
			for i := range 4 {
				a[i], b[i] = float32(w+1), float32(i+1)
			}
			for range 200 {
				for i := range cc {
					cc[i] = 1
				}
				// C = 0.5·A·B - 2·C with A all w+1 and C all 1.
				if err := h.GemmStridedBatched(OpN, OpN, 2, 2, 2, 0.5, pa, R32F, 2, 0, pb, R32F, 2, 0, -2, pc, R32F, 2, 0, 1, Compute32F); err != nil {
					t.Error(err)
					return
				}
				for j := range 2 {
					want := 0.5*float32(w+1)*(b[2*j]+b[2*j+1]) - 2
					if cc[2*j] != want || cc[2*j+1] != want {
						t.Errorf("worker %d: C %v, want %v in column %d", w, cc, want, j)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestErrorNames(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Call: "cublasGemmStridedBatchedEx", Status: 7}, "cublasGemmStridedBatchedEx: CUBLAS_STATUS_INVALID_VALUE"},
		{&Error{Call: "cublasCreate_v2", Status: 16}, "cublasCreate_v2: CUBLAS_STATUS_LICENSE_ERROR"},
		{&Error{Call: "cublasCreate_v2", Status: 99}, "cublasCreate_v2: cublasStatus_t 99"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%q, want %q", got, tt.want)
		}
	}
}

// gemmFunc is cublasGemmStridedBatchedEx for purego.RegisterFunc, to
// compare its cost with the binding's purego.SyscallN.
type gemmFunc func(h uintptr, ta, tb, m, n, k int32, alpha unsafe.Pointer, a uint64, at, lda int32, sa int64,
	b uint64, bt, ldb int32, sb int64, beta unsafe.Pointer, c uint64, ct, ldc int32, sc int64, batch, compute, algo int32) int32

// BenchmarkGemmCall measures the cost of one call into the library: a 1×1
// product on the fake, through the binding (SyscallN) and through a
// purego.RegisterFunc wrapper of the same function.
func BenchmarkGemmCall(b *testing.B) {
	l, h, _ := open(b)
	_, p := hostBuf[float32](b, 4)
	b.Run("binding", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := h.GemmStridedBatched(OpN, OpN, 1, 1, 1, 1, p, R32F, 1, 0, p+4, R32F, 1, 0, 0, p+8, R32F, 1, 0, 1, Compute32F); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RegisterFunc", func(b *testing.B) {
		var f gemmFunc
		purego.RegisterFunc(&f, l.gemm)
		alpha, beta := float32(1), float32(0)
		b.ReportAllocs()
		for b.Loop() {
			if s := f(h.h, 0, 0, 1, 1, 1, unsafe.Pointer(&alpha), p, 0, 1, 0, p+4, 0, 1, 0, unsafe.Pointer(&beta), p+8, 0, 1, 0, 1, 68, -1); s != 0 {
				b.Fatal(s)
			}
		}
	})
}
