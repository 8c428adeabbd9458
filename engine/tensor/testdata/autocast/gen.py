"""PyTorch 1.13 reference for engine/tensor's autocast: a small block run with the casts that
torch.autocast("cuda", dtype=torch.bfloat16) makes (PyTorch 1.13's CPU autocast keeps other op
lists, and GPUs are what autocast is for), written out explicitly so that the CPU computes them:

  - linear and matmul: float32 inputs cast to bfloat16, the result bfloat16;
  - softmax, layer_norm, cross_entropy, sum: bfloat16 inputs cast to float32;
  - other ops in their inputs' type (gelu on bfloat16), float32 + bfloat16 promoted to float32.

The fixture holds the inputs, the loss and the float32 gradients of the input and every weight.

    /usr/bin/python3 gen.py        # writes autocast.json beside this file (deterministic)
"""
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(0)
bf = torch.bfloat16
N, D, H, C = 6, 16, 32, 10
x = torch.randn(N, D)
w = {
    "w1": torch.randn(H, D) * 0.3, "b1": torch.randn(H) * 0.1,
    "w2": torch.randn(D, H) * 0.3, "b2": torch.randn(D) * 0.1,
    "lnw": 1 + 0.1 * torch.randn(D), "lnb": 0.1 * torch.randn(D),
    "wout": torch.randn(C, D) * 0.3,
}
target = torch.tensor([1, 0, 9, 3, 3, 7])

xs = x.clone().requires_grad_(True)
ps = {k: v.clone().requires_grad_(True) for k, v in w.items()}
h = F.linear(xs.to(bf), ps["w1"].to(bf), ps["b1"].to(bf))            # linear: bfloat16
h = F.gelu(h)                                                           # gelu: as its input
h = F.linear(h, ps["w2"].to(bf), ps["b2"].to(bf))                       # linear: bfloat16
r = xs + h                                                              # promoted: float32
n = F.layer_norm(r, (D,), ps["lnw"], ps["lnb"])                         # layer_norm: float32
scores = torch.matmul(n.to(bf), n.to(bf).t())                           # matmul: bfloat16
p = torch.softmax(scores.float(), dim=-1)                               # softmax: float32
a = torch.matmul(p.to(bf), n.to(bf))                                    # matmul: bfloat16
r2 = r + a                                                              # float32
logits = F.linear(r2.to(bf), ps["wout"].to(bf))                         # linear: bfloat16
loss = F.cross_entropy(logits.float(), target) + r2.sum() * 1e-3        # float32
loss.backward()

out = {
    "x": x.tolist(), "target": target.tolist(),
    "weights": {k: v.tolist() for k, v in w.items()},
    "loss": loss.item(),
    "logits_dtype": str(logits.dtype), "r2_dtype": str(r2.dtype),
    "grads": {"x": xs.grad.tolist(), **{k: v.grad.tolist() for k, v in ps.items()}},
}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "autocast.json"), "w") as f:
    json.dump(out, f)
print("autocast.json:", loss.item())
