"""benchmarks/bench_wire.py runs end to end (tiny cells): its rounds are what a
default shard and a compose shard accept (no test of the figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_wire.py"


def test_bench_wire_runs_plain_json_and_compose_rounds() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--bits", "12", "--sizes", "100", "--seconds", "0.05",
         "--repeats", "1", "--compose"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    cells = [line.split()[1] for line in run.stdout.splitlines()
             if line.split()[:1] == ["100"]]
    assert cells == ["binary", "json", "compose"], run.stdout
    assert "compose rounds: http://127.0.0.1:" in run.stdout


def test_compose_rounds_against_a_given_url_need_a_compose_shard() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", "http://127.0.0.1:9", "--compose"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2 and "needs --compose-url" in run.stderr, run.stderr
