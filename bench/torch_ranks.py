"""PyTorch's side of bench/ranks.js and of samples/gpt.js --bench on several ranks (bench/sidebyside.sh
ranks): a model trained data-parallel (DistributedDataParallel over gloo, one process a rank, one thread
each when there are several) with a fixed batch per rank on random data.

    /usr/bin/python3 bench/torch_ranks.py MODEL RANKS [STEPS]

MODEL: cnn (bench/torch_cnn.py's CNN, batch 64 a rank, Adam), mlp (samples/fashion_mnist.js's MLP
784-256-128-10, batch 64 a rank, Adam) or gpt (bench/torch_cpu.py's GPT, 8 sequences of 128 tokens a
rank, AdamW). TORCH_THREADS=N sets torch.set_num_threads(N) on one rank. Rank 0 prints one JSON line:
the median step and the samples (gpt: tokens) a second over every rank.

torch.set_num_threads does not reach OpenBLAS (Debian's PyTorch calls its pthread build, which starts
a thread per core whatever PyTorch is told): the linear layers of a process "on one thread" run on
every core. So that several ranks run one thread each, this script sets OPENBLAS_NUM_THREADS=1 for
them unless it is set; for one rank the variable is left to the caller.
"""
import json
import os
import statistics
import sys
import time

if len(sys.argv) > 2 and sys.argv[2] != "1":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # read when torch loads OpenBLAS

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from torch_cnn import make_model as make_cnn  # bench/ is the script's directory, first on sys.path
from torch_cpu import GPT


def setup(name):
    """The model, its optimizer's class and learning rate, and one rank's batch: input, target."""
    if name == "cnn":
        return make_cnn(), torch.optim.Adam, 1e-3, torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))
    if name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
        return model, torch.optim.Adam, 1e-3, torch.rand(64, 784), torch.randint(0, 10, (64,))
    return GPT(), torch.optim.AdamW, 1e-4, torch.randint(0, 512, (8, 128)), torch.randint(0, 512, (8, 128))


def run(rank, world, name, steps, port):
    if world > 1:
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    elif os.environ.get("TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
    torch.manual_seed(0)
    model, optimizer, lr, _, _ = setup(name)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = optimizer(model.parameters(), lr=lr)
    torch.manual_seed(1 + rank)  # each rank its own data
    _, _, _, x, y = setup(name)
    step_ms = []
    for i in range(steps):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        out = model(x)
        F.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1)).backward()
        opt.step()
        if i >= 3:
            step_ms.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(step_ms)
    per_step = y.numel()  # samples; tokens for gpt
    if rank == 0:
        print(json.dumps({"workload": f"{name}-ranks", "world": world, "threads": torch.get_num_threads(),
                          "step_ms": round(ms, 2), "samples_per_s": round(world * per_step * 1e3 / ms)}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("cnn", "mlp", "gpt"):
        sys.exit(__doc__)
    name, world = sys.argv[1], int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else (20 if name == "gpt" else 60)
    if world == 1:
        run(0, 1, name, steps, 0)
    else:
        mp.spawn(run, args=(world, name, steps, 29500 + os.getpid() % 1000), nprocs=world, join=True)
