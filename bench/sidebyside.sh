#!/usr/bin/env bash
# Side-by-side benchmarks: zeroeng against PyTorch (Debian's python3-torch with OpenBLAS) on the
# same machine, in interleaved rounds, so that both see the same machine state. Prints one JSON
# line per run, then a summary of medians and ratios (docs/benchmarks.md quotes it).
#
#   bench/sidebyside.sh [workload...]      # workloads: gemm mlp gpt fmnist fmnist-js ddp2 (default: all)
#                                          # ddp2 also runs as 2 processes over Open MPI (side zeroeng-mpi)
#                                          # gpt runs the Go model and samples/gpt.js (side zeroeng-js)
#   bench/sidebyside.sh overlap            # ZeRO overlap on 4 ranks and an emulated 10 Gbit/s link (zeroeng only)
#   bench/sidebyside.sh checkpoint         # GPT-2 124M + AdamW saved and loaded (not in the default set)
#   bench/sidebyside.sh llama              # samples/llama.js beside bench/torch_llama.py (not in the default set)
#   bench/sidebyside.sh cnn                # bench/cnn.js beside bench/torch_cnn.py (not in the default set)
#   bench/sidebyside.sh resnet             # samples/resnet.js beside bench/torch_resnet.py (not in the default set)
#   bench/sidebyside.sh ranks              # the CNN, the Fashion-MNIST MLP and the GPT data-parallel on 1 and 2 ranks
#                                          # (bench/ranks.js and samples/gpt.js beside bench/torch_ranks.py; not in the default set)
#   ROUNDS=5 bench/sidebyside.sh mlp
#   WIDTH=avx2 bench/sidebyside.sh mlp gpt # both sides held to AVX2 on an AVX-512 machine (the AVX2 EPYC's
#                                          # instruction set, not its cores): zeroeng's GEMM and vector kernels
#                                          # (ZEROENG_GEMM, ZEROENG_VMATH), PyTorch's (ATEN_CPU_CAPABILITY) and
#                                          # OpenBLAS's (OPENBLAS_CORETYPE=Haswell)
#
# fmnist-js adds the Fashion-MNIST job as a user runs it, `zeroeng run samples/fashion_mnist.js`
# (side "zeroeng-js"), to the fmnist rounds; its rows also carry wall_s, each process's wall time
# (start-up, data loading and, for zeroeng, the per-epoch test evaluation included).
#
# PyTorch (bench/torch_cpu.py, bench/torch_fmnist.py) runs as installed ("torch") and at its best,
# which the ratios are quoted against: with tcmalloc preloaded (Debian's libtcmalloc-minimal4;
# glibc's malloc gives large temporaries back to the kernel, and every op page-faults them in
# again), OpenBLAS told this CPU's core (Debian's OpenBLAS 0.3.21 does not recognise recent CPUs
# and falls back to SSE3 kernels; zeroeng's CBLAS loader does the same, docs/benchmarks-gemm.md),
# on one thread ("torch-tuned-t1") and on every core ("torch-tuned-tN"): the summary compares
# with the faster of the two.
set -euo pipefail
cd "$(dirname "$0")/.."
# Both sides run with the kernels OpenBLAS chooses for the CPU, unless a side names its core: a
# machine-wide OPENBLAS_CORETYPE (some images set Haswell) would otherwise hold back zeroeng's CBLAS
# while PyTorch's "as installed" side runs without it.
unset OPENBLAS_CORETYPE
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
TCMALLOC=$(ls /usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null | head -n 1)
[ -n "$TCMALLOC" ] || { echo "sidebyside.sh: PyTorch at its best needs tcmalloc: apt-get install libtcmalloc-minimal4" >&2; exit 1; }
CORE=$(grep -qw avx512f /proc/cpuinfo && echo SkylakeX || (grep -qw avx2 /proc/cpuinfo && echo Haswell) || echo "")
WIDTH=${WIDTH:-}
case "$WIDTH" in
  "") ;;
  avx2)
    grep -qw avx2 /proc/cpuinfo || { echo "sidebyside.sh: WIDTH=avx2 on a CPU without AVX2" >&2; exit 2; }
    CORE=Haswell
    export ZEROENG_GEMM=avx2 ZEROENG_VMATH=avx2 ATEN_CPU_CAPABILITY=avx2 ;;
  *) echo "sidebyside.sh: WIDTH=$WIDTH: the only width is avx2" >&2; exit 2 ;;
esac
NPROC=$(nproc)
unset OPENBLAS_L2_SIZE
# torch_sides runs a PyTorch command as installed and tuned.
torch_sides() {
  # As installed: OpenBLAS picks its kernels for this CPU, but for those of the width held to.
  env -u OPENBLAS_CORETYPE ${WIDTH:+OPENBLAS_CORETYPE=$CORE} "$@" | tag torch
  env LD_PRELOAD="$TCMALLOC" ${CORE:+OPENBLAS_CORETYPE=$CORE} TORCH_THREADS=1 "$@" | tag torch-tuned-t1
  if [ "$NPROC" -gt 1 ]; then
    env LD_PRELOAD="$TCMALLOC" ${CORE:+OPENBLAS_CORETYPE=$CORE} TORCH_THREADS="$NPROC" "$@" | tag torch-tuned-tN
  fi
}
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(gemm mlp gpt fmnist fmnist-js ddp2)
go build -o bin/zeroeng ./cmd/zeroeng
out=$(mktemp)
tag() { sed "s/^{/{\"side\": \"$1\", /" | tee -a "$out"; }
# timed runs a command that ends its output with a JSON object and prints that line with the
# command's wall time added as wall_s.
timed() {
  local t0 t1 line
  t0=$(date +%s.%N)
  line=$("$@" | tail -n 1)
  t1=$(date +%s.%N)
  echo "$line" | sed "s/}\$/, \"wall_s\": $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")}/"
}
torch_gemm() {
  $PY - <<'PY'
import json, os, statistics, time, torch
if os.environ.get("TORCH_THREADS"):
    torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
ts = []
for _ in range(40):
    t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
print(json.dumps({"workload": "gemm", "gflops": round(2 * 1024**3 / statistics.median(ts[5:]) / 1e9, 1)}))
PY
}
for w in "${workloads[@]}"; do
  for r in $(seq "$ROUNDS"); do
    case $w in
      gemm)
        torch_sides bash -c "$(declare -f torch_gemm); PY=$PY torch_gemm"
        ./bin/zeroeng bench gemm | tag zeroeng
        # Our products on OpenBLAS (mode auto prefers the engine's own kernels on AVX2 and AVX-512).
        ZEROENG_BLAS=libopenblas.so.0 ./bin/zeroeng bench gemm | tag zeroeng-cblas
        ;;
      overlap)
        for v in none a b flat stage2; do ./bin/zeroeng bench "overlap4-$v" | tag zeroeng; done
        ;;
      fmnist)
        torch_sides $PY bench/torch_fmnist.py
        ./bin/zeroeng bench fmnist | tag zeroeng
        ;;
      fmnist-js)
        timed env LD_PRELOAD="$TCMALLOC" ${CORE:+OPENBLAS_CORETYPE=$CORE} $PY bench/torch_fmnist.py | tag torch-tuned-t1
        timed ./bin/zeroeng bench fmnist | tag zeroeng
        timed ./bin/zeroeng run --quiet samples/fashion_mnist.js | tag zeroeng-js
        ;;
      ddp2)
        # PyTorch's gloo DDP + ZeroRedundancyOptimizer(AdamW) against ours, and our other ZeRO
        # variants of the same step (sides zeroeng-flat, ...; see docs/benchmarks.md).
        # One thread a rank on each side (torch_cpu.py sets it for gloo's ranks).
        env -u OPENBLAS_CORETYPE $PY bench/torch_cpu.py ddp2 | tag torch
        env LD_PRELOAD="$TCMALLOC" ${CORE:+OPENBLAS_CORETYPE=$CORE} $PY bench/torch_cpu.py ddp2 | tag torch-tuned-t1
        ./bin/zeroeng bench ddp2 | tag zeroeng
        # Two processes over Open MPI, one kernel thread each as torch_cpu.py gives each rank.
        if command -v mpirun >/dev/null; then
          mpirun -np 2 --oversubscribe --bind-to none $([ "$(id -u)" -eq 0 ] && echo --allow-run-as-root) \
            -x ZEROENG_THREADS=1 ./bin/zeroeng bench ddp2 | tag zeroeng-mpi
        fi
        for v in flat stage2 overlap-a overlap-b; do
          ./bin/zeroeng bench "ddp2-$v" | sed 's/"workload":"ddp2-[a-z0-9-]*"/"workload":"ddp2"/' | tag "zeroeng-$v"
        done
        ;;
      gpt)
        # The Go model (zeroeng bench gpt) and the JavaScript sample a user runs (side zeroeng-js):
        # samples/gpt.js --bench, 3 warm-up and 20 timed steps on random tokens, without clipping
        # (torch_cpu.py does not clip; the sample's weight decay skips biases and LayerNorms).
        torch_sides $PY bench/torch_cpu.py gpt
        ./bin/zeroeng bench gpt | tag zeroeng
        ./bin/zeroeng run --quiet samples/gpt.js -- --config bench --bench --steps 23 --clip 0 | tail -n 1 | tag zeroeng-js
        ;;
      llama)
        # samples/llama.js --bench beside bench/torch_llama.py: the same LLaMA-style decoder and AdamW
        # step with clipping, 3 warm-up and 20 timed steps on random tokens.
        torch_sides $PY bench/torch_llama.py bench
        ./bin/zeroeng run --quiet samples/llama.js -- --config bench --bench --steps 23 | tail -n 1 | tag zeroeng-js
        ;;
      cnn)
        # The Fashion-MNIST CNN (bench/cnn.js beside bench/torch_cnn.py): the training step at batch
        # 64, an evaluation of 10,000 images, and each layer's forward + backward.
        torch_sides $PY bench/torch_cnn.py
        ./bin/zeroeng run --quiet bench/cnn.js | tail -n 1 | tag zeroeng
        ;;
      ranks)
        # Rank scaling: each model data-parallel (DDP) with a fixed batch per rank (cnn, mlp: 64
        # images; gpt: 8 sequences of 128 tokens), in samples (gpt: tokens) a second, on 1 rank and
        # on 2: zeroeng's in-process ranks, PyTorch's gloo processes of one thread each
        # (OPENBLAS_NUM_THREADS=1: torch.set_num_threads does not reach OpenBLAS's threads). One rank
        # runs on one thread (the scaling's base) and as each side runs best.
        for m in cnn mlp gpt; do
          # The MLP's steps take half a millisecond: 300 of them (on both sides) for a steady median.
          steps=$([ "$m" = mlp ] && echo 300 || ([ "$m" = gpt ] && echo 20 || echo 60))
          env LD_PRELOAD="$TCMALLOC" ${CORE:+OPENBLAS_CORETYPE=$CORE} OPENBLAS_NUM_THREADS=1 TORCH_THREADS=1 $PY bench/torch_ranks.py $m 1 $steps | tag torch-tuned-1rank-t1
          env LD_PRELOAD="$TCMALLOC" ${CORE:+OPENBLAS_CORETYPE=$CORE} TORCH_THREADS=1 $PY bench/torch_ranks.py $m 1 $steps | tag torch-tuned-1rank-t1-blasN
          env LD_PRELOAD="$TCMALLOC" ${CORE:+OPENBLAS_CORETYPE=$CORE} TORCH_THREADS="$NPROC" $PY bench/torch_ranks.py $m 1 $steps | tag torch-tuned-1rank-tN
          env LD_PRELOAD="$TCMALLOC" ${CORE:+OPENBLAS_CORETYPE=$CORE} $PY bench/torch_ranks.py $m 2 $steps | tag torch-tuned-2ranks
          for r in "--threads 1" "" "--nproc 2"; do
            side=$(case "$r" in "--threads 1") echo 1rank-t1 ;; "") echo 1rank-tN ;; *) echo 2ranks ;; esac)
            if [ "$m" = gpt ]; then
              ./bin/zeroeng run --quiet $r samples/gpt.js -- --config bench --bench --steps 23 --clip 0 | tail -n 1 |
                sed 's/^\[[0-9]*\] //; s/"workload":"gpt"/"workload":"gpt-ranks"/; s/"tokens_per_s"/"samples_per_s"/' | tag "zeroeng-$side"
            else
              ./bin/zeroeng run --quiet $r bench/ranks.js -- $m $steps | tail -n 1 | sed 's/^\[[0-9]*\] //' | tag "zeroeng-$side"
            fi
          done
        done
        ;;
      resnet)
        # samples/resnet.js beside bench/torch_resnet.py: a small ResNet on synthetic 32x32 images, batch 32.
        torch_sides $PY bench/torch_resnet.py 30
        ./bin/zeroeng run --quiet samples/resnet.js -- --steps 30 | tail -n 1 | tag zeroeng-js
        ;;
      checkpoint)
        # GPT-2 124M's weights and AdamW state (1.49 GB) saved and loaded: torch.save/torch.load with
        # and without an fsync (zeroeng's save always syncs), against checkpoint.save/load.
        ck=$(mktemp -d)
        $PY bench/torch_checkpoint.py "$ck/torch" | tag torch
        $PY bench/torch_checkpoint.py "$ck/torch" --fsync | tag torch-fsync
        ./bin/zeroeng run --quiet bench/checkpoint.js -- "$ck/zeroeng" | tag zeroeng
        rm -rf "$ck"
        ;;
      *)
        torch_sides $PY bench/torch_cpu.py "$w"
        ./bin/zeroeng bench "$w" | tag zeroeng
        ;;
    esac
  done
done
$PY - "$out" <<'PY'
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
key = {**{f"overlap4-{v}": "step_ms_median" for v in ("none", "a", "b", "flat", "stage2")}, "gemm": "gflops", "checkpoint": "save_ms_median", "mlp": "step_ms_median", "gpt": "step_ms_median", "llama": "step_ms_median", "ddp2": "step_ms_median", "fashion_mnist_mlp": "train_s", "cnn": "step_ms", "cnn-ranks": "samples_per_s", "mlp-ranks": "samples_per_s", "gpt-ranks": "samples_per_s", "resnet": "step_ms_median"}
by = collections.defaultdict(list)
for r in rows:
    by[(r["workload"], r["side"])].append(r[key[r["workload"]]])
print("\nworkload | side | metric | median of rounds | rounds")
for (w, s), v in sorted(by.items()):
    print(f"{w} | {s} | {key[w]} | {statistics.median(v):.1f} | {', '.join(f'{x:.1f}' for x in v)}")
for w in sorted({w for w, _ in by}):
    higher = w in ("gemm", "cnn-ranks", "mlp-ranks", "gpt-ranks")
    # PyTorch at its best: the faster of its tuned sides.
    tuned = [(statistics.median(v), s) for (ww, s), v in by.items() if ww == w and s.startswith("torch-tuned")]
    best = (max if higher else min)(tuned) if tuned else None
    for zs in sorted({s for ww, s in by if ww == w and s.startswith("zeroeng")}):
        z = statistics.median(by[(w, zs)])
        for name, t in [("torch (as installed)", by.get((w, "torch"))), ("torch-fsync", by.get((w, "torch-fsync")))]:
            if t:
                print(f"{w}: {zs} / {name} = {z / statistics.median(t):.2f}" + (" (higher is better)" if higher else " (lower is better)"))
        if best:
            print(f"{w}: {zs} / PyTorch at its best ({best[1]}) = {z / best[0]:.2f}" + (" (higher is better)" if higher else " (lower is better)"))
# Rank scaling: 2 ranks' samples a second over 1 rank's on one thread, and over 1 rank at its best.
for w in ("cnn-ranks", "mlp-ranks", "gpt-ranks"):
    if not by.get((w, "zeroeng-2ranks")):
        continue
    m = lambda s: statistics.median(by[(w, s)])
    zbest = max(m(s) for (ww, s) in by if ww == w and s.startswith("zeroeng-1rank"))
    tbest = max(m(s) for (ww, s) in by if ww == w and s.startswith("torch-tuned-1rank"))
    print(f"{w}: 2 ranks / 1 rank on one thread: zeroeng {m('zeroeng-2ranks') / m('zeroeng-1rank-t1'):.2f}, "
          f"PyTorch {m('torch-tuned-2ranks') / m('torch-tuned-1rank-t1'):.2f}; "
          f"2 ranks / 1 rank at its best: zeroeng {m('zeroeng-2ranks') / zbest:.2f}, PyTorch {m('torch-tuned-2ranks') / tbest:.2f}")
loads = collections.defaultdict(list)
for r in rows:
    if "load_ms_median" in r:
        loads[r["side"]].append(r["load_ms_median"])
for s, v in sorted(loads.items()):
    print(f"checkpoint | {s} | load_ms_median | {statistics.median(v):.1f} | {', '.join(f'{x:.1f}' for x in v)}")
for s in ("torch", "torch-fsync"):
    if loads.get("zeroeng") and loads.get(s):
        print(f"checkpoint load: zeroeng / {s} = {statistics.median(loads['zeroeng']) / statistics.median(loads[s]):.2f} (lower is better)")
wall = collections.defaultdict(list)
for r in rows:
    if "wall_s" in r:
        wall[(r["workload"], r["side"])].append(r["wall_s"])
if wall:
    print("\nworkload | side | wall_s (whole process) median | rounds")
    for (w, s), v in sorted(wall.items()):
        print(f"{w} | {s} | {statistics.median(v):.2f} | {', '.join(f'{x:.2f}' for x in v)}")
    for s in ("torch", "torch-tuned-t1"):
        z, t = wall.get(("fashion_mnist_mlp", "zeroeng-js")), wall.get(("fashion_mnist_mlp", s))
        if z and t:
            print(f"fashion_mnist_mlp wall: zeroeng-js / {s} = {statistics.median(z) / statistics.median(t):.2f} (lower is better)")
PY
rm -f "$out"
