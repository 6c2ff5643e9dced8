#!/usr/bin/env bash
# Create .venv (if missing) and install ftrl-ps with its test/lint tools into it.
# Usage: bash scripts/setup.sh [extra]   e.g. "dev" (default) or "dev,bench"
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed-$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[$extras]"
  touch "$stamp"
fi
