"""Generates gloo.json: the SHA-256 of rank 0's buffer after PyTorch 1.13's DDP all-reduce hook
(bucket.div_(world_size), then a gloo all_reduce) and fp16_compress_hook (the bucket in float16,
div_, all_reduce, copied back) over 2, 3 and 4 gloo ranks, for engine/ddp's
TestHooksMatchGlooBitForBit: zeroeng's in-process backend reduces in gloo's ring order, so the
buffers are the same bit for bit.

    /usr/bin/python3 engine/ddp/testdata/gen_gloo.py

Rank r's buffer of n float32 elements is input(r, n), a formula the Go test computes the same way.
n = 3000001 (12 MB) makes gloo cut each rank's chunk into several segments of at most 1 MiB.
"""
import hashlib
import json
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [4097, 3000001]


def input_(rank, n):
    i = np.arange(n, dtype=np.uint64)
    u = ((i * 2654435761 + rank * 40503 + 12345) % (1 << 32)).astype(np.float64) / 2**32
    v = ((i * 40503 + rank * 2654435761 + 777) % (1 << 32)).astype(np.float64) / 2**32
    return torch.from_numpy(((u - 0.5) * np.exp2(np.floor(v * 20) - 10)).astype(np.float32))


def run(rank, world, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(29730 + world)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    for n in SIZES:
        x = input_(rank, n)
        x.div_(world)  # default_hooks.allreduce_hook
        dist.all_reduce(x)
        h = input_(rank, n).to(torch.float16).div_(world)  # default_hooks.fp16_compress_hook
        dist.all_reduce(h)
        y = input_(rank, n).copy_(h)
        if rank == 0:
            results[f"allreduce/{world}/{n}"] = hashlib.sha256(x.numpy().tobytes()).hexdigest()
            results[f"fp16/{world}/{n}"] = hashlib.sha256(y.numpy().tobytes()).hexdigest()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    outs = []
    for world in (2, 3, 4):
        out = os.path.join("/tmp", f"gloo_{world}.json")
        mp.spawn(run, args=(world, out), nprocs=world, join=True)
        outs.append(out)
    merged = {}
    for out in outs:
        with open(out) as f:
            merged.update(json.load(f))
    dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gloo.json")
    with open(dst, "w") as f:
        json.dump(merged, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", dst)
