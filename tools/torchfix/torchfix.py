"""Shared helper of the fixture generators (engine/*/testdata/gen_*.py): writes PyTorch tensors to
a safetensors file without the Python `safetensors` package, which Debian does not ship.
Generators import it with sys.path.insert(0, <repo>/tools/torchfix)."""
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
