"""PyTorch 1.13 reference run of samples/llama.js's "tiny" model: the same LLaMA-style decoder
(Hugging Face's LlamaForCausalLM: pre-RMSNorm, rotate-half rotary embeddings, grouped-query causal
attention, SwiGLU, no biases, untied output), trained for a few steps with the same AdamW, weight
decay groups, warm-up cosine schedule and gradient clipping as llama.js, on windows read in file order.

    /usr/bin/python3 samples/testdata/llama/gen.py    # deterministic; writes beside this file:

  init.safetensors  the model's initial float32 weights, under llama.js's (Hugging Face's) names
  tokens.npy        the token stream (int32); window w is tokens[w*T : w*T+T+1], step s trains on
                    windows [s*G, (s+1)*G) of G = the global batch, as llama.js --no-shuffle reads them
  expected.json     llama.js's arguments for this run, the global batch, and each step's loss and
                    gradient norm (before clipping)

cmd/zeroeng/llama_test.go runs llama.js on these and compares its losses and gradient norms.

The rotary tables are computed in float64 and rounded to float32, as llama.js computes them with
JavaScript's Math.cos and Math.sin (Hugging Face computes the angles in float32).
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

# samples/llama.js's "tiny" configuration: hidden = 32·⌈⌊2·4·64/3⌋/32⌉ = 192.
DIM, N_LAYER, N_HEAD, N_KV_HEAD, HIDDEN, VOCAB, MAX_SEQ = 64, 2, 4, 2, 192, 256, 64
NORM_EPS, ROPE_THETA = 1e-5, 10000.0
# The run: llama.js's defaults for betas, eps, weight decay, clipping and the schedule's floor.
STEPS, GLOBAL_BATCH, SEQ_LEN, LR, WARMUP = 5, 4, 32, 3e-3, 2
BETAS, ADAM_EPS, WEIGHT_DECAY, CLIP, MIN_LR_RATIO = (0.9, 0.95), 1e-8, 0.1, 1.0, 0.1


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_tables(positions, head_dim, theta):
    """cos and sin [positions, head_dim] of t·θ^(−2i/head_dim), each half of a head alike."""
    half = head_dim // 2
    inv_freq = torch.tensor([1.0 / math.pow(theta, 2 * i / head_dim) for i in range(half)], dtype=torch.float64)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        hd = DIM // N_HEAD
        self.q_proj = nn.Linear(DIM, N_HEAD * hd, bias=False)
        self.k_proj = nn.Linear(DIM, N_KV_HEAD * hd, bias=False)
        self.v_proj = nn.Linear(DIM, N_KV_HEAD * hd, bias=False)
        self.o_proj = nn.Linear(N_HEAD * hd, DIM, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        hd = c // N_HEAD
        q = self.q_proj(x).view(b, t, N_HEAD, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, N_KV_HEAD, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, N_KV_HEAD, hd).transpose(1, 2)
        cos, sin = cos[:t], sin[:t]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = N_HEAD // N_KV_HEAD  # Hugging Face's repeat_kv
        k = k[:, :, None].expand(b, N_KV_HEAD, rep, t, hd).reshape(b, N_HEAD, t, hd)
        v = v[:, :, None].expand(b, N_KV_HEAD, rep, t, hd).reshape(b, N_HEAD, t, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        y = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.up_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.down_proj = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attention()
        self.mlp = MLP()
        self.input_layernorm = RMSNorm(DIM, NORM_EPS)
        self.post_attention_layernorm = RMSNorm(DIM, NORM_EPS)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(N_LAYER))
        self.norm = RMSNorm(DIM, NORM_EPS)


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = LlamaModel()
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.cos, self.sin = rope_tables(MAX_SEQ, DIM // N_HEAD, ROPE_THETA)
        for p in self.parameters():
            if p.ndim == 2:
                nn.init.normal_(p, 0, 0.02)

    def forward(self, idx):
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, self.cos, self.sin)
        return self.lm_head(self.model.norm(x))


def save_safetensors(path, tensors):
    """The safetensors format: a little-endian u64 header size, the JSON header (padded with spaces
    to a multiple of 8 bytes), then the tensors' bytes back to back in the header's order."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        b = tensors[name].detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def warmup_cosine(step):
    """engine/optim.WarmupCosine's factor (llama.js's schedule) for LambdaLR."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = min(1.0, (step - WARMUP) / (STEPS - WARMUP)) if STEPS > WARMUP else 1.0
    return MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * progress))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Llama()
    save_safetensors(os.path.join(HERE, "init.safetensors"), model.state_dict())

    # A random walk of steps 1 to 3 around the vocabulary: a pattern the model starts to learn within
    # the few steps, so that the losses test the updates, not only the first forward.
    walk = torch.randint(1, 4, (STEPS * GLOBAL_BATCH * SEQ_LEN + 1,))
    tokens = (walk.cumsum(0) % VOCAB).to(torch.int32)
    np.save(os.path.join(HERE, "tokens.npy"), tokens.numpy())
    windows = torch.stack([tokens[w * SEQ_LEN: w * SEQ_LEN + SEQ_LEN + 1] for w in range(STEPS * GLOBAL_BATCH)]).long()

    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=ADAM_EPS)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
    losses, grad_norms = [], []
    for s in range(STEPS):
        batch = windows[s * GLOBAL_BATCH: (s + 1) * GLOBAL_BATCH]
        x, y = batch[:, :-1], batch[:, 1:]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        grad_norms.append(torch.nn.utils.clip_grad_norm_(params, CLIP).item())
        opt.step()
        sched.step()
        losses.append(loss.item())

    args = ["--config", "tiny", "--no-shuffle", "--steps", str(STEPS), "--seq-len", str(SEQ_LEN), "--lr", str(LR),
            "--warmup", str(WARMUP), "--weight-decay", str(WEIGHT_DECAY), "--clip", str(CLIP),
            "--min-lr-ratio", str(MIN_LR_RATIO)]
    out = os.path.join(HERE, "expected.json")
    with open(out, "w") as f:
        json.dump({"torch": torch.__version__, "args": args, "globalBatch": GLOBAL_BATCH,
                   "parameters": sum(p.numel() for p in params), "losses": losses, "gradNorms": grad_norms}, f, indent=1)
        f.write("\n")
    print(f"{out}: losses {losses}")


if __name__ == "__main__":
    main()
