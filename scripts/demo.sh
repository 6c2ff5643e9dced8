#!/usr/bin/env bash
# Set up (if needed), generate a synthetic CTR dataset with a known true model,
# train on it in one process and as a local parameter-server cluster, and
# evaluate both on held-out data.
# Usage: bash scripts/demo.sh [rows]   (default 200000 training rows)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
rows="${1:-200000}"
out=data/demo
.venv/bin/ftrl-ps gen "$out" --rows "$rows" --test-rows 50000 --seed 1
echo "== single process"
.venv/bin/ftrl-ps train "$out/train.svm" --test "$out/test.svm" --model "$out/model.ftrl"
if .venv/bin/ftrl-ps train --help | grep -q -- "--workers"; then
  echo "== local cluster: 1 server, 2 workers, staleness 3"
  .venv/bin/ftrl-ps train "$out/train.svm" --test "$out/test.svm" --model "$out/cluster.ftrl" \
    --workers 2 --staleness 3
fi
