//go:build linux

package gpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/device"
	"github.com/zeroeng/zeroeng/engine/dtype"
	"github.com/zeroeng/zeroeng/gpu/cublas"
	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/nvrtc"
	"github.com/zeroeng/zeroeng/internal/fake"
)

// openFake opens a Device on the fake CUDA driver, cuBLAS and NVRTC of
// internal/fake: "device" memory is host memory, cuBLAS computes float32
// GEMMs on it for real, NVRTC returns the source as its "PTX", and the fake
// driver finds a kernel when its name is in that text. Kernels do not run.
func openFake(t testing.TB) (*Device, *fake.CUDAControl) {
	t.Helper()
	t.Setenv("ZEROENG_KERNEL_CACHE", t.TempDir())
	ctl := fake.OpenCUDA(t)
	drv, err := cuda.LoadFrom(ctl.Path())
	if err != nil {
		t.Fatal(err)
	}
	blas, err := cublas.LoadFrom(fake.OpenCUBLAS(t).Path())
	if err != nil {
		t.Fatal(err)
	}
	rtcPath := fake.OpenNVRTC(t).Path()
	d, err := open(drv, blas, func() (*nvrtc.Lib, error) { return nvrtc.LoadFrom(rtcPath) }, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d, ctl
}

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func f32s(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

func TestFakeDeviceBasics(t *testing.T) {
	d, _ := openFake(t)
	if d.String() != "cuda:0" || d.Kind() != device.CUDA {
		t.Errorf("device %v kind %v", d, d.Kind())
	}
	buf, err := d.Alloc(dtype.Float32, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, 1000)
	for i := range want {
		want[i] = float32(i) * 0.25
	}
	v := device.View{Buf: buf, DType: dtype.Float32, Shape: []int{1000}, Strides: []int{1}}
	if err := d.Upload(v, f32bytes(want)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4000)
	if err := d.Download(got, v); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f32s(got), want) {
		t.Error("download differs from upload")
	}
	// An offset view reads from the right address.
	part := make([]byte, 40)
	if err := d.Download(part, device.View{Buf: buf, DType: dtype.Float32, Offset: 500, Shape: []int{10}, Strides: []int{1}}); err != nil {
		t.Fatal(err)
	}
	if f32s(part)[0] != want[500] {
		t.Errorf("offset view read %v, want %v", f32s(part)[0], want[500])
	}
	st := d.MemStats()
	if st.LiveBuffers != 2 || st.LiveBytes != int64(4000+blasWorkspaceBytes(d.Props())) {
		t.Errorf("stats %+v: want the buffer and cuBLAS's workspace", st)
	}
	d.Free(buf)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(v, make([]byte, 3)); err == nil {
		t.Error("an upload of the wrong size was accepted")
	}
}

// TestFakeGemmMatchesCPU checks the row-major to column-major mapping of
// Gemm against the CPU engine, with the fake cuBLAS doing the arithmetic.
func TestFakeGemmMatchesCPU(t *testing.T) {
	d, _ := openFake(t)
	ref := cpu.New(cpu.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name             string
		batch, m, n, k   int
		transA, transB   bool
		padA, padB, padC int // extra elements per row
		broadcastB       bool
		alpha, beta      float64
	}{
		{"nn", 1, 3, 4, 5, false, false, 0, 0, 0, false, 1, 0},
		{"tn", 1, 3, 4, 5, true, false, 0, 0, 0, false, 1, 0},
		{"nt", 1, 3, 4, 5, false, true, 0, 0, 0, false, 1, 0},
		{"tt", 1, 7, 2, 3, true, true, 0, 0, 0, false, 1, 0},
		{"ld", 1, 6, 5, 4, false, true, 3, 2, 1, false, 1, 0},
		{"batch-alpha-beta", 3, 4, 3, 2, true, false, 1, 0, 2, false, 0.5, -2},
		{"broadcast-b", 4, 2, 3, 5, false, false, 0, 0, 0, true, 1, 1},
		{"vector", 1, 1, 9, 4, false, false, 0, 0, 0, false, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rowsA, colsA := c.m, c.k
			if c.transA {
				rowsA, colsA = colsA, rowsA
			}
			rowsB, colsB := c.k, c.n
			if c.transB {
				rowsB, colsB = colsB, rowsB
			}
			ldA, ldB, ldC := colsA+c.padA, colsB+c.padB, c.n+c.padC
			sA, sB, sC := rowsA*ldA, rowsB*ldB, c.m*ldC
			if c.broadcastB {
				sB = 0
			}
			sizes := []int{c.batch * sA, max(c.batch*sB, rowsB*ldB), c.batch * sC}
			hosts := make([][]float32, 3)
			for i, n := range sizes {
				hosts[i] = make([]float32, n)
				for j := range hosts[i] {
					hosts[i][j] = float32(rng.NormFloat64())
				}
			}
			run := func(dev device.Device) []float32 {
				var ops [3]device.GemmOperand
				var bufs [3]device.Buffer
				for i, n := range sizes {
					b, err := dev.Alloc(dtype.Float32, n)
					if err != nil {
						t.Fatal(err)
					}
					bufs[i] = b
					if err := dev.Upload(device.View{Buf: b, DType: dtype.Float32, Shape: []int{n}, Strides: []int{1}}, f32bytes(hosts[i])); err != nil {
						t.Fatal(err)
					}
				}
				ops[0] = device.GemmOperand{Buf: bufs[0], DType: dtype.Float32, Ld: ldA, BatchStride: sA, Trans: c.transA}
				ops[1] = device.GemmOperand{Buf: bufs[1], DType: dtype.Float32, Ld: ldB, BatchStride: sB, Trans: c.transB}
				ops[2] = device.GemmOperand{Buf: bufs[2], DType: dtype.Float32, Ld: ldC, BatchStride: sC}
				if err := dev.Gemm(ops[2], ops[0], ops[1], c.batch, c.m, c.n, c.k, c.alpha, c.beta); err != nil {
					t.Fatal(err)
				}
				out := make([]byte, 4*sizes[2])
				if err := dev.Download(out, device.View{Buf: bufs[2], DType: dtype.Float32, Shape: []int{sizes[2]}, Strides: []int{1}}); err != nil {
					t.Fatal(err)
				}
				for _, b := range bufs {
					dev.Free(b)
				}
				return f32s(out)
			}
			want, got := run(ref), run(d)
			for i := range want {
				if diff := math.Abs(float64(got[i] - want[i])); diff > 1e-5*max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("element %d (row %d, col %d of batch %d): got %v, want %v",
						i, i%sC/ldC, i%sC%ldC, i/sC, got[i], want[i])
				}
			}
		})
	}
}

func TestFakeKernelCompileAndLaunch(t *testing.T) {
	d, ctl := openFake(t)
	n := 300
	buf, err := d.Alloc(dtype.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(buf)
	v := device.View{Buf: buf, DType: dtype.Float32, Shape: []int{n}, Strides: []int{1}}
	if err := d.Fill(v, 1.5); err != nil {
		t.Fatalf("Fill through the fake NVRTC and driver: %v", err)
	}
	l, ok := ctl.LastLaunch()
	if !ok {
		t.Fatal("no kernel was launched")
	}
	if l.Stream != d.compute.Handle() {
		t.Errorf("launched on stream %#x, want the compute stream %#x", l.Stream, d.compute.Handle())
	}
	// A second launch of the family does not compile or load again.
	loads := ctl.Calls(t, "cuModuleLoadDataEx")
	if err := d.Fill(v, 2); err != nil {
		t.Fatal(err)
	}
	if got := ctl.Calls(t, "cuModuleLoadDataEx"); got != loads {
		t.Errorf("module loaded %d more times", got-loads)
	}
}

// BenchmarkFakeFill measures the host side of one op on the fake driver:
// argument packing, the checks against the kernel's declaration, the
// kernel lookup and cuLaunchKernel (the fake returns at once).
func BenchmarkFakeFill(b *testing.B) {
	d, _ := openFake(b)
	buf, err := d.Alloc(dtype.Float32, 4096)
	if err != nil {
		b.Fatal(err)
	}
	v := device.View{Buf: buf, DType: dtype.Float32, Shape: []int{64, 64}, Strides: []int{64, 1}}
	if err := d.Fill(v, 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Fill(v, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLaunchBounds holds launches to the kernels' __launch_bounds__: a
// row kernel's blocks grow to 1024 threads for long rows and no further
// than its bound; a block bigger than the bound fails before the driver
// sees it (on a GPU it would fail with LAUNCH_OUT_OF_RESOURCES, and only
// there).
func TestLaunchBounds(t *testing.T) {
	d, ctl := openFake(t)
	rows := []struct {
		n         int
		wantBlock uint32
		wantGroup int
	}{
		{1000, blockSize, 32},
		{1025, 256, 256},
		{4096, 512, 512},
		{4097, 1024, 1024},
		{50257, 1024, 1024},
	}
	for _, tt := range rows {
		c := d.call(famNN, "softmax_f32")
		group, _, block := c.rowLaunch(3, tt.n)
		if block.X != tt.wantBlock || group != tt.wantGroup {
			t.Errorf("row of %d: blocks of %d threads, group %d; want %d, %d", tt.n, block.X, group, tt.wantBlock, tt.wantGroup)
		}
	}

	buf, err := d.Alloc(dtype.Float32, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(buf)
	v := device.View{Buf: buf, DType: dtype.Float32, Shape: []int{8}, Strides: []int{1}}
	if err := d.Fill(v, 1); err != nil { // compiles and loads the family
		t.Fatal(err)
	}
	before := ctl.Calls(t, "cuLaunchKernel")
	c := d.call(famOptim, "sgd_f32") // __launch_bounds__(256)
	c.ptr(d.ptr(v))
	c.ptr(d.ptr(v))
	c.ptr(0)
	c.i64(8)
	for range 5 {
		c.f32(0)
	}
	c.i32(0)
	err = c.launch(dim1(1), dim1(512), 0)
	if err == nil || !strings.Contains(err.Error(), "blocks of 512 threads, it declares __launch_bounds__(256)") {
		t.Errorf("launch of 512 threads a block: %v", err)
	}
	if got := ctl.Calls(t, "cuLaunchKernel"); got != before {
		t.Errorf("the driver saw %d launches", got-before)
	}
}
