"""PyTorch 1.13 reference values for the tensor methods of script/tensor_methods_sortscan.go: sin, cos,
erf, cumsum, cumprod, sort, argsort, topk and prod, each called from JavaScript in one of the spellings
the host API accepts (positional arguments, an options object, both). Every case has the JavaScript
call on `x`, the float64 input, a weight w, PyTorch's output (values; indices too for the pairs) and,
for float outputs, the gradient of sum(out · w) with respect to x.

    /usr/bin/python3 gen.py        # writes sortscan.json beside this file (deterministic)
"""
import json
import os

import torch

torch.manual_seed(0)
f64 = torch.float64


def distinct(*shape):  # no ties: PyTorch's order of equal values is unspecified outside stable sorts
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n).to(f64) * 0.25 - n / 8).reshape(shape)


def near1(*shape):  # magnitudes in [0.5, 1.5), random signs: products stay near 1
    sign = torch.randint(0, 2, shape).to(f64) * 2 - 1
    return (torch.rand(shape, dtype=f64) + 0.5) * sign


X = distinct(3, 4)
P = near1(3, 4)
PZ = P.clone()
PZ[0, 1] = 0
PZ[2, 0] = 0
PZ[2, 3] = 0
TIES = torch.tensor([[1.0, -1.0, 1.0, 0.0], [2.0, 2.0, -1.0, 2.0], [0.0, 0.0, 0.0, 1.0]], dtype=f64)

CASES = [
    ("sin", "x.sin()", X, torch.sin),
    ("cos", "x.cos()", X, torch.cos),
    ("erf", "x.erf()", X * 0.5, torch.erf),
    ("cumsum dim", "x.cumsum(1)", X, lambda x: x.cumsum(1)),
    ("cumsum options", "x.cumsum({ dim: -2 })", X, lambda x: x.cumsum(-2)),
    ("cumprod dim", "x.cumprod(0)", P, lambda x: x.cumprod(0)),
    ("cumprod zeros", "x.cumprod({ dim: 1 })", PZ, lambda x: x.cumprod(1)),
    ("sort default", "x.sort()", X, lambda x: tuple(torch.sort(x))),
    ("sort positional", "x.sort(0, true)", X, lambda x: tuple(torch.sort(x, 0, True))),
    ("sort options", "x.sort({ dim: 0, descending: true, stable: true })", TIES,
     lambda x: tuple(torch.sort(x, dim=0, descending=True, stable=True))),
    ("sort dim and options", "x.sort(1, { stable: true })", TIES, lambda x: tuple(torch.sort(x, dim=1, stable=True))),
    ("sort values", "x.sort(-1, true).values", X, lambda x: torch.sort(x, -1, True).values),
    ("argsort", "x.argsort(1, true)", X, lambda x: torch.argsort(x, 1, True)),
    ("argsort options", "x.argsort({ dim: 0, stable: true })", TIES, lambda x: torch.argsort(x, stable=True, dim=0)),
    ("topk default", "x.topk(2)", X, lambda x: tuple(torch.topk(x, 2))),
    ("topk positional", "x.topk(2, 0, false, true)", X, lambda x: tuple(torch.topk(x, 2, 0, False, True))),
    ("topk options", "x.topk(3, { dim: 1, largest: false })", X, lambda x: tuple(torch.topk(x, 3, dim=1, largest=False))),
    ("topk indices", "x.topk(1, { dim: 0 }).indices", X, lambda x: torch.topk(x, 1, dim=0).indices),
    ("prod all", "x.prod()", P, torch.prod),
    ("prod all one zero", "x.prod()", torch.where(X == X[1, 2], torch.zeros((), dtype=f64), P), torch.prod),
    ("prod dim", "x.prod(1)", P, lambda x: torch.prod(x, 1)),
    ("prod keepdim", "x.prod(0, true)", P, lambda x: torch.prod(x, 0, keepdim=True)),
    ("prod options", "x.prod({ dim: -1, keepdim: true })", PZ, lambda x: torch.prod(x, -1, keepdim=True)),
    ("prod dim and options", "x.prod(0, { keepdim: false })", PZ, lambda x: torch.prod(x, 0)),
]

cases = []
for name, call, inp, fn in CASES:
    x = inp.clone().requires_grad_(True)
    out = fn(x)
    values, indices = out if isinstance(out, tuple) else (out, None)
    w = torch.randn(values.shape, dtype=f64)
    grad = None
    if values.is_floating_point():
        (values * w).sum().backward()
        grad = x.grad.tolist()
    cases.append({"name": name, "call": call, "input": inp.tolist(), "weight": w.tolist(), "out": values.tolist(),
                  "indices": None if indices is None else indices.tolist(), "grad": grad})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sortscan.json")
with open(out, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, indent=None)
print(f"{out}: {len(cases)} cases")
