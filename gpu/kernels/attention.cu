// attention.cu: the row work of Attention and AttentionBackward; the
// products (q·kᵀ, p·v, and those of the backward) are batched GEMMs issued
// by the Go side. The CPU reference is engine/cpu/attention.go.
//
// Scores arrive already scaled (the GEMM's alpha is the scale, as on the
// CPU). Both kernels work in place on contiguous rows of tk elements, rows =
// B·H·Tq, with a group of threads per row (see ze_group_reduce). The 16-bit
// types are widened to float32 buffers by the caller, as the CPU does, so
// only float and double kernels exist.

// attn_softmax: row r is query i = r mod tq; it sees l = min(i+1, tk) keys
// under the causal mask (all tk otherwise). The first l entries become their
// softmax (vmath.SoftmaxRow / cpu.softmaxRow64), the rest exactly 0.
template <class T> __device__ __forceinline__ void ze_attn_softmax(T* p, i64 rows, i64 tq, i64 tk, int causal, int group) {
    typedef typename ZeType<T>::C C;
    __shared__ C smax[32];
    __shared__ double ssum[32];
    const int lane = threadIdx.x % group;
    ZE_ROW_LOOP(row, rows, group) {
        T* pr = p + row * tk;
        const i64 l = causal ? ze_min(row % tq + 1, tk) : tk;
        ze_softmax_row<T>(pr, pr, l, false, lane, group, smax, ssum);
        for (i64 j = l + lane; j < tk; j += group) pr[j] = (T)0;
    }
}

// attn_softmax_bwd: dS = P⊙(dP − Σ dP⊙P) in place over dP, the whole row.
// Masked entries have P = 0 and so get 0 (up to sign), and add nothing to
// the sum, which makes this the CPU's computation over the visible keys.
template <class T> __device__ __forceinline__ void ze_attn_softmax_bwd(T* ds, const T* p, i64 rows, i64 tk, int group) {
    __shared__ double ssum[32];
    const int lane = threadIdx.x % group;
    ZE_ROW_LOOP(row, rows, group) {
        ze_softmax_bwd_row<T>(ds + row * tk, ds + row * tk, p + row * tk, tk, false, lane, group, ssum);
    }
}

extern "C" __global__ __launch_bounds__(1024) void attn_softmax_f32(float* p, i64 rows, i64 tq, i64 tk, int causal, int group) {
    ze_attn_softmax(p, rows, tq, tk, causal, group);
}
extern "C" __global__ __launch_bounds__(1024) void attn_softmax_f64(double* p, i64 rows, i64 tq, i64 tk, int causal, int group) {
    ze_attn_softmax(p, rows, tq, tk, causal, group);
}
extern "C" __global__ __launch_bounds__(1024) void attn_softmax_bwd_f32(float* ds, const float* p, i64 rows, i64 tk, int group) {
    ze_attn_softmax_bwd(ds, p, rows, tk, group);
}
extern "C" __global__ __launch_bounds__(1024) void attn_softmax_bwd_f64(double* ds, const double* p, i64 rows, i64 tk, int group) {
    ze_attn_softmax_bwd(ds, p, rows, tk, group);
}
