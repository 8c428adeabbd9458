/*
 * zeroeng.c: the C SDK of zeroeng's WebAssembly training programs; zeroeng.h documents it and
 * how to build a program. Needs nothing beyond WASI's libc.
 */
#include "zeroeng.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The marker export that declares the ABI's major version: never called. */
__attribute__((export_name("zeroeng_program_abi_v1"))) void zeroeng_program_abi_v1(void) {}

static const char *const status_names[] = {"OK",       "ERR_INVALID", "ERR_HANDLE", "ERR_BOUNDS", "ERR_DTYPE",
                                           "ERR_SIZE", "ERR_COMM",    "ERR_NOMEM",  "ERR_CALL",   "ERR_LIMIT"};

const char *ze_status_name(int32_t status) {
    if (status >= 0 && status < (int32_t)(sizeof status_names / sizeof status_names[0]))
        return status_names[status];
    if (status == ZE_ERR_RESULT)
        return "ERR_RESULT";
    if (status == ZE_ERR_ARGS)
        return "ERR_ARGS";
    return "unknown status";
}

/* ---- Errors ---------------------------------------------------------------------------------- */

/* fail reads the host's message for status st into *err and clears the failure on the host; with
 * err NULL the failure stays pending, for the host to end the rank with. */
static int fail(int32_t st, ze_error *err) {
    if (st == ZE_OK || err == NULL)
        return st;
    uint32_t n = 0;
    err->status = st;
    if (zeroeng_error_message(err->message, ZE_MESSAGE_MAX - 1, &n) != ZE_OK)
        n = 0;
    if (n > ZE_MESSAGE_MAX - 1) {
        /* Cut to fit, at a character's start, and say so. */
        size_t k = ZE_MESSAGE_MAX - 4;
        while (k > 0 && ((unsigned char)err->message[k] & 0xC0) == 0x80)
            k--;
        memcpy(err->message + k, "...", 4);
    } else {
        err->message[n] = 0;
    }
    if (n == 0)
        snprintf(err->message, ZE_MESSAGE_MAX, "host call failed: %s", ze_status_name(st));
    zeroeng_error_clear();
    return st;
}

/* sdk_fail is a failure of the SDK's own (nothing is pending on the host). */
__attribute__((format(printf, 3, 4))) static int sdk_fail(ze_error *err, int st, const char *format, ...) {
    if (err != NULL) {
        va_list ap;
        va_start(ap, format);
        err->status = st;
        vsnprintf(err->message, ZE_MESSAGE_MAX, format, ap);
        va_end(ap);
    }
    return st;
}

int ze_abi_version(uint32_t *major, uint32_t *minor) {
    uint32_t v[2] = {0, 0};
    int32_t st = zeroeng_abi_info(v);
    if (major != NULL)
        *major = v[0];
    if (minor != NULL)
        *minor = v[1];
    return st;
}

/* ---- Buffers ----------------------------------------------------------------------------------- */

/* buf is a text buffer: the SDK's grow on the heap (starting from a static array), a caller's
 * (fixed) does not. */
typedef struct buf {
    char *p;
    size_t len, cap;
    int fixed, heap;
} buf;

static char result0[4096], args0[1024];
static buf result = {result0, 0, sizeof result0, 0, 0};
static buf args = {args0, 0, sizeof args0, 0, 0};

/* The host takes lengths as i32. */
#define MAX_LEN ((size_t)INT32_MAX)

static int32_t cap32(size_t cap) { return cap > MAX_LEN ? INT32_MAX : (int32_t)cap; }

static int grow(buf *b, size_t need) {
    if (need <= b->cap)
        return 0;
    if (b->fixed || need > MAX_LEN)
        return -1;
    size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
    if (cap > MAX_LEN)
        cap = MAX_LEN;
    char *p;
    if (b->heap) {
        p = realloc(b->p, cap);
    } else {
        p = malloc(cap);
        if (p != NULL)
            memcpy(p, b->p, b->len);
    }
    if (p == NULL)
        return -1;
    b->p = p;
    b->cap = cap;
    b->heap = 1;
    return 0;
}

static int put(buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap && grow(b, b->len + n + 1) != 0)
        return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static int puts_(buf *b, const char *s) { return put(b, s, strlen(s)); }

/* ---- Numbers ------------------------------------------------------------------------------------ */

int ze_number_string(char *out, size_t cap, double x) {
    char s[40];
    if (isnan(x)) {
        strcpy(s, "NaN");
    } else if (isinf(x)) {
        strcpy(s, x > 0 ? "Infinity" : "-Infinity");
    } else if (x == 0) {
        strcpy(s, "0");
    } else {
        /* The shortest digits that read back as x: printf's correctly rounded %.*e, the fewest
         * digits first (the closest decimal of that many digits, as JavaScript picks). */
        char e[40];
        for (int p = 1; p <= 17; p++) {
            snprintf(e, sizeof e, "%.*e", p - 1, x);
            if (strtod(e, NULL) == x)
                break;
        }
        char digits[24];
        int nd = 0;
        const char *c = e;
        if (*c == '-')
            c++;
        for (; *c != 'e'; c++)
            if (*c >= '0' && *c <= '9')
                digits[nd++] = *c;
        while (nd > 1 && digits[nd - 1] == '0')
            nd--;
        int n = atoi(c + 1) + 1; /* the decimal point's position: x = 0.digits × 10^n */
        char *o = s;
        if (x < 0)
            *o++ = '-';
        if (nd <= n && n <= 21) {
            memcpy(o, digits, (size_t)nd), o += nd;
            for (int i = nd; i < n; i++)
                *o++ = '0';
        } else if (0 < n && n <= 21) {
            memcpy(o, digits, (size_t)n), o += n;
            *o++ = '.';
            memcpy(o, digits + n, (size_t)(nd - n)), o += nd - n;
        } else if (-6 < n && n <= 0) {
            *o++ = '0', *o++ = '.';
            for (int i = n; i < 0; i++)
                *o++ = '0';
            memcpy(o, digits, (size_t)nd), o += nd;
        } else {
            *o++ = digits[0];
            if (nd > 1) {
                *o++ = '.';
                memcpy(o, digits + 1, (size_t)(nd - 1)), o += nd - 1;
            }
            o += sprintf(o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
        }
        *o = 0;
    }
    size_t len = strlen(s);
    if (len + 1 > cap)
        return -1;
    memcpy(out, s, len + 1);
    return (int)len;
}

/* ---- JSON text ------------------------------------------------------------------------------- */

static int put_string(buf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    if (s == NULL)
        return puts_(b, "null");
    if (put(b, "\"", 1))
        return -1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[7] = {'\\', (char)c, 0};
        size_t n = 2;
        switch (c) {
        case '"':
        case '\\':
            break;
        case '\n':
            e[1] = 'n';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '\t':
            e[1] = 't';
            break;
        default:
            if (c < 0x20) {
                memcpy(e + 1, "u00", 3);
                e[4] = hex[c >> 4], e[5] = hex[c & 15], n = 6;
            } else {
                e[0] = (char)c, n = 1;
            }
        }
        if (put(b, e, n))
            return -1;
    }
    return put(b, "\"", 1);
}

static int put_handle(buf *b, ze_handle h) {
    char s[32];
    int n = snprintf(s, sizeof s, "{\"$\":%d}", (int)h);
    return put(b, s, (size_t)n);
}

static int put_number(buf *b, double x) {
    char s[40];
    if (isnan(x) || isinf(x)) {
        snprintf(s, sizeof s, "{\"$num\":\"%s\"}", isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
    } else if (x == 0 && signbit(x)) {
        strcpy(s, "-0");
    } else {
        ze_number_string(s, sizeof s, x);
    }
    return puts_(b, s);
}

/* put_number_bits writes x for the host: an integer as its digits, any other number as its bits
 * ({"$f64":"3fb999999999999a"}). The shortest digits that read back (ze_number_string) take up to
 * 17 snprintf and strtod pairs, some 70 µs in WebAssembly; the bits cost nothing and read back
 * exactly. */
static int put_number_bits(buf *b, double x) {
    char s[48];
    if (x == x && x >= -9007199254740992.0 && x <= 9007199254740992.0 && x == (double)(long long)x &&
        !(x == 0 && signbit(x))) {
        snprintf(s, sizeof s, "%lld", (long long)x);
    } else {
        uint64_t bits;
        memcpy(&bits, &x, sizeof bits);
        snprintf(s, sizeof s, "{\"$f64\":\"%016llx\"}", (unsigned long long)bits);
    }
    return puts_(b, s);
}

/* format writes the directives of zeroeng.h. It returns 0, -1 when b cannot hold the text (a
 * caller's buffer, or the program's memory exhausted), or -2 for a directive it does not know,
 * *bad pointing at it. With bits, %g writes a number for the host (put_number_bits). */
static int format(buf *b, const char *f, va_list ap, const char **bad, int bits) {
    char s[48];
    while (*f) {
        const char *pct = strchr(f, '%');
        size_t n = pct ? (size_t)(pct - f) : strlen(f);
        if (n > 0 && put(b, f, n))
            return -1;
        if (pct == NULL)
            break;
        f = pct + 1;
        int r;
        if (*f == 'h') {
            r = put_handle(b, va_arg(ap, ze_handle));
            f += 1;
        } else if (*f == 'd') {
            snprintf(s, sizeof s, "%d", va_arg(ap, int));
            r = puts_(b, s);
            f += 1;
        } else if (strncmp(f, "lld", 3) == 0) {
            snprintf(s, sizeof s, "%lld", va_arg(ap, long long));
            r = puts_(b, s);
            f += 3;
        } else if (strncmp(f, "zu", 2) == 0) {
            snprintf(s, sizeof s, "%zu", va_arg(ap, size_t));
            r = puts_(b, s);
            f += 2;
        } else if (*f == 'g') {
            double x = va_arg(ap, double);
            r = bits ? put_number_bits(b, x) : put_number(b, x);
            f += 1;
        } else if (*f == 'b') {
            r = puts_(b, va_arg(ap, int) ? "true" : "false");
            f += 1;
        } else if (*f == 's') {
            r = put_string(b, va_arg(ap, const char *));
            f += 1;
        } else if (*f == 'j') {
            const char *j = va_arg(ap, const char *);
            r = puts_(b, j ? j : "null");
            f += 1;
        } else if (*f == 'H') {
            const ze_handle *hs = va_arg(ap, const ze_handle *);
            size_t count = va_arg(ap, size_t);
            r = put(b, "[", 1);
            for (size_t i = 0; i < count && r == 0; i++)
                r = (i > 0 ? put(b, ",", 1) : 0) || put_handle(b, hs[i]);
            r = r || put(b, "]", 1);
            f += 1;
        } else if (*f == '%') {
            r = put(b, "%", 1);
            f += 1;
        } else {
            *bad = pct;
            return -2;
        }
        if (r)
            return -1;
    }
    return 0;
}

int ze_vjsonf(char *out, size_t cap, const char *f, va_list ap) {
    if (cap == 0)
        return -1;
    buf b = {out, 0, cap, 1, 0};
    out[0] = 0;
    const char *bad;
    if (format(&b, f, ap, &bad, 0) != 0 || b.len > (size_t)INT32_MAX)
        return -1;
    return (int)b.len;
}

int ze_jsonf(char *out, size_t cap, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = ze_vjsonf(out, cap, f, ap);
    va_end(ap);
    return n;
}

/* arguments formats a call's arguments into the SDK's buffer. */
static int arguments(const char *what, const char *f, va_list ap, ze_error *err) {
    args.len = 0;
    args.p[0] = 0;
    if (f == NULL)
        return ZE_OK;
    const char *bad = NULL;
    switch (format(&args, f, ap, &bad, 1)) {
    case -1:
        return sdk_fail(err, ZE_ERR_NOMEM, "%s: no memory left for the arguments' %zu bytes of JSON", what, args.len);
    case -2:
        return sdk_fail(err, ZE_ERR_ARGS, "%s: the arguments' format \"%s\" has %.2s, not a directive of zeroeng.h", what,
                        f, bad);
    }
    return ZE_OK;
}

/* ---- Parsing results ---------------------------------------------------------------------------- */

#define MAX_DEPTH 64

static const char *space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* skip returns the end of the JSON value at p, or NULL when there is none. */
static const char *skip(const char *p, const char *end, int depth) {
    if (p >= end || depth > MAX_DEPTH)
        return NULL;
    switch (*p) {
    case '"':
        for (p++; p < end; p++) {
            if (*p == '\\')
                p++;
            else if (*p == '"')
                return p + 1;
        }
        return NULL;
    case '[':
    case '{': {
        char close = *p == '[' ? ']' : '}';
        p = space(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= end || *p != '"' || (p = skip(p, end, depth + 1)) == NULL)
                    return NULL;
                p = space(p, end);
                if (p >= end || *p != ':')
                    return NULL;
                p = space(p + 1, end);
            }
            if ((p = skip(p, end, depth + 1)) == NULL)
                return NULL;
            p = space(p, end);
            if (p < end && *p == close)
                return p + 1;
            if (p >= end || *p != ',')
                return NULL;
            p = space(p + 1, end);
        }
    }
    }
    static const char *const words[] = {"null", "true", "false"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(end - p) >= n && memcmp(p, words[i], n) == 0)
            return p + n;
    }
    const char *q = p;
    while (q < end && strchr("+-.eE0123456789", *q) != NULL)
        q++;
    return q > p ? q : NULL;
}

/* number reads the JSON number of len bytes at p. */
static int number(const char *p, size_t len, double *x) {
    char s[64];
    if (len >= sizeof s)
        return -1;
    memcpy(s, p, len);
    s[len] = 0;
    char *end;
    *x = strtod(s, &end);
    return *end == 0 ? 0 : -1;
}

/* is reports whether the JSON string at p, len bytes with its quotes, is s (no escapes). */
static int is(const char *p, size_t len, const char *s) {
    size_t n = strlen(s);
    return len == n + 2 && memcmp(p + 1, s, n) == 0;
}

/* The members of an object: member_first starts at the '{', member_next goes on; each gives the
 * key (with its quotes) and the value's text. */
typedef struct member {
    const char *p, *end;
    const char *key, *value;
    size_t key_len, value_len;
} member;

static int member_next(member *m) {
    const char *p = space(m->p, m->end);
    if (p < m->end && *p == ',')
        p = space(p + 1, m->end);
    if (p >= m->end || *p != '"')
        return 0;
    const char *k = p;
    if ((p = skip(p, m->end, 1)) == NULL)
        return 0;
    m->key = k, m->key_len = (size_t)(p - k);
    p = space(space(p, m->end) + 1, m->end); /* past the ':' */
    const char *v = p;
    p = skip(p, m->end, 1);
    if (p == NULL)
        return 0;
    m->value = v, m->value_len = (size_t)(p - v);
    m->p = p;
    return 1;
}

static void member_first(member *m, const ze_value *obj) {
    m->p = obj->json + 1;
    m->end = obj->json + obj->len;
}

int ze_parse(const char *json, size_t len, ze_value *v) {
    const char *end = json + len, *p = space(json, end);
    const char *q = skip(p, end, 0);
    memset(v, 0, sizeof *v);
    if (q == NULL || space(q, end) != end)
        return ZE_ERR_RESULT;
    v->json = p;
    v->len = (size_t)(q - p);
    switch (*p) {
    case 'n':
        v->kind = ZE_NULL;
        return ZE_OK;
    case 't':
    case 'f':
        v->kind = ZE_BOOLEAN;
        v->number = *p == 't';
        return ZE_OK;
    case '"':
        v->kind = ZE_STRING;
        return ZE_OK;
    case '[':
        v->kind = ZE_ARRAY;
        return ZE_OK;
    case '{':
        break;
    default:
        v->kind = ZE_NUMBER;
        return number(p, v->len, &v->number) == 0 ? ZE_OK : ZE_ERR_RESULT;
    }
    /* An object: a handle {"$":h,"type":"tensor"}, a number {"$num":"NaN"}, or plain data. */
    v->kind = ZE_OBJECT;
    member m;
    member_first(&m, v);
    int keys = 0, id = 0, num = 0;
    double x = 0;
    while (member_next(&m)) {
        keys++;
        if (is(m.key, m.key_len, "$") && number(m.value, m.value_len, &x) == 0 && x >= 1 && x <= INT32_MAX &&
            x == floor(x)) {
            id = 1;
        } else if (is(m.key, m.key_len, "type") && m.value[0] == '"' && m.value_len - 2 < sizeof v->type) {
            memcpy(v->type, m.value + 1, m.value_len - 2);
            v->type[m.value_len - 2] = 0;
        } else if (is(m.key, m.key_len, "$num")) {
            num = is(m.value, m.value_len, "NaN") ? 1 : is(m.value, m.value_len, "Infinity") ? 2
                                                    : is(m.value, m.value_len, "-Infinity") ? 3
                                                                                            : 0;
        }
    }
    if (id && keys == 1 + (v->type[0] != 0)) {
        v->kind = ZE_HANDLE;
        v->handle = (ze_handle)x;
    } else if (num && keys == 1) {
        v->kind = ZE_NUMBER;
        v->number = num == 1 ? NAN : num == 2 ? INFINITY : -INFINITY;
    }
    if (v->kind != ZE_HANDLE)
        v->type[0] = 0;
    return ZE_OK;
}

int ze_array_at(const ze_value *a, size_t i, ze_value *elem) {
    if (a->kind != ZE_ARRAY)
        return ZE_ERR_RESULT;
    const char *end = a->json + a->len, *p = space(a->json + 1, end);
    for (size_t k = 0; p < end && *p != ']'; k++) {
        const char *q = skip(p, end, 1);
        if (q == NULL)
            return ZE_ERR_RESULT;
        if (k == i)
            return ze_parse(p, (size_t)(q - p), elem);
        p = space(q, end);
        if (p < end && *p == ',')
            p = space(p + 1, end);
    }
    return ZE_ERR_RESULT;
}

size_t ze_array_len(const ze_value *a) {
    if (a->kind != ZE_ARRAY)
        return 0;
    const char *end = a->json + a->len, *p = space(a->json + 1, end);
    size_t n = 0;
    while (p < end && *p != ']') {
        if ((p = skip(p, end, 1)) == NULL)
            break;
        n++;
        p = space(p, end);
        if (p < end && *p == ',')
            p = space(p + 1, end);
    }
    return n;
}

int ze_object_get(const ze_value *obj, const char *key, ze_value *out) {
    if (obj->kind != ZE_OBJECT && obj->kind != ZE_HANDLE)
        return ZE_ERR_RESULT;
    member m;
    member_first(&m, obj);
    while (member_next(&m))
        if (is(m.key, m.key_len, key))
            return ze_parse(m.value, m.value_len, out);
    return ZE_ERR_RESULT;
}

int ze_array_handles(const ze_value *a, ze_handle *out, size_t max, size_t *n) {
    size_t k = 0, len = ze_array_len(a);
    if (a->kind != ZE_ARRAY)
        return ZE_ERR_RESULT;
    for (size_t i = 0; i < len; i++) {
        ze_value e;
        if (ze_array_at(a, i, &e) != ZE_OK || e.kind != ZE_HANDLE)
            return ZE_ERR_RESULT;
        if (k < max)
            out[k++] = e.handle;
    }
    if (n != NULL)
        *n = k;
    return len <= max ? ZE_OK : ZE_ERR_SIZE;
}

/* ---- Calls --------------------------------------------------------------------------------------- */

/* finish takes a call's result (st, n bytes) into the SDK's buffer, reading a result too large for
 * it with result_read, and parses it into *v. */
static int finish(const char *what, int32_t st, uint32_t n, ze_value *v, ze_error *err) {
    if (st == ZE_ERR_SIZE) {
        if (grow(&result, (size_t)n + 1) != 0)
            return sdk_fail(err, ZE_ERR_NOMEM, "%s: no memory left for its result's %u bytes", what, (unsigned)n);
        st = zeroeng_result_read(result.p, cap32(result.cap - 1));
    }
    if (st != ZE_OK)
        return fail(st, err);
    result.len = n;
    result.p[n] = 0; /* the calls offer the host one byte less than the buffer */
    if (v == NULL)
        return ZE_OK;
    if (ze_parse(result.p, n, v) != ZE_OK)
        return sdk_fail(err, ZE_ERR_RESULT, "%s: its result is not JSON the SDK reads: %.200s", what, result.p);
    return ZE_OK;
}

int ze_vcall(const char *path, ze_value *v, ze_error *err, const char *f, va_list ap) {
    int st = arguments(path, f, ap, err);
    if (st != ZE_OK)
        return st;
    uint32_t n = 0;
    st = zeroeng_call(path, cap32(strlen(path)), args.p, cap32(args.len), result.p, cap32(result.cap - 1), &n);
    return finish(path, st, n, v, err);
}

int ze_vmethod(ze_handle h, const char *name, ze_value *v, ze_error *err, const char *f, va_list ap) {
    int st = arguments(name, f, ap, err);
    if (st != ZE_OK)
        return st;
    uint32_t n = 0;
    st = zeroeng_call_method(h, name, cap32(strlen(name)), args.p, cap32(args.len), result.p, cap32(result.cap - 1), &n);
    return finish(name, st, n, v, err);
}

int ze_call(const char *path, ze_value *v, ze_error *err, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int st = ze_vcall(path, v, err, f, ap);
    va_end(ap);
    return st;
}

int ze_method(ze_handle h, const char *name, ze_value *v, ze_error *err, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int st = ze_vmethod(h, name, v, err, f, ap);
    va_end(ap);
    return st;
}

int ze_get(ze_handle h, const char *name, ze_value *v, ze_error *err) {
    uint32_t n = 0;
    int32_t st = zeroeng_get(h, name, cap32(strlen(name)), result.p, cap32(result.cap - 1), &n);
    return finish(name, st, n, v, err);
}

int ze_set(ze_handle h, const char *name, ze_error *err, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int st = arguments(name, f, ap, err);
    va_end(ap);
    if (st != ZE_OK)
        return st;
    return fail(zeroeng_set(h, name, cap32(strlen(name)), args.p, cap32(args.len)), err);
}

/* want checks that a result is of kind k. */
static int want(int st, const char *what, const ze_value *v, ze_kind k, ze_error *err) {
    if (st != ZE_OK || v->kind == k)
        return st;
    return sdk_fail(err, ZE_ERR_RESULT, "%s returned %.*s, not %s", what, v->len > 200 ? 200 : (int)v->len, v->json,
                    k == ZE_HANDLE ? "a handle" : "a number");
}

int ze_call_h(const char *path, ze_handle *out, ze_error *err, const char *f, ...) {
    ze_value v;
    va_list ap;
    va_start(ap, f);
    int st = want(ze_vcall(path, &v, err, f, ap), path, &v, ZE_HANDLE, err);
    va_end(ap);
    *out = st == ZE_OK ? v.handle : 0;
    return st;
}

int ze_method_h(ze_handle h, const char *name, ze_handle *out, ze_error *err, const char *f, ...) {
    ze_value v;
    va_list ap;
    va_start(ap, f);
    int st = want(ze_vmethod(h, name, &v, err, f, ap), name, &v, ZE_HANDLE, err);
    va_end(ap);
    *out = st == ZE_OK ? v.handle : 0;
    return st;
}

int ze_call_num(const char *path, double *out, ze_error *err, const char *f, ...) {
    ze_value v;
    va_list ap;
    va_start(ap, f);
    int st = want(ze_vcall(path, &v, err, f, ap), path, &v, ZE_NUMBER, err);
    va_end(ap);
    *out = st == ZE_OK ? v.number : NAN;
    return st;
}

int ze_method_num(ze_handle h, const char *name, double *out, ze_error *err, const char *f, ...) {
    ze_value v;
    va_list ap;
    va_start(ap, f);
    int st = want(ze_vmethod(h, name, &v, err, f, ap), name, &v, ZE_NUMBER, err);
    va_end(ap);
    *out = st == ZE_OK ? v.number : NAN;
    return st;
}

int ze_item(ze_handle t, double *out, ze_error *err) { return ze_method_num(t, "item", out, err, NULL); }

/* into finishes a call whose result went to the caller's buffer. */
static int into(int32_t st, uint32_t n, char *out, size_t cap, size_t *len, ze_error *err) {
    if (len != NULL)
        *len = n;
    if (st == ZE_ERR_SIZE)
        return st; /* not a failure: ze_result_read takes it */
    if (st != ZE_OK)
        return fail(st, err);
    if (n < cap)
        out[n] = 0;
    return ZE_OK;
}

int ze_call_into(const char *path, char *out, size_t cap, size_t *len, ze_error *err, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int st = arguments(path, f, ap, err);
    va_end(ap);
    if (st != ZE_OK)
        return st;
    uint32_t n = 0;
    st = zeroeng_call(path, cap32(strlen(path)), args.p, cap32(args.len), out, cap32(cap), &n);
    return into(st, n, out, cap, len, err);
}

int ze_method_into(ze_handle h, const char *name, char *out, size_t cap, size_t *len, ze_error *err, const char *f,
                   ...) {
    va_list ap;
    va_start(ap, f);
    int st = arguments(name, f, ap, err);
    va_end(ap);
    if (st != ZE_OK)
        return st;
    uint32_t n = 0;
    st = zeroeng_call_method(h, name, cap32(strlen(name)), args.p, cap32(args.len), out, cap32(cap), &n);
    return into(st, n, out, cap, len, err);
}

int ze_result_read(char *out, size_t cap, ze_error *err) { return fail(zeroeng_result_read(out, cap32(cap)), err); }

/* ---- Handles, scopes, grad mode, tensors ---------------------------------------------------------- */

int ze_release(ze_handle h, ze_error *err) { return fail(zeroeng_release(h), err); }

int ze_forget(ze_handle h, ze_error *err) { return fail(zeroeng_forget(h), err); }

int ze_release_all(ze_handle *hs, size_t n, ze_error *err) {
    int first = ZE_OK;
    for (size_t i = 0; i < n; i++) {
        if (hs[i] == 0)
            continue;
        int32_t st = zeroeng_release(hs[i]);
        hs[i] = 0;
        if (st != ZE_OK && first == ZE_OK)
            first = fail(st, err);
        else if (st != ZE_OK && err != NULL)
            zeroeng_error_clear(); /* a later failure: the first one is reported */
    }
    return first;
}

int ze_scope_open(uint32_t *id, ze_error *err) { return fail(zeroeng_scope_open(id), err); }

int ze_scope_close(uint32_t id, const ze_handle *keep, size_t n, ze_error *err) {
    return fail(zeroeng_scope_close(id, (const uint32_t *)keep, cap32(n)), err);
}

int ze_grad_enabled(int on, int *was, ze_error *err) {
    uint32_t prev = 0;
    int st = fail(zeroeng_grad_enabled(on != 0, &prev), err);
    if (was != NULL)
        *was = prev != 0;
    return st;
}

int ze_tensor_from_bytes(int32_t dtype, const int64_t *shape, int ndim, const void *data, size_t nbytes, ze_handle *out,
                         ze_error *err) {
    int32_t h = 0;
    if (nbytes > MAX_LEN)
        return sdk_fail(err, ZE_ERR_SIZE, "tensor_from_bytes: %zu bytes, more than the ABI's %d", nbytes, INT32_MAX);
    int st = fail(zeroeng_tensor_from_bytes(dtype, shape, ndim, data, (int32_t)nbytes, &h), err);
    *out = st == ZE_OK ? h : 0;
    return st;
}

int ze_tensor_data(ze_handle t, void *out, size_t cap, size_t *len, ze_error *err) {
    uint32_t n = 0;
    int32_t st = zeroeng_tensor_data(t, out, cap32(cap), &n);
    if (len != NULL)
        *len = n;
    return st == ZE_ERR_SIZE ? st : fail(st, err);
}

int ze_tensor_shape(ze_handle t, int32_t *dtype, int64_t shape[ZE_MAX_DIMS], int *ndim, ze_error *err) {
    uint64_t info[1 + ZE_MAX_DIMS]; /* u32 dtype, u32 ndim, then the i64 dimensions */
    int st = fail(zeroeng_tensor_shape(t, info), err);
    if (st != ZE_OK)
        return st;
    int nd = (int)(info[0] >> 32);
    if (dtype != NULL)
        *dtype = (int32_t)(uint32_t)info[0];
    if (ndim != NULL)
        *ndim = nd;
    for (int i = 0; i < nd && i < ZE_MAX_DIMS; i++)
        shape[i] = (int64_t)info[1 + i];
    return ZE_OK;
}

/* ---- Handle-only calls ------------------------------------------------------------------------ */

static int handle_result(int32_t st, int32_t h, ze_handle *out, ze_error *err) {
    if (out != NULL)
        *out = st == ZE_OK ? h : 0;
    return fail(st, err);
}

int ze_op(ze_handle h, const char *name, ze_handle *out, ze_error *err, size_t n, const ze_arg *args) {
    int32_t r = 0;
    return handle_result(zeroeng_invoke_method(h, name, cap32(strlen(name)), args, cap32(n), &r), r, out, err);
}

int ze_lookup(const char *path, ze_handle *out, ze_error *err) {
    int32_t r = 0;
    return handle_result(zeroeng_lookup(path, cap32(strlen(path)), &r), r, out, err);
}

int ze_invoke(ze_handle f, ze_handle *out, ze_error *err, size_t n, const ze_arg *args) {
    int32_t r = 0;
    return handle_result(zeroeng_invoke(f, args, cap32(n), &r), r, out, err);
}

/* ---- The program's functions ------------------------------------------------------------------- */

typedef struct function {
    ze_function_fn fn;
    void *data;
} function;

static function *functions;
static size_t nfunctions, capfunctions;

struct ze_frame {
    int32_t id;
};

int ze_function(ze_function_fn fn, void *data, ze_handle *out, ze_error *err) {
    if (nfunctions == capfunctions) {
        size_t c = capfunctions ? 2 * capfunctions : 16;
        function *f = realloc(functions, c * sizeof *f);
        if (f == NULL)
            return sdk_fail(err, ZE_ERR_NOMEM, "ze_function: no memory left for %zu functions", c);
        functions = f, capfunctions = c;
    }
    int32_t h = 0;
    int st = fail(zeroeng_function_new((int32_t)nfunctions, &h), err);
    if (st != ZE_OK)
        return st;
    functions[nfunctions++] = (function){fn, data};
    *out = h;
    return ZE_OK;
}

int ze_return(ze_frame *frame, ze_error *err, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int st = arguments("ze_return", f, ap, err);
    va_end(ap);
    if (st != ZE_OK)
        return st;
    return fail(zeroeng_frame_return(frame->id, args.p, cap32(args.len)), err);
}

/* set_error makes msg the running function's failure: status 1. */
static int32_t set_error(const char *msg) {
    zeroeng_error_set(msg, cap32(strlen(msg)));
    return 1;
}

/* The export the host calls the program's functions through. The calls a function makes use
 * buffers of their own: the outer call's result buffer is where the host writes that call's
 * result when the function has returned, so it must stay where it is. */
__attribute__((export_name("zeroeng_callback"))) int32_t zeroeng_callback(int32_t id, int32_t frame) {
    if (id < 0 || (size_t)id >= nfunctions)
        return set_error("the host called a function the program never made");
    buf outer_result = result, outer_args = args;
    char result1[1024], args1[512];
    result = (buf){result1, 0, sizeof result1, 0, 0};
    args = (buf){args1, 0, sizeof args1, 0, 0};
    ze_error err;
    ze_error *e = &err;
    ze_value v;
    uint32_t n = 0;
    int st = zeroeng_frame_args(frame, result.p, cap32(result.cap - 1), &n);
    /* The arguments stay in their own buffer while the function's calls use result. */
    st = finish("the function's arguments", st, n, &v, e);
    buf arg_text = result;
    char result2[1024];
    result = (buf){result2, 0, sizeof result2, 0, 0};
    int32_t ret;
    if (st != ZE_OK) {
        ret = set_error(e->message);
    } else {
        ze_frame fr = {frame};
        e->message[0] = 0;
        st = functions[id].fn(functions[id].data, &fr, &v, e);
        ret = st == ZE_OK ? 0 : set_error(e->message[0] ? e->message : ze_status_name(st));
    }
    if (arg_text.heap)
        free(arg_text.p);
    if (result.heap)
        free(result.p);
    if (args.heap)
        free(args.p);
    result = outer_result, args = outer_args;
    return ret;
}
