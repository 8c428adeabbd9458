"""PyTorch 1.13 reference values for the layers of script/prelude.js and their functional forms:
Conv1d, Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Dropout2d, BatchNorm1d, BatchNorm2d, RMSNorm (PyTorch 2.4's formula, written here
in PyTorch ops: torch 1.13 has none), MultiheadAttention and ModuleDict.

Each case builds a module right after torch.manual_seed(seed) and records its state dict in
float32 (the initialisation the script must draw from the same seed), its keys and its repr; then, in
float64 (module.double(), some parameters set to random values), it runs steps: in train or eval
mode, a call on inputs, the outputs, and after backward with random output gradients the
gradients of the inputs and parameters and the buffers. "js" is the same construction and call in
the script (m: the module, a: the inputs). layers.safetensors holds the state dict of a small
model after one training step, its input and its output in eval mode, for loading into the
script's model.

    /usr/bin/python3 gen.py        # writes layers.json and layers.safetensors beside this file (deterministic)
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(1)  # the same bits on every run: parallel reductions may sum in another order
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../../tools/torchfix"))
from torchfix import write_safetensors  # noqa: E402


class RMSNorm(nn.Module):
    """PyTorch 2.4's nn.RMSNorm: y = x * rsqrt(mean(x^2, normalized dims) + eps) * weight, eps None
    meaning torch.finfo(x.dtype).eps (equal to the C++ default for float32 and float64)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape) if isinstance(normalized_shape, (list, tuple)) else (normalized_shape,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.normalized_shape)) if elementwise_affine else None

    def forward(self, x):
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={}".format(self.weight is not None, **self.__dict__)


def rms_norm(x, shape, weight=None, eps=None):
    dims = tuple(range(-len(shape), 0))
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


def num(v):
    """A value JSON can hold: infinities and NaN as the strings "inf", "-inf", "nan"."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def enc(t):
    """A tensor as the script reads it: dtype, shape and the flat values."""
    if t is None:
        return None
    t = t.detach()
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "data": [num(v) for v in t.flatten().tolist()]}


cases = []


def case(name, seed, make, js, steps, set_params=(), dtype=torch.float64, tol=1e-12):
    """steps: (train, inputs, torch_call, js_call); inputs are (tensor, needs_grad) pairs."""
    torch.manual_seed(seed)
    m = make()
    c = {"name": name, "seed": seed, "js": js, "dtype": str(dtype).replace("torch.", ""), "tol": tol,
         "repr": repr(m), "stateKeys": list(m.state_dict().keys()), "init": {k: enc(v) for k, v in m.state_dict().items()}, "set": {}, "steps": []}
    m.to(dtype)
    g = torch.Generator().manual_seed(1000 + seed)
    params = dict(m.named_parameters())
    with torch.no_grad():
        for k in set_params:
            params[k].copy_(torch.randn(params[k].shape, generator=g, dtype=dtype) * 0.5 + 1)
            c["set"][k] = enc(params[k])
    for train, inputs, call, js_call in steps:
        m.train(train)
        m.zero_grad(set_to_none=True)
        xs = [x.to(dtype).clone().requires_grad_(True) if grad else x.clone() for x, grad in inputs]
        given = [dict(enc(x), grad=grad) for x, (_, grad) in zip(xs, inputs)]
        res = call(m, xs)
        outs = list(res) if isinstance(res, tuple) else [res]
        gouts = [None if o is None else torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
        loss = sum((o * go).sum() for o, go in zip(outs, gouts) if o is not None)
        loss.backward()
        c["steps"].append({
            "train": train, "call": js_call,
            "inputs": given,
            "inputsAfter": [None if grad else enc(x) for x, (_, grad) in zip(xs, inputs)],
            "gradOut": [enc(go) for go in gouts],
            "out": [enc(o) for o in outs],
            "inputGrads": [enc(x.grad) if grad else None for x, (_, grad) in zip(xs, inputs)],
            "paramGrads": {k: enc(p.grad) for k, p in m.named_parameters()},
            "buffers": {k: enc(b) for k, b in m.named_buffers()},
        })
    cases.append(c)


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def fwd(m, a):
    return m(a[0])


ONE = "m.forward(a[0])"

# Convolutions: the options of PyTorch's constructors, batched and not.
for name, seed, make, js, shape in [
    ("conv2d default", 1, lambda: nn.Conv2d(3, 4, 3), "nn.Conv2d(3, 4, 3)", (2, 3, 5, 6)),
    ("conv2d stride padding", 2, lambda: nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 2)),
     "nn.Conv2d(3, 4, [3, 2], { stride: [2, 1], padding: [1, 2] })", (2, 3, 7, 6)),
    ("conv2d dilation groups", 3, lambda: nn.Conv2d(4, 6, 3, dilation=(2, 1), groups=2, padding=1),
     "nn.Conv2d(4, 6, 3, { dilation: [2, 1], groups: 2, padding: 1 })", (2, 4, 7, 5)),
    ("conv2d same asymmetric", 4, lambda: nn.Conv2d(2, 3, (4, 3), padding="same", dilation=(1, 2)),
     "nn.Conv2d(2, 3, [4, 3], { padding: 'same', dilation: [1, 2] })", (1, 2, 6, 7)),
    ("conv2d valid no bias", 5, lambda: nn.Conv2d(2, 3, 2, padding="valid", bias=False),
     "nn.Conv2d(2, 3, 2, { padding: 'valid', bias: false })", (2, 2, 4, 4)),
    ("conv2d unbatched", 6, lambda: nn.Conv2d(2, 2, 3, padding=1, stride=2), "nn.Conv2d(2, 2, 3, { padding: 1, stride: 2 })", (2, 5, 5)),
    ("conv2d depthwise", 7, lambda: nn.Conv2d(3, 6, 3, groups=3), "nn.Conv2d(3, 6, 3, { groups: 3 })", (1, 3, 5, 5)),
    ("conv1d default", 8, lambda: nn.Conv1d(3, 5, 3), "nn.Conv1d(3, 5, 3)", (2, 3, 8)),
    ("conv1d same even kernel", 9, lambda: nn.Conv1d(2, 4, 4, padding="same", dilation=3),
     "nn.Conv1d(2, 4, 4, { padding: 'same', dilation: 3 })", (2, 2, 9)),
    ("conv1d groups stride", 10, lambda: nn.Conv1d(4, 4, 3, stride=2, padding=2, groups=4, bias=False),
     "nn.Conv1d(4, 4, 3, { stride: 2, padding: 2, groups: 4, bias: false })", (1, 4, 9)),
    ("conv1d unbatched", 11, lambda: nn.Conv1d(3, 2, 2), "nn.Conv1d(3, 2, 2)", (3, 6)),
]:
    case(name, seed, make, js, [(True, [(randn(*shape), True)], fwd, ONE)])

torch.manual_seed(20)
w2, b2, x2 = randn(4, 2, 3, 2), randn(4), randn(2, 4, 6, 5)
case("F.conv2d positional", 0, nn.Identity, "nn.Identity()", [
    (True, [(x2, True), (w2, True), (b2, True)], lambda m, a: F.conv2d(a[0], a[1], a[2], 2, (1, 0), 1, 2),
     "nn.functional.conv2d(a[0], a[1], a[2], 2, [1, 0], 1, 2)"),
    (True, [(x2, True), (w2, True)], lambda m, a: F.conv2d(a[0], a[1], None, 1, "same", (2, 1), 2),
     "nn.functional.conv2d(a[0], a[1], null, { padding: 'same', dilation: [2, 1], groups: 2 })"),
])
w1 = randn(3, 1, 2)
case("F.conv1d options", 0, nn.Identity, "nn.Identity()", [
    (True, [(randn(2, 3, 7), True), (w1, True)], lambda m, a: F.conv1d(a[0], a[1], groups=3, stride=3, padding=1),
     "nn.functional.conv1d(a[0], a[1], undefined, { groups: 3, stride: 3, padding: 1 })"),
])

# Max pooling: the gradient goes to the first maximum of each window; padding never wins.
ties = torch.randint(0, 3, (2, 2, 5, 5)).to(torch.float64)
neginf = randn(1, 1, 4, 4)
neginf[0, 0, :2, :2] = float("-inf")
for name, make, js, x in [
    ("maxpool2d 2", lambda: nn.MaxPool2d(2), "nn.MaxPool2d(2)", randn(2, 3, 6, 6)),
    ("maxpool2d 3 stride 2 padding 1", lambda: nn.MaxPool2d(3, stride=2, padding=1), "nn.MaxPool2d(3, { stride: 2, padding: 1 })", randn(1, 2, 7, 7)),
    ("maxpool2d dilation ceil", lambda: nn.MaxPool2d((2, 3), stride=(2, 2), dilation=(2, 1), ceil_mode=True),
     "nn.MaxPool2d([2, 3], { stride: [2, 2], dilation: [2, 1], ceilMode: true })", randn(1, 2, 7, 8)),
    ("maxpool2d ceil padding", lambda: nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
     "nn.MaxPool2d(3, { stride: 2, padding: 1, ceilMode: true })", randn(1, 1, 6, 6)),
    ("maxpool2d ties", lambda: nn.MaxPool2d(2, stride=1), "nn.MaxPool2d(2, { stride: 1 })", ties),
    ("maxpool2d -inf beside padding", lambda: nn.MaxPool2d(3, stride=1, padding=1), "nn.MaxPool2d(3, { stride: 1, padding: 1 })", neginf),
    ("maxpool2d unbatched", lambda: nn.MaxPool2d(3, stride=2), "nn.MaxPool2d(3, { stride: 2 })", randn(2, 5, 5)),
]:
    case(name, 0, make, js, [(True, [(x, True)], fwd, ONE)])
case("F.maxPool2d positional", 0, nn.Identity, "nn.Identity()", [
    (True, [(randn(1, 2, 7, 6), True)], lambda m, a: F.max_pool2d(a[0], 3, 2, 1, 1, True),
     "nn.functional.maxPool2d(a[0], 3, 2, 1, 1, true)"),
])

# Average pooling: padding counted (clipped to the padded input in ceil mode) or not, divisor override.
for name, make, js, x in [
    ("avgpool2d 2", lambda: nn.AvgPool2d(2), "nn.AvgPool2d(2)", randn(2, 3, 6, 6)),
    ("avgpool2d 3 stride 2 padding 1", lambda: nn.AvgPool2d(3, stride=2, padding=1), "nn.AvgPool2d(3, { stride: 2, padding: 1 })", randn(1, 2, 7, 7)),
    ("avgpool2d ceil padding", lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True),
     "nn.AvgPool2d(3, { stride: 2, padding: 1, ceilMode: true })", randn(1, 2, 6, 6)),
    ("avgpool2d ceil padding not counted", lambda: nn.AvgPool2d((3, 2), stride=(2, 3), padding=1, ceil_mode=True, count_include_pad=False),
     "nn.AvgPool2d([3, 2], { stride: [2, 3], padding: 1, ceilMode: true, countIncludePad: false })", randn(2, 2, 7, 8)),
    ("avgpool2d padding not counted", lambda: nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
     "nn.AvgPool2d(3, { stride: 1, padding: 1, countIncludePad: false })", randn(1, 2, 4, 5)),
    ("avgpool2d divisor override", lambda: nn.AvgPool2d(3, stride=(1, 2), padding=(1, 0), divisor_override=5),
     "nn.AvgPool2d(3, { stride: [1, 2], padding: [1, 0], divisorOverride: 5 })", randn(1, 2, 5, 7)),
    ("avgpool2d unbatched", lambda: nn.AvgPool2d(2, stride=1), "nn.AvgPool2d(2, { stride: 1 })", randn(3, 4, 4)),
]:
    case(name, 0, make, js, [(True, [(x, True)], fwd, ONE)])
case("F.avgPool2d", 0, nn.Identity, "nn.Identity()", [
    (True, [(randn(2, 2, 7, 6), True)], lambda m, a: F.avg_pool2d(a[0], 3, 2, 1, True, False),
     "nn.functional.avgPool2d(a[0], 3, 2, 1, true, false)"),
    (True, [(randn(1, 3, 5, 5), True)], lambda m, a: F.avg_pool2d(a[0], (2, 3), padding=1, ceil_mode=True, divisor_override=4),
     "nn.functional.avgPool2d(a[0], [2, 3], { padding: 1, ceilMode: true, divisorOverride: 4 })"),
])

# Adaptive average pooling: windows floor(i*H/oh) to ceil((i+1)*H/oh), overlapping when they do not divide.
for name, make, js, x in [
    ("adaptiveavgpool2d 1", lambda: nn.AdaptiveAvgPool2d(1), "nn.AdaptiveAvgPool2d(1)", randn(2, 3, 5, 4)),
    ("adaptiveavgpool2d (3, 2) from 7x5", lambda: nn.AdaptiveAvgPool2d((3, 2)), "nn.AdaptiveAvgPool2d([3, 2])", randn(2, 2, 7, 5)),
    ("adaptiveavgpool2d (None, 2)", lambda: nn.AdaptiveAvgPool2d((None, 2)), "nn.AdaptiveAvgPool2d([null, 2])", randn(1, 2, 4, 7)),
    ("adaptiveavgpool2d larger than input", lambda: nn.AdaptiveAvgPool2d((4, 6)), "nn.AdaptiveAvgPool2d([4, 6])", randn(1, 2, 3, 4)),
    ("adaptiveavgpool2d unbatched", lambda: nn.AdaptiveAvgPool2d(3), "nn.AdaptiveAvgPool2d(3)", randn(2, 5, 5)),
]:
    case(name, 0, make, js, [(True, [(x, True)], fwd, ONE)])
case("F.adaptiveAvgPool2d", 0, nn.Identity, "nn.Identity()", [
    (True, [(randn(2, 2, 7, 5), True)], lambda m, a: F.adaptive_avg_pool2d(a[0], (2, None)), "nn.functional.adaptiveAvgPool2d(a[0], [2, null])"),
    (True, [(randn(2, 3, 4, 4), True)], lambda m, a: F.adaptive_avg_pool2d(a[0], 1), "nn.functional.adaptiveAvgPool2d(a[0], 1)"),
])

# Dropout2d: the channels kept are PyTorch's from the same seed (the engine's bernoulli draws are
# torch's CPU ones); a 3-D input is (N, C, L) in torch 1.13, a 2-D one (N, C).
for name, seed, make, js, x, dtype, tol in [
    ("dropout2d", 21, lambda: nn.Dropout2d(0.4), "nn.Dropout2d(0.4)", randn(4, 5, 3, 3), torch.float64, 1e-12),
    ("dropout2d 3D is (N, C, L)", 22, lambda: nn.Dropout2d(), "nn.Dropout2d()", randn(3, 6, 4), torch.float64, 1e-12),
    ("dropout2d float32", 23, lambda: nn.Dropout2d(0.3), "nn.Dropout2d(0.3)", torch.randn(4, 6, 2, 2), torch.float32, 0),
]:
    case(name, seed, make, js, [(True, [(x, True)], fwd, ONE), (True, [(x, True)], fwd, ONE), (False, [(x, True)], fwd, ONE)], dtype=dtype, tol=tol)
case("F.dropout2d", 24, lambda: nn.Dropout2d(0.2, inplace=True), "nn.Dropout2d(0.2, { inplace: true })", [
    (True, [(randn(3, 4, 2, 2), True)], lambda m, a: F.dropout2d(a[0], 0.3, True), "nn.functional.dropout2d(a[0], 0.3, true)"),
    (True, [(randn(5, 6), True)], lambda m, a: F.dropout2d(a[0], p=0.5), "nn.functional.dropout2d(a[0], { p: 0.5 })"),
    (True, [(randn(2, 3, 2, 2), True)], lambda m, a: F.dropout2d(a[0], 1.0), "nn.functional.dropout2d(a[0], 1)"),
    (True, [(randn(2, 3, 2, 2), True)], lambda m, a: F.dropout2d(a[0], 0.5, False), "nn.functional.dropout2d(a[0], 0.5, false)"),
])

# RMSNorm, in float64 and, where the default eps matters, in float32.
for name, make, js, shape, sets in [
    ("rmsnorm default", lambda: RMSNorm(4), "nn.RMSNorm(4)", (3, 4), ["weight"]),
    ("rmsnorm 2 dims eps", lambda: RMSNorm([3, 4], eps=1e-3), "nn.RMSNorm([3, 4], { eps: 1e-3 })", (2, 3, 4), ["weight"]),
    ("rmsnorm no affine", lambda: RMSNorm(5, elementwise_affine=False), "nn.RMSNorm(5, { elementwiseAffine: false })", (2, 5), []),
]:
    case(name, 0, make, js, [(True, [(randn(*shape), True)], fwd, ONE)], set_params=sets)
case("rmsnorm float32 default eps", 0, lambda: RMSNorm(6), "nn.RMSNorm(6)",
     [(True, [(torch.randn(3, 6) * 1e-4, True)], fwd, ONE)], set_params=["weight"], dtype=torch.float32, tol=1e-5)
case("F.rmsNorm", 0, nn.Identity, "nn.Identity()", [
    (True, [(randn(2, 3), True), (randn(3), True)], lambda m, a: rms_norm(a[0], [3], a[1], 1e-6), "nn.functional.rmsNorm(a[0], [3], a[1], 1e-6)"),
    (True, [(randn(2, 2, 3), True)], lambda m, a: rms_norm(a[0], [2, 3]), "nn.functional.rmsNorm(a[0], [2, 3])"),
])

# Batch norm: training steps (running statistics, num_batches_tracked), then evaluation.
for name, make, js, shape, sets in [
    ("batchnorm1d 2D", lambda: nn.BatchNorm1d(4), "nn.BatchNorm1d(4)", (5, 4), ["weight", "bias"]),
    ("batchnorm1d 3D cumulative", lambda: nn.BatchNorm1d(3, momentum=None), "nn.BatchNorm1d(3, { momentum: null })", (4, 3, 5), ["weight", "bias"]),
    ("batchnorm1d no affine", lambda: nn.BatchNorm1d(3, affine=False), "nn.BatchNorm1d(3, { affine: false })", (4, 3), []),
    ("batchnorm1d no running stats", lambda: nn.BatchNorm1d(3, track_running_stats=False),
     "nn.BatchNorm1d(3, { trackRunningStats: false })", (4, 3, 2), ["weight"]),
    ("batchnorm2d", lambda: nn.BatchNorm2d(3, eps=1e-3, momentum=0.3), "nn.BatchNorm2d(3, { eps: 1e-3, momentum: 0.3 })", (4, 3, 3, 2), ["weight", "bias"]),
]:
    steps = [(True, [(randn(*shape) * 2 + 1, True)], fwd, ONE) for _ in range(3)]
    steps.append((False, [(randn(*shape), True)], fwd, ONE))
    case(name, 0, make, js, steps, set_params=sets)
rm, rv = randn(3), randn(3).abs() + 0.5
case("F.batchNorm", 0, nn.Identity, "nn.Identity()", [
    (True, [(randn(4, 3, 2), True), (rm, False), (rv, False), (randn(3), True), (randn(3), True)],
     lambda m, a: F.batch_norm(a[0], a[1], a[2], a[3], a[4], False, 0.1, 1e-4),
     "nn.functional.batchNorm(a[0], a[1], a[2], a[3], a[4], false, 0.1, 1e-4)"),
    (True, [(randn(5, 3), True), (rm.clone(), False), (rv.clone(), False), (randn(3), True)],
     lambda m, a: F.batch_norm(a[0], a[1], a[2], a[3], None, True, 0.2),
     "nn.functional.batchNorm(a[0], a[1], a[2], { weight: a[3], training: true, momentum: 0.2 })"),
])

# MultiheadAttention: self- and cross-attention, masks of every kind, batch first, unbatched.
E8 = randn(5, 3, 8)
causal = torch.ones(4, 4).triu(1).bool()
mha_cases = [
    ("mha self", 11, lambda: nn.MultiheadAttention(8, 2), "nn.MultiheadAttention(8, 2)",
     [(E8, True)], lambda m, a: m(a[0], a[0], a[0]), "m.forward(a[0], a[0], a[0])"),
    ("mha cross masks", 12, lambda: nn.MultiheadAttention(8, 4), "nn.MultiheadAttention(8, 4)",
     [(randn(4, 2, 8), True), (randn(6, 2, 8), True), (torch.tensor([[False] * 4 + [True] * 2, [False] * 6]), False), (randn(4, 6), False)],
     lambda m, a: m(a[0], a[1], a[1], key_padding_mask=a[2], attn_mask=a[3]),
     "m.forward(a[0], a[1], a[1], { keyPaddingMask: a[2], attnMask: a[3] })"),
    ("mha batch first 3D bool mask per head", 13, lambda: nn.MultiheadAttention(6, 3, batch_first=True),
     "nn.MultiheadAttention(6, 3, { batchFirst: true })",
     [(randn(2, 4, 6), True), (randn(2, 5, 6), True), (randn(2, 5, 6), True), (torch.rand(6, 4, 5) < 0.3, False)],
     lambda m, a: m(a[0], a[1], a[2], attn_mask=a[3], average_attn_weights=False),
     "m.forward(a[0], a[1], a[2], { attnMask: a[3], averageAttnWeights: false })"),
    ("mha no weights no bias float padding mask", 14, lambda: nn.MultiheadAttention(4, 1, bias=False),
     "nn.MultiheadAttention(4, 1, { bias: false })",
     [(randn(3, 2, 4), True), (randn(2, 3), False)],
     lambda m, a: m(a[0], a[0], a[0], need_weights=False, key_padding_mask=a[1]),
     "m.forward(a[0], a[0], a[0], { needWeights: false, keyPaddingMask: a[1] })"),
    ("mha unbatched", 15, lambda: nn.MultiheadAttention(4, 2), "nn.MultiheadAttention(4, 2)",
     [(randn(3, 4), True), (randn(5, 4), True), (randn(5, 4), True), (torch.tensor([False, False, True, False, True]), False), (randn(2, 3, 5), False)],
     lambda m, a: m(a[0], a[1], a[2], key_padding_mask=a[3], attn_mask=a[4]),
     "m.forward(a[0], a[1], a[2], { keyPaddingMask: a[3], attnMask: a[4] })"),
    # isCausal is PyTorch 2's hint that attnMask is the causal mask: torch 1.13 computes with the mask.
    ("mha causal hint", 16, lambda: nn.MultiheadAttention(4, 2), "nn.MultiheadAttention(4, 2)",
     [(randn(4, 2, 4), True), (causal, False)],
     lambda m, a: m(a[0], a[0], a[0], attn_mask=a[1], need_weights=False),
     "m.forward(a[0], a[0], a[0], { attnMask: a[1], isCausal: true, needWeights: false })"),
    ("mha causal hint with weights", 17, lambda: nn.MultiheadAttention(4, 2), "nn.MultiheadAttention(4, 2)",
     [(randn(4, 2, 4), True), (causal, False)],
     lambda m, a: m(a[0], a[0], a[0], attn_mask=a[1]),
     "m.forward(a[0], a[0], a[0], { attnMask: a[1], isCausal: true })"),
]
for name, seed, make, js, inputs, call, js_call in mha_cases:
    case(name, seed, make, js, [(True, inputs, call, js_call)], set_params=["in_proj_bias", "out_proj.bias"] if "no bias" not in name else [])
case("mha dropout in eval", 18, lambda: nn.MultiheadAttention(4, 2, dropout=0.5), "nn.MultiheadAttention(4, 2, { dropout: 0.5 })",
     [(False, [(randn(3, 2, 4), True)], lambda m, a: m(a[0], a[0], a[0]), "m.forward(a[0], a[0], a[0])")])

# ModuleDict: insertion order and state-dict names; the modules' initialisation from one seed.
case("moduledict", 19, lambda: nn.ModuleDict({"b": nn.Linear(2, 2), "a": nn.Conv1d(1, 2, 1), "c": nn.BatchNorm1d(2), "z": nn.ReLU()}),
     "nn.ModuleDict({ b: nn.Linear(2, 2), a: nn.Conv1d(1, 2, 1), c: nn.BatchNorm1d(2), z: nn.ReLU() })", [])

# A model trained one step in PyTorch, saved as safetensors: the script loads it (strict) and
# must give PyTorch's output in eval mode.
torch.manual_seed(30)
model = nn.ModuleDict({
    "features": nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2)),
    "attn": nn.MultiheadAttention(4, 2, batch_first=True),
    "norm": RMSNorm(4),
    "bn": nn.BatchNorm1d(4, momentum=None),
})


def run(model, x):
    h = model["features"](x)                 # [N, 4, 2, 2]
    s = h.flatten(2).transpose(1, 2)         # [N, 4 tokens, 4]
    a, _ = model["attn"](s, s, s)
    s = model["norm"](s + a)
    return model["bn"](s.mean(1))            # [N, 4]


opt = torch.optim.SGD(model.parameters(), lr=0.5)
xt = torch.randn(3, 2, 4, 4)
run(model, xt).pow(2).sum().backward()
opt.step()
model.eval()
with torch.no_grad():
    xe = torch.randn(3, 2, 4, 4)
    ye = run(model, xe)
sd = dict(model.state_dict())
write_safetensors(os.path.join(HERE, "layers.safetensors"), {**{f"model.{k}": v for k, v in sd.items()}, "x": xe, "y": ye},
                  {"keys": json.dumps(list(sd.keys()))})

with open(os.path.join(HERE, "layers.json"), "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, allow_nan=False)
print(f"layers.json: {len(cases)} cases; layers.safetensors: {len(sd)} tensors")
