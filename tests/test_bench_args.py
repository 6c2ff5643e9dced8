"""The list options of benchmarks/bench_ssp.py, bench_handout.py and bench_merge.py are
checked by argparse, before any data is generated or any run made: a typo is a usage
error (exit 2) naming it, not a traceback after the first runs or a silent no-op."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("script, flags, named", [
    ("bench_ssp.py", ["--scenarios", "bogus"], "unknown scenarios: bogus"),
    ("bench_ssp.py", ["--staleness", "abc"], "bad staleness values 'abc'"),
    ("bench_handout.py", ["--splits", "bogus"], "unknown splits: bogus"),
    ("bench_handout.py", ["--staleness", "3,,inf"], "comma-separated staleness"),
    ("bench_merge.py", ["--rules", "nope"], "unknown merge rules: nope"),
    ("bench_merge.py", ["--workers", "0"], "bad worker counts '0'"),
    ("bench_merge.py", ["--only", "bogus", "--gen-rows", "0"],
     "--only: unknown data set(s) bogus"),
    ("bench_merge.py", ["--only", "gen200k", "--gen-rows", "0"], "genNk needs --gen-rows"),
])
def test_a_typo_in_a_list_option_is_a_usage_error(script: str, flags: list[str],
                                                   named: str) -> None:
    run = subprocess.run([sys.executable, str(BENCHMARKS / script), *flags],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert named in run.stderr
    assert "Traceback" not in run.stderr


def test_the_list_type_keeps_the_values_and_ssp_help_shows_every_default() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import _harness as h
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert h.comma_list("staleness values", check=h.staleness)("0, 3,inf") == ["0", "3", "inf"]
    assert h.comma_list("worker counts", check=h.positive)("2,8") == ["2", "8"]
    run = subprocess.run([sys.executable, str(BENCHMARKS / "bench_ssp.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert "between snapshots (default 0.25)" in " ".join(run.stdout.split())
