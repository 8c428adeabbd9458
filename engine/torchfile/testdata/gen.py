"""Fixtures of engine/torchfile: files written by PyTorch's own torch.save, and a few made by hand
where torch 1.13 cannot write them. Run with Debian's /usr/bin/python3 (python3-torch), in this
directory:

    /usr/bin/python3 gen.py                 # writes the *.pt fixtures and expected.json
    /usr/bin/python3 gen.py describe FILE... [--weights-only FILE...]  # each FILE as torch.load loads it, as JSON

expected.json holds, for each fixture that loads, describe()'s view of what torch.load returns; the Go
tests compare their own reading with it, and run `describe` on the files zeroeng writes.
"""
import io, json, os, pickle, struct, sys, zipfile
from collections import OrderedDict

import torch


def describe(v):
    """A JSON view of a loaded object: every value tagged with its type, dicts as ordered pairs."""
    if isinstance(v, torch.Tensor):
        t = v.detach()
        vals = t.double() if t.is_floating_point() else t.long()
        return {"tensor": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "values": vals.flatten().tolist()}
    if isinstance(v, dict):
        return {"dict": [[k, describe(x)] for k, x in v.items()]}
    if isinstance(v, tuple):
        return {"tuple": [describe(x) for x in v]}
    if isinstance(v, list):
        return {"list": [describe(x) for x in v]}
    if isinstance(v, bool):
        return {"bool": v}
    if isinstance(v, int):
        return {"int": v}
    if isinstance(v, float):
        return {"float": v}
    if isinstance(v, str):
        return {"str": v}
    if v is None:
        return {"none": None}
    raise TypeError(type(v))


def dtypes():
    base = torch.tensor([[-1.5, 0.0, 0.1], [2.5, 65504.0, -3.0e-8]])
    return OrderedDict([
        ("f32", base), ("f64", base.double()), ("f16", base.half()), ("bf16", base.bfloat16()),
        ("i64", torch.tensor([-(2**63), -1, 0, 2**63 - 1])),
        ("i32", torch.tensor([[-(2**31), -1], [0, 2**31 - 1]], dtype=torch.int32)),
        ("i16", torch.tensor([-(2**15), -1, 2**15 - 1], dtype=torch.int16)),
        ("i8", torch.tensor([-128, -1, 127], dtype=torch.int8)),
        ("u8", torch.arange(0, 256, 51, dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
        ("scalar", torch.tensor(3.25)), ("empty", torch.zeros(0, 3)),
    ])


def views():
    a = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    w = torch.arange(6, dtype=torch.int64)
    return OrderedDict([
        ("module.base", a),                  # a DDP model's keys, kept as they are
        ("module.tied", a),                  # the same tensor twice (tied weights)
        ("module.window", a[1:, 2:5]),       # an offset and strides into a's storage
        ("module.t", a.t()),                 # a transpose: non-contiguous
        ("module.row", a[2]),                # contiguous, at an offset
        ("module.every_other", w[1::2]),     # a stride of 2
        ("module.expanded", w[:3].expand(2, 3)),  # a stride of 0
    ])


def nested():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "loss": 0.25,
            "name": "linear \u00e9", "big": 2**40, "neg": -7, "none": None, "flags": [True, False],
            "nested": {"a": {"b": {"c": torch.tensor([1.0, 2.0])}}}}


class Evil:
    """Pickles as a call of fn(arg): what a malicious file does."""
    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


MAGIC = 0x1950a86a20f9469cfc6c


def legacy_with_storage_views(path):
    """The legacy format as PyTorch before 1.0 wrote it, with storage views (view_metadata), which
    later versions still read but no longer write: a 10-element root storage, a tensor over its
    elements 2 to 7 through a view storage, and one over the whole root."""
    root = torch.arange(10, dtype=torch.float32)

    class View:
        def __init__(self, root_key, view_key, offset, size):
            self.pid = ("storage", torch.FloatStorage, root_key, "cpu", 10,
                        None if view_key is None else (view_key, offset, size))

    class T:
        def __init__(self, storage, offset, size, stride):
            self.args = (storage, offset, size, stride, False, OrderedDict())

        def __reduce__(self):
            return (torch._utils._rebuild_tensor_v2, self.args)

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return obj.pid if isinstance(obj, View) else None

    obj = OrderedDict([("window", T(View("7", "8", 2, 5), 1, (2, 2), (1, 2))),
                       ("whole", T(View("7", None, 0, 0), 0, (10,), (1,)))])
    f = io.BytesIO()
    for x in (MAGIC, 1001, {"protocol_version": 1001, "little_endian": True,
                            "type_sizes": {"short": 2, "int": 4, "long": 8}}):
        pickle.dump(x, f, protocol=2)
    P(f, protocol=2).dump(obj)
    pickle.dump(["7"], f, protocol=2)
    f.write(struct.pack("<q", 10) + root.numpy().tobytes())
    with open(path, "wb") as out:
        out.write(f.getvalue())


def big_endian(path, obj):
    """A zip file as torch 2.x writes it on a big-endian machine: a "byteorder" record of "big" and
    each storage's elements byte-swapped. torch 1.13 does not read the record; torch 2.x does."""
    b = io.BytesIO()
    torch.save(obj, b)
    src = zipfile.ZipFile(b)
    sizes = {}
    for t in obj.values():  # one storage per tensor, keyed in order
        sizes[str(len(sizes))] = t.element_size()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name in src.namelist():
            data = src.read(name)
            key = name.split("/data/")[-1] if "/data/" in name else None
            if key is not None:
                n = sizes[key]
                data = b"".join(data[i:i + n][::-1] for i in range(0, len(data), n))
            z.writestr(zipfile.ZipInfo(name), data)  # a fixed date: the same bytes every run
            if name.endswith("/data.pkl"):
                z.writestr(zipfile.ZipInfo(name[:-len("data.pkl")] + "byteorder"), b"big")


def main():
    expected = {}

    def save(name, obj, **kw):
        torch.save(obj, name, **kw)
        expected[name] = describe(torch.load(name))

    save("dtypes.pt", dtypes())
    save("views.pt", views())
    save("nested.pt", nested())
    save("legacy.pt", views(), _use_new_zipfile_serialization=False)
    save("proto4.pt", dtypes(), pickle_protocol=4)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    save("params.pt", model.state_dict(keep_vars=True))  # Parameters: _rebuild_parameter
    save("tensor.pt", torch.arange(6.0).reshape(2, 3))

    legacy_with_storage_views("legacy_views.pt")
    expected["legacy_views.pt"] = describe(torch.load("legacy_views.pt"))
    small = OrderedDict([("f32", torch.tensor([1.5, -2.0])), ("f16", torch.tensor([0.5], dtype=torch.half)),
                         ("i64", torch.tensor([1, -2])), ("u8", torch.tensor([7], dtype=torch.uint8))])
    big_endian("bigendian.pt", small)
    expected["bigendian.pt"] = describe(small)

    # Files that must be refused, naming what they would run.
    torch.save({"w": torch.ones(1), "x": Evil(os.system, "echo pwned")}, "evil_system.pt")
    torch.save([Evil(eval, "1+1")], "evil_eval_legacy.pt", _use_new_zipfile_serialization=False)

    with open("expected.json", "w") as f:  # a line per fixture
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(expected.items())) + "\n}\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["describe"]:
        # weights_only=True is torch's own restricted unpickler; 1.13's knows no floats (BINFLOAT).
        weights_only = False  # for the files after --weights-only
        for arg in sys.argv[2:]:
            if arg == "--weights-only":
                weights_only = True
            else:
                print(json.dumps(describe(torch.load(arg, weights_only=weights_only))))
    else:
        main()
