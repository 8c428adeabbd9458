"""PyTorch reference fixtures for sin, cos, erf, cumsum, cumprod, sort, argsort, topk and prod
(engine/tensor/sortscan.go), forward and backward.

Run with Debian's /usr/bin/python3 (python3-torch 1.13, CPU), in this directory:

    /usr/bin/python3 gen_sortscan.py        # writes sortscan.safetensors (deterministic)

The layout is gen_ops.py's (see its doc comment): under "<case>/", in0, in1, ... the inputs, out |
out0, out1 the outputs, gout* the random upstream gradients, grad<i> PyTorch's gradient of input i,
ref_out*/ref_grad* for bfloat16 cases (PyTorch in float32, rounded once to bfloat16), and
__metadata__[<case>] = {"op": ..., <argument>: ...}. sortscan_fixtures_test.go is the Go side.

Sorting ties: PyTorch's sort with stable=False and topk leave the order of equal values unspecified
(std::sort, std::partial_sort); the engine always orders them by index. Cases with ties therefore
use stable=True, and topk cases have no ties. topk with sorted=False returns PyTorch's elements in an
unspecified order: the case sorts them (a differentiable permutation, so the gradient is PyTorch's).
"""
import json, os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../tools/torchfix"))
from torchfix import run_op as run, write_safetensors  # noqa: E402

OUT = "sortscan.safetensors"
f32, f64, bf16, i64, i32 = torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32
NAN, INF = float("nan"), float("inf")

tensors, meta = {}, {"_generator": "gen_sortscan.py", "_torch": torch.__version__}


def r(*shape, dtype=f32):  # standard normal
    return torch.randn(shape, dtype=f64).to(dtype)


def near1(*shape, dtype=f32):  # magnitude in [0.5, 1.5), random sign: products stay near 1
    sign = torch.randint(0, 2, shape).to(f64) * 2 - 1
    return ((torch.rand(shape, dtype=f64) + 0.5) * sign).to(dtype)


def grid(*shape, dtype=f32):  # small integers in [-2, 2] as floats: ties
    return torch.randint(-2, 3, shape).to(dtype)


def distinct(*shape, dtype=f32):  # a random permutation of 0.5·(0..n−1) − n/4: no ties
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n).to(f64) * 0.5 - n / 4).reshape(shape).to(dtype)


def with_zeros(x, *positions):  # x with zeros at the given flat positions
    x = x.clone()
    x.view(-1)[list(positions)] = 0
    return x



def record(name, prefix, xs, single, outs, gouts=None):
    for k, o in enumerate(outs):
        tensors[f"{name}/{prefix}out{'' if single else k}"] = o.detach().to(bf16) if prefix else o.detach()
        if gouts is not None and gouts[k] is not None:
            tensors[f"{name}/gout{'' if single else k}"] = gouts[k]
    for i, x in enumerate(xs):
        if not prefix:
            tensors[f"{name}/in{i}"] = x.detach()
        if x.grad is not None:
            tensors[f"{name}/{prefix}grad{i}"] = x.grad.to(bf16) if prefix else x.grad


def case(name, op, ins, f, **args):
    """Records one case as gen_ops.py's case does (bfloat16 cases with their float32 reference)."""
    assert name not in meta, name
    pre_t = args.get("pre_t", [])
    xs, single, outs, gouts = run(ins, f, pre_t, True)
    record(name, "", xs, single, outs, gouts)
    if {x.dtype for x in ins if x.is_floating_point()} == {bf16}:
        up = [x.float() if x.dtype == bf16 else x for x in ins]
        record(name, "ref_", *run(up, f, pre_t, True, [None if g is None else g.float() for g in gouts])[:3])
    meta[name] = json.dumps({"op": op, **args}, separators=(",", ":"))


torch.manual_seed(0)
SPECIALS = torch.tensor([0.0, -0.0, 1.0, -1.0, 3.5, -100.0, 1e-8, INF, -INF, NAN])

# ---- sin, cos, erf ---------------------------------------------------------------------------------
for op, fn in (("sin", torch.sin), ("cos", torch.cos), ("erf", torch.erf)):
    case(op, op, [r(3, 5)], fn)
    case(f"{op}_vec67", op, [r(67) * 4], fn)
    case(f"{op}_f64", op, [r(3, 5, dtype=f64) * 3], fn)
    case(f"{op}_bf16", op, [r(67, dtype=bf16)], fn)
    case(f"{op}_specials", op, [SPECIALS.clone()], fn)
    case(f"{op}_transposed", op, [r(4, 6)], fn, pre_t=[[0, 0, 1]])
    case(f"{op}_i64", op, [torch.tensor([-3, 0, 1, 2, 7])], fn)  # float32 output, no gradient

# ---- cumsum, cumprod -------------------------------------------------------------------------------
for op, fn, gen in (("cumsum", torch.cumsum, r), ("cumprod", torch.cumprod, near1)):
    for d in (0, 1, 2, -1):
        case(f"{op}_dim{d}", op, [gen(3, 4, 5)], lambda x, d=d, fn=fn: fn(x, d), dim=d)
    case(f"{op}_vec67", op, [gen(67)], lambda x, fn=fn: fn(x, 0), dim=0)
    case(f"{op}_rows67", op, [gen(5, 67)], lambda x, fn=fn: fn(x, -1), dim=-1)
    case(f"{op}_transposed", op, [gen(4, 6)], lambda x, fn=fn: fn(x, 1), dim=1, pre_t=[[0, 0, 1]])
    case(f"{op}_f64", op, [gen(4, 67, dtype=f64)], lambda x, fn=fn: fn(x, 1), dim=1)
    case(f"{op}_bf16", op, [gen(3, 67, dtype=bf16)], lambda x, fn=fn: fn(x, 1), dim=1)
    case(f"{op}_0d", op, [gen()], lambda x, fn=fn: fn(x, 0), dim=0)
    case(f"{op}_0d_neg", op, [gen()], lambda x, fn=fn: fn(x, -1), dim=-1)
    case(f"{op}_size1", op, [gen(3, 1)], lambda x, fn=fn: fn(x, 1), dim=1)
    case(f"{op}_empty", op, [gen(0, 3)], lambda x, fn=fn: fn(x, 0), dim=0)
    case(f"{op}_empty_other", op, [gen(3, 0)], lambda x, fn=fn: fn(x, 0), dim=0)
    case(f"{op}_specials", op, [torch.tensor([[1.5, NAN, 2.0, 0.5], [INF, 2.0, -1.0, 3.0], [1.0, -INF, 0.5, 2.0]])],
         lambda x, fn=fn: fn(x, 1), dim=1)
    case(f"{op}_i64", op, [torch.randint(-3, 4, (3, 5))], lambda x, fn=fn: fn(x, 1), dim=1)
    case(f"{op}_i32", op, [torch.randint(-3, 4, (3, 5)).to(i32)], lambda x, fn=fn: fn(x, 0), dim=0)
    case(f"{op}_bool", op, [torch.randint(0, 2, (2, 6)) > 0], lambda x, fn=fn: fn(x, 1), dim=1)
# cumprod's gradient with zeros: one per row at the start, in the middle, at the end; two in a row
# (nothing flows past the second); rows without zeros beside them; zeros along another dimension.
Z = near1(4, 6)
case("cumprod_zero_first", "cumprod", [with_zeros(Z, 0, 6)], lambda x: torch.cumprod(x, 1), dim=1)
case("cumprod_zero_middle", "cumprod", [with_zeros(Z, 2, 9, 16)], lambda x: torch.cumprod(x, 1), dim=1)
case("cumprod_zero_last", "cumprod", [with_zeros(Z, 5, 23)], lambda x: torch.cumprod(x, 1), dim=1)
case("cumprod_two_zeros", "cumprod", [with_zeros(Z, 1, 4, 12, 13, 20)], lambda x: torch.cumprod(x, 1), dim=1)
case("cumprod_three_zeros", "cumprod", [with_zeros(Z, 0, 2, 5, 19)], lambda x: torch.cumprod(x, 1), dim=1)
case("cumprod_zeros_dim0", "cumprod", [with_zeros(Z, 7, 13, 19, 2)], lambda x: torch.cumprod(x, 0), dim=0)
case("cumprod_zeros_f64", "cumprod", [with_zeros(near1(3, 7, dtype=f64), 3, 8, 12, 20)], lambda x: torch.cumprod(x, 1), dim=1)
case("cumprod_zeros_67", "cumprod", [with_zeros(near1(2, 67), 40, 70, 100)], lambda x: torch.cumprod(x, 1), dim=1)
case("cumprod_zeros_bf16", "cumprod", [with_zeros(near1(2, 9, dtype=bf16), 4, 11, 15)], lambda x: torch.cumprod(x, 1), dim=1)
case("cumprod_neg_zero", "cumprod", [torch.tensor([[1.5, -0.0, 2.0, -1.0], [0.5, 2.0, -0.0, 0.0]])],
     lambda x: torch.cumprod(x, 1), dim=1)

# ---- sort, argsort ---------------------------------------------------------------------------------
def sort(d, desc, stable=False):
    return lambda x: tuple(torch.sort(x, dim=d, descending=desc, stable=stable))


for desc in (False, True):
    tag = "desc" if desc else "asc"
    a = dict(descending=desc, stable=False)
    case(f"sort_{tag}", "sort", [distinct(3, 5)], sort(-1, desc), dim=-1, **a)
    case(f"sort_{tag}_dim0", "sort", [distinct(4, 3)], sort(0, desc), dim=0, **a)
    case(f"sort_{tag}_3d", "sort", [distinct(3, 4, 5)], sort(1, desc), dim=1, **a)
    case(f"sort_{tag}_67", "sort", [r(4, 67)], sort(1, desc), dim=1, **a)
    case(f"sort_{tag}_ties", "sort", [grid(5, 9)], sort(1, desc, True), dim=1, descending=desc, stable=True)
    case(f"sort_{tag}_specials", "sort", [SPECIALS.clone().repeat(2)], sort(0, desc, True), dim=0, descending=desc, stable=True)
    case(f"sort_{tag}_transposed", "sort", [distinct(4, 6)], sort(1, desc), dim=1, pre_t=[[0, 0, 1]], **a)
    case(f"sort_{tag}_f64", "sort", [r(3, 67, dtype=f64)], sort(-1, desc), dim=-1, **a)
    case(f"sort_{tag}_bf16", "sort", [grid(3, 17, dtype=bf16) * 0.25 + r(3, 17, dtype=bf16)], sort(-1, desc, True),
         dim=-1, descending=desc, stable=True)
    case(f"sort_{tag}_i64", "sort", [torch.randint(-5, 6, (3, 11))], sort(1, desc, True), dim=1, descending=desc, stable=True)
    case(f"sort_{tag}_i32", "sort", [torch.randint(-5, 6, (11,)).to(i32)], sort(0, desc, True), dim=0, descending=desc, stable=True)
    case(f"sort_{tag}_bool", "sort", [torch.randint(0, 2, (9,)) > 0], sort(0, desc, True), dim=0, descending=desc, stable=True)
case("sort_0d", "sort", [r()], sort(0, False), dim=0, descending=False, stable=False)
case("sort_empty", "sort", [r(0, 4)], sort(1, False), dim=1, descending=False, stable=False)
case("sort_long_row", "sort", [r(2, 1500)], sort(1, True), dim=1, descending=True, stable=False)
case("argsort", "argsort", [distinct(3, 5)], lambda x: torch.argsort(x, 1), dim=1, descending=False, stable=False)
case("argsort_desc_dim0", "argsort", [distinct(4, 3)], lambda x: torch.argsort(x, 0, descending=True), dim=0,
     descending=True, stable=False)
case("argsort_ties", "argsort", [grid(4, 7)], lambda x: torch.argsort(x, stable=True, dim=-1), dim=-1, descending=False, stable=True)


# ---- topk -------------------------------------------------------------------------------------------
def topk(k, d, largest=True, srt=True):
    def f(x):
        v, i = torch.topk(x, k, dim=d, largest=largest, sorted=srt)
        if not srt:  # PyTorch's order is unspecified: sort the selection (differentiably)
            v, p = torch.sort(v, dim=d, descending=largest, stable=True)
            i = i.gather(d, p)
        return v, i
    return f


for largest in (True, False):
    tag = "largest" if largest else "smallest"
    case(f"topk_{tag}", "topk", [distinct(4, 67)], topk(5, 1, largest), k=5, dim=1, largest=largest, sorted=True)
    case(f"topk_{tag}_dim0", "topk", [distinct(6, 5)], topk(2, 0, largest), k=2, dim=0, largest=largest, sorted=True)
    case(f"topk_{tag}_unsorted", "topk", [distinct(3, 40)], topk(30, -1, largest, False), k=30, dim=-1, largest=largest, sorted=False)
    case(f"topk_{tag}_nan", "topk", [torch.tensor([[1.0, NAN, 3.0, -2.0, INF], [NAN, -INF, 0.5, 2.5, -1.0]])],
         topk(3, 1, largest), k=3, dim=1, largest=largest, sorted=True)
    case(f"topk_{tag}_f64", "topk", [distinct(3, 20, dtype=f64)], topk(7, 1, largest), k=7, dim=1, largest=largest, sorted=True)
case("topk_all", "topk", [distinct(3, 6)], topk(6, 1), k=6, dim=1, largest=True, sorted=True)
case("topk_k0", "topk", [distinct(3, 6)], topk(0, 1), k=0, dim=1, largest=True, sorted=True)
case("topk_0d", "topk", [r()], topk(1, 0), k=1, dim=0, largest=True, sorted=True)
case("topk_bf16", "topk", [distinct(2, 30, dtype=bf16)], topk(4, 1), k=4, dim=1, largest=True, sorted=True)
case("topk_i64", "topk", [torch.randperm(20).reshape(2, 10)], topk(3, 1, False), k=3, dim=1, largest=False, sorted=True)
case("topk_transposed", "topk", [distinct(6, 5)], topk(2, 1), k=2, dim=1, largest=True, sorted=True, pre_t=[[0, 0, 1]])

# ---- prod ---------------------------------------------------------------------------------------------
case("prod_all", "prod_all", [near1(3, 4)], torch.prod)
case("prod_all_67", "prod_all", [near1(67)], torch.prod)
case("prod_all_one_zero", "prod_all", [with_zeros(near1(3, 4), 5)], torch.prod)
case("prod_all_two_zeros", "prod_all", [with_zeros(near1(3, 4), 1, 10)], torch.prod)  # the gradient is 0
case("prod_all_f64_one_zero", "prod_all", [with_zeros(near1(5, 3, dtype=f64), 7)], torch.prod)
case("prod_all_0d", "prod_all", [r()], torch.prod)
case("prod_all_empty", "prod_all", [r(0, 3)], torch.prod)
# PyTorch 1.13 has no bfloat16 prod on the CPU (its CUDA kernel computes in float32): the bfloat16
# cases are PyTorch's float32 computation, rounded to bfloat16.
case("prod_all_bf16", "prod_all", [near1(9, dtype=bf16)], lambda x: torch.prod(x.float()).to(bf16))
case("prod_all_i32", "prod_all", [torch.randint(-3, 4, (5,)).to(i32)], torch.prod)
case("prod_all_bool", "prod_all", [torch.tensor([True, True, False])], torch.prod)
for d in (0, 1, -1):
    for keep in (False, True):
        case(f"prod_dim{d}_{'keep' if keep else 'drop'}", "prod", [near1(3, 4, 5)],
             lambda x, d=d, keep=keep: torch.prod(x, d, keepdim=keep), dim=d, keepdim=keep)
case("prod_67", "prod", [near1(5, 67)], lambda x: torch.prod(x, 1), dim=1, keepdim=False)
case("prod_transposed", "prod", [near1(4, 6)], lambda x: torch.prod(x, 1), dim=1, keepdim=False, pre_t=[[0, 0, 1]])
# With a zero anywhere PyTorch takes the exclusive-products path for every row.
case("prod_one_zero", "prod", [with_zeros(near1(4, 5), 7)], lambda x: torch.prod(x, 1), dim=1, keepdim=False)
case("prod_zeros_rows", "prod", [with_zeros(near1(4, 5), 0, 7, 8, 19)], lambda x: torch.prod(x, 1, keepdim=True), dim=1, keepdim=True)
case("prod_zeros_dim0", "prod", [with_zeros(near1(4, 5), 0, 7, 8, 19, 12)], lambda x: torch.prod(x, 0), dim=0, keepdim=False)
case("prod_zeros_f64", "prod", [with_zeros(near1(3, 6, dtype=f64), 2, 7, 9, 13)], lambda x: torch.prod(x, -1), dim=-1, keepdim=False)
case("prod_neg_zero", "prod", [torch.tensor([[1.5, -0.0, 2.0], [-0.0, 0.0, 3.0]])], lambda x: torch.prod(x, 1), dim=1, keepdim=False)
case("prod_specials", "prod", [torch.tensor([[1.5, NAN, 2.0], [INF, 0.5, 3.0], [-INF, 2.0, -1.0]])],
     lambda x: torch.prod(x, 1), dim=1, keepdim=False)
case("prod_f64", "prod", [near1(4, 67, dtype=f64)], lambda x: torch.prod(x, 1), dim=1, keepdim=False)
case("prod_bf16", "prod", [near1(3, 9, dtype=bf16)], lambda x: torch.prod(x.float(), 1).to(bf16), dim=1, keepdim=False)
case("prod_0d", "prod", [r()], lambda x: torch.prod(x, 0), dim=0, keepdim=False)
case("prod_0d_keep", "prod", [r()], lambda x: torch.prod(x, -1, keepdim=True), dim=-1, keepdim=True)
case("prod_size1", "prod", [near1(3, 1)], lambda x: torch.prod(x, 1), dim=1, keepdim=False)
case("prod_empty", "prod", [r(0, 3)], lambda x: torch.prod(x, 0), dim=0, keepdim=False)
case("prod_i64", "prod", [torch.randint(-3, 4, (3, 5))], lambda x: torch.prod(x, 1), dim=1, keepdim=False)
case("prod_bool", "prod", [torch.randint(0, 2, (3, 4)) > 0], lambda x: torch.prod(x, 0), dim=0, keepdim=False)

write_safetensors(os.path.join(os.path.dirname(os.path.abspath(__file__)), OUT), tensors, meta)
print(f"{OUT}: {len(meta) - 2} cases, {len(tensors)} tensors")
