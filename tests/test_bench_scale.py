"""benchmarks/bench_scale.py: the tenths of the rows trained (cluster mode) from
the workers' timelines; a tiny cluster run end to end (no test of the figures'
size)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCH / "bench_scale.py"
sys.path.insert(0, str(BENCH))

import bench_scale  # noqa: E402


def test_the_timelines_tenths_sum_the_workers_rows() -> None:
    # worker a: 100 rows/s from t=1 to 11; worker b: 50 rows/s from 3 to 11 (400 rows,
    # resumed at 100): 150 rows/s while both train
    reports = [{"timeline": [[51.0 + t, 100 * t] for t in range(11)]},
               {"timeline": [[53.0, 100], [55.0, 200], [61.0, 500]]}]
    r = bench_scale.trained_tenths(50.0, reports)
    rates = r["trained_rows_per_s_by_tenth"]
    assert r["trained_seconds"] == pytest.approx(10.0)
    assert rates[0] == pytest.approx(100.0)  # 140 rows by t=2.4: a alone
    assert rates[-1] == pytest.approx(150.0)
    assert r["trained_last_over_first"] == pytest.approx(1.5)
    # every tenth is 140 rows: the time the tenths take adds up to the training
    assert sum(140 / v for v in rates) == pytest.approx(10.0)


def test_a_report_without_a_timeline_gives_no_timeline_figures() -> None:
    assert bench_scale.trained_tenths(0.0, []) == {}
    assert bench_scale.trained_tenths(0.0, [{"timeline": [[1.0, 0], [2.0, 10]]},
                                             {"rows": 5}]) == {}
    assert bench_scale.trained_tenths(0.0, [{"timeline": [[1.0, 0], [2.0, 0]]}]) == {}


def test_a_tiny_cluster_run_reports_the_tenths_of_the_rows_trained(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--mode", "cluster", "--rows", "40000", "--test-rows",
         "1000", "--bits", "16", "--data", str(tmp_path / "data"), "--interval", "0.05",
         "--warm-memory", "0.05", "--json", str(out), "--", "--batch-size", "500"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
    result = json.loads(out.read_text())
    assert len(result["trained_rows_per_s_by_tenth"]) == 10
    assert all(v > 0 for v in result["trained_rows_per_s_by_tenth"])
    assert 0 < result["trained_seconds"] < result["wall_seconds"]
    assert "rows/s by tenth of the rows trained" in run.stdout
    assert result["memory_warmed"]["gib"] == 0.05 and "memory: 0.05 GiB" in run.stderr
