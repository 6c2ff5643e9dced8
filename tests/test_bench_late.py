"""benchmarks/bench_late.py runs end to end with its default rules (tiny data; no
test of the figures): a rule renamed in ftrl_ps.ps.merge must be renamed there too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_late.py"


def test_bench_late_replays_every_default_rule(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    for name, rows in (("train.svm", 400), ("test.svm", 100)):
        (tmp_path / name).write_text("".join(
            f"{int(rng.random() < 0.3)} {a}:1 {a + 1 + int(rng.integers(40))}:1\n"
            for a in rng.integers(0, 60, rows)))
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "train.svm"), str(tmp_path / "test.svm"),
         "--bits", "10", "--batch-size", "20", "--schedules", "2"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    replayed = [line.split()[0] for line in run.stdout.splitlines() if "schedules" in line]
    assert replayed == ["compose", "compose-late", "threshold", "compose-n"], run.stdout
