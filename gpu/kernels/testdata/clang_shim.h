// clang_shim.h lets clang 14's CUDA front end compile the kernels to PTX
// without the CUDA toolkit, for the syntax and type checks of
// TestClangCompiles. It is -include'd in front of a family's source (as
// Source returns it) and stands in for what NVRTC declares by itself:
//
//   - the execution-space keywords, as clang's attributes;
//   - the builtin variables (threadIdx, blockDim, ...) from clang's header;
//   - the math functions and intrinsics (expf, __fmul_rn, __float_as_uint,
//     ...) from clang's wrappers around libdevice, which stay unresolved
//     external functions in the PTX (-nocudalib): enough to check calls;
//   - the warp shuffles and atomics, written here in terms of clang's
//     __nvvm_* builtins (clang's own wrappers for them need CUDA headers).
//
// Nothing here is used at run time: NVRTC compiles the kernels on the GPU
// machine with its own declarations.

#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))

// clang's wrappers check the CUDA version and use a few libc names.
#define CUDA_VERSION 11080
typedef __SIZE_TYPE__ size_t;
#define INT_MAX __INT_MAX__
#define INT_MIN (-__INT_MAX__ - 1)
#define HUGE_VAL __builtin_huge_val()
#define HUGE_VALF __builtin_huge_valf()

#include <__clang_cuda_builtin_vars.h>
#include <__clang_cuda_libdevice_declares.h>
#include <__clang_cuda_device_functions.h>
#include <__clang_cuda_math.h>

#define ZE_SHIM static __device__ __forceinline__

// __shfl_xor_sync for the types the kernels reduce; 64-bit values move as two
// 32-bit halves, as CUDA's own overloads do.
ZE_SHIM int __shfl_xor_sync(unsigned m, int v, int lane, int w = 32) {
    return __nvvm_shfl_sync_bfly_i32(m, v, lane, ((32 - w) << 8) | 0x1f);
}
ZE_SHIM unsigned __shfl_xor_sync(unsigned m, unsigned v, int lane, int w = 32) {
    return (unsigned)__shfl_xor_sync(m, (int)v, lane, w);
}
ZE_SHIM float __shfl_xor_sync(unsigned m, float v, int lane, int w = 32) {
    return __nvvm_shfl_sync_bfly_f32(m, v, lane, ((32 - w) << 8) | 0x1f);
}
ZE_SHIM long long __shfl_xor_sync(unsigned m, long long v, int lane, int w = 32) {
    int lo = __shfl_xor_sync(m, (int)(unsigned long long)v, lane, w);
    int hi = __shfl_xor_sync(m, (int)((unsigned long long)v >> 32), lane, w);
    return (long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo);
}
ZE_SHIM unsigned long long __shfl_xor_sync(unsigned m, unsigned long long v, int lane, int w = 32) {
    return (unsigned long long)__shfl_xor_sync(m, (long long)v, lane, w);
}
ZE_SHIM double __shfl_xor_sync(unsigned m, double v, int lane, int w = 32) {
    return __longlong_as_double(__shfl_xor_sync(m, __double_as_longlong(v), lane, w));
}

// Atomics.
ZE_SHIM float atomicAdd(float* p, float v) { return __nvvm_atom_add_gen_f(p, v); }
ZE_SHIM double atomicAdd(double* p, double v) { return __nvvm_atom_add_gen_d(p, v); }
ZE_SHIM int atomicAdd(int* p, int v) { return __nvvm_atom_add_gen_i(p, v); }
ZE_SHIM unsigned atomicAdd(unsigned* p, unsigned v) { return (unsigned)__nvvm_atom_add_gen_i((int*)p, (int)v); }
ZE_SHIM unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return (unsigned long long)__nvvm_atom_add_gen_ll((long long*)p, (long long)v);
}
ZE_SHIM unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
    return __nvvm_atom_min_gen_ull(p, v);
}
ZE_SHIM long long atomicMin(long long* p, long long v) { return __nvvm_atom_min_gen_ll(p, v); }
ZE_SHIM unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
    return __nvvm_atom_max_gen_ull(p, v);
}
ZE_SHIM unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) {
    return (unsigned)__nvvm_atom_cas_gen_i((int*)p, (int)cmp, (int)v);
}
ZE_SHIM unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp, unsigned long long v) {
    return (unsigned long long)__nvvm_atom_cas_gen_ll((long long*)p, (long long)cmp, (long long)v);
}
