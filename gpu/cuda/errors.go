package cuda

import (
	"strconv"
	"unsafe"

	"github.com/zeroeng/zeroeng/gpu/libs"
)

// Result is a CUresult, the status every driver function returns.
//
// Result implements error so that errors.Is(err, cuda.ErrorOutOfMemory)
// finds the code in an *Error.
type Result int32

// The CUresult values (cuda.h, enum cudaError_enum, CUDA 12.x).
const (
	Success                           Result = 0   // CUDA_SUCCESS
	ErrorInvalidValue                 Result = 1   // CUDA_ERROR_INVALID_VALUE
	ErrorOutOfMemory                  Result = 2   // CUDA_ERROR_OUT_OF_MEMORY
	ErrorNotInitialized               Result = 3   // CUDA_ERROR_NOT_INITIALIZED
	ErrorDeinitialized                Result = 4   // CUDA_ERROR_DEINITIALIZED
	ErrorProfilerDisabled             Result = 5   // CUDA_ERROR_PROFILER_DISABLED
	ErrorStubLibrary                  Result = 34  // CUDA_ERROR_STUB_LIBRARY
	ErrorDeviceUnavailable            Result = 46  // CUDA_ERROR_DEVICE_UNAVAILABLE
	ErrorNoDevice                     Result = 100 // CUDA_ERROR_NO_DEVICE
	ErrorInvalidDevice                Result = 101 // CUDA_ERROR_INVALID_DEVICE
	ErrorDeviceNotLicensed            Result = 102 // CUDA_ERROR_DEVICE_NOT_LICENSED
	ErrorInvalidImage                 Result = 200 // CUDA_ERROR_INVALID_IMAGE
	ErrorInvalidContext               Result = 201 // CUDA_ERROR_INVALID_CONTEXT
	ErrorContextAlreadyCurrent        Result = 202 // CUDA_ERROR_CONTEXT_ALREADY_CURRENT
	ErrorMapFailed                    Result = 205 // CUDA_ERROR_MAP_FAILED
	ErrorUnmapFailed                  Result = 206 // CUDA_ERROR_UNMAP_FAILED
	ErrorArrayIsMapped                Result = 207 // CUDA_ERROR_ARRAY_IS_MAPPED
	ErrorAlreadyMapped                Result = 208 // CUDA_ERROR_ALREADY_MAPPED
	ErrorNoBinaryForGPU               Result = 209 // CUDA_ERROR_NO_BINARY_FOR_GPU
	ErrorAlreadyAcquired              Result = 210 // CUDA_ERROR_ALREADY_ACQUIRED
	ErrorNotMapped                    Result = 211 // CUDA_ERROR_NOT_MAPPED
	ErrorNotMappedAsArray             Result = 212 // CUDA_ERROR_NOT_MAPPED_AS_ARRAY
	ErrorNotMappedAsPointer           Result = 213 // CUDA_ERROR_NOT_MAPPED_AS_POINTER
	ErrorECCUncorrectable             Result = 214 // CUDA_ERROR_ECC_UNCORRECTABLE
	ErrorUnsupportedLimit             Result = 215 // CUDA_ERROR_UNSUPPORTED_LIMIT
	ErrorContextAlreadyInUse          Result = 216 // CUDA_ERROR_CONTEXT_ALREADY_IN_USE
	ErrorPeerAccessUnsupported        Result = 217 // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
	ErrorInvalidPTX                   Result = 218 // CUDA_ERROR_INVALID_PTX
	ErrorInvalidGraphicsContext       Result = 219 // CUDA_ERROR_INVALID_GRAPHICS_CONTEXT
	ErrorNVLinkUncorrectable          Result = 220 // CUDA_ERROR_NVLINK_UNCORRECTABLE
	ErrorJITCompilerNotFound          Result = 221 // CUDA_ERROR_JIT_COMPILER_NOT_FOUND
	ErrorUnsupportedPTXVersion        Result = 222 // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
	ErrorJITCompilationDisabled       Result = 223 // CUDA_ERROR_JIT_COMPILATION_DISABLED
	ErrorUnsupportedExecAffinity      Result = 224 // CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY
	ErrorUnsupportedDevsideSync       Result = 225 // CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC
	ErrorInvalidSource                Result = 300 // CUDA_ERROR_INVALID_SOURCE
	ErrorFileNotFound                 Result = 301 // CUDA_ERROR_FILE_NOT_FOUND
	ErrorSharedObjectSymbolNotFound   Result = 302 // CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND
	ErrorSharedObjectInitFailed       Result = 303 // CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
	ErrorOperatingSystem              Result = 304 // CUDA_ERROR_OPERATING_SYSTEM
	ErrorInvalidHandle                Result = 400 // CUDA_ERROR_INVALID_HANDLE
	ErrorIllegalState                 Result = 401 // CUDA_ERROR_ILLEGAL_STATE
	ErrorLossyQuery                   Result = 402 // CUDA_ERROR_LOSSY_QUERY
	ErrorNotFound                     Result = 500 // CUDA_ERROR_NOT_FOUND
	ErrorNotReady                     Result = 600 // CUDA_ERROR_NOT_READY
	ErrorIllegalAddress               Result = 700 // CUDA_ERROR_ILLEGAL_ADDRESS
	ErrorLaunchOutOfResources         Result = 701 // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
	ErrorLaunchTimeout                Result = 702 // CUDA_ERROR_LAUNCH_TIMEOUT
	ErrorLaunchIncompatibleTexturing  Result = 703 // CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING
	ErrorPeerAccessAlreadyEnabled     Result = 704 // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
	ErrorPeerAccessNotEnabled         Result = 705 // CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
	ErrorPrimaryContextActive         Result = 708 // CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
	ErrorContextIsDestroyed           Result = 709 // CUDA_ERROR_CONTEXT_IS_DESTROYED
	ErrorAssert                       Result = 710 // CUDA_ERROR_ASSERT
	ErrorTooManyPeers                 Result = 711 // CUDA_ERROR_TOO_MANY_PEERS
	ErrorHostMemoryAlreadyRegistered  Result = 712 // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
	ErrorHostMemoryNotRegistered      Result = 713 // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
	ErrorHardwareStackError           Result = 714 // CUDA_ERROR_HARDWARE_STACK_ERROR
	ErrorIllegalInstruction           Result = 715 // CUDA_ERROR_ILLEGAL_INSTRUCTION
	ErrorMisalignedAddress            Result = 716 // CUDA_ERROR_MISALIGNED_ADDRESS
	ErrorInvalidAddressSpace          Result = 717 // CUDA_ERROR_INVALID_ADDRESS_SPACE
	ErrorInvalidPC                    Result = 718 // CUDA_ERROR_INVALID_PC
	ErrorLaunchFailed                 Result = 719 // CUDA_ERROR_LAUNCH_FAILED
	ErrorCooperativeLaunchTooLarge    Result = 720 // CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
	ErrorNotPermitted                 Result = 800 // CUDA_ERROR_NOT_PERMITTED
	ErrorNotSupported                 Result = 801 // CUDA_ERROR_NOT_SUPPORTED
	ErrorSystemNotReady               Result = 802 // CUDA_ERROR_SYSTEM_NOT_READY
	ErrorSystemDriverMismatch         Result = 803 // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
	ErrorCompatNotSupportedOnDevice   Result = 804 // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
	ErrorMPSConnectionFailed          Result = 805 // CUDA_ERROR_MPS_CONNECTION_FAILED
	ErrorMPSRPCFailure                Result = 806 // CUDA_ERROR_MPS_RPC_FAILURE
	ErrorMPSServerNotReady            Result = 807 // CUDA_ERROR_MPS_SERVER_NOT_READY
	ErrorMPSMaxClientsReached         Result = 808 // CUDA_ERROR_MPS_MAX_CLIENTS_REACHED
	ErrorMPSMaxConnectionsReached     Result = 809 // CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED
	ErrorMPSClientTerminated          Result = 810 // CUDA_ERROR_MPS_CLIENT_TERMINATED
	ErrorCDPNotSupported              Result = 811 // CUDA_ERROR_CDP_NOT_SUPPORTED
	ErrorCDPVersionMismatch           Result = 812 // CUDA_ERROR_CDP_VERSION_MISMATCH
	ErrorStreamCaptureUnsupported     Result = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	ErrorStreamCaptureInvalidated     Result = 901 // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	ErrorStreamCaptureMerge           Result = 902 // CUDA_ERROR_STREAM_CAPTURE_MERGE
	ErrorStreamCaptureUnmatched       Result = 903 // CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
	ErrorStreamCaptureUnjoined        Result = 904 // CUDA_ERROR_STREAM_CAPTURE_UNJOINED
	ErrorStreamCaptureIsolation       Result = 905 // CUDA_ERROR_STREAM_CAPTURE_ISOLATION
	ErrorStreamCaptureImplicit        Result = 906 // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
	ErrorCapturedEvent                Result = 907 // CUDA_ERROR_CAPTURED_EVENT
	ErrorStreamCaptureWrongThread     Result = 908 // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
	ErrorTimeout                      Result = 909 // CUDA_ERROR_TIMEOUT
	ErrorGraphExecUpdateFailure       Result = 910 // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
	ErrorExternalDevice               Result = 911 // CUDA_ERROR_EXTERNAL_DEVICE
	ErrorInvalidClusterSize           Result = 912 // CUDA_ERROR_INVALID_CLUSTER_SIZE
	ErrorFunctionNotLoaded            Result = 913 // CUDA_ERROR_FUNCTION_NOT_LOADED
	ErrorInvalidResourceType          Result = 914 // CUDA_ERROR_INVALID_RESOURCE_TYPE
	ErrorInvalidResourceConfiguration Result = 915 // CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION
	ErrorUnknown                      Result = 999 // CUDA_ERROR_UNKNOWN
)

// resultText is the built-in table of names and descriptions, used when
// the loaded driver does not know a code (an older driver) or for an Error
// made without a driver. The descriptions are cuGetErrorString's.
var resultText = map[Result][2]string{
	Success:                           {"CUDA_SUCCESS", "no error"},
	ErrorInvalidValue:                 {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	ErrorOutOfMemory:                  {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	ErrorNotInitialized:               {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	ErrorDeinitialized:                {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	ErrorProfilerDisabled:             {"CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
	ErrorStubLibrary:                  {"CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	ErrorDeviceUnavailable:            {"CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	ErrorNoDevice:                     {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	ErrorInvalidDevice:                {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	ErrorDeviceNotLicensed:            {"CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
	ErrorInvalidImage:                 {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	ErrorInvalidContext:               {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	ErrorContextAlreadyCurrent:        {"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
	ErrorMapFailed:                    {"CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
	ErrorUnmapFailed:                  {"CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
	ErrorArrayIsMapped:                {"CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
	ErrorAlreadyMapped:                {"CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
	ErrorNoBinaryForGPU:               {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	ErrorAlreadyAcquired:              {"CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
	ErrorNotMapped:                    {"CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
	ErrorNotMappedAsArray:             {"CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "resource not mapped as array"},
	ErrorNotMappedAsPointer:           {"CUDA_ERROR_NOT_MAPPED_AS_POINTER", "resource not mapped as pointer"},
	ErrorECCUncorrectable:             {"CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	ErrorUnsupportedLimit:             {"CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
	ErrorContextAlreadyInUse:          {"CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread"},
	ErrorPeerAccessUnsupported:        {"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
	ErrorInvalidPTX:                   {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	ErrorInvalidGraphicsContext:       {"CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid OpenGL or DirectX context"},
	ErrorNVLinkUncorrectable:          {"CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution"},
	ErrorJITCompilerNotFound:          {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
	ErrorUnsupportedPTXVersion:        {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain"},
	ErrorJITCompilationDisabled:       {"CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
	ErrorUnsupportedExecAffinity:      {"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported"},
	ErrorUnsupportedDevsideSync:       {"CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "the provided PTX contains unsupported call to cudaDeviceSynchronize"},
	ErrorInvalidSource:                {"CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
	ErrorFileNotFound:                 {"CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	ErrorSharedObjectSymbolNotFound:   {"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
	ErrorSharedObjectInitFailed:       {"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
	ErrorOperatingSystem:              {"CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	ErrorInvalidHandle:                {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	ErrorIllegalState:                 {"CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	ErrorLossyQuery:                   {"CUDA_ERROR_LOSSY_QUERY", "attempted introspection would be semantically lossy"},
	ErrorNotFound:                     {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	ErrorNotReady:                     {"CUDA_ERROR_NOT_READY", "device not ready"},
	ErrorIllegalAddress:               {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	ErrorLaunchOutOfResources:         {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	ErrorLaunchTimeout:                {"CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	ErrorLaunchIncompatibleTexturing:  {"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode"},
	ErrorPeerAccessAlreadyEnabled:     {"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
	ErrorPeerAccessNotEnabled:         {"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
	ErrorPrimaryContextActive:         {"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process"},
	ErrorContextIsDestroyed:           {"CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	ErrorAssert:                       {"CUDA_ERROR_ASSERT", "device-side assert triggered"},
	ErrorTooManyPeers:                 {"CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"},
	ErrorHostMemoryAlreadyRegistered:  {"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
	ErrorHostMemoryNotRegistered:      {"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
	ErrorHardwareStackError:           {"CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	ErrorIllegalInstruction:           {"CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	ErrorMisalignedAddress:            {"CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	ErrorInvalidAddressSpace:          {"CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
	ErrorInvalidPC:                    {"CUDA_ERROR_INVALID_PC", "invalid program counter"},
	ErrorLaunchFailed:                 {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	ErrorCooperativeLaunchTooLarge:    {"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
	ErrorNotPermitted:                 {"CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	ErrorNotSupported:                 {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	ErrorSystemNotReady:               {"CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	ErrorSystemDriverMismatch:         {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	ErrorCompatNotSupportedOnDevice:   {"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
	ErrorMPSConnectionFailed:          {"CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS client failed to connect to the MPS control daemon or the MPS server"},
	ErrorMPSRPCFailure:                {"CUDA_ERROR_MPS_RPC_FAILURE", "the remote procedural call between the MPS server and the MPS client failed"},
	ErrorMPSServerNotReady:            {"CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server is not ready to accept new MPS client requests"},
	ErrorMPSMaxClientsReached:         {"CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "the hardware resources required to create MPS client have been exhausted"},
	ErrorMPSMaxConnectionsReached:     {"CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "the hardware resources required to support device connections have been exhausted"},
	ErrorMPSClientTerminated:          {"CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client has been terminated by the server"},
	ErrorCDPNotSupported:              {"CUDA_ERROR_CDP_NOT_SUPPORTED", "the module is using CUDA Dynamic Parallelism, but the current configuration does not support it"},
	ErrorCDPVersionMismatch:           {"CUDA_ERROR_CDP_VERSION_MISMATCH", "CUDA Dynamic Parallelism is not supported for this version combination"},
	ErrorStreamCaptureUnsupported:     {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	ErrorStreamCaptureInvalidated:     {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
	ErrorStreamCaptureMerge:           {"CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
	ErrorStreamCaptureUnmatched:       {"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
	ErrorStreamCaptureUnjoined:        {"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
	ErrorStreamCaptureIsolation:       {"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"},
	ErrorStreamCaptureImplicit:        {"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
	ErrorCapturedEvent:                {"CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
	ErrorStreamCaptureWrongThread:     {"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
	ErrorTimeout:                      {"CUDA_ERROR_TIMEOUT", "wait operation timed out"},
	ErrorGraphExecUpdateFailure:       {"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
	ErrorExternalDevice:               {"CUDA_ERROR_EXTERNAL_DEVICE", "an async error has occurred in an external entity outside of CUDA"},
	ErrorInvalidClusterSize:           {"CUDA_ERROR_INVALID_CLUSTER_SIZE", "a kernel launch error has occurred due to cluster misconfiguration"},
	ErrorFunctionNotLoaded:            {"CUDA_ERROR_FUNCTION_NOT_LOADED", "the function handle is not loaded when calling an API that requires a loaded function"},
	ErrorInvalidResourceType:          {"CUDA_ERROR_INVALID_RESOURCE_TYPE", "one or more resources passed in are not valid resource types for the operation"},
	ErrorInvalidResourceConfiguration: {"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "one or more resources are insufficient or non-applicable for the operation"},
	ErrorUnknown:                      {"CUDA_ERROR_UNKNOWN", "unknown error"},
}

// String returns the code's name in cuda.h, "CUDA_ERROR_OUT_OF_MEMORY", or
// "CUresult(n)" for a code this package does not know.
func (r Result) String() string {
	if t, ok := resultText[r]; ok {
		return t[0]
	}
	return "CUresult(" + strconv.Itoa(int(r)) + ")"
}

// Error returns the code's name.
func (r Result) Error() string { return r.String() }

// stubText replaces the driver's description of CUDA_ERROR_STUB_LIBRARY,
// which does not say what to do.
const stubText = "the library loaded is the CUDA toolkit's stub libcuda (a stand-in for linking), " +
	"not the NVIDIA driver's: install the NVIDIA driver, or take the toolkit's stubs folder " +
	"out of LD_LIBRARY_PATH and " + libs.EnvVar

// Error is a driver call that did not return CUDA_SUCCESS.
//
// Its message names the call, the code and its description, and then the
// detail when there is one:
//
//	cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory
//	cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: a PTX JIT compilation failed: ptxas fatal ...
type Error struct {
	Call   string // the driver function, with what identifies its subject: "cuModuleGetFunction(matmul)"
	Code   Result
	Detail string // more from the driver, such as the JIT compiler's log

	// name and desc are the loaded driver's cuGetErrorName and
	// cuGetErrorString, when it knows the code.
	name, desc string
}

func (e *Error) Error() string {
	name, desc := e.name, e.desc
	if name == "" {
		name = e.Code.String()
	}
	if desc == "" {
		desc = resultText[e.Code][1]
	}
	if e.Code == ErrorStubLibrary {
		desc = stubText
	}
	s := e.Call + ": " + name
	if desc != "" {
		s += ": " + desc
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is the error's Result, so that
// errors.Is(err, cuda.ErrorNotReady) works.
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && r == e.Code
}

// error returns nil for CUDA_SUCCESS and otherwise an *Error naming call,
// with the driver's own name and description of the code.
func (d *Driver) error(call string, r Result) error {
	if r == Success {
		return nil
	}
	return d.newError(call, r, "")
}

func (d *Driver) newError(call string, r Result, detail string) *Error {
	e := &Error{Call: call, Code: r, Detail: detail}
	if d != nil {
		e.name = d.errorText(d.fn.cuGetErrorName, r)
		e.desc = d.errorText(d.fn.cuGetErrorString, r)
	}
	return e
}

// errorText calls cuGetErrorName or cuGetErrorString, which work before
// cuInit and return a static string.
func (d *Driver) errorText(fn uintptr, r Result) string {
	if fn == 0 {
		return ""
	}
	var p *byte
	if ccall(fn, uintptr(r), uintptr(unsafe.Pointer(&p))) != Success || p == nil {
		return ""
	}
	return cString(p, 1024)
}

// cString copies a NUL-terminated C string of at most max bytes.
func cString(p *byte, max int) string {
	if p == nil {
		return ""
	}
	n := 0
	for n < max && *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
