"""Writes small idx files for every type code, with Python's struct (big endian) rather than
zeroeng's writer, a gzip-compressed copy of two of them, and fixtures.json: for each file the dtype,
shape and little-endian bytes (hex) zeroeng must read, computed by NumPy. Run with Debian's
/usr/bin/python3 (python3-numpy), in this directory:

    /usr/bin/python3 gen_fixtures.py
"""
import gzip, json, struct, numpy as np

# type code: (struct format, NumPy type the engine reads it as, values)
TYPES = {
    "ubyte": (0x08, "B", "<u1", [0, 1, 127, 128, 254, 255, 3, 4, 5, 6, 7, 8], (2, 2, 3)),
    "sbyte": (0x09, "b", "<i4", [-128, -1, 0, 1, 126, 127], (6,)),
    "short": (0x0B, "h", "<i4", [-32768, -1, 0, 1, 12345, 32767], (2, 3)),
    "int": (0x0C, "i", "<i4", [-(2**31), -1, 0, 1, 123456789, 2**31 - 1], (3, 2)),
    "float": (0x0D, "f", "<f4", [-1.5, 0.0, 0.1, 2.5, float("inf"), -0.0], (2, 3)),
    "double": (0x0E, "d", "<f8", [-1.5, 0.0, 0.1, 2.5, float("-inf"), 1e-300], (1, 2, 3)),
}
manifest = {}
for name, (code, fmt, out, vals, shape) in TYPES.items():
    b = struct.pack(">BBBB", 0, 0, code, len(shape)) + struct.pack(">%dI" % len(shape), *shape)
    b += struct.pack(">%d%s" % (len(vals), fmt), *vals)
    open(name + ".idx", "wb").write(b)
    want = {"dtype": {"<u1": "uint8", "<i4": "int32", "<f4": "float32", "<f8": "float64"}[out],
            "shape": list(shape), "data": np.array(vals, dtype=fmt).astype(out).tobytes().hex()}
    manifest[name + ".idx"] = want
    if name in ("ubyte", "double"):
        open(name + ".idx.gz", "wb").write(gzip.compress(b, mtime=0))
        manifest[name + ".idx.gz"] = want
with open("fixtures.json", "w") as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
    f.write("\n")
