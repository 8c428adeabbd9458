// The source of the CUBIN fixtures of package cubin's tests. Regenerate
// them with: go test ./gpu/cubin -run TestFixtures -update (needs NVRTC).

// bounded: blocks of at most 1024 threads, so at most 64 registers.
extern "C" __global__ __launch_bounds__(1024) void bounded(float* x, const float* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        x[i] = y[i] * 2.0f + 1.0f;
    }
}

// spills: a local array indexed at run time lives in the stack frame.
extern "C" __global__ void spills(float* x, const int* idx, int n) {
    float a[32];
    for (int i = 0; i < 32; ++i) a[i] = x[i] * (float)i;
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = a[idx[i] & 31];
}

// many: 48 doubles live at once (96 registers), compiled with no bound.
extern "C" __global__ void many(double* x, long long n) {
    double acc[48];
    #pragma unroll
    for (int k = 0; k < 48; ++k) acc[k] = x[k] + k;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const double v = x[i];
        #pragma unroll
        for (int k = 0; k < 48; ++k) acc[k] = acc[k] * v + acc[47 - k];
    }
    double s = 0;
    #pragma unroll
    for (int k = 0; k < 48; ++k) s += acc[k] * (k + 1);
    x[threadIdx.x] = s;
}
