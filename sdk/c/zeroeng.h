/*
 * zeroeng.h: the C SDK of zeroeng's WebAssembly training programs (docs/wasm-program-abi.md,
 * version 1.1). A program built with it is a WASI command that trains through the very API scripts
 * reach with require("zeroeng"), by name, its arguments as JSON:
 *
 *     ze_error err;
 *     ze_handle lin, x, y;
 *     if (ze_call_h("nn.Linear", &lin, &err, "[%d,%d]", 784, 256) ||
 *         ze_method_h(lin, "forward", &y, &err, "[%h]", x)) {
 *         fprintf(stderr, "train: %s\n", err.message);
 *         return 1;
 *     }
 *
 * Build (clang and wasm-ld with WASI's libc: Debian packages clang, lld, wasi-libc and
 * libclang-rt-dev-wasm32, whose compiler-rt builtins printf's floating point needs; with
 * another WASI sysroot, such as wasi-sdk's, point --sysroot at it):
 *
 *     clang --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 -Wall -Wextra -I sdk/c \
 *         -o prog.wasm prog.c sdk/c/zeroeng.c sdk/c/zeroeng_reactor.c
 *     zeroeng check prog.wasm
 *     zeroeng run prog.wasm -- --its-arguments
 *
 * zeroeng.c brings the ABI's marker export (zeroeng_program_abi_v1); wasm-ld exports the memory;
 * the program is a WASI reactor, whose _initialize the host calls first, and zeroeng_reactor.c's
 * _start calls main with the program's arguments. (A WASI command, without -mexec-model=reactor
 * and zeroeng_reactor.c, works too, but wasm-ld wraps its exports with the constructors and
 * destructors: see ze_function.) Standard output and error are the
 * rank's; a program has no files and no environment (the host reads the data: io.loadIdx).
 *
 * Conventions. Every function returns a status: 0 (ZE_OK), or one of the ABI's statuses below,
 * or one of the SDK's own (ZE_ERR_RESULT, ZE_ERR_ARGS). On a failure the host's message is read
 * (error_message) into *err and the failure is cleared on the host (error_clear), so the program
 * may go on; err may be NULL, and a host failure then stays pending: the host ends the rank with
 * its message at the program's next host call, or at its end. Handles are the ABI's positive
 * numbers; every result that is a tensor or an object is a new handle, which ze_release gives
 * back (the tensors made in a step also go back by the scripts' lifetime rules, README "Tensor
 * lifetimes"). The SDK is not thread-safe (nor are WASI programs threaded).
 *
 * Arguments are a JSON array written with a printf-like format (ze_jsonf): "[%h,{\"lr\":%g}]".
 * Results are parsed into a ze_value: null, a boolean, a number, a string, a handle
 * ({"$":h,"type":"tensor"}), an array or an object, whose text stays readable until the next
 * call.
 */
#ifndef ZEROENG_H
#define ZEROENG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The host functions of module "zeroeng", exactly the ABI's signatures ------------------
 * Pointers are i32 offsets into the program's memory (wasm32's pointers). The SDK's functions
 * below wrap them; a program may call them directly. */

#define ZE_IMPORT_(name) __attribute__((import_module("zeroeng"), import_name(#name)))

ZE_IMPORT_(abi_info) int32_t zeroeng_abi_info(uint32_t out[2]);
ZE_IMPORT_(error_message) int32_t zeroeng_error_message(char *buf, int32_t cap, uint32_t *len_out);
ZE_IMPORT_(error_clear) int32_t zeroeng_error_clear(void);
ZE_IMPORT_(call)
int32_t zeroeng_call(const char *path, int32_t path_len, const char *args, int32_t args_len, char *out, int32_t out_cap,
                     uint32_t *len_out);
ZE_IMPORT_(call_method)
int32_t zeroeng_call_method(int32_t h, const char *name, int32_t name_len, const char *args, int32_t args_len, char *out,
                            int32_t out_cap, uint32_t *len_out);
ZE_IMPORT_(get)
int32_t zeroeng_get(int32_t h, const char *name, int32_t name_len, char *out, int32_t out_cap, uint32_t *len_out);
ZE_IMPORT_(set) int32_t zeroeng_set(int32_t h, const char *name, int32_t name_len, const char *value, int32_t value_len);
ZE_IMPORT_(result_read) int32_t zeroeng_result_read(char *out, int32_t cap);
ZE_IMPORT_(release) int32_t zeroeng_release(int32_t h);
ZE_IMPORT_(scope_open) int32_t zeroeng_scope_open(uint32_t *id_out);
ZE_IMPORT_(scope_close) int32_t zeroeng_scope_close(uint32_t id, const uint32_t *keep, int32_t n);
ZE_IMPORT_(grad_enabled) int32_t zeroeng_grad_enabled(int32_t on, uint32_t *prev_out);
ZE_IMPORT_(tensor_from_bytes)
int32_t zeroeng_tensor_from_bytes(int32_t dtype, const int64_t *shape, int32_t ndim, const void *data, int32_t nbytes,
                                  int32_t *h_out);
ZE_IMPORT_(tensor_data) int32_t zeroeng_tensor_data(int32_t h, void *buf, int32_t cap, uint32_t *len_out);
ZE_IMPORT_(tensor_shape) int32_t zeroeng_tensor_shape(int32_t h, void *out);
/* 1.1: the program's functions and handle-only calls. */
ZE_IMPORT_(function_new) int32_t zeroeng_function_new(int32_t id, int32_t *h_out);
ZE_IMPORT_(frame_args) int32_t zeroeng_frame_args(int32_t frame, char *out, int32_t cap, uint32_t *len_out);
ZE_IMPORT_(frame_return) int32_t zeroeng_frame_return(int32_t frame, const char *value, int32_t value_len);
ZE_IMPORT_(error_set) int32_t zeroeng_error_set(const char *msg, int32_t msg_len);
ZE_IMPORT_(lookup) int32_t zeroeng_lookup(const char *path, int32_t path_len, int32_t *h_out);
ZE_IMPORT_(invoke) int32_t zeroeng_invoke(int32_t f, const void *args, int32_t n, int32_t *out);
ZE_IMPORT_(invoke_method)
int32_t zeroeng_invoke_method(int32_t h, const char *name, int32_t name_len, const void *args, int32_t n, int32_t *out);
ZE_IMPORT_(forget) int32_t zeroeng_forget(int32_t h);

/* ---- Statuses, dtypes, handles, errors ------------------------------------------------------ */

enum {
    ZE_OK = 0,
    ZE_ERR_INVALID = 1, /* a bad argument: JSON that does not parse, a name not in the API */
    ZE_ERR_HANDLE = 2,  /* a handle the program does not hold, or of another kind */
    ZE_ERR_BOUNDS = 3,  /* a pointer and length outside the program's memory */
    ZE_ERR_DTYPE = 4,   /* a dtype code the ABI does not define */
    ZE_ERR_SIZE = 5,    /* a buffer too small (not a failure: see ze_call_into), a shape too large */
    ZE_ERR_NOMEM = 7,   /* the device's memory is exhausted (or, from the SDK, the program's) */
    ZE_ERR_CALL = 8,    /* the API function raised an error */
    ZE_ERR_LIMIT = 9,   /* the program holds 2^20 handles */
    /* The SDK's own: */
    ZE_ERR_RESULT = 100, /* a result not of the kind asked for (a handle, a number) */
    ZE_ERR_ARGS = 101    /* an argument format the SDK does not know */
};

/* The ABI's dtype codes. */
enum {
    ZE_FLOAT32 = 0,
    ZE_FLOAT16 = 1,
    ZE_BFLOAT16 = 2,
    ZE_INT64 = 3,
    ZE_FLOAT64 = 4,
    ZE_INT32 = 5,
    ZE_UINT8 = 6,
    ZE_BOOL = 7
};

#define ZE_MAX_DIMS 16

typedef int32_t ze_handle; /* 0: none */

/* A failure: its status and the host's message (or the SDK's), NUL-terminated, cut to fit. */
#define ZE_MESSAGE_MAX 2048
typedef struct ze_error {
    int32_t status;
    char message[ZE_MESSAGE_MAX];
} ze_error;

/* The status's name in the ABI ("ERR_CALL"). */
const char *ze_status_name(int32_t status);

/* The host's ABI major and minor versions. */
int ze_abi_version(uint32_t *major, uint32_t *minor);

/* ---- Results ---------------------------------------------------------------------------------- */

typedef enum ze_kind { ZE_NULL, ZE_BOOLEAN, ZE_NUMBER, ZE_STRING, ZE_HANDLE, ZE_ARRAY, ZE_OBJECT } ze_kind;

typedef struct ze_value {
    ze_kind kind;
    double number;    /* ZE_NUMBER (NaN and the infinities too); ZE_BOOLEAN: 1 or 0 */
    ze_handle handle; /* ZE_HANDLE */
    char type[12];    /* ZE_HANDLE: "tensor", "object" or "function" */
    const char *json; /* the value's JSON text (not NUL-terminated) and its length: in the SDK's */
    size_t len;       /* buffer for a call's result, valid until the next call */
} ze_value;

/* Parses the JSON value of len bytes at json. ZE_ERR_RESULT when it is not one. */
int ze_parse(const char *json, size_t len, ze_value *v);
/* An array's length (0 for a value that is not an array), and its i-th element. */
size_t ze_array_len(const ze_value *array);
int ze_array_at(const ze_value *array, size_t i, ze_value *elem);
/* An object's member named key (ZE_ERR_RESULT when it has none). */
int ze_object_get(const ze_value *object, const char *key, ze_value *member);
/* The handles of an array of handles (parameters(): [{"$":4,"type":"tensor"}, ...]): at most
 * max go to out, their number to *n. ZE_ERR_RESULT for an element that is not a handle. */
int ze_array_handles(const ze_value *array, ze_handle *out, size_t max, size_t *n);

/* ---- Calls -------------------------------------------------------------------------------------
 * args is the arguments' format (NULL: none), a JSON array with these directives (ze_jsonf):
 *   %h    a handle (ze_handle): {"$":h}
 *   %H    an array of handles (const ze_handle *, then a size_t count): [{"$":a},{"$":b}]
 *   %d    an int;  %lld  a long long;  %zu  a size_t
 *   %g    a double: the shortest text that reads back as it; NaN and the infinities as the
 *         ABI's {"$num":"NaN"}, {"$num":"Infinity"}, {"$num":"-Infinity"}
 *   %b    an int as true or false
 *   %s    a string (const char *), quoted and escaped (NULL: null)
 *   %j    JSON text (const char *), as it is
 *   %%    a percent sign
 * The result, parsed, goes to *result. With result NULL a result that is a handle stays given
 * out with no one to release it: pass a ze_value to calls that return a tensor or an object. */

/* Calls the API function at a dotted path of require("zeroeng") ("nn.functional.crossEntropy";
 * "new nn.Linear" constructs); a path to a value that is not a function, with no
 * arguments, reads it ("dist.worldSize", "metrics.enabled"). */
int ze_call(const char *path, ze_value *result, ze_error *err, const char *args, ...);
/* Calls method name of handle h's value ("forward", "backward", "step"). */
int ze_method(ze_handle h, const char *name, ze_value *result, ze_error *err, const char *args, ...);
/* Reads property name of handle h's value ("grad", "paramGroups"). */
int ze_get(ze_handle h, const char *name, ze_value *result, ze_error *err);
/* Writes property name of handle h's value, from JSON written with value's format. */
int ze_set(ze_handle h, const char *name, ze_error *err, const char *value, ...);

/* The same, for a result that must be a handle or a number: one of another kind is ZE_ERR_RESULT
 * (a handle it held stays given out: a value the program did not expect is not released). */
int ze_call_h(const char *path, ze_handle *out, ze_error *err, const char *args, ...);
int ze_method_h(ze_handle h, const char *name, ze_handle *out, ze_error *err, const char *args, ...);
int ze_call_num(const char *path, double *out, ze_error *err, const char *args, ...);
int ze_method_num(ze_handle h, const char *name, double *out, ze_error *err, const char *args, ...);
/* t.item(): the value of a one-element tensor. */
int ze_item(ze_handle t, double *out, ze_error *err);

/* The va_list forms. */
int ze_vcall(const char *path, ze_value *result, ze_error *err, const char *args, va_list ap);
int ze_vmethod(ze_handle h, const char *name, ze_value *result, ze_error *err, const char *args, va_list ap);

/* Calls with the result's JSON in the caller's buffer: buf (cap bytes) gets it, NUL-terminated
 * when there is room, and *len its length. A result longer than cap is ZE_ERR_SIZE, not a
 * failure: the call happened, and *len says how large a buffer ze_result_read takes it into
 * (before the next call). */
int ze_call_into(const char *path, char *buf, size_t cap, size_t *len, ze_error *err, const char *args, ...);
int ze_method_into(ze_handle h, const char *name, char *buf, size_t cap, size_t *len, ze_error *err, const char *args,
                   ...);
int ze_result_read(char *buf, size_t cap, ze_error *err);

/* ---- Handles, scopes, grad mode -------------------------------------------------------------- */

/* Gives handle h back: a tensor the program made goes back to the memory pool (as t.release()
 * does); a parameter, a gradient or another value is only forgotten. */
int ze_release(ze_handle h, ze_error *err);
/* Gives handle h back and leaves its tensor to the scripts' lifetime rules (its scope, its
 * generation, autograd), as a script's variable going out of scope: for a tensor the API may hold
 * too (a module's buffer, the receiver an in-place method returns), which ze_release would free. */
int ze_forget(ze_handle h, ze_error *err);
/* Releases the n handles at hs that are not 0, and sets them to 0; the first failure is the
 * status (the others are still released). */
int ze_release_all(ze_handle *hs, size_t n, ze_error *err);

/* tensor.scope: the tensors made between ze_scope_open and ze_scope_close go back at the close,
 * but those of the n handles at keep, which move to the enclosing scope. Scopes close innermost
 * first. */
int ze_scope_open(uint32_t *id, ze_error *err);
int ze_scope_close(uint32_t id, const ze_handle *keep, size_t n, ze_error *err);

/* Turns autograd's recording on or off (tensor.noGrad); *was (may be NULL) gets whether it was
 * on, to restore it. */
int ze_grad_enabled(int on, int *was, ze_error *err);

/* ---- Tensors as bytes ------------------------------------------------------------------------ */

/* A tensor of dtype and shape (ndim dimensions) from its nbytes of data (row-major,
 * little-endian). */
int ze_tensor_from_bytes(int32_t dtype, const int64_t *shape, int ndim, const void *data, size_t nbytes, ze_handle *out,
                         ze_error *err);
/* The tensor's bytes into buf (cap bytes), their length to *len; ZE_ERR_SIZE (not a failure)
 * when cap is too small, nothing written, *len the size to offer. */
int ze_tensor_data(ze_handle t, void *buf, size_t cap, size_t *len, ze_error *err);
/* The tensor's dtype code and shape (shape holds ZE_MAX_DIMS). */
int ze_tensor_shape(ze_handle t, int32_t *dtype, int64_t shape[ZE_MAX_DIMS], int *ndim, ze_error *err);

/* ---- Handle-only calls (ABI 1.1) ----------------------------------------------------------------
 * For a step's many small operations: arguments that are handles and numbers, a result that is a
 * handle, no JSON on either side. ze_op(x, "add", &y, &err, 1, (ze_arg[]){ZE_H(w)}). */

typedef struct ze_arg {
    uint32_t tag;     /* 0 a handle, 1 a number, 2 undefined */
    ze_handle handle; /* tag 0 */
    double number;    /* tag 1 */
} ze_arg;

#define ZE_H(h) ((ze_arg){0, (h), 0})
#define ZE_N(x) ((ze_arg){1, 0, (double)(x)})
#define ZE_UNDEFINED ((ze_arg){2, 0, 0})
#define ZE_MAX_ARGS 64

/* Calls method name of handle h's value with the n arguments at args; *out gets the result's new
 * handle, 0 for undefined or null (out may be NULL when there is none). A result that is data (a
 * number, an array) is a failure: ze_method returns data. */
int ze_op(ze_handle h, const char *name, ze_handle *out, ze_error *err, size_t n, const ze_arg *args);
/* The API's value at a dotted path ("nn.functional.relu") as a handle, for ze_invoke. */
int ze_lookup(const char *path, ze_handle *out, ze_error *err);
/* Calls function handle f (from ze_lookup or ze_function) with the n arguments at args. */
int ze_invoke(ze_handle f, ze_handle *out, ze_error *err, size_t n, const ze_arg *args);

/* ---- The program's functions (ABI 1.1) ----------------------------------------------------------
 * A C function as a value of the API, wherever it takes one: nn.utils.checkpoint(fn, x),
 * zero.init(build), a comm hook, a module's forward set to it (ze_set(m, "forward", ..., "%h", f)).
 * The host calls it back while the call that led to it runs. */

typedef struct ze_frame ze_frame; /* a running call of a program's function */

/* fn gets the data given to ze_function, the frame, and the call's arguments (parsed; their
 * handles are the call's, forgotten when fn returns; args stays readable while fn runs). It
 * returns 0, having set the function's result with ze_return (none: undefined), or a failure
 * with *err filled: the function then throws err's message, which reaches whatever called it and
 * the program's call that led there. */
typedef int (*ze_function_fn)(void *data, ze_frame *frame, const ze_value *args, ze_error *err);

/* Makes fn (with data) a function of the API: *out gets its handle ("function").
 * Build the program as a reactor (above): in a WASI command wasm-ld wraps every export but
 * _start (zeroeng_callback included) with the program's constructors and destructors, so that
 * WASI's libc would flush stdio and run the atexit handlers after each call of a function. */
int ze_function(ze_function_fn fn, void *data, ze_handle *out, ze_error *err);
/* Sets the running call's result, JSON with the argument directives ("%h" a handle: it passes to
 * the caller; the program does not release it). */
int ze_return(ze_frame *frame, ze_error *err, const char *value, ...);

/* ---- JSON text ---------------------------------------------------------------------------------- */

/* Writes JSON with the directives above into buf (cap bytes, NUL-terminated) and returns its
 * length; -1 when it does not fit or the format has a directive the SDK does not know. */
int ze_jsonf(char *buf, size_t cap, const char *format, ...);
int ze_vjsonf(char *buf, size_t cap, const char *format, va_list ap);

/* Writes x as JavaScript's String(x) does — the shortest decimal that reads back as x, "1e+21",
 * "1.5e-7", "NaN", "Infinity" — into buf (cap bytes, NUL-terminated, 32 are always enough) and
 * returns its length (-1 when it does not fit). */
int ze_number_string(char *buf, size_t cap, double x);

#ifdef __cplusplus
}
#endif

#endif /* ZEROENG_H */
