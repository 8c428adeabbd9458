#!/usr/bin/env bash
# ZeRO step schedules side by side (docs/benchmarks.md, "Step schedules"): samples/zero_overlap.js on
# 4 in-process ranks over an emulated link, each schedule in turn, in rotated interleaved rounds.
# For every run: rank 0's median step time and, from its trace, the share of its communication
# that overlapped forward and backward (bench/trace_overlap.py). Then the medians per schedule.
#
#   bench/schedules.sh                          # links 10Gbit,20us and 1Gbit,20us
#   ZE=path/to/zeroeng ROUNDS=5 STEPS=20 NETS="10Gbit,20us" SCHEDULES="none B lag-2" bench/schedules.sh
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-20}
NETS=${NETS:-"10Gbit,20us 1Gbit,20us"}
SCHEDULES=${SCHEDULES:-"none A B lag-2"}
BUCKETS_MB=${BUCKETS_MB:-1}
ZE=${ZE:-}
if [ -z "$ZE" ]; then make -s build >/dev/null; ZE=./bin/zeroeng; fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
read -r -a scheds <<<"$SCHEDULES"
for net in $NETS; do
  for r in $(seq "$ROUNDS"); do
    n=${#scheds[@]}
    for k in $(seq 0 $((n - 1))); do
      s=${scheds[$(((k + r) % n))]} # each round starts with another schedule
      line=$("$ZE" run --quiet --nproc 4 --net "$net" --trace "$OUT/trace.json" samples/zero_overlap.js -- \
        --schedule "$s" --steps "$STEPS" --buckets-mb "$BUCKETS_MB" 2>"$OUT/stderr" | sed -n 's/^\[0\] //p' | tail -n 1) ||
        { cat "$OUT/stderr" >&2; exit 1; }
      ov=$(bench/trace_overlap.py "$OUT/trace.json" 0)
      step=$(echo "$line" | sed -n 's/.*"step_ms_median":\([0-9.]*\).*/\1/p')
      echo "{\"net\": \"$net\", \"round\": $r, \"schedule\": \"$s\", \"step_ms\": $step, \"trace\": $ov}" | tee -a "$OUT/runs"
    done
  done
done
/usr/bin/python3 - "$OUT/runs" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for net in dict.fromkeys(r["net"] for r in runs):
    rows = [r for r in runs if r["net"] == net]
    base = statistics.median(r["step_ms"] for r in rows if r["schedule"] == "none") if any(r["schedule"] == "none" for r in rows) else None
    print(f"\n{net}\n| schedule | step ms, median | rounds | / none | overlap (comm inside forward+backward) |\n| --- | --- | --- | --- | --- |")
    for s in dict.fromkeys(r["schedule"] for r in rows):
        mine = [r for r in rows if r["schedule"] == s]
        med = statistics.median(r["step_ms"] for r in mine)
        ov = statistics.median(r["trace"]["overlap"] for r in mine)
        ratio = f"{med / base:.2f}" if base else ""
        print(f"| {s} | {med:g} | {', '.join(str(r['step_ms']) for r in mine)} | {ratio} | {ov:.2f} |")
PY
