//go:build ignore

// A fake NVRTC (libnvrtc.so.12) for the tests of gpu/nvrtc. The build
// constraint above keeps the Go tool from treating this file as part of
// the package (with CGO_ENABLED=1 a package of C files without cgo does not
// build); fake.NVRTC compiles it with internal/clib.
//
// It implements the calls the binding makes with the C signatures of
// nvrtc.h, and "compiles" a program by writing PTX text that shows what it
// received: a first line with the options, then the source with each
// #include "name" of a header given to nvrtcCreateProgram replaced by the
// header's text. A line "#error text" fails the compilation with
// NVRTC_ERROR_COMPILATION and a log line naming the file and line, as
// NVRTC's does; "#warning text" adds a log line and compiles. With an
// option -arch=sm_XX or --gpu-architecture=sm_XX (or -arch sm_XX in two
// options) it also makes a CUBIN: "FAKECUBIN sm_XX\n" followed by the PTX.
//
// The fakenvrtc_* exports are for the tests: the options and headers of
// the last compilation, the number of live programs, and error injection.

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
    NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8,
    NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9,
    NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10,
    NVRTC_ERROR_INTERNAL_ERROR = 11,
    NVRTC_ERROR_TIME_FILE_WRITE_FAILED = 12,
} nvrtcResult;

#define MAGIC 0x6e767274 /* "nvrt" */

struct prog {
    int magic;
    char *src, *name;
    int nheaders;
    char **headers, **includeNames;
    int compiled; /* 0: not yet, 1: succeeded, -1: failed */
    char *ptx;
    size_t ptxSize; /* with the NUL */
    char *cubin;
    size_t cubinSize;
    char *log;
};

typedef struct prog *nvrtcProgram;

/* A growing string. */
struct buf {
    char *p;
    size_t n, cap;
};

static void put(struct buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->n + n + 1) c *= 2;
        b->p = realloc(b->p, c);
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(struct buf *b, const char *s) { put(b, s, strlen(s)); }

static char *dup(const char *s) {
    if (s == NULL) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    memcpy(d, s, n);
    return d;
}

/* What the tests query. */
static int live;
static int lastNumOptions;
static char *lastOptions[64];
static int lastNumHeaders;
static char *lastHeaderNames[64];
static char *lastName;
static int failCall; /* 1: nvrtcCreateProgram, 2: nvrtcCompileProgram */
static nvrtcResult failResult;

static void clearLast(void) {
    for (int i = 0; i < lastNumOptions; i++) free(lastOptions[i]);
    for (int i = 0; i < lastNumHeaders; i++) free(lastHeaderNames[i]);
    free(lastName);
    lastNumOptions = lastNumHeaders = 0;
    lastName = NULL;
}

void fakenvrtc_reset(void) {
    clearLast();
    failCall = 0;
    failResult = NVRTC_SUCCESS;
}
int fakenvrtc_live_programs(void) { return live; }
int fakenvrtc_num_options(void) { return lastNumOptions; }
const char *fakenvrtc_option(int i) { return i >= 0 && i < lastNumOptions ? lastOptions[i] : NULL; }
int fakenvrtc_num_headers(void) { return lastNumHeaders; }
const char *fakenvrtc_header_name(int i) { return i >= 0 && i < lastNumHeaders ? lastHeaderNames[i] : NULL; }
const char *fakenvrtc_name(void) { return lastName; }
/* fakenvrtc_fail makes the next calls of one function (1: create, 2:
   compile; 0: none) return result. */
void fakenvrtc_fail(int call, int result) {
    failCall = call;
    failResult = (nvrtcResult)result;
}

nvrtcResult nvrtcVersion(int *major, int *minor) {
    if (major == NULL || minor == NULL) return NVRTC_ERROR_INVALID_INPUT;
    *major = 12;
    *minor = 4;
    return NVRTC_SUCCESS;
}

const char *nvrtcGetErrorString(nvrtcResult r) {
    static const char *names[] = {
        "NVRTC_SUCCESS",
        "NVRTC_ERROR_OUT_OF_MEMORY",
        "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
        "NVRTC_ERROR_INVALID_INPUT",
        "NVRTC_ERROR_INVALID_PROGRAM",
        "NVRTC_ERROR_INVALID_OPTION",
        "NVRTC_ERROR_COMPILATION",
        "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
        "NVRTC_ERROR_INTERNAL_ERROR",
        "NVRTC_ERROR_TIME_FILE_WRITE_FAILED",
    };
    if ((int)r < 0 || (size_t)r >= sizeof names / sizeof names[0]) return "NVRTC_ERROR unknown";
    return names[r];
}

static const int archs[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};

nvrtcResult nvrtcGetNumSupportedArchs(int *n) {
    if (n == NULL) return NVRTC_ERROR_INVALID_INPUT;
    *n = (int)(sizeof archs / sizeof archs[0]);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetSupportedArchs(int *out) {
    if (out == NULL) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(out, archs, sizeof archs);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
                               const char *const *headers, const char *const *includeNames) {
    if (failCall == 1) return failResult;
    if (prog == NULL || src == NULL || numHeaders < 0 || numHeaders > 64) return NVRTC_ERROR_INVALID_INPUT;
    if (numHeaders > 0 && (headers == NULL || includeNames == NULL)) return NVRTC_ERROR_INVALID_INPUT;
    for (int i = 0; i < numHeaders; i++) {
        if (headers[i] == NULL || includeNames[i] == NULL) return NVRTC_ERROR_INVALID_INPUT;
    }
    struct prog *p = calloc(1, sizeof *p);
    p->magic = MAGIC;
    p->src = dup(src);
    p->name = dup(name ? name : "default_program");
    p->nheaders = numHeaders;
    p->headers = calloc(numHeaders + 1, sizeof(char *));
    p->includeNames = calloc(numHeaders + 1, sizeof(char *));
    for (int i = 0; i < numHeaders; i++) {
        p->headers[i] = dup(headers[i]);
        p->includeNames[i] = dup(includeNames[i]);
    }
    live++;
    *prog = p;
    return NVRTC_SUCCESS;
}

static int valid(nvrtcProgram p) { return p != NULL && p->magic == MAGIC; }

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
    if (prog == NULL || !valid(*prog)) return NVRTC_ERROR_INVALID_PROGRAM;
    struct prog *p = *prog;
    for (int i = 0; i < p->nheaders; i++) {
        free(p->headers[i]);
        free(p->includeNames[i]);
    }
    free(p->headers);
    free(p->includeNames);
    free(p->src);
    free(p->name);
    free(p->ptx);
    free(p->cubin);
    free(p->log);
    p->magic = 0;
    free(p);
    *prog = NULL;
    live--;
    return NVRTC_SUCCESS;
}

/* expand appends file's text to out, line by line, replacing the
   #include "name" lines of known headers and acting on #error and
   #warning. It returns 0, or -1 after writing an error to the log. */
static int expand(struct prog *p, const char *file, const char *text, struct buf *out, struct buf *log, int depth) {
    int line = 1;
    const char *s = text;
    while (*s) {
        const char *end = strchr(s, '\n');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        char lbuf[1024];
        size_t ln = n < sizeof lbuf - 1 ? n : sizeof lbuf - 1;
        memcpy(lbuf, s, ln);
        lbuf[ln] = 0;
        const char *t = lbuf;
        while (*t == ' ' || *t == '\t') t++;
        char msg[1200];
        if (strncmp(t, "#error", 6) == 0) {
            snprintf(msg, sizeof msg, "%s(%d): error: #error directive: %s\n", file, line, t[6] ? t + 7 : "");
            puts_(log, msg);
            return -1;
        }
        if (strncmp(t, "#warning", 8) == 0) {
            snprintf(msg, sizeof msg, "%s(%d): warning: #warning directive: %s\n", file, line, t[8] ? t + 9 : "");
            puts_(log, msg);
        }
        if (strncmp(t, "#include \"", 10) == 0) {
            char want[512];
            const char *q = strchr(t + 10, '"');
            size_t wn = q ? (size_t)(q - (t + 10)) : 0;
            if (wn >= sizeof want) wn = sizeof want - 1;
            memcpy(want, t + 10, wn);
            want[wn] = 0;
            int found = -1;
            for (int i = 0; i < p->nheaders; i++) {
                if (strcmp(p->includeNames[i], want) == 0) found = i;
            }
            if (found < 0 || depth > 8) {
                snprintf(msg, sizeof msg, "%s(%d): catastrophic error: cannot open source file \"%s\"\n", file, line,
                         want);
                puts_(log, msg);
                return -1;
            }
            if (expand(p, p->includeNames[found], p->headers[found], out, log, depth + 1) < 0) return -1;
        } else {
            put(out, s, n);
            if (end) put(out, "\n", 1);
        }
        if (!end) break;
        s = end + 1;
        line++;
    }
    return 0;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int numOptions, const char *const *options) {
    if (!valid(p)) return NVRTC_ERROR_INVALID_PROGRAM;
    if (numOptions < 0 || numOptions > 64 || (numOptions > 0 && options == NULL)) return NVRTC_ERROR_INVALID_INPUT;
    clearLast();
    lastName = dup(p->name);
    lastNumOptions = numOptions;
    for (int i = 0; i < numOptions; i++) lastOptions[i] = dup(options[i]);
    lastNumHeaders = p->nheaders;
    for (int i = 0; i < p->nheaders; i++) lastHeaderNames[i] = dup(p->includeNames[i]);
    if (failCall == 2) return failResult;

    free(p->ptx);
    free(p->cubin);
    free(p->log);
    p->ptx = p->cubin = p->log = NULL;
    p->ptxSize = p->cubinSize = 0;

    struct buf out = {0}, log = {0};
    puts_(&log, ""); /* an empty log is "", not NULL */
    const char *sm = NULL;
    puts_(&out, "// fake nvrtc options:");
    for (int i = 0; i < numOptions; i++) {
        const char *o = options[i];
        int isValue = i > 0 && options[i - 1] != NULL &&
                      (strcmp(options[i - 1], "-arch") == 0 || strcmp(options[i - 1], "--gpu-architecture") == 0);
        if (o == NULL || (o[0] != '-' && !isValue)) {
            char msg[600];
            snprintf(msg, sizeof msg, "nvrtc: error: invalid option \"%s\"\n", o ? o : "(null)");
            puts_(&log, msg);
            p->log = log.p;
            p->compiled = -1;
            free(out.p);
            return NVRTC_ERROR_INVALID_OPTION;
        }
        puts_(&out, " ");
        puts_(&out, o);
        if (strncmp(o, "-arch=sm_", 9) == 0) sm = o + 6;
        if (strncmp(o, "--gpu-architecture=sm_", 22) == 0) sm = o + 19;
        if ((strcmp(o, "-arch") == 0 || strcmp(o, "--gpu-architecture") == 0) && i + 1 < numOptions &&
            options[i + 1] != NULL && strncmp(options[i + 1], "sm_", 3) == 0)
            sm = options[i + 1];
        if ((strncmp(o, "-arch=compute_", 14) == 0 || strncmp(o, "--gpu-architecture=compute_", 27) == 0)) sm = NULL;
    }
    puts_(&out, "\n");
    if (expand(p, p->name, p->src, &out, &log, 0) < 0) {
        p->log = log.p;
        p->compiled = -1;
        free(out.p);
        return NVRTC_ERROR_COMPILATION;
    }
    p->log = log.p;
    p->ptx = out.p;
    p->ptxSize = out.n + 1;
    if (sm != NULL) {
        struct buf c = {0};
        puts_(&c, "FAKECUBIN ");
        puts_(&c, sm);
        puts_(&c, "\n");
        put(&c, p->ptx, out.n);
        p->cubin = c.p;
        p->cubinSize = c.n; /* binary: no terminating NUL counted */
    }
    p->compiled = 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t *size) {
    if (!valid(p)) return NVRTC_ERROR_INVALID_PROGRAM;
    if (size == NULL) return NVRTC_ERROR_INVALID_INPUT;
    if (p->compiled != 1) return NVRTC_ERROR_INVALID_PROGRAM;
    *size = p->ptxSize;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTX(nvrtcProgram p, char *ptx) {
    if (!valid(p)) return NVRTC_ERROR_INVALID_PROGRAM;
    if (ptx == NULL) return NVRTC_ERROR_INVALID_INPUT;
    if (p->compiled != 1) return NVRTC_ERROR_INVALID_PROGRAM;
    memcpy(ptx, p->ptx, p->ptxSize);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *size) {
    if (!valid(p)) return NVRTC_ERROR_INVALID_PROGRAM;
    if (size == NULL) return NVRTC_ERROR_INVALID_INPUT;
    if (p->compiled != 1 || p->cubin == NULL) return NVRTC_ERROR_INVALID_PROGRAM;
    *size = p->cubinSize;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *cubin) {
    if (!valid(p)) return NVRTC_ERROR_INVALID_PROGRAM;
    if (cubin == NULL) return NVRTC_ERROR_INVALID_INPUT;
    if (p->compiled != 1 || p->cubin == NULL) return NVRTC_ERROR_INVALID_PROGRAM;
    memcpy(cubin, p->cubin, p->cubinSize);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *size) {
    if (!valid(p)) return NVRTC_ERROR_INVALID_PROGRAM;
    if (size == NULL) return NVRTC_ERROR_INVALID_INPUT;
    *size = (p->log ? strlen(p->log) : 0) + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *log) {
    if (!valid(p)) return NVRTC_ERROR_INVALID_PROGRAM;
    if (log == NULL) return NVRTC_ERROR_INVALID_INPUT;
    const char *l = p->log ? p->log : "";
    memcpy(log, l, strlen(l) + 1);
    return NVRTC_SUCCESS;
}
