"""The PyTorch side of `zeroeng run samples/llama.js -- --config bench --bench`: the same LLaMA-style
decoder (Hugging Face's LlamaForCausalLM: pre-RMSNorm, rotate-half rotary embeddings, grouped-query
causal attention, SwiGLU, no biases, untied output), the same step (AdamW with llama.js's betas, eps,
weight decay groups and gradient clipping, on random tokens) and the same timing as bench/torch_cpu.py
(3 warm-up steps, then the median of 20).

    /usr/bin/python3 bench/torch_llama.py            # config "bench": 4 layers, d=256, 8 heads, 4 key/value
                                                     # heads, MLP 768, T=128, B=8, vocab 512
    /usr/bin/python3 bench/torch_llama.py tiny       # or llama.js's "tiny" (2 layers, d=64, T=64)

TORCH_THREADS=N sets torch.set_num_threads(N). Prints one JSON line, named as llama.js's result.
PyTorch 1.13 has no fused scaled_dot_product_attention: attention is the explicit softmax(QKᵀ/√d)V.
"""
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

WARMUP, TIMED = 3, 20

# samples/llama.js's configurations (hidden: 2/3 of 4·dim rounded up to a multiple of multiple_of).
CONFIGS = {
    "tiny": dict(layers=2, heads=4, kv_heads=2, dim=64, multiple_of=32, ctx=64, vocab=256, batch=8),
    "bench": dict(layers=4, heads=8, kv_heads=4, dim=256, multiple_of=256, ctx=128, vocab=512, batch=8),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Block(nn.Module):
    """Pre-RMSNorm decoder layer: grouped-query causal attention with rotary embeddings, SwiGLU MLP."""

    def __init__(self, dim, heads, kv_heads, hidden):
        super().__init__()
        hd = dim // heads
        self.heads, self.kv_heads = heads, kv_heads
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(dim), RMSNorm(dim)
        self.q_proj, self.o_proj = nn.Linear(dim, heads * hd, bias=False), nn.Linear(heads * hd, dim, bias=False)
        self.k_proj, self.v_proj = nn.Linear(dim, kv_heads * hd, bias=False), nn.Linear(dim, kv_heads * hd, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin, causal):
        b, t, c = x.shape
        hd, rep = c // self.heads, self.heads // self.kv_heads
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k[:, :, None].expand(b, self.kv_heads, rep, t, hd).reshape(b, self.heads, t, hd)
        v = v[:, :, None].expand(b, self.kv_heads, rep, t, hd).reshape(b, self.heads, t, hd)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        y = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, c))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, layers, heads, kv_heads, dim, multiple_of, ctx, vocab, **_):
        super().__init__()
        hidden = multiple_of * -(-(8 * dim // 3) // multiple_of)
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm, self.lm_head = RMSNorm(dim), nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        angles = torch.arange(ctx, dtype=torch.float64)[:, None] * inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        self.cos, self.sin = angles.cos().float(), angles.sin().float()
        for p in self.parameters():
            if p.ndim == 2:
                nn.init.normal_(p, 0, 0.02)

    def forward(self, idx):
        t = idx.shape[1]
        cos, sin, causal = self.cos[:t], self.sin[:t], torch.ones(t, t, dtype=torch.bool).tril()
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, cos, sin, causal)
        return self.lm_head(self.norm(x))


def main(name):
    c = CONFIGS[name]
    torch.manual_seed(0)
    model = Llama(**c)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    b, t, v = c["batch"], c["ctx"], c["vocab"]
    idx, target = torch.randint(0, v, (b, t)), torch.randint(0, v, (b, t))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(idx).view(-1, v), target.view(-1)).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    for _ in range(WARMUP):
        step()
    times = []
    for _ in range(TIMED):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    return {"workload": "llama", "config": name, "threads": torch.get_num_threads(),
            "parameters": sum(p.numel() for p in params), "step_ms_median": round(ms, 2),
            "tokens_per_s": round(b * t * 1e3 / ms, 1)}


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1] not in CONFIGS):
        sys.exit(__doc__)
    if os.environ.get("TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
    print(json.dumps(main(sys.argv[1] if len(sys.argv) == 2 else "bench")))
