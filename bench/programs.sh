#!/usr/bin/env bash
# WebAssembly training programs beside their JavaScript twins, in interleaved rounds (docs/benchmarks.md,
# "Wasm training programs"). Prints each run, then the medians.
#
#   bench/programs.sh calls      # the per-call cost: bench/programs/calls.c (C, raw imports), the Go SDK's
#                                # testprograms/calls, each with JSON and handle-only calls, and bench/programs/calls.js
#   bench/programs.sh fmnist     # one epoch of samples/fashion_mnist.js and its C, Go and Rust programs (train_s)
#   bench/programs.sh gpt        # samples/gpt.js and gpt_rust.wasm, --config bench --bench (step_ms_median)
#   ROUNDS=5 N=200000 bench/programs.sh calls
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
N=${N:-200000}
GO=${GO:-go}
make -s build programs >/dev/null
ZE=./bin/zeroeng
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

runs() { # name command... : one run, its number on stdout
  local name=$1
  shift
  local v
  v=$("$@")
  echo "$name $v" >>"$OUT/runs"
  echo "$name $v" >&2
}

calls() {
  clang --target=wasm32-wasi --sysroot=/usr -O2 -D_POSIX_C_SOURCE=199309L -o "$OUT/calls_c.wasm" bench/programs/calls.c
  (cd sdk/go && GOOS=wasip1 GOARCH=wasm $GO build -o "$OUT/calls_go.wasm" ./internal/testprograms/calls)
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 0 ]; then # the script first every other round
      runs js sh -c "$ZE run --quiet bench/programs/calls.js -- $N | sed -n 's/.*: \([0-9.]*\) us each/\1/p'"
    fi
    for mode in op json; do
      runs "c-$mode" sh -c "$ZE run --quiet $OUT/calls_c.wasm -- $N $mode | sed -n 's/.*: \([0-9.]*\) us each/\1/p'"
      runs "go-$mode" sh -c "$ZE run --quiet $OUT/calls_go.wasm -- $N $mode | sed -n 's/.*: \([0-9.]*\) us each/\1/p'"
    done
    if [ $((r % 2)) -eq 1 ]; then
      runs js sh -c "$ZE run --quiet bench/programs/calls.js -- $N | sed -n 's/.*: \([0-9.]*\) us each/\1/p'"
    fi
  done
}

# rotated prints its arguments starting at the (r mod n)-th: each round starts with another side, so
# that none is always the first (or last) of its round.
rotated() {
  local r=$1
  shift
  local n=$#
  local i
  for i in $(seq 0 $((n - 1))); do
    local k=$(((r + i) % n + 1))
    echo "${!k}"
  done
}

fmnist() {
  for r in $(seq "$ROUNDS"); do
    for p in $(rotated "$r" samples/fashion_mnist.js samples/programs/build/fashion_mnist_c.wasm samples/programs/build/fashion_mnist_go.wasm samples/programs/build/fashion_mnist_rust.wasm); do
      [ -f "$p" ] || continue
      runs "$(basename "$p")" sh -c "$ZE run --quiet $p -- --epochs 1 | sed -n 's/.*\"train_s\":\([0-9.]*\).*/\1/p'"
    done
  done
}

gpt() {
  for r in $(seq "$ROUNDS"); do
    for p in $(rotated "$r" samples/gpt.js samples/programs/build/gpt_rust.wasm); do
      [ -f "$p" ] || continue
      runs "$(basename "$p")" sh -c "$ZE run --quiet $p -- --config bench --bench --steps ${STEPS:-13} | sed -n 's/.*\"step_ms_median\":\([0-9.]*\).*/\1/p' | tail -n 1"
    done
  done
}

for w in "${@:-calls}"; do
  case $w in
  calls | fmnist | gpt) "$w" ;;
  *) echo "programs.sh: unknown workload $w (calls, fmnist, gpt)" >&2; exit 2 ;;
  esac
done
echo "medians of $ROUNDS interleaved rounds:"
for k in $(cut -d' ' -f1 "$OUT/runs" | sort -u); do
  printf '  %-28s %s\n' "$k" "$(awk -v k="$k" '$1 == k { print $2 }' "$OUT/runs" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
done
