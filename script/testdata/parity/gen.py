"""Generates fixtures.json for script's TestParityWithPyTorch: PyTorch 1.13 (Debian's python3-torch)
running the behaviours of its own test/distributed/optim/test_zero_redundancy_optimizer.py and of the
DDP comm-hook tests on 2 and 3 gloo ranks, so that the JavaScript scenarios beside this file can be
checked against them.

    /usr/bin/python3 script/testdata/parity/gen.py

Every scenario trains the same model, Linear(6, 10) - Tanh - Linear(10, 8) - Tanh - Linear(8, 3) from
torch.manual_seed(0), for 5 steps on a fixed batch of 12 rows (torch.manual_seed(1): randn inputs,
classes 0-2); rank r of n trains on rows [12r/n, 12(r+1)/n), except under "join", where the ranks have
uneven inputs (see join_run). The initial weights and the batch are in the fixture; each scenario records every
rank's losses and final parameters (and what else it checks: step(closure)'s return values, the
consolidated state dict).
"""
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5
WORLDS = (2, 3)

# The optimizers ZeRO wraps, with the hyper-parameters every scenario of that name uses.
OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    "adam": (torch.optim.Adam, {"lr": 0.01}),
    "adamw": (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.05}),
    "rmsprop": (torch.optim.RMSprop, {"lr": 0.01}),
    "adagrad": (torch.optim.Adagrad, {"lr": 0.1}),
    "adamax": (torch.optim.Adamax, {"lr": 0.02}),
}


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 3))


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(12, 6, generator=g), torch.randint(0, 3, (12,), generator=g)


def shard(rank, world):
    x, y = batch()
    per = 12 // world
    return x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]


def f32(values):
    """float32 values with the 9 digits that identify them (shorter JSON than float64's repr)."""
    return [float("%.9g" % v) for v in values]


def params_of(net):
    return {n: f32(p.detach().reshape(-1).tolist()) for n, p in net.named_parameters()}


def train(rank, world, make_opt, scheduler=None, closure=False, add_group_at=None):
    """DDP over the model, the optimizer make_opt builds from it, STEPS steps."""
    net = model()
    ddp = DDP(net)
    opt = make_opt(net)
    sched = scheduler(opt) if scheduler else None
    x, y = shard(rank, world)
    out = {"losses": []}
    for step in range(STEPS):
        if add_group_at is not None and step == add_group_at[0]:
            opt.add_param_group(add_group_at[1](net))
        if closure:
            def run():
                opt.zero_grad()
                loss = F.cross_entropy(ddp(x), y)
                loss.backward()
                return loss
            out.setdefault("returned", []).append(opt.step(run).item())
            out["losses"].append(out["returned"][-1])
        else:
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            out["losses"].append(loss.item())
        if sched:
            sched.step()
    out["params"] = params_of(net)
    return out, opt


def zero(name, **kw):
    cls, hyper = OPTIMIZERS[name]
    return lambda net: ZeroRedundancyOptimizer(net.parameters(), optimizer_class=cls, **{**hyper, **kw})


def state_dict(opt, rank):
    """The consolidated state dict on rank 0, tensors as flat lists."""
    opt.consolidate_state_dict(to=0)
    if rank != 0:
        return None
    sd = opt.state_dict()
    state = {str(i): {k: f32(v.reshape(-1).tolist() if v.dim() else [v.item()]) for k, v in s.items()}
             for i, s in sd["state"].items()}
    groups = [{k: v for k, v in g.items() if k != "params"} | {"params": g["params"]} for g in sd["param_groups"]]
    return {"state": state, "param_groups": groups}


def join_run(rank, world):
    """Uneven inputs: rank r trains 3 + r steps on two rows each. The reference is the one PyTorch's
    test_zero_join checks ZeRO against: DDP with a local Adam under ddp.join(), where a rank that ran
    out of inputs contributes zeros to the averages (divided by the initial world size) and every rank
    ends with the last-joining rank's parameters. (Join([ddp, zopt]) alone does not give it: ZeRO's
    join hook steps the joined rank's shard with the gradients of its last own backward, which is why
    test_zero_join sets them by hand first. zeroeng hands the joined rank the averaged gradients.)"""
    net = model()
    ddp = DDP(net)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = batch()
    out = {"losses": []}
    with ddp.join():
        for step in range(3 + rank):
            at = (2 * (rank + step)) % 12
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x[at:at + 2]), y[at:at + 2])
            loss.backward()
            opt.step()
            out["losses"].append(loss.item())
    out["params"] = params_of(net)
    return out


def hook_run(rank, world, state, hook):
    """DDP with a comm hook, plain SGD (lr 0.1, momentum 0.9)."""
    net = model()
    ddp = DDP(net)
    ddp.register_comm_hook(state() if state else None, hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = shard(rank, world)
    out = {"losses": []}
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        out["losses"].append(loss.item())
    out["params"] = params_of(net)
    return out


def scenarios(rank, world):
    res = {}
    # ZeRO over each optimizer class (test_zero_redundancy_optimizer's optimizer_class cases).
    for name in OPTIMIZERS:
        res["zero-" + name], opt = train(rank, world, zero(name))
        if name in ("sgd", "adam"):
            res["zero-" + name]["stateDict"] = state_dict(opt, rank)
    # SGD in two groups, stepped with a closure, the last layer added as a third group after two
    # steps, and the consolidated state: zeroeng runs it with its SGD and with one written in JavaScript.
    res["zero-sgd-mixed"], opt = train(rank, world, lambda net: ZeroRedundancyOptimizer(
        [{"params": list(net.parameters())[:2]}, {"params": list(net.parameters())[2:4], "lr": 0.05, "momentum": 0.5}],
        optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9), closure=True,
        add_group_at=(2, lambda net: {"params": list(net.parameters())[4:], "lr": 0.02}))
    res["zero-sgd-mixed"]["stateDict"] = state_dict(opt, rank)
    # Two parameter groups with their own hyper-parameters.
    res["zero-groups"], _ = train(rank, world, lambda net: ZeroRedundancyOptimizer(
        [{"params": list(net.parameters())[:4]}, {"params": list(net.parameters())[4:], "lr": 0.03, "weight_decay": 0.1}],
        optimizer_class=torch.optim.AdamW, lr=0.01, weight_decay=0.0))
    # add_param_group after two steps: the last layer joins with its own learning rate.
    res["zero-add-group"], _ = train(
        rank, world, lambda net: ZeroRedundancyOptimizer(list(net.parameters())[:4], optimizer_class=torch.optim.AdamW, lr=0.01),
        add_group_at=(2, lambda net: {"params": list(net.parameters())[4:], "lr": 0.02}))
    # A scheduler acting on ZeRO's param groups.
    res["zero-scheduler"], _ = train(rank, world, zero("adam", lr=0.05),
                                     scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5))
    # step(closure): the closure runs once per step, its loss is returned.
    res["zero-closure"], _ = train(rank, world, zero("adam"), closure=True)
    res["join"] = join_run(rank, world)
    # DDP comm hooks.
    res["hook-allreduce"] = hook_run(rank, world, None, default_hooks.allreduce_hook)
    res["hook-fp16"] = hook_run(rank, world, None, default_hooks.fp16_compress_hook)
    res["hook-powersgd"] = hook_run(rank, world, lambda: powerSGD_hook.PowerSGDState(
        process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2, min_compression_rate=0.5,
        use_error_feedback=True, warm_start=True, random_seed=0), powerSGD_hook.powerSGD_hook)
    return res


def run(rank, world, port, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    res = scenarios(rank, world)
    gathered = [None] * world
    dist.all_gather_object(gathered, res)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({name: [g[name] for g in gathered] for name in res}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    fixtures = {}
    net, (x, y) = model(), batch()
    fixtures["init"] = params_of(net)
    fixtures["x"], fixtures["y"] = f32(x.reshape(-1).tolist()), y.tolist()
    for world in WORLDS:
        tmp = os.path.join(here, f".world{world}.json")
        mp.spawn(run, args=(world, 29670 + world, tmp), nprocs=world, join=True)
        with open(tmp) as f:
            fixtures[str(world)] = json.load(f)
        os.remove(tmp)
    with open(os.path.join(here, "fixtures.json"), "w") as f:
        json.dump(fixtures, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.join(here, "fixtures.json"))
