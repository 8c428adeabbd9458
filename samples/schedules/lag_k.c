/*
 * lag_k.c: a ZeRO step schedule (docs/wasm-schedule-abi.md) in C with no libc. Bucket i is
 * stepped and broadcast when bucket i+k becomes ready, so that each bucket's reduction has k
 * buckets' worth of backward to complete in before the step waits for it; what is left when
 * backward ends (the last k buckets) is stepped then, in order. k = 1 is PyTorch's interleaved
 * schedule (hook_with_zero_step_interleaved), k = 0 steps every bucket as soon as it is ready
 * (waiting for its reduction at once), and k at least the number of buckets is the
 * after-backward schedule (hook_with_zero_step).
 *
 * Configuration (configure): JSON {"k": 2}; k is a whole number from 0, 2 by default. Any other
 * key, or a k that is not such a number, fails the schedule's creation with status 100 and a line
 * in the rank's log saying why.
 *
 * Build (clang and lld, no libc; `make schedules`):
 *
 *   clang --target=wasm32 -nostdlib -O2 -Wall -Wextra -Wl,--no-entry -o lag_k.wasm lag_k.c
 *
 * and run it with zeroeng run --zero-schedule lag_k.wasm --zero-schedule-config '{"k":3}', or
 * hooks.wasmSchedule("lag_k.wasm", { config: { k: 3 } }) in a script.
 */

typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define IMPORT(name) __attribute__((import_module("zeroeng"), import_name(#name)))
#define EXPORT(name) __attribute__((export_name(#name)))

/* Host functions: pointers are i32 offsets into this module's memory. */
IMPORT(sched_info) int32_t sched_info(void *out);
IMPORT(sched_step_and_broadcast) int32_t sched_step_and_broadcast(int32_t bucket);
IMPORT(log) int32_t zlog(const char *ptr, int32_t len);

/* sched_info's 24 bytes (wasm32 lays this struct out at exactly those offsets). */
struct sched_info {
    uint32_t num_buckets; /* 0 */
    uint32_t rank;        /* 4 */
    uint32_t world_size;  /* 8 */
    uint32_t zero;        /* 12 */
    uint64_t iteration;   /* 16 */
};
_Static_assert(sizeof(struct sched_info) == 24, "sched_info is 24 bytes");

/* The guest's own status for a configuration it refuses (any non-zero status fails). */
enum { ERR_CONFIG = 100 };

static int32_t k = 2;
/* next is the first bucket of this iteration not stepped yet: buckets are stepped in order. */
static int32_t next;

EXPORT(zeroeng_sched_abi_v1) void zeroeng_sched_abi_v1(void) {}

/* A line of at most 255 bytes for the log. */
static struct {
    char b[256];
    int n;
} line;

static void put(const char *s, int n) {
    for (int i = 0; i < n && line.n < (int)sizeof line.b; i++)
        line.b[line.n++] = s[i];
}

static void putstr(const char *s) {
    int n = 0;
    while (s[n])
        n++;
    put(s, n);
}

static void putint(int64_t v) {
    char d[20];
    int n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0)
        put(&d[--n], 1);
}

static void flush(void) {
    zlog(line.b, line.n);
    line.n = 0;
}

/* alloc hands the host fresh pages for the configuration (called once). */
EXPORT(alloc) int32_t alloc(int32_t size) {
    int32_t pages = (int32_t)(((uint32_t)size + 65535u) / 65536u);
    int32_t old = __builtin_wasm_memory_grow(0, pages);
    /* -1 is outside memory, which the host reports. */
    return old < 0 ? -1 : (int32_t)((uint32_t)old * 65536u);
}

/* The configuration parser: a JSON object whose only key is "k". */
static const char *p, *end;

static void ws(void) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
}

static int eat(char c) {
    ws();
    if (p < end && *p == c) {
        p++;
        return 1;
    }
    return 0;
}

/* str reads a string without escapes into [*s, *s + *n). */
static int str(const char **s, int *n) {
    ws();
    if (p >= end || *p != '"')
        return 0;
    *s = ++p;
    while (p < end && *p != '"') {
        if (*p == '\\')
            return 0;
        p++;
    }
    if (p >= end)
        return 0;
    *n = (int)(p - *s);
    p++;
    return 1;
}

/* whole reads a whole number from 0 to 2^31-1. */
static int whole(int32_t *v) {
    ws();
    int64_t x = 0;
    const char *start = p;
    while (p < end && *p >= '0' && *p <= '9') {
        x = x * 10 + (*p++ - '0');
        if (x > 0x7fffffff)
            return 0;
    }
    if (p == start || (p < end && (*p == '.' || *p == 'e' || *p == 'E')))
        return 0;
    *v = (int32_t)x;
    return 1;
}

static int32_t refuse(const char *why) {
    putstr("lag_k: configuration: ");
    putstr(why);
    flush();
    return ERR_CONFIG;
}

EXPORT(configure) int32_t configure(const char *ptr, int32_t len) {
    p = ptr;
    end = ptr + len;
    if (!eat('{'))
        return refuse("want a JSON object such as {\"k\": 2}");
    if (!eat('}')) {
        do {
            const char *key;
            int n;
            if (!str(&key, &n) || !eat(':'))
                return refuse("want a JSON object such as {\"k\": 2}");
            if (n != 1 || key[0] != 'k') {
                putstr("lag_k: configuration: unknown key \"");
                put(key, n);
                putstr("\" (the one key is k)");
                flush();
                return ERR_CONFIG;
            }
            if (!whole(&k))
                return refuse("k must be a whole number from 0, as in {\"k\": 2}");
        } while (eat(','));
        if (!eat('}'))
            return refuse("want a JSON object such as {\"k\": 2}");
    }
    ws();
    if (p != end)
        return refuse("bytes after the JSON object");
    return 0;
}

EXPORT(init) int32_t init(int32_t rank, int32_t world) {
    if (rank == 0) {
        putstr("lag-");
        putint(k);
        putstr(" schedule on ");
        putint(world);
        putstr(" ranks");
        flush();
    }
    return 0;
}

EXPORT(on_iteration_begin) int32_t on_iteration_begin(int64_t iteration) {
    (void)iteration;
    next = 0;
    return 0;
}

EXPORT(on_bucket_ready) int32_t on_bucket_ready(int32_t b) {
    /* Buckets come in order: bucket b-k, if any, is the one due. */
    for (; b - next >= k; next++) {
        int32_t s = sched_step_and_broadcast(next);
        if (s)
            return s;
    }
    return 0;
}

EXPORT(on_backward_end) int32_t on_backward_end(void) {
    struct sched_info info;
    int32_t s = sched_info(&info);
    if (s)
        return s;
    for (; next < (int32_t)info.num_buckets; next++) {
        if ((s = sched_step_and_broadcast(next)))
            return s;
    }
    return 0;
}
