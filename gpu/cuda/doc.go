// Package cuda binds the CUDA driver API (libcuda.so.1) at run time, with
// purego: the zeroeng binary is built without cgo and without the CUDA
// toolkit, and calls the driver it finds on the machine it runs on.
//
// The package owns the binding only: loading and initializing the driver,
// devices and their properties, primary contexts, device and page-locked
// memory, streams, events, modules and kernel launches, each a thin,
// checked wrapper of the driver function it names. It holds no policy:
// which device to use, memory pools, when to synchronize, how kernels are
// compiled and cached are the gpu package's.
//
// # Contexts and threads
//
// The driver keeps a current context per OS thread, and most calls act in
// it. Goroutines move between threads at any time, so no goroutine can
// count on what is current on "its" thread. Every method of Context,
// Stream, Event, Module and Function therefore locks its goroutine to the
// OS thread, makes its context current there (cuCtxSetCurrent), makes its
// call, and unlocks: one more C call, a thread-local store in the driver.
// Context.Do does the same around a function, for libraries that use the
// current context (cuBLAS, NCCL).
//
// # Errors
//
// Every call's CUresult is checked. A failure is an *Error naming the
// driver function as the library exports it (cuMemAlloc_v2, not
// cuMemAlloc), with its subject where that helps (the kernel's name and
// launch shape, a module's JIT log), the code's name and the driver's own
// description (cuGetErrorName, cuGetErrorString; a built-in table for
// codes the driver does not know):
//
//	cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory: 1073741824 bytes
//
// Result implements error, so errors.Is(err, cuda.ErrorOutOfMemory) tests
// the code. A library that is not found is a *libs.NotFoundError; the CUDA
// toolkit's stub libcuda, found by mistake, fails cuInit with
// CUDA_ERROR_STUB_LIBRARY and a message saying so.
//
// # Calls
//
// Functions are called through purego.SyscallN, without reflection, and
// launches and copies do not allocate. Go memory the driver reads or
// writes during a call (copies, kernel arguments, JIT options) is pinned
// with runtime.Pinner for the call.
//
// The package is tested against a fake driver (internal/fake), a C
// library that keeps device memory in host memory and records what it is
// given, so that the marshalling is checked against real C calling
// conventions on machines without a GPU.
package cuda
