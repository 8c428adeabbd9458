// index.cu: IndexSelect, Gather (moves), IndexAdd, ScatterAdd
// (accumulations); the CPU reference is engine/cpu/index.go.
//
// Indices are int64. index_check runs first and records the first index out
// of [0, extent), the lowest row-major position p in the index tensor, as ~p
// in flag[0] (the maximum of ~p over the bad positions, so that 0, which the
// host fills in before, means "none"); the host reads it back after. The
// other kernels do nothing when the flag is set, so that an error leaves the
// destination as it was, as on the CPU.
//
// The moves walk the destination (IndexSelect) or the index (Gather) with
// the operands (dst, src with stride 0 along axis, index with stride 0 where
// it does not vary); the source element is src[off + index·sa].
//
// The accumulations walk the source (IndexAdd) or the index (ScatterAdd)
// with the operands (src, dst with stride 0 along axis, index) and add into
// dst[off + index·da] with atomics, because several source elements may hit
// one destination element. Float additions therefore happen in an order
// that varies from run to run (the CPU adds in index order): results can
// differ from the CPU's, and between runs, by the rounding of a sum. int64
// sums are exact. bfloat16/float16 destinations are accumulated in a float32
// copy (the *_bf16/*_f16 kernels add half sources into a float buffer) and
// rounded back once by the caller: the CPU widens the same way, and adding
// into the 16-bit values directly (a 32-bit CAS loop) would round at every
// addition.

extern "C" __global__ __launch_bounds__(256) void index_check(ZeLayout L, const i64* index, i64 extent, u64* flag) {
    u64 bad = 0;
    ZE_GRID_LOOP(i, L.numel) {
        i64 off[1];
        ze_offsets<1>(L, i, off);
        if ((u64)index[off[0]] >= (u64)extent && ~(u64)i > bad) bad = ~(u64)i;
    }
    bad = ze_warp_reduce(bad, ZeMaxInt());
    if ((threadIdx.x & 31) == 0 && bad != 0) atomicMax(flag, bad);
}

template <class T>
__device__ __forceinline__ void ze_index_gather(const ZeLayout& L, T* dst, const T* src, const i64* index, i64 sa, const u64* flag) {
    if (*flag != 0) return;
    ZE_GRID_LOOP(i, L.numel) {
        i64 off[3];
        ze_offsets<3>(L, i, off);
        dst[off[0]] = src[off[1] + index[off[2]] * sa];
    }
}
extern "C" __global__ __launch_bounds__(256) void index_gather_s1(ZeLayout L, unsigned char* dst, const unsigned char* src, const i64* index, i64 sa, const u64* flag) {
    ze_index_gather(L, dst, src, index, sa, flag);
}
extern "C" __global__ __launch_bounds__(256) void index_gather_s2(ZeLayout L, unsigned short* dst, const unsigned short* src, const i64* index, i64 sa, const u64* flag) {
    ze_index_gather(L, dst, src, index, sa, flag);
}
extern "C" __global__ __launch_bounds__(256) void index_gather_s4(ZeLayout L, unsigned* dst, const unsigned* src, const i64* index, i64 sa, const u64* flag) {
    ze_index_gather(L, dst, src, index, sa, flag);
}
extern "C" __global__ __launch_bounds__(256) void index_gather_s8(ZeLayout L, u64* dst, const u64* src, const i64* index, i64 sa, const u64* flag) {
    ze_index_gather(L, dst, src, index, sa, flag);
}

// index_add_<src type>: dst has the accumulator type A (float for float32
// and the 16-bit types, double, int64).
template <class T, class A>
__device__ __forceinline__ void ze_index_add(const ZeLayout& L, A* dst, const T* src, const i64* index, i64 da, const u64* flag) {
    if (*flag != 0) return;
    ZE_GRID_LOOP(i, L.numel) {
        i64 off[3];
        ze_offsets<3>(L, i, off);
        ze_atomic_add(&dst[off[1] + index[off[2]] * da], (A)ZeType<T>::load(src[off[0]]));
    }
}
extern "C" __global__ __launch_bounds__(256) void index_add_f32(ZeLayout L, float* dst, const float* src, const i64* index, i64 da, const u64* flag) {
    ze_index_add(L, dst, src, index, da, flag);
}
extern "C" __global__ __launch_bounds__(256) void index_add_f64(ZeLayout L, double* dst, const double* src, const i64* index, i64 da, const u64* flag) {
    ze_index_add(L, dst, src, index, da, flag);
}
extern "C" __global__ __launch_bounds__(256) void index_add_i64(ZeLayout L, i64* dst, const i64* src, const i64* index, i64 da, const u64* flag) {
    ze_index_add(L, dst, src, index, da, flag);
}
extern "C" __global__ __launch_bounds__(256) void index_add_bf16(ZeLayout L, float* dst, const ze_bf16* src, const i64* index, i64 da, const u64* flag) {
    ze_index_add(L, dst, src, index, da, flag);
}
extern "C" __global__ __launch_bounds__(256) void index_add_f16(ZeLayout L, float* dst, const ze_f16* src, const i64* index, i64 da, const u64* flag) {
    ze_index_add(L, dst, src, index, da, flag);
}
