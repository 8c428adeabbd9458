// elementwise.cu: Copy (with conversion), Fill, Unary, ActivationBackward,
// Binary (comparisons included) and Where; the CPU reference is
// engine/cpu/copy.go and engine/cpu/elementwise.go (with engine/cpu/vmath for
// the float32 formulas).
//
// Every kernel walks a ZeLayout of its operands (dst first). Op codes are the
// numeric values of device.UnaryOp, device.ActivationOp and device.BinaryOp.
//
// Float precision. float32, bfloat16 and float16 compute in float (the CPU
// widens the 16-bit types to float32 and rounds once), float64 in double,
// each with the CPU's formulas for that width: vmath's accuracy-preserving
// forms for float32 (GELU through erfc, sigmoid that never overflows), the
// plain PyTorch forms of engine/cpu/elementwise.go for float64. The float
// transcendentals are CUDA's (within 1-4 ulp of the correctly rounded value,
// where the CPU's are within 0.5-2 ulp); pow and rsqrt are computed in double
// and rounded once, as the CPU does.

enum {
    UN_NEG = 0,
    UN_EXP = 1,
    UN_LOG = 2,
    UN_SQRT = 3,
    UN_RSQRT = 4,
    UN_ABS = 5,
    UN_SIGN = 6,
    UN_RELU = 7,
    UN_GELU = 8,
    UN_GELU_TANH = 9,
    UN_SILU = 10,
    UN_TANH = 11,
    UN_SIGMOID = 12,
    UN_ADD_SCALAR = 13,
    UN_MUL_SCALAR = 14,
    UN_POW_SCALAR = 15,
    UN_RSUB_SCALAR = 16,
    UN_RDIV_SCALAR = 17,
    UN_SQUARE = 18,
    UN_RECIPROCAL = 19,
    UN_SIN = 20,
    UN_COS = 21,
    UN_ERF = 22
};

enum {
    ACT_RELU_BACKWARD = 0,
    ACT_GELU_BACKWARD = 1,
    ACT_GELU_TANH_BACKWARD = 2,
    ACT_SILU_BACKWARD = 3,
    ACT_TANH_BACKWARD = 4,
    ACT_SIGMOID_BACKWARD = 5
};

enum {
    BIN_ADD = 0,
    BIN_SUB = 1,
    BIN_MUL = 2,
    BIN_DIV = 3,
    BIN_POW = 4,
    BIN_MAXIMUM = 5,
    BIN_MINIMUM = 6,
    BIN_EQ = 7,
    BIN_NE = 8,
    BIN_LT = 9,
    BIN_LE = 10,
    BIN_GT = 11,
    BIN_GE = 12
};

// ---------------------------------------------------------------------------
// Walk helpers: apply f to the loaded operands of every element. The ops
// with several variants (Unary, ActivationBackward, Binary, comparisons)
// specialise a loop per variant for flat walks (one dimension after
// coalescing: contiguous operands, broadcast scalars), the common and
// fast case, and run one loop that dispatches per element for strided
// walks: a specialised copy of the strided indexing per variant would
// multiply the module's code, and its compile time, for little gain.

template <class D, class S, class F>
__device__ __forceinline__ void ze_map1(const ZeLayout& L, D* dst, const S* src, F f) {
    ZE_GRID_LOOP(i, L.numel) {
        i64 off[2];
        ze_offsets<2>(L, i, off);
        dst[off[0]] = f(src[off[1]]);
    }
}

template <class D, class A, class B, class F>
__device__ __forceinline__ void ze_map2(const ZeLayout& L, D* dst, const A* a, const B* b, F f) {
    ZE_GRID_LOOP(i, L.numel) {
        i64 off[3];
        ze_offsets<3>(L, i, off);
        dst[off[0]] = f(a[off[1]], b[off[2]]);
    }
}

// Flat walks (L.ndim == 1).
template <class D, class S, class F>
__device__ __forceinline__ void ze_flat1(const ZeLayout& L, D* dst, const S* src, F f) {
    const i64 sd = L.stride[0][0], ss = L.stride[1][0];
    ZE_GRID_LOOP(i, L.numel) dst[i * sd] = f(src[i * ss]);
}

template <class D, class A, class B, class F>
__device__ __forceinline__ void ze_flat2(const ZeLayout& L, D* dst, const A* a, const B* b, F f) {
    const i64 sd = L.stride[0][0], sa = L.stride[1][0], sb = L.stride[2][0];
    ZE_GRID_LOOP(i, L.numel) dst[i * sd] = f(a[i * sa], b[i * sb]);
}

// ---------------------------------------------------------------------------
// Copy, conversion, fill, where: moves by element size where no arithmetic is
// involved.

template <class T> __device__ __forceinline__ void ze_copy(const ZeLayout& L, T* dst, const T* src) {
    ze_map1(L, dst, src, [](T v) { return v; });
}
extern "C" __global__ __launch_bounds__(256) void copy_s1(ZeLayout L, unsigned char* dst, const unsigned char* src) { ze_copy(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void copy_s2(ZeLayout L, unsigned short* dst, const unsigned short* src) { ze_copy(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void copy_s4(ZeLayout L, unsigned* dst, const unsigned* src) { ze_copy(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void copy_s8(ZeLayout L, u64* dst, const u64* src) { ze_copy(L, dst, src); }

// ZeConv converts one element as engine/cpu/copy.go does: through float64
// (load, then store). Between float32 and the 16-bit floats the float64 step
// is exact, so those pairs skip it.
template <class D, class S> struct ZeConv {
    static __device__ __forceinline__ D conv(S v) { return ZeFromF64<D>::conv(ze_to_f64(v)); }
};
template <> struct ZeConv<ze_bf16, float> {
    static __device__ __forceinline__ ze_bf16 conv(float v) { return ZeType<ze_bf16>::store(v); }
};
template <> struct ZeConv<ze_f16, float> {
    static __device__ __forceinline__ ze_f16 conv(float v) { return ZeType<ze_f16>::store(v); }
};
template <> struct ZeConv<float, ze_bf16> {
    static __device__ __forceinline__ float conv(ze_bf16 v) { return ZeType<ze_bf16>::load(v); }
};
template <> struct ZeConv<float, ze_f16> {
    static __device__ __forceinline__ float conv(ze_f16 v) { return ZeType<ze_f16>::load(v); }
};
template <> struct ZeConv<ze_bf16, ze_f16> {
    static __device__ __forceinline__ ze_bf16 conv(ze_f16 v) { return ZeType<ze_bf16>::store(ZeType<ze_f16>::load(v)); }
};
template <> struct ZeConv<ze_f16, ze_bf16> {
    static __device__ __forceinline__ ze_f16 conv(ze_bf16 v) { return ZeType<ze_f16>::store(ZeType<ze_bf16>::load(v)); }
};

// convert_<dst>_<src>: dst = src converted (dst and src types differ).
template <class D, class S> __device__ __forceinline__ void ze_convert(const ZeLayout& L, D* dst, const S* src) {
    ze_map1(L, dst, src, [](S v) { return ZeConv<D, S>::conv(v); });
}
extern "C" __global__ __launch_bounds__(256) void convert_f32_f64(ZeLayout L, float* dst, const double* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f32_bf16(ZeLayout L, float* dst, const ze_bf16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f32_f16(ZeLayout L, float* dst, const ze_f16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f32_i64(ZeLayout L, float* dst, const i64* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f32_i32(ZeLayout L, float* dst, const int* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f32_u8(ZeLayout L, float* dst, const unsigned char* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f32_b(ZeLayout L, float* dst, const ze_bool* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f64_f32(ZeLayout L, double* dst, const float* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f64_bf16(ZeLayout L, double* dst, const ze_bf16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f64_f16(ZeLayout L, double* dst, const ze_f16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f64_i64(ZeLayout L, double* dst, const i64* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f64_i32(ZeLayout L, double* dst, const int* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f64_u8(ZeLayout L, double* dst, const unsigned char* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f64_b(ZeLayout L, double* dst, const ze_bool* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_bf16_f32(ZeLayout L, ze_bf16* dst, const float* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_bf16_f64(ZeLayout L, ze_bf16* dst, const double* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_bf16_f16(ZeLayout L, ze_bf16* dst, const ze_f16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_bf16_i64(ZeLayout L, ze_bf16* dst, const i64* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_bf16_i32(ZeLayout L, ze_bf16* dst, const int* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_bf16_u8(ZeLayout L, ze_bf16* dst, const unsigned char* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_bf16_b(ZeLayout L, ze_bf16* dst, const ze_bool* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f16_f32(ZeLayout L, ze_f16* dst, const float* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f16_f64(ZeLayout L, ze_f16* dst, const double* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f16_bf16(ZeLayout L, ze_f16* dst, const ze_bf16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f16_i64(ZeLayout L, ze_f16* dst, const i64* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f16_i32(ZeLayout L, ze_f16* dst, const int* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f16_u8(ZeLayout L, ze_f16* dst, const unsigned char* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_f16_b(ZeLayout L, ze_f16* dst, const ze_bool* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i64_f32(ZeLayout L, i64* dst, const float* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i64_f64(ZeLayout L, i64* dst, const double* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i64_bf16(ZeLayout L, i64* dst, const ze_bf16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i64_f16(ZeLayout L, i64* dst, const ze_f16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i64_i32(ZeLayout L, i64* dst, const int* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i64_u8(ZeLayout L, i64* dst, const unsigned char* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i64_b(ZeLayout L, i64* dst, const ze_bool* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i32_f32(ZeLayout L, int* dst, const float* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i32_f64(ZeLayout L, int* dst, const double* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i32_bf16(ZeLayout L, int* dst, const ze_bf16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i32_f16(ZeLayout L, int* dst, const ze_f16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i32_i64(ZeLayout L, int* dst, const i64* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i32_u8(ZeLayout L, int* dst, const unsigned char* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_i32_b(ZeLayout L, int* dst, const ze_bool* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_u8_f32(ZeLayout L, unsigned char* dst, const float* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_u8_f64(ZeLayout L, unsigned char* dst, const double* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_u8_bf16(ZeLayout L, unsigned char* dst, const ze_bf16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_u8_f16(ZeLayout L, unsigned char* dst, const ze_f16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_u8_i64(ZeLayout L, unsigned char* dst, const i64* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_u8_i32(ZeLayout L, unsigned char* dst, const int* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_u8_b(ZeLayout L, unsigned char* dst, const ze_bool* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_b_f32(ZeLayout L, ze_bool* dst, const float* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_b_f64(ZeLayout L, ze_bool* dst, const double* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_b_bf16(ZeLayout L, ze_bool* dst, const ze_bf16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_b_f16(ZeLayout L, ze_bool* dst, const ze_f16* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_b_i64(ZeLayout L, ze_bool* dst, const i64* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_b_i32(ZeLayout L, ze_bool* dst, const int* src) { ze_convert(L, dst, src); }
extern "C" __global__ __launch_bounds__(256) void convert_b_u8(ZeLayout L, ze_bool* dst, const unsigned char* src) { ze_convert(L, dst, src); }

// fill_<size>: every element gets the bit pattern bits (the Go side converts
// the value to the element type as Copy would).
template <class T> __device__ __forceinline__ void ze_fill(const ZeLayout& L, T* dst, u64 bits) {
    const T v = (T)bits;
    ZE_GRID_LOOP(i, L.numel) {
        i64 off[1];
        ze_offsets<1>(L, i, off);
        dst[off[0]] = v;
    }
}
extern "C" __global__ __launch_bounds__(256) void fill_s1(ZeLayout L, unsigned char* dst, u64 bits) { ze_fill(L, dst, bits); }
extern "C" __global__ __launch_bounds__(256) void fill_s2(ZeLayout L, unsigned short* dst, u64 bits) { ze_fill(L, dst, bits); }
extern "C" __global__ __launch_bounds__(256) void fill_s4(ZeLayout L, unsigned* dst, u64 bits) { ze_fill(L, dst, bits); }
extern "C" __global__ __launch_bounds__(256) void fill_s8(ZeLayout L, u64* dst, u64 bits) { ze_fill(L, dst, bits); }

// where_<size>: dst = cond ? a : b, cond a bool (any non-zero byte is true).
template <class T>
__device__ __forceinline__ void ze_where(const ZeLayout& L, T* dst, const unsigned char* cond, const T* a, const T* b) {
    ZE_GRID_LOOP(i, L.numel) {
        i64 off[4];
        ze_offsets<4>(L, i, off);
        dst[off[0]] = cond[off[1]] != 0 ? a[off[2]] : b[off[3]];
    }
}
extern "C" __global__ __launch_bounds__(256) void where_s1(ZeLayout L, unsigned char* dst, const unsigned char* cond, const unsigned char* a, const unsigned char* b) {
    ze_where(L, dst, cond, a, b);
}
extern "C" __global__ __launch_bounds__(256) void where_s2(ZeLayout L, unsigned short* dst, const unsigned char* cond, const unsigned short* a, const unsigned short* b) {
    ze_where(L, dst, cond, a, b);
}
extern "C" __global__ __launch_bounds__(256) void where_s4(ZeLayout L, unsigned* dst, const unsigned char* cond, const unsigned* a, const unsigned* b) {
    ze_where(L, dst, cond, a, b);
}
extern "C" __global__ __launch_bounds__(256) void where_s8(ZeLayout L, u64* dst, const unsigned char* cond, const u64* a, const u64* b) {
    ze_where(L, dst, cond, a, b);
}

// ---------------------------------------------------------------------------
// Scalar functions. The float overloads follow vmath (generic.go): its
// constants are float32 roundings of PyTorch's.

#define ZE_SQRT1_2F 0.70710678118654752f     // float32(√2/2)
#define ZE_INV_SQRT_2PI_F 0.39894228040143268f  // float32(2/√π·√2/2·½)
#define ZE_BETA_F 0.79788456080286536f       // float32(√(2/π))
#define ZE_KAPPA_F 0.044715f

// 1/(1+e^-x) without overflow: e^x/(1+e^x) for negative x.
__device__ __forceinline__ float ze_sigmoid(float x) {
    if (x >= 0.0f) return ze_div(1.0f, 1.0f + expf(-x));
    const float e = expf(x);
    return ze_div(e, 1.0f + e);
}
__device__ __forceinline__ double ze_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// gelu: 0.5·x·erfc(-x/√2), vmath's cancellation-free form of
// 0.5·x·(1+erf(x/√2)); float64 keeps the CPU's erf form.
__device__ __forceinline__ float ze_gelu(float x) { return 0.5f * x * erfcf(-x * ZE_SQRT1_2F); }
__device__ __forceinline__ double ze_gelu(double x) { return x * 0.5 * (1.0 + erf(x * 0.7071067811865476)); }

// gelu tanh: x·sigmoid(2u) with u = √(2/π)(x+κx³), vmath's form of
// 0.5·x·(1+tanh u); float64 keeps the tanh form.
__device__ __forceinline__ float ze_gelu_tanh(float x) {
    const float u = ZE_BETA_F * (x + ZE_KAPPA_F * x * x * x);
    if (u >= 0.0f) return ze_div(x, 1.0f + expf(-2.0f * u));
    const float e = expf(2.0f * u);
    return ze_div(x * e, 1.0f + e);
}
__device__ __forceinline__ double ze_gelu_tanh(double x) {
    const double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(inner));
}

__device__ __forceinline__ float ze_silu(float x) { return x * ze_sigmoid(x); }
__device__ __forceinline__ double ze_silu(double x) { return x / (1.0 + exp(-x)); }

__device__ __forceinline__ float ze_expf(float x) { return expf(x); }
__device__ __forceinline__ double ze_expf(double x) { return exp(x); }
__device__ __forceinline__ float ze_logf(float x) { return logf(x); }
__device__ __forceinline__ double ze_logf(double x) { return log(x); }
__device__ __forceinline__ float ze_tanhf(float x) { return tanhf(x); }
__device__ __forceinline__ double ze_tanhf(double x) { return tanh(x); }
__device__ __forceinline__ float ze_absf(float x) { return fabsf(x); }
__device__ __forceinline__ double ze_absf(double x) { return fabs(x); }
// sin, cos, erf: CUDA's (within 2 ulp) where the CPU rounds the float64
// function once. sin and cos reduce huge arguments (|x| ≥ 105615 for float)
// in a small local array: the unary kernels have a stack frame for it.
__device__ __forceinline__ float ze_sinf(float x) { return sinf(x); }
__device__ __forceinline__ double ze_sinf(double x) { return sin(x); }
__device__ __forceinline__ float ze_cosf(float x) { return cosf(x); }
__device__ __forceinline__ double ze_cosf(double x) { return cos(x); }
__device__ __forceinline__ float ze_erff(float x) { return erff(x); }
__device__ __forceinline__ double ze_erff(double x) { return erf(x); }

// Derivatives (vmath's geluDeriv64, geluTanhDeriv64, siluDeriv64 for
// float; cpu.activationGrad for double). The derivative is rounded before
// the product with dy, as PyTorch's dy * (...).
__device__ __forceinline__ float ze_gelu_deriv(float x) {
    return 0.5f * erfcf(-x * ZE_SQRT1_2F) + x * ZE_INV_SQRT_2PI_F * expf(-0.5f * x * x);
}
__device__ __forceinline__ double ze_gelu_deriv(double x) {
    const double cdf = 0.5 * (1.0 + erf(x * 0.7071067811865476));
    const double pdf = exp(-0.5 * x * x) * 1.1283791670955126 * 0.7071067811865476 * 0.5;
    return cdf + x * pdf;
}
// 0.5(1+t) + 0.5x(1-t²)β(1+3κx²) with t = tanh u, written with e = e^(-2u)
// so that neither overflow nor underflow of e gives NaN.
__device__ __forceinline__ float ze_gelu_tanh_deriv(float x) {
    const float u = ZE_BETA_F * (x + ZE_KAPPA_F * x * x * x);
    const float e = expf(-2.0f * u);
    const float s = ze_div(1.0f, 1.0f + e);
    return s + ze_div(2.0f * x, 2.0f + e + ze_div(1.0f, e)) * ZE_BETA_F * (1.0f + 3.0f * ZE_KAPPA_F * x * x);
}
__device__ __forceinline__ double ze_gelu_tanh_deriv(double x) {
    const double kappa = 0.044715;
    const double xsq = x * x;
    const double inner = 0.7978845608028654 * (x + kappa * xsq * x);
    const double th = tanh(inner);
    const double left = 0.5 * x;
    const double right = 1.0 + th;
    const double left_derivative = 0.5 * right;
    const double right_derivative = left * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * kappa * xsq);
    return left_derivative + right_derivative;
}
__device__ __forceinline__ float ze_silu_deriv(float x) {
    const float e = expf(-x);
    const float s = ze_div(1.0f, 1.0f + e);
    float one_minus = e * s;  // 1-s without cancellation
    if (e == __int_as_float(0x7f800000)) one_minus = 1.0f;
    return s * (1.0f + x * one_minus);
}
__device__ __forceinline__ double ze_silu_deriv(double x) {
    const double sig = 1.0 / (1.0 + exp(-x));
    return sig * (1.0 + x * (1.0 - sig));
}

// ---------------------------------------------------------------------------
// Unary.

// ze_unary_fn is op applied to x in the compute type C; ts is the scalar
// rounded to C (the CPU's T(s)), s the scalar itself (PowScalar compares it
// and computes in double).
template <class C> __device__ __forceinline__ C ze_unary_fn(int op, C x, C ts, double s) {
    switch (op) {
    case UN_NEG: return -x;
    case UN_EXP: return ze_expf(x);
    case UN_LOG: return ze_logf(x);
    case UN_SQRT: return ze_sqrt(x);
    case UN_RSQRT: return ze_div((C)1, ze_sqrt(x));  // PyTorch's: the rounded root, then the rounded division
    case UN_ABS: return ze_absf(x);
    case UN_SIGN: return (C)((x > 0) - (x < 0));  // PyTorch's: +0 for ±0 and NaN
    case UN_RELU: return x < 0 ? (C)0 : x;                     // NaN and -0 pass, as clamp_min
    case UN_GELU: return ze_gelu(x);
    case UN_GELU_TANH: return ze_gelu_tanh(x);
    case UN_SILU: return ze_silu(x);
    case UN_TANH: return ze_tanhf(x);
    case UN_SIGMOID: return ze_sigmoid(x);
    case UN_ADD_SCALAR: return ze_add(x, ts);
    case UN_MUL_SCALAR: return ze_mul(x, ts);
    case UN_POW_SCALAR:  // PyTorch's special exponents (PowKernel) as cpu.unaryLoop, else math.Pow in double
        if (s == 2.0) return ze_mul(x, x);
        if (s == 3.0) return ze_mul(ze_mul(x, x), x);
        if (s == -2.0) return ze_div((C)1, ze_mul(x, x));
        if (s == 0.5) return ze_sqrt(x);
        if (s == -0.5) return ze_div((C)1, ze_sqrt(x));
        if (s == -1.0) return ze_div((C)1, x);
        if (s == 1.0) return x;
        return (C)pow((double)x, s);
    case UN_RSUB_SCALAR: return ze_sub(ts, x);
    case UN_RDIV_SCALAR: return ze_div(ts, x);
    case UN_SQUARE: return ze_mul(x, x);
    case UN_RECIPROCAL: return ze_div((C)1, x);
    case UN_SIN: return ze_sinf(x);
    case UN_COS: return ze_cosf(x);
    case UN_ERF: return ze_erff(x);
    }
    return x;
}

#define ZE_UNARY_FLAT(OP) \
    case OP: ze_flat1(L, dst, src, [=](T v) { return Ty::store(ze_unary_fn<C>(OP, Ty::load(v), ts, s)); }); break;

template <class T> __device__ __forceinline__ void ze_unary(const ZeLayout& L, T* dst, const T* src, int op, double s) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    const C ts = (C)s;
    if (L.ndim != 1) {
        // ze_map1's loop written out: with every op in ze_unary_fn a lambda
        // would be too big for clang to inline, and its captures would go
        // through local memory.
        ZE_GRID_LOOP(i, L.numel) {
            i64 off[2];
            ze_offsets<2>(L, i, off);
            dst[off[0]] = Ty::store(ze_unary_fn<C>(op, Ty::load(src[off[1]]), ts, s));
        }
        return;
    }
    switch (op) {
        ZE_UNARY_FLAT(UN_NEG)
        ZE_UNARY_FLAT(UN_EXP)
        ZE_UNARY_FLAT(UN_LOG)
        ZE_UNARY_FLAT(UN_SQRT)
        ZE_UNARY_FLAT(UN_RSQRT)
        ZE_UNARY_FLAT(UN_ABS)
        ZE_UNARY_FLAT(UN_SIGN)
        ZE_UNARY_FLAT(UN_RELU)
        ZE_UNARY_FLAT(UN_GELU)
        ZE_UNARY_FLAT(UN_GELU_TANH)
        ZE_UNARY_FLAT(UN_SILU)
        ZE_UNARY_FLAT(UN_TANH)
        ZE_UNARY_FLAT(UN_SIGMOID)
        ZE_UNARY_FLAT(UN_ADD_SCALAR)
        ZE_UNARY_FLAT(UN_MUL_SCALAR)
        ZE_UNARY_FLAT(UN_POW_SCALAR)
        ZE_UNARY_FLAT(UN_RSUB_SCALAR)
        ZE_UNARY_FLAT(UN_RDIV_SCALAR)
        ZE_UNARY_FLAT(UN_SQUARE)
        ZE_UNARY_FLAT(UN_RECIPROCAL)
        ZE_UNARY_FLAT(UN_SIN)
        ZE_UNARY_FLAT(UN_COS)
        ZE_UNARY_FLAT(UN_ERF)
    }
}

extern "C" __global__ __launch_bounds__(256) void unary_f32(ZeLayout L, float* dst, const float* src, int op, double s) {
    ze_unary(L, dst, src, op, s);
}
extern "C" __global__ __launch_bounds__(256) void unary_f64(ZeLayout L, double* dst, const double* src, int op, double s) {
    ze_unary(L, dst, src, op, s);
}
extern "C" __global__ __launch_bounds__(256) void unary_bf16(ZeLayout L, ze_bf16* dst, const ze_bf16* src, int op, double s) {
    ze_unary(L, dst, src, op, s);
}
extern "C" __global__ __launch_bounds__(256) void unary_f16(ZeLayout L, ze_f16* dst, const ze_f16* src, int op, double s) {
    ze_unary(L, dst, src, op, s);
}

// unary_i64: the ops cpu.unaryInt defines (the Go side rejects the others
// and non-integer scalars); arithmetic wraps as Go's does. Integer ops are
// cheap enough to dispatch per element on every walk.
__device__ __forceinline__ i64 ze_unary_i64_fn(int op, i64 x, u64 us) {
    switch (op) {
    case UN_NEG: return (i64)(0ull - (u64)x);
    case UN_ABS: {
        const i64 n = (i64)(0ull - (u64)x);
        return x > n ? x : n;
    }
    case UN_SIGN: return (i64)(x > 0) - (i64)(x < 0);
    case UN_ADD_SCALAR: return (i64)((u64)x + us);
    case UN_MUL_SCALAR: return (i64)((u64)x * us);
    case UN_RSUB_SCALAR: return (i64)(us - (u64)x);
    case UN_SQUARE: return (i64)((u64)x * (u64)x);
    case UN_RELU: return x > 0 ? x : (i64)0;
    }
    return x;
}

extern "C" __global__ __launch_bounds__(256) void unary_i64(ZeLayout L, i64* dst, const i64* src, int op, i64 s) {
    const u64 us = (u64)s;
    ze_map1(L, dst, src, [=](i64 x) { return ze_unary_i64_fn(op, x, us); });
}

// ---------------------------------------------------------------------------
// Activation backward: dx = dy·f'(saved).

template <class C> __device__ __forceinline__ C ze_act_bwd_fn(int op, C g, C x) {
    switch (op) {
    case ACT_RELU_BACKWARD: return x <= 0 ? (C)0 : g;  // threshold_backward: NaN passes
    case ACT_GELU_BACKWARD: return ze_mul(g, ze_gelu_deriv(x));
    case ACT_GELU_TANH_BACKWARD: return ze_mul(g, ze_gelu_tanh_deriv(x));
    case ACT_SILU_BACKWARD: return ze_mul(g, ze_silu_deriv(x));
    case ACT_TANH_BACKWARD: return ze_mul(g, ze_sub((C)1, ze_mul(x, x)));  // dy·(1−y²), each step rounded
    case ACT_SIGMOID_BACKWARD: return ze_mul(ze_mul(g, ze_sub((C)1, x)), x);  // (dy·(1−y))·y
    }
    return g;
}

#define ZE_ACT_FLAT(OP) \
    case OP: ze_flat2(L, dx, dy, sv, [=](T g, T x) { return Ty::store(ze_act_bwd_fn<C>(OP, Ty::load(g), Ty::load(x))); }); break;

template <class T> __device__ __forceinline__ void ze_act_bwd(const ZeLayout& L, T* dx, const T* dy, const T* sv, int op) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    if (L.ndim != 1) {
        ze_map2(L, dx, dy, sv, [=](T g, T x) { return Ty::store(ze_act_bwd_fn<C>(op, Ty::load(g), Ty::load(x))); });
        return;
    }
    switch (op) {
        ZE_ACT_FLAT(ACT_RELU_BACKWARD)
        ZE_ACT_FLAT(ACT_GELU_BACKWARD)
        ZE_ACT_FLAT(ACT_GELU_TANH_BACKWARD)
        ZE_ACT_FLAT(ACT_SILU_BACKWARD)
        ZE_ACT_FLAT(ACT_TANH_BACKWARD)
        ZE_ACT_FLAT(ACT_SIGMOID_BACKWARD)
    }
}

extern "C" __global__ __launch_bounds__(256) void act_bwd_f32(ZeLayout L, float* dx, const float* dy, const float* saved, int op) {
    ze_act_bwd(L, dx, dy, saved, op);
}
extern "C" __global__ __launch_bounds__(256) void act_bwd_f64(ZeLayout L, double* dx, const double* dy, const double* saved, int op) {
    ze_act_bwd(L, dx, dy, saved, op);
}
extern "C" __global__ __launch_bounds__(256) void act_bwd_bf16(ZeLayout L, ze_bf16* dx, const ze_bf16* dy, const ze_bf16* saved, int op) {
    ze_act_bwd(L, dx, dy, saved, op);
}
extern "C" __global__ __launch_bounds__(256) void act_bwd_f16(ZeLayout L, ze_f16* dx, const ze_f16* dy, const ze_f16* saved, int op) {
    ze_act_bwd(L, dx, dy, saved, op);
}

// ---------------------------------------------------------------------------
// Binary arithmetic.

template <class C> __device__ __forceinline__ C ze_binary_fn(int op, C x, C y) {
    switch (op) {
    case BIN_ADD: return ze_add(x, y);
    case BIN_SUB: return ze_sub(x, y);
    case BIN_MUL: return ze_mul(x, y);
    case BIN_DIV: return ze_div(x, y);
    case BIN_POW: return (C)pow((double)x, (double)y);  // math.Pow in double, rounded once
    case BIN_MAXIMUM: return (x != x || x > y) ? x : y;  // NaN in either propagates (torch.maximum)
    case BIN_MINIMUM: return (x != x || x < y) ? x : y;
    }
    return x;
}

#define ZE_BINARY_FLAT(OP) \
    case OP: ze_flat2(L, dst, a, b, [=](T x, T y) { return Ty::store(ze_binary_fn<C>(OP, Ty::load(x), Ty::load(y))); }); break;

template <class T> __device__ __forceinline__ void ze_binary(const ZeLayout& L, T* dst, const T* a, const T* b, int op) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    if (L.ndim != 1) {
        ze_map2(L, dst, a, b, [=](T x, T y) { return Ty::store(ze_binary_fn<C>(op, Ty::load(x), Ty::load(y))); });
        return;
    }
    switch (op) {
        ZE_BINARY_FLAT(BIN_ADD)
        ZE_BINARY_FLAT(BIN_SUB)
        ZE_BINARY_FLAT(BIN_MUL)
        ZE_BINARY_FLAT(BIN_DIV)
        ZE_BINARY_FLAT(BIN_POW)
        ZE_BINARY_FLAT(BIN_MAXIMUM)
        ZE_BINARY_FLAT(BIN_MINIMUM)
    }
}

extern "C" __global__ __launch_bounds__(256) void binary_f32(ZeLayout L, float* dst, const float* a, const float* b, int op) {
    ze_binary(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void binary_f64(ZeLayout L, double* dst, const double* a, const double* b, int op) {
    ze_binary(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void binary_bf16(ZeLayout L, ze_bf16* dst, const ze_bf16* a, const ze_bf16* b, int op) {
    ze_binary(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void binary_f16(ZeLayout L, ze_f16* dst, const ze_f16* a, const ze_f16* b, int op) {
    ze_binary(L, dst, a, b, op);
}

// binary_i64: the ops cpu.binaryInt defines; arithmetic wraps.
__device__ __forceinline__ i64 ze_binary_i64_fn(int op, i64 x, i64 y) {
    switch (op) {
    case BIN_ADD: return (i64)((u64)x + (u64)y);
    case BIN_SUB: return (i64)((u64)x - (u64)y);
    case BIN_MUL: return (i64)((u64)x * (u64)y);
    case BIN_MAXIMUM: return x > y ? x : y;
    case BIN_MINIMUM: return x < y ? x : y;
    }
    return x;
}

extern "C" __global__ __launch_bounds__(256) void binary_i64(ZeLayout L, i64* dst, const i64* a, const i64* b, int op) {
    ze_map2(L, dst, a, b, [=](i64 x, i64 y) { return ze_binary_i64_fn(op, x, y); });
}

// ---------------------------------------------------------------------------
// Comparisons write bool (0 or 1). The 16-bit floats compare exactly after
// widening.

template <class C> __device__ __forceinline__ unsigned char ze_compare_fn(int op, C x, C y) {
    switch (op) {
    case BIN_EQ: return x == y;
    case BIN_NE: return x != y;
    case BIN_LT: return x < y;
    case BIN_LE: return x <= y;
    case BIN_GT: return x > y;
    case BIN_GE: return x >= y;
    }
    return 0;
}

template <class T> __device__ __forceinline__ void ze_compare(const ZeLayout& L, unsigned char* dst, const T* a, const T* b, int op) {
    typedef ZeType<T> Ty;
    ze_map2(L, dst, a, b, [=](T x, T y) { return ze_compare_fn(op, Ty::load(x), Ty::load(y)); });
}

extern "C" __global__ __launch_bounds__(256) void compare_f32(ZeLayout L, unsigned char* dst, const float* a, const float* b, int op) {
    ze_compare(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void compare_f64(ZeLayout L, unsigned char* dst, const double* a, const double* b, int op) {
    ze_compare(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void compare_bf16(ZeLayout L, unsigned char* dst, const ze_bf16* a, const ze_bf16* b, int op) {
    ze_compare(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void compare_f16(ZeLayout L, unsigned char* dst, const ze_f16* a, const ze_f16* b, int op) {
    ze_compare(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void compare_i64(ZeLayout L, unsigned char* dst, const i64* a, const i64* b, int op) {
    ze_compare(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void compare_i32(ZeLayout L, unsigned char* dst, const int* a, const int* b, int op) {
    ze_compare(L, dst, a, b, op);
}
extern "C" __global__ __launch_bounds__(256) void compare_u8(ZeLayout L, unsigned char* dst, const unsigned char* a, const unsigned char* b, int op) {
    ze_compare(L, dst, a, b, op);
}
