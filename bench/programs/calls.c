/* calls.c: the per-call cost of a training program's host calls, in C over the raw imports (no
 * SDK): n times t.add(t) on a tensor of 4 elements and the release of the result, with JSON
 * arguments and result (call_method, "json") or handles only (invoke_method, "op").
 * bench/programs.sh builds and runs it beside sdk/go/internal/testprograms/calls and
 * bench/programs/calls.js. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define IMPORT(n) __attribute__((import_module("zeroeng"), import_name(n)))
IMPORT("call")
int32_t ze_call(const char *, int32_t, const char *, int32_t, char *, int32_t, uint32_t *);
IMPORT("call_method")
int32_t ze_call_method(int32_t, const char *, int32_t, const char *, int32_t, char *, int32_t, uint32_t *);
IMPORT("invoke_method") int32_t ze_invoke_method(int32_t, const char *, int32_t, const void *, int32_t, int32_t *);
IMPORT("release") int32_t ze_release(int32_t);
__attribute__((export_name("zeroeng_program_abi_v1"))) void marker(void) {}

struct arg {
    uint32_t tag, handle;
    double number;
};

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    const int n = atoi(argv[1]), json = strcmp(argv[2], "json") == 0;
    char out[256], args[32];
    uint32_t len;
    if (ze_call("tensor.ones", 11, "[[4]]", 5, out, sizeof out, &len) != 0)
        return 1;
    const int t = atoi(strchr(out, ':') + 1);
    const struct arg a = {0, (uint32_t)t, 0};
    const int alen = snprintf(args, sizeof args, "[{\"$\":%d}]", t);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < n; i++) {
        int32_t u;
        if (json) {
            if (ze_call_method(t, "add", 3, args, alen, out, sizeof out, &len) != 0)
                return 1;
            u = atoi(strchr(out, ':') + 1);
        } else if (ze_invoke_method(t, "add", 3, &a, 1, &u) != 0) {
            return 1;
        }
        ze_release(u);
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    printf("%d calls (%s): %.2f us each\n", n, json ? "json" : "op",
           ((double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec)) / 1e3 / n);
    return 0;
}
