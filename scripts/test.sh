#!/usr/bin/env bash
# Set up (if needed) and run the checks CI runs: ruff, then the whole pytest suite.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/ruff check ftrl_ps services tests benchmarks
.venv/bin/python -m pytest "$@"
