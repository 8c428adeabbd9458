#!/usr/bin/env bash
# Mode auto's choice (engine/cpu/blas): the engine's own GEMM kernels, with the pool's workers
# polling between loops (side "own"), against the same workloads on OpenBLAS (side "openblas",
# ZEROENG_BLAS=libopenblas.so.0), in interleaved rounds; prints one JSON line per run, then the
# medians and own/openblas ratios (lower is better for ms, higher for samples a second).
#
#   bench/blasmodes.sh                 # this CPU's widest kernels (AVX-512 where it has them)
#   WIDTH=avx2 bench/blasmodes.sh      # both sides held to AVX2: ZEROENG_GEMM=avx2 ZEROENG_VMATH=avx2,
#                                      # OpenBLAS's Haswell kernels (OPENBLAS_CORETYPE=Haswell)
#   ROUNDS=5 bench/blasmodes.sh
#
# Workloads: zeroeng bench mlp and gpt, samples/gpt.js, bench/cnn.js (step and evaluation),
# samples/resnet.js, and bench/ranks.js (cnn, mlp) on one rank of one thread and on two ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE ZEROENG_BLAS ZEROENG_GEMM ZEROENG_VMATH
ROUNDS=${ROUNDS:-5}
WIDTH=${WIDTH:-}
go build -o bin/zeroeng ./cmd/zeroeng
Z=./bin/zeroeng
out=$(mktemp)
tag() { sed "s/^\[[0-9]*\] //; s/^{/{\"side\": \"$1\", /" | tee -a "$out"; }
for _ in $(seq "$ROUNDS"); do
  for side in own openblas; do
    env=()
    [ -n "$WIDTH" ] && env+=(ZEROENG_GEMM="$WIDTH" ZEROENG_VMATH="$WIDTH")
    if [ "$side" = openblas ]; then
      env+=(ZEROENG_BLAS=libopenblas.so.0)
      [ "$WIDTH" = avx2 ] && env+=(OPENBLAS_CORETYPE=Haswell)
    fi
    z() { env "${env[@]}" "$Z" "$@"; }
    z bench gemm | tag "$side"
    z bench mlp | tag "$side"
    z bench gpt | tag "$side"
    z run --quiet samples/gpt.js -- --config bench --bench --steps 23 --clip 0 | tail -n 1 |
      sed 's/"workload":"gpt"/"workload":"gpt.js"/' | tag "$side"
    z run --quiet bench/cnn.js | tail -n 1 | tag "$side"
    z run --quiet samples/resnet.js -- --steps 30 | tail -n 1 | tag "$side"
    if [ -z "$WIDTH" ]; then
      for m in cnn mlp; do
        z run --quiet --threads 1 bench/ranks.js -- "$m" | tail -n 1 | sed 's/-ranks"/-ranks-1rank-t1"/' | tag "$side"
        z run --quiet --nproc 2 bench/ranks.js -- "$m" | tail -n 1 | sed 's/-ranks"/-ranks-2ranks"/' | tag "$side"
      done
    fi
  done
done
/usr/bin/python3 - "$out" <<'PY'
import collections, json, statistics, sys
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    w, s = r["workload"], r["side"]
    if w == "cnn":
        by[("cnn step_ms", s)].append(r["step_ms"])
        by[("cnn eval_ms", s)].append(r["eval_ms"])
    elif w == "gemm":
        by[("gemm gflops", s)].append(r["gflops"])
    elif w.endswith(("-1rank-t1", "-2ranks")):
        by[(w + " samples_per_s", s)].append(r["samples_per_s"])
    else:
        by[(w + " step_ms_median", s)].append(r["step_ms_median"])
print("\nworkload | own (median) | openblas (median) | own / openblas | own rounds | openblas rounds")
for w in sorted({w for w, _ in by}):
    a, b = by[(w, "own")], by[(w, "openblas")]
    if a and b:
        print(f"{w} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | "
              f"{statistics.median(a) / statistics.median(b):.3f} | {', '.join(map(str, a))} | {', '.join(map(str, b))}")
PY
rm -f "$out"
