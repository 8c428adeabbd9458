"""Fixtures for engine/nn (run with Debian's /usr/bin/python3, PyTorch 1.13):
the MLP of the README built right after torch.manual_seed(0), its state dict, a batch drawn
from the same generator, the logits, the cross-entropy loss and every parameter's gradient;
and the default initialisation of Embedding (with padding_idx) and LayerNorm; a dropout draw."""
import json, os, sys
import torch, torch.nn as nn, torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tools/torchfix"))
from torchfix import write_safetensors  # noqa: E402


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
out = {f"model/{k}": v for k, v in model.state_dict().items()}
x = torch.randn(8, 16)
y = torch.randint(0, 4, (8,))
logits = model(x)
loss = F.cross_entropy(logits, y)
loss.backward()
out.update({"x": x, "y": y, "logits": logits, "loss": loss.reshape(1)})
out.update({f"grad/{k}": p.grad for k, p in model.named_parameters()})

torch.manual_seed(7)
emb = nn.Embedding(10, 8, padding_idx=2)
ln = nn.LayerNorm([3, 4])
out.update({"embedding/weight": emb.weight, "layernorm/weight": ln.weight, "layernorm/bias": ln.bias})
torch.manual_seed(3)
xd = torch.randn(64, requires_grad=True)
yd = F.dropout(xd, 0.3, training=True)
yd.sum().backward()
out.update({"dropout/x": xd, "dropout/y": yd, "dropout/grad": xd.grad})
write_safetensors("nn.safetensors", out, {"model": repr(model), "names": json.dumps(list(model.state_dict().keys()))})
