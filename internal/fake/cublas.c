//go:build ignore

// A fake cuBLAS (libcublas.so.12) for the tests of gpu/cublas; see nvrtc.c
// for why the Go build constraint is there.
//
// It implements the calls the binding makes with the C signatures of
// cublas_api.h. "Device" memory is host memory, so
// cublasGemmStridedBatchedEx computes its result for CUDA_R_32F operands
// with a 32F compute type, and for CUDA_R_64F with a 64F one, column-major
// as cuBLAS does (transposes, leading dimensions, strides, batches, alpha
// and beta read through host pointers, C not read when beta is 0); other
// type combinations are recorded and not computed. It checks its
// arguments as cuBLAS documents (CUBLAS_STATUS_INVALID_VALUE for negative
// sizes and leading dimensions below the rows of the stored matrices).
//
// The fakecublas_* exports are for the tests: the last GEMM's arguments,
// the state of a handle, the number of live handles, and error injection.

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_32I = 10, CUDA_R_16BF = 14 };
enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_16F_PEDANTIC = 65,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72,
    CUBLAS_COMPUTE_32I_PEDANTIC = 73,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};

#define MAGIC 0x63626c73 /* "cbls" */

struct handle {
    int magic;
    uintptr_t stream;
    uintptr_t workspace;
    size_t workspaceBytes;
    int mathMode;
};

typedef struct handle *cublasHandle_t;

/* The last GEMM's arguments, all in 8-byte fields so that Go mirrors the
   layout without padding rules. alpha and beta are the scalars decoded as
   the compute type says; alphaBits and betaBits the bytes read (4 for
   float and int, 8 for double, 2 for half), zero-extended. */
struct fakecublas_gemm {
    int64_t calls;
    uint64_t handle;
    int64_t transa, transb, m, n, k;
    double alpha;
    uint64_t alphaBits;
    uint64_t a;
    int64_t atype, lda, strideA;
    uint64_t b;
    int64_t btype, ldb, strideB;
    double beta;
    uint64_t betaBits;
    uint64_t c;
    int64_t ctype, ldc, strideC, batch, compute, algo;
    int64_t computed; /* 1 when the fake computed the result */
};

static struct fakecublas_gemm last;
static int live;
static char failName[64];
static cublasStatus_t failStatus;

void fakecublas_reset(void) {
    memset(&last, 0, sizeof last);
    failName[0] = 0;
    failStatus = CUBLAS_STATUS_SUCCESS;
}
void fakecublas_last(struct fakecublas_gemm *out) { *out = last; }
int fakecublas_live_handles(void) { return live; }
/* fakecublas_fail makes every later call of the function named fn return
   status, until fakecublas_reset or a call with fn NULL. */
void fakecublas_fail(const char *fn, int status) {
    failName[0] = 0;
    if (fn != NULL) {
        strncpy(failName, fn, sizeof failName - 1);
        failName[sizeof failName - 1] = 0;
    }
    failStatus = (cublasStatus_t)status;
}
uint64_t fakecublas_stream(cublasHandle_t h) { return h ? h->stream : 0; }
uint64_t fakecublas_workspace(cublasHandle_t h, uint64_t *bytes) {
    if (h == NULL) return 0;
    *bytes = h->workspaceBytes;
    return h->workspace;
}
int fakecublas_math_mode(cublasHandle_t h) { return h ? h->mathMode : -1; }

#define INJECT()                                                      \
    do {                                                              \
        if (failName[0] && strcmp(failName, __func__) == 0) return failStatus; \
    } while (0)

static int valid(cublasHandle_t h) { return h != NULL && h->magic == MAGIC; }

cublasStatus_t cublasGetProperty(int type, int *value) {
    INJECT();
    if (value == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case 0: *value = 12; break; /* MAJOR_VERSION */
    case 1: *value = 4; break;  /* MINOR_VERSION */
    case 2: *value = 5; break;  /* PATCH_LEVEL */
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

/* The descriptions of cuBLAS 12's cublasGetStatusString. */
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    }
    return "unknown error";
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *out) {
    INJECT();
    if (out == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    struct handle *h = calloc(1, sizeof *h);
    h->magic = MAGIC;
    live++;
    *out = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    INJECT();
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    live--;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, uintptr_t stream) {
    INJECT();
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = stream;
    /* As cuBLAS does, setting the stream resets the workspace to the
       default pool. */
    h->workspace = 0;
    h->workspaceBytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *workspace, size_t bytes) {
    INJECT();
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (workspace == NULL && bytes > 0) return CUBLAS_STATUS_INVALID_VALUE;
    h->workspace = (uintptr_t)workspace;
    h->workspaceBytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, int mode) {
    INJECT();
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->mathMode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

/* scalar reads a host scalar of the compute type's scale type. */
static double scalar(const void *p, int compute, uint64_t *bits) {
    *bits = 0;
    switch (compute) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: {
        double d;
        memcpy(&d, p, 8);
        memcpy(bits, p, 8);
        return d;
    }
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: {
        uint16_t h;
        memcpy(&h, p, 2);
        *bits = h;
        return 0; /* not decoded: the test checks the bits */
    }
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC: {
        int32_t i;
        uint32_t u;
        memcpy(&i, p, 4);
        memcpy(&u, p, 4);
        *bits = u;
        return i;
    }
    default: {
        float f;
        uint32_t u;
        memcpy(&f, p, 4);
        memcpy(&u, p, 4);
        *bits = u;
        return f;
    }
    }
}

static int is32F(int compute) {
    return compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
           compute == CUBLAS_COMPUTE_32F_FAST_16F || compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
           compute == CUBLAS_COMPUTE_32F_FAST_TF32;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, int transa, int transb, int m, int n, int k,
                                          const void *alpha, const void *A, int Atype, int lda, long long strideA,
                                          const void *B, int Btype, int ldb, long long strideB, const void *beta,
                                          void *C, int Ctype, int ldc, long long strideC, int batchCount,
                                          int computeType, int algo) {
    INJECT();
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    int64_t calls = last.calls + 1;
    memset(&last, 0, sizeof last);
    last.calls = calls;
    last.handle = (uint64_t)(uintptr_t)h;
    last.transa = transa;
    last.transb = transb;
    last.m = m;
    last.n = n;
    last.k = k;
    last.a = (uint64_t)(uintptr_t)A;
    last.atype = Atype;
    last.lda = lda;
    last.strideA = strideA;
    last.b = (uint64_t)(uintptr_t)B;
    last.btype = Btype;
    last.ldb = ldb;
    last.strideB = strideB;
    last.c = (uint64_t)(uintptr_t)C;
    last.ctype = Ctype;
    last.ldc = ldc;
    last.strideC = strideC;
    last.batch = batchCount;
    last.compute = computeType;
    last.algo = algo;
    if (alpha == NULL || beta == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    double al = scalar(alpha, computeType, &last.alphaBits);
    double be = scalar(beta, computeType, &last.betaBits);
    last.alpha = al;
    last.beta = be;
    if (transa < 0 || transa > 2 || transb < 0 || transb > 2) return CUBLAS_STATUS_INVALID_VALUE;
    if (m < 0 || n < 0 || k < 0 || batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    int arows = transa == 0 ? m : k, brows = transb == 0 ? k : n;
    if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;

    if (Atype == CUDA_R_32F && Btype == CUDA_R_32F && Ctype == CUDA_R_32F && is32F(computeType)) {
        const float *a = A, *b = B;
        float *c = C;
        float fa = (float)al, fb = (float)be;
        for (int q = 0; q < batchCount; q++) {
            const float *aq = a + q * strideA, *bq = b + q * strideB;
            float *cq = c + q * strideC;
            for (int j = 0; j < n; j++) {
                for (int i = 0; i < m; i++) {
                    float s = 0;
                    for (int p = 0; p < k; p++) {
                        float x = transa == 0 ? aq[i + (long long)p * lda] : aq[p + (long long)i * lda];
                        float y = transb == 0 ? bq[p + (long long)j * ldb] : bq[j + (long long)p * ldb];
                        s += x * y;
                    }
                    float *out = &cq[i + (long long)j * ldc];
                    *out = fb == 0 ? fa * s : fa * s + fb * *out;
                }
            }
        }
        last.computed = 1;
    } else if (Atype == CUDA_R_64F && Btype == CUDA_R_64F && Ctype == CUDA_R_64F &&
               (computeType == CUBLAS_COMPUTE_64F || computeType == CUBLAS_COMPUTE_64F_PEDANTIC)) {
        const double *a = A, *b = B;
        double *c = C;
        for (int q = 0; q < batchCount; q++) {
            const double *aq = a + q * strideA, *bq = b + q * strideB;
            double *cq = c + q * strideC;
            for (int j = 0; j < n; j++) {
                for (int i = 0; i < m; i++) {
                    double s = 0;
                    for (int p = 0; p < k; p++) {
                        double x = transa == 0 ? aq[i + (long long)p * lda] : aq[p + (long long)i * lda];
                        double y = transb == 0 ? bq[p + (long long)j * ldb] : bq[j + (long long)p * ldb];
                        s += x * y;
                    }
                    double *out = &cq[i + (long long)j * ldc];
                    *out = be == 0 ? al * s : al * s + be * *out;
                }
            }
        }
        last.computed = 1;
    }
    return CUBLAS_STATUS_SUCCESS;
}
