"""Schemathesis against live shard servers: every check, bounded examples, fixed
generation (deterministic mode): 0 server errors, 0 schema failures.

Runs the ``schemathesis`` command against real uvicorn processes (shard 0, with
the worker routes, and shard 1 of a 2-shard cluster) with the bearer token.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._servers import TOKEN, real_cluster

EXAMPLES = 25


@pytest.mark.timeout(600)
def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert exe, "schemathesis is a dev dependency (pyproject.toml)"
    args = ["--bits", "12", "--group-size", "64", "--num-workers", "2", "--token", TOKEN]
    with real_cluster(2, args) as shards:
        for shard in shards:
            res = subprocess.run(
                [exe, "run", f"{shard.url}/openapi.json", "--checks", "all",
                 "--max-examples", str(EXAMPLES), "--generation-deterministic",
                 "--workers", "1", "-H", f"Authorization: Bearer {TOKEN}"],
                cwd=tmp_path, capture_output=True, text=True, timeout=500,
            )
            report = res.stdout + res.stderr
            assert res.returncode == 0, report[-6000:]
            counts = re.search(r"(\d+) generated, (\d+) passed", report)
            assert counts is not None, report[-2000:]
            generated, passed = map(int, counts.groups())
            assert generated == passed and generated >= 100
            assert "failure" not in report.split("SUMMARY")[-1].lower()
