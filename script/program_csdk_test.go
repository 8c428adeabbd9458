package script

import (
	"context"
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/hooks/wasm"
	"github.com/zeroeng/zeroeng/internal/hookbuild"
)

// cSDKProgram exercises the C SDK (sdk/c): its number and JSON writers
// and its parser on their own, then every wrapper against the host —
// tensors to and from bytes, a result larger than the SDK's buffer and
// than the caller's (ERR_SIZE, result_read), failures turned into the
// host's message and cleared, the SDK's own failures, scopes, grad mode,
// properties, releases; with "pending" it leaves a failure to the host.
const cSDKProgram = `#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeroeng.h"

static ze_error err;

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        int st_ = (x);                                                                                                 \
        if (st_ != ZE_OK) {                                                                                            \
            printf("FAIL %s: %d %s\n", #x, st_, err.message);                                                          \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

static const char *kinds[] = {"null", "boolean", "number", "string", "handle", "array", "object"};

static void show(const char *what, int st, const ze_value *v) {
    char num[40];
    ze_number_string(num, sizeof num, v->number);
    printf("%s: st %d %s %s h%d %s |%.*s|\n", what, st, kinds[v->kind], num, (int)v->handle, v->type, (int)v->len,
           v->json ? v->json : "");
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "pending") == 0) {
        ze_handle t;
        ze_call_h("tensor.nonesuch", &t, NULL, NULL); /* no error out: the failure stays pending */
        printf("still running\n");
        ze_call("tensor.manualSeed", NULL, NULL, "[0]");
        printf("after the next call\n");
        return 0;
    }
    /* Numbers as JavaScript writes them. */
    double xs[] = {0, -0.0, 1, -1.5, 0.1, 100, 123.456, 1e21, 1e-7, 123456789012345680000.0, 5e-324,
                   1.7976931348623157e308, 0.000001, 2.5e-6, 1.0 / 3, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        char s[32];
        int n = ze_number_string(s, sizeof s, xs[i]);
        printf("number %s %d\n", s, n);
    }
    char tiny[3];
    printf("number too small %d\n", ze_number_string(tiny, sizeof tiny, 0.5));

    /* JSON arguments. */
    ze_handle hs[3] = {4, 5, 6};
    char buf[256];
    int n = ze_jsonf(buf, sizeof buf, "[%h,%d,%lld,%zu,%g,%b,%s,%j,%H,%g,%g,%%]", 7, -3, 1LL << 40, (size_t)9, 0.1, 1,
                     "a\"b\\c\n\x01", "{\"k\":[]}", hs, (size_t)3, NAN, -0.0);
    printf("jsonf %d %s\n", n, buf);
    printf("jsonf too small %d\n", ze_jsonf(buf, 4, "[%d]", 12345));
    printf("jsonf bad directive %d\n", ze_jsonf(buf, sizeof buf, "[%q]"));

    /* Results. */
    const char *forms[] = {"null", " true ", "false", "-2.5e3", "\"s\\\"\"", "{\"$\":12,\"type\":\"tensor\"}",
                           "{\"$num\":\"-Infinity\"}", "[1,[2,3],{\"a\":4}]", "{\"a\":{\"$\":3,\"type\":\"object\"},\"b\":2}",
                           "{\"$\":1.5}", "[1,", "nul", "1 2"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        ze_value v;
        int st = ze_parse(forms[i], strlen(forms[i]), &v);
        char what[32];
        snprintf(what, sizeof what, "parse %zu", i);
        show(what, st, &v);
    }
    ze_value a, e;
    ze_parse(forms[7], strlen(forms[7]), &a);
    printf("array len %zu\n", ze_array_len(&a));
    show("array 1", ze_array_at(&a, 1, &e), &e);
    printf("array 3 st %d\n", ze_array_at(&a, 3, &e));
    ze_value o, m;
    ze_parse(forms[8], strlen(forms[8]), &o);
    show("object a", ze_object_get(&o, "a", &m), &m);
    show("object b", ze_object_get(&o, "b", &m), &m);
    printf("object c st %d\n", ze_object_get(&o, "c", &m));
    ze_handle got[4];
    size_t count = 9;
    ze_value ha;
    const char *hj = "[{\"$\":4,\"type\":\"tensor\"},{\"$\":9,\"type\":\"tensor\"}]";
    ze_parse(hj, strlen(hj), &ha);
    printf("handles st %d", ze_array_handles(&ha, got, 4, &count));
    printf(" %zu: %d %d\n", count, (int)got[0], (int)got[1]);
    printf("handles of numbers st %d\n", ze_array_handles(&a, got, 4, &count));

    /* The host. */
    uint32_t major, minor;
    CHECK(ze_abi_version(&major, &minor));
    printf("abi %u.%u\n", (unsigned)major, (unsigned)minor);
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[ZE_MAX_DIMS] = {2, 3};
    ze_handle f, s, r;
    CHECK(ze_tensor_from_bytes(ZE_FLOAT32, shape, 2, data, sizeof data, &f, &err));
    CHECK(ze_method_h(f, "sum", &s, &err, NULL));
    double sum;
    CHECK(ze_item(s, &sum, &err));
    CHECK(ze_method_h(f, "reshape", &r, &err, "[3,%d]", 2));
    int32_t dtype;
    int ndim;
    CHECK(ze_tensor_shape(r, &dtype, shape, &ndim, &err));
    printf("sum %g shape dtype %d ndim %d %lldx%lld\n", sum, (int)dtype, ndim, (long long)shape[0], (long long)shape[1]);
    char small[4];
    size_t len;
    int st = ze_tensor_data(f, small, sizeof small, &len, &err);
    float back[6];
    CHECK(ze_tensor_data(r, back, sizeof back, &len, &err));
    printf("tensor_data small st %d len %zu; back %g %g\n", st, len, back[0], back[5]);
    double mean;
    CHECK(ze_method_num(f, "mean", &mean, &err, NULL) == ZE_ERR_RESULT ? ZE_OK : 1);
    printf("a tensor is not a number: %s\n", err.message);

    /* A result larger than the SDK's buffer (result_read), and than a caller's (ERR_SIZE). */
    ze_handle big;
    ze_value v;
    CHECK(ze_call_h("tensor.arange", &big, &err, "[3000]"));
    CHECK(ze_method(big, "toArray", &v, &err, NULL));
    CHECK(ze_array_at(&v, 2999, &e));
    printf("big %zu last %g\n", ze_array_len(&v), e.number);
    char cb[16];
    st = ze_method_into(big, "toArray", cb, sizeof cb, &len, &err, NULL);
    char *heap = malloc(len + 1);
    CHECK(ze_result_read(heap, len, &err));
    heap[len] = 0;
    printf("into st %d len %zu: %.12s\n", st, len, heap);
    free(heap);
    CHECK(ze_call_into("dist.worldSize", cb, sizeof cb, &len, &err, NULL));
    printf("into fits: %s %zu\n", cb, len);

    /* Failures: the host's message, cleared: the program goes on. */
    ze_handle t;
    st = ze_call_h("tensor.randm", &t, &err, "[[2]]");
    printf("unknown name st %d %s: %s\n", st, ze_status_name(err.status), err.message);
    st = ze_call("optim.SGD", NULL, &err, "[[],{\"lr\":0.1,\"momentun\":0.9}]");
    printf("unknown option st %d: %s\n", st, err.message);
    st = ze_call_h("tensor.manualSeed", &t, &err, "[0]");
    printf("not a handle st %d %d: %s\n", st, (int)t, err.message);
    st = ze_release(999999, &err);
    printf("release st %d: %s\n", st, err.message);
    st = ze_call("tensor.zeros", NULL, &err, "[%q]", 1);
    printf("bad directive st %d: %s\n", st, err.message);
    st = ze_call("tensor.zeros", NULL, &err, "[[2],");
    printf("bad JSON st %d: %s\n", st, err.message);

    /* Scopes, grad mode, properties, releases. */
    uint32_t scope;
    ze_handle x, y;
    CHECK(ze_scope_open(&scope, &err));
    CHECK(ze_call_h("tensor.ones", &x, &err, "[[4]]"));
    CHECK(ze_method_h(x, "mul", &y, &err, "[2]"));
    CHECK(ze_scope_close(scope, &y, 1, &err));
    st = ze_method(x, "sum", NULL, &err, NULL);
    printf("after the scope: x st %d (%s)", st, ze_status_name(st));
    CHECK(ze_method_h(y, "sum", &s, &err, NULL));
    CHECK(ze_item(s, &sum, &err));
    printf(", y sums to %g\n", sum);
    int was;
    ze_value g;
    CHECK(ze_grad_enabled(0, &was, &err));
    CHECK(ze_call("tensor.isGradEnabled", &g, &err, NULL));
    printf("grad was %d, now %s", was, g.number ? "on" : "off");
    CHECK(ze_grad_enabled(was, NULL, &err));
    CHECK(ze_call("tensor.isGradEnabled", &g, &err, NULL));
    printf(", then %s\n", g.number ? "on" : "off");
    CHECK(ze_set(f, "requiresGrad", &err, "%b", 1));
    CHECK(ze_get(f, "requiresGrad", &g, &err));
    printf("requiresGrad %.*s\n", (int)g.len, g.json);
    ze_handle rel[4] = {x, y, 0, 999998};
    st = ze_release_all(rel, 4, &err);
    printf("release_all st %d [%d %d %d %d]: %s\n", st, (int)rel[0], (int)rel[1], (int)rel[2], (int)rel[3], err.message);
    CHECK(ze_call("tensor.manualSeed", NULL, &err, "[1]"));
    printf("done\n");
    return 0;
}
`

// cSDKPure is what the SDK prints before it calls the host: numbers as
// JavaScript's String writes them, JSON arguments, parsed results.
const cSDKPure = `number 0 1
number 0 1
number 1 1
number -1.5 4
number 0.1 3
number 100 3
number 123.456 7
number 1e+21 5
number 1e-7 4
number 123456789012345680000 21
number 5e-324 6
number 1.7976931348623157e+308 23
number 0.000001 8
number 0.0000025 9
number 0.3333333333333333 18
number NaN 3
number Infinity 8
number -Infinity 9
number too small -1
jsonf 110 [{"$":7},-3,1099511627776,9,0.1,true,"a\"b\\c\n\u0001",{"k":[]},[{"$":4},{"$":5},{"$":6}],{"$num":"NaN"},-0,%]
jsonf too small -1
jsonf bad directive -1
parse 0: st 0 null 0 h0  |null|
parse 1: st 0 boolean 1 h0  |true|
parse 2: st 0 boolean 0 h0  |false|
parse 3: st 0 number -2500 h0  |-2.5e3|
parse 4: st 0 string 0 h0  |"s\""|
parse 5: st 0 handle 0 h12 tensor |{"$":12,"type":"tensor"}|
parse 6: st 0 number -Infinity h0  |{"$num":"-Infinity"}|
parse 7: st 0 array 0 h0  |[1,[2,3],{"a":4}]|
parse 8: st 0 object 0 h0  |{"a":{"$":3,"type":"object"},"b":2}|
parse 9: st 0 object 0 h0  |{"$":1.5}|
parse 10: st 100 null 0 h0  ||
parse 11: st 100 null 0 h0  ||
parse 12: st 100 null 0 h0  ||
array len 3
array 1: st 0 array 0 h0  |[2,3]|
array 3 st 100
object a: st 0 handle 0 h3 object |{"$":3,"type":"object"}|
object b: st 0 number 2 h0  |2|
object c st 100
handles st 0 2: 4 9
handles of numbers st 100
`

// TestCSDK: the C SDK writes and reads the ABI's JSON as documented, and
// its wrappers hand the host's results, statuses and messages to the
// program; a failure a program leaves pending (no ze_error) ends the rank
// at its next call with the original message.
func TestCSDK(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.CProgram(t, cSDKProgram)
	out, stderr, err := runProgram(t, context.Background(), prog, 1, wasm.Config{})
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	if !strings.HasPrefix(out, cSDKPure) {
		t.Fatalf("the SDK's own output:\n%s\nwant\n%s", out, cSDKPure)
	}
	for _, want := range []string{
		"abi 1.1\n",
		"sum 21 shape dtype 0 ndim 2 3x2\n",
		"tensor_data small st 5 len 24; back 1 6\n",
		"a tensor is not a number: mean returned {\"$\":",
		"big 3000 last 2999\n",
		"into st 5 len 13891: [0,1,2,3,4,5\n",
		"into fits: 1 1\n",
		"unknown name st 1 ERR_INVALID: prog.wasm: host call call failed (ERR_INVALID): \"tensor.randm\" is not in the API",
		"did you mean rand?\n",
		"unknown option st 8: ", "did you mean momentum?",
		"not a handle st 100 0: tensor.manualSeed returned null, not a handle\n",
		"release st 2: ", "handle 999999 is not one the program holds",
		"bad directive st 101: tensor.zeros: the arguments' format \"[%q]\" has %q, not a directive of zeroeng.h\n",
		"bad JSON st 1: ", "the arguments: JSON",
		"after the scope: x st 2 (ERR_HANDLE), y sums to 8\n",
		"grad was 1, now off, then on\n",
		"requiresGrad true\n",
		"release_all st 2 [0 0 0 0]: ", "handle 999998 is not one",
		"done\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}

	out, stderr, err = runProgram(t, context.Background(), prog, 1, wasm.Config{}, "pending")
	if err == nil || !strings.Contains(err.Error(), "tensor.nonesuch") || !strings.Contains(out, "still running") || strings.Contains(out, "after the next call") {
		t.Fatalf("a pending failure: error %v, output %q %q", err, out, stderr)
	}
}

// cFunctionsProgram exercises the C SDK's 1.1 part: handle-only calls
// (ze_op, ze_lookup, ze_invoke) and C functions as values of the API
// (ze_function, ze_return), through nn.utils.checkpoint, nested, and
// failing.
const cFunctionsProgram = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeroeng.h"

static ze_error err;
static ze_handle lin;
static int calls;

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        int st_ = (x);                                                                                                 \
        if (st_ != ZE_OK) {                                                                                            \
            printf("FAIL %s: %d %s\n", #x, st_, err.message);                                                          \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

/* block(x) = relu(lin(x)), over handle-only calls. */
static int block(void *data, ze_frame *frame, const ze_value *args, ze_error *e) {
    (void)data;
    ze_value x;
    ze_handle h, r;
    calls++;
    if (ze_array_at(args, 0, &x) != ZE_OK || x.kind != ZE_HANDLE) {
        snprintf(e->message, ZE_MESSAGE_MAX, "block: want a tensor");
        return ZE_ERR_RESULT;
    }
    int st = ze_op(lin, "forward", &h, e, 1, (ze_arg[]){ZE_H(x.handle)});
    if (st == ZE_OK)
        st = ze_op(h, "relu", &r, e, 0, NULL);
    if (st == ZE_OK)
        st = ze_return(frame, e, "%h", r);
    return st;
}

static ze_handle inner;

static int outer(void *data, ze_frame *frame, const ze_value *args, ze_error *e) {
    (void)data;
    ze_value x;
    ze_handle y;
    ze_array_at(args, 0, &x);
    int st = ze_call_h("nn.utils.checkpoint", &y, e, "[%h,%h]", inner, x.handle);
    return st == ZE_OK ? ze_return(frame, e, "%h", y) : st;
}

static int refuses(void *data, ze_frame *frame, const ze_value *args, ze_error *e) {
    (void)data, (void)frame, (void)args;
    snprintf(e->message, ZE_MESSAGE_MAX, "the C block refuses");
    return ZE_ERR_CALL;
}

static int grad_bytes(ze_handle p, unsigned char *out, size_t cap) {
    size_t n;
    ze_value gv;
    CHECK(ze_get(p, "grad", &gv, &err));
    CHECK(ze_tensor_data(gv.handle, out, cap, &n, &err));
    return 0;
}

static void bye(void) { printf("atexit ran\n"); }

int main(void) {
    atexit(bye); /* once, at the end: a reactor's exports are not wrapped with destructors */
    ze_handle x, y, s, w, f, relu, r, pair;
    int st0;
    unsigned char plain[128], ck[128];
    CHECK(ze_call("tensor.manualSeed", NULL, &err, "[0]"));
    CHECK(ze_call_h("nn.Linear", &lin, &err, "[4,4]"));
    CHECK(ze_call_h("tensor.randn", &x, &err, "[[2,4]]"));
    ze_value wv;
    CHECK(ze_get(lin, "weight", &wv, &err));
    w = wv.handle;

    /* The same gradients through the C function, with and without checkpointing. */
    CHECK(ze_function(block, NULL, &f, &err));
    CHECK(ze_invoke(f, &y, &err, 1, (ze_arg[]){ZE_H(x)}));
    CHECK(ze_op(y, "sum", &s, &err, 0, NULL));
    CHECK(ze_op(s, "backward", NULL, &err, 0, NULL));
    if (grad_bytes(w, plain, sizeof plain)) return 1;
    CHECK(ze_method(lin, "zeroGrad", NULL, &err, NULL));
    CHECK(ze_call_h("nn.utils.checkpoint", &y, &err, "[%h,%h]", f, x));
    CHECK(ze_op(y, "sum", &s, &err, 0, NULL));
    CHECK(ze_op(s, "backward", NULL, &err, 0, NULL));
    if (grad_bytes(w, ck, sizeof ck)) return 1;
    printf("same gradients %d calls %d\n", memcmp(plain, ck, 64) == 0, calls);

    /* Nested: a function that checkpoints another. */
    inner = f;
    CHECK(ze_function(outer, NULL, &pair, &err));
    CHECK(ze_call_h("nn.utils.checkpoint", &y, &err, "[%h,%h]", pair, x));
    CHECK(ze_op(y, "sum", &s, &err, 0, NULL));
    CHECK(ze_op(s, "backward", NULL, &err, 0, NULL));
    printf("nested calls %d\n", calls);

    /* lookup + invoke, numbers, undefined. */
    CHECK(ze_lookup("nn.functional.relu", &relu, &err));
    CHECK(ze_invoke(relu, &r, &err, 1, (ze_arg[]){ZE_H(x)}));
    CHECK(ze_op(x, "mul", &r, &err, 1, (ze_arg[]){ZE_N(0.5)}));
    double v;
    CHECK(ze_op(r, "sum", &s, &err, 0, NULL));
    CHECK(ze_item(s, &v, &err));
    printf("op with a number ok\n");

    /* %g in a call travels as the number's bits: 0.1 and 1e-300 arrive exactly; ze_item reads
     * the element's bytes. */
    ze_handle c;
    double back;
    CHECK(ze_call_h("tensor.full", &c, &err, "[[1],%g,{\"dtype\":\"float64\"}]", 0.1));
    CHECK(ze_item(c, &back, &err));
    printf("0.1 back %d\n", back == 0.1);
    CHECK(ze_call_h("tensor.full", &c, &err, "[[1],%g,{\"dtype\":\"float64\"}]", -1e-300));
    CHECK(ze_item(c, &back, &err));
    printf("-1e-300 back %d\n", back == -1e-300);
    char j[64];
    ze_jsonf(j, sizeof j, "[%g]", 0.1);
    printf("jsonf %s\n", j);

    /* keep() returns its receiver: forgetting that handle leaves the tensor to x. */
    ze_handle k;
    CHECK(ze_op(x, "keep", &k, &err, 0, NULL));
    CHECK(ze_forget(k, &err));
    CHECK(ze_op(x, "sum", &s, &err, 0, NULL));
    printf("forget leaves the tensor\n");
    st0 = ze_forget(k, &err);
    printf("forget twice st %d\n", st0);

    /* Failures: a C function's, and a result that is data. */
    ze_handle no;
    CHECK(ze_function(refuses, NULL, &no, &err));
    int st = ze_call_h("nn.utils.checkpoint", &y, &err, "[%h,%h]", no, x);
    printf("refused st %d: %s\n", st, err.message);
    st = ze_op(s, "item", &y, &err, 0, NULL);
    printf("data st %d: %s\n", st, err.message);
    st = ze_op(x, "add", &y, &err, 1, (ze_arg[]){{7, 0, 0}});
    printf("bad tag st %d: %s\n", st, err.message);
    printf("done\n");
    return 0;
}
`

// TestCSDKFunctions: the C SDK's handle-only calls and its functions as
// values of the API — the same gradients through nn.utils.checkpoint as
// without, the function run again in backward, nested, and a function's
// failure with its own message.
func TestCSDKFunctions(t *testing.T) {
	skipShortPrograms(t)
	prog := hookbuild.CProgram(t, cFunctionsProgram)
	out, stderr, err := runProgram(t, context.Background(), prog, 1, wasm.Config{})
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	for _, want := range []string{
		"same gradients 1 calls 3\n",
		"nested calls 6\n",
		"op with a number ok\n",
		"forget leaves the tensor\n", "forget twice st 2\n",
		"0.1 back 1\n", "-1e-300 back 1\n", "jsonf [0.1]\n",
		"refused st 8: ", "the program's function 2 failed: the C block refuses\n",
		"data st 1: ", "tensor.item returned data (", "call and call_method return data",
		"bad tag st 1: ", "argument 0 has tag 7",
		"done\natexit ran\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "atexit ran"); n != 1 {
		t.Errorf("the atexit handler ran %d times:\n%s", n, out)
	}
}
