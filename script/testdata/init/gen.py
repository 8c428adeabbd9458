"""PyTorch 1.13 reference draws of torch.nn.init's initialisers (normal_, uniform_, trunc_normal_ and the fan-based
ones), for script/prelude.js's nn.init: each case seeds the generator, fills an empty tensor (float32 unless it
says) and records it.

    /usr/bin/python3 gen.py        # writes init.json beside this file (deterministic)
"""
import json
import os

import torch
import torch.nn.init as init

cases = []
for case in [
    ("xavierUniform_", [16, 24], lambda t: init.xavier_uniform_(t, gain=1.5), "nn.init.xavierUniform_(t, 1.5)"),
    ("xavierNormal_", [32, 8], lambda t: init.xavier_normal_(t), "nn.init.xavierNormal_(t)"),
    ("kaimingUniform_", [20, 12], lambda t: init.kaiming_uniform_(t, a=5 ** 0.5), "nn.init.kaimingUniform_(t, { a: Math.sqrt(5) })"),
    ("kaimingNormal_ fan_out relu", [24, 16, 3], lambda t: init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu"),
     "nn.init.kaimingNormal_(t, { mode: 'fan_out', nonlinearity: 'relu' })"),
    ("truncNormal_", [40, 30], lambda t: init.trunc_normal_(t, mean=0.5, std=2.0, a=-1.0, b=3.0),
     "nn.init.truncNormal_(t, { mean: 0.5, std: 2, a: -1, b: 3 })"),
    ("truncNormal_ std 0.02", [64], lambda t: init.trunc_normal_(t, std=0.02), "nn.init.truncNormal_(t, 0, 0.02)"),
    # normal_ and uniform_ themselves: the normal kernel with mean and std inside it (not randn()*std+mean),
    # uniform_'s fused x*(b-a)+a, below 16 elements (the double path), at 16, off a multiple of 16 (the
    # redrawn tail) and on larger sizes; and float64 tensors.
    ("normal_ 7", [7], lambda t: init.normal_(t, 0.5, 2.0), "nn.init.normal_(t, 0.5, 2)"),
    ("normal_ 16", [16], lambda t: init.normal_(t, -3.0, 0.02), "nn.init.normal_(t, { mean: -3, std: 0.02 })"),
    ("normal_ 33", [3, 11], lambda t: init.normal_(t, 0.1, 0.7), "nn.init.normal_(t, 0.1, 0.7)"),
    ("normal_ 1000", [40, 25], lambda t: init.normal_(t, 1.0, 0.02), "nn.init.normal_(t, 1, 0.02)"),
    ("normal_ default", [50], lambda t: init.normal_(t), "nn.init.normal_(t)"),
    ("uniform_ 7", [7], lambda t: init.uniform_(t, -0.5, 0.5), "nn.init.uniform_(t, -0.5, 0.5)"),
    ("uniform_ 33", [33], lambda t: init.uniform_(t, -0.001, 0.001), "nn.init.uniform_(t, { a: -0.001, b: 0.001 })"),
    ("uniform_ 1000", [10, 100], lambda t: init.uniform_(t, -3.0, 2.5), "nn.init.uniform_(t, -3, 2.5)"),
    ("uniform_ default", [20], lambda t: init.uniform_(t), "nn.init.uniform_(t)"),
    ("normal_ float64 33", [33], lambda t: init.normal_(t, 0.1, 0.7), "nn.init.normal_(t, 0.1, 0.7)", torch.float64),
    ("uniform_ float64 100", [100], lambda t: init.uniform_(t, -3.0, 2.5), "nn.init.uniform_(t, -3, 2.5)", torch.float64),
    ("truncNormal_ float64", [40], lambda t: init.trunc_normal_(t, mean=0.5, std=2.0, a=-1.0, b=3.0),
     "nn.init.truncNormal_(t, { mean: 0.5, std: 2, a: -1, b: 3 })", torch.float64),
    ("xavierNormal_ float64", [17, 3], lambda t: init.xavier_normal_(t), "nn.init.xavierNormal_(t)", torch.float64),
]:
    case, dtype = (case[:4], case[4]) if len(case) == 5 else (case, torch.float32)
    name, shape, fn, js = case
    torch.manual_seed(7)
    t = torch.empty(shape, dtype=dtype)
    fn(t)
    c = {"name": name, "shape": shape, "js": js, "values": t.flatten().tolist()}
    if dtype != torch.float32:
        c["dtype"] = str(dtype).removeprefix("torch.")
    cases.append(c)
gains = {k: init.calculate_gain(*k.split(":")) if ":" not in k else init.calculate_gain(k.split(":")[0], float(k.split(":")[1]))
         for k in ["linear", "tanh", "relu", "leaky_relu", "selu"]}
gains["leaky_relu:0.2"] = init.calculate_gain("leaky_relu", 0.2)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "init.json")
with open(out, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases, "gains": gains}, f)
print(f"{out}: {len(cases)} cases")
