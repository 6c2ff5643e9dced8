"""benchmarks/bench_wire.py runs end to end (tiny cells): its rounds are what a
default shard and a compose shard accept (no test of the figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_wire.py"


def test_bench_wire_runs_plain_json_and_compose_rounds(tmp_path: Path) -> None:
    out = tmp_path / "wire.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--bits", "12", "--sizes", "100", "--seconds", "0.05",
         "--repeats", "1", "--compose", "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    cells = [line.split()[1] for line in run.stdout.splitlines()
             if line.split()[:1] == ["100"]]
    assert cells == ["binary", "json", "compose"], run.stdout
    table = json.loads(out.read_text())  # the same cells (benchmarks/accept_summary.py)
    assert [(c["keys"], c["format"]) for c in table] == [(100, f) for f in cells]
    assert all(c["server_mkv_per_cpu_s"] >= 0 and c["requests_per_s"] > 0 for c in table)
    assert "compose rounds: http://127.0.0.1:" in run.stdout


def test_compose_rounds_against_a_given_url_need_a_compose_shard() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", "http://127.0.0.1:9", "--compose"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2 and "needs --compose-url" in run.stderr, run.stderr
