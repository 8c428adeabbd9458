#!/usr/bin/env bash
# GPU validation: runs on a machine with an NVIDIA GPU, from the folder that `make gpu-check`
# fills (build/gpu-check); it needs no Go, only the NVIDIA driver, and for the side-by-side
# numbers PyTorch with CUDA. Each step's output goes to OUT/<step>.log; a summary at the end says
# which steps passed. docs/gpu-validation.md records what a run showed.
#
#   build/gpu-check/run.sh [OUT]        # OUT defaults to $OUT, else ./gpu-check-out
#   STEPS="info conformance" build/gpu-check/run.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-$PWD/gpu-check-out}}
mkdir -p "$out"
cd "$here"
steps=${STEPS:-"info cuda-fakes conformance nccl launch fmnist bench"}
PY=${PYTHON:-python3}
declare -A result

run() { # run NAME CMD...: logs to OUT/NAME.log, records pass or fail
  local name=$1; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 15 "$out/$name.log" | sed 's/^/   /'
  echo "   exit $rc after $((SECONDS - t0)) s"
  if [ $rc -eq 0 ]; then result[$name]=pass; else result[$name]="FAIL ($rc)"; fi
}

has() { [[ " $steps " == *" $1 "* ]]; }

command -v nvidia-smi >/dev/null && nvidia-smi >"$out/nvidia-smi.txt" 2>&1
if has info; then run info ./zeroeng info; fi
# The bindings against the fake libraries (they need a C compiler; skipped without one).
if has cuda-fakes; then run cuda-fakes ./cuda.test -test.v -test.count=1; fi
# Every engine op on the GPU against the CPU engine, fresh random inputs, outputs poisoned.
if has conformance; then run conformance ./gpu.test -test.v -test.count=1 -test.run 'GPU'; fi
# The NCCL process group on the real library and GPUs.
if has nccl; then run nccl ./nccl.test -test.v -test.count=1 -test.run 'GPU'; fi
# A job of one process per GPU, through zeroeng launch: the ranks meet at the rendezvous store and
# share NCCL's id through it (ncclCommInitRank). NCCL takes one GPU per rank: with one GPU, the
# job of one process checks the launch path alone.
if has launch; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  n=$(( ngpu >= 2 ? 2 : 1 ))
  run "launch-nccl-$n" ./zeroeng launch --nproc-per-node "$n" --device cuda --quiet samples/gpt.js -- --bench --steps 20 --zero 2
fi
# Fashion-MNIST on the GPU and on the CPU: the accuracies must agree.
if has fmnist; then
  run fmnist-cuda ./zeroeng run --device cuda samples/fashion_mnist.js -- --data data/fashion-mnist
  run fmnist-cpu ./zeroeng run --device cpu samples/fashion_mnist.js -- --data data/fashion-mnist
fi
# Side by side with PyTorch on the same GPU, interleaved rounds.
if has bench; then
  for round in 1 2 3; do
    for w in cuda-gemm-fp32 cuda-gemm-tf32 cuda-gemm-bf16 cuda-mlp; do
      run "bench-$w-zeroeng-$round" ./zeroeng bench "$w"
      if $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
        run "bench-$w-torch-$round" $PY torch_gpu.py "$w"
      fi
    done
  done
  # GPT-2 124M, bf16, B x T = 8 x 1024: samples/gpt.js as a user runs it, against PyTorch eager.
  for round in 1 2 3; do
    run "bench-gpt2-zeroeng-$round" ./zeroeng run --quiet --device cuda samples/gpt.js -- --config gpt2 --dtype bfloat16 --bench --steps 23
    if $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
      run "bench-gpt2-torch-$round" $PY torch_gpu.py cuda-gpt2
    fi
  done
  cat "$out"/bench-*.log | grep '^{' >"$out/bench.jsonl" || true
fi

echo "== summary"
status=0
for k in $(printf '%s\n' "${!result[@]}" | sort); do
  printf '   %-40s %s\n' "$k" "${result[$k]}"
  [ "${result[$k]}" = pass ] || status=1
done
exit $status
