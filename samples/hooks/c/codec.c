/*
 * codec.c: the data-plane bf16 codec of the Go sample codec/, in C with no libc: the bucket's
 * float32 gradient is read into guest memory chunk by chunk, multiplied by 1/world and rounded
 * to bfloat16 by this module (round to nearest even, NaN stays NaN, as PyTorch's
 * float -> bfloat16), the bit patterns are summed across the ranks in a bfloat16 host tensor,
 * and on_bucket_done widens the sum back into the bucket. Only float32 buckets are taken.
 *
 * Build (clang and lld, no libc; `make hooks` adds -Wall -Wextra):
 *
 *   clang --target=wasm32 -nostdlib -O2 -Wl,--no-entry -o codec_c.wasm codec.c
 *
 * The ABI is docs/wasm-hook-abi.md; this module exports memory (wasm-ld's default), the
 * marker zeroeng_hook_abi_v1, init, on_bucket and on_bucket_done.
 */

typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned short uint16_t;

#define IMPORT(name) __attribute__((import_module("zeroeng"), import_name(#name)))
#define EXPORT(name) __attribute__((export_name(#name)))

/* Host functions: pointers are i32 offsets into this module's memory. */
IMPORT(bucket_info) int32_t bucket_info(int32_t bucket, void *out);
IMPORT(tensor_new) int32_t tensor_new(int32_t dtype, int64_t numel, int32_t *out_handle);
IMPORT(tensor_free) int32_t tensor_free(int32_t h);
IMPORT(tensor_read) int32_t tensor_read(int32_t h, int64_t byte_offset, void *ptr, int32_t len);
IMPORT(tensor_write) int32_t tensor_write(int32_t h, int64_t byte_offset, const void *ptr, int32_t len);
IMPORT(all_reduce) int32_t all_reduce(int32_t h, int32_t op);

enum { DTYPE_FLOAT32 = 0, DTYPE_BFLOAT16 = 2 };
enum { OP_SUM = 0 };
enum { ERR_DTYPE = 4 };
/* Guest statuses (any non-zero value fails the hook and is shown in the error). */
enum { ERR_TOO_MANY_BUCKETS = 100, ERR_NO_WIRE = 101 };

/* bucket_info's 40 bytes (wasm32 lays this struct out at exactly those offsets). */
struct bucket_info {
    uint32_t index;      /* 0 */
    uint32_t flags;      /* 4 */
    uint64_t numel;      /* 8 */
    uint32_t dtype;      /* 16 */
    uint32_t num_params; /* 20 */
    uint64_t step;       /* 24 */
    uint32_t rank;       /* 32 */
    uint32_t world_size; /* 36 */
};
_Static_assert(sizeof(struct bucket_info) == 40, "bucket_info is 40 bytes");

/* CHUNK elements go through guest memory per host call. */
#define CHUNK 65536
static float f32[CHUNK];
static uint16_t u16[CHUNK];

/* The bfloat16 tensor of each bucket index, made once and reused every step. */
#define MAX_BUCKETS 16384
static struct wire {
    int32_t h; /* 0: none yet */
    uint64_t numel;
} wires[MAX_BUCKETS];

static float inv = 1.0f; /* 1/world */

EXPORT(zeroeng_hook_abi_v1) void zeroeng_hook_abi_v1(void) {}

EXPORT(init) int32_t init(int32_t rank, int32_t world) {
    (void)rank;
    inv = 1.0f / (float)world;
    return 0;
}

/* dst[i] = bfloat16(src[i] * s), round to nearest even; NaN becomes the quiet NaN 0x7fc0. */
static void to_bfloat16(uint16_t *restrict dst, const float *restrict src, int n, float s) {
    for (int i = 0; i < n; i++) {
        float x = src[i] * s;
        uint32_t u;
        __builtin_memcpy(&u, &x, 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)0x7fc0 : (uint16_t)r;
    }
}

/* dst[i] = float32(src[i]), exact. */
static void from_bfloat16(float *restrict dst, const uint16_t *restrict src, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        __builtin_memcpy(&dst[i], &u, 4);
    }
}

static int32_t wire_for(uint32_t index, uint64_t numel, struct wire **out) {
    if (index >= MAX_BUCKETS)
        return ERR_TOO_MANY_BUCKETS;
    struct wire *w = &wires[index];
    if (w->h != 0 && w->numel != numel) {
        int32_t s = tensor_free(w->h);
        if (s)
            return s;
        w->h = 0;
    }
    if (w->h == 0) {
        int32_t s = tensor_new(DTYPE_BFLOAT16, (int64_t)numel, &w->h);
        if (s)
            return s;
        w->numel = numel;
    }
    *out = w;
    return 0;
}

#define TRY(call)              \
    do {                       \
        int32_t s_ = (call);   \
        if (s_)                \
            return s_;         \
    } while (0)

EXPORT(on_bucket) int32_t on_bucket(int32_t b) {
    struct bucket_info info;
    TRY(bucket_info(b, &info));
    if (info.dtype != DTYPE_FLOAT32)
        return ERR_DTYPE;
    struct wire *w;
    TRY(wire_for(info.index, info.numel, &w));
    for (uint64_t off = 0; off < info.numel; off += CHUNK) {
        int n = info.numel - off < CHUNK ? (int)(info.numel - off) : CHUNK;
        TRY(tensor_read(b, (int64_t)(off * 4), f32, n * 4));
        to_bfloat16(u16, f32, n, inv);
        TRY(tensor_write(w->h, (int64_t)(off * 2), u16, n * 2));
    }
    return all_reduce(w->h, OP_SUM);
}

EXPORT(on_bucket_done) int32_t on_bucket_done(int32_t b) {
    struct bucket_info info;
    TRY(bucket_info(b, &info));
    if (info.index >= MAX_BUCKETS || wires[info.index].h == 0)
        return ERR_NO_WIRE;
    struct wire *w = &wires[info.index];
    for (uint64_t off = 0; off < info.numel; off += CHUNK) {
        int n = info.numel - off < CHUNK ? (int)(info.numel - off) : CHUNK;
        TRY(tensor_read(w->h, (int64_t)(off * 2), u16, n * 2));
        from_bfloat16(f32, u16, n);
        TRY(tensor_write(b, (int64_t)(off * 4), f32, n * 4));
    }
    return 0;
}
