"""Writes the .npy fixtures with NumPy, and fixtures.json: for each file the dtype, shape and
little-endian C-order bytes (hex) that zeroeng must read from it, or the error it must report,
computed here by NumPy itself. Run with Debian's /usr/bin/python3 (python3-numpy), in this directory:

    /usr/bin/python3 gen_fixtures.py

Files named save_*.npy are written by np.save from C-order little-endian arrays of engine dtypes:
TestWriteMatchesNumPy checks that npy.Write reproduces them byte for byte.
"""
import json, numpy as np
from numpy.lib import format as npf

# What zeroeng reads each NumPy type as (narrow integers are widened exactly).
ENGINE = {"f2": "float16", "f4": "float32", "f8": "float64", "i1": "int32", "i2": "int32", "i4": "int32",
          "i8": "int64", "u1": "uint8", "u2": "int32", "u4": "int64", "b1": "bool"}


def values(code, shape=(2, 3)):
    n = int(np.prod(shape))
    if code[1] == "f":
        v = np.array([-1.5, 0.0, 0.1, 2.5, np.inf, -0.0, 65504.0, 1e-7, np.nan, -2.0, 3.0, 4.0] * 6)[:n]
    elif code[1] == "b":
        v = (np.arange(n) % 3 == 0)
    else:
        info = np.iinfo(np.dtype(code))
        v = np.array([info.min, info.max, 0, 1, info.max // 3, info.min // 5 if info.min else 7] * 6, dtype=np.int64)[:n]
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.dtype(code)).reshape(shape)


manifest = {}


def save(name, a, version=None, expect=None):
    with open(name + ".npy", "wb") as f:
        if version is None:
            np.save(f, a)
        else:
            npf.write_array(f, a, version=version)
    if expect is not None:
        manifest[name] = {"error": expect}
        return
    want = np.ascontiguousarray(a.astype(np.dtype(ENGINE[a.dtype.str[1:]]).newbyteorder("<")))
    manifest[name] = {"dtype": ENGINE[a.dtype.str[1:]], "shape": list(a.shape), "data": want.tobytes().hex()}


for code in ENGINE:
    save("save_" + code if code in ("f2", "f4", "f8", "i4", "i8", "u1", "b1") else code, values("<" + code))
    if np.dtype(">" + code).itemsize > 1:
        save("big_" + code, values(">" + code))
save("save_scalar_f8", np.array(3.25))
save("save_scalar_b1", np.array(True))
save("save_empty_f4", np.zeros((0, 3), np.float32))
save("save_empty_1d_i8", np.zeros((0,), np.int64))
save("save_1d_u1", np.arange(200, dtype=np.uint8))
save("save_4d_f4", np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) / 8)
save("save_long_dim_f4", np.zeros((1234567, 0), np.float32))
save("fortran_f4", np.asfortranarray(values("<f4", (3, 4))))
save("fortran_3d_i8", np.asfortranarray(np.arange(24, dtype=np.int64).reshape(2, 3, 4)))
save("fortran_big_i2", np.asfortranarray(values(">i2", (4, 3))))
save("fortran_1d_f8", np.asfortranarray(values("<f8", (5,))))  # written as C order: 1-d is both
save("fortran_row_f4", np.asfortranarray(values("<f4", (1, 5))))
save("v2_f4", values("<f4"), version=(2, 0))
save("v3_i4", values("<i4"), version=(3, 0))
save("bad_u8", np.arange(3, dtype=np.uint64), expect="unsupported descr '<u8': uint64 does not fit in int64")
save("bad_c8", np.ones(3, np.complex64), expect="unsupported descr '<c8'")
save("bad_str", np.array(["ab", "c"]), expect="unsupported descr '<U2'")
save("bad_structured", np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
     expect="unsupported descr [('a', '<i4'), ('b', '<f8')]: structured dtypes are not supported")
save("bad_datetime", np.array(["2020-01-01"], dtype="datetime64[D]"), expect="unsupported descr '<M8[D]'")
save("bad_object", np.array([{"a": 1}], dtype=object), expect="unsupported descr '|O'")
with open("fixtures.json", "w") as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
    f.write("\n")
