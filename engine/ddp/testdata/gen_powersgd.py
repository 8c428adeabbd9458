"""Generates powersgd.json: parameters after DDP training with PyTorch's
PowerSGD hooks (powerSGD_hook, batched_powerSGD_hook) on 2 gloo ranks, for
engine/ddp's TestPowerSGDMatchesPyTorch.

    /usr/bin/python3 engine/ddp/testdata/gen_powersgd.py

Model Linear(8, 16) - ReLU - Linear(16, 4) from torch.manual_seed(0), SGD
(lr 0.1), 6 steps; rank r trains on rows [6r, 6r + 6) of a fixed batch of
12 whose values the Go test computes the same way.
"""
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP

CONFIGS = {
    "rank1": dict(matrix_approximation_rank=1, start_powerSGD_iter=2),
    "rank2-cold": dict(matrix_approximation_rank=2, start_powerSGD_iter=2, warm_start=False, random_seed=7),
    "no-error-feedback": dict(matrix_approximation_rank=1, start_powerSGD_iter=2, use_error_feedback=False),
    # Compressing from the first iteration, whose buckets (one, in registration order) differ from
    # the rebuilt ones: PyTorch allows it without error feedback and warm start.
    "start0": dict(matrix_approximation_rank=1, start_powerSGD_iter=0, use_error_feedback=False, warm_start=False),
    # batched_powerSGD_hook: each bucket as one padded square matrix.
    "batched-rank1": dict(batched=True, matrix_approximation_rank=1, start_powerSGD_iter=2),
    "batched-rank2-cold": dict(batched=True, matrix_approximation_rank=2, start_powerSGD_iter=2, warm_start=False, random_seed=7),
    "batched-no-error-feedback": dict(batched=True, matrix_approximation_rank=1, start_powerSGD_iter=2, use_error_feedback=False),
}


# PyTorch 1.13's batched_powerSGD_hook fails an assertion of its own _orthogonalize, which the
# batching of powerSGD_hook (pytorch#75157) changed to take only 3-D batches of matrices, while the
# batched hook still passes one 2-D matrix. Give it that matrix as a batch of one, as it was meant.
_orthogonalize_batches = powerSGD._orthogonalize


def _orthogonalize_any(matrices, epsilon=0):
    if matrices.dim() == 2:
        return _orthogonalize_batches(matrices.unsqueeze(0), epsilon)
    return _orthogonalize_batches(matrices, epsilon)


powerSGD._orthogonalize = _orthogonalize_any


def batch():
    x = torch.tensor([[((i * 7 + j * 3) % 11 - 5) / 4 for j in range(8)] for i in range(12)], dtype=torch.float32)
    y = torch.tensor([(i * 5) % 4 for i in range(12)])
    return x, y


def run(rank, world, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29661"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = batch()
    results = {}
    for name, kw in CONFIGS.items():
        torch.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
        kw = dict(kw)
        hook = powerSGD.batched_powerSGD_hook if kw.pop("batched", False) else powerSGD.powerSGD_hook
        state = powerSGD.PowerSGDState(process_group=None, **kw)
        model.register_comm_hook(state, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            opt.zero_grad()
            F.cross_entropy(model(x[6 * rank:6 * rank + 6]), y[6 * rank:6 * rank + 6]).backward()
            opt.step()
        results[name] = {n: p.detach().reshape(-1).tolist() for n, p in model.module.named_parameters()}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
            f.write("\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "powersgd.json")
    mp.spawn(run, args=(2, out), nprocs=2, join=True)
    print("wrote", out)
