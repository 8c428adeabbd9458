"""PyTorch 1.13 reference draws of torch.nn.init's fan-based initialisers and trunc_normal_, for script/prelude.js's
nn.init: each case seeds the generator, fills an empty float32 tensor and records it.

    /usr/bin/python3 gen.py        # writes init.json beside this file (deterministic)
"""
import json
import os

import torch
import torch.nn.init as init

cases = []
for name, shape, fn, js in [
    ("xavierUniform_", [16, 24], lambda t: init.xavier_uniform_(t, gain=1.5), "nn.init.xavierUniform_(t, 1.5)"),
    ("xavierNormal_", [32, 8], lambda t: init.xavier_normal_(t), "nn.init.xavierNormal_(t)"),
    ("kaimingUniform_", [20, 12], lambda t: init.kaiming_uniform_(t, a=5 ** 0.5), "nn.init.kaimingUniform_(t, { a: Math.sqrt(5) })"),
    ("kaimingNormal_ fan_out relu", [24, 16, 3], lambda t: init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu"),
     "nn.init.kaimingNormal_(t, { mode: 'fan_out', nonlinearity: 'relu' })"),
    ("truncNormal_", [40, 30], lambda t: init.trunc_normal_(t, mean=0.5, std=2.0, a=-1.0, b=3.0),
     "nn.init.truncNormal_(t, { mean: 0.5, std: 2, a: -1, b: 3 })"),
    ("truncNormal_ std 0.02", [64], lambda t: init.trunc_normal_(t, std=0.02), "nn.init.truncNormal_(t, 0, 0.02)"),
]:
    torch.manual_seed(7)
    t = torch.empty(shape)
    fn(t)
    cases.append({"name": name, "shape": shape, "js": js, "values": t.flatten().tolist()})
gains = {k: init.calculate_gain(*k.split(":")) if ":" not in k else init.calculate_gain(k.split(":")[0], float(k.split(":")[1]))
         for k in ["linear", "tanh", "relu", "leaky_relu", "selu"]}
gains["leaky_relu:0.2"] = init.calculate_gain("leaky_relu", 0.2)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "init.json")
with open(out, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases, "gains": gains}, f)
print(f"{out}: {len(cases)} cases")
