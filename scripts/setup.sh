#!/usr/bin/env bash
# Create .venv (if missing) and install ftrl-ps with its test/lint tools into it,
# at the versions pinned in requirements/dev-lock.txt (docs/lockfile.md).
# Usage: bash scripts/setup.sh [extra]   e.g. "dev" (default) or "dev,bench"
#   dev:     the pinned dev lock, then ftrl-ps itself (editable, --no-deps)
#   other:   the pinned dev lock, then ftrl-ps with those extras; what the lock
#            pins stays at its pinned version, the rest (e.g. bench) is resolved
# Re-installs when pyproject.toml or the lock is newer than the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
lock=requirements/dev-lock.txt
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed-$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$lock" -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -r "$lock"
  if [ "$extras" = dev ]; then
    .venv/bin/python -m pip install --quiet --no-deps -e .
  else
    .venv/bin/python -m pip install --quiet -c "$lock" -e ".[$extras]"
  fi
  touch "$stamp"
fi
# ftrl-ps's own bytecode (an editable install compiles nothing, and with
# PYTHONDONTWRITEBYTECODE set every process would compile the sources again:
# ~0.05 s of each command's start-up); quick when nothing changed
.venv/bin/python -m compileall -q ftrl_ps services
