// reduce.cu: Reduce (sum, max, min over any set of axes), ArgMax and
// SumSquares; the CPU reference is engine/cpu/reduce.go.
//
// Accumulation: float sums and products accumulate in double (the CPU
// accumulates in float64 too), then round once to the element type (float64
// -> float32 -> 16-bit for the half types, the CPU's roundings). int64 sums
// and products wrap. Max and min are exact and let NaN win.
//
// Reduce splits each output's reduced elements into `splits` chunks of
// `chunk` elements. With one split, the kernel writes dst; with several it
// writes one partial per (output, chunk) into a scratch array of the
// accumulator type, and reduce_finish folds the partials of each output in
// chunk order. The result depends only on the launch shape, never on
// scheduling.

enum { RED_SUM = 0, RED_MAX = 1, RED_MIN = 2, RED_PROD = 3 };

// ZeReduce describes a reduction: the kept dimensions (dst's, with the
// matching src strides) and the reduced dimensions (src's), each coalesced
// and innermost first.
struct ZeReduce {
    i64 kshape[ZE_MAXDIM];  // kept extents
    i64 kdst[ZE_MAXDIM];    // dst strides over the kept dimensions
    i64 ksrc[ZE_MAXDIM];    // src strides over the kept dimensions
    i64 rshape[ZE_MAXDIM];  // reduced extents
    i64 rsrc[ZE_MAXDIM];    // src strides over the reduced dimensions
    i64 outputs;            // product of kshape
    i64 rcount;             // product of rshape
    int kdim;               // 1..ZE_MAXDIM
    int rdim;               // 1..ZE_MAXDIM
};

// ZeFold<A, OP>: the identity and the combining function of each op.
template <class A, int OP> struct ZeFold;
template <> struct ZeFold<double, RED_SUM> {
    static __device__ __forceinline__ double init() { return 0.0; }
    __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};
template <> struct ZeFold<double, RED_MAX> {
    static __device__ __forceinline__ double init() { return -__longlong_as_double(0x7ff0000000000000LL); }
    __device__ __forceinline__ double operator()(double a, double b) const { return ze_max_nan(a, b); }
};
template <> struct ZeFold<double, RED_MIN> {
    static __device__ __forceinline__ double init() { return __longlong_as_double(0x7ff0000000000000LL); }
    __device__ __forceinline__ double operator()(double a, double b) const { return ze_min_nan(a, b); }
};
template <> struct ZeFold<double, RED_PROD> {
    static __device__ __forceinline__ double init() { return 1.0; }
    __device__ __forceinline__ double operator()(double a, double b) const { return ze_mul(a, b); }
};
template <> struct ZeFold<i64, RED_SUM> {
    static __device__ __forceinline__ i64 init() { return 0; }
    __device__ __forceinline__ i64 operator()(i64 a, i64 b) const { return (i64)((u64)a + (u64)b); }
};
template <> struct ZeFold<i64, RED_MAX> {
    static __device__ __forceinline__ i64 init() { return -9223372036854775807LL - 1; }
    __device__ __forceinline__ i64 operator()(i64 a, i64 b) const { return b > a ? b : a; }
};
template <> struct ZeFold<i64, RED_MIN> {
    static __device__ __forceinline__ i64 init() { return 9223372036854775807LL; }
    __device__ __forceinline__ i64 operator()(i64 a, i64 b) const { return b < a ? b : a; }
};
template <> struct ZeFold<i64, RED_PROD> {
    static __device__ __forceinline__ i64 init() { return 1; }
    __device__ __forceinline__ i64 operator()(i64 a, i64 b) const { return (i64)((u64)a * (u64)b); }
};

// reduce_rows: a group of threads per (output, chunk): the threads stride
// through the chunk, which reads memory contiguously when the innermost
// reduced dimension has stride 1. partial[o*splits + s].
template <class T, int OP>
__device__ __forceinline__ void ze_reduce_rows(const ZeReduce& R, T* dst, const T* src, typename ZeAcc<T>::A* partial,
                                               i64 splits, i64 chunk, int group) {
    typedef typename ZeAcc<T>::A A;
    typedef ZeFold<A, OP> F;
    __shared__ A smem[32];
    const F f;
    const int gpb = blockDim.x / group;
    const int g = threadIdx.x / group;
    const int lane = threadIdx.x % group;
    const i64 units = R.outputs * splits;
    for (i64 base = (i64)blockIdx.x * gpb; base < units; base += (i64)gridDim.x * gpb) {
        const i64 u = base + g;
        A acc = F::init();
        i64 o = 0;
        if (u < units) {
            o = u / splits;
            const i64 s = u - o * splits;
            const i64 ks = ze_offset1(R.kshape, R.ksrc, R.kdim, R.outputs, o);
            const i64 lo = s * chunk;
            const i64 hi = ze_min(lo + chunk, R.rcount);
            for (i64 j = lo + lane; j < hi; j += group)
                acc = f(acc, ZeAcc<T>::in(src[ks + ze_offset1(R.rshape, R.rsrc, R.rdim, R.rcount, j)]));
        }
        acc = ze_group_reduce(acc, group, smem, f);
        if (u < units && lane == 0) {
            if (splits == 1)
                dst[ze_offset1(R.kshape, R.kdst, R.kdim, R.outputs, o)] = ZeAcc<T>::out(acc);
            else
                partial[u] = acc;
        }
    }
}

// reduce_cols: a thread per (output, chunk), outputs fastest across threads:
// adjacent threads read adjacent memory when the innermost kept dimension
// has stride 1 in src (a bias gradient: the sum over the rows of [N, C]).
// Each thread walks its chunk in order with an incremental multi-index.
// partial[s*outputs + o].
template <class T, int OP>
__device__ __forceinline__ void ze_reduce_cols(const ZeReduce& R, T* dst, const T* src, typename ZeAcc<T>::A* partial,
                                               i64 splits, i64 chunk) {
    typedef typename ZeAcc<T>::A A;
    typedef ZeFold<A, OP> F;
    const F f;
    const i64 units = R.outputs * splits;
    ZE_GRID_LOOP(u, units) {
        const i64 s = u / R.outputs;
        const i64 o = u - s * R.outputs;
        const i64 lo = s * chunk;
        const i64 hi = ze_min(lo + chunk, R.rcount);
        A acc = F::init();
        if (lo < hi) {
            // Multi-index of element lo over the reduced dimensions.
            i64 idx[ZE_MAXDIM];
            i64 off = ze_offset1(R.kshape, R.ksrc, R.kdim, R.outputs, o);
            i64 r = lo;
#pragma unroll
            for (int d = 0; d < ZE_MAXDIM; ++d) {
                idx[d] = 0;
                if (d < R.rdim) {
                    const i64 q = r / R.rshape[d];
                    idx[d] = r - q * R.rshape[d];
                    r = q;
                    off += idx[d] * R.rsrc[d];
                }
            }
            for (i64 j = lo; j < hi; ++j) {
                acc = f(acc, ZeAcc<T>::in(src[off]));
#pragma unroll
                for (int d = 0; d < ZE_MAXDIM; ++d) {
                    if (d < R.rdim) {
                        off += R.rsrc[d];
                        if (++idx[d] < R.rshape[d]) break;
                        off -= R.rsrc[d] * R.rshape[d];
                        idx[d] = 0;
                    }
                }
            }
        }
        if (splits == 1)
            dst[ze_offset1(R.kshape, R.kdst, R.kdim, R.outputs, o)] = ZeAcc<T>::out(acc);
        else
            partial[s * R.outputs + o] = acc;
    }
}

// reduce_finish: output o folds partial[o*pso + s*pss] for s = 0..splits-1 in
// order.
template <class T, int OP>
__device__ __forceinline__ void ze_reduce_finish(const ZeReduce& R, T* dst, const typename ZeAcc<T>::A* partial, i64 splits,
                                                 i64 pso, i64 pss) {
    typedef typename ZeAcc<T>::A A;
    typedef ZeFold<A, OP> F;
    const F f;
    ZE_GRID_LOOP(o, R.outputs) {
        A acc = partial[o * pso];
        for (i64 s = 1; s < splits; ++s) acc = f(acc, partial[o * pso + s * pss]);
        dst[ze_offset1(R.kshape, R.kdst, R.kdim, R.outputs, o)] = ZeAcc<T>::out(acc);
    }
}

// The kernels dispatch on op to bodies specialised for it.
template <class T>
__device__ __forceinline__ void ze_reduce_rows_op(const ZeReduce& R, T* dst, const T* src, typename ZeAcc<T>::A* partial,
                                                  i64 splits, i64 chunk, int op, int group) {
    switch (op) {
    case RED_SUM: ze_reduce_rows<T, RED_SUM>(R, dst, src, partial, splits, chunk, group); break;
    case RED_MAX: ze_reduce_rows<T, RED_MAX>(R, dst, src, partial, splits, chunk, group); break;
    case RED_MIN: ze_reduce_rows<T, RED_MIN>(R, dst, src, partial, splits, chunk, group); break;
    case RED_PROD: ze_reduce_rows<T, RED_PROD>(R, dst, src, partial, splits, chunk, group); break;
    }
}
template <class T>
__device__ __forceinline__ void ze_reduce_cols_op(const ZeReduce& R, T* dst, const T* src, typename ZeAcc<T>::A* partial,
                                                  i64 splits, i64 chunk, int op) {
    switch (op) {
    case RED_SUM: ze_reduce_cols<T, RED_SUM>(R, dst, src, partial, splits, chunk); break;
    case RED_MAX: ze_reduce_cols<T, RED_MAX>(R, dst, src, partial, splits, chunk); break;
    case RED_MIN: ze_reduce_cols<T, RED_MIN>(R, dst, src, partial, splits, chunk); break;
    case RED_PROD: ze_reduce_cols<T, RED_PROD>(R, dst, src, partial, splits, chunk); break;
    }
}
template <class T>
__device__ __forceinline__ void ze_reduce_finish_op(const ZeReduce& R, T* dst, const typename ZeAcc<T>::A* partial, i64 splits,
                                                    i64 pso, i64 pss, int op) {
    switch (op) {
    case RED_SUM: ze_reduce_finish<T, RED_SUM>(R, dst, partial, splits, pso, pss); break;
    case RED_MAX: ze_reduce_finish<T, RED_MAX>(R, dst, partial, splits, pso, pss); break;
    case RED_MIN: ze_reduce_finish<T, RED_MIN>(R, dst, partial, splits, pso, pss); break;
    case RED_PROD: ze_reduce_finish<T, RED_PROD>(R, dst, partial, splits, pso, pss); break;
    }
}

extern "C" __global__ __launch_bounds__(256) void reduce_rows_f32(ZeReduce R, float* dst, const float* src, double* partial, i64 splits, i64 chunk,
                                        int op, int group) {
    ze_reduce_rows_op(R, dst, src, partial, splits, chunk, op, group);
}
extern "C" __global__ __launch_bounds__(256) void reduce_rows_f64(ZeReduce R, double* dst, const double* src, double* partial, i64 splits, i64 chunk,
                                        int op, int group) {
    ze_reduce_rows_op(R, dst, src, partial, splits, chunk, op, group);
}
extern "C" __global__ __launch_bounds__(256) void reduce_rows_bf16(ZeReduce R, ze_bf16* dst, const ze_bf16* src, double* partial, i64 splits, i64 chunk,
                                        int op, int group) {
    ze_reduce_rows_op(R, dst, src, partial, splits, chunk, op, group);
}
extern "C" __global__ __launch_bounds__(256) void reduce_rows_f16(ZeReduce R, ze_f16* dst, const ze_f16* src, double* partial, i64 splits, i64 chunk,
                                        int op, int group) {
    ze_reduce_rows_op(R, dst, src, partial, splits, chunk, op, group);
}
extern "C" __global__ __launch_bounds__(256) void reduce_rows_i64(ZeReduce R, i64* dst, const i64* src, i64* partial, i64 splits, i64 chunk,
                                        int op, int group) {
    ze_reduce_rows_op(R, dst, src, partial, splits, chunk, op, group);
}
extern "C" __global__ __launch_bounds__(256) void reduce_cols_f32(ZeReduce R, float* dst, const float* src, double* partial, i64 splits, i64 chunk,
                                        int op) {
    ze_reduce_cols_op(R, dst, src, partial, splits, chunk, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_cols_f64(ZeReduce R, double* dst, const double* src, double* partial, i64 splits, i64 chunk,
                                        int op) {
    ze_reduce_cols_op(R, dst, src, partial, splits, chunk, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_cols_bf16(ZeReduce R, ze_bf16* dst, const ze_bf16* src, double* partial, i64 splits, i64 chunk,
                                        int op) {
    ze_reduce_cols_op(R, dst, src, partial, splits, chunk, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_cols_f16(ZeReduce R, ze_f16* dst, const ze_f16* src, double* partial, i64 splits, i64 chunk,
                                        int op) {
    ze_reduce_cols_op(R, dst, src, partial, splits, chunk, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_cols_i64(ZeReduce R, i64* dst, const i64* src, i64* partial, i64 splits, i64 chunk,
                                        int op) {
    ze_reduce_cols_op(R, dst, src, partial, splits, chunk, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_finish_f32(ZeReduce R, float* dst, const double* partial, i64 splits, i64 pso, i64 pss,
                                          int op) {
    ze_reduce_finish_op(R, dst, partial, splits, pso, pss, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_finish_f64(ZeReduce R, double* dst, const double* partial, i64 splits, i64 pso, i64 pss,
                                          int op) {
    ze_reduce_finish_op(R, dst, partial, splits, pso, pss, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_finish_bf16(ZeReduce R, ze_bf16* dst, const double* partial, i64 splits, i64 pso, i64 pss,
                                          int op) {
    ze_reduce_finish_op(R, dst, partial, splits, pso, pss, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_finish_f16(ZeReduce R, ze_f16* dst, const double* partial, i64 splits, i64 pso, i64 pss,
                                          int op) {
    ze_reduce_finish_op(R, dst, partial, splits, pso, pss, op);
}
extern "C" __global__ __launch_bounds__(256) void reduce_finish_i64(ZeReduce R, i64* dst, const i64* partial, i64 splits, i64 pso, i64 pss,
                                          int op) {
    ze_reduce_finish_op(R, dst, partial, splits, pso, pss, op);
}

// ---------------------------------------------------------------------------
// ArgMax along one axis: the first index of the maximum, or of the first NaN
// (cpu.argMaxRun). L walks the values' shape with operands (values, indices,
// src at the axis' index 0); n and stride describe the axis in src.
//
// group 1: a thread per output scans the axis as the CPU does. group 32: a
// warp per output; each lane scans its share in order with the CPU's rule,
// and the lanes combine by value, the lower index winning ties (equal
// values, or two NaNs), which gives the CPU's answer.

// ze_arg_take reports whether (bv, bi) beats (av, ai).
template <class C> __device__ __forceinline__ bool ze_arg_take(C av, i64 ai, C bv, i64 bi) {
    const bool an = av != av, bn = bv != bv;
    if (an || bn) return an && bn ? bi < ai : bn;
    if (av > bv) return false;
    if (bv > av) return true;
    return bi < ai;
}

template <class T>
__device__ __forceinline__ void ze_argmax(const ZeLayout& L, T* values, i64* indices, const T* src, i64 n, i64 stride, int group) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    if (group == 1) {
        ZE_GRID_LOOP(o, L.numel) {
            i64 off[3];
            ze_offsets<3>(L, o, off);
            const T* p = src + off[2];
            C best = Ty::load(p[0]);
            i64 at = 0;
            for (i64 j = 1; j < n && best == best; ++j) {
                const C x = Ty::load(p[j * stride]);
                if (x > best || x != x) {
                    best = x;
                    at = j;
                }
            }
            values[off[0]] = Ty::store(best);
            indices[off[1]] = at;
        }
        return;
    }
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)blockDim.x * gridDim.x) >> 5;
    for (i64 o = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < L.numel; o += warps) {
        i64 off[3];
        ze_offsets<3>(L, o, off);
        const T* p = src + off[2];
        C best = ZeLowest<C>::value();
        i64 at = 9223372036854775807LL;
        if (lane < n) {
            best = Ty::load(p[lane * stride]);
            at = lane;
            for (i64 j = lane + 32; j < n && best == best; j += 32) {
                const C x = Ty::load(p[j * stride]);
                if (x > best || x != x) {
                    best = x;
                    at = j;
                }
            }
        }
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) {
            const C ov = __shfl_xor_sync(0xffffffffu, best, d);
            const i64 oi = __shfl_xor_sync(0xffffffffu, at, d);
            if (ze_arg_take(best, at, ov, oi)) {
                best = ov;
                at = oi;
            }
        }
        if (lane == 0) {
            values[off[0]] = Ty::store(best);
            indices[off[1]] = at;
        }
    }
}

extern "C" __global__ __launch_bounds__(256) void argmax_f32(ZeLayout L, float* values, i64* indices, const float* src, i64 n, i64 stride, int group) {
    ze_argmax(L, values, indices, src, n, stride, group);
}
extern "C" __global__ __launch_bounds__(256) void argmax_f64(ZeLayout L, double* values, i64* indices, const double* src, i64 n, i64 stride, int group) {
    ze_argmax(L, values, indices, src, n, stride, group);
}
extern "C" __global__ __launch_bounds__(256) void argmax_bf16(ZeLayout L, ze_bf16* values, i64* indices, const ze_bf16* src, i64 n, i64 stride, int group) {
    ze_argmax(L, values, indices, src, n, stride, group);
}
extern "C" __global__ __launch_bounds__(256) void argmax_f16(ZeLayout L, ze_f16* values, i64* indices, const ze_f16* src, i64 n, i64 stride, int group) {
    ze_argmax(L, values, indices, src, n, stride, group);
}
extern "C" __global__ __launch_bounds__(256) void argmax_i64(ZeLayout L, i64* values, i64* indices, const i64* src, i64 n, i64 stride, int group) {
    ze_argmax(L, values, indices, src, n, stride, group);
}

// ---------------------------------------------------------------------------
// SumSquares: each block writes the double sum of x² over its grid-stride
// share to partial[blockIdx.x]; the host adds the partials in block order
// (float64, like the CPU's per-chunk partial sums). Squares of float32 are
// exact in double.

template <class T> __device__ __forceinline__ void ze_sumsq(const T* x, i64 n, double* partial) {
    __shared__ double smem[32];
    double acc = 0.0;
    ZE_GRID_LOOP(i, n) {
        const double v = (double)ZeType<T>::load(x[i]);
        acc += v * v;
    }
    acc = ze_group_reduce(acc, (int)blockDim.x, smem, ZeSum());
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

extern "C" __global__ __launch_bounds__(256) void sumsq_f32(const float* x, i64 n, double* partial) { ze_sumsq(x, n, partial); }
extern "C" __global__ __launch_bounds__(256) void sumsq_f64(const double* x, i64 n, double* partial) { ze_sumsq(x, n, partial); }
extern "C" __global__ __launch_bounds__(256) void sumsq_bf16(const ze_bf16* x, i64 n, double* partial) { ze_sumsq(x, n, partial); }
extern "C" __global__ __launch_bounds__(256) void sumsq_f16(const ze_f16* x, i64 n, double* partial) { ze_sumsq(x, n, partial); }
