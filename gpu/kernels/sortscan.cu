// sortscan.cu: Scan (cumulative sums and products along one axis) and Sort
// (along one axis, with int64 positions); the CPU reference is
// engine/cpu/sortscan.go.
//
// Both work on rows: the elements of the operands along the axis, at every
// position of the other dimensions. A ZeLayout walks the rows (the
// operands' shape and strides without the axis); the axis' extent n and
// each operand's stride along it are separate parameters.

enum { SCAN_CUMSUM = 0, SCAN_CUMPROD = 1 };

// ---------------------------------------------------------------------------
// Scan. Accumulation is the CPU's: double for every float type (rounded to
// the element type at each output, through float for the 16-bit types, as
// the CPU widens them to float32), int64 wrapping for int64.
//
// group 1: a thread per row scans it in order, the CPU's loop, bit for bit.
// group == blockDim.x: a block per row scans tiles of blockDim.x elements
// (a Hillis-Steele scan in shared memory) and carries each tile's total into
// the next, for long rows; its sums associate differently from the CPU's,
// so results differ from it by the rounding of double accumulators.

template <class A, int OP> struct ZeScanOp;
template <> struct ZeScanOp<double, SCAN_CUMSUM> {
    static __device__ __forceinline__ double init() { return 0.0; }
    static __device__ __forceinline__ double f(double a, double b) { return ze_add(a, b); }
};
template <> struct ZeScanOp<double, SCAN_CUMPROD> {
    static __device__ __forceinline__ double init() { return 1.0; }
    static __device__ __forceinline__ double f(double a, double b) { return ze_mul(a, b); }
};
template <> struct ZeScanOp<i64, SCAN_CUMSUM> {
    static __device__ __forceinline__ i64 init() { return 0; }
    static __device__ __forceinline__ i64 f(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
};
template <> struct ZeScanOp<i64, SCAN_CUMPROD> {
    static __device__ __forceinline__ i64 init() { return 1; }
    static __device__ __forceinline__ i64 f(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
};

#define ZE_SCAN_BLOCK 256  // the kernels' __launch_bounds__: the largest tile

template <class T, int OP>
__device__ __forceinline__ void ze_scan(const ZeLayout& L, T* dst, const T* src, i64 n, i64 ds, i64 ss, int reverse, int group) {
    typedef ZeAcc<T> Acc;
    typedef typename Acc::A A;
    typedef ZeScanOp<A, OP> S;
    if (reverse) {  // walk each row from its last element
        dst += (n - 1) * ds;
        src += (n - 1) * ss;
        ds = -ds;
        ss = -ss;
    }
    if (group == 1) {
        ZE_GRID_LOOP(row, L.numel) {
            i64 off[2];
            ze_offsets<2>(L, row, off);
            T* d = dst + off[0];
            const T* s = src + off[1];
            A acc = S::init();
            for (i64 j = 0; j < n; ++j) {
                acc = S::f(acc, Acc::in(s[j * ss]));
                d[j * ds] = Acc::out(acc);
            }
        }
        return;
    }
    __shared__ A part[ZE_SCAN_BLOCK];
    const int t = threadIdx.x;
    const int bs = blockDim.x;
    for (i64 row = blockIdx.x; row < L.numel; row += gridDim.x) {  // the whole block takes a row
        i64 off[2];
        ze_offsets<2>(L, row, off);
        T* d = dst + off[0];
        const T* s = src + off[1];
        A carry = S::init();
        for (i64 base = 0; base < n; base += bs) {
            const i64 j = base + t;
            A v = j < n ? Acc::in(s[j * ss]) : S::init();
            part[t] = v;
            __syncthreads();
            for (int o = 1; o < bs; o <<= 1) {
                const A before = t >= o ? part[t - o] : S::init();
                __syncthreads();
                if (t >= o) part[t] = S::f(before, part[t]);
                __syncthreads();
            }
            if (j < n) d[j * ds] = Acc::out(S::f(carry, part[t]));
            carry = S::f(carry, part[bs - 1]);
            __syncthreads();  // part is rewritten by the next tile
        }
    }
}

template <class T>
__device__ __forceinline__ void ze_scan_op(const ZeLayout& L, T* dst, const T* src, i64 n, i64 ds, i64 ss, int op, int reverse,
                                           int group) {
    if (op == SCAN_CUMPROD)
        ze_scan<T, SCAN_CUMPROD>(L, dst, src, n, ds, ss, reverse, group);
    else
        ze_scan<T, SCAN_CUMSUM>(L, dst, src, n, ds, ss, reverse, group);
}

extern "C" __global__ __launch_bounds__(256) void scan_f32(ZeLayout L, float* dst, const float* src, i64 n, i64 ds, i64 ss, int op, int reverse, int group) {
    ze_scan_op(L, dst, src, n, ds, ss, op, reverse, group);
}
extern "C" __global__ __launch_bounds__(256) void scan_f64(ZeLayout L, double* dst, const double* src, i64 n, i64 ds, i64 ss, int op, int reverse, int group) {
    ze_scan_op(L, dst, src, n, ds, ss, op, reverse, group);
}
extern "C" __global__ __launch_bounds__(256) void scan_bf16(ZeLayout L, ze_bf16* dst, const ze_bf16* src, i64 n, i64 ds, i64 ss, int op, int reverse, int group) {
    ze_scan_op(L, dst, src, n, ds, ss, op, reverse, group);
}
extern "C" __global__ __launch_bounds__(256) void scan_f16(ZeLayout L, ze_f16* dst, const ze_f16* src, i64 n, i64 ds, i64 ss, int op, int reverse, int group) {
    ze_scan_op(L, dst, src, n, ds, ss, op, reverse, group);
}
extern "C" __global__ __launch_bounds__(256) void scan_i64(ZeLayout L, i64* dst, const i64* src, i64 n, i64 ds, i64 ss, int op, int reverse, int group) {
    ze_scan_op(L, dst, src, n, ds, ss, op, reverse, group);
}

// ---------------------------------------------------------------------------
// Sort: a bitonic sorting network over each row padded to p2, the power of
// two at or above n, in scratch arrays of keys and positions (rows·p2 of
// each, row r at r·p2).
//
// The network compares (key, position) pairs with ze_sort_before, a total
// order: NaN above every number, equal keys by position, the padding
// (positions ≥ n) after everything. With no two elements equal the sorted
// result is unique, so it is what the CPU's sort gives, whatever network
// produced it: a stable sort, NaN last ascending and first descending.
//
//   sort_init   loads the keys (float for float32 and the 16-bit types,
//               which convert exactly; double; int64) and positions 0..p2-1;
//   sort_tile   runs the stages of the network whose compared elements lie
//               within one tile of ZE_SORT_TILE elements, in shared memory;
//   sort_step   runs one stage across tiles, in global memory;
//   sort_write  moves each row's elements from src in sorted order (the
//               bits as they are: a move, by element size) and writes the
//               positions.
//
// The host runs sort_tile for every stage up to min(p2, ZE_SORT_TILE), then,
// for each larger merge size k, sort_step for the distances j ≥ ZE_SORT_TILE
// and sort_tile for the rest. Rows of any length sort this way; a row no
// longer than a tile is sorted by one launch, several rows to a tile.

#define ZE_SORT_TILE 2048  // elements per tile; keys and positions of double fill 32 KiB of shared memory

// ze_sort_before reports whether (a, ia) goes before (b, ib).
template <class K> __device__ __forceinline__ bool ze_sort_before(K a, i64 ia, K b, i64 ib, i64 n, int desc) {
    const bool pa = ia >= n, pb = ib >= n;
    if (pa || pb) return pa == pb ? ia < ib : pb;
    const bool an = a != a, bn = b != b;
    if (an || bn) return an == bn ? ia < ib : (desc ? an : bn);
    if (a < b) return !desc;
    if (b < a) return desc;
    return ia < ib;  // +0 and -0 are equal
}

// ze_sort_cx orders elements i < l of the network, the one that goes
// first at i in an ascending stage (asc), at l in a descending one.
template <class K> __device__ __forceinline__ void ze_sort_cx(K* keys, i64* idx, i64 i, i64 l, bool asc, i64 n, int desc) {
    const K a = keys[i], b = keys[l];
    const i64 ia = idx[i], ib = idx[l];
    if (asc ? ze_sort_before(b, ib, a, ia, n, desc) : ze_sort_before(a, ia, b, ib, n, desc)) {
        keys[i] = b;
        keys[l] = a;
        idx[i] = ib;
        idx[l] = ia;
    }
}

template <class T>
__device__ __forceinline__ void ze_sort_init(const ZeLayout& L, const T* src, i64 n, i64 ss, i64 p2, typename ZeType<T>::C* keys,
                                             i64* idx) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C K;
    ZE_GRID_LOOP(e, L.numel * p2) {
        const i64 row = e / p2;
        const i64 p = e - row * p2;
        K key = (K)0;
        if (p < n) {
            i64 off[1];
            ze_offsets<1>(L, row, off);
            key = Ty::load(src[off[0] + p * ss]);
        }
        keys[e] = key;
        idx[e] = p;
    }
}

// ze_sort_tile runs, on each tile, the stages of merge sizes kmin..kmax
// (powers of two) at the distances below the tile size. The direction of a
// comparison comes from the element's position in its row, so that a tile
// holding several short rows sorts each of them ascending at its last
// stage (k == p2).
template <class K>
__device__ __forceinline__ void ze_sort_tile(K* keys, i64* idx, i64 total, i64 n, i64 p2, i64 kmin, i64 kmax, int desc) {
    __shared__ K sk[ZE_SORT_TILE];
    __shared__ i64 si[ZE_SORT_TILE];
    const i64 tiles = (total + ZE_SORT_TILE - 1) / ZE_SORT_TILE;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 base = tile * ZE_SORT_TILE;
        const i64 cnt = ze_min((i64)ZE_SORT_TILE, total - base);
        for (i64 i = threadIdx.x; i < cnt; i += blockDim.x) {
            sk[i] = keys[base + i];
            si[i] = idx[base + i];
        }
        __syncthreads();
        for (i64 k = kmin; k <= kmax; k <<= 1) {
            for (i64 j = ze_min(k >> 1, (i64)(ZE_SORT_TILE / 2)); j > 0; j >>= 1) {
                for (i64 q = threadIdx.x; q < ZE_SORT_TILE / 2; q += blockDim.x) {
                    const i64 i = 2 * j * (q / j) + q % j;
                    const i64 l = i + j;
                    if (l < cnt) ze_sort_cx(sk, si, i, l, (((base + i) & (p2 - 1)) & k) == 0, n, desc);
                }
                __syncthreads();
            }
        }
        for (i64 i = threadIdx.x; i < cnt; i += blockDim.x) {
            keys[base + i] = sk[i];
            idx[base + i] = si[i];
        }
        __syncthreads();  // sk and si are reloaded for the next tile
    }
}

// ze_sort_step runs the stage (k, j) over every pair of the network.
template <class K> __device__ __forceinline__ void ze_sort_step(K* keys, i64* idx, i64 total, i64 n, i64 p2, i64 k, i64 j, int desc) {
    ZE_GRID_LOOP(q, total / 2) {
        const i64 i = 2 * j * (q / j) + q % j;
        ze_sort_cx(keys, idx, i, i + j, ((i & (p2 - 1)) & k) == 0, n, desc);
    }
}

// ze_sort_write: L walks the rows of (values, indices, src).
template <class T>
__device__ __forceinline__ void ze_sort_write(const ZeLayout& L, T* values, i64* indices, const T* src, i64 n, i64 vs, i64 is, i64 ss,
                                              i64 p2, const i64* idx) {
    ZE_GRID_LOOP(e, L.numel * n) {
        const i64 row = e / n;
        const i64 j = e - row * n;
        i64 off[3];
        ze_offsets<3>(L, row, off);
        const i64 at = idx[row * p2 + j];
        values[off[0] + j * vs] = src[off[2] + at * ss];
        indices[off[1] + j * is] = at;
    }
}

extern "C" __global__ __launch_bounds__(256) void sort_init_f32(ZeLayout L, const float* src, i64 n, i64 ss, i64 p2, float* keys, i64* idx) {
    ze_sort_init(L, src, n, ss, p2, keys, idx);
}
extern "C" __global__ __launch_bounds__(256) void sort_init_f64(ZeLayout L, const double* src, i64 n, i64 ss, i64 p2, double* keys, i64* idx) {
    ze_sort_init(L, src, n, ss, p2, keys, idx);
}
extern "C" __global__ __launch_bounds__(256) void sort_init_bf16(ZeLayout L, const ze_bf16* src, i64 n, i64 ss, i64 p2, float* keys, i64* idx) {
    ze_sort_init(L, src, n, ss, p2, keys, idx);
}
extern "C" __global__ __launch_bounds__(256) void sort_init_f16(ZeLayout L, const ze_f16* src, i64 n, i64 ss, i64 p2, float* keys, i64* idx) {
    ze_sort_init(L, src, n, ss, p2, keys, idx);
}
extern "C" __global__ __launch_bounds__(256) void sort_init_i64(ZeLayout L, const i64* src, i64 n, i64 ss, i64 p2, i64* keys, i64* idx) {
    ze_sort_init(L, src, n, ss, p2, keys, idx);
}

extern "C" __global__ __launch_bounds__(256) void sort_tile_f32(float* keys, i64* idx, i64 total, i64 n, i64 p2, i64 kmin, i64 kmax, int desc) {
    ze_sort_tile(keys, idx, total, n, p2, kmin, kmax, desc);
}
extern "C" __global__ __launch_bounds__(256) void sort_tile_f64(double* keys, i64* idx, i64 total, i64 n, i64 p2, i64 kmin, i64 kmax, int desc) {
    ze_sort_tile(keys, idx, total, n, p2, kmin, kmax, desc);
}
extern "C" __global__ __launch_bounds__(256) void sort_tile_i64(i64* keys, i64* idx, i64 total, i64 n, i64 p2, i64 kmin, i64 kmax, int desc) {
    ze_sort_tile(keys, idx, total, n, p2, kmin, kmax, desc);
}

extern "C" __global__ __launch_bounds__(256) void sort_step_f32(float* keys, i64* idx, i64 total, i64 n, i64 p2, i64 k, i64 j, int desc) {
    ze_sort_step(keys, idx, total, n, p2, k, j, desc);
}
extern "C" __global__ __launch_bounds__(256) void sort_step_f64(double* keys, i64* idx, i64 total, i64 n, i64 p2, i64 k, i64 j, int desc) {
    ze_sort_step(keys, idx, total, n, p2, k, j, desc);
}
extern "C" __global__ __launch_bounds__(256) void sort_step_i64(i64* keys, i64* idx, i64 total, i64 n, i64 p2, i64 k, i64 j, int desc) {
    ze_sort_step(keys, idx, total, n, p2, k, j, desc);
}

extern "C" __global__ __launch_bounds__(256) void sort_write_s2(ZeLayout L, unsigned short* values, i64* indices, const unsigned short* src, i64 n,
                                                                i64 vs, i64 is, i64 ss, i64 p2, const i64* idx) {
    ze_sort_write(L, values, indices, src, n, vs, is, ss, p2, idx);
}
extern "C" __global__ __launch_bounds__(256) void sort_write_s4(ZeLayout L, unsigned* values, i64* indices, const unsigned* src, i64 n,
                                                                i64 vs, i64 is, i64 ss, i64 p2, const i64* idx) {
    ze_sort_write(L, values, indices, src, n, vs, is, ss, p2, idx);
}
extern "C" __global__ __launch_bounds__(256) void sort_write_s8(ZeLayout L, u64* values, i64* indices, const u64* src, i64 n,
                                                                i64 vs, i64 is, i64 ss, i64 p2, const i64* idx) {
    ze_sort_write(L, values, indices, src, n, vs, is, ss, p2, idx);
}
