"""PyTorch 1.13 reference orders for data.DataLoader and data.DistributedSampler (script/dataloader.go).

Each loader case builds a TensorDataset from the listed tensors, seeds the default generator with
torch.manual_seed, makes a DataLoader with the options (in the script's camelCase; "seed" stands for
generator=torch.Generator().manual_seed(seed), "sampler" for a DistributedSampler with those options)
and runs its epochs: an epoch takes "take" batches from a new iterator and abandons it (a break in the
loop; take 0 makes the iterator and takes nothing), or all of them; "setEpoch" is sampler.set_epoch
before the epoch. It records every batch, len(loader) and torch.randint(0, 2**31, (4,)) after the last
epoch, which shows how many numbers the loader took from the default generator (each iter() takes one
for the workers' base seed, and a shuffled epoch without a generator another for its permutation's
seed). Sampler cases list DistributedSampler's indices for several epochs. The collate case is a
dataset of (tensor, int, float, {bool, str}) items, batched by default_collate, with each batch's dtypes.

    /usr/bin/python3 gen.py        # writes dataloader.json beside this file (deterministic)

torch.randperm in 1.13 draws the same Fisher-Yates shuffle for every n (checked here for n = 100000; the
engine's randperm fixtures in engine/rand cover it too), unlike later versions, which switch algorithms
above 2**32 / 20 elements.
"""
import json
import os

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset


def flat(batch):
    return [t.tolist() for t in batch]


def loader_case(name, manual_seed, tensors, options, epochs, sampler=None):
    torch.manual_seed(manual_seed)
    ds = TensorDataset(*tensors)
    kwargs = dict(batch_size=options.get("batchSize", 1), shuffle=options.get("shuffle", False),
                  drop_last=options.get("dropLast", False))
    if "seed" in options:
        kwargs["generator"] = torch.Generator().manual_seed(options["seed"])
    s = None
    if sampler is not None:
        s = DistributedSampler(ds, num_replicas=sampler["numReplicas"], rank=sampler["rank"],
                               shuffle=sampler.get("shuffle", True), seed=sampler.get("seed", 0),
                               drop_last=sampler.get("dropLast", False))
        kwargs["sampler"] = s
    loader = DataLoader(ds, **kwargs)
    out = []
    for ep in epochs:
        if "setEpoch" in ep:
            s.set_epoch(ep["setEpoch"])
        it = iter(loader)
        batches = []
        while ep.get("take") is None or len(batches) < ep["take"]:
            try:
                batches.append(flat(next(it)))
            except StopIteration:
                break
        out.append(dict(ep, batches=batches))
    return {"name": name, "manualSeed": manual_seed,
            "tensors": [{"values": t.tolist(), "dtype": str(t.dtype).replace("torch.", "")} for t in tensors],
            "options": options, "sampler": sampler, "epochs": out, "length": len(loader),
            "after": torch.randint(0, 2**31, (4,)).tolist()}


def arange(n):
    return [torch.arange(n)]


loaders = []
for s in [0, 1, 42, 12345]:
    for n, b in [(1, 1), (5, 2), (10, 3), (10, 5), (37, 4), (64, 64)]:
        for drop in [False, True]:
            loaders.append(loader_case(f"shuffle seed {s} n {n} batch {b} dropLast {drop}", s, arange(n),
                                       {"batchSize": b, "shuffle": True, "dropLast": drop}, [{}, {}, {}]))
for s, drop in [(0, False), (12345, True)]:
    loaders.append(loader_case(f"shuffle seed {s} n 1000 batch 64 dropLast {drop}", s, arange(1000),
                               {"batchSize": 64, "shuffle": True, "dropLast": drop}, [{}, {}]))
loaders.append(loader_case("shuffle default batch size", 3, arange(6), {"shuffle": True}, [{}, {}]))
loaders.append(loader_case("shuffle abandoned epochs", 7, arange(23),
                           {"batchSize": 4, "shuffle": True}, [{"take": 2}, {}, {"take": 0}, {"take": 6}, {}]))
loaders.append(loader_case("sequential", 5, arange(11), {"batchSize": 4}, [{}, {"take": 1}, {}]))
loaders.append(loader_case("sequential dropLast", 5, arange(11), {"batchSize": 4, "dropLast": True}, [{}, {}]))
loaders.append(loader_case("sequential empty dataset", 5, arange(0), {"batchSize": 4}, [{}, {}]))
for g in [0, 9]:
    for n, b, drop in [(10, 3, False), (12, 4, False), (12, 5, True), (1, 1, False)]:
        loaders.append(loader_case(f"generator {g} n {n} batch {b} dropLast {drop}", 2, arange(n),
                                   {"batchSize": b, "shuffle": True, "dropLast": drop, "seed": g},
                                   [{}, {}, {}]))
loaders.append(loader_case("generator abandoned epochs", 2, arange(13),
                           {"batchSize": 3, "shuffle": True, "seed": 4}, [{"take": 1}, {}, {"take": 5}, {}, {}]))
loaders.append(loader_case("generator epochs taken to their last batch", 2, arange(12),
                           {"batchSize": 4, "shuffle": True, "seed": 4}, [{"take": 3}, {}, {"take": 3}, {}]))
loaders.append(loader_case("generator sequential", 2, arange(5), {"batchSize": 2, "seed": 4}, [{}, {}]))
torch.manual_seed(100)
pairs = [torch.randn(9, 3, dtype=torch.float64), torch.randint(0, 5, (9,)), torch.rand(9, 2, 2)]
loaders.append(loader_case("three tensors", 8, pairs, {"batchSize": 4, "shuffle": True}, [{}, {}]))
for nr, rank in [(2, 0), (2, 1), (3, 2)]:
    for drop in [False, True]:
        loaders.append(loader_case(f"distributed {nr} rank {rank} dropLast {drop}", 6, arange(17),
                                   {"batchSize": 3, "dropLast": drop},
                                   [{"setEpoch": 0}, {"setEpoch": 1}, {"setEpoch": 2, "take": 1}, {}],
                                   sampler={"numReplicas": nr, "rank": rank, "seed": 3, "dropLast": drop}))
loaders.append(loader_case("distributed unshuffled", 6, arange(10), {"batchSize": 4},
                           [{}, {"setEpoch": 5}], sampler={"numReplicas": 4, "rank": 3, "shuffle": False}))
loaders.append(loader_case("distributed with generator", 6, arange(10), {"batchSize": 2, "seed": 1},
                           [{}, {"setEpoch": 1}], sampler={"numReplicas": 2, "rank": 0}))

samplers = []
for n in [0, 1, 2, 5, 10, 11, 17]:
    for nr in [1, 2, 3, 4]:
        for rank in sorted({0, nr - 1}):
            for shuffle in [True, False]:
                for drop in [False, True]:
                    for seed in ([0, 7] if shuffle else [0]):
                        ds = TensorDataset(torch.arange(n))
                        s = DistributedSampler(ds, num_replicas=nr, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop)
                        eps = []
                        for e in [0, 1, 4]:
                            s.set_epoch(e)
                            eps.append({"epoch": e, "indices": list(s)})
                        samplers.append({"n": n, "options": {"numReplicas": nr, "rank": rank, "shuffle": shuffle,
                                                             "seed": seed, "dropLast": drop},
                                         "length": len(s), "numSamples": s.num_samples, "totalSize": s.total_size,
                                         "epochs": eps})


class Items(Dataset):
    """Item i is (tensor([i, -i]), i, i / 4, {"flag": i % 2 == 0, "name": "s<i>"})."""

    def __len__(self):
        return 7

    def __getitem__(self, i):
        return torch.tensor([float(i), -float(i)]), i, i / 4, {"flag": i % 2 == 0, "name": f"s{i}"}


def describe(v):
    if isinstance(v, torch.Tensor):
        return {"values": v.tolist(), "dtype": str(v.dtype).replace("torch.", "")}
    if isinstance(v, dict):
        return {k: describe(x) for k, x in v.items()}
    if isinstance(v, list) and v and isinstance(v[0], str):
        return v
    return [describe(x) for x in v]


torch.manual_seed(4)
collate = [describe(b) for b in DataLoader(Items(), batch_size=3, shuffle=True)]

big = torch.randperm(100000, generator=torch.Generator().manual_seed(77))
randperm = {"n": 100000, "seed": 77, "head": big[:20].tolist(), "tail": big[-20:].tolist(),
            "weightedSum": int((big * torch.arange(100000)).sum())}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dataloader.json")
with open(out, "w") as f:
    json.dump({"torch": torch.__version__, "loaders": loaders, "samplers": samplers, "collate": collate,
               "randperm": randperm}, f, separators=(",", ":"))
print(f"{out}: {len(loaders)} loaders, {len(samplers)} samplers, {os.path.getsize(out)} bytes")
