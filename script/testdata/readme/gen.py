"""Fixtures for the host-API conformance script (script/testdata/readme/train.js, the issue's
listing): PyTorch 1.13 runs the same training loop from the same init.safetensors, x.npy and y.npy,
and records every loss and the final state dict. Run with /usr/bin/python3 in this directory."""
import json, os, sys
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tools/torchfix"))
from torchfix import write_safetensors  # noqa: E402

torch.manual_seed(11)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
write_safetensors("init.safetensors", dict(model.state_dict()), {"format": "pt"})
x = torch.randn(12, 16)
y = torch.randint(0, 4, (12,))
np.save("x.npy", x.numpy())
np.save("y.npy", y.numpy())
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
losses = []
for s in range(x.shape[0]):
    opt.zero_grad()
    loss = F.cross_entropy(model(x[s]), y[s])
    loss.backward()
    opt.step()
    losses.append(loss.item())
write_safetensors("expected_final.safetensors", dict(model.state_dict()), {"losses": json.dumps(losses)})
