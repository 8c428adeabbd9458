"""PyTorch CUDA side of the GPU benchmarks (tools/gpucheck/run.sh runs it beside `zeroeng bench cuda-*`).

  python3 torch_gpu.py cuda-gemm-fp32   # 8192^3 float32 matmul, TF32 off (PyTorch's default)
  python3 torch_gpu.py cuda-gemm-tf32   # the same with torch.backends.cuda.matmul.allow_tf32
  python3 torch_gpu.py cuda-gemm-bf16   # bfloat16 inputs and output, float32 accumulation
  python3 torch_gpu.py cuda-mlp         # the mlp workload of torch_cpu.py on the GPU, eager
  python3 torch_gpu.py cuda-gpt2        # GPT-2 124M train step, B x T = 8 x 1024, bf16 autocast, eager
  python3 torch_gpu.py cuda-gemm-bf16 cuda-gpt2   # several in one process (CUDA starts once)
Prints one JSON line a workload, with the same fields as zeroeng's.
"""
import json, statistics, sys, time
import torch, torch.nn as nn

STEPS, WARM = 20, 3


def gemm(dtype, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ts = []
    for _ in range(25):
        torch.cuda.synchronize()
        t = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return round(2 * n ** 3 / statistics.median(ts[5:]) / 1e12, 1)


def timed(step):
    """WARM untimed steps, then the median and minimum of STEPS timed ones, in ms (step synchronises)."""
    for _ in range(WARM): step()
    ts = []
    for _ in range(STEPS):
        t = time.perf_counter(); step(); ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts), min(ts)


def mlp():
    m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    x = torch.randn(256, 1024, device="cuda"); y = torch.randn(256, 1024, device="cuda")

    def step():
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        torch.cuda.synchronize()
    return timed(step)


class Block(nn.Module):
    """nanoGPT's block, as samples/gpt.js writes it: pre-LayerNorm, fused causal attention, tanh GELU."""

    def __init__(s, d, h):
        super().__init__(); s.h = h
        s.ln_1 = nn.LayerNorm(d); s.c_attn = nn.Linear(d, 3 * d); s.attn_proj = nn.Linear(d, d)
        s.ln_2 = nn.LayerNorm(d); s.c_fc = nn.Linear(d, 4 * d); s.mlp_proj = nn.Linear(4 * d, d)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, dim=2)
        q, k, v = [t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v)]
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + s.mlp_proj(nn.functional.gelu(s.c_fc(s.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, V=50257, T=1024, d=768, L=12, h=12):
        super().__init__()
        s.wte = nn.Embedding(V, d); s.wpe = nn.Embedding(T, d)
        s.h = nn.ModuleList([Block(d, h) for _ in range(L)]); s.ln_f = nn.LayerNorm(d)

    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.h: x = b(x)
        return s.ln_f(x) @ s.wte.weight.T


def gpt2(B=8, T=1024, V=50257):
    """samples/gpt.js --config gpt2 --dtype bfloat16 --bench: AdamW (lr 6e-4, betas 0.9/0.95, weight
    decay 0.1 on matrices only), clipping at 1.0, random tokens. PyTorch eager's bf16 mixed precision
    is autocast over float32 parameters; zeroeng keeps bf16 parameters and float32 master weights."""
    torch.manual_seed(0)
    m = GPT(V, T).cuda()
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    idx = torch.randint(0, V, (B, T), device="cuda"); tgt = torch.randint(0, V, (B, T), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(m(idx).view(-1, V).float(), tgt.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
    return (*timed(step), B * T)


def run(w):
    dev = torch.cuda.get_device_name(0)
    if w.startswith("cuda-gemm-"):
        dtype = torch.bfloat16 if w.endswith("bf16") else torch.float32
        return {"workload": w, "device": dev, "torch": torch.__version__, "tflops": gemm(dtype, w.endswith("tf32"))}
    if w == "cuda-mlp":
        med, mn = mlp()
        return {"workload": w, "device": dev, "torch": torch.__version__, "step_ms_median": round(med, 3),
                "step_ms_min": round(mn, 3), "samples_per_s": round(256 / med * 1e3, 1)}
    if w == "cuda-gpt2":
        med, mn, tokens = gpt2()
        return {"workload": "gpt", "config": "gpt2", "dtype": "bfloat16", "device": dev, "torch": torch.__version__,
                "step_ms_median": round(med, 3), "step_ms_min": round(mn, 3), "tokens_per_s": round(tokens / med * 1e3)}
    sys.exit("unknown workload " + w)


def main():
    # Several workloads run in one process, so that CUDA's start-up is paid once a round.
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for w in sys.argv[1:]:
        print(json.dumps(run(w)), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
