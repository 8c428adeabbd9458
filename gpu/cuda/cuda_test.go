//go:build (darwin || freebsd || linux || netbsd) && (amd64 || arm64)

package cuda_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/gpu/cuda"
	"github.com/zeroeng/zeroeng/gpu/libs"
	"github.com/zeroeng/zeroeng/internal/fake"
)

// load opens the fake driver, skipping the test without a C compiler.
func load(tb testing.TB) (*fake.CUDAControl, *cuda.Driver) {
	tb.Helper()
	fc := fake.OpenCUDA(tb)
	d, err := cuda.LoadFrom(fc.Path())
	if err != nil {
		tb.Fatalf("LoadFrom(%s): %v", fc.Path(), err)
	}
	return fc, d
}

// context retains device ordinal's primary context until the test ends.
func context(tb testing.TB, d *cuda.Driver, ordinal int) *cuda.Context {
	tb.Helper()
	dev, err := d.Device(ordinal)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := dev.RetainPrimaryContext()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Release(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// setup is load and context of device 0.
func setup(tb testing.TB) (*fake.CUDAControl, *cuda.Context) {
	tb.Helper()
	fc, d := load(tb)
	return fc, context(tb, d, 0)
}

func TestLoadFromFake(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want cuda.Device // the fields compared
		arch string
		n    int
		ver  int
	}{
		{
			name: "defaults",
			want: cuda.Device{
				Name: "Fake H100", Major: 9, Minor: 0, SMs: 132, TotalMem: 80 << 30,
				MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 48 << 10, MaxSharedPerBlockOptin: 227 << 10,
				WarpSize: 32, L2Bytes: 48 << 20, ClockKHz: 1980000, MemClockKHz: 2619000, MemBusWidth: 5120,
				MaxBlockDim: [3]int{1024, 1024, 64}, MaxGridDim: [3]int{1<<31 - 1, 65535, 65535},
				MaxSharedPerSM: 228 << 10, MaxThreadsPerSM: 2048, MaxBlocksPerSM: 32, ECC: true, CooperativeLaunch: true,
			},
			arch: "sm_90", n: 1, ver: 12040,
		},
		{
			name: "environment",
			env: map[string]string{
				"FAKECUDA_DEVICES": "3", "FAKECUDA_NAME": "Fake A100", "FAKECUDA_CC": "8.0",
				"FAKECUDA_MEM": "1073741824", "FAKECUDA_VERSION": "12080",
			},
			want: cuda.Device{Name: "Fake A100", Major: 8, Minor: 0, SMs: 132, TotalMem: 1 << 30},
			arch: "sm_80", n: 3, ver: 12080,
		},
		{
			name: "Blackwell",
			env:  map[string]string{"FAKECUDA_CC": "12.0"},
			want: cuda.Device{Name: "Fake H100", Major: 12, Minor: 0, SMs: 132, TotalMem: 80 << 30},
			arch: "sm_120", n: 1, ver: 12040,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, d := load(t)
			if d.Version != tt.ver {
				t.Errorf("Version = %d, want %d", d.Version, tt.ver)
			}
			if d.Lib == nil || d.Lib.Path == "" {
				t.Errorf("Lib = %+v", d.Lib)
			}
			n, err := d.DeviceCount()
			if err != nil || n != tt.n {
				t.Fatalf("DeviceCount() = %d, %v; want %d", n, err, tt.n)
			}
			for i := range n {
				dev, err := d.Device(i)
				if err != nil {
					t.Fatal(err)
				}
				if dev.Ordinal != i {
					t.Errorf("Ordinal = %d, want %d", dev.Ordinal, i)
				}
				if got := dev.Arch(); got != tt.arch {
					t.Errorf("Arch() = %q, want %q", got, tt.arch)
				}
				if string(dev.UUID[:4]) != "FAKE" || dev.UUID[15] != byte(i) {
					t.Errorf("UUID = %x", dev.UUID)
				}
				if dev.PCIBus != 0x18+i {
					t.Errorf("PCIBus = %#x, want %#x", dev.PCIBus, 0x18+i)
				}
				checkDevice(t, dev, &tt.want)
			}
			if _, err := d.Device(n); !errors.Is(err, cuda.ErrorInvalidDevice) ||
				!strings.Contains(err.Error(), "cuDeviceGet(") || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_DEVICE") {
				t.Errorf("Device(%d) = %v, want cuDeviceGet(%d): CUDA_ERROR_INVALID_DEVICE", n, err, n)
			}
		})
	}
}

// checkDevice compares the fields of want that are set.
func checkDevice(t *testing.T, got, want *cuda.Device) {
	t.Helper()
	ints := []struct {
		name      string
		got, want int
	}{
		{"Major", got.Major, want.Major}, {"Minor", got.Minor, want.Minor}, {"SMs", got.SMs, want.SMs},
		{"MaxThreadsPerBlock", got.MaxThreadsPerBlock, want.MaxThreadsPerBlock},
		{"MaxSharedPerBlock", got.MaxSharedPerBlock, want.MaxSharedPerBlock},
		{"MaxSharedPerBlockOptin", got.MaxSharedPerBlockOptin, want.MaxSharedPerBlockOptin},
		{"MaxSharedPerSM", got.MaxSharedPerSM, want.MaxSharedPerSM},
		{"MaxThreadsPerSM", got.MaxThreadsPerSM, want.MaxThreadsPerSM},
		{"MaxBlocksPerSM", got.MaxBlocksPerSM, want.MaxBlocksPerSM},
		{"WarpSize", got.WarpSize, want.WarpSize}, {"L2Bytes", got.L2Bytes, want.L2Bytes},
		{"ClockKHz", got.ClockKHz, want.ClockKHz}, {"MemClockKHz", got.MemClockKHz, want.MemClockKHz},
		{"MemBusWidth", got.MemBusWidth, want.MemBusWidth},
		{"MaxBlockDim.X", got.MaxBlockDim[0], want.MaxBlockDim[0]}, {"MaxBlockDim.Z", got.MaxBlockDim[2], want.MaxBlockDim[2]},
		{"MaxGridDim.X", got.MaxGridDim[0], want.MaxGridDim[0]}, {"MaxGridDim.Y", got.MaxGridDim[1], want.MaxGridDim[1]},
	}
	for _, c := range ints {
		if c.want != 0 && c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if got.Name != want.Name {
		t.Errorf("Name = %q, want %q", got.Name, want.Name)
	}
	if got.TotalMem != want.TotalMem {
		t.Errorf("TotalMem = %d, want %d", got.TotalMem, want.TotalMem)
	}
	if want.ECC && !got.ECC || want.CooperativeLaunch && !got.CooperativeLaunch {
		t.Errorf("ECC, CooperativeLaunch = %v, %v", got.ECC, got.CooperativeLaunch)
	}
}

// TestLoad checks the cached, searching Load, pointed at the fake through
// ZEROENG_CUDA_LIBS. It is the only test that calls Load: the first call
// decides for the whole process.
func TestLoad(t *testing.T) {
	path := fake.CUDA(t)
	t.Setenv(libs.EnvVar, filepath.Dir(path))
	d1, err := cuda.Load()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := cuda.Load()
	if err != nil || d2 != d1 {
		t.Fatalf("second Load() = %p, %v; want %p", d2, err, d1)
	}
	if d1.Lib.Source != libs.FromEnv || d1.Lib.Path != path {
		t.Errorf("Load found %s from %s, want %s from %s", d1.Lib.Path, d1.Lib.Source, path, libs.FromEnv)
	}
}

func TestLoadErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nowhere", "libcuda.so.1")
	notLib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(notLib, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{missing, notLib} {
		_, err := cuda.LoadFrom(path)
		var nf *libs.NotFoundError
		if !errors.As(err, &nf) || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadFrom(%s) = %v, want a *libs.NotFoundError naming the path", path, err)
		}
	}

	t.Run("stub", func(t *testing.T) {
		fc := fake.OpenCUDA(t)
		t.Setenv("FAKECUDA_STUB", "1")
		_, err := cuda.LoadFrom(fc.Path())
		var e *cuda.Error
		if !errors.As(err, &e) || e.Code != cuda.ErrorStubLibrary || e.Call != "cuInit" {
			t.Fatalf("LoadFrom(stub) = %v, want a cuInit *Error with CUDA_ERROR_STUB_LIBRARY", err)
		}
		for _, want := range []string{"cuInit: CUDA_ERROR_STUB_LIBRARY", "toolkit's stub", "not the NVIDIA driver", fc.Path()} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	})
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		err  *cuda.Error
		want string
	}{
		{&cuda.Error{Call: "cuMemAlloc_v2", Code: cuda.ErrorOutOfMemory}, "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory"},
		{&cuda.Error{Call: "cuModuleLoadDataEx", Code: cuda.ErrorInvalidPTX, Detail: "ptxas: line 3"},
			"cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: a PTX JIT compilation failed: ptxas: line 3"},
		{&cuda.Error{Call: "cuFoo", Code: 4242}, "cuFoo: CUresult(4242)"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	if !errors.Is(&cuda.Error{Code: cuda.ErrorNotReady}, cuda.ErrorNotReady) || errors.Is(&cuda.Error{Code: 1}, cuda.ErrorNotReady) {
		t.Error("errors.Is does not compare codes")
	}
}

// TestErrorNaming injects failures into the fake: the message comes from
// the driver's cuGetErrorName/String where it knows the code (the fake
// knows a few), from the package's table otherwise.
func TestErrorNaming(t *testing.T) {
	fc, c := setup(t)
	tests := []struct {
		call string
		code int
		want string
	}{
		{"cuMemAlloc_v2", 2, "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory: 1024 bytes"},
		{"cuMemAlloc_v2", 702, "cuMemAlloc_v2: CUDA_ERROR_LAUNCH_TIMEOUT: the launch timed out and was terminated: 1024 bytes"},
		{"cuMemAlloc_v2", 12345, "cuMemAlloc_v2: CUresult(12345): 1024 bytes"},
		{"cuCtxSetCurrent", 201, "cuCtxSetCurrent: CUDA_ERROR_INVALID_CONTEXT: invalid device context: making the context of device 0 current for cuMemAlloc_v2"},
	}
	for _, tt := range tests {
		fc.Fail(t, tt.call, tt.code)
		p, err := c.MemAlloc(1024)
		if err == nil {
			c.MemFree(p)
			t.Fatalf("%s failing with %d: MemAlloc succeeded", tt.call, tt.code)
		}
		if err.Error() != tt.want {
			t.Errorf("%s failing with %d:\n got %q\nwant %q", tt.call, tt.code, err, tt.want)
		}
		var e *cuda.Error
		if !errors.As(err, &e) || e.Code != cuda.Result(tt.code) || e.Call != tt.call {
			t.Errorf("errors.As(%v) = %+v", err, e)
		}
		if !errors.Is(err, cuda.Result(tt.code)) {
			t.Errorf("errors.Is(%v, %d) = false", err, tt.code)
		}
	}
}
