"""Generates fixtures.json + fixtures.bin: outputs of PyTorch 1.13's CPU generator for
TestFixtures (fixtures_test.go), which compares them bit for bit. Run from this directory with
Debian's python3-torch:

    /usr/bin/python3 gen_fixtures.py

on an x86-64 CPU with AVX2 and FMA (the path PyTorch's normal_ takes there; see package doc).
fixtures.json lists records; each names an op, its arguments, the seed passed to
torch.manual_seed, and where its little-endian output lies in fixtures.bin. Large outputs are
stored as a SHA-256 of all their bytes plus the first elements.

PyTorch's float64 Box-Muller takes sin and cos from the C library (glibc), whose results differ
in the last bit from correctly rounded ones (which this package computes, sincos.go) for about
one value in 700. For the float64 normal_ records of 16 or more elements the script models the
transform in Python (uniform draws from torch.rand, glibc's log and sincos through ctypes, exact
fused multiply-add through fractions.Fraction), checks that the model reproduces PyTorch's output
bit for bit, and then records in "cr_patch" every element that changes when sin and cos are
correctly rounded instead (mpmath at 200 bits): its index, PyTorch's value, the value with
correctly rounded sin and cos, and the angle, as IEEE 754 bits in hex. TestFixtures requires its
output to equal the latter at those elements and PyTorch's everywhere else.
"""
import ctypes
import hashlib
import json
import math
import os
import struct
from fractions import Fraction

import mpmath
import numpy as np
import torch
import torch.nn.functional as F

assert torch.__version__.startswith("1.13"), torch.__version__
assert not torch.backends.mkl.is_available()  # bernoulli_ would use MKL's VSL otherwise
torch.set_num_threads(1)

SEEDS = [0, 1, 42, 2**40 + 7]
SIZES = [1, 3, 15, 16, 17, 100, 1000]
DT = {"f32": torch.float32, "f64": torch.float64}
HASH_OVER = 256  # elements; above this only a SHA-256 and the first HEAD elements are stored
HEAD = 64

blob = bytearray()
records = []


def put(rec, arr, whole=False, patch=None):
    a = np.ascontiguousarray(arr)
    if patch:
        rec = dict(rec, cr_patch=patch)
    kind = {np.dtype("<f4"): "f32", np.dtype("<f8"): "f64", np.dtype("<i8"): "i64",
            np.dtype("uint8"): "u8", np.dtype("<u2"): "u16"}[a.dtype]
    raw = a.tobytes()
    rec = dict(rec, kind=kind, n=int(a.size))
    if a.size > HASH_OVER and not whole:
        rec["sha256"] = hashlib.sha256(raw).hexdigest()
        raw = a[:HEAD].tobytes()
    rec["off"], rec["len"] = len(blob), len(raw)
    blob.extend(raw)
    records.append(rec)


libm = ctypes.CDLL("libm.so.6")
libm.log.restype, libm.log.argtypes = ctypes.c_double, [ctypes.c_double]
libm.sincos.restype = None
libm.sincos.argtypes = [ctypes.c_double, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
_s, _c = ctypes.c_double(), ctypes.c_double()
mpmath.mp.prec = 200


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def hexbits(x):
    return "%016x" % bits(x)


def fma(a, b, c):  # a*b+c rounded once
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def to_double(v):  # the double nearest to the mpf v
    sign, man, exp, _ = v._mpf_
    f = Fraction(man) * Fraction(2) ** exp
    return float(-f if sign else f)


def normal_f64_patch(seed, n, mean, std, out):
    """Models normal_fill (DistributionTemplates.h) for a float64 tensor of n >= 16 elements,
    checks the model against PyTorch's output, and returns the cr_patch entries."""
    torch.manual_seed(seed)
    u = torch.rand(n, dtype=torch.float64).numpy().tolist()
    tail = torch.rand(16, dtype=torch.float64).numpy().tolist() if n % 16 else None
    res = {}  # element -> (glibc value, correctly rounded value, angle)

    def fill16(d, base):
        for j in range(8):
            radius = math.sqrt(libm.log(1 - d[j]) * -2)
            theta = 2 * math.pi * d[j + 8]
            libm.sincos(theta, ctypes.byref(_s), ctypes.byref(_c))
            m = mpmath.mpf(theta)
            crs, crc = to_double(mpmath.sin(m)), to_double(mpmath.cos(m))
            for k, tr, cr in [(j, _c.value, crc), (j + 8, _s.value, crs)]:
                assert abs(bits(tr) - bits(cr)) <= 1, ("glibc more than an ulp off", theta)
                res[base + k] = (fma(radius * tr, std, mean), fma(radius * cr, std, mean), theta)

    for i in range(0, n - 15, 16):
        fill16(u[i:i + 16], i)
    if tail:
        fill16(tail, n - 16)
    patch = []
    for i in range(n):
        glibc, cr, theta = res[i]
        assert bits(glibc) == bits(float(out[i])), ("model differs from PyTorch", seed, n, i)
        if bits(cr) != bits(glibc):
            patch.append([i, hexbits(glibc), hexbits(cr), hexbits(theta)])
    return patch


def np_of(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view("<u2")
    return t.numpy()


for s in SEEDS:
    for dt in DT:
        for n in SIZES:
            torch.manual_seed(s)
            put(dict(op="rand", seed=s, dtype=dt), np_of(torch.rand(n, dtype=DT[dt])))
            torch.manual_seed(s)
            out = np_of(torch.randn(n, dtype=DT[dt]))
            patch = normal_f64_patch(s, n, 0.0, 1.0, out) if dt == "f64" and n >= 16 else None
            put(dict(op="randn", seed=s, dtype=dt), out, patch=patch)

    for dt in DT:
        for n, a, b in [(7, -0.5, 0.5), (33, -1e-3, 1e-3), (100, -3.0, 2.5), (1000, -0.1, 0.1)]:
            torch.manual_seed(s)
            put(dict(op="uniform", seed=s, dtype=dt, args=[a, b]),
                np_of(torch.empty(n, dtype=DT[dt]).uniform_(a, b)))
        for n, m, sd in [(7, 0.5, 2.0), (16, -3.0, 0.02), (33, 0.1, 0.7), (1000, 1.0, 0.02)]:
            torch.manual_seed(s)
            out = np_of(torch.empty(n, dtype=DT[dt]).normal_(m, sd))
            patch = normal_f64_patch(s, n, m, sd, out) if dt == "f64" and n >= 16 else None
            put(dict(op="normal", seed=s, dtype=dt, args=[m, sd]), out, patch=patch)

    for n, a, b in [(5, -1.0, 1.0), (100, -0.3, 0.7), (1000, 0.0, 1.0)]:
        torch.manual_seed(s)
        put(dict(op="uniform", seed=s, dtype="bf16", args=[a, b]),
            np_of(torch.empty(n, dtype=torch.bfloat16).uniform_(a, b)))

    for lo, hi in [(0, 10), (-5, 5), (0, 2**32 - 1), (0, 2**32), (-2**40, 2**40),
                   (-2**62, 2**62), (3, 1000003)]:
        torch.manual_seed(s)
        put(dict(op="randint", seed=s, dtype="i64", args=[lo, hi]),
            torch.randint(lo, hi, (200,)).numpy())

    for n in [1, 10, 1000, 100000]:
        torch.manual_seed(s)
        put(dict(op="randperm", seed=s, dtype="i64", args=[n]), torch.randperm(n).numpy())

    for i, o in [(4, 3), (100, 50), (1, 1), (3, 5)]:
        torch.manual_seed(s)
        lin = torch.nn.Linear(i, o)
        put(dict(op="linear", seed=s, dtype="f32", args=[i, o]),
            np.concatenate([lin.weight.detach().numpy().ravel(), lin.bias.detach().numpy()]))
    for num, dim in [(10, 8), (3, 5), (1000, 64)]:
        torch.manual_seed(s)
        emb = torch.nn.Embedding(num, dim)
        put(dict(op="embedding", seed=s, dtype="f32", args=[num, dim]),
            emb.weight.detach().numpy().ravel())

    for n, p in [(1000, 0.1), (1000, 0.5), (333, 0.31559482297027575), (50, 0.9)]:
        x = ((torch.arange(n) % 13) - 6).float() * 0.25  # exact; Go builds the same input
        torch.manual_seed(s)
        put(dict(op="dropout", seed=s, dtype="f32", args=[n, p]),
            F.dropout(x, p, training=True).numpy())
    for n, p in [(100, 0.25), (1000, 0.9)]:
        torch.manual_seed(s)
        put(dict(op="bernoulli", seed=s, dtype="f32", args=[n, p]),
            torch.empty(n).bernoulli_(p).numpy())

    # One generator, many calls: proves the state (including the cached normal
    # sample) advances as PyTorch's does. Outputs are widened to float64.
    torch.manual_seed(s)
    parts = [torch.randn(17), torch.rand(5), torch.randn(3), torch.randn(3, dtype=torch.float64),
             torch.randn(1), torch.randint(0, 100, (4,)), torch.rand(2, dtype=torch.float64),
             torch.randn(40, dtype=torch.float64), torch.randn(5),
             torch.empty(7).normal_(2.0, 3.0), torch.randperm(9), torch.randn(16)]
    put(dict(op="sequence", seed=s, dtype="f64"),
        np.concatenate([p.to(torch.float64).numpy() for p in parts]))

    # torch.get_rng_state() after a few draws (the cached sample is valid),
    # then what PyTorch draws from there.
    torch.manual_seed(s)
    torch.randn(3)
    torch.rand(1000)
    put(dict(op="torchstate", seed=s, dtype="u8"), torch.get_rng_state().numpy(), whole=True)
    put(dict(op="after_torchstate", seed=s, dtype="f64"),
        np.concatenate([torch.randn(1, dtype=torch.float64).numpy(), torch.rand(3, dtype=torch.float64).numpy()]))

# Long runs, hashed: many AVX2 Box-Muller blocks and calls to log, sin and cos.
for s in [0, 7]:
    torch.manual_seed(s)
    put(dict(op="randn", seed=s, dtype="f32"), torch.randn(1000003).numpy())
    torch.manual_seed(s)
    out = torch.randn(200001, dtype=torch.float64).numpy()
    put(dict(op="randn", seed=s, dtype="f64"), out, patch=normal_f64_patch(s, 200001, 0.0, 1.0, out))
    torch.manual_seed(s)
    put(dict(op="normal", seed=s, dtype="f32", args=[-0.25, 3.5]), torch.empty(300007).normal_(-0.25, 3.5).numpy())

# glibc's log (what PyTorch's double Box-Muller calls; aorLog reproduces it bit for bit) at the
# edges of its branches, over the arguments the generator can produce: 1-u, u in [0, 1). (Its
# sin and cos are compared in sincos_glibc.json; see gen_sincos_glibc.py.)


def ulps(v, k=3):
    out, up, dn = [v], v, v
    for _ in range(k):
        up, dn = float(np.nextafter(up, np.inf)), float(np.nextafter(dn, -np.inf))
        out += [up, dn]
    return out


args = []
for edge in [1 - 2.0**-4, 0.5, 0.6875, 1.0, 2.0**-24, 2.0**-53, 1 - 2.0**-53]:
    args += [a for a in ulps(edge) if 0 < a <= 1]
args += [k / 512 for k in range(1, 513)]
put(dict(op="libm_log", seed=0, dtype="f64"), np.array([(a, libm.log(a)) for a in args], dtype="<f8").ravel(), whole=True)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "fixtures.bin"), "wb") as f:
    f.write(bytes(blob))
with open(os.path.join(here, "fixtures.json"), "w") as f:
    json.dump({"torch": torch.__version__, "records": records}, f, separators=(",", ":"))
    f.write("\n")
print(len(records), "records,", len(blob), "bytes")
for r in records:
    if r.get("cr_patch"):
        print("%s(%s, seed=%d, n=%d, args=%s): %d elements change with correctly rounded sin and cos"
              % (r["op"], r["dtype"], r["seed"], r["n"], r.get("args", []), len(r["cr_patch"])))
