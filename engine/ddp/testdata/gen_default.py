"""Fixture for DDP's default reduction (no comm hook registered) on 3 ranks: PyTorch's reducer then
multiplies each gradient by 1/world while copying it into its bucket (at::mul_out with the reciprocal
as a float), divides it in place when it already is the bucket's view (gradient_as_bucket_view from
the second iteration), and sums the buckets with gloo. On 3 ranks the reciprocal and a true division
round differently, so rank 0's gradients, bit for bit, tell which one ran.

    /usr/bin/python3 engine/ddp/testdata/gen_default.py   # writes engine/ddp/testdata/default.json

Model: Linear(5, 4) -> ReLU -> Linear(4, 3), loss model(x).square().sum(); weight k of a parameter
((3 k) mod 11 - 5) / 8, rank r's input x[i][j] = ((5 i + j + r) mod 7 - 3) / 4, 6 rows: small dyadic
numbers, so that every local gradient is exact whatever order a GEMM adds in, and only the reduction
can differ. Two iterations of SGD with lr 0 (the weights stay as they are), zero_grad() between
them, with gradient_as_bucket_view off and on.
"""
import json
import os
import struct

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 3


def bits(t):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in t.detach().flatten().tolist()]


def run(rank, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29671"
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    x = torch.tensor([[((5 * i + j + rank) % 7 - 3) / 4 for j in range(5)] for i in range(6)], dtype=torch.float32)
    results = {"world": WORLD}
    for view in (False, True):
        module = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.tensor([((3 * k) % 11 - 5) / 8 for k in range(p.numel())]).reshape(p.shape))
        model = DDP(module, gradient_as_bucket_view=view)
        opt = torch.optim.SGD(model.parameters(), lr=0)
        grads = []
        for _ in range(2):
            opt.zero_grad()
            model(x).square().sum().backward()
            grads.append({n: bits(p.grad) for n, p in module.named_parameters()})
            opt.step()
        results[f"gradient_as_bucket_view={str(view).lower()}"] = grads
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
            f.write("\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default.json")
    mp.spawn(run, args=(out,), nprocs=WORLD, join=True)
