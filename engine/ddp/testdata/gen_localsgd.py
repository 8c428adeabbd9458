"""Generates localsgd.json: every rank's parameters after post-local SGD with PyTorch 1.13 on 4 gloo
ranks (DDP with post_localSGD_hook over subgroups of 2 ranks, as dist.new_subgroups(group_size=2) makes them,
and a PeriodicModelAverager after every optimizer step), for engine/ddp's TestPostLocalSGDMatchesPyTorch.

    /usr/bin/python3 engine/ddp/testdata/gen_localsgd.py

Model Linear(8, 16) - ReLU - Linear(16, 4) from torch.manual_seed(0), SGD (lr 0.1), 7 steps; rank r
trains on rows [3r, 3r + 3) of a fixed batch of 12 whose values the Go test computes the same way.
"""
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_localSGD
from torch.distributed.algorithms.model_averaging import averagers
from torch.nn.parallel import DistributedDataParallel as DDP

# name: (start_localSGD_iter, post_local_gradient_allreduce, period, warmup_steps)
CONFIGS = {
    "subgroup-allreduce": (2, True, 2, 2),
    "local-only": (3, False, 3, 1),
}


def batch():
    x = torch.tensor([[((i * 7 + j * 3) % 11 - 5) / 4 for j in range(8)] for i in range(12)], dtype=torch.float32)
    y = torch.tensor([(i * 5) % 4 for i in range(12)])
    return x, y


def run(rank, world, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29663"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    # dist.new_subgroups(group_size=2), which 1.13 allows only with CUDA.
    groups = [dist.new_group([2 * i, 2 * i + 1]) for i in range(world // 2)]
    subgroup = groups[rank // 2]
    x, y = batch()
    results = {}
    for name, (start, post_local, period, warmup) in CONFIGS.items():
        torch.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
        state = post_localSGD.PostLocalSGDState(process_group=None, subgroup=subgroup, start_localSGD_iter=start,
                                                post_local_gradient_allreduce=post_local)
        model.register_comm_hook(state, post_localSGD.post_localSGD_hook)
        averager = averagers.PeriodicModelAverager(period=period, warmup_steps=warmup)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(7):
            opt.zero_grad()
            F.cross_entropy(model(x[3 * rank:3 * rank + 3]), y[3 * rank:3 * rank + 3]).backward()
            opt.step()
            averager.average_parameters(model.parameters())
        results[name] = {n: p.detach().reshape(-1).tolist() for n, p in model.module.named_parameters()}
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({name: [g[name] for g in gathered] for name in CONFIGS}, f)
            f.write("\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "localsgd.json")
    mp.spawn(run, args=(4, out), nprocs=4, join=True)
    print("wrote", out)
