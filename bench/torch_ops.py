"""PyTorch's twin of bench/ops.js: the same ops, shapes and timing (ms a call, the median of groups
of 20 calls); with the argument "grad", forward and backward as bench/ops.js grad. TORCH_THREADS sets
torch.set_num_threads (default 1).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 python3 bench/torch_ops.py [grad]
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
grad = sys.argv[1:] == ["grad"]
torch.manual_seed(0)
x = torch.randn(64, 16, 28, 28).requires_grad_(grad)
z = torch.randn(64, 16, 28, 28)
p = (torch.rand(64, 16, 28, 28) + 0.5).requires_grad_(grad)
rows = torch.randn(4096, 196).requires_grad_(grad)
vocab = torch.randn(8, 50257)
mask = x.gt(0)
idx = torch.randint(0, 4096, (2048,))

ops = dict(
    relu=lambda: x.relu(), neg=lambda: x.neg(), abs=lambda: x.abs(), exp=lambda: x.exp(), log=lambda: p.log(),
    sqrt=lambda: p.sqrt(), rsqrt=lambda: p.rsqrt(), reciprocal=lambda: p.reciprocal(), sign=lambda: x.sign(),
    tanh=lambda: x.tanh(), sigmoid=lambda: x.sigmoid(), erf=lambda: x.erf(), gelu=lambda: F.gelu(x), silu=lambda: F.silu(x),
    sin=lambda: x.sin(), cos=lambda: x.cos(),
    square=lambda: x.square(), pow2=lambda: x.pow(2), pow3=lambda: x.pow(3), pow_half=lambda: p.pow(0.5), pow_1_7=lambda: p.pow(1.7),
    add=lambda: x.add(z), mul=lambda: x.mul(z), div=lambda: x.div(p), add_scalar=lambda: x.add(1.5), maximum=lambda: torch.maximum(x, z),
    clamp=lambda: x.clamp(-1, 1), gt=lambda: x.gt(0), where=lambda: torch.where(mask, x, z), masked_fill=lambda: x.masked_fill(mask, 0),
    clone=lambda: x.clone(), to_float64=lambda: x.double(), to_bfloat16=lambda: x.bfloat16(),
    sum=lambda: x.sum(), mean=lambda: x.mean(), max=lambda: x.max(), norm=lambda: x.norm(),
    sum_rows=lambda: rows.sum(1), sum_cols=lambda: rows.sum(0), amax_rows=lambda: rows.amax(-1),
    argmax_rows=lambda: rows.argmax(-1), var_rows=lambda: rows.var(-1), cumsum_rows=lambda: rows.cumsum(-1),
    softmax=lambda: rows.softmax(-1), log_softmax=lambda: F.log_softmax(rows, -1), layer_norm=lambda: F.layer_norm(rows, [196]),
    transpose_copy=lambda: rows.t().contiguous(), cat=lambda: torch.cat([x, z], 1), index_select=lambda: rows.index_select(0, idx),
    mse_loss=lambda: F.mse_loss(x, z), sort_rows=lambda: rows.sort(-1), topk5_rows=lambda: rows.topk(5, -1),
    topk50_vocab=lambda: vocab.topk(50, -1),
)

forward = ops


def backward(name):
    def run():
        forward[name]().sum().backward()
        x.grad = p.grad = rows.grad = None
    return run


if grad:
    ops = {name: backward(name) for name in ["relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs",
        "neg", "square", "pow2", "add", "mul", "div", "add_scalar", "maximum", "clamp", "where", "softmax", "log_softmax",
        "layer_norm", "sum_rows", "sum_cols", "amax_rows", "mse_loss", "transpose_copy"]}

ms = {}
for name, f in ops.items():
    groups = []
    for g in range(8):
        t0 = time.perf_counter()
        for _ in range(20):
            f()
        if g > 0:
            groups.append((time.perf_counter() - t0) * 1e3 / 20)
    groups.sort()
    ms[name] = round(groups[len(groups) // 2], 4)
print(json.dumps({"workload": "ops-grad" if grad else "ops", "ms": ms}))
