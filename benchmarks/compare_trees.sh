#!/usr/bin/env bash
# Time the same training runs with two checkouts of ftrl-ps, interleaved, to compare
# a change against its parent ("before/after" figures in RESULTS.md).
# Usage: bash benchmarks/compare_trees.sh BEFORE_TREE AFTER_TREE DATA_DIR [repeats]
#   DATA_DIR holds train.svm and test.svm (e.g. from `ftrl-ps gen DATA_DIR --rows 1000000`).
# Each repeat runs: single process, then 1 server + 2 workers, for each tree in turn.
# Prints "label wall_seconds logloss X" lines; take medians (the machine may be shared).
set -euo pipefail
before=$(cd "$1" && pwd); after=$(cd "$2" && pwd); data=$(cd "$3" && pwd); repeats=${4:-5}
py=${PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
run() {  # tree label flags...
  local tree=$1 label=$2; shift 2
  local s e out
  s=$(date +%s.%N)
  out=$(PYTHONPATH=$tree "$py" -m ftrl_ps train "$data/train.svm" --test "$data/test.svm" -q "$@" 2>&1)
  e=$(date +%s.%N)
  echo "$label $(echo "$e - $s" | bc) $(echo "$out" | grep -o 'logloss [0-9.]*' | tail -1)"
}
for tree in "$before" "$after"; do  # warm numba's cache of each tree
  PYTHONPATH=$tree "$py" -m ftrl_ps train "$data/test.svm" -q >/dev/null
done
for _ in $(seq "$repeats"); do
  run "$before" before-single
  run "$after" after-single
  run "$before" before-cluster --workers 2 --servers 1
  run "$after" after-cluster --workers 2 --servers 1
done
