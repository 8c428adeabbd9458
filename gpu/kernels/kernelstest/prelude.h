// prelude.h: a host emulation of the CUDA subset the kernels use, so that
// the kernels can run without a GPU: put in front of a family's Source, the
// whole compiles as host C++ (g++ or clang++, -std=c++17
// -ffp-contract=off), with runtime.cc, into a shared library whose
// kernels run one block at a time, each CUDA thread a ucontext fiber on the
// calling OS thread (__syncthreads and warp shuffles switch fibers).
// __CUDA_ARCH__ is not defined, so common.cuh's portable float16
// conversions replace its inline PTX.
//
// Launch a kernel with zeemu_launch(kernel, dims, params) (runtime.cc),
// where kernel is a trampoline void(void** params) that unpacks the
// driver-style parameter array (one pointer per argument) and calls the
// kernel; HostSource generates those from kernels.Kernels. With a fake CUDA
// driver whose cuLaunchKernel calls zeemu_launch on "device" memory that
// is host memory, the engine's conformance suite (engine/device/devicetest)
// runs every kernel against the CPU engine. It checks results, not speed,
// and one block at a time in a fixed order cannot show races between
// threads or blocks.
#include <cmath>
#include <math.h>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <ucontext.h>

#define __global__
#define __launch_bounds__(...)
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct ze_emu_dim3 { unsigned x, y, z; };
struct ze_emu_fiber {
    ucontext_t ctx;
    ze_emu_dim3 tid;
    int done;
    char *stack;
};
extern "C" {
extern ze_emu_dim3 ze_emu_block, ze_emu_bdim, ze_emu_gdim;
extern ze_emu_fiber *ze_emu_cur;
void ze_emu_syncthreads(void);
void ze_emu_syncwarp(void);
}
extern unsigned long long ze_emu_slots[1024];

#define threadIdx (ze_emu_cur->tid)
#define blockIdx ze_emu_block
#define blockDim ze_emu_bdim
#define gridDim ze_emu_gdim

static inline void __syncthreads() { ze_emu_syncthreads(); }

template <class T> static inline unsigned long long ze_emu_bits(T v) {
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int lane_mask, int = 32) {
    const unsigned t = threadIdx.x;
    ze_emu_slots[t] = ze_emu_bits(v);
    ze_emu_syncwarp();
    unsigned src = (t & ~31u) | ((t & 31u) ^ (unsigned)lane_mask);
    T r;
    unsigned long long b = ze_emu_slots[src];
    memcpy(&r, &b, sizeof r);
    ze_emu_syncwarp();
    return r;
}

// Fibers never run concurrently: plain read-modify-write is atomic.
template <class T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <class T> static inline T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
template <class T> static inline T atomicMin(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }

static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double f) { long long u; memcpy(&u, &f, 8); return u; }
static inline double __longlong_as_double(long long u) { double f; memcpy(&f, &u, 8); return f; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return std::sqrt(a); }
