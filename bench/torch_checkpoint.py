"""The checkpoint benchmark, PyTorch's side (bench/checkpoint.js is zeroeng's): the parameters of
GPT-2 124M with AdamW's state after one step, saved with torch.save({"model", "optimizer", "step"})
and loaded with torch.load + load_state_dict three times each, as nanoGPT does; prints the medians
as one JSON line, with the bandwidths (GB/s of the 1.49 GB of tensors). fsync: whether the file is
synced before the time is taken (torch.save does not sync; with --fsync this script does, as
zeroeng's save always does). With --load, it only loads DIR's ckpt.pt once into a new model and
AdamW (a resume), for a load from a cold cache (docs/benchmarks.md).

    /usr/bin/python3 bench/torch_checkpoint.py DIR [--fsync | --load]
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

d, layers = 768, 12


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.c_attn, self.attn.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(50257, d)
        self.transformer.wpe = nn.Embedding(1024, d)
        self.transformer.h = nn.ModuleList(Block() for _ in range(layers))
        self.transformer.ln_f = nn.LayerNorm(d)


def main():
    path = os.path.join(sys.argv[1], "ckpt.pt")
    sync = "--fsync" in sys.argv
    os.makedirs(sys.argv[1], exist_ok=True)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4)
    n = sum(p.numel() for p in model.parameters())
    if "--load" in sys.argv:
        t = time.perf_counter()
        ck = torch.load(path, map_location="cpu")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        s = time.perf_counter() - t
        print(json.dumps({"workload": "checkpoint-load", "params": n, "load_ms": round(s * 1e3), "load_gbs": round(n * 12 / s / 1e9, 2)}))
        return
    sum(p.sum() for p in model.parameters()).backward()
    opt.step()
    save, load = [], []
    for _ in range(3):
        t = time.perf_counter()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1}, path)
        if sync:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        save.append(time.perf_counter() - t)
        t = time.perf_counter()
        ck = torch.load(path, map_location="cpu")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        load.append(time.perf_counter() - t)
    print(json.dumps({"workload": "checkpoint", "params": n, "save_ms_median": round(statistics.median(save) * 1e3),
                      "load_ms_median": round(statistics.median(load) * 1e3),
                      "save_gbs": round(n * 12 / statistics.median(save) / 1e9, 2),
                      "load_gbs": round(n * 12 / statistics.median(load) / 1e9, 2), "fsync": sync}))


if __name__ == "__main__":
    main()
