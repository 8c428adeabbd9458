"""The PyTorch side of the Fashion-MNIST benchmark (bench/sidebyside.sh fmnist), the job of
samples/fashion_mnist.js and `zeroeng bench fmnist`: an MLP 784-256-128-10 with ReLU, Adam (lr 1e-3),
batch 128, the training images scaled to [0, 1] and reshuffled every epoch (torch.randperm),
seed 0, on Debian's dataset-fashion-mnist.

    /usr/bin/python3 bench/torch_fmnist.py [EPOCHS]     # default 5

TORCH_THREADS=N sets torch.set_num_threads(N); ZEROENG_FMNIST_DIR moves the dataset. Prints one JSON
line: the test accuracy and the seconds the training steps took.
"""
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = os.environ.get("ZEROENG_FMNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(name, header):
    with gzip.open(os.path.join(DATA, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=header)


def images(name):
    return torch.tensor(read_idx(name, 16).reshape(-1, 784), dtype=torch.float32) / 255


def labels(name):
    return torch.tensor(read_idx(name, 8), dtype=torch.int64)


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if os.environ.get("TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
    x_train, y_train = images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz")
    x_test, y_test = images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    t0 = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(len(x_train))
        for start in range(0, len(x_train), 128):
            batch = order[start:start + 128]
            opt.zero_grad()
            F.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
            opt.step()
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(json.dumps({"workload": "fashion_mnist_mlp", "epochs": epochs, "test_acc": round(accuracy, 4),
                      "train_s": round(train_s, 2), "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
