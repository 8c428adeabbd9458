"""PyTorch's twin of samples/resnet.js (bench/sidebyside.sh resnet): the same residual network, synthetic
images, SGD and batch; prints the same JSON line (the median step time after 3 warm-up steps).

    /usr/bin/python3 bench/torch_resnet.py [STEPS] [BATCH] [WIDTH]

TORCH_THREADS=N sets torch.set_num_threads(N).
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_c, out_c, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_c, out_c, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_c)
        self.conv2 = nn.Conv2d(out_c, out_c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_c)
        self.downsample = (nn.Sequential(nn.Conv2d(in_c, out_c, 1, stride=stride, bias=False), nn.BatchNorm2d(out_c))
                           if stride != 1 or in_c != out_c else None)

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = nn.Sequential(BasicBlock(width, width, 1), BasicBlock(width, width, 1))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width, 1))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        return self.fc(self.pool(self.layer2(self.layer1(self.stem(x)))).flatten(1))


def images(n, classes=4):
    y = torch.randint(0, classes, (n,))
    mask = torch.zeros(classes, 1, 32, 32)
    for c in range(classes):
        r, k = (2 if c < 2 else 18), (2 if c % 2 == 0 else 18)
        mask[c, :, r:r + 12, k:k + 12] = 2
    return torch.randn(n, 3, 32, 32) + mask[y], y


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    width = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    if os.environ.get("TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
    torch.manual_seed(0)
    model = ResNet(width, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    step_ms = []
    loss = float("nan")
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        x, y = images(batch)
        opt.zero_grad()
        l = F.cross_entropy(model(x), y)
        l.backward()
        opt.step()
        loss = l.item()
        if step > 3:
            step_ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"workload": "resnet", "ranks": 1, "batch": batch, "steps": steps, "loss": round(loss, 4),
                      "step_ms_median": round(statistics.median(step_ms), 1), "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
