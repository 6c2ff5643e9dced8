#!/usr/bin/env bash
# Regenerate the pinned dependency locks from pyproject.toml (docs/lockfile.md):
#   requirements/dev-lock.txt   runtime + the "dev" extra   (scripts/setup.sh, CI)
#   requirements/lock.txt       runtime only                (Dockerfile)
# both for CPython 3.11 on linux x86_64, resolved with uv against PyPI.
# Pins already in the files are kept where pyproject.toml still allows them;
# extra arguments go to `uv pip compile`, e.g.
#   bash scripts/lock.sh --upgrade                   # newest of everything
#   bash scripts/lock.sh --upgrade-package numpy     # just one package
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/python -m pip install --quiet "uv>=0.4"
fi
mkdir -p requirements
compile=(.venv/bin/uv pip compile pyproject.toml --quiet
         --python-version 3.11 --python-platform x86_64-unknown-linux-gnu
         --custom-compile-command "bash scripts/lock.sh")
# The dev lock first; the runtime lock is then constrained to it, so the image
# gets exactly the versions that CI tested.
"${compile[@]}" --extra dev -o requirements/dev-lock.txt "$@"
"${compile[@]}" -c requirements/dev-lock.txt -o requirements/lock.txt "$@"
echo "wrote requirements/dev-lock.txt ($(grep -c '==' requirements/dev-lock.txt) pins)" \
     "and requirements/lock.txt ($(grep -c '==' requirements/lock.txt) pins)"
