"""PyTorch 1.13 reference values for the tensor ops that engine/tensor/compose.go composes from
other ops, as script/ops_test.go calls them from JavaScript: clamp/clip (numbers, tensors, in
place), norm, repeat, flip, unbind, all, any, Tensor.where, repeatInterleave, sub_, div_, the
factories linspace and eye, and requiresGrad on every factory.

Each case has the inputs (flat values, shape, dtype, whether they require grad), the JavaScript
expression that computes the result from them, and PyTorch's results (values, shape, dtype,
requires_grad). When inputs require grad, it also has random upstream gradients, one per result,
and PyTorch's gradients of sum(result * upstream) with respect to the inputs (null where PyTorch
leaves .grad None). A case with "raises" holds PyTorch's error message instead: the script must
throw too. Non-finite floats are the strings "NaN", "Infinity" and "-Infinity", which JSON lacks.

    /usr/bin/python3 gen.py        # writes ops.json beside this file (deterministic)
"""
import json
import math
import os

import torch

torch.manual_seed(0)
# linspace's values depend on how its range is split among threads (see compose.go): one thread.
torch.set_num_threads(1)

cases = []


def enc(v):
    if isinstance(v, list):
        return [enc(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return v


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def result(o, values=True):
    return {"values": enc(o.tolist()) if values else None, "shape": list(o.shape), "dtype": dtype_name(o.dtype),
            "requiresGrad": o.requires_grad}


def case(name, js, fn, grad=(), tol=1e-12, values=True, **inputs):
    """fn(**inputs) gives a tensor or a list of tensors; grad names the inputs that require grad."""
    ts = {k: v.clone().requires_grad_(k in grad) for k, v in inputs.items()}
    out = fn(**ts)
    is_list = isinstance(out, (list, tuple))
    outs = list(out) if is_list else [out]
    c = {"name": name, "js": js, "tol": tol, "list": is_list,
         "inputs": {k: {"data": enc(v.flatten().tolist()), "shape": list(v.shape), "dtype": dtype_name(v.dtype),
                        "requiresGrad": k in grad} for k, v in inputs.items()},
         "out": [result(o, values) for o in outs]}
    if grad and outs:
        ups = [torch.randn(o.shape, dtype=torch.float64).to(o.dtype) for o in outs]
        sum((o * u).sum() for o, u in zip(outs, ups)).backward()
        c["upstream"] = [enc(u.flatten().tolist()) for u in ups]
        c["grads"] = {k: (enc(ts[k].grad.tolist()) if ts[k].grad is not None else None) for k in grad}
    cases.append(c)


def raises(name, js, fn, **inputs):
    try:
        fn(**{k: v.clone() for k, v in inputs.items()})
    except Exception as e:  # noqa: BLE001 - any PyTorch error
        cases.append({"name": name, "js": js, "raises": str(e).split("\n")[0],
                      "inputs": {k: {"data": enc(v.flatten().tolist()), "shape": list(v.shape), "dtype": dtype_name(v.dtype),
                                     "requiresGrad": False} for k, v in inputs.items()}})
        return
    raise AssertionError(f"{name}: PyTorch does not raise")


nan, inf = float("nan"), float("inf")
f64 = torch.float64

# Inputs with values on clamp's bounds (±0.5), ties for the max/min norms, and a zero row.
x = torch.randn(3, 4, dtype=f64)
x[0, 0], x[1, 1], x[2, 3] = 0.5, -0.5, 0.5
t = torch.tensor([[3.0, -3.0, 1.0, 0.5], [0.0, 0.0, 0.0, 0.0], [-1.0, 2.0, -2.0, 1.0]], dtype=f64)
xn = torch.tensor([[1.0, nan, -1.0], [2.0, -2.0, 1.0]], dtype=f64)
lo = torch.tensor([-0.5, -1.0, 0.2, 0.9], dtype=f64)
hi = torch.tensor([[0.5], [1.0], [0.1]], dtype=f64)
lo[0] = x[0, 0]  # x equals both bounds there
ints = torch.tensor([1, 2, 3])
x32 = torch.randn(3, 4)

# clamp / clip
case("clamp min max", "x.clamp(-0.5, 0.5)", lambda x: x.clamp(-0.5, 0.5), grad="x", x=x)
case("clamp min", "x.clamp(-0.5)", lambda x: x.clamp(min=-0.5), grad="x", x=x)
case("clamp max options", "x.clamp({ max: 0.5 })", lambda x: x.clamp(max=0.5), grad="x", x=x)
case("clamp max null min", "x.clamp(null, 0.5)", lambda x: x.clamp(None, 0.5), grad="x", x=x)
case("clamp min above max", "x.clamp(0.5, -0.5)", lambda x: x.clamp(0.5, -0.5), grad="x", x=x)
case("clamp NaN input", "x.clamp(-0.5, 0.5)", lambda x: x.clamp(-0.5, 0.5), grad="x", x=xn)
case("clamp NaN bound", "x.clamp(0, NaN)", lambda x: x.clamp(0, nan), grad="x", x=x)
case("clamp lone NaN bound", "x.clamp(null, NaN)", lambda x: x.clamp(max=nan), grad="x", x=x)
case("clip", "x.clip(-1, 1)", lambda x: x.clip(-1, 1), grad="x", x=x)
case("clamp float32 bounds", "x.clamp(-0.1, 0.7)", lambda x: x.clamp(-0.1, 0.7), grad="x", tol=0, x=x32)
case("clamp int by fraction", "x.clamp(1.5)", lambda x: x.clamp(min=1.5), x=ints)
case("clamp int", "x.clamp(null, 2)", lambda x: x.clamp(max=2), x=ints)
case("clamp uint8 by -1", "x.clamp(-1)", lambda x: x.clamp(min=-1), x=ints.to(torch.uint8))
case("clamp bool", "x.clamp(0, 1)", lambda x: x.clamp(0, 1), x=ints > 1)
case("clamp tensors", "x.clamp(lo, hi)", lambda x, lo, hi: x.clamp(lo, hi), grad=("x", "lo", "hi"), x=x, lo=lo, hi=hi)
case("clamp tensor min", "x.clamp(lo)", lambda x, lo: x.clamp(min=lo), grad=("x", "lo"), x=x, lo=lo)
case("clamp tensor max", "x.clamp({ max: hi })", lambda x, hi: x.clamp(max=hi), grad=("x", "hi"), x=x, hi=hi)
case("clamp 0-d tensor and number", "x.clamp(lo, 0.5)", lambda x, lo: x.clamp(lo, 0.5), grad=("x",), x=x, lo=torch.tensor(-0.25, dtype=f64))
case("clamp int by 0-d float and number", "x.clamp(lo, 5)", lambda x, lo: x.clamp(lo, 5), x=ints, lo=torch.tensor(2.0))
raises("clamp tensor and number", "x.clamp(lo, 0.5)", lambda x, lo: x.clamp(lo, 0.5), x=x, lo=lo)
raises("clamp_ int by 0-d float", "x.clamp_(lo, 5)", lambda x, lo: x.clamp_(lo, 5), x=ints, lo=torch.tensor(2.0))
case("clamp tensors broadcast", "x.clamp(hi, null)", lambda x, hi: x.clamp(hi, None), grad=("x", "hi"), x=x[0], hi=hi)
case("clamp float32 by 0-d float64", "x.clamp(lo)", lambda x, lo: x.clamp(lo), grad=("x", "lo"), tol=1e-6,
     x=x32, lo=torch.tensor(0.25, dtype=f64))
case("clamp float32 by float64", "x.clamp(lo)", lambda x, lo: x.clamp(lo), grad=("x", "lo"), x=x32, lo=lo)
case("clamp int by int64 0-d", "x.clamp(lo)", lambda x, lo: x.clamp(lo), x=ints.int(), lo=torch.tensor(2))
case("clamp_", "x.clamp_(-0.5, 0.5) === x ? x : null", lambda x: x.clamp_(-0.5, 0.5), x=x)
case("clip_", "x.clip_(null, 0) === x ? x : null", lambda x: x.clip_(None, 0), x=x)
case("clamp_ tensors", "x.clamp_(lo, hi.narrow(0, 0, 1)) === x ? x : null", lambda x, lo, hi: x.clamp_(lo, hi[:1]), x=x, lo=lo, hi=hi)
case("clamp_ float32 by float64", "x.clamp_(lo) === x ? x : null", lambda x, lo: x.clamp_(lo), tol=0, x=x32, lo=lo)
raises("clamp no bounds", "x.clamp()", lambda x: x.clamp(), x=x)
raises("clamp null bounds", "x.clamp(null, null)", lambda x: x.clamp(None, None), x=x)
raises("clamp_ int by fraction", "x.clamp_(1.5)", lambda x: x.clamp_(1.5), x=ints)
raises("clamp_ broadcast grows", "x.clamp_(hi)", lambda x, hi: x.clamp_(hi), x=x[0], hi=hi)
raises("clamp uint8 overflow", "x.clamp(300)", lambda x: x.clamp(300), x=ints.to(torch.uint8))
raises("clamp float32 overflow", "x.clamp(null, 1e39)", lambda x: x.clamp(max=1e39), x=x32)

# norm
case("norm", "x.norm()", lambda x: x.norm(), grad="x", x=x)
case("norm fro dim", "x.norm('fro', 1)", lambda x: x.norm("fro", 1), grad="x", x=t)
case("norm fro two dims keepdim", "x.norm('fro', [0, 1], true)", lambda x: x.norm("fro", (0, 1), True), grad="x", x=x)
case("norm fro two dims of zeros", "x.norm('fro', [0, 1])", lambda x: x.norm("fro", (0, 1)), grad="x", x=t[1:2])
case("norm 2 dim", "x.norm(2, 1)", lambda x: x.norm(2, 1), grad="x", x=t)
case("norm 2 two dims", "x.norm(2, [0, -1])", lambda x: x.norm(2, (0, -1)), grad="x", x=t)
case("norm 1", "x.norm(1, { dim: 1 })", lambda x: x.norm(1, 1), grad="x", x=t)
case("norm inf", "x.norm(Infinity, 1)", lambda x: x.norm(inf, 1), grad="x", x=t)
case("norm inf all", "x.norm({ p: Infinity })", lambda x: x.norm(inf), grad="x", x=t)
case("norm -inf", "x.norm(-Infinity, 0, true)", lambda x: x.norm(-inf, 0, True), grad="x", x=t)
case("norm 0", "x.norm(0, 1)", lambda x: x.norm(0, 1), grad="x", x=t)
case("norm 3 keepdim", "x.norm(3, 1, { keepdim: true })", lambda x: x.norm(3, 1, True), grad="x", x=t)
case("norm 0.5", "x.norm(0.5, 1)", lambda x: x.norm(0.5, 1), grad="x", x=t)
case("norm 1.5", "x.norm(1.5, 1)", lambda x: x.norm(1.5, 1), grad="x", x=t)
case("norm -1", "x.norm(-1, 1)", lambda x: x.norm(-1, 1), grad="x", x=t)
case("norm -2.5", "x.norm(-2.5, 0)", lambda x: x.norm(-2.5, 0), grad="x", x=x)
for p, js in [(2, "2"), (1, "1"), (inf, "Infinity"), (-inf, "-Infinity"), (3, "3")]:
    case(f"norm {js} with NaN", f"x.norm({js}, 1)", lambda x, p=p: x.norm(p, 1), grad="x", x=xn)
case("norm 3-d", "x.norm(2, [0, 2])", lambda x: x.norm(2, (0, 2)), grad="x", x=torch.randn(2, 3, 4, dtype=f64))
case("norm 0-d", "x.norm(1, 0)", lambda x: x.norm(1, 0), grad="x", x=torch.tensor(-3.0, dtype=f64))
case("norm empty", "x.norm(Infinity, 0)", lambda x: x.norm(inf, 0), grad="x", x=torch.zeros(0, 3, dtype=f64))
case("norm empty -inf", "x.norm(-Infinity)", lambda x: x.norm(-inf), x=torch.zeros(0, dtype=f64))
case("norm float32", "x.norm(2, 1)", lambda x: x.norm(2, 1), grad="x", tol=2e-6, x=x32)
case("norm float32 3", "x.norm(3)", lambda x: x.norm(3), grad="x", tol=2e-6, x=x32)
raises("norm of integers", "x.norm()", lambda x: x.norm(), x=ints)
raises("norm nuc", "x.norm('nuc')", lambda x: x.norm("nuc"), x=torch.randn(2, 3, 4))
raises("norm bad string", "x.norm('abc')", lambda x: x.norm("abc"), x=x)
raises("norm fro three dims", "x.norm('fro', [0, 1, 2])", lambda x: x.norm("fro", (0, 1, 2)), x=torch.randn(2, 3, 4))
raises("norm fro same dims", "x.norm('fro', [0, 0])", lambda x: x.norm("fro", (0, 0)), x=x)
raises("norm repeated dim", "x.norm(2, [1, 1])", lambda x: x.norm(2, (1, 1)), x=x)
raises("norm dim", "x.norm(2, 2)", lambda x: x.norm(2, 2), x=x)

# repeat, flip, unbind, repeatInterleave
case("repeat", "x.repeat(2, 1, 2)", lambda x: x.repeat(2, 1, 2), grad="x", x=x[:2, :3])
case("repeat array", "x.repeat([2, 3])", lambda x: x.repeat([2, 3]), grad="x", x=x[0])
case("repeat 0-d", "x.repeat(2, 2)", lambda x: x.repeat(2, 2), grad="x", x=torch.tensor(1.5, dtype=f64))
case("repeat zero", "x.repeat(1, 0)", lambda x: x.repeat(1, 0), x=ints)
case("repeat ints", "x.repeat(3)", lambda x: x.repeat(3), x=ints)
raises("repeat too few", "x.repeat(2)", lambda x: x.repeat(2), x=x)
raises("repeat negative", "x.repeat(-1, 1)", lambda x: x.repeat(-1, 1), x=x)
case("flip", "x.flip(0, 2)", lambda x: x.flip(0, 2), grad="x", x=torch.randn(2, 3, 4, dtype=f64))
case("flip array", "x.flip([-1])", lambda x: x.flip([-1]), grad="x", x=x)
case("flip none", "x.flip([])", lambda x: x.flip([]), grad="x", x=x)
case("flip bool", "x.flip(0)", lambda x: x.flip(0), x=ints > 1)
case("flip 0-d", "x.flip(0)", lambda x: x.flip(0), x=torch.tensor(2.0))
raises("flip repeated", "x.flip(0, -2)", lambda x: x.flip(0, -2), x=x)
raises("flip dim", "x.flip(2)", lambda x: x.flip(2), x=x)
case("unbind", "x.unbind(1)", lambda x: x.unbind(1), grad="x", x=x)
case("unbind default", "x.unbind()", lambda x: x.unbind(), grad="x", x=x)
case("unbind empty", "x.unbind(0)", lambda x: x.unbind(0), x=torch.zeros(0, 2))
raises("unbind 0-d", "x.unbind()", lambda x: x.unbind(), x=torch.tensor(1.0))
raises("unbind dim", "x.unbind(2)", lambda x: x.unbind(2), x=x)
case("repeatInterleave", "x.repeatInterleave(2)", lambda x: x.repeat_interleave(2), grad="x", x=x[:2, :3])
case("repeatInterleave dim", "x.repeatInterleave(3, 1)", lambda x: x.repeat_interleave(3, 1), grad="x", x=x[:2, :3])
case("repeatInterleave dim option", "x.repeatInterleave(2, { dim: -2 })", lambda x: x.repeat_interleave(2, -2), grad="x", x=x)
case("repeatInterleave zero", "x.repeatInterleave(0, 0)", lambda x: x.repeat_interleave(0, 0), x=ints)
case("repeatInterleave 0-d", "x.repeatInterleave(3)", lambda x: x.repeat_interleave(3), x=torch.tensor(5.0))
raises("repeatInterleave negative", "x.repeatInterleave(-1)", lambda x: x.repeat_interleave(-1), x=x)
raises("repeatInterleave 0-d dim", "x.repeatInterleave(3, 0)", lambda x: x.repeat_interleave(3, 0), x=torch.tensor(5.0))

# all, any
b = torch.tensor([[1.0, 0.0, nan], [2.0, 3.0, -1.0]])
case("all", "x.all()", lambda x: x.all(), x=b)
case("all dim", "x.all(1)", lambda x: x.all(1), x=b)
case("all dim keepdim", "x.all(0, true)", lambda x: x.all(0, True), x=b)
case("any options", "x.any({ dim: 1, keepdim: true })", lambda x: x.any(dim=1, keepdim=True), x=b)
case("any dim", "x.any(-1)", lambda x: x.any(-1), x=torch.zeros(2, 3))
case("all uint8", "x.all(1)", lambda x: x.all(1), x=torch.tensor([[1, 0], [3, 2]], dtype=torch.uint8))
case("any uint8", "x.any()", lambda x: x.any(), x=torch.tensor([[1, 0], [3, 2]], dtype=torch.uint8))
case("all bool", "x.all()", lambda x: x.all(), x=ints > 0)
case("all empty", "x.all(0)", lambda x: x.all(0), x=torch.zeros(0, 3))
case("any empty", "x.any()", lambda x: x.any(), x=torch.zeros(0, 3))
case("all 0-d", "x.all(0)", lambda x: x.all(0), x=torch.tensor(2))
raises("all dim out of range", "x.all(2)", lambda x: x.all(2), x=b)

# Tensor.where
c = torch.tensor([[True, False, True, False]])
case("where", "x.where(c, y)", lambda x, c, y: x.where(c, y), grad=("x", "y"), x=x, c=c, y=torch.randn(3, 1, dtype=f64))
case("where uint8 condition", "x.where(c, y)", lambda x, c, y: x.where(c, y), grad=("x",), x=x, c=c.to(torch.uint8),
     y=torch.tensor(0.0, dtype=f64))
case("where int by float64", "x.where(c, y)", lambda x, c, y: x.where(c, y), x=ints, c=c[0, :3],
     y=torch.tensor([7.5, 8.5, 9.5], dtype=f64))
case("where float32 by 0-d float64", "x.where(c, y)", lambda x, c, y: x.where(c, y), grad=("x", "y"), tol=1e-6, x=x32[0],
     c=c[0], y=torch.tensor(0.1, dtype=f64))
raises("where float condition", "x.where(c, y)", lambda x, c, y: x.where(c, y), x=x, c=c.double(), y=x)

# sub_, div_
y = torch.randn(4, dtype=f64)
case("sub_", "x.sub_(y) === x ? x : null", lambda x, y: x.sub_(y), x=x, y=y)
case("sub_ alpha", "x.sub_(y, { alpha: 2.5 })", lambda x, y: x.sub_(y, alpha=2.5), x=x, y=y)
case("sub_ number", "x.sub_(0.75)", lambda x: x.sub_(0.75), x=x)
case("sub_ number alpha", "x.sub_(2, { alpha: -3 })", lambda x: x.sub_(2, alpha=-3), x=x)
case("sub_ float32 by float64", "x.sub_(y)", lambda x, y: x.sub_(y), tol=0, x=x32, y=y)
case("sub_ int32 by int64", "x.sub_(y)", lambda x, y: x.sub_(y), x=ints.int(), y=torch.tensor([2]))
case("sub_ uint8 wraps", "x.sub_(5)", lambda x: x.sub_(5), x=ints.to(torch.uint8))
case("sub_ int alpha", "x.sub_(y, { alpha: 3 })", lambda x, y: x.sub_(y, alpha=3), x=ints, y=ints)
raises("sub_ int by fraction", "x.sub_(1.5)", lambda x: x.sub_(1.5), x=ints)
raises("sub_ int fractional alpha", "x.sub_(1, { alpha: 0.5 })", lambda x: x.sub_(1, alpha=0.5), x=ints)
raises("sub_ int by float", "x.sub_(y)", lambda x, y: x.sub_(y), x=ints, y=torch.tensor([1.0]))
raises("sub_ bool", "x.sub_(y)", lambda x, y: x.sub_(y), x=ints > 1, y=ints > 2)
raises("sub_ broadcast grows", "x.sub_(y)", lambda x, y: x.sub_(y), x=y, y=x)
raises("sub_ leaf", "x.requiresGrad_().sub_(1)", lambda x: x.requires_grad_().sub_(1), x=x)
case("div_", "x.div_(y) === x ? x : null", lambda x, y: x.div_(y), x=x, y=y)
case("div_ number float32", "x.div_(3)", lambda x: x.div_(3), tol=0, x=x32)
case("div_ float32 by float64", "x.div_(y)", lambda x, y: x.div_(y), tol=0, x=x32, y=y)
case("div_ float64 by int", "x.div_(y)", lambda x, y: x.div_(y), x=x, y=torch.tensor([3, -2, 7, 4]))
raises("div_ int", "x.div_(2)", lambda x: x.div_(2), x=ints)
raises("div_ int by tensor", "x.div_(y)", lambda x, y: x.div_(y), x=ints, y=ints)

# linspace: float32 bit for bit, with runs long enough for the vectorized path.
g = torch.Generator().manual_seed(1)
for i in range(24):
    start, end = (torch.rand(2, generator=g, dtype=f64) * 200 - 100).tolist()
    steps = [2, 3, 5, 15, 16, 17, 31, 32, 33, 47, 64, 100][i % 12]
    if i % 3 == 0:
        start, end = round(start), round(end)
    case(f"linspace float32 {i}", f"tensor.linspace({start!r}, {end!r}, {steps})", lambda s=start, e=end, n=steps: torch.linspace(s, e, n), tol=0)
    if i % 2 == 0:
        case(f"linspace float64 {i}", f"tensor.linspace({start!r}, {end!r}, {steps}, {{ dtype: 'float64' }})",
             lambda s=start, e=end, n=steps: torch.linspace(s, e, n, dtype=f64), tol=0)
for dt in ["int64", "int32", "uint8", "bfloat16", "float16"]:
    for start, end, steps in [(0, 255, 70), (3.7, 250.2, 33), (200, 10, 9)]:
        case(f"linspace {dt} {start} {end} {steps}", f"tensor.linspace({start}, {end}, {steps}, {{ dtype: '{dt}' }})",
             lambda s=start, e=end, n=steps, d=getattr(torch, dt): torch.linspace(s, e, n, dtype=d), tol=0)
case("linspace one", "tensor.linspace(2.5, 9, 1)", lambda: torch.linspace(2.5, 9, 1), tol=0)
case("linspace none", "tensor.linspace(2.5, 9, 0)", lambda: torch.linspace(2.5, 9, 0), tol=0)
case("linspace equal ends", "tensor.linspace(3, 3, 4)", lambda: torch.linspace(3, 3, 4), tol=0)
case("linspace infinite end", "tensor.linspace(0, Infinity, 5)", lambda: torch.linspace(0, inf, 5), tol=0)
case("linspace int truncates", "tensor.linspace(-1.7, 10.3, 7, { dtype: 'int64' })", lambda: torch.linspace(-1.7, 10.3, 7, dtype=torch.int64), tol=0)
case("linspace requiresGrad", "tensor.linspace(0, 1, 5, { requiresGrad: true })", lambda: torch.linspace(0, 1, 5, requires_grad=True), tol=0)
raises("linspace negative steps", "tensor.linspace(0, 1, -1)", lambda: torch.linspace(0, 1, -1))
raises("linspace bool", "tensor.linspace(0, 1, 5, { dtype: 'bool' })", lambda: torch.linspace(0, 1, 5, dtype=torch.bool))
raises("linspace uint8 start", "tensor.linspace(-3.5, 10, 5, { dtype: 'uint8' })", lambda: torch.linspace(-3.5, 10, 5, dtype=torch.uint8))
raises("linspace float32 overflow", "tensor.linspace(0, 1e39, 5)", lambda: torch.linspace(0, 1e39, 5))
raises("linspace int requiresGrad", "tensor.linspace(0, 1, 5, { dtype: 'int64', requiresGrad: true })",
       lambda: torch.linspace(0, 1, 5, dtype=torch.int64, requires_grad=True))

# eye
case("eye", "tensor.eye(3)", lambda: torch.eye(3), tol=0)
case("eye n m", "tensor.eye(2, 4, { dtype: 'int64' })", lambda: torch.eye(2, 4, dtype=torch.int64), tol=0)
case("eye options", "tensor.eye(3, { dtype: 'bool' })", lambda: torch.eye(3, dtype=torch.bool), tol=0)
case("eye empty", "tensor.eye(0)", lambda: torch.eye(0), tol=0)
case("eye requiresGrad", "tensor.eye(2, 3, { dtype: 'float64', requiresGrad: true })", lambda: torch.eye(2, 3, dtype=f64, requires_grad=True), tol=0)
raises("eye negative", "tensor.eye(-1)", lambda: torch.eye(-1))
raises("eye negative m", "tensor.eye(2, -1)", lambda: torch.eye(2, -1))
raises("eye int requiresGrad", "tensor.eye(2, { dtype: 'int32', requiresGrad: true })", lambda: torch.eye(2, dtype=torch.int32, requires_grad=True))

# requiresGrad on every factory that takes options.
rg = "{ requiresGrad: true }"
case("tensor requiresGrad", f"tensor.tensor([1.5, 2], {rg})", lambda: torch.tensor([1.5, 2.0], requires_grad=True))
case("tensor of a tensor requiresGrad", f"tensor.tensor(x.mul(2), {rg})", lambda x: torch.tensor(x * 2, requires_grad=True), grad="x",
     x=torch.tensor([1.0, 2.0]))
case("zeros requiresGrad", f"tensor.zeros(2, 3, {rg})", lambda: torch.zeros(2, 3, requires_grad=True))
case("ones requiresGrad", f"tensor.ones([2], {{ dtype: 'float64', requiresGrad: true }})", lambda: torch.ones(2, dtype=f64, requires_grad=True))
case("empty requiresGrad", f"tensor.empty(2, {rg})", lambda: torch.empty(2, requires_grad=True), values=False)
case("full requiresGrad", f"tensor.full([2], 7, {rg})", lambda: torch.full([2], 7.0, requires_grad=True))
case("rand requiresGrad", f"tensor.rand(3, {rg})", lambda: torch.rand(3, requires_grad=True), values=False)
case("randn requiresGrad", f"tensor.randn(3, {rg})", lambda: torch.randn(3, requires_grad=True), values=False)
case("arange requiresGrad", f"tensor.arange(0, 2, 0.5, {rg})", lambda: torch.arange(0, 2, 0.5, requires_grad=True))
case("zerosLike requiresGrad", f"tensor.zerosLike(x, {rg})", lambda x: torch.zeros_like(x, requires_grad=True), x=x32)
case("onesLike requiresGrad", f"tensor.onesLike(x, {rg})", lambda x: torch.ones_like(x, requires_grad=True), x=x32)
case("emptyLike requiresGrad", f"tensor.emptyLike(x, {rg})", lambda x: torch.empty_like(x, requires_grad=True), values=False, x=x32)
case("randint float32", "tensor.randint(0, 50, [6], { seed: 3, dtype: 'float32', requiresGrad: true })",
     lambda: torch.randint(0, 50, (6,), generator=torch.Generator().manual_seed(3), dtype=torch.float32, requires_grad=True))
case("randint int32", "tensor.randint(10, [6], { seed: 4, dtype: 'int32' })",
     lambda: torch.randint(10, (6,), generator=torch.Generator().manual_seed(4), dtype=torch.int32))
case("randperm float64", "tensor.randperm(8, { seed: 3, dtype: 'float64', requiresGrad: true })",
     lambda: torch.randperm(8, generator=torch.Generator().manual_seed(3), dtype=f64, requires_grad=True))
for js, fn in [("tensor.tensor([1, 2], { requiresGrad: true })", lambda: torch.tensor([1, 2], requires_grad=True)),
               ("tensor.zeros(2, { dtype: 'int64', requiresGrad: true })", lambda: torch.zeros(2, dtype=torch.int64, requires_grad=True)),
               ("tensor.full([2], 1, { dtype: 'bool', requiresGrad: true })", lambda: torch.full([2], True, requires_grad=True)),
               ("tensor.arange(3, { requiresGrad: true })", lambda: torch.arange(3, requires_grad=True)),
               ("tensor.randint(0, 5, [3], { requiresGrad: true })", lambda: torch.randint(0, 5, (3,), requires_grad=True)),
               ("tensor.randperm(3, { requiresGrad: true })", lambda: torch.randperm(3, requires_grad=True))]:
    raises(f"integral requiresGrad: {js}", js, fn)
raises("integral requiresGrad: onesLike", "tensor.onesLike(x, { dtype: 'int32', requiresGrad: true })",
       lambda x: torch.ones_like(x, dtype=torch.int32, requires_grad=True), x=x32)
raises("randint uint8 high", "tensor.randint(0, 300, [3], { dtype: 'uint8' })", lambda: torch.randint(0, 300, (3,), dtype=torch.uint8))
raises("randint bool high", "tensor.randint(0, 5, [3], { dtype: 'bool' })", lambda: torch.randint(0, 5, (3,), dtype=torch.bool))
raises("randperm uint8", "tensor.randperm(300, { dtype: 'uint8' })", lambda: torch.randperm(300, dtype=torch.uint8))
raises("randperm float16", "tensor.randperm(3000, { dtype: 'float16' })", lambda: torch.randperm(3000, dtype=torch.float16))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops.json")
with open(out, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, indent=None, allow_nan=False)
print(f"{out}: {len(cases)} cases")
