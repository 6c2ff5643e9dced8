#!/usr/bin/env bash
# Set up (if needed) and run the checks CI runs: ruff, the import contracts of
# pyproject.toml [tool.importlinter] (lint-imports), mypy on the package, the services
# and the tools ([tool.mypy]), then the whole pytest suite.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/ruff check ftrl_ps services tools tests benchmarks
.venv/bin/lint-imports --no-cache --no-logo
.venv/bin/python -m mypy ftrl_ps services tools
.venv/bin/python -m pytest "$@"
