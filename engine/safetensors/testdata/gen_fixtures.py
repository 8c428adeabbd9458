"""Safetensors fixtures from PyTorch tensors, written and read by a small reader/writer of its own
(the Python `safetensors` package is not available here). Run with Debian's /usr/bin/python3
(python3-torch), in this directory:

    /usr/bin/python3 gen_fixtures.py                         # writes torch.safetensors, unordered.safetensors
    /usr/bin/python3 gen_fixtures.py verify go_written.safetensors  # checks a file written by zeroeng

torch.safetensors is laid out as the safetensors library does (descending dtype alignment, then name);
unordered.safetensors lists tensors in a header order unrelated to their data order, as older writers did.
`verify` loads every tensor with torch, compares it with tensors() and checks that the file is byte for
byte what this writer produces. TestReadTorchFixture and TestWriteForTorch are the Go side.
"""
import json, struct, sys, torch

ST = {torch.bool: "BOOL", torch.uint8: "U8", torch.float16: "F16", torch.bfloat16: "BF16",
      torch.int32: "I32", torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
RANK = list(ST)  # the safetensors Dtype enum order, "increasing alignment"
TORCH = {v: k for k, v in ST.items()}
META = {"format": "pt", "source": "gen_fixtures.py"}


def tensors():
    base = torch.tensor([[-1.5, 0.0, 0.1], [2.5, 65504.0, -3.0e-8]])  # float32
    return {
        "f32": base, "f64": base.double(), "bf16": base.bfloat16(), "f16": base.half(),
        "i64": torch.tensor([-(2**63), -1, 0, 2**63 - 1]),
        "i32": torch.tensor([[-(2**31), -1], [0, 2**31 - 1]], dtype=torch.int32),
        "u8": torch.arange(0, 256, 51, dtype=torch.uint8), "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.25), "empty": torch.zeros(0, 3), "emb.\u00e9\"q": torch.arange(12.0).reshape(3, 4) / 7,
    }


def raw(t):  # little-endian bytes (the host is little endian); numpy has no bfloat16, so view 16-bit floats as int16
    t = t.contiguous()
    return (t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t).numpy().tobytes()


def dumps(ts, order, meta=META):
    hdr, data = ({"__metadata__": meta} if meta else {}), b""
    for name in order:
        hdr[name] = {"dtype": ST[ts[name].dtype], "shape": list(ts[name].shape),
                     "data_offsets": [len(data), len(data) + len(raw(ts[name]))]}
        data += raw(ts[name])
    h = json.dumps(hdr, separators=(",", ":"), ensure_ascii=False).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def loads(b):
    (n,) = struct.unpack("<Q", b[:8])
    hdr = json.loads(b[8:8 + n])
    meta, out = hdr.pop("__metadata__", None), {}
    for name, e in hdr.items():
        s, t = e["data_offsets"], TORCH[e["dtype"]]
        v = torch.frombuffer(bytearray(b[8 + n + s[0]:8 + n + s[1]]) or bytearray(1), dtype=torch.uint8)[:s[1] - s[0]]
        out[name] = (v.view(torch.int16).view(t) if t in (torch.float16, torch.bfloat16) else v.view(t)).reshape(e["shape"])
    return meta, out


def aligned(ts):
    return sorted(ts, key=lambda k: (-RANK.index(ts[k].dtype), k))


if __name__ == "__main__":
    ts = tensors()
    if sys.argv[1:2] == ["verify"]:
        b = open(sys.argv[2], "rb").read()
        meta, got = loads(b)
        assert meta == META, meta
        assert got.keys() == ts.keys(), got.keys()
        for k in ts:
            assert got[k].dtype == ts[k].dtype and got[k].shape == ts[k].shape and torch.equal(got[k], ts[k]), k
        assert b == dumps(ts, aligned(ts)), "values match, but the layout differs from the safetensors library's"
        print("ok:", sys.argv[2], "loads in torch with the expected", len(got), "tensors and layout")
    else:
        open("torch.safetensors", "wb").write(dumps(ts, aligned(ts)))
        b = dumps(ts, list(reversed(aligned(ts))), meta=None)
        (n,) = struct.unpack("<Q", b[:8])
        hdr = json.loads(b[8:8 + n])  # list the header in name order: unrelated to the data order
        h = json.dumps({k: hdr[k] for k in sorted(hdr)}, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        open("unordered.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
        for f in ("torch.safetensors", "unordered.safetensors"):  # self-check the reader on both
            assert all(torch.equal(v, ts[k]) for k, v in loads(open(f, "rb").read())[1].items())
