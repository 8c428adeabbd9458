"""Reads a checkpoint's model.safetensors with PyTorch alone (no safetensors
package: Debian's python3-torch does not ship it), as a user would check that
a zeroeng checkpoint loads into PyTorch, and loads it into a module with the
same names. Prints {name: [dtype, shape, sum as float64]} as JSON.

    /usr/bin/python3 read_with_torch.py model.safetensors
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(body[begin:end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return header.get("__metadata__", {}), out


def main():
    meta, tensors = read(sys.argv[1])
    assert meta.get("format") == "pt", meta
    # The names are a module's own: load_state_dict accepts them strictly.
    module = torch.nn.Module()
    for name, t in tensors.items():
        parts = name.split(".")
        owner = module
        for p in parts[:-1]:
            if not hasattr(owner, p):
                owner.add_module(p, torch.nn.Module())
            owner = getattr(owner, p)
        owner.register_parameter(parts[-1], torch.nn.Parameter(torch.zeros_like(t)))
    module.load_state_dict(tensors, strict=True)
    print(json.dumps({n: [str(t.dtype).replace("torch.", ""), list(t.shape), float(t.double().sum())]
                      for n, t in module.state_dict().items()}))


if __name__ == "__main__":
    main()
