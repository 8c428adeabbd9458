"""PyTorch's side of bench/cnn.js (bench/sidebyside.sh cnn): the same CNN, batch, optimizer and timings.

    /usr/bin/python3 bench/torch_cnn.py [STEPS]

TORCH_THREADS=N sets torch.set_num_threads(N). Prints one JSON line.
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_model():
    """The CNN of bench/cnn.js (and of bench/torch_ranks.py)."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    if os.environ.get("TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))
    step_ms = []
    for i in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= 3:
            step_ms.append((time.perf_counter() - t0) * 1e3)
    model.eval()
    eval_x = torch.rand(1000, 1, 28, 28)
    eval_ms = []
    for _ in range(3):
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(10):
                model(eval_x).argmax(1)
        eval_ms.append((time.perf_counter() - t0) * 1e3)
    model.train()
    # Each layer in groups of RUNS runs (bench/cnn.js times with a millisecond clock).
    RUNS = 20
    layers = {}
    inp = x
    names = ["conv1", "bn1", "relu1", "pool1", "conv2", "bn2", "relu2", "pool2"]
    for i, name in enumerate(names):
        layer = model[i]
        a = inp.detach().requires_grad_(True)
        ms = []
        for g in range(6):
            t0 = time.perf_counter()
            for _ in range(RUNS):
                layer(a).sum().backward()
                a.grad = None
            if g > 0:
                ms.append((time.perf_counter() - t0) * 1e3 / RUNS)
        layers[name] = round(statistics.median(ms), 2)
        with torch.no_grad():
            inp = layer(inp)
    print(json.dumps({"workload": "cnn", "step_ms": round(statistics.median(step_ms), 2),
                      "eval_ms": round(statistics.median(eval_ms), 1), "layers_ms": layers,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
