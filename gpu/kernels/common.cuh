// common.cuh: the helpers every kernel family shares. Source() puts this file
// in front of each family's .cu to make one translation unit, so that NVRTC
// needs no include path and no CUDA header: everything used below is either
// defined here or a builtin that NVRTC declares itself (threadIdx, expf,
// __shfl_xor_sync, atomicAdd, __fmul_rn, ...).
//
// The reference for every numeric choice is the CPU engine (engine/cpu,
// engine/cpu/vmath, engine/dtype); comments name the function matched.

typedef long long i64;
typedef unsigned long long u64;

#define ZE_MAXDIM 8  // dimensions of a coalesced operand (the Go side checks)
#define ZE_MAXOPS 4  // operands of one elementwise walk (Where: dst, cond, a, b)

// ---------------------------------------------------------------------------
// Element types. bfloat16 and float16 are carried as their bit patterns in
// distinct structs so that templates tell them apart.

struct ze_bf16 { unsigned short bits; };
struct ze_f16 { unsigned short bits; };

// engine/dtype.BF16.Float32: exact.
__device__ __forceinline__ float ze_bf16_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned)h) << 16);
}

// engine/dtype.BF16FromFloat32: round to nearest even; NaN stays a quiet NaN
// with its sign and top payload bits.
__device__ __forceinline__ unsigned short ze_f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    unsigned rounding = 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)((u + rounding) >> 16);
}

// engine/dtype.F16.Float32: exact. The hardware conversion is exact for every
// number; NaN is rebuilt by bits so that its payload survives as on the CPU.
// (Without __CUDA_ARCH__, that is when the file is compiled for the host
// to test the kernels there, integer code does the same.)
__device__ __forceinline__ float ze_f16_to_f32(unsigned short h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0)
        return __uint_as_float(((unsigned)(h & 0x8000u) << 16) | 0x7f800000u | ((unsigned)(h & 0x03ffu) << 13));
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    const unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u);
    if (exp == 0) return __uint_as_float(sign | __float_as_uint((float)mant * 5.9604644775390625e-8f));  // mant·2^-24
    return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}

// engine/dtype.F16FromFloat32: IEEE round to nearest even with subnormals and
// overflow to infinity (what cvt.rn does), NaN as sign|0x7e00.
__device__ __forceinline__ unsigned short ze_f32_to_f16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) & 0x8000u) | 0x7e00u);
#ifdef __CUDA_ARCH__
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    const unsigned sign = (u >> 16) & 0x8000u, mant = u & 0x7fffffu;
    const int exp = (int)((u >> 23) & 0xffu);
    if (exp == 0xff) return (unsigned short)(sign | 0x7c00u);
    if (exp > 142) return (unsigned short)(sign | 0x7c00u);
    if (exp >= 113) {
        unsigned v = ((unsigned)(exp - 112) << 10) | (mant >> 13);
        const unsigned rest = mant & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) v++;
        return (unsigned short)(sign | v);
    }
    if (exp >= 102) {
        const unsigned m = mant | 0x800000u, shift = (unsigned)(126 - exp);
        unsigned v = m >> shift;
        const unsigned rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (v & 1u))) v++;
        return (unsigned short)(sign | v);
    }
    return (unsigned short)sign;
#endif
}

// ZeType<T> maps a storage type to the type arithmetic is done in (C): float
// for float32 and the 16-bit floats (the CPU widens those to float32 and
// rounds once on the way out), double for float64, the integer itself for
// integers. load widens exactly; store rounds once.
template <class T> struct ZeType;
template <> struct ZeType<float> {
    typedef float C;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float c) { return c; }
};
template <> struct ZeType<double> {
    typedef double C;
    static __device__ __forceinline__ double load(double v) { return v; }
    static __device__ __forceinline__ double store(double c) { return c; }
};
template <> struct ZeType<ze_bf16> {
    typedef float C;
    static __device__ __forceinline__ float load(ze_bf16 v) { return ze_bf16_to_f32(v.bits); }
    static __device__ __forceinline__ ze_bf16 store(float c) { ze_bf16 r; r.bits = ze_f32_to_bf16(c); return r; }
};
template <> struct ZeType<ze_f16> {
    typedef float C;
    static __device__ __forceinline__ float load(ze_f16 v) { return ze_f16_to_f32(v.bits); }
    static __device__ __forceinline__ ze_f16 store(float c) { ze_f16 r; r.bits = ze_f32_to_f16(c); return r; }
};
template <> struct ZeType<i64> {
    typedef i64 C;
    static __device__ __forceinline__ i64 load(i64 v) { return v; }
    static __device__ __forceinline__ i64 store(i64 c) { return c; }
};
template <> struct ZeType<int> {
    typedef int C;
    static __device__ __forceinline__ int load(int v) { return v; }
    static __device__ __forceinline__ int store(int c) { return c; }
};
template <> struct ZeType<unsigned char> {
    typedef unsigned char C;
    static __device__ __forceinline__ unsigned char load(unsigned char v) { return v; }
    static __device__ __forceinline__ unsigned char store(unsigned char c) { return c; }
};

// Conversions through float64, engine/cpu/copy.go's load and store: every
// type widens to double; floats narrow by rounding (float64 -> float32 ->
// 16-bit, the CPU's two roundings); integers truncate toward zero with NaN
// -> 0 and saturation at the int64 range (toInt64), then wrap to the width;
// bool tests for non-zero.
__device__ __forceinline__ double ze_to_f64(float v) { return (double)v; }
__device__ __forceinline__ double ze_to_f64(double v) { return v; }
__device__ __forceinline__ double ze_to_f64(ze_bf16 v) { return (double)ze_bf16_to_f32(v.bits); }
__device__ __forceinline__ double ze_to_f64(ze_f16 v) { return (double)ze_f16_to_f32(v.bits); }
__device__ __forceinline__ double ze_to_f64(i64 v) { return (double)v; }
__device__ __forceinline__ double ze_to_f64(int v) { return (double)v; }
__device__ __forceinline__ double ze_to_f64(unsigned char v) { return (double)v; }

__device__ __forceinline__ i64 ze_f64_to_i64(double x) {
    if (x != x) return 0;
    if (x >= 9223372036854775807.0) return 9223372036854775807LL;
    if (x <= -9223372036854775808.0) return (-9223372036854775807LL - 1);
    return (i64)x;
}

template <class T> struct ZeFromF64;
template <> struct ZeFromF64<float> { static __device__ __forceinline__ float conv(double x) { return (float)x; } };
template <> struct ZeFromF64<double> { static __device__ __forceinline__ double conv(double x) { return x; } };
template <> struct ZeFromF64<ze_bf16> {
    static __device__ __forceinline__ ze_bf16 conv(double x) { ze_bf16 r; r.bits = ze_f32_to_bf16((float)x); return r; }
};
template <> struct ZeFromF64<ze_f16> {
    static __device__ __forceinline__ ze_f16 conv(double x) { ze_f16 r; r.bits = ze_f32_to_f16((float)x); return r; }
};
template <> struct ZeFromF64<i64> { static __device__ __forceinline__ i64 conv(double x) { return ze_f64_to_i64(x); } };
template <> struct ZeFromF64<int> {
    static __device__ __forceinline__ int conv(double x) { return (int)(unsigned)(u64)ze_f64_to_i64(x); }
};
template <> struct ZeFromF64<unsigned char> {
    static __device__ __forceinline__ unsigned char conv(double x) { return (unsigned char)(u64)ze_f64_to_i64(x); }
};
// Bool is stored as unsigned char like uint8 but converts differently.
struct ze_bool { unsigned char v; };
__device__ __forceinline__ double ze_to_f64(ze_bool v) { return (double)v.v; }
template <> struct ZeFromF64<ze_bool> {
    static __device__ __forceinline__ ze_bool conv(double x) { ze_bool r; r.v = (x != 0) ? 1 : 0; return r; }
};

// ZeAcc<T>: the type sums of T accumulate in (double for every float type,
// int64 for int64) and the conversions in and out.
template <class T> struct ZeAcc {
    typedef double A;
    static __device__ __forceinline__ double in(T v) { return (double)ZeType<T>::load(v); }
    // out rounds as the CPU: float64 -> float32, then to the element type.
    static __device__ __forceinline__ T out(double a) { return ZeType<T>::store((float)a); }
};
template <> struct ZeAcc<double> {
    typedef double A;
    static __device__ __forceinline__ double in(double v) { return v; }
    static __device__ __forceinline__ double out(double a) { return a; }
};
template <> struct ZeAcc<i64> {
    typedef i64 A;
    static __device__ __forceinline__ i64 in(i64 v) { return v; }
    static __device__ __forceinline__ i64 out(i64 a) { return a; }
};

// ---------------------------------------------------------------------------
// Arithmetic with explicit rounding. NVRTC contracts a*b+c into one fused
// multiply-add by default (--fmad=true); where the CPU rounds the product
// first (and cancellation can follow) the kernels use these, which are never
// contracted, and fmaf/fma where the CPU fuses (vmath's fma32).

__device__ __forceinline__ float ze_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double ze_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float ze_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double ze_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float ze_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double ze_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float ze_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double ze_div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float ze_sqrt(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double ze_sqrt(double a) { return __dsqrt_rn(a); }

// ze_max_nan / ze_min_nan: NaN wins (torch.max semantics: a NaN anywhere in
// a reduction gives NaN).
template <class C> __device__ __forceinline__ C ze_max_nan(C a, C b) {
    if (a != a) return a;
    if (b != b) return b;
    return b > a ? b : a;
}
template <class C> __device__ __forceinline__ C ze_min_nan(C a, C b) {
    if (a != a) return a;
    if (b != b) return b;
    return b < a ? b : a;
}

// vmath.FlushSubnormal: |v| < 2^-126 becomes +0 (softmax outputs and the
// cross-entropy gradient; the CPU flushes them to keep x86 fast, and the GPU
// matches its bits).
__device__ __forceinline__ float ze_flush(float v) {
    return (__float_as_uint(v) & 0x7f800000u) == 0 ? 0.0f : v;
}

template <class T> __device__ __forceinline__ T ze_min(T a, T b) { return a < b ? a : b; }

// ZeLowest<C>::value() is the identity of a maximum: -Inf, or the least
// integer.
template <class C> struct ZeLowest;
template <> struct ZeLowest<float> {
    static __device__ __forceinline__ float value() { return -__int_as_float(0x7f800000); }
};
template <> struct ZeLowest<double> {
    static __device__ __forceinline__ double value() { return -__longlong_as_double(0x7ff0000000000000LL); }
};
template <> struct ZeLowest<i64> {
    static __device__ __forceinline__ i64 value() { return -9223372036854775807LL - 1; }
};

// ---------------------------------------------------------------------------
// Strided operands. The Go side coalesces the operands' dimensions (drops
// extent-1 dimensions, merges adjacent ones every operand allows) and fills a
// ZeLayout with the dimensions innermost first, so that the unrolled loops
// below index the by-value parameter with constants (a dynamic index would
// copy the struct to local memory). Pointers passed with a layout point at
// each operand's element 0; strides are in elements and may be 0 (broadcast)
// or negative.

struct ZeLayout {
    i64 shape[ZE_MAXDIM];              // extents, innermost first
    i64 stride[ZE_MAXOPS][ZE_MAXDIM];  // per operand, per dimension, in elements
    i64 numel;                         // product of the extents
    int ndim;                          // 1..ZE_MAXDIM
    int pad_;
};

// ze_offsets sets off[k] to operand k's element offset of the i-th element in
// row-major order. Contiguous (and scalar-broadcast) walks are one dimension
// and need no division. Other walks divide in 32 bits, several times
// cheaper than in 64: a walk of 2^32 elements or more takes its outermost
// index with one 64-bit division and the rest in 32 bits (NewLayout refuses
// walks whose inner dimensions alone reach 2^32 elements).
template <int NOPS>
__device__ __forceinline__ void ze_offsets(const ZeLayout& L, i64 i, i64 (&off)[NOPS]) {
#pragma unroll
    for (int k = 0; k < NOPS; ++k) off[k] = i * L.stride[k][0];
    if (L.ndim == 1) return;
    int nd = L.ndim;
    unsigned r = (unsigned)i;
#pragma unroll
    for (int k = 0; k < NOPS; ++k) off[k] = 0;
    if (L.numel > 0xffffffffLL) {
        --nd;
        i64 outer = 1;
#pragma unroll
        for (int d = 1; d < ZE_MAXDIM; ++d) {
            if (d == nd) {
                outer = L.shape[d];
#pragma unroll
                for (int k = 0; k < NOPS; ++k) off[k] = L.stride[k][d];
            }
        }
        const i64 inner = L.numel / outer;
        const i64 hi = i / inner;
        r = (unsigned)(i - hi * inner);
#pragma unroll
        for (int k = 0; k < NOPS; ++k) off[k] *= hi;
    }
#pragma unroll
    for (int d = 0; d < ZE_MAXDIM; ++d) {
        if (d < nd) {
            const unsigned e = (unsigned)L.shape[d];
            const unsigned q = r / e;
            const unsigned idx = r - q * e;
            r = q;
#pragma unroll
            for (int k = 0; k < NOPS; ++k) off[k] += (i64)idx * L.stride[k][d];
        }
    }
}

// ze_offset1 is the offset of element i of one strided operand given as
// separate arrays (innermost first), as the reduction layout has them;
// count is the product of the extents. Same division scheme as ze_offsets.
__device__ __forceinline__ i64 ze_offset1(const i64* shape, const i64* stride, int ndim, i64 count, i64 i) {
    if (ndim == 1) return i * stride[0];
    i64 off = 0;
    int nd = ndim;
    unsigned r = (unsigned)i;
    if (count > 0xffffffffLL) {
        --nd;
        i64 outer = 1, ostride = 0;
#pragma unroll
        for (int d = 1; d < ZE_MAXDIM; ++d) {
            if (d == nd) {
                outer = shape[d];
                ostride = stride[d];
            }
        }
        const i64 inner = count / outer;
        const i64 hi = i / inner;
        r = (unsigned)(i - hi * inner);
        off = hi * ostride;
    }
#pragma unroll
    for (int d = 0; d < ZE_MAXDIM; ++d) {
        if (d < nd) {
            const unsigned e = (unsigned)shape[d];
            const unsigned q = r / e;
            off += (i64)(r - q * e) * stride[d];
            r = q;
        }
    }
    return off;
}

// Grid-stride loop with 64-bit indices.
#define ZE_GRID_LOOP(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

// ---------------------------------------------------------------------------
// Reductions across a warp and across a group of threads.
//
// A "group" is the set of threads that cooperates on one row or one output:
// either one warp (group == 32, several rows per block) or the whole block
// (group == blockDim.x). The Go side only launches those two shapes, so a
// group-wide barrier is a block barrier and a group that skips a row skips it
// as a whole block. The combining order is fixed by the launch shape, so
// results are reproducible from run to run.

struct ZeSum {
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct ZeMax {
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return ze_max_nan(a, b); }
};
struct ZeMaxInt {
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return b > a ? b : a; }
};

template <class A, class Op> __device__ __forceinline__ A ze_warp_reduce(A v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ze_group_reduce combines v over the caller's group and returns the result
// to every thread of the group. Every thread of the block must call it (it
// may hold a barrier). smem needs blockDim.x/32 slots.
template <class A, class Op> __device__ __forceinline__ A ze_group_reduce(A v, int group, A* smem, Op op) {
    v = ze_warp_reduce(v, op);
    if (group <= 32) return v;
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) smem[warp] = v;
    __syncthreads();
    const int nw = group >> 5;
    const int first = (warp / nw) * nw;
    A r = smem[first];
    for (int w = 1; w < nw; ++w) r = op(r, smem[first + w]);
    __syncthreads();  // smem may be reused by the next reduction
    return r;
}

// ---------------------------------------------------------------------------
// Atomic addition for the accumulating index kernels.
__device__ __forceinline__ void ze_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void ze_atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void ze_atomic_add(i64* p, i64 v) { atomicAdd((u64*)p, (u64)v); }

// ---------------------------------------------------------------------------
// Row softmax, shared by nn.cu (Softmax, CrossEntropy) and attention.cu.
// vmath.SoftmaxRow / LogSoftmaxRow for float (and so for the 16-bit types,
// which the CPU widens), cpu.softmaxRow64 for double:
//
//	m = max x (NaN if any x is NaN)
//	s = Σ exp(x − m), accumulated in double
//	softmax:     y = exp(x − m) · (1/s), the reciprocal rounded to the type;
//	             float results below 2^-126 flushed to +0 as vmath does
//	log-softmax: y = (x − m) − log s, with log s rounded to the type
//	             (float: log of the float-rounded sum, computed in double)

__device__ __forceinline__ float ze_exp_c(float x) { return expf(x); }
__device__ __forceinline__ double ze_exp_c(double x) { return exp(x); }
__device__ __forceinline__ float ze_log_sum(float, double s) { return (float)log((double)(float)s); }
__device__ __forceinline__ double ze_log_sum(double, double s) { return log(s); }
__device__ __forceinline__ float ze_softmax_flush(float v) { return ze_flush(v); }
__device__ __forceinline__ double ze_softmax_flush(double v) { return v; }

// ze_row_max_sum computes m and s of one row of n elements read by the
// calling group (lane = index in the group). Every thread of the block must
// call it (see ze_group_reduce).
template <class T>
__device__ __forceinline__ void ze_row_max_sum(const T* x, i64 n, int lane, int group, typename ZeType<T>::C* smax,
                                               double* ssum, typename ZeType<T>::C& m, double& s) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    C mm = ZeLowest<C>::value();
    for (i64 j = lane; j < n; j += group) mm = ze_max_nan(mm, Ty::load(x[j]));
    mm = ze_group_reduce(mm, group, smax, ZeMax());
    double ss = 0.0;
    for (i64 j = lane; j < n; j += group) ss += (double)ze_exp_c(ze_sub(Ty::load(x[j]), mm));
    s = ze_group_reduce(ss, group, ssum, ZeSum());
    m = mm;
}

// ze_softmax_row writes the softmax (or log-softmax) of x into y; y may be
// x (each element is read and then written by the same thread).
template <class T>
__device__ __forceinline__ void ze_softmax_row(T* y, const T* x, i64 n, bool log, int lane, int group,
                                               typename ZeType<T>::C* smax, double* ssum) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    C m;
    double s;
    ze_row_max_sum<T>(x, n, lane, group, smax, ssum, m, s);
    if (log) {
        const C ls = ze_log_sum(m, s);
        for (i64 j = lane; j < n; j += group) y[j] = Ty::store(ze_sub(ze_sub(Ty::load(x[j]), m), ls));
    } else {
        const C inv = ze_div((C)1, (C)s);
        for (i64 j = lane; j < n; j += group)
            y[j] = Ty::store(ze_softmax_flush(ze_mul(ze_exp_c(ze_sub(Ty::load(x[j]), m)), inv)));
    }
}

// ze_softmax_bwd_row: vmath.SoftmaxBackwardRow / LogSoftmaxBackwardRow
// (cpu.softmaxBackwardRow64 for double) from the saved output y:
//
//	softmax:     dx = y·(dy − s),  s = Σ dy·y
//	log-softmax: dx = dy − exp(y)·s, s = Σ dy (fused for float, as vmath)
//
// with s accumulated in double and rounded to the type. dx may be dy.
__device__ __forceinline__ float ze_logsoftmax_bwd(float dy, float y, float s) { return fmaf(-expf(y), s, dy); }
__device__ __forceinline__ double ze_logsoftmax_bwd(double dy, double y, double s) { return ze_sub(dy, ze_mul(exp(y), s)); }

template <class T>
__device__ __forceinline__ void ze_softmax_bwd_row(T* dx, const T* dy, const T* y, i64 n, bool log, int lane, int group,
                                                   double* ssum) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    double acc = 0.0;
    if (log) {
        for (i64 j = lane; j < n; j += group) acc += (double)Ty::load(dy[j]);
    } else {
        for (i64 j = lane; j < n; j += group) acc += (double)Ty::load(dy[j]) * (double)Ty::load(y[j]);
    }
    const C s = (C)ze_group_reduce(acc, group, ssum, ZeSum());
    if (log) {
        for (i64 j = lane; j < n; j += group) dx[j] = Ty::store(ze_logsoftmax_bwd(Ty::load(dy[j]), Ty::load(y[j]), s));
    } else {
        for (i64 j = lane; j < n; j += group) {
            const C yv = Ty::load(y[j]);
            dx[j] = Ty::store(ze_mul(yv, ze_sub(Ty::load(dy[j]), s)));
        }
    }
}

// Row loops: a group per row (see ze_group_reduce), rows in grid-stride
// order. With group == blockDim.x every thread of a block has the same row,
// so a row skipped or finished early is skipped by the whole block.
#define ZE_ROW_LOOP(row, rows, group) \
    for (i64 row = (i64)blockIdx.x * (blockDim.x / (group)) + threadIdx.x / (group); row < (rows); \
         row += (i64)gridDim.x * (blockDim.x / (group)))
