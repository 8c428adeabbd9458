"""PyTorch CUDA side of the GPU benchmarks (tools/gpucheck/run.sh runs it beside `zeroeng bench cuda-*`).

  python3 torch_gpu.py cuda-gemm-fp32   # 8192^3 float32 matmul, TF32 off (PyTorch's default)
  python3 torch_gpu.py cuda-gemm-tf32   # the same with torch.backends.cuda.matmul.allow_tf32
  python3 torch_gpu.py cuda-gemm-bf16   # bfloat16 inputs and output, float32 accumulation
  python3 torch_gpu.py cuda-mlp         # the mlp workload of torch_cpu.py on the GPU, eager
Prints one JSON line, with the same fields as zeroeng's.
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


def mlp():
    m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    x = torch.randn(256, 1024, device="cuda"); y = torch.randn(256, 1024, device="cuda")

    def step():
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        torch.cuda.synchronize()
    for _ in range(WARM): step()
    ts = []
    for _ in range(STEPS):
        t = time.perf_counter(); step(); ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts), min(ts)


def main():
    w = sys.argv[1]
    dev = torch.cuda.get_device_name(0)
    if w.startswith("cuda-gemm-"):
        dtype = torch.bfloat16 if w.endswith("bf16") else torch.float32
        print(json.dumps({"workload": w, "device": dev, "torch": torch.__version__, "tflops": gemm(dtype, w.endswith("tf32"))}))
    elif w == "cuda-mlp":
        med, mn = mlp()
        print(json.dumps({"workload": w, "device": dev, "torch": torch.__version__, "step_ms_median": round(med, 3),
                          "step_ms_min": round(mn, 3), "samples_per_s": round(256 / med * 1e3, 1)}))
    else:
        sys.exit("unknown workload " + w)


if __name__ == "__main__":
    main()
