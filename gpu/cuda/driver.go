package cuda

import (
	"unsafe"

	"github.com/zeroeng/zeroeng/gpu/libs"
)

// Spec is the CUDA driver library.
var Spec = libs.Spec{Name: "CUDA driver", Sonames: []string{"libcuda.so.1", "libcuda.so"}, Symbol: "cuInit"}

// Driver is the loaded and initialized CUDA driver. Its methods are safe
// for concurrent use.
type Driver struct {
	Lib     *libs.Library
	Version int // cuDriverGetVersion: 1000*major + 10*minor, 12040 for 12.4

	fn functions
}

// functions are the addresses of the bound driver functions. The names are
// those the library exports: the cuda.h macros map cuMemAlloc to
// cuMemAlloc_v2 and so on, and a binding without the header must name the
// versioned symbols itself. The legacy-default-stream variants are used,
// not the _ptds/_ptsz ones.
type functions struct {
	cuInit             uintptr // CUresult cuInit(unsigned int Flags)
	cuDriverGetVersion uintptr // CUresult cuDriverGetVersion(int *driverVersion)
	cuGetErrorName     uintptr // CUresult cuGetErrorName(CUresult error, const char **pStr)
	cuGetErrorString   uintptr // CUresult cuGetErrorString(CUresult error, const char **pStr)

	cuDeviceGetCount     uintptr // CUresult cuDeviceGetCount(int *count)
	cuDeviceGet          uintptr // CUresult cuDeviceGet(CUdevice *device, int ordinal)
	cuDeviceGetName      uintptr // CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
	cuDeviceGetAttribute uintptr // CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
	cuDeviceTotalMem     uintptr // CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
	cuDeviceGetUuid      uintptr // CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev), or cuDeviceGetUuid; optional

	cuDevicePrimaryCtxRetain  uintptr // CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
	cuDevicePrimaryCtxRelease uintptr // CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
	cuCtxSetCurrent           uintptr // CUresult cuCtxSetCurrent(CUcontext ctx)
	cuCtxSynchronize          uintptr // CUresult cuCtxSynchronize(void)

	cuMemAlloc     uintptr // CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
	cuMemFree      uintptr // CUresult cuMemFree_v2(CUdeviceptr dptr)
	cuMemGetInfo   uintptr // CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
	cuMemAllocHost uintptr // CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
	cuMemFreeHost  uintptr // CUresult cuMemFreeHost(void *p)

	cuMemcpyHtoDAsync uintptr // CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
	cuMemcpyDtoHAsync uintptr // CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
	cuMemcpyDtoDAsync uintptr // CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
	cuMemsetD8Async   uintptr // CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
	cuMemsetD32Async  uintptr // CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)

	cuStreamCreate      uintptr // CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
	cuStreamDestroy     uintptr // CUresult cuStreamDestroy_v2(CUstream hStream)
	cuStreamSynchronize uintptr // CUresult cuStreamSynchronize(CUstream hStream)
	cuStreamQuery       uintptr // CUresult cuStreamQuery(CUstream hStream)
	cuStreamWaitEvent   uintptr // CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)

	cuEventCreate      uintptr // CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
	cuEventDestroy     uintptr // CUresult cuEventDestroy_v2(CUevent hEvent)
	cuEventRecord      uintptr // CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
	cuEventSynchronize uintptr // CUresult cuEventSynchronize(CUevent hEvent)
	cuEventQuery       uintptr // CUresult cuEventQuery(CUevent hEvent)
	cuEventElapsedTime uintptr // CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)

	cuModuleLoadDataEx  uintptr // CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues)
	cuModuleUnload      uintptr // CUresult cuModuleUnload(CUmodule hmod)
	cuModuleGetFunction uintptr // CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
	cuFuncSetAttribute  uintptr // CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
	// CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, gridDimY, gridDimZ,
	//     unsigned int blockDimX, blockDimY, blockDimZ, unsigned int sharedMemBytes,
	//     CUstream hStream, void **kernelParams, void **extra)
	cuLaunchKernel uintptr
}

// bind resolves the driver's functions; the error names every missing one.
func (f *functions) bind(s *libs.Symbols) error {
	s.Need(&f.cuInit, "cuInit")
	s.Need(&f.cuDriverGetVersion, "cuDriverGetVersion")
	s.Need(&f.cuGetErrorName, "cuGetErrorName")
	s.Need(&f.cuGetErrorString, "cuGetErrorString")
	s.Need(&f.cuDeviceGetCount, "cuDeviceGetCount")
	s.Need(&f.cuDeviceGet, "cuDeviceGet")
	s.Need(&f.cuDeviceGetName, "cuDeviceGetName")
	s.Need(&f.cuDeviceGetAttribute, "cuDeviceGetAttribute")
	s.Need(&f.cuDeviceTotalMem, "cuDeviceTotalMem_v2")
	f.cuDeviceGetUuid = s.Optional("cuDeviceGetUuid_v2", "cuDeviceGetUuid")
	s.Need(&f.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	s.Need(&f.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	s.Need(&f.cuCtxSetCurrent, "cuCtxSetCurrent")
	s.Need(&f.cuCtxSynchronize, "cuCtxSynchronize")
	s.Need(&f.cuMemAlloc, "cuMemAlloc_v2")
	s.Need(&f.cuMemFree, "cuMemFree_v2")
	s.Need(&f.cuMemGetInfo, "cuMemGetInfo_v2")
	s.Need(&f.cuMemAllocHost, "cuMemAllocHost_v2")
	s.Need(&f.cuMemFreeHost, "cuMemFreeHost")
	s.Need(&f.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	s.Need(&f.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	s.Need(&f.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
	s.Need(&f.cuMemsetD8Async, "cuMemsetD8Async")
	s.Need(&f.cuMemsetD32Async, "cuMemsetD32Async")
	s.Need(&f.cuStreamCreate, "cuStreamCreate")
	s.Need(&f.cuStreamDestroy, "cuStreamDestroy_v2")
	s.Need(&f.cuStreamSynchronize, "cuStreamSynchronize")
	s.Need(&f.cuStreamQuery, "cuStreamQuery")
	s.Need(&f.cuStreamWaitEvent, "cuStreamWaitEvent")
	s.Need(&f.cuEventCreate, "cuEventCreate")
	s.Need(&f.cuEventDestroy, "cuEventDestroy_v2")
	s.Need(&f.cuEventRecord, "cuEventRecord")
	s.Need(&f.cuEventSynchronize, "cuEventSynchronize")
	s.Need(&f.cuEventQuery, "cuEventQuery")
	s.Need(&f.cuEventElapsedTime, "cuEventElapsedTime")
	s.Need(&f.cuModuleLoadDataEx, "cuModuleLoadDataEx")
	s.Need(&f.cuModuleUnload, "cuModuleUnload")
	s.Need(&f.cuModuleGetFunction, "cuModuleGetFunction")
	s.Need(&f.cuFuncSetAttribute, "cuFuncSetAttribute")
	s.Need(&f.cuLaunchKernel, "cuLaunchKernel")
	return s.Err()
}

// Load finds the driver library (see package libs for where), binds it and
// initializes it with cuInit, once per process: later calls return the
// same Driver, or the same error.
func Load() (*Driver, error) { return load() }

// LoadFrom loads the driver library at path, binds it and initializes it,
// without caching: tests load a fake driver this way. (The dynamic loader
// still opens a path only once per process.)
func LoadFrom(path string) (*Driver, error) { return loadFrom(path) }

var load, loadFrom = libs.Loaders(Spec, open)

func open(lib *libs.Library) (*Driver, error) {
	d := &Driver{Lib: lib}
	if err := d.fn.bind(lib.Symbols()); err != nil {
		return nil, err
	}
	if r := ccall(d.fn.cuInit, 0); r != Success {
		return nil, d.newError("cuInit", r, "driver "+lib.Path)
	}
	var v int32
	if err := d.error("cuDriverGetVersion", ccall(d.fn.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return nil, err
	}
	d.Version = int(v)
	return d, nil
}

// DeviceCount returns the number of CUDA devices (those that
// CUDA_VISIBLE_DEVICES lets the process see).
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if err := d.error("cuDeviceGetCount", ccall(d.fn.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return 0, err
	}
	return int(n), nil
}
