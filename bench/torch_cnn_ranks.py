"""PyTorch's side of bench/cnn_ranks.js (bench/sidebyside.sh cnn-ranks): the CNN of bench/torch_cnn.py
trained data-parallel (DistributedDataParallel over gloo, one process a rank, one thread each when there
are several), batch 64 per rank, Adam.

    /usr/bin/python3 bench/torch_cnn_ranks.py RANKS [STEPS]

TORCH_THREADS=N sets torch.set_num_threads(N) on one rank. Rank 0 prints one JSON line.
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from torch_cnn import make_model  # bench/ is the script's directory, first on sys.path


def run(rank, world, steps, port):
    if world > 1:
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    elif os.environ.get("TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
    torch.manual_seed(0)
    model = make_model()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(1 + rank)
    x = torch.rand(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))
    step_ms = []
    for i in range(steps):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= 3:
            step_ms.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(step_ms)
    if rank == 0:
        print(json.dumps({"workload": "cnn-ranks", "world": world, "threads": torch.get_num_threads(),
                          "step_ms": round(ms, 2), "samples_per_s": round(world * 64e3 / ms)}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    world = int(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    if world == 1:
        run(0, 1, steps, 0)
    else:
        mp.spawn(run, args=(world, steps, 29500 + os.getpid() % 1000), nprocs=world, join=True)
