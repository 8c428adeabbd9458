#!/usr/bin/env bash
# bench/ops.js beside bench/torch_ops.py (PyTorch with tcmalloc, OpenBLAS's kernels for this CPU) on
# one thread, in interleaved rounds; prints each op's medians and zeroeng / PyTorch. MODE=grad times
# forward and backward.
#
#   ROUNDS=3 bench/ops.sh
#   MODE=grad ROUNDS=3 bench/ops.sh
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
ROUNDS=${ROUNDS:-3}
MODE=${MODE:-}
TCMALLOC=$(ls /usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null | head -n 1)
[ -n "$TCMALLOC" ] || { echo "ops.sh: PyTorch at its best needs tcmalloc: apt-get install libtcmalloc-minimal4" >&2; exit 1; }
make -s build
out=$(mktemp)
for r in $(seq "$ROUNDS"); do
  ./bin/zeroeng run --quiet --threads 1 bench/ops.js -- $MODE | tail -n 1 | sed 's/^/zeroeng /' >>"$out"
  LD_PRELOAD=$TCMALLOC TORCH_THREADS=1 /usr/bin/python3 bench/torch_ops.py $MODE | tail -n 1 | sed 's/^/torch /' >>"$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
runs = {"zeroeng": [], "torch": []}
for line in open(sys.argv[1]):
    side, js = line.split(" ", 1)
    runs[side].append(json.loads(js)["ms"])
print(f"{'op':16} {'zeroeng ms':>11} {'PyTorch ms':>11} {'ratio':>6}")
for op in runs["torch"][0]:
    z = statistics.median(r[op] for r in runs["zeroeng"])
    t = statistics.median(r[op] for r in runs["torch"])
    print(f"{op:16} {z:11.3f} {t:11.3f} {z / t:6.2f}")
PY
rm -f "$out"
