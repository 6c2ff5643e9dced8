"""benchmarks/bench_shard_ab.py runs end to end (tiny bursts, the repository
against itself): its rounds and ticks are what a shard accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_shard_ab.py"


def test_bench_shard_ab_times_rounds_and_ticks_of_two_checkouts() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(REPO), str(REPO), "--keys", "100", "--bits", "12",
         "--bursts", "1", "--seconds", "0.3"],
        capture_output=True, text=True, timeout=180,
    )
    # (0.3 s: a burst's server CPU is read in 10 ms clock ticks; 0.05 s bursts of
    # ticks read 0 ms now and then)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "warning" not in run.stderr, run.stderr
    rows = [line.split() for line in run.stdout.splitlines()
            if line.startswith(str(REPO)[-40:])]  # (the script prints the last 40 characters)
    assert len(rows) == 2, run.stdout
    assert all(float(x) > 0 for row in rows for x in row[1:]), run.stdout
    assert "lower in" in run.stdout


def test_a_folder_that_is_no_checkout_is_refused(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), str(REPO)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "is not a checkout of ftrl-ps" in run.stderr


def test_the_floor_puts_the_shard_beside_a_bare_app_with_its_store() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(REPO), "--floor", "--keys", "100", "--bits", "12",
         "--bursts", "1", "--seconds", "0.3"],
        capture_output=True, text=True, timeout=180,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    bare = [line for line in run.stdout.splitlines() if line.startswith("bare uvicorn app")]
    assert bare and float(bare[0].split()[-5]) > 0, run.stdout
    two = subprocess.run([sys.executable, str(SCRIPT), str(REPO), str(REPO), "--floor"],
                         capture_output=True, text=True, timeout=60)
    assert two.returncode == 2 and "one with --floor" in two.stderr
