"""benchmarks/accept_issue12.sh: the acceptance commands, wired to a stand-in Python."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "accept_issue12.sh"


def _fake_python(tmp_path: Path, fail: str = "") -> tuple[Path, Path]:
    """A 'python' that records its arguments (one line per call) and fails for ``fail``."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                    f'case "$*" in *{fail or "no-such-script"}*) exit 3;; esac\necho ran "$1"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake, calls


def test_every_item_runs_with_its_command_and_the_log_says_so(tmp_path: Path) -> None:
    fake, calls = _fake_python(tmp_path, fail="bench_wire.py")
    data20 = tmp_path / "d20"
    data20.mkdir()
    (data20 / "train.svm").write_text("1 1:1\n")
    out = tmp_path / "out"
    res = subprocess.run(["bash", str(SCRIPT), str(out), str(data20)], capture_output=True,
                         text=True, env=dict(os.environ, PYTHON=str(fake)), timeout=60)
    assert res.returncode == 0, res.stderr
    lines = calls.read_text().splitlines()
    scripts = [line.split()[0].rsplit("/", 1)[-1] for line in lines]
    assert scripts == ["bench_cluster.py", "bench_cluster.py", "bench_wire.py", "bench_ssp.py",
                       "bench_handout.py", *["bench_scale.py"] * 4, "bench_cluster_cpu.py",
                       "bench_merge.py", "accept_summary.py"]
    assert "--rows 5000000" in lines[1] and f"--data {data20}" in lines[5]
    assert "--mode cluster" in lines[6] and "--servers 2 --workers 2" in lines[6]
    # item 6: the first runs as the machine is; the second one process with memory
    # warmed, the cluster right after a warm-up run
    assert ["--warm-memory 2" in line for line in lines[5:9]] == [False, False, True, False]
    assert ["--warm-run" in line for line in lines[5:9]] == [False, False, False, True]
    log = (out / "log").read_text()
    assert log.count("   rc 0 ") == 11 and log.count("   rc 3 ") == 1  # bench_wire failed
    # every benchmark that has a summary row writes its JSON where the summary reads it
    from benchmarks.accept_summary import SOURCES
    for name, *_ in SOURCES:
        assert f"--json {out / name}" in calls.read_text(), name
    assert "ran benchmarks/accept_summary.py\n== done" in res.stdout  # summary.txt, shown
    assert (out / "item5.txt").read_text().startswith("ran benchmarks/bench_cluster.py")
    assert "== done" in log


def test_without_the_20m_set_items_6_are_skipped_and_said_so(tmp_path: Path) -> None:
    fake, calls = _fake_python(tmp_path)
    out = tmp_path / "out"
    res = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHON=str(fake)), timeout=60)
    assert res.returncode == 0, res.stderr
    assert "bench_scale.py" not in calls.read_text()
    assert "item 6 and item 5 at 20M rows skipped" in (out / "log").read_text()


def test_help_and_a_missing_argument_say_how_to_use_it() -> None:
    """--help is asked for: the usage, exit 0 (it was 2); no argument: a usage error."""
    for args in (["--help"], ["-h"]):
        res = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True)
        assert res.returncode == 0 and "usage: bash benchmarks/accept_issue12.sh" in res.stdout
    res = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 2 and "usage: bash benchmarks/accept_issue12.sh" in res.stderr


def _acceptance_jsons(out: Path, *, cluster_20m: float, vw: float) -> None:
    """Every JSON file accept_summary.py reads, small, with known figures."""
    def write(name: str, data: object) -> None:
        (out / name).write_text(json.dumps(data))

    write("item1.json", {"a9a": {"orders": {
        "file": {"single": 0.32, "cluster": {"N=2 s=0": [0.0002, 0.0004], "N=4 s=0": [0.0030]}},
        "shuffle 1": {"single": 0.32, "cluster": {"N=2 s=0": [0.0000], "N=4 s=0": [-0.0010]}},
    }}})
    ssp = [{"scenario": "transient", "staleness": s, "pass_seconds": p, "final_logloss": ll}
           for s, p, ll in (("0", 4.8, 0.4190), ("3", 2.7, 0.4191), ("3", 2.9, 0.4193))]
    write("item3.json", {"one_process": 0.4190, "target": 0.4220, "runs": ssp})
    write("item4.json", [{"staleness": "3", "split": "units", "runs": {
        "clean": [{"wall": 2.0}, {"wall": 2.2}], "straggler": [{"wall": 2.1}, {"wall": 2.9}]}}])
    write("shard.json", [{"keys": 34000, "format": "binary", "server_mkv_per_cpu_s": 58.7},
                         {"keys": 34000, "format": "json", "server_mkv_per_cpu_s": 2.3}])
    for name, single, rows in (("item5.json", 0.65, 1_000_000), ("item5_5m.json", 2.2, 50_000)):
        write(name, {"rows": rows, "single": {"wall_seconds": single},
                     "vw": {"wall_seconds": single * vw},
                     "clusters": [{"workers": 2, "wall_seconds": single / 0.45}]})
    rounds = [{"wall_seconds": 7.5}, {"wall_seconds": 7.6}, {"wall_seconds": 7.7}]
    write("item5_20m.json", {"rows": 20_000_000, "trees": {"checkout": {
        "single": rounds, "cluster": [{"wall_seconds": r["wall_seconds"] / cluster_20m}
                                      for r in rounds]}}})
    rss = {"p:1": {"growth_after_20pct": 7.0}, "p:2": {"growth_after_20pct": 51.0}}
    write("item6_single_1.json", {"last_over_first": 5.388, "rows": 20_000_000,
                                  "rss_mib": {**rss, "p:3": {"growth_after_20pct": None}}})
    write("item6_single_2.json", {"last_over_first": 0.973, "memory_warmed": True,
                                  "rss_mib": rss})
    write("item6_cluster_2.json", {"last_over_first": 1.254, "trained_last_over_first": 0.987,
                                   "memory_warmed": None, "warm_run": {"returncode": 0},
                                   "rss_mib": rss})
    (out / "item6_cluster_1.json").write_text("{ cut short")


def test_the_summary_judges_every_goal_from_the_json_files(tmp_path: Path) -> None:
    from benchmarks.accept_summary import main, summary

    _acceptance_jsons(tmp_path, cluster_20m=0.82, vw=3.34)
    rows = [(r[0], r[2], r[4]) for r in summary(tmp_path)]
    # item 1: the worst setting's mean of order medians: (0.0030 + -0.0010) / 2, judged by
    # that mean (said in the goal), the worst single run shown and flagged
    (figure, verdict), = [(f, v) for i, f, v in rows if i == "1"]
    assert figure == ("+0.0010 (1 of 4 order medians above +0.001; worst single run +0.0030, "
                      "above +0.001)")
    assert verdict == "met"
    assert [r[3] for r in summary(tmp_path) if r[0] == "1"] == ["mean over orders <= +0.001"]
    assert [(f, v) for i, f, v in rows if i == "3"] == [
        ("1.71x; +0.00020 vs one process", "met")]  # 4.8 / 2.8; 0.4192 - 0.4190
    assert [(f, v) for i, f, v in rows if i == "4"] == [("1.19x (2.10 -> 2.50 s)", "met")]
    item5 = [(f, v) for i, f, v in rows if i == "5"]
    assert ("58.7M", "met") in item5
    assert [v for f, v in item5 if f.startswith("3.34x")] == ["met", "met"]  # 1M, 5M vs VW
    assert [v for f, v in item5 if f.startswith("0.45x")] == ["NOT MET", "NOT MET"]
    assert ("0.82x (rounds 0.82 / 0.82 / 0.82)", "met") in item5
    item6 = [(f, v) for i, f, v in rows if i == "6"]
    assert ("0.973 (largest RSS growth after 20 %: +51 MiB)", "met") in item6
    assert ("0.987 (largest RSS growth after 20 %: +51 MiB)", "met") in item6  # rows trained
    assert ("5.388 (largest RSS growth after 20 %: +51 MiB)", "NOT MET") in item6
    assert [f.split(":")[0] for f, v in item6 if v == "not run"] == [
        "item6_cluster_1.json unreadable"]
    # and the other way: a slow cluster at 20M and one process slower than 2.5x VW
    _acceptance_jsons(tmp_path, cluster_20m=0.77, vw=2.4)
    verdicts = [(r[2].split()[0], r[4]) for r in summary(tmp_path) if r[0] == "5"]
    assert ("0.77x", "NOT MET") in verdicts and verdicts.count(("2.40x", "NOT MET")) == 2
    (tmp_path / "item3.json").unlink()
    assert [r[2:] for r in summary(tmp_path) if r[0] == "3"] == [("no item3.json", "", "not run")]
    assert main([str(tmp_path)]) == 0


def test_the_summary_labels_the_sizes_the_json_files_say(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 50k-row bench_cluster.py JSON was labelled '5M rows' (the acceptance's size)."""
    from benchmarks.accept_summary import main, summary

    _acceptance_jsons(tmp_path, cluster_20m=0.82, vw=3.34)
    what = [r[1] for r in summary(tmp_path)]
    assert "one process vs Vowpal Wabbit, 1M rows (median walls)" in what
    assert "one process vs Vowpal Wabbit, 50k rows (median walls)" in what
    assert "1 server + 2 workers vs one process, 20M rows (checkout)" in what
    assert not any("5M rows" in w for w in what)
    assert [w for w in what if w.startswith("one process, run 1")] == [
        "one process, run 1, 20M rows, as the machine was: last tenth / first "
        "(the file's tenths)"]
    assert [w for w in what if w.startswith("one process, run 2")] == [
        "one process, run 2, rows not recorded, memory warmed: last tenth / first "
        "(the file's tenths)"]
    assert [w.split(": ")[0] for w in what if "run 2" in w and "workers" in w] == [
        "2 shards + 2 workers, run 2, rows not recorded, after a warm-up run"]
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "item 1: the verdict is by the worst setting's mean over the row orders" in out
