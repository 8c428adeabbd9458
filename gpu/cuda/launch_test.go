//go:build (darwin || freebsd || linux || netbsd) && (amd64 || arm64)

package cuda_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/internal/fake"
)

// kernels is a module image for the fake: it finds a kernel by its name
// followed by '('.
const kernels = `
.visible .entry add_f32(.param .u64 out, .param .u64 in, .param .u32 n)
extern "C" __global__ void scale (float* x, float a, int n)
extern "C" __global__ void mixed(int a, struct S s, float f, struct T t, float* p)
`

func loadKernels(tb testing.TB, c *cuda.Context) *cuda.Module {
	tb.Helper()
	m, err := c.LoadModule([]byte(kernels))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Unload() })
	return m
}

func function(tb testing.TB, m *cuda.Module, name string) cuda.Function {
	tb.Helper()
	f, err := m.Function(name)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// arg is one kernel argument: how to add it, and the bytes the kernel
// must receive.
type arg struct {
	add  func(*cuda.Args)
	want []byte
}

func le(v any) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.NativeEndian, v)
	return b.Bytes()
}

func ptr(p cuda.DevicePtr) arg {
	return arg{func(a *cuda.Args) { a.Ptr(p) }, le(uint64(p))}
}
func i32(v int32) arg   { return arg{func(a *cuda.Args) { a.I32(v) }, le(v)} }
func u32(v uint32) arg  { return arg{func(a *cuda.Args) { a.U32(v) }, le(v)} }
func i64(v int64) arg   { return arg{func(a *cuda.Args) { a.I64(v) }, le(v)} }
func f32(v float32) arg { return arg{func(a *cuda.Args) { a.F32(v) }, le(math.Float32bits(v))} }
func f64(v float64) arg { return arg{func(a *cuda.Args) { a.F64(v) }, le(math.Float64bits(v))} }
func raw(b []byte, align int) arg {
	return arg{func(a *cuda.Args) { a.Raw(b, align) }, b}
}

func TestLaunchMarshalling(t *testing.T) {
	fc, c := setup(t)
	m := loadKernels(t, c)
	stream, err := c.NewStream(true)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Destroy()

	// struct S { int x; double y; } and struct T { char c[3]; }, as laid
	// out on the device (and the host): padding after x.
	structS := append(append(le(int32(-7)), 0, 0, 0, 0), le(math.Float64bits(2.5))...)
	structT := []byte{'a', 'b', 'c'}

	tests := []struct {
		name         string
		kernel       string
		grid, block  cuda.Dim3
		shared       uint32
		stream       *cuda.Stream
		args         []arg // nil: a nil *Args
		wantFloatsAt map[int][]byte
	}{
		{name: "no arguments", kernel: "add_f32", grid: cuda.Dim3{1, 1, 1}, block: cuda.Dim3{32, 1, 1}},
		{
			name: "pointers", kernel: "add_f32", grid: cuda.Dim3{65535, 7, 3}, block: cuda.Dim3{256, 2, 2}, stream: stream,
			args: []arg{ptr(0x1122334455667788), ptr(0xFFFFFFFF00000001), u32(1 << 31)},
		},
		{
			name: "integers", kernel: "add_f32", grid: cuda.Dim3{1, 1, 1}, block: cuda.Dim3{1, 1, 1}, shared: 1024,
			args: []arg{i32(-1), u32(0xDEADBEEF), i64(-2), i64(1 << 40), i32(math.MinInt32)},
		},
		{
			name: "floats", kernel: "scale", grid: cuda.Dim3{2, 1, 1}, block: cuda.Dim3{128, 1, 1}, stream: stream,
			args: []arg{ptr(0x7000), f32(0.5), f32(-2), f64(3.25), f64(math.Inf(-1)), f32(float32(math.NaN()))},
			// 0.5 and -2 as IEEE-754 bits, not converted to integers.
			wantFloatsAt: map[int][]byte{8: {0, 0, 0, 0x3f}, 12: {0, 0, 0, 0xc0}},
		},
		{
			name: "structs by value", kernel: "mixed", grid: cuda.Dim3{3, 2, 1}, block: cuda.Dim3{64, 4, 1}, shared: 48 << 10,
			args: []arg{i32(42), raw(structS, 8), f32(1.5), raw(structT, 1), ptr(0xABC00)},
		},
		{
			name: "many", kernel: "mixed", grid: cuda.Dim3{1, 1, 1}, block: cuda.Dim3{1, 1, 1},
			args: func() []arg {
				var as []arg
				for i := range 40 {
					as = append(as, i32(int32(i)), ptr(cuda.DevicePtr(i)<<32))
				}
				return as
			}(),
		},
	}
	var a cuda.Args // reused across launches, as callers do
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc.Reset()
			var args *cuda.Args
			var sizes []int
			var want []byte
			if tt.args != nil {
				args = a.Reset()
				for _, x := range tt.args {
					x.add(args)
					sizes = append(sizes, len(x.want))
					want = append(want, x.want...)
				}
				if args.Len() != len(tt.args) {
					t.Errorf("Len() = %d, want %d", args.Len(), len(tt.args))
				}
			}
			fc.SetParamSizes(sizes...)
			f := function(t, m, tt.kernel)
			if err := f.Launch(tt.grid, tt.block, tt.shared, tt.stream, args); err != nil {
				t.Fatal(err)
			}
			got, ok := fc.LastLaunch()
			if !ok {
				t.Fatal("the fake recorded no launch")
			}
			wantLaunch := fake.Launch{
				Name:   tt.kernel,
				Grid:   [3]uint32{tt.grid.X, tt.grid.Y, tt.grid.Z},
				Block:  [3]uint32{tt.block.X, tt.block.Y, tt.block.Z},
				Shared: tt.shared,
				Stream: tt.stream.Handle(),
			}
			params := got.Params
			got.Params = nil
			if !reflect.DeepEqual(got, wantLaunch) {
				t.Errorf("launch\n got %+v\nwant %+v", got, wantLaunch)
			}
			if !bytes.Equal(params, want) {
				t.Errorf("parameters\n got %x\nwant %x", params, want)
			}
			for at, b := range tt.wantFloatsAt {
				if !bytes.Equal(params[at:at+len(b)], b) {
					t.Errorf("bytes at %d = %x, want %x", at, params[at:at+len(b)], b)
				}
			}
		})
	}
}

func TestLaunchErrors(t *testing.T) {
	fc, c := setup(t)
	m := loadKernels(t, c)
	f := function(t, m, "scale")
	var a cuda.Args
	a.Ptr(0).F32(1).I32(3)

	err := f.Launch(cuda.Dim3{1, 1, 1}, cuda.Dim3{2048, 1, 1}, 0, nil, &a)
	want := "cuLaunchKernel(scale, grid (1,1,1), block (2048,1,1), shared 0): CUDA_ERROR_INVALID_VALUE: invalid argument"
	if err == nil || err.Error() != want {
		t.Errorf("Launch of 2048 threads a block:\n got %v\nwant %s", err, want)
	}

	fc.Fail(t, "cuLaunchKernel", int(cuda.ErrorLaunchOutOfResources))
	err = f.Launch(cuda.Dim3{4, 5, 6}, cuda.Dim3{32, 1, 1}, 16, nil, &a)
	if !errors.Is(err, cuda.ErrorLaunchOutOfResources) || !strings.HasPrefix(err.Error(), "cuLaunchKernel(scale, grid (4,5,6), block (32,1,1), shared 16): CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") {
		t.Errorf("injected failure: %v", err)
	}

	// Beyond 48 KiB of dynamic shared memory, a kernel opts in.
	const big = 100 << 10
	if err := f.Launch(cuda.Dim3{1, 1, 1}, cuda.Dim3{32, 1, 1}, big, nil, &a); !errors.Is(err, cuda.ErrorInvalidValue) {
		t.Errorf("Launch with %d bytes of shared memory before opting in: %v", big, err)
	}
	if err := f.SetMaxDynamicShared(big); err != nil {
		t.Fatal(err)
	}
	if err := f.Launch(cuda.Dim3{1, 1, 1}, cuda.Dim3{32, 1, 1}, big, nil, &a); err != nil {
		t.Errorf("Launch with %d bytes of shared memory after opting in: %v", big, err)
	}
	if err := f.SetMaxDynamicShared(1 << 20); err == nil || !strings.Contains(err.Error(), "cuFuncSetAttribute(scale, MAX_DYNAMIC_SHARED_SIZE_BYTES, 1048576)") {
		t.Errorf("SetMaxDynamicShared(1 MiB): %v", err)
	}

	var zero cuda.Function
	if err := zero.Launch(cuda.Dim3{1, 1, 1}, cuda.Dim3{1, 1, 1}, 0, nil, nil); !errors.Is(err, cuda.ErrorInvalidHandle) {
		t.Errorf("Launch of the zero Function: %v", err)
	}
	s, err := c.NewStream(false)
	if err != nil {
		t.Fatal(err)
	}
	s.Destroy()
	calls := fc.Calls(t, "cuLaunchKernel")
	if err := f.Launch(cuda.Dim3{1, 1, 1}, cuda.Dim3{1, 1, 1}, 0, s, &a); !errors.Is(err, cuda.ErrorInvalidHandle) {
		t.Errorf("Launch on a destroyed stream: %v", err)
	}
	if fc.Calls(t, "cuLaunchKernel") != calls {
		t.Error("Launch on a destroyed stream called the driver")
	}
}

func TestModule(t *testing.T) {
	_, c := setup(t)

	_, err := c.LoadModule([]byte("// FAKE_BAD_IMAGE\n.entry k("))
	var e *cuda.Error
	if !errors.As(err, &e) || e.Code != cuda.ErrorInvalidPTX || e.Call != "cuModuleLoadDataEx" {
		t.Fatalf("LoadModule of a bad image: %v", err)
	}
	for _, want := range []string{"fake JIT error: the image contains FAKE_BAD_IMAGE", "second line of the log"} {
		if !strings.Contains(e.Detail, want) {
			t.Errorf("Detail %q lacks %q", e.Detail, want)
		}
	}
	if !strings.HasPrefix(err.Error(), "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: a PTX JIT compilation failed: ptxas fatal") {
		t.Errorf("error text %q", err)
	}
	if _, err := c.LoadModule(nil); !errors.Is(err, cuda.ErrorInvalidImage) {
		t.Errorf("LoadModule(nil): %v", err)
	}

	m := loadKernels(t, c)
	tests := []struct {
		name string
		ok   bool
	}{
		{"add_f32", true}, {"scale", true}, {"mixed", true},
		{"add", false}, {"f32", false}, {"missing_kernel", false}, {"", false},
	}
	for _, tt := range tests {
		f, err := m.Function(tt.name)
		if tt.ok {
			if err != nil || f.Name() != tt.name || f.Handle() == 0 {
				t.Errorf("Function(%q) = %v, %v", tt.name, f.Name(), err)
			}
			continue
		}
		want := "cuModuleGetFunction(" + tt.name + "): CUDA_ERROR_NOT_FOUND: named symbol not found"
		if err == nil || err.Error() != want || !errors.Is(err, cuda.ErrorNotFound) {
			t.Errorf("Function(%q):\n got %v\nwant %s", tt.name, err, want)
		}
	}

	m2, err := c.LoadModule([]byte(kernels))
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Unload(); err != nil {
		t.Fatal(err)
	}
	if err := m2.Unload(); !errors.Is(err, cuda.ErrorInvalidHandle) {
		t.Errorf("second Unload: %v", err)
	}
	if _, err := m2.Function("scale"); !errors.Is(err, cuda.ErrorInvalidHandle) || !strings.Contains(err.Error(), "cuModuleGetFunction(scale)") {
		t.Errorf("Function of an unloaded module: %v", err)
	}
}

func TestLaunchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	fc, c := setup(t)
	f := function(t, loadKernels(t, c), "mixed")
	s, err := c.NewStream(true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	fc.SetParamSizes()
	var a cuda.Args
	raw := make([]byte, 24)
	launch := func() {
		a.Reset().I32(1).Raw(raw, 8).F32(2).Ptr(3).I64(4)
		if err := f.Launch(cuda.Dim3{1, 1, 1}, cuda.Dim3{128, 1, 1}, 0, s, &a); err != nil {
			t.Fatal(err)
		}
	}
	launch() // grows a
	if n := testing.AllocsPerRun(100, launch); n != 0 {
		t.Errorf("Launch allocates %v times", n)
	}
	buf := make([]byte, 4096)
	d, err := c.MemAlloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(d)
	copies := func() {
		if err := s.CopyHtoD(d, buf); err != nil {
			t.Fatal(err)
		}
		if err := s.CopyDtoH(buf, d); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(100, copies); n != 0 {
		t.Errorf("copies allocate %v times", n)
	}
}

func BenchmarkLaunch(b *testing.B) {
	fc, c := setup(b)
	f := function(b, loadKernels(b, c), "add_f32")
	s, err := c.NewStream(true)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	fc.SetParamSizes() // the fake records no parameters
	var a cuda.Args
	b.ReportAllocs()
	for b.Loop() {
		a.Reset().Ptr(0x1000).Ptr(0x2000).U32(1 << 20)
		if err := f.Launch(cuda.Dim3{4096, 1, 1}, cuda.Dim3{256, 1, 1}, 0, s, &a); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCopyHtoD4K(b *testing.B) {
	_, c := setup(b)
	s, err := c.NewStream(true)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	d, err := c.MemAlloc(4096)
	if err != nil {
		b.Fatal(err)
	}
	defer c.MemFree(d)
	buf := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := s.CopyHtoD(d, buf); err != nil {
			b.Fatal(err)
		}
	}
}
