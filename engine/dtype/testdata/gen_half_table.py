"""Generates half_table.bin: float32 inputs with their float16 (NumPy) and bfloat16 (PyTorch)
roundings, for TestHalfMatchesTorch. Run with Debian's /usr/bin/python3 (python3-torch)."""
import numpy as np, torch
rng = np.random.default_rng(0)
bits = rng.integers(0, 2**32, size=3000, dtype=np.uint64).astype(np.uint32)
near = (rng.standard_normal(4000) * np.exp2(rng.uniform(-26, 17, 4000))).astype(np.float32).view(np.uint32)
edges = np.array([0, 0x80000000, 0x7f800000, 0xff800000, 0x33000000, 0x33000001, 0x387fc000,
                  0x477fe000, 0x477ff000, 0x477fefff, 0x3f808000, 0x3f818000], dtype=np.uint32)
f = np.concatenate([bits, near, edges]).view(np.float32)
f = f[~np.isnan(f)]
with np.errstate(over="ignore"):
    h = f.astype(np.float16).view(np.uint16)
b = torch.from_numpy(f.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
with open("half_table.bin", "wb") as o:
    o.write(np.uint32(len(f)).tobytes()); o.write(f.view(np.uint32).tobytes()); o.write(h.tobytes()); o.write(b.tobytes())
