#!/usr/bin/env bash
# GPU validation: runs on a machine with an NVIDIA GPU, from the folder that `make gpu-check`
# fills (build/gpu-check). It needs no Go, only the NVIDIA driver and, for the side-by-side
# numbers, PyTorch with CUDA. docs/gpu-validation.md says what to run and records what it showed.
#
#   build/gpu-check/run.sh bringup     # the GPU works: info --smoke, kernels, conformance, NCCL, launch, Fashion-MNIST, GPT-2
#   build/gpu-check/run.sh bench       # side by side with PyTorch: GEMMs, the mlp step, GPT-2 124M bf16
#   build/gpu-check/run.sh STEP...     # chosen steps (the names below)
#
# Everything is bounded: each step runs under `timeout` with its own limit, and the whole run under
# DEADLINE seconds (default 270): a step that no longer fits is reported SKIPPED (no time), so a hang
# never costs more than its step. What comes back is two files in OUT ($OUT, else ./gpu-check-out):
# summary.txt, one line a step, written as each step ends, and logs.tgz, every step's log, re-packed
# after every step; a lease that ends mid-run still returns what had finished.
#
# ZEROENG_REQUIRE_GPU=1 is set for every step: a test or command that would skip for want of a GPU
# or an NVIDIA library fails instead, so a summary never shows a pass that ran nothing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
logs=$scratch/logs
mkdir -p "$logs"
cd "$here"

case "${1:-bringup}" in
bringup) steps="env info kernels conformance nccl launch fmnist gpt2" ;;
bench) steps="env kernels bench-gemm bench-gpt2" ;;
*) steps="$*" ;;
esac
# An absolute time, so that the functions that steps run in a child bash see the same deadline.
export deadline=$(($(date +%s) + ${DEADLINE:-270}))
export PY=${PYTHON:-python3} scratch
export ZEROENG_REQUIRE_GPU=1
# The kernels compiled by one step serve the next ones (a cache folder outside the logs).
export ZEROENG_KERNEL_CACHE=${ZEROENG_KERNEL_CACHE:-$scratch/kernel-cache}
: >"$out/summary.txt"

summary() { printf '%-22s %s\n' "$1" "$2" | tee -a "$out/summary.txt"; }
pack() { tar -czf "$out/logs.tgz.tmp" -C "$logs" . && mv "$out/logs.tgz.tmp" "$out/logs.tgz"; }

# step NAME LIMIT CMD...: runs CMD under `timeout` (LIMIT seconds, less if the deadline is nearer),
# its output in NAME.log, and records pass, FAIL, TIMEOUT or SKIPPED.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - $(date +%s) - 5))
  if [ "$left" -lt 10 ]; then
    summary "$name" "SKIPPED (no time left before the deadline)"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  if declare -F "$1" >/dev/null; then
    # A function of this script: timeout runs programs, so it runs a bash that calls it.
    timeout -k 5 "$limit" bash -c '"$@"' _ "$@" >"$logs/$name.log" 2>&1
  else
    timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
  fi
  local rc=$? took=$((SECONDS - t0))
  tail -n 12 "$logs/$name.log" | sed 's/^/   /'
  local verdict
  case $rc in
  0)
    if grep -q '^--- SKIP' "$logs/$name.log" && ! grep -q '^--- PASS' "$logs/$name.log"; then
      verdict="SKIPPED (the test skipped: see its log)"
    else
      verdict=pass
    fi
    ;;
  124 | 137) verdict="TIMEOUT after ${took}s (limit ${limit}s)" ;;
  *) verdict="FAIL (exit $rc)" ;;
  esac
  summary "$name" "$verdict  ${took}s"
  pack
  [ "$verdict" = pass ]
}

has() { [[ " $steps " == *" $1 "* ]]; }

# env: what the machine is, for docs/gpu-validation.md.
machine() {
  date -u
  uname -a
  nvidia-smi || true
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
  command -v "$PY" && "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' || true
  "$PY" -c 'import sys; print(sys.prefix)' 2>/dev/null
  ls "$("$PY" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)/nvidia" 2>/dev/null || true
  nproc
  free -g
}

# The kit's programs travel gzipped (a lease carries at most 64 MiB).
for f in zeroeng gpu.test nccl.test; do
  if [ -f "$f.gz" ]; then gunzip -f "$f.gz" || summary unpack "FAIL: cannot unpack $f.gz"; fi
done

# Fashion-MNIST on the GPU and on the CPU, from the same seed: the test accuracies must agree
# within 0.5 points.
fmnist() {
  local acc_cuda acc_cpu
  local dev
  for dev in cuda cpu; do
    ./zeroeng run --quiet --device $dev samples/fashion_mnist.js -- --data data/fashion-mnist --epochs 3 >"$scratch/fm-$dev" 2>&1
    local rc=$?
    cat "$scratch/fm-$dev"
    [ $rc -eq 0 ] || return $rc
  done
  acc_cuda=$(grep -o '"test_acc":[0-9.]*' "$scratch/fm-cuda" | cut -d: -f2)
  acc_cpu=$(grep -o '"test_acc":[0-9.]*' "$scratch/fm-cpu" | cut -d: -f2)
  echo "test accuracy: cuda $acc_cuda, cpu $acc_cpu"
  awk -v a="$acc_cuda" -v b="$acc_cpu" 'BEGIN { d = a - b; if (d < 0) d = -d; if (a == "" || b == "" || d > 0.005) { print "they differ by more than 0.5 points"; exit 1 } }'
}

# A job of one process per GPU through zeroeng launch: the ranks meet at the rendezvous store and
# share NCCL's id through it. With one GPU, the job of one process checks the launch path alone.
launch() {
  local ngpu n
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  n=$((ngpu >= 2 ? 2 : 1))
  ./zeroeng launch --nproc-per-node "$n" --device cuda --quiet samples/gpt.js -- --bench --steps 20 --zero 2
}

torch_ok() { "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; }

# Interleaved rounds: zeroeng's workloads, then PyTorch's in one process; one JSON line each.
bench_gemm() {
  local w
  for round in 1 2 3; do
    [ $((deadline - $(date +%s))) -lt 60 ] && { echo "round $round: no time left"; break; }
    for w in cuda-gemm-fp32 cuda-gemm-tf32 cuda-gemm-bf16 cuda-mlp; do
      ./zeroeng bench "$w" | sed "s/^{/{\"round\":$round,\"engine\":\"zeroeng\",/" || return 1
    done
    if torch_ok; then
      "$PY" torch_gpu.py cuda-gemm-fp32 cuda-gemm-tf32 cuda-gemm-bf16 cuda-mlp | sed "s/^{/{\"round\":$round,\"engine\":\"torch\",/" || return 1
    fi
  done
}

# GPT-2 124M, bf16, B x T = 8 x 1024: samples/gpt.js as a user runs it, beside PyTorch eager.
bench_gpt2() {
  for round in 1 2 3; do
    [ $((deadline - $(date +%s))) -lt 60 ] && { echo "round $round: no time left"; break; }
    ./zeroeng run --device cuda samples/gpt.js -- --config gpt2 --dtype bfloat16 --bench --steps 23 || return 1
    if torch_ok; then "$PY" torch_gpu.py cuda-gpt2 | sed "s/^{/{\"round\":$round,\"engine\":\"torch\",/" || return 1; fi
  done
}

export -f machine fmnist launch torch_ok bench_gemm bench_gpt2
has env && step env 30 machine
# The GPU, its driver and libraries, then memory, a kernel, a cuBLAS product and an NCCL all-reduce,
# each against the CPU.
has info && step info 90 ./zeroeng info --smoke
# Every kernel family for this machine's GPUs, registers checked against launch bounds; the
# steps after this one find them in the cache.
has kernels && step kernels 120 ./zeroeng kernels build -v
# Every engine op on the GPU against the CPU engine: fresh random inputs, outputs poisoned.
has conformance && step conformance 180 ./gpu.test -test.v -test.count=1 -test.timeout 170s -test.run 'GPU'
# The NCCL process group on the real library, one rank a GPU.
has nccl && step nccl 60 ./nccl.test -test.v -test.count=1 -test.timeout 50s -test.run 'GPU'
has launch && step launch 90 launch
has fmnist && step fmnist 120 fmnist
# GPT-2 124M in bfloat16 trains on the GPU: 10 steps on this kit's Markdown, losses printed.
has gpt2 && step gpt2 150 ./zeroeng run --device cuda samples/gpt.js -- --config gpt2 --dtype bfloat16 --steps 10 --batch 4 --seq-len 1024
has bench-gemm && step bench-gemm 200 bench_gemm
has bench-gpt2 && step bench-gpt2 240 bench_gpt2

pack
echo "== summary ($out/summary.txt)"
cat "$out/summary.txt"
! grep -qv ' pass ' "$out/summary.txt"
