"""Generates repr.json: tensors and the text PyTorch prints for them.

Run with Debian's python3-torch (PyTorch 1.13):
    /usr/bin/python3 script/testdata/repr/gen_repr.py
script/tensor_test.go (TestReprMatchesPyTorch) builds each tensor with
tensor.fromArray and compares console.log's text with "repr".
"""
import json
import math
import os

import torch

torch.manual_seed(0)
cases = []


def add(name, t):
    flat = t.reshape(-1)
    if t.dtype == torch.bool:
        values = [bool(v) for v in flat.tolist()]
    elif t.dtype.is_floating_point:
        # JSON has no NaN or infinities: they are written as the
        # JavaScript spellings, in strings.
        values = [v if math.isfinite(v) else {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[str(v)]
                  for v in flat.double().tolist()]
    else:
        values = [int(v) for v in flat.tolist()]
    cases.append({
        "name": name,
        "shape": list(t.shape),
        "dtype": str(t.dtype).replace("torch.", ""),
        "values": values,
        "repr": repr(t),
    })


add("scalar", torch.tensor(3.5))
add("vector", torch.randn(5))
add("integral floats", torch.tensor([1.0, 2.0, -3.0]))
add("wrapped int vector", torch.arange(40))
add("wrapped float rows", torch.randn(2, 12))
add("wrapped 3-d", torch.randn(2, 2, 14))
add("long rows, 600 values", torch.randn(3, 200))
add("summarised vector", torch.randn(1001))
add("summarised matrix", torch.randn(26, 40))
add("summarised int matrix", torch.arange(1001 * 3).reshape(3, 7, 143)[:, :, :143])
add("scientific", torch.tensor([1e-5, 1.0, 250000.0]))
add("wrapped scientific", torch.randn(30) * 1e6)
add("float64", torch.randn(4, dtype=torch.float64))
add("bool", torch.tensor([True, False, True]))
add("int64 negative", torch.tensor([[-1, 20], [300, -4000]]))
add("empty", torch.zeros(0, 3))
add("nan and inf", torch.tensor([float("nan"), float("inf"), -1.5]))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "repr.json")
with open(out, "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")
print(f"wrote {len(cases)} cases to {out}")
