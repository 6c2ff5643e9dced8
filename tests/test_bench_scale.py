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
         "--warm-memory", "0.05", "--warm-run", "--json", str(out), "--",
         "--batch-size", "500"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
    result = json.loads(out.read_text())
    assert len(result["trained_rows_per_s_by_tenth"]) == 10
    assert all(v > 0 for v in result["trained_rows_per_s_by_tenth"])
    assert 0 < result["trained_seconds"] < result["wall_seconds"]
    assert "rows/s by tenth of the rows trained" in run.stdout
    assert result["memory_warmed"]["gib"] == 0.05 and "memory: 0.05 GiB" in run.stderr
    # the warm-up run: the same command, its output beside the measured run's
    assert result["warm_run"]["returncode"] == 0 and "warm-up run: exit 0" in run.stderr
    assert "trained 40,000 rows" in (tmp_path / "scale.warm.log").read_text()
    # nothing but the generated data in --data: the log and the workers' reports beside --json
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
        "test.svm", "train.svm", "truth.json"]
    assert (tmp_path / "scale.log").stat().st_size > 0
    assert json.loads((tmp_path / "scale.workers.json").read_text())["worker_reports"]
    assert f"the run's output: {tmp_path / 'scale.log'}" in run.stderr
    assert result["log"] == str(tmp_path / "scale.log") and result["rows"] == 40000
    assert "nan" not in run.stdout


def test_without_json_the_outputs_go_to_a_new_temporary_folder_not_the_data(
        tmp_path: Path) -> None:
    import argparse
    import shutil
    import tempfile

    log, reports = bench_scale.output_paths(argparse.Namespace(json=None, mode="cluster"))
    try:
        assert log.parent == reports.parent and log.parent.parent == Path(tempfile.gettempdir())
        assert log.parent.name.startswith("bench_scale_") and not any(log.parent.iterdir())
    finally:
        shutil.rmtree(log.parent)
    log, reports = bench_scale.output_paths(
        argparse.Namespace(json=tmp_path / "run.json", mode="single"))
    assert (log, reports) == (tmp_path / "run.log", tmp_path / "run.workers.json")


def test_the_rows_are_the_data_folders(tmp_path: Path) -> None:
    """``--data`` given: the figures are per the rows of its file, not ``--rows``."""
    train = tmp_path / "train.svm"
    train.write_text("1 1:1\n0 2:1\n1 3:1")  # the last line without a newline counts
    assert bench_scale.rows_in(tmp_path, train) == 3
    (tmp_path / "truth.json").write_text(json.dumps({"config": {"rows": 7}}))
    assert bench_scale.rows_in(tmp_path, train) == 7


def test_a_process_not_running_yet_at_20_percent_has_no_figure_not_nan(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A short run: a worker seen first after 20 % of the run printed 'nan' at 20 %
    and a growth after 20 % of '+nan'."""
    samples = [{"t": t, "pos": None, "cpu": 0.0,
                "rss_mib": {"main:1": 100.0 + t, **({"worker:2": 50.0} if t >= 5 else {})}}
               for t in range(11)]
    result = bench_scale.summarize({"wall_seconds": 10.0, "samples": samples}, 100, 1000)
    worker = result["rss_mib"]["worker:2"]
    assert worker["at_20pct"] is None and worker["growth_after_20pct"] is None
    assert worker["at_50pct"] == 50.0 and result["rss_mib"]["main:1"]["growth_after_20pct"] == 8
    json.dumps(result, allow_nan=False)  # plain JSON
    bench_scale._print({**result, "mode": "cluster", "rows": 1000, "bits": 16,
                        "load_average_before": (0, 0, 0), "load_average_after": (0, 0, 0),
                        "train_output": [], "log": "x.log"})
    out = capsys.readouterr().out
    assert "nan" not in out
    (line,) = [line for line in out.splitlines() if line.startswith("worker:2")]
    assert line.split() == ["worker:2", "-", "50", "50", "50", "-"]
    assert "-: the process was not running yet" in out


def test_a_failed_warm_up_run_stops_the_benchmark_before_the_measured_run(
        tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", "200", "--test-rows", "10", "--bits", "12",
         "--data", str(tmp_path / "data"), "--warm-run", "--json", str(out), "--",
         "--batch-size", "0"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1, run.stderr[-2000:]
    assert "the warm-up run failed (exit 2" in run.stderr and "no measured run" in run.stderr
    assert "--batch-size" in (tmp_path / "scale.warm.log").read_text()
    assert not out.exists() and "$ " not in run.stderr.split("warm-up run failed")[-1]
