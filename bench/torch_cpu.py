"""The PyTorch side of the CPU benchmarks that bench/sidebyside.sh runs against `zeroeng bench`:
the same models, batch sizes, optimizers and timing (3 warm-up steps, then the median of 20).

    /usr/bin/python3 bench/torch_cpu.py mlp    # 1024-4096-4096-1024 GELU MLP, batch 256, AdamW(1e-4), MSE
    /usr/bin/python3 bench/torch_cpu.py gpt    # GPT, 4 layers, d=256, 4 heads, T=128, B=8, vocab 512, AdamW(1e-4)
    /usr/bin/python3 bench/torch_cpu.py ddp2   # the mlp on 2 gloo ranks (batch 128 each, 1 thread each),
                                               # DDP + ZeroRedundancyOptimizer(AdamW)

TORCH_THREADS=N sets torch.set_num_threads(N) (the single-rank workloads). Prints one JSON line.
sidebyside.sh runs it as installed and at PyTorch's best: tcmalloc preloaded, OpenBLAS told the
CPU's core, the best thread count.
"""
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

WARMUP, TIMED = 3, 20


def median_step_ms(step):
    for _ in range(WARMUP):
        step()
    times = []
    for _ in range(TIMED):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def make_mlp():
    return nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 1024))


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a 4x GELU (tanh) MLP."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(c, dim=2))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        y = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=512, ctx=128, dim=256, layers=4, heads=4):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(dim)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lnf(x) @ self.wte.weight.T  # tied output projection


def mlp():
    model = make_mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randn(256, 1024), torch.randn(256, 1024)

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()

    ms = median_step_ms(step)
    return {"workload": "mlp", "threads": torch.get_num_threads(), "step_ms_median": round(ms, 2),
            "samples_per_s": round(256e3 / ms, 1)}


def gpt():
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx, target = torch.randint(0, 512, (8, 128)), torch.randint(0, 512, (8, 128))

    def step():
        opt.zero_grad()
        F.cross_entropy(model(idx).view(-1, 512), target.view(-1)).backward()
        opt.step()

    ms = median_step_ms(step)
    return {"workload": "gpt", "threads": torch.get_num_threads(), "step_ms_median": round(ms, 2),
            "tokens_per_s": round(8 * 128e3 / ms, 1)}


def ddp_rank(rank, world, port):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(make_mlp())
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4)
    x, y = torch.randn(128, 1024), torch.randn(128, 1024)

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()

    ms = median_step_ms(step)
    if rank == 0:
        print(json.dumps({"workload": "ddp2", "world": world, "threads_per_rank": 1, "step_ms_median": round(ms, 2),
                          "samples_per_s": round(world * 128e3 / ms, 1)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("mlp", "gpt", "ddp2"):
        sys.exit(__doc__)
    if os.environ.get("TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
    if sys.argv[1] == "ddp2":
        mp.spawn(ddp_rank, args=(2, 29000 + os.getpid() % 1000), nprocs=2, join=True)
    else:
        print(json.dumps(mlp() if sys.argv[1] == "mlp" else gpt()))
