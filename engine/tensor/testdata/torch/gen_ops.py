"""PyTorch reference fixtures for the ops of engine/tensor (forward and backward).

Run with Debian's /usr/bin/python3 (python3-torch 1.13, CPU), in this directory:

    /usr/bin/python3 gen_ops.py        # writes ops.safetensors

Every case records, under "<case>/...":
  in0, in1, ...      the inputs, in the order of the Go call (float, int64 or bool)
  out | out0, out1   the forward output(s)
  gout | gout0, ...  the random upstream gradient of each differentiable output
  grad0, grad1, ...  PyTorch's gradient of each float input in<i> (absent for inputs without one)
  ref_out*, ref_grad* for cases whose float inputs are all bfloat16: see case()
and __metadata__[<case>] is a JSON object: {"op": <name>, <argument>: <value>, ...}. The optional
argument "pre_t": [[i, d0, d1], ...] transposes input i (d0 with d1) before the op, so that the op
sees a non-contiguous view; grad<i> is the gradient of the stored (untransposed) input.
The keys "_generator" and "_torch" of __metadata__ are not cases. torch_fixtures_test.go is the Go side.
"""
import json, math, os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../tools/torchfix"))
from torchfix import run_op as run, write_safetensors  # noqa: E402
import torch.nn.functional as F

OUT = "ops.safetensors"
f32, f64, bf16, f16, i64 = torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64

tensors, meta = {}, {"_generator": "gen_ops.py", "_torch": torch.__version__}


def write(path):
    write_safetensors(path, tensors, meta)


# Inputs (drawn from one seeded stream, so the file is reproducible).
def r(*shape, dtype=f32):  # standard normal
    return torch.randn(shape, dtype=f64).to(dtype)


def pos(*shape, dtype=f32):  # in [0.5, 1.5), for log, sqrt, division
    return (torch.rand(shape, dtype=f64) + 0.5).to(dtype)


def grid(*shape, dtype=f32):  # small integers in [-2, 2] as floats: ties for max, min, comparisons
    return torch.randint(-2, 3, shape).to(dtype)


def idx(hi, *shape):
    return torch.randint(0, hi, shape)



def record(name, prefix, xs, single, outs, gouts=None):
    for k, o in enumerate(outs):
        tensors[f"{name}/{prefix}out{'' if single else k}"] = o.to(bf16) if prefix else o
        if gouts is not None and gouts[k] is not None:
            tensors[f"{name}/gout{'' if single else k}"] = gouts[k]
    for i, x in enumerate(xs):
        if not prefix:
            tensors[f"{name}/in{i}"] = x
        if x.grad is not None:
            tensors[f"{name}/{prefix}grad{i}"] = x.grad.to(bf16) if prefix else x.grad


def case(name, op, ins, f, ref=None, **args):
    """Records one case: inputs, outputs, upstream gradients, input gradients and metadata. When every
    float input is bfloat16, also records ref_out*/ref_grad*: the same computation done by PyTorch in
    float32 from the same inputs and upstream gradients, rounded once to bfloat16 (ref, when given,
    replaces f there). PyTorch 1.13's CPU kernels round intermediate results of many bfloat16 ops to
    bfloat16; newer versions compute in float32 and round each op's result once."""
    assert name not in meta, name
    pre_t, grad = args.get("pre_t", []), args.pop("grad", True)
    xs, single, outs, gouts = run(ins, f, pre_t, grad)
    record(name, "", xs, single, outs, gouts)
    if op != "to" and {x.dtype for x in ins if x.is_floating_point()} == {bf16}:
        up = [x.float() if x.dtype == bf16 else x for x in ins]
        record(name, "ref_", *run(up, ref or f, pre_t, grad, [None if g is None else g.float() for g in gouts])[:3])
    meta[name] = json.dumps({"op": op, **args}, separators=(",", ":"))


torch.manual_seed(0)

# ---- elementwise binary ops, broadcasting and promotion -------------------------------------------
BIN = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
       "maximum": torch.maximum, "minimum": torch.minimum}
for op, fn in BIN.items():
    den = pos if op == "div" else r
    case(f"{op}_same", op, [r(3, 4), den(3, 4)], fn)
    case(f"{op}_row", op, [r(3, 4), den(4)], fn)
    case(f"{op}_outer", op, [r(2, 1, 3), den(4, 1)], fn)
    case(f"{op}_0d_rhs", op, [r(3, 4), den()], fn)
    case(f"{op}_0d_lhs", op, [r(), den(2, 3)], fn)
    case(f"{op}_0d_both", op, [r(), den()], fn)
    case(f"{op}_vec67", op, [r(5, 67), den(5, 67)], fn)
    case(f"{op}_col67", op, [r(67, 3), den(67, 1)], fn)
for op in ("maximum", "minimum"):  # ties split the gradient evenly
    case(f"{op}_ties", op, [grid(4, 5), grid(4, 5)], BIN[op])
    case(f"{op}_ties_bcast", op, [grid(4, 5), grid(5)], BIN[op])
case("pow_tensor", "pow", [pos(3, 4), r(3, 4)], torch.pow)
case("pow_tensor_bcast", "pow", [pos(2, 3), r(3)], torch.pow)
case("pow_tensor_vec67", "pow", [pos(67), r(67)], torch.pow)
case("add_f64", "add", [r(3, 4, dtype=f64), r(4, dtype=f64)], torch.add)
case("mul_f64", "mul", [r(3, 4, dtype=f64), r(3, 1, dtype=f64)], torch.mul)
case("div_f64", "div", [r(3, 4, dtype=f64), pos(4, dtype=f64)], torch.div)
case("pow_f64", "pow", [pos(3, 4, dtype=f64), r(3, 4, dtype=f64)], torch.pow)
case("add_bf16", "add", [r(3, 4, dtype=bf16), r(4, dtype=bf16)], torch.add)
case("mul_bf16", "mul", [r(5, 67, dtype=bf16), r(5, 67, dtype=bf16)], torch.mul)
case("div_bf16", "div", [r(3, 4, dtype=bf16), pos(3, 4, dtype=bf16)], torch.div)
case("add_promote_f32_f64", "add", [r(3, 4), r(4, dtype=f64)], torch.add)
case("mul_promote_bf16_f32", "mul", [r(3, 4, dtype=bf16), r(3, 4)], torch.mul)
case("add_promote_i64_f32", "add", [idx(5, 3, 4), r(3, 4)], torch.add)

# ---- elementwise unary ops --------------------------------------------------------------------------
UN = {"neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
      "abs": torch.abs, "square": torch.square, "reciprocal": torch.reciprocal, "relu": torch.relu,
      "silu": F.silu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal"}
for op, fn in UN.items():
    gen = pos if op in POSITIVE else r
    case(f"{op}", op, [gen(3, 5)], fn)
    case(f"{op}_vec67", op, [gen(67)], fn)
for approx in ("none", "tanh"):
    fn = lambda x, a=approx: F.gelu(x, approximate=a)
    case(f"gelu_{approx}", "gelu", [r(3, 5)], fn, approximate=approx)
    case(f"gelu_{approx}_vec67", "gelu", [r(67) * 3], fn, approximate=approx)
    case(f"gelu_{approx}_f64", "gelu", [r(3, 5, dtype=f64)], fn, approximate=approx)
    case(f"gelu_{approx}_bf16", "gelu", [r(67, dtype=bf16)], fn, approximate=approx)
case("relu_zeros", "relu", [torch.tensor([-1.0, 0.0, 2.0, -0.0, 0.5])], torch.relu)  # grad at 0 is 0
case("abs_zeros", "abs", [torch.tensor([-1.0, 0.0, 2.0, -0.0, -0.5])], torch.abs)
case("exp_f64", "exp", [r(3, 5, dtype=f64)], torch.exp)
case("log_f64", "log", [pos(3, 5, dtype=f64)], torch.log)
case("tanh_f64", "tanh", [r(3, 5, dtype=f64)], torch.tanh)
case("sigmoid_f64", "sigmoid", [r(3, 5, dtype=f64)], torch.sigmoid)
case("silu_bf16", "silu", [r(67, dtype=bf16)], F.silu)
case("exp_bf16", "exp", [r(3, 5, dtype=bf16)], torch.exp)
case("tanh_transposed", "tanh", [r(4, 6)], torch.tanh, pre_t=[[0, 0, 1]])

# ---- ops with a Python scalar --------------------------------------------------------------------------
SC = {"add_scalar": lambda x, s: x + s, "sub_scalar": lambda x, s: x - s, "rsub_scalar": lambda x, s: s - x,
      "mul_scalar": lambda x, s: x * s, "div_scalar": lambda x, s: x / s, "rdiv_scalar": lambda x, s: s / x,
      "pow_scalar": lambda x, s: x ** s}
for op, fn in SC.items():
    for s in (2.5, -3.0):
        gen = pos if op in ("rdiv_scalar", "pow_scalar") else r
        case(f"{op}_{s:g}", op, [gen(3, 5)], lambda x, s=s, fn=fn: fn(x, s), s=s)
for s in (0.0, 0.5, 1.0, 2.0, -1.5):
    case(f"pow_scalar_{s:g}_pos", "pow_scalar", [pos(3, 5)], lambda x, s=s: x ** s, s=s)
for s in (2.0, 3.0):  # integer exponents of negative bases
    case(f"pow_scalar_{s:g}_neg", "pow_scalar", [r(3, 5)], lambda x, s=s: x ** s, s=s)
case("mul_scalar_vec67", "mul_scalar", [r(67)], lambda x: x * 0.3, s=0.3)
case("div_scalar_f64", "div_scalar", [r(3, 5, dtype=f64)], lambda x: x / 3.0, s=3.0)
case("div_scalar_3", "div_scalar", [r(5, 67)], lambda x: x / 3.0, s=3.0)
case("mul_scalar_bf16", "mul_scalar", [r(3, 5, dtype=bf16)], lambda x: x * 0.3, s=0.3)

# ---- comparisons and logic (bool outputs) ---------------------------------------------------------------
CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
for op, fn in CMP.items():
    case(f"{op}", op, [grid(4, 5), grid(4, 5)], fn)
    case(f"{op}_bcast", op, [grid(4, 5), grid(5)], fn)
    case(f"{op}_scalar", f"{op}_scalar", [grid(4, 5)], lambda x, fn=fn: fn(x, 1.0), s=1.0)
    case(f"{op}_scalar_half", f"{op}_scalar", [r(4, 5)], lambda x, fn=fn: fn(x, 0.5), s=0.5)
case("lt_i64", "lt", [idx(4, 3, 4), idx(4, 4)], torch.lt)
case("eq_scalar_i64", "eq_scalar", [idx(4, 3, 4)], lambda x: x == 2, s=2.0)
case("lt_bf16_f32", "lt", [grid(3, 4, dtype=bf16), r(3, 4)], torch.lt)
case("logical_and", "logical_and", [grid(4, 5) > 0, grid(4, 5) > 0], torch.logical_and)
case("logical_or", "logical_or", [grid(4, 5) > 0, grid(5) > 0], torch.logical_or)
case("logical_not", "logical_not", [grid(4, 5) > 0], torch.logical_not)

# ---- reductions ----------------------------------------------------------------------------------------
for op, fn in (("sum", torch.sum), ("mean", torch.mean)):
    case(f"{op}_all", op, [r(3, 4, 5)], lambda x, fn=fn: fn(x), dims=None, keepdim=False)
    case(f"{op}_dims02", op, [r(3, 4, 5)], lambda x, fn=fn: fn(x, (0, 2)), dims=[0, 2], keepdim=False)
    case(f"{op}_dim1_keep", op, [r(3, 4, 5)], lambda x, fn=fn: fn(x, 1, keepdim=True), dims=[1], keepdim=True)
    case(f"{op}_neg_keep", op, [r(3, 4, 5)], lambda x, fn=fn: fn(x, (-1, 0), keepdim=True), dims=[-1, 0], keepdim=True)
    case(f"{op}_last67", op, [r(5, 67)], lambda x, fn=fn: fn(x, -1), dims=[-1], keepdim=False)
    case(f"{op}_first67", op, [r(67, 5)], lambda x, fn=fn: fn(x, 0), dims=[0], keepdim=False)
    case(f"{op}_transposed", op, [r(4, 6)], lambda x, fn=fn: fn(x, 1), dims=[1], keepdim=False, pre_t=[[0, 0, 1]])
    case(f"{op}_f64", op, [r(5, 67, dtype=f64)], lambda x, fn=fn: fn(x, 1), dims=[1], keepdim=False)
    case(f"{op}_bf16", op, [r(5, 67, dtype=bf16)], lambda x, fn=fn: fn(x, 1), dims=[1], keepdim=False)
case("sum_scalar", "sum", [r()], torch.sum, dims=None, keepdim=False)
for op, fn in (("var", torch.var), ("std", torch.std)):
    for c in (0, 1):
        case(f"{op}_c{c}_dim1", op, [r(3, 5)], lambda x, c=c, fn=fn: fn(x, 1, correction=c), dims=[1], correction=c, keepdim=False)
        case(f"{op}_c{c}_dims02_keep", op, [r(3, 4, 5)], lambda x, c=c, fn=fn: fn(x, (0, 2), correction=c, keepdim=True),
             dims=[0, 2], correction=c, keepdim=True)
        case(f"{op}_c{c}_all", op, [r(4, 5)], lambda x, c=c, fn=fn: fn(x, None, correction=c), dims=None, correction=c, keepdim=False)
    case(f"{op}_c1_f64", op, [r(5, 67, dtype=f64)], lambda x, fn=fn: fn(x, -1), dims=[-1], correction=1, keepdim=False)
case("var_c1_last67", "var", [r(5, 67)], lambda x: torch.var(x, -1), dims=[-1], correction=1, keepdim=False)
for op, fn in (("max_dim", torch.max), ("min_dim", torch.min)):
    case(f"{op}_1", op, [r(3, 5)], lambda x, fn=fn: tuple(fn(x, 1)), dim=1, keepdim=False)
    case(f"{op}_0_keep", op, [r(3, 4, 5)], lambda x, fn=fn: tuple(fn(x, 0, keepdim=True)), dim=0, keepdim=True)
    case(f"{op}_neg", op, [r(3, 4, 5)], lambda x, fn=fn: tuple(fn(x, -1)), dim=-1, keepdim=False)
    case(f"{op}_67", op, [r(4, 67)], lambda x, fn=fn: tuple(fn(x, 1)), dim=1, keepdim=False)
for dims, keep in (([1], False), ([0, 2], True), (None, False)):
    tag = "all" if dims is None else "".join(map(str, dims))
    case(f"amax_{tag}", "amax", [r(3, 4, 5)], lambda x, d=dims, k=keep: torch.amax(x, d or [], k), dims=dims, keepdim=keep)
case("amax_ties", "amax", [grid(4, 5)], lambda x: torch.amax(x, 1), dims=[1], keepdim=False)
case("max_all", "max_all", [r(3, 5)], torch.max)
case("max_all_ties", "max_all", [torch.tensor([[1.0, 3.0, 2.0], [3.0, -1.0, 3.0]])], torch.max)
case("min_all", "min_all", [r(3, 5)], torch.min)
case("min_all_ties", "min_all", [torch.tensor([[1.0, -3.0, 2.0], [3.0, -3.0, 0.0]])], torch.min)
case("max_all_67", "max_all", [r(67)], torch.max)
case("argmax_1", "argmax", [r(3, 5)], lambda x: torch.argmax(x, 1), dim=1, keepdim=False)
case("argmax_0_keep", "argmax", [r(3, 4, 5)], lambda x: torch.argmax(x, 0, keepdim=True), dim=0, keepdim=True)
case("argmax_67", "argmax", [r(3, 67)], lambda x: torch.argmax(x, -1), dim=-1, keepdim=False)

# ---- softmax, layer norm, losses ---------------------------------------------------------------------
class SavedBF16(torch.autograd.Function):
    """softmax / log_softmax in float32, whose backward reads the output rounded to bfloat16 (the tensor
    that autograd saves in a bfloat16 run): the bfloat16 reference of PyTorch >= 2's float32 kernels."""

    @staticmethod
    def forward(ctx, x, log, dim):
        y = (torch.log_softmax if log else torch.softmax)(x, dim).to(bf16).float()
        ctx.save_for_backward(y)
        ctx.log, ctx.dim = log, dim
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        back = torch._log_softmax_backward_data if ctx.log else torch._softmax_backward_data
        return back(g, y, ctx.dim, torch.float32), None, None


for op, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
    for d in (0, 1, -1):
        case(f"{op}_dim{d}", op, [r(3, 4, 5)], lambda x, d=d, fn=fn: fn(x, d), dim=d)
    case(f"{op}_67", op, [r(5, 67) * 3], lambda x, fn=fn: fn(x, -1), dim=-1)
    case(f"{op}_1d", op, [r(7)], lambda x, fn=fn: fn(x, 0), dim=0)
    case(f"{op}_transposed", op, [r(4, 6)], lambda x, fn=fn: fn(x, -1), dim=-1, pre_t=[[0, 0, 1]])
    case(f"{op}_f64", op, [r(3, 67, dtype=f64)], lambda x, fn=fn: fn(x, -1), dim=-1)
    case(f"{op}_bf16", op, [r(3, 67, dtype=bf16)], lambda x, fn=fn: fn(x, -1), dim=-1,
         ref=lambda x, log=op == "log_softmax": SavedBF16.apply(x, log, -1))
case("softmax_large", "softmax", [r(3, 6) * 30], lambda x: torch.softmax(x, -1), dim=-1)


def ln(ns):
    def f(x, w=None, b=None):
        return F.layer_norm(x, ns, w, b, 1e-5)
    return f


case("layer_norm_1d", "layer_norm", [r(4, 6), r(6), r(6)], ln([6]), normalized_shape=[6], eps=1e-5, weight=True, bias=True)
case("layer_norm_2d", "layer_norm", [r(3, 2, 4), r(2, 4), r(2, 4)], ln([2, 4]), normalized_shape=[2, 4], eps=1e-5, weight=True, bias=True)
case("layer_norm_noaffine", "layer_norm", [r(3, 6)], ln([6]), normalized_shape=[6], eps=1e-5, weight=False, bias=False)
case("layer_norm_noaffine_2d", "layer_norm", [r(2, 3, 5)], ln([3, 5]), normalized_shape=[3, 5], eps=1e-5, weight=False, bias=False)
case("layer_norm_weight_only", "layer_norm", [r(4, 5), r(5)], ln([5]), normalized_shape=[5], eps=1e-5, weight=True, bias=False)
case("layer_norm_67", "layer_norm", [r(2, 3, 67) * 2 + 1, r(67), r(67)], ln([67]), normalized_shape=[67], eps=1e-5, weight=True, bias=True)
case("layer_norm_eps", "layer_norm", [r(3, 8) * 1e-3, r(8), r(8)], lambda x, w, b: F.layer_norm(x, [8], w, b, 1e-3),
     normalized_shape=[8], eps=1e-3, weight=True, bias=True)
case("layer_norm_f64", "layer_norm", [r(4, 67, dtype=f64), r(67, dtype=f64), r(67, dtype=f64)], ln([67]),
     normalized_shape=[67], eps=1e-5, weight=True, bias=True)
case("layer_norm_bf16", "layer_norm", [r(4, 67, dtype=bf16), r(67, dtype=bf16), r(67, dtype=bf16)], ln([67]),
     normalized_shape=[67], eps=1e-5, weight=True, bias=True)


def ce(reduction="mean", ignore_index=-100, label_smoothing=0.0):
    args = dict(reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing)
    return (lambda x, t: F.cross_entropy(x, t, **args)), args


TGT = torch.tensor([1, 0, 4, -100, 2, 4])  # one ignored row (-100)
for red in ("mean", "sum", "none"):
    fn, a = ce(red)
    case(f"cross_entropy_{red}", "cross_entropy", [r(6, 5), idx(5, 6)], fn, **a)
    fn, a = ce(red)
    case(f"cross_entropy_{red}_ignore", "cross_entropy", [r(6, 5), TGT], fn, **a)
    fn, a = ce(red, label_smoothing=0.1)
    case(f"cross_entropy_{red}_smooth", "cross_entropy", [r(6, 5), idx(5, 6)], fn, **a)
    fn, a = ce(red, label_smoothing=0.1)
    case(f"cross_entropy_{red}_ignore_smooth", "cross_entropy", [r(6, 5), TGT], fn, **a)
fn, a = ce("mean", ignore_index=2)  # ignore_index is a valid class
case("cross_entropy_ignore_class", "cross_entropy", [r(6, 5), torch.tensor([2, 0, 2, 1, 3, 4])], fn, **a)
fn, a = ce("mean", ignore_index=2, label_smoothing=0.1)
case("cross_entropy_ignore_class_smooth", "cross_entropy", [r(6, 5), torch.tensor([2, 0, 2, 1, 3, 4])], fn, **a)
fn, a = ce("mean")
case("cross_entropy_1d", "cross_entropy", [r(5), torch.tensor(3)], fn, **a)
case("cross_entropy_67", "cross_entropy", [r(9, 67) * 2, idx(67, 9)], fn, **a)
fn, a = ce("mean", label_smoothing=0.1)
case("cross_entropy_67_smooth", "cross_entropy", [r(9, 67) * 2, idx(67, 9)], fn, **a)
fn, a = ce("mean")
case("cross_entropy_f64", "cross_entropy", [r(6, 5, dtype=f64), TGT], fn, **a)
case("cross_entropy_bf16", "cross_entropy", [r(6, 67, dtype=bf16), idx(67, 6)], fn, **a)
for red in ("mean", "sum", "none"):
    case(f"mse_loss_{red}", "mse_loss", [r(3, 4), r(3, 4)], lambda x, y, red=red: F.mse_loss(x, y, reduction=red), reduction=red)
case("mse_loss_67", "mse_loss", [r(5, 67), r(5, 67)], F.mse_loss, reduction="mean")

# ---- matmul and linear --------------------------------------------------------------------------------------
MM = [("1d_1d", [r(5), r(5)], []), ("1d_2d", [r(4), r(4, 3)], []), ("2d_1d", [r(3, 4), r(4)], []),
      ("2d_2d", [r(3, 4), r(4, 5)], []), ("batched", [r(2, 3, 4), r(2, 4, 5)], []),
      ("batched_bcast", [r(2, 3, 4), r(4, 5)], []), ("bcast_lhs", [r(3, 4), r(2, 4, 5)], []),
      ("batched_bcast4", [r(2, 1, 3, 4), r(3, 4, 2)], []), ("batched_1d", [r(2, 3, 4), r(4)], []),
      ("1d_batched", [r(4), r(2, 4, 3)], []),
      ("at_b", [r(4, 3), r(4, 5)], [[0, 0, 1]]), ("a_bt", [r(3, 4), r(5, 4)], [[1, 0, 1]]),
      ("at_bt", [r(4, 3), r(5, 4)], [[0, 0, 1], [1, 0, 1]]), ("batched_bt", [r(2, 3, 4), r(2, 5, 4)], [[1, -2, -1]]),
      ("batched_perm", [r(3, 2, 4), r(2, 4, 5)], [[0, 0, 1]]),
      ("big", [r(17, 33), r(33, 65)], []), ("big_at", [r(65, 17), r(65, 9)], [[0, 0, 1]])]
for tag, ins, pre in MM:
    case(f"matmul_{tag}", "matmul", ins, torch.matmul, pre_t=pre)
case("matmul_f64", "matmul", [r(2, 5, 7, dtype=f64), r(7, 6, dtype=f64)], torch.matmul)
case("matmul_bf16", "matmul", [r(5, 16, dtype=bf16), r(16, 7, dtype=bf16)], torch.matmul)
case("linear", "linear", [r(4, 5), r(3, 5), r(3)], F.linear, bias=True)
case("linear_nobias", "linear", [r(4, 5), r(3, 5)], F.linear, bias=False)
case("linear_3d", "linear", [r(2, 3, 5), r(4, 5), r(4)], F.linear, bias=True)
case("linear_3d_nobias", "linear", [r(2, 3, 5), r(4, 5)], F.linear, bias=False)
case("linear_1d", "linear", [r(5), r(4, 5), r(4)], F.linear, bias=True)
case("linear_big", "linear", [r(2, 9, 67), r(33, 67), r(33)], F.linear, bias=True)
case("linear_wt", "linear", [r(4, 5), r(5, 3), r(3)], F.linear, bias=True, pre_t=[[1, 0, 1]])
case("linear_f64", "linear", [r(2, 3, 7, dtype=f64), r(4, 7, dtype=f64), r(4, dtype=f64)], F.linear, bias=True)
case("linear_bf16", "linear", [r(6, 16, dtype=bf16), r(8, 16, dtype=bf16), r(8, dtype=bf16)], F.linear, bias=True)


# ---- attention: the reference is the composition of bench/torch_cpu.py --------------------
def attention(q, k, v, causal):
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        T = q.shape[-2]
        att = att.masked_fill(torch.ones(T, T).tril() == 0, float("-inf"))
    return att.softmax(-1) @ v


def gpt_attention(x, B, T, C, H):  # q, k, v split from one [B, T, 3C] projection, as in GPT
    q, k, v = x.split(C, dim=2)
    q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v)]
    return attention(q, k, v, True).transpose(1, 2).contiguous().view(B, T, C)


case("sdpa_causal", "sdpa", [r(2, 2, 4, 3), r(2, 2, 4, 3), r(2, 2, 4, 3)], lambda q, k, v: attention(q, k, v, True), causal=True)
case("sdpa_full", "sdpa", [r(1, 2, 3, 2), r(1, 2, 5, 2), r(1, 2, 5, 2)], lambda q, k, v: attention(q, k, v, False), causal=False)
case("sdpa_causal_64", "sdpa", [r(1, 2, 17, 64), r(1, 2, 17, 64), r(1, 2, 17, 64)],
     lambda q, k, v: attention(q, k, v, True), causal=True)
case("sdpa_full_67", "sdpa", [r(2, 1, 9, 67), r(2, 1, 11, 67), r(2, 1, 11, 67)],
     lambda q, k, v: attention(q, k, v, False), causal=False)
case("sdpa_f64", "sdpa", [r(1, 2, 5, 4, dtype=f64), r(1, 2, 5, 4, dtype=f64), r(1, 2, 5, 4, dtype=f64)],
     lambda q, k, v: attention(q, k, v, True), causal=True)
case("sdpa_gpt", "sdpa_gpt", [r(2, 3, 12)], lambda x: gpt_attention(x, 2, 3, 4, 2), B=2, T=3, C=4, H=2)
case("sdpa_gpt_64", "sdpa_gpt", [r(2, 7, 3 * 128)], lambda x: gpt_attention(x, 2, 7, 128, 2), B=2, T=7, C=128, H=2)

# ---- views ----------------------------------------------------------------------------------------------------
case("reshape", "reshape", [r(2, 3, 4)], lambda x: x.reshape(4, -1), shape=[4, -1])
case("reshape_copy", "reshape", [r(2, 3, 4)], lambda x: x.reshape(6, 4), shape=[6, 4], pre_t=[[0, 0, 2]])
case("reshape_0d", "reshape", [r(1, 1)], lambda x: x.reshape([]), shape=[])
case("view", "view", [r(2, 3, 4)], lambda x: x.view(3, 2, 4), shape=[3, 2, 4])
case("view_transposed", "view", [r(2, 3, 4)], lambda x: x.view(3, 2, 2, 2), shape=[3, 2, 2, 2], pre_t=[[0, 0, 1]])
case("transpose", "transpose", [r(2, 3, 4)], lambda x: x.transpose(0, 2), dim0=0, dim1=2)
case("transpose_neg", "transpose", [r(2, 3, 4)], lambda x: x.transpose(-1, -2), dim0=-1, dim1=-2)
case("permute", "permute", [r(2, 3, 4)], lambda x: x.permute(1, 2, 0), dims=[1, 2, 0])
case("narrow", "narrow", [r(4, 5)], lambda x: x.narrow(1, 1, 3), dim=1, start=1, length=3)
case("narrow_neg", "narrow", [r(4, 5)], lambda x: x.narrow(0, -3, 2), dim=0, start=-3, length=2)
case("select", "select", [r(3, 4, 5)], lambda x: x.select(1, 2), dim=1, index=2)
case("select_neg", "select", [r(3, 4, 5)], lambda x: x.select(-1, -1), dim=-1, index=-1)
case("expand", "expand", [r(3, 1)], lambda x: x.expand(2, 3, 4), shape=[2, 3, 4])
case("expand_keep", "expand", [r(1, 4)], lambda x: x.expand(3, -1), shape=[3, -1])
case("squeeze_all", "squeeze", [r(2, 1, 3, 1)], lambda x: x.squeeze(), dims=None)
case("squeeze_dim", "squeeze", [r(2, 1, 3, 1)], lambda x: x.squeeze(1), dims=[1])
case("squeeze_noop", "squeeze", [r(2, 1, 3)], lambda x: x.squeeze(0), dims=[0])
case("unsqueeze", "unsqueeze", [r(2, 3)], lambda x: x.unsqueeze(1), dim=1)
case("unsqueeze_neg", "unsqueeze", [r(2, 3)], lambda x: x.unsqueeze(-1), dim=-1)
case("flatten", "flatten", [r(2, 3, 4, 2)], lambda x: x.flatten(1, 2), start=1, end=2)
case("flatten_all", "flatten", [r(2, 3, 4)], lambda x: x.flatten(), start=0, end=-1)
case("flatten_transposed", "flatten", [r(2, 3, 4)], lambda x: x.flatten(), start=0, end=-1, pre_t=[[0, 1, 2]])
case("contiguous", "contiguous", [r(3, 4)], lambda x: x.contiguous())
case("contiguous_transposed", "contiguous", [r(3, 4, 2)], lambda x: x.contiguous(), pre_t=[[0, 0, 2]])
case("view_chain", "view_chain", [r(2, 3, 4)], lambda x: x.transpose(0, 2).reshape(4, 6).permute(1, 0).contiguous().view(3, 8))

# ---- joins ------------------------------------------------------------------------------------------------------
case("cat_0", "cat", [r(2, 3), r(1, 3), r(3, 3)], lambda *t: torch.cat(t, 0), dim=0)
case("cat_1", "cat", [r(2, 3), r(2, 1), r(2, 4)], lambda *t: torch.cat(t, 1), dim=1)
case("cat_neg", "cat", [r(2, 3, 2), r(2, 3, 3)], lambda *t: torch.cat(t, -1), dim=-1)
case("cat_transposed", "cat", [r(3, 2), r(1, 3)], lambda *t: torch.cat(t, 0), dim=0, pre_t=[[0, 0, 1]])
case("stack_0", "stack", [r(2, 3), r(2, 3), r(2, 3)], lambda *t: torch.stack(t, 0), dim=0)
case("stack_1", "stack", [r(2, 3), r(2, 3)], lambda *t: torch.stack(t, 1), dim=1)
case("stack_neg", "stack", [r(2, 3), r(2, 3)], lambda *t: torch.stack(t, -1), dim=-1)
case("split_size", "split", [r(5, 3)], lambda x: x.split(2, 0), size=2, dim=0)
case("split_size_1", "split", [r(2, 7)], lambda x: x.split(3, 1), size=3, dim=1)
case("split_sizes", "split", [r(2, 6)], lambda x: x.split([1, 3, 2], -1), sizes=[1, 3, 2], dim=-1)
case("chunk", "chunk", [r(5, 3)], lambda x: x.chunk(2, 0), chunks=2, dim=0)
case("chunk_3", "chunk", [r(2, 9)], lambda x: x.chunk(3, 1), chunks=3, dim=1)
case("chunk_uneven", "chunk", [r(2, 10)], lambda x: x.chunk(4, 1), chunks=4, dim=1)

# ---- selection ----------------------------------------------------------------------------------------------------
case("where", "where", [r(3, 4) > 0, r(3, 4), r(3, 4)], torch.where)
case("where_bcast", "where", [r(3, 1) > 0, r(4), r(3, 4)], torch.where)
case("where_scalar_operand", "where", [r(3, 4) > 0, r(3, 4), r()], torch.where)
case("masked_fill", "masked_fill", [r(3, 4), r(3, 4) > 0], lambda x, m: x.masked_fill(m, 3.0), value=3.0)
case("masked_fill_bcast", "masked_fill", [r(3, 4), r(4) > 0], lambda x, m: x.masked_fill(m, -1.5), value=-1.5)
case("masked_fill_ninf", "masked_fill", [r(3, 4), torch.ones(4, 4).tril()[:3] == 0], lambda x, m: x.masked_fill(m, float("-inf")),
     value="-inf")

# ---- indexing -------------------------------------------------------------------------------------------------------
case("embedding", "embedding", [torch.tensor([[1, 3, 1], [0, 3, 5]]), r(6, 4)], F.embedding, padding_idx=None)
case("embedding_padding", "embedding", [torch.tensor([[1, 3, 1], [0, 3, 5]]), r(6, 4)],
     lambda i, w: F.embedding(i, w, padding_idx=3), padding_idx=3)
case("embedding_1d", "embedding", [torch.tensor([4, 4, 0, 2]), r(5, 67)], F.embedding, padding_idx=None)
case("embedding_f64", "embedding", [torch.tensor([[2, 0], [2, 1]]), r(3, 5, dtype=f64)], F.embedding, padding_idx=None)
case("index_select_0", "index_select", [r(4, 5), torch.tensor([2, 0, 2, 3])], lambda x, i: x.index_select(0, i), dim=0)
case("index_select_1", "index_select", [r(3, 5), torch.tensor([4, 1, 1])], lambda x, i: x.index_select(1, i), dim=1)
case("index_select_67", "index_select", [r(5, 67), torch.tensor([3, 3, 0])], lambda x, i: x.index_select(0, i), dim=0)
case("gather_0", "gather", [r(3, 4), torch.tensor([[0, 2, 1, 1], [2, 2, 0, 1]])], lambda x, i: x.gather(0, i), dim=0)
case("gather_1", "gather", [r(3, 5), torch.tensor([[4, 0], [1, 1], [3, 3]])], lambda x, i: x.gather(1, i), dim=1)
case("gather_small", "gather", [r(4, 5), torch.tensor([[1, 0, 4], [3, 3, 2]])], lambda x, i: x.gather(1, i), dim=1)
case("scatter_add_0", "scatter_add", [r(3, 4), torch.tensor([[0, 2, 1, 1], [2, 2, 0, 1]]), r(2, 4)],
     lambda x, i, s: x.scatter_add(0, i, s), dim=0)
case("scatter_add_1", "scatter_add", [r(3, 5), torch.tensor([[4, 0], [1, 1], [3, 3]]), r(3, 2)],
     lambda x, i, s: x.scatter_add(1, i, s), dim=1)
case("scatter_add_dup", "scatter_add", [r(4, 3), torch.tensor([[3, 1, 3], [3, 3, 0]]), r(2, 3)],
     lambda x, i, s: x.scatter_add(0, i, s), dim=0)  # (a src larger than index breaks PyTorch 1.13's backward)

# ---- copies and dtype conversions --------------------------------------------------------------------------------------
case("clone", "clone", [r(3, 4)], torch.clone)
case("clone_transposed", "clone", [r(3, 4)], torch.clone, pre_t=[[0, 0, 1]])
case("detach", "detach", [r(3, 4)], torch.detach)
case("to_f64", "to", [r(3, 4)], lambda x: x.to(f64), dtype="float64")
case("to_f32_from_f64", "to", [r(3, 4, dtype=f64)], lambda x: x.to(f32), dtype="float32")
case("to_bf16", "to", [r(3, 4)], lambda x: x.to(bf16), dtype="bfloat16")
case("to_f16", "to", [r(3, 4)], lambda x: x.to(f16), dtype="float16")
case("to_f32_from_bf16", "to", [r(3, 4, dtype=bf16)], lambda x: x.to(f32), dtype="float32")
case("to_f32_from_f16", "to", [r(3, 4, dtype=f16)], lambda x: x.to(f32), dtype="float32")
case("to_bf16_from_f16", "to", [r(3, 4, dtype=f16)], lambda x: x.to(bf16), dtype="bfloat16")
case("to_f16_from_bf16", "to", [r(3, 4, dtype=bf16)], lambda x: x.to(f16), dtype="float16")
case("to_same", "to", [r(3, 4)], lambda x: x.to(f32), dtype="float32")

# Bit-exact roundings: ties to even, overflow to inf, subnormals, underflow, NaN, signed zero.
EDGE32 = torch.tensor([0.0, -0.0, 1.0, -1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, 1 + 2 ** -11,
                       1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20, 65504.0, 65519.0, 65520.0, 3.389e38, 3.4028235e38,
                       1e-40, -1e-40, 2 ** -24, 2 ** -25, 2 ** -25 + 2 ** -40, 3 * 2 ** -26, 6e-8, 1e-10,
                       float("inf"), float("-inf"), float("nan"), 0.1, -0.3, 1234.567, -6.1e-5],
                      dtype=f32)
EDGE64 = torch.tensor([1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -24, 1 + 2 ** -24 + 2 ** -50, 1e-45, 1e-46, 3.5e38, 1 / 3,
                       -2.5, 1e300, float("nan")], dtype=f64)
case("to_bf16_edges", "to", [EDGE32], lambda x: x.to(bf16), dtype="bfloat16", grad=False)
case("to_f16_edges", "to", [EDGE32], lambda x: x.to(f16), dtype="float16", grad=False)
case("to_f32_edges_from_f64", "to", [EDGE64], lambda x: x.to(f32), dtype="float32", grad=False)
case("to_bf16_edges_from_f64", "to", [EDGE64], lambda x: x.to(bf16), dtype="bfloat16", grad=False)
case("to_f16_edges_from_f64", "to", [EDGE64], lambda x: x.to(f16), dtype="float16", grad=False)
case("to_f32_from_bf16_edges", "to", [EDGE32.to(bf16)], lambda x: x.to(f32), dtype="float32", grad=False)
case("to_f32_from_f16_edges", "to", [EDGE32.to(f16)], lambda x: x.to(f32), dtype="float32", grad=False)
case("to_bf16_from_f16_edges", "to", [EDGE32.to(f16)], lambda x: x.to(bf16), dtype="bfloat16", grad=False)
case("to_f16_from_bf16_edges", "to", [EDGE32.to(bf16)], lambda x: x.to(f16), dtype="float16", grad=False)
case("to_bf16_roundtrip", "to", [r(64) * 100], lambda x: x.to(bf16).to(f32), dtype="bfloat16,float32", grad=False)
case("to_f16_roundtrip", "to", [r(64) * 100], lambda x: x.to(f16).to(f32), dtype="float16,float32", grad=False)
INT = torch.tensor([0, 1, -1, 2 ** 24, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 24 + 1), 2 ** 53 + 1, 2 ** 62 + 2 ** 38,
                    2 ** 63 - 1, -(2 ** 63), 123456789])
case("to_f32_from_i64", "to", [INT], lambda x: x.to(f32), dtype="float32")
case("to_f64_from_i64", "to", [INT], lambda x: x.to(f64), dtype="float64")
case("to_bf16_from_i64", "to", [INT], lambda x: x.to(bf16), dtype="bfloat16")
TRUNC = torch.tensor([0.0, -0.0, 0.4, 0.6, -0.4, -0.6, 1.5, -1.5, 2.5, -2.7, 2.7, 1e9, -1e9, 2 ** 31 + 0.0,
                      -(2.0 ** 40), 8.5e18, -9.2e18, 16777217.0], dtype=f32)
case("to_i64_from_f32", "to", [TRUNC], lambda x: x.to(i64), dtype="int64", grad=False)
case("to_i64_from_f64", "to", [TRUNC.to(f64) + 0.25], lambda x: x.to(i64), dtype="int64", grad=False)
case("to_i64_from_bf16", "to", [TRUNC.to(bf16)], lambda x: x.to(i64), dtype="int64", grad=False)
case("to_f32_from_bool", "to", [torch.tensor([True, False, True])], lambda x: x.to(f32), dtype="float32")
case("to_bool_from_f32", "to", [torch.tensor([0.0, -0.0, 0.1, -2.0, float("nan")])], lambda x: x.to(torch.bool),
     dtype="bool", grad=False)

write(OUT)
n = sum(1 for k in meta if not k.startswith("_"))
print(f"{OUT}: {n} cases, {len(tensors)} tensors")
