"""Shared helper of the fixture generators (engine/*/testdata/gen_*.py): writes PyTorch tensors to
a safetensors file without the Python `safetensors` package, which Debian does not ship.
Generators import it with sys.path.insert(0, <repo>/tools/torchfix). run_op is the op runner of the
op fixtures (engine/tensor/testdata/torch/gen_ops.py, gen_sortscan.py)."""
import json, struct
import torch

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
          torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


def raw(t):
    """Little-endian bytes of t; numpy has no bfloat16, so 16-bit floats are viewed as int16."""
    t = t.detach().contiguous()
    return (t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t).numpy().tobytes()


def write_safetensors(path, tensors, meta):
    """tensors: name -> tensor, written in that order; meta: the __metadata__ string map."""
    hdr, chunks, at = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        b = raw(t)
        hdr[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        chunks.append(b)
        at += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def run_op(ins, f, pre_t, grad=True, gouts=None):
    """Runs f on copies of the inputs (the float ones require grad when grad) after transposing the
    inputs pre_t names ((index, dim0, dim1) each), and backpropagates the upstream gradients (random
    float64 draws cast to each output's type, drawn here, when gouts is None) through every
    differentiable output. Returns the inputs, whether f returned one tensor, the outputs and the
    upstream gradients."""
    xs = [x.detach().clone().requires_grad_(x.is_floating_point() and grad) for x in ins]
    vs = list(xs)
    for i, d0, d1 in pre_t:
        vs[i] = vs[i].transpose(d0, d1)
    out = f(*vs)
    single = not isinstance(out, (tuple, list))
    outs = [out] if single else list(out)
    if gouts is None:
        gouts = [torch.randn(o.shape, dtype=torch.float64).to(o.dtype) if o.requires_grad else None for o in outs]
    diff = [(o, g) for o, g in zip(outs, gouts) if o.requires_grad]
    if diff:
        torch.autograd.backward([o for o, _ in diff], [g.to(o.dtype) for o, g in diff])
    return xs, single, outs, gouts
