package cuda

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"
)

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// The CUdevice_attribute values Device reads (cuda.h, enum
// CUdevice_attribute_enum); Device.Attribute takes any.
const (
	AttrMaxThreadsPerBlock           DeviceAttribute = 1   // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	AttrMaxBlockDimX                 DeviceAttribute = 2   // CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X
	AttrMaxBlockDimY                 DeviceAttribute = 3   // CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y
	AttrMaxBlockDimZ                 DeviceAttribute = 4   // CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z
	AttrMaxGridDimX                  DeviceAttribute = 5   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X
	AttrMaxGridDimY                  DeviceAttribute = 6   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y
	AttrMaxGridDimZ                  DeviceAttribute = 7   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z
	AttrMaxSharedMemoryPerBlock      DeviceAttribute = 8   // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
	AttrWarpSize                     DeviceAttribute = 10  // CU_DEVICE_ATTRIBUTE_WARP_SIZE
	AttrMaxRegistersPerBlock         DeviceAttribute = 12  // CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK
	AttrClockRate                    DeviceAttribute = 13  // CU_DEVICE_ATTRIBUTE_CLOCK_RATE, kHz
	AttrMultiprocessorCount          DeviceAttribute = 16  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	AttrIntegrated                   DeviceAttribute = 18  // CU_DEVICE_ATTRIBUTE_INTEGRATED
	AttrECCEnabled                   DeviceAttribute = 32  // CU_DEVICE_ATTRIBUTE_ECC_ENABLED
	AttrPCIBusID                     DeviceAttribute = 33  // CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
	AttrPCIDeviceID                  DeviceAttribute = 34  // CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
	AttrMemoryClockRate              DeviceAttribute = 36  // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, kHz
	AttrGlobalMemoryBusWidth         DeviceAttribute = 37  // CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, bits
	AttrL2CacheSize                  DeviceAttribute = 38  // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, bytes
	AttrMaxThreadsPerSM              DeviceAttribute = 39  // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
	AttrAsyncEngineCount             DeviceAttribute = 40  // CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT
	AttrPCIDomainID                  DeviceAttribute = 50  // CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
	AttrComputeCapabilityMajor       DeviceAttribute = 75  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	AttrComputeCapabilityMinor       DeviceAttribute = 76  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	AttrMaxSharedMemoryPerSM         DeviceAttribute = 81  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
	AttrMaxRegistersPerSM            DeviceAttribute = 82  // CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR
	AttrCooperativeLaunch            DeviceAttribute = 95  // CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH
	AttrMaxSharedMemoryPerBlockOptin DeviceAttribute = 97  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	AttrMaxBlocksPerSM               DeviceAttribute = 106 // CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR
)

// Device is a CUDA device and its properties, read once by Driver.Device.
type Device struct {
	Ordinal  int
	Name     string
	UUID     [16]byte // zero when the driver cannot say
	TotalMem uint64   // bytes

	Major, Minor int // compute capability

	SMs                    int
	WarpSize               int
	MaxThreadsPerBlock     int
	MaxBlockDim            [3]int
	MaxGridDim             [3]int
	MaxSharedPerBlock      int // bytes a block gets without opting in
	MaxSharedPerBlockOptin int // bytes a block may have with Function.SetMaxDynamicShared
	MaxSharedPerSM         int
	MaxRegsPerBlock        int
	MaxRegsPerSM           int
	MaxThreadsPerSM        int
	MaxBlocksPerSM         int
	L2Bytes                int
	ClockKHz               int // 0 where the driver no longer reports it
	MemClockKHz            int // 0 where the driver no longer reports it
	MemBusWidth            int // bits
	AsyncEngines           int // copy engines
	ECC                    bool
	Integrated             bool // the GPU is part of the host (a Jetson), sharing its memory
	CooperativeLaunch      bool

	PCIDomain, PCIBus, PCIDevice int

	d *Driver
	h int32 // CUdevice
}

// Device returns the device of the given ordinal, with its properties.
func (d *Driver) Device(ordinal int) (*Device, error) {
	var h int32
	if r := ccall(d.fn.cuDeviceGet, uintptr(unsafe.Pointer(&h)), uintptr(ordinal)); r != Success {
		return nil, d.newError("cuDeviceGet("+strconv.Itoa(ordinal)+")", r, "")
	}
	dev := &Device{Ordinal: ordinal, d: d, h: h}

	var name [256]byte
	if err := d.error("cuDeviceGetName", ccall(d.fn.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(h))); err != nil {
		return nil, err
	}
	dev.Name = cString(&name[0], len(name))

	var total uint64 // size_t
	if err := d.error("cuDeviceTotalMem_v2", ccall(d.fn.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(h))); err != nil {
		return nil, err
	}
	dev.TotalMem = total

	if d.fn.cuDeviceGetUuid != 0 {
		var u [16]byte // CUuuid: struct { char bytes[16]; }
		if ccall(d.fn.cuDeviceGetUuid, uintptr(unsafe.Pointer(&u)), uintptr(h)) == Success {
			dev.UUID = u
		}
	}

	var boolECC, boolIntegrated, boolCoop int
	attrs := []struct {
		a        DeviceAttribute
		v        *int
		optional bool // left 0 when the driver does not know it
	}{
		{AttrComputeCapabilityMajor, &dev.Major, false},
		{AttrComputeCapabilityMinor, &dev.Minor, false},
		{AttrMultiprocessorCount, &dev.SMs, false},
		{AttrWarpSize, &dev.WarpSize, false},
		{AttrMaxThreadsPerBlock, &dev.MaxThreadsPerBlock, false},
		{AttrMaxBlockDimX, &dev.MaxBlockDim[0], false},
		{AttrMaxBlockDimY, &dev.MaxBlockDim[1], false},
		{AttrMaxBlockDimZ, &dev.MaxBlockDim[2], false},
		{AttrMaxGridDimX, &dev.MaxGridDim[0], false},
		{AttrMaxGridDimY, &dev.MaxGridDim[1], false},
		{AttrMaxGridDimZ, &dev.MaxGridDim[2], false},
		{AttrMaxSharedMemoryPerBlock, &dev.MaxSharedPerBlock, false},
		{AttrMaxSharedMemoryPerBlockOptin, &dev.MaxSharedPerBlockOptin, false},
		{AttrMaxSharedMemoryPerSM, &dev.MaxSharedPerSM, false},
		{AttrMaxRegistersPerBlock, &dev.MaxRegsPerBlock, false},
		{AttrMaxRegistersPerSM, &dev.MaxRegsPerSM, false},
		{AttrMaxThreadsPerSM, &dev.MaxThreadsPerSM, false},
		{AttrMaxBlocksPerSM, &dev.MaxBlocksPerSM, true},
		{AttrL2CacheSize, &dev.L2Bytes, false},
		{AttrClockRate, &dev.ClockKHz, true},
		{AttrMemoryClockRate, &dev.MemClockKHz, true},
		{AttrGlobalMemoryBusWidth, &dev.MemBusWidth, true},
		{AttrAsyncEngineCount, &dev.AsyncEngines, true},
		{AttrECCEnabled, &boolECC, true},
		{AttrIntegrated, &boolIntegrated, true},
		{AttrCooperativeLaunch, &boolCoop, true},
		{AttrPCIDomainID, &dev.PCIDomain, true},
		{AttrPCIBusID, &dev.PCIBus, true},
		{AttrPCIDeviceID, &dev.PCIDevice, true},
	}
	for _, at := range attrs {
		v, err := dev.Attribute(at.a)
		if err != nil {
			if at.optional && errors.Is(err, ErrorInvalidValue) {
				continue
			}
			return nil, err
		}
		*at.v = v
	}
	dev.ECC, dev.Integrated, dev.CooperativeLaunch = boolECC != 0, boolIntegrated != 0, boolCoop != 0
	return dev, nil
}

// Attribute returns a device attribute (cuDeviceGetAttribute).
func (dev *Device) Attribute(a DeviceAttribute) (int, error) {
	var v int32
	if r := ccall(dev.d.fn.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(dev.h)); r != Success {
		return 0, dev.d.newError(fmt.Sprintf("cuDeviceGetAttribute(%d, device %d)", a, dev.Ordinal), r, "")
	}
	return int(v), nil
}

// Arch returns the device's architecture as the compilers name it:
// "sm_90" for compute capability 9.0.
func (dev *Device) Arch() string { return fmt.Sprintf("sm_%d%d", dev.Major, dev.Minor) }

// Driver returns the driver the device belongs to.
func (dev *Device) Driver() *Driver { return dev.d }

// RetainPrimaryContext retains the device's primary context, the one the
// CUDA runtime, cuBLAS and NCCL share: Context.Release releases it.
func (dev *Device) RetainPrimaryContext() (*Context, error) {
	var h uintptr // CUcontext
	if r := ccall(dev.d.fn.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&h)), uintptr(dev.h)); r != Success {
		return nil, dev.d.newError(fmt.Sprintf("cuDevicePrimaryCtxRetain(device %d)", dev.Ordinal), r, "")
	}
	return &Context{d: dev.d, dev: dev, h: h, self: [1]uintptr{h}}, nil
}
