"""PyTorch 1.13 reference values for the losses nn.functional composes in script/prelude.js:
l1_loss, smooth_l1_loss, nll_loss, binary_cross_entropy_with_logits and one_hot. Each case has
the inputs, the options (in the script's camelCase), the loss and the gradient of its sum with
respect to the input.

    /usr/bin/python3 gen.py        # writes losses.json beside this file (deterministic)
"""
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(0)
x = torch.randn(5, 4, dtype=torch.float64)
y = torch.randn(5, 4, dtype=torch.float64)
logp = torch.log_softmax(torch.randn(6, 5, dtype=torch.float64), dim=1)
cls = torch.tensor([0, 4, 2, -100, 1, 2])
probs = torch.rand(5, 4, dtype=torch.float64)
w5 = torch.tensor([1.0, 2.0, 0.5, 1.5, 3.0], dtype=torch.float64)
pw = torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64)

cases = []


def case(name, fn, inp, target, opts, torch_kwargs, extra=None):
    i = inp.clone().requires_grad_(True)
    loss = fn(i, target, **torch_kwargs)
    loss.sum().backward()
    c = {"name": name, "fn": fn.__name__, "input": inp.tolist(), "target": target.tolist(), "options": opts,
         "loss": loss.tolist(), "grad": i.grad.tolist()}
    if extra:
        c.update(extra)
    cases.append(c)


for red in ["mean", "sum", "none"]:
    case(f"l1 {red}", F.l1_loss, x, y, {"reduction": red}, {"reduction": red})
    case(f"smooth l1 {red}", F.smooth_l1_loss, x, y, {"reduction": red}, {"reduction": red})
    case(f"nll {red}", F.nll_loss, logp, cls, {"reduction": red}, {"reduction": red})
    case(f"bce with logits {red}", F.binary_cross_entropy_with_logits, x, probs, {"reduction": red}, {"reduction": red})
case("smooth l1 beta 0.5", F.smooth_l1_loss, x, y, {"beta": 0.5}, {"beta": 0.5})
case("smooth l1 beta 0", F.smooth_l1_loss, x, y, {"beta": 0.0}, {"beta": 0.0})
case("nll weighted", F.nll_loss, logp, cls, {"weight": w5.tolist()}, {"weight": w5})
case("nll ignoreIndex 2", F.nll_loss, logp, torch.tensor([0, 4, 2, 3, 1, 2]), {"ignoreIndex": 2}, {"ignore_index": 2})
case("bce with logits posWeight", F.binary_cross_entropy_with_logits, x * 4, probs, {"posWeight": pw.tolist()}, {"pos_weight": pw})
case("bce with logits weight", F.binary_cross_entropy_with_logits, x, probs, {"weight": probs[0].tolist()}, {"weight": probs[0]})

one_hot = [{"input": [0, 3, 1], "numClasses": -1, "out": F.one_hot(torch.tensor([0, 3, 1])).tolist()},
           {"input": [[1, 0], [2, 2]], "numClasses": 4, "out": F.one_hot(torch.tensor([[1, 0], [2, 2]]), 4).tolist()}]

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "losses.json")
with open(out, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases, "oneHot": one_hot}, f, indent=None)
print(f"{out}: {len(cases)} cases")
