"""benchmarks/accept_issue12.sh: the acceptance commands, wired to a stand-in Python."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

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
                       "bench_merge.py"]
    assert "--rows 5000000" in lines[1] and f"--data {data20}" in lines[5]
    assert "--mode cluster" in lines[6] and "--servers 2 --workers 2" in lines[6]
    # item 6: the first runs as the machine is, the second with memory warmed
    assert ["--warm-memory 2" in line for line in lines[5:9]] == [False, False, True, True]
    log = (out / "log").read_text()
    assert log.count("   rc 0 ") == 10 and log.count("   rc 3 ") == 1  # bench_wire failed
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
    for args in ([], ["--help"]):
        res = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True)
        assert res.returncode == 2 and "usage: bash benchmarks/accept_issue12.sh" in res.stdout
