/*
 * fashion_mnist.c: samples/fashion_mnist.js as a WebAssembly training program in C, over the C
 * SDK (sdk/c): an MLP 784-256-128-10 (ReLU) trained with Adam (lr 1e-3), batch 128, on Debian's
 * dataset-fashion-mnist. It makes the script's calls in the script's order, so that it draws the
 * same random numbers and trains the same model bit for bit: on one rank, and on several with
 * each rank's share of every batch under DistributedDataParallel (or ZeRO).
 *
 *   make programs      # samples/programs/build/fashion_mnist_c.wasm
 *   zeroeng run samples/programs/build/fashion_mnist_c.wasm                    # 5 epochs
 *   zeroeng run samples/programs/build/fashion_mnist_c.wasm -- --data DIR --epochs 1
 *   zeroeng run --nproc 2 samples/programs/build/fashion_mnist_c.wasm          # DDP over 2 ranks
 *   zeroeng run --nproc 4 samples/programs/build/fashion_mnist_c.wasm -- --zero 2
 *
 * The flags are the script's: --data DIR (a program has no environment: the default is
 * /usr/share/datasets/fashion-mnist, not ZEROENG_FMNIST_DIR), --epochs N, --steps N (at most N
 * steps an epoch), --zero 1|2|overlap, --bf16. Every epoch prints the test accuracy; the last line
 * is the result as JSON; with zeroeng run --metrics FILE every step's loss goes to FILE.
 *
 * Build: clang --target=wasm32-wasi --sysroot=/usr -O2 -Wall -Wextra -I sdk/c \
 *            -o fashion_mnist_c.wasm samples/programs/c/fashion_mnist.c sdk/c/zeroeng.c
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 too */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zeroeng.h"

static const char *prog = "fashion_mnist.c";
static const char *usage_args = "[-- --data DIR] [--epochs N] [--steps N] [--zero 1|2|overlap] [--bf16]";

/* The options, with the script's defaults. */
static const char *data = "/usr/share/datasets/fashion-mnist";
static long epochs = 5, max_steps = 0; /* 0: every step */
static const char *zero_mode = NULL;   /* NULL, "1", "2" or "overlap" */
static int bf16 = 0;

static ze_error err;

/* check ends the program with a failed call's message. */
static void check(int st) {
    if (st != ZE_OK) {
        fprintf(stderr, "%s: %s\n", prog, err.message);
        exit(1);
    }
}

static void usage_error(const char *what) {
    fprintf(stderr, "%s: %s\nusage: zeroeng run %s %s\n", prog, what, prog, usage_args);
    exit(2);
}

/* count parses a positive integer as the script's Number(value) does for one. */
static long count(const char *s) {
    char *end;
    double x = s != NULL && *s ? strtod(s, &end) : NAN;
    if (isnan(x) || *end != 0 || x != floor(x) || x <= 0 || x > 1e9)
        return 0;
    return (long)x;
}

static void parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char name[32];
        const char *eq = strchr(argv[i], '='), *inline_value = NULL;
        size_t n = eq != NULL ? (size_t)(eq - argv[i]) : strlen(argv[i]);
        if (n >= sizeof name)
            n = sizeof name - 1;
        memcpy(name, argv[i], n);
        name[n] = 0;
        if (eq != NULL)
            inline_value = eq + 1;
#define VALUE() (inline_value != NULL ? inline_value : i + 1 < argc ? argv[++i] : NULL)
        if (strcmp(name, "--data") == 0) {
            data = VALUE();
        } else if (strcmp(name, "--epochs") == 0) {
            epochs = count(VALUE());
        } else if (strcmp(name, "--steps") == 0) {
            max_steps = count(VALUE());
            if (max_steps == 0)
                max_steps = -1;
        } else if (strcmp(name, "--zero") == 0) {
            zero_mode = VALUE();
            if (zero_mode == NULL)
                zero_mode = "";
        } else if (strcmp(name, "--bf16") == 0) {
            bf16 = 1;
        } else if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
            printf("usage: zeroeng run %s %s\n", prog, usage_args);
            exit(0);
        } else {
            char what[300];
            snprintf(what, sizeof what, "unknown argument %s", argv[i]);
            usage_error(what);
        }
#undef VALUE
    }
    if (data == NULL || *data == 0 || epochs == 0 || max_steps < 0)
        usage_error("--data needs a directory, --epochs and --steps a positive integer");
    if (zero_mode != NULL && strcmp(zero_mode, "1") != 0 && strcmp(zero_mode, "2") != 0 &&
        strcmp(zero_mode, "overlap") != 0)
        usage_error("--zero takes 1 (sharded optimizer state), 2 (sharded gradients too) or overlap (stage 1, step "
                    "overlapped with backward)");
}

/* load reads one split: images as float32 in [0, 1], [N, 784], and int64 labels. The scope gives
 * back the uint8 images and the unscaled copy as it closes: only the two results stay. */
static void load(const char *prefix, ze_handle *x, ze_handle *y) {
    char path[1024];
    ze_handle h[4] = {0, 0, 0, 0}; /* the images, the labels, reshaped, as float */
    uint32_t scope;
    check(ze_scope_open(&scope, &err));
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", data, prefix);
    int st = ze_call_h("io.loadIdx", &h[0], &err, "[%s]", path);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", data, prefix);
    if (st == ZE_OK)
        st = ze_call_h("io.loadIdx", &h[1], &err, "[%s]", path);
    if (st == ZE_OK)
        st = ze_method_h(h[0], "reshape", &h[2], &err, "[-1,784]");
    if (st == ZE_OK)
        st = ze_method_h(h[2], "float", &h[3], &err, NULL);
    if (st == ZE_OK)
        st = ze_method_h(h[3], "div", x, &err, "[255]");
    if (st == ZE_OK)
        st = ze_method_h(h[1], "long", y, &err, NULL);
    if (st != ZE_OK) {
        fprintf(stderr,
                "%s: cannot read the Fashion-MNIST data in %s:\n  %s\n"
                "Install it with `sudo apt-get install dataset-fashion-mnist` (Debian, Ubuntu), or point --data DIR\n"
                "at a directory holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,\n"
                "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz.\n",
                prog, data, err.message);
        exit(1);
    }
    ze_handle keep[2] = {*x, *y};
    check(ze_scope_close(scope, keep, 2, &err));
    check(ze_release_all(h, 4, &err));
}

/* rows is a tensor's first dimension. */
static long long rows(ze_handle t) {
    int64_t shape[ZE_MAX_DIMS];
    int ndim;
    check(ze_tensor_shape(t, NULL, shape, &ndim, &err));
    return ndim > 0 ? shape[0] : 0;
}

/* input is x as the model takes it: under --bf16 a bfloat16 copy, whose handle goes to *made
 * (0 otherwise), for the caller to release. */
static ze_handle input(ze_handle x, ze_handle *made) {
    *made = 0;
    if (!bf16)
        return x;
    check(ze_op(x, "bfloat16", made, &err, 0, NULL));
    return *made;
}

static double number(const char *path) {
    double x;
    check(ze_call_num(path, &x, &err, NULL));
    return x;
}

/* fixed writes x as JavaScript's x.toFixed(digits): printf rounds an exact tie (x a multiple of
 * 2^-(digits+1), odd) to even, toFixed away from zero. */
static const char *fixed(char *buf, size_t cap, double x, int digits) {
    double t = ldexp(fabs(x), digits + 1);
    if (t == floor(t) && fmod(t, 2) == 1)
        x = nextafter(x, x > 0 ? INFINITY : -INFINITY);
    snprintf(buf, cap, "%.*f", digits, x == 0 ? 0 : x);
    return buf;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static ze_handle model, opt, x_train, y_train, x_test, y_test;

/* accuracy is the model's accuracy on the test set, without autograd, its tensors given back. */
static double accuracy(void) {
    int was;
    uint32_t scope;
    ze_handle h[6] = {0, 0, 0, 0, 0, 0};
    double acc;
    check(ze_grad_enabled(0, &was, &err));
    check(ze_scope_open(&scope, &err));
    check(ze_method_h(model, "forward", &h[1], &err, "[%h]", input(x_test, &h[0])));
    check(ze_method_h(h[1], "argmax", &h[2], &err, "[1]"));
    check(ze_method_h(h[2], "eq", &h[3], &err, "[%h]", y_test));
    check(ze_method_h(h[3], "float", &h[4], &err, NULL));
    check(ze_method_h(h[4], "mean", &h[5], &err, NULL));
    check(ze_item(h[5], &acc, &err));
    check(ze_scope_close(scope, NULL, 0, &err));
    check(ze_release_all(h, 6, &err));
    check(ze_grad_enabled(was, NULL, &err));
    return acc;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 0)
        prog = argv[0];
    parse_args(argc, argv);

    load("train", &x_train, &y_train);
    load("t10k", &x_test, &y_test);
    const long long n = rows(x_train), batch = 128;
    long long steps = (n + batch - 1) / batch;
    if (max_steps > 0 && max_steps < steps)
        steps = max_steps;

    /* With --nproc N the ranks share each batch of 128 (data parallel): every rank draws the same
     * permutation, takes its N-th of each batch, and DistributedDataParallel averages the
     * gradients. */
    const long long world = (long long)number("dist.worldSize"), rank = (long long)number("dist.rank");
    ze_handle layers[5], seq;
    check(ze_call_h("nn.Linear", &layers[0], &err, "[784,256]"));
    check(ze_call_h("nn.ReLU", &layers[1], &err, NULL));
    check(ze_call_h("nn.Linear", &layers[2], &err, "[256,128]"));
    check(ze_call_h("nn.ReLU", &layers[3], &err, NULL));
    check(ze_call_h("nn.Linear", &layers[4], &err, "[128,10]"));
    check(ze_call_h("nn.Sequential", &seq, &err, "[%h,%h,%h,%h,%h]", layers[0], layers[1], layers[2], layers[3],
                    layers[4]));
    check(ze_release_all(layers, 5, &err));
    if (bf16) {
        ze_handle same; /* bfloat16() returns the module */
        check(ze_method_h(seq, "bfloat16", &same, &err, NULL));
        check(ze_release(same, &err));
    }
    model = seq;
    /* --zero shards Adam's state over the ranks (ZeroRedundancyOptimizer): stage 1 under DDP;
     * stage 2 without DDP; overlap runs the sharded step inside DDP's backward. */
    if ((zero_mode == NULL && world > 1) || (zero_mode != NULL && strcmp(zero_mode, "2") != 0))
        check(ze_call_h("nn.parallel.DistributedDataParallel", &model, &err, "[%h]", seq));
    ze_value pv;
    ze_handle params[16];
    size_t np;
    check(ze_method(model, "parameters", &pv, &err, NULL));
    if (ze_array_handles(&pv, params, 16, &np) != ZE_OK) {
        fprintf(stderr, "%s: parameters() returned %.*s\n", prog, (int)pv.len, pv.json);
        return 1;
    }
    if (zero_mode == NULL) {
        check(ze_call_h("optim.Adam", &opt, &err, "[%H,{\"lr\":%g}]", params, np, 1e-3));
    } else {
        check(ze_call_h("zero.ZeroRedundancyOptimizer", &opt, &err,
                        "[%H,{\"optimizer\":\"adam\",\"lr\":%g,\"stage\":%d,\"overlapWithDDP\":%b}]", params, np, 1e-3,
                        strcmp(zero_mode, "2") == 0 ? 2 : 1, strcmp(zero_mode, "overlap") == 0));
        if (strcmp(zero_mode, "overlap") == 0) {
            ze_handle hooks, allreduce, hook;
            check(ze_call_h("dist.commHooks", &hooks, &err, NULL));
            check(ze_get(hooks, "allreduceHook", &pv, &err));
            if (pv.kind != ZE_HANDLE) {
                fprintf(stderr, "%s: dist.commHooks.allreduceHook is %.*s\n", prog, (int)pv.len, pv.json);
                return 1;
            }
            allreduce = pv.handle;
            check(ze_call_h("zero.hookWithZeroStepInterleaved", &hook, &err, "[%h,%h,%h,{\"shardBuckets\":true}]",
                            allreduce, model, opt));
            check(ze_method(model, "registerCommHook", NULL, &err, "[null,%h]", hook));
        }
    }
    check(ze_release_all(params, np, &err));
    ze_value enabled;
    check(ze_call("metrics.enabled", &enabled, &err, NULL));
    const int metrics = enabled.kind == ZE_BOOLEAN && enabled.number != 0;

    char word[64] = "";
    if (zero_mode != NULL)
        snprintf(word, sizeof word, " (ZeRO %s)", zero_mode);
    printf("fashion-mnist: %lld training and %lld test images (%s), MLP 784-256-128-10%s, Adam lr 1e-3%s, batch "
           "%lld",
           n, rows(x_test), data, bf16 ? " in bfloat16" : "", word, batch);
    if (world > 1)
        printf(" over %lld ranks", world);
    printf(", %ld epoch%s\n", epochs, epochs == 1 ? "" : "s");

    long long train_ms = 0, step = 0;
    double acc = 0;
    ze_handle cross_entropy;
    check(ze_lookup("nn.functional.crossEntropy", &cross_entropy, &err));
    for (long epoch = 1; epoch <= epochs; epoch++) {
        ze_handle bar, perm, kept;
        char label[64];
        snprintf(label, sizeof label, "epoch %ld/%ld", epoch, epochs);
        check(ze_call_h("progress.bar", &bar, &err, "[{\"total\":%lld,\"label\":%s}]", steps, label));
        const long long start = now_ms();
        /* The permutation outlives the automatic release of each step's tensors: keep it for the
         * epoch. */
        check(ze_call_h("tensor.randperm", &perm, &err, "[%lld]", n));
        check(ze_method_h(perm, "keep", &kept, &err, NULL));
        double sum = 0;
        long long s = 1;
        for (long long i = 0; i < n && s <= steps; i += batch, s++) {
            const long long size = batch < n - i ? batch : n - i;
            const long long lo = size * rank / world, hi = size * (rank + 1) / world;
            ze_handle h[6] = {0, 0, 0, 0, 0, 0}; /* idx, the images, the input, the output, labels, loss */
            double l;
            /* The step's calls take handles and numbers: they go without JSON (ze_op, ze_invoke),
             * the fast path for what runs every step. */
            check(ze_op(perm, "narrow", &h[0], &err, 3, (ze_arg[]){ZE_N(0), ZE_N(i + lo), ZE_N(hi - lo)}));
            check(ze_op(opt, "zeroGrad", NULL, &err, 0, NULL));
            check(ze_op(x_train, "indexSelect", &h[1], &err, 2, (ze_arg[]){ZE_N(0), ZE_H(h[0])}));
            check(ze_op(model, "forward", &h[3], &err, 1, (ze_arg[]){ZE_H(input(h[1], &h[2]))}));
            check(ze_op(y_train, "indexSelect", &h[4], &err, 2, (ze_arg[]){ZE_N(0), ZE_H(h[0])}));
            check(ze_invoke(cross_entropy, &h[5], &err, 2, (ze_arg[]){ZE_H(h[3]), ZE_H(h[4])}));
            check(ze_op(h[5], "backward", NULL, &err, 0, NULL));
            check(ze_op(opt, "step", NULL, &err, 0, NULL));
            check(ze_item(h[5], &l, &err));
            sum += l;
            step++;
            if (metrics)
                check(ze_call("metrics.log", NULL, &err, "[{\"step\":%lld,\"epoch\":%d,\"loss\":%g}]", step,
                              (int)epoch, l));
            check(ze_method(bar, "update", NULL, &err, "[%lld,{\"loss\":%g,\"samples\":%lld}]", s, l,
                            i + batch < n ? i + batch : n));
            check(ze_release_all(h, 6, &err));
        }
        check(ze_release(kept, &err));
        check(ze_release(perm, &err));
        train_ms += now_ms() - start;
        check(ze_method(bar, "done", NULL, &err, NULL));
        check(ze_release(bar, &err));
        acc = accuracy();
        check(ze_call("metrics.log", NULL, &err, "[{\"epoch\":%d,\"test_acc\":%g,\"train_s\":%g}]", (int)epoch, acc,
                      train_ms / 1e3));
        char l4[32], a4[32], t1[32];
        printf("epoch %ld  loss %s  test accuracy %s  (training %ss)\n", epoch, fixed(l4, sizeof l4, sum / steps, 4),
               fixed(a4, sizeof a4, acc, 4), fixed(t1, sizeof t1, train_ms / 1e3, 1));
    }

    /* The result in bench/torch_fmnist.py's form; train_s counts the training steps only. */
    char a4[32], result[256];
    if (ze_jsonf(result, sizeof result,
                 "{\"workload\":\"fashion_mnist_mlp\",\"dtype\":%s,\"epochs\":%d,\"test_acc\":%g,\"train_s\":%g}",
                 bf16 ? "bfloat16" : "float32", (int)epochs, strtod(fixed(a4, sizeof a4, acc, 4), NULL),
                 train_ms / 1e3) < 0) {
        fprintf(stderr, "%s: the result does not fit its buffer\n", prog);
        return 1;
    }
    check(ze_call("metrics.log", NULL, &err, "[%j]", result));
    printf("%s\n", result);
    return 0;
}
