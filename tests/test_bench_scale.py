"""benchmarks/bench_scale.py: the tenths of the rows trained (cluster mode) from
shard 0's status and the workers' reports; a tiny cluster run end to end (no
test of the figures' size)."""

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


def _samples(points: list[tuple[float, int | None]]) -> list[dict[str, object]]:
    return [{"t_trained": t, "trained": r} for t, r in points]


def test_even_training_gives_equal_tenths() -> None:
    # 100 rows/s from t=1 (epoch 50 + 1) to t=11, sampled every second
    points = [(float(t), int(100 * (t - 1))) for t in range(2, 11)]
    reports = [{"started_at": 51.0, "finished_at": 61.0, "rows": 600},
               {"started_at": 51.2, "finished_at": 60.5, "rows": 400}]
    r = bench_scale.trained_tenths(_samples(points), 50.0, reports)
    assert r["trained_rows_per_s_by_tenth"] == pytest.approx([100.0] * 10)
    assert r["trained_last_over_first"] == pytest.approx(1.0)
    assert r["trained_seconds"] == pytest.approx(10.0)


def test_samples_outside_the_training_span_and_missing_answers_are_left_out() -> None:
    # before the first step (a count of a previous registration cannot move the
    # start) and after the end; None: the status did not answer
    inside = [(float(t), 100 * (t - 1)) for t in range(2, 11)]
    points = [(0.5, 999), (3.0, None), (12.0, 7), *inside]
    reports = [{"started_at": 1.0, "finished_at": 11.0, "rows": 1000}]
    r = bench_scale.trained_tenths(_samples(points), 0.0, reports)
    # 100 rows/s from the first step to the last
    assert r["trained_rows_per_s_by_tenth"] == pytest.approx([100.0] * 10)


def test_a_slow_start_shows_in_the_first_tenth_only() -> None:
    points = [(3.0, 100), (4.0, 200), (5.0, 300), (10.0, 800), (11.0, 900)]
    reports = [{"started_at": 0.0, "finished_at": 12.0, "rows": 1000}]
    r = bench_scale.trained_tenths(_samples(points), 0.0, reports)
    assert r["first_tenth_trained_rows_per_s"] == pytest.approx(100 / 3)
    assert r["trained_rows_per_s_by_tenth"][1:] == pytest.approx([100.0] * 9)
    assert r["trained_last_over_first"] == pytest.approx(3.0)


def test_too_few_answers_within_the_training_give_no_figures() -> None:
    # the curve would be a straight line from the first step to the last: equal
    # tenths that no answer of the servers measured
    reports = [{"started_at": 0.0, "finished_at": 10.0, "rows": 1000}]
    few = [(float(t), 100 * t) for t in range(1, bench_scale.MIN_ANSWERS)]
    assert bench_scale.trained_tenths(_samples(few), 0.0, reports) == {}
    assert bench_scale.trained_tenths(_samples([(0.5, None), (11.0, 1000)]), 0.0, reports) == {}
    enough = [(float(t), 100 * t) for t in range(1, bench_scale.MIN_ANSWERS + 1)]
    assert bench_scale.trained_tenths(_samples(enough), 0.0, reports) != {}


def test_no_reports_or_no_rows_give_no_figures() -> None:
    assert bench_scale.trained_tenths(_samples([(1.0, 5)]), 0.0, []) == {}
    assert bench_scale.trained_tenths(
        _samples([(1.0, 0)]), 0.0, [{"started_at": 0.0, "finished_at": 1.0, "rows": 0}]) == {}


def test_the_timelines_tenths_sum_the_workers_rows() -> None:
    # worker a: 100 rows/s from t=1 to 11; worker b: 50 rows/s from 3 to 11 (400 rows,
    # resumed at 100): 150 rows/s while both train
    reports = [{"timeline": [[51.0 + t, 100 * t] for t in range(11)]},
               {"timeline": [[53.0, 100], [55.0, 200], [61.0, 500]]}]
    r = bench_scale.timeline_tenths(50.0, reports)
    rates = r["timeline_rows_per_s_by_tenth"]
    assert r["timeline_seconds"] == pytest.approx(10.0)
    assert rates[0] == pytest.approx(100.0)  # 140 rows by t=2.4: a alone
    assert rates[-1] == pytest.approx(150.0)
    assert r["timeline_last_over_first"] == pytest.approx(1.5)
    # every tenth is 140 rows: the time the tenths take adds up to the training
    assert sum(140 / v for v in rates) == pytest.approx(10.0)


def test_a_report_without_a_timeline_gives_no_timeline_figures() -> None:
    assert bench_scale.timeline_tenths(0.0, []) == {}
    assert bench_scale.timeline_tenths(0.0, [{"timeline": [[1.0, 0], [2.0, 10]]},
                                             {"rows": 5}]) == {}
    assert bench_scale.timeline_tenths(0.0, [{"timeline": [[1.0, 0], [2.0, 0]]}]) == {}


def test_flags_after_the_separator_name_the_token() -> None:
    assert bench_scale._flag_value(["--token", "a", "--l1", "1"], "--token") == "a"
    assert bench_scale._flag_value(["--token=b"], "--token") == "b"
    assert bench_scale._flag_value(["--token"], "--token") is None
    assert bench_scale._flag_value(["--tokens", "x"], "--token") is None


@pytest.mark.parametrize("token_flags", [[], ["--token", "a-token-of-the-user"]])
def test_a_tiny_cluster_run_reports_the_tenths_of_the_rows_trained(
    tmp_path: Path, token_flags: list[str]
) -> None:
    out = tmp_path / "scale.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--mode", "cluster", "--rows", "40000", "--test-rows",
         "1000", "--bits", "16", "--data", str(tmp_path / "data"), "--interval", "0.05",
         "--json", str(out), "--", "--batch-size", "500", *token_flags,
         # workers that sleep before every tick: a training long enough for the
         # status to be asked a dozen times (the tenths need MIN_ANSWERS)
         "--straggle-prob", "1", "--straggle-delay", "0.05"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
    result = json.loads(out.read_text())
    asked = [s["trained"] for s in result["samples"] if s.get("trained") is not None]
    # the status answered with the script's token, and counted up to the rows trained
    assert asked and max(asked) <= 40_000 and asked == sorted(asked)
    assert len(result["trained_rows_per_s_by_tenth"]) == 10
    assert all(v > 0 for v in result["trained_rows_per_s_by_tenth"])
    assert 0 < result["trained_seconds"] < result["wall_seconds"]
    # the workers' own timelines give the tenths too, over about the same span
    assert len(result["timeline_rows_per_s_by_tenth"]) == 10
    assert all(v > 0 for v in result["timeline_rows_per_s_by_tenth"])
    assert result["timeline_seconds"] == pytest.approx(result["trained_seconds"], abs=0.5)
    assert "by the workers' step timelines" in run.stdout
    assert "rows/s by tenth of the rows trained" in run.stdout
