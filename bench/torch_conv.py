"""PyTorch's side of BenchmarkConv2d (engine/cpu/conv_bench_test.go): each convolution's three
products alone, at the same shapes, so that zeroeng's forward, input gradient and weight gradient
can be held against PyTorch's one by one (PyTorch 1.13 runs them on oneDNN, blocked layouts and
the reorders into and out of them included).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/bin/python3 bench/torch_conv.py [THREADS]

THREADS (default 2) sets torch.set_num_threads. Prints a line per shape and product: the median
of 7 groups of calls (ms a call) and GFLOP/s (2·N·O·C·KH·KW·OH·OW a product), as the Go benchmark
reports them:

    go test -run '^$' -bench 'Conv2d/cnn' ./engine/cpu
"""
import sys
import time

import torch
import torch.nn.functional as F

# name: (N, C, H, W, O, K, stride, padding), as in BenchmarkConv2d.
CASES = {
    "cnn-conv1": (64, 1, 28, 28, 16, 3, 1, 1),
    "cnn-conv2": (64, 16, 14, 14, 32, 3, 1, 1),
    "resnet-16": (32, 16, 32, 32, 16, 3, 1, 1),
    "resnet-32": (32, 32, 16, 16, 32, 3, 1, 1),
    "resnet-down": (32, 16, 32, 32, 32, 3, 2, 1),
}


def median_ms(fn, calls=100, groups=7):
    for _ in range(10):
        fn()
    times = []
    for _ in range(groups):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e3)
    return sorted(times)[groups // 2]


def main():
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    torch.manual_seed(0)
    backward = torch.ops.aten.convolution_backward
    for name, (n, c, h, w, o, k, s, p) in CASES.items():
        x, wt = torch.randn(n, c, h, w), torch.randn(o, c, k, k)
        y = F.conv2d(x, wt, stride=s, padding=p)
        dy = torch.randn_like(y)
        flops = 2 * n * o * c * k * k * y.shape[2] * y.shape[3]

        def grad(mask):
            return lambda: backward(dy, x, wt, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)

        for product, fn in (("forward", lambda: F.conv2d(x, wt, stride=s, padding=p)),
                            ("backward-dx", grad([True, False, False])),
                            ("backward-dw", grad([False, True, False]))):
            ms = median_ms(fn)
            print(f"{name}/{product:12} {ms:8.3f} ms {flops / ms / 1e6:7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
