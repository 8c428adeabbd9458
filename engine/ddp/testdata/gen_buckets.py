"""Generates buckets.json: the layout of PyTorch 1.13's DDP buckets (each bucket's parameters, in
order, with their offsets in the bucket) as a comm hook sees them in the first iterations, for
engine/ddp's TestBucketLayoutMatchesPyTorch.

    /usr/bin/python3 engine/ddp/testdata/gen_buckets.py

Two gloo ranks; each configuration builds its model from torch.manual_seed(0), wraps it in DDP and
runs 3 iterations of forward, backward and an SGD step, the hook recording every bucket it is
handed. dist._DEFAULT_FIRST_BUCKET_BYTES is PyTorch's cap on the first bucket (zeroeng's
firstBucketCapMB).
"""
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

MIB = 1 << 20


class Tiny(nn.Module):
    """An embedding, a layer norm, two linear layers and an unused head when asked."""

    def __init__(self, unused=False):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.ln = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4, bias=False)
        if unused:
            self.head = nn.Linear(4, 4)

    def forward(self, idx):
        return self.fc2(F.relu(self.fc1(self.ln(self.emb(idx)))))


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


# name: (model, DDP options, first bucket cap in bytes, input kind)
CONFIGS = {
    "mlp": (mlp, {}, MIB, "x"),
    "mlp-small-buckets": (mlp, {"bucket_cap_mb": 200 / MIB}, 100, "x"),
    "mlp-find-unused": (mlp, {"bucket_cap_mb": 200 / MIB, "find_unused_parameters": True}, 100, "x"),
    "tiny": (Tiny, {"bucket_cap_mb": 300 / MIB}, 200, "idx"),
    "tiny-unused": (lambda: Tiny(True), {"bucket_cap_mb": 300 / MIB, "find_unused_parameters": True}, 200, "idx"),
}


def run(rank, world, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29662"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    for name, (make, opts, first, kind) in CONFIGS.items():
        dist._DEFAULT_FIRST_BUCKET_BYTES = first
        torch.manual_seed(0)
        module = make()
        names = {id(p): n for n, p in module.named_parameters()}
        model = DDP(module, **opts)
        iterations = []

        def hook(state, bucket):
            offsets, at = [], 0
            for p in bucket.parameters():
                offsets.append(at)
                at += p.numel()
            iterations[-1].append({"index": bucket.index(), "params": [names[id(p)] for p in bucket.parameters()],
                                   "offsets": offsets, "numel": bucket.buffer().numel()})
            return dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future().then(lambda f: f.value()[0])

        model.register_comm_hook(None, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for it in range(3):
            iterations.append([])
            if kind == "x":
                inp = torch.arange(24, dtype=torch.float32).reshape(3, 8).sin() + rank
            else:
                inp = torch.tensor([[1, 2, 3], [4, 5, 6 + rank]])
            opt.zero_grad()
            model(inp).square().mean().backward()
            opt.step()
            iterations[-1].sort(key=lambda b: b["index"])
        results[name] = {"first_bucket_bytes": first, "bucket_cap_bytes": round(opts.get("bucket_cap_mb", 25) * MIB),
                         "find_unused_parameters": opts.get("find_unused_parameters", False),
                         "iterations": iterations}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "buckets.json")
    mp.spawn(run, args=(2, out), nprocs=2, join=True)
    print("wrote", out)
