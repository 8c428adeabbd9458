"""Generates sincos_glibc.json for TestSincosGlibc (sincos_test.go): how often the correctly
rounded sin and cos of this package (sincos.go) differ from the C library's, which PyTorch's
double-precision Box-Muller transform calls. Run from this directory with Debian's python3-torch:

    /usr/bin/python3 gen_sincos_glibc.py

The angles are drawn as PyTorch draws them: theta = (2*pi) * u in double precision, u the 53-bit
uniforms of torch.rand(N, dtype=torch.float64) after torch.manual_seed(SEED), which Go regenerates
with Generator.Uniform64. For each angle the script calls the system libm's sincos (through ctypes;
Python's math.sin and math.cos give the same bits, which is checked) and computes the correctly
rounded values with mpmath at 200 bits, rounded to double exactly through fractions.Fraction.

Storing every result would take 3.2 MB, so the file holds a SHA-256 of the libm results (and one per
chunk of CHUNK angles, to locate a failure), the angles' SHA-256, and every angle where libm and
correct rounding disagree, with both results. A second, small set of angles near the multiples of
pi/4 (where the reduction in sincos.go changes quadrant or cancels), near 0 and near 2*pi is stored
whole.
"""
import ctypes
import hashlib
import json
import math
import os
import platform
import struct
from fractions import Fraction

import mpmath
import numpy as np
import torch

SEED = 20240601
N = 200_000
CHUNK = 1000

mpmath.mp.prec = 200
libm = ctypes.CDLL("libm.so.6")
libm.sincos.restype = None
libm.sincos.argtypes = [ctypes.c_double, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
gnu_get_libc_version = ctypes.CDLL("libc.so.6").gnu_get_libc_version
gnu_get_libc_version.restype = ctypes.c_char_p
_s, _c = ctypes.c_double(), ctypes.c_double()


def libm_sincos(x):
    libm.sincos(x, ctypes.byref(_s), ctypes.byref(_c))
    s, c = _s.value, _c.value
    assert bits(s) == bits(math.sin(x)) and bits(c) == bits(math.cos(x)), x
    return s, c


def to_double(v):
    """The double nearest to the mpf v (ties to even): exact rational rounding."""
    sign, man, exp, _ = v._mpf_
    f = Fraction(man) * Fraction(2) ** exp
    return float(-f if sign else f)


def cr_sincos(x):
    m = mpmath.mpf(x)  # exact
    return to_double(mpmath.sin(m)), to_double(mpmath.cos(m))


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def hexbits(x):
    return "%016x" % bits(x)


torch.manual_seed(SEED)
u = torch.rand(N, dtype=torch.float64).numpy()
theta = np.float64(2 * math.pi) * u  # one rounding, as in C: 2.0 * pi * u
assert theta.dtype == np.float64 and theta.max() < 2 * math.pi

libm_out = np.empty((N, 2), dtype="<f8")
disagree = []
for i, x in enumerate(theta.tolist()):
    s, c = libm_sincos(x)
    libm_out[i] = s, c
    rs, rc = cr_sincos(x)
    if bits(rs) != bits(s) or bits(rc) != bits(c):
        disagree.append([i, hexbits(s), hexbits(c), hexbits(rs), hexbits(rc)])


def ulps(v, k):
    out, up, dn = [v], v, v
    for _ in range(k):
        up, dn = float(np.nextafter(up, np.inf)), float(np.nextafter(dn, 0))
        out += [up, dn]
    return out


edges = []
for k in range(1, 9):
    edges += ulps(k * math.pi / 4, 4)
edges += ulps(2 * math.pi * (1 - 2.0**-53), 4)
edges += [2 * math.pi * k / 256 for k in range(256)]
edges += [2 * math.pi * 2.0**-53, 2.0**-40, 2.0**-27, 2.0**-26, 2.0**-20]
edge_rows = []
for x in edges:
    s, c = libm_sincos(x)
    rs, rc = cr_sincos(x)
    edge_rows.append([hexbits(x), hexbits(s), hexbits(c), hexbits(rs), hexbits(rc)])

raw = libm_out.tobytes()
out = {
    "libc": "glibc " + gnu_get_libc_version().decode() + " " + platform.machine(),
    "torch": torch.__version__,
    "seed": SEED,
    "n": N,
    "theta_sha256": hashlib.sha256(theta.astype("<f8").tobytes()).hexdigest(),
    "libm_sha256": hashlib.sha256(raw).hexdigest(),
    "chunk": CHUNK,
    "chunk_sha256": [hashlib.sha256(raw[16 * i:16 * (i + CHUNK)]).hexdigest()[:16] for i in range(0, N, CHUNK)],
    "disagree": disagree,  # [index, libm sin, libm cos, correctly rounded sin, cos] as IEEE bits
    "edges": edge_rows,  # [theta, libm sin, libm cos, correctly rounded sin, cos] as IEEE bits
}
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "sincos_glibc.json"), "w") as f:
    json.dump(out, f, separators=(",", ":"))
    f.write("\n")
ns = sum(r[1] != r[3] for r in disagree)
nc = sum(r[2] != r[4] for r in disagree)
ne = sum(r[1] != r[3] or r[2] != r[4] for r in edge_rows)
print(f"{out['libc']}: libm differs from correct rounding at {len(disagree)} of {N} angles "
      f"({ns} sin, {nc} cos); at {ne} of {len(edge_rows)} edge angles")
