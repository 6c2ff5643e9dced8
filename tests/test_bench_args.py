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


# --- bad values of the other options: usage errors (exit 2) before any run ---------

REPO = BENCHMARKS.parent


def _bench(name: str):
    """A benchmark script as a module (its ``_harness`` import needs benchmarks/ on the
    path; loaded by its own name, as its sibling imports expect)."""
    import importlib

    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way a benchmark starts work (data, VW, a child process) fails the test."""
    h = _bench("_harness")

    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a benchmark ran before its options were checked: {args}")

    for name in ("ensure_synth_data", "require_vw", "warm_page_cache", "warm_memory",
                 "run_measured"):
        monkeypatch.setattr(h, name, ran)
    monkeypatch.setattr(subprocess, "run", ran)
    monkeypatch.setattr(subprocess, "Popen", ran)


@pytest.mark.parametrize("script, flags, said", [
    ("bench_ssp", ["--rows", "5000", "--repeat", "0"], "--repeat: expected an integer >= 1"),
    ("bench_ssp", ["--repeat", "-1"], "--repeat: expected an integer >= 1"),
    ("bench_ssp", ["--rows", "0"], "--rows: expected an integer >= 4"),
    ("bench_ssp", ["--every", "0"], "--every: expected a number > 0"),
    ("bench_ssp", ["--every=-1"], "--every: expected a number > 0"),
    ("bench_handout", ["--rows", "2000", "--repeat", "0"], "--repeat: expected an integer >= 1"),
    ("bench_handout", ["--rows", "0"], "--rows: expected an integer >= 4"),
    ("bench_handout", ["--train-args=--workers=0"], "--workers is set by this benchmark"),
    ("bench_handout", ["--train-args", "--work 0"], "ambiguous option: --work"),
    ("bench_handout", ["--train-args=--bogus"], "not for ftrl-ps train: unrecognized"),
    ("bench_merge", ["--gen-rows", "2000", "--only", "gen2k", "--repeat", "0"],
     "--repeat: expected an integer >= 1"),
    ("bench_merge", ["--orders", "-1"], "--orders: expected an integer >= 0"),
    ("bench_merge", ["--gen-rows", "500"], "at least 1000"),
    ("bench_merge", ["--train-args=--merge-rule=sum"], "--merge-rule is set by this benchmark"),
    ("bench_cluster_cpu", ["--repeat", "0"], "--repeat: expected an integer >= 1"),
    ("bench_cluster_cpu", ["--workers", "0"], "--workers: expected an integer >= 1"),
    ("bench_cluster_cpu", ["--staleness", "foo"], "--staleness: expected an integer >= 0 or inf"),
    ("bench_cluster_cpu", ["--warm-memory", "-1"], "--warm-memory: expected a number >= 0"),
    ("bench_cluster_cpu", ["--extra=--workers=0"], "--extra: --workers is set by this benchmark"),
    ("bench_cluster", ["--workers", "0"], "bad worker counts '0'"),
    ("bench_cluster", ["--servers", "0"], "bad server counts '0'"),
    ("bench_cluster", ["--staleness", "-1"], "bad staleness values '-1'"),
    ("bench_cluster", ["--staleness", "3,foo"], "bad staleness values 'foo'"),
    ("bench_cluster", ["--rows", "0"], "--rows: expected an integer >= 1"),
    ("bench_cluster", ["--repeat", "0"], "--repeat: expected an integer >= 1"),
    ("bench_cluster", ["--extra", "--batch-size 10 --workers 3"],
     "--workers is set by this benchmark"),
    ("bench_scale", ["--mode", "cluster", "--workers", "0"], "--workers: expected an integer >= 1"),
    ("bench_scale", ["--servers", "0"], "--servers: expected an integer >= 1"),
    ("bench_scale", ["--warm-memory", "-1"], "--warm-memory: expected a number >= 0"),
    ("bench_scale", ["--rows", "0"], "--rows: expected an integer >= 10"),
    ("bench_scale", ["--interval", "0"], "--interval: expected a number > 0"),
    ("bench_scale", ["--mode", "single", "--", "--workers", "3"],
     "--workers is set by this benchmark"),
])
def test_a_bad_value_is_a_usage_error_before_any_run(
        script: str, flags: list[str], said: str, nothing_runs: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--repeat 0 was an IndexError / StatisticsError / KeyError after the first runs,
    --workers 0 a one-process run reported as the cluster's, bench_cluster.py's
    --staleness -1 a traceback after the VW and one-process runs."""
    if script == "bench_cluster_cpu":
        flags = ["--tree", f"here={REPO}", *flags]
    with pytest.raises(SystemExit) as exc:
        _bench(script).main(flags)
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


# --- bench_merge.py --only: a data set named and absent is an error ---------------


def test_merge_only_an_absent_data_set_is_an_error_naming_where_it_was_looked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nothing_runs: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    """It was 'skip agaricus: not in ...' and exit 0 after training the other sets."""
    merge = _bench("bench_merge")
    monkeypatch.setattr(merge, "DATA", tmp_path)
    for flags in (["--only", "agaricus", "--gen-rows", "0"],
                  ["--only", "gen1k,agaricus", "--gen-rows", "1000"]):
        with pytest.raises(SystemExit) as exc:
            merge.main(flags)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "--only: agaricus" in err
        assert str(tmp_path / "libsvm" / "agaricus_train.txt") in err
    with pytest.raises(SystemExit) as exc:  # nothing named, nothing present, nothing made
        merge.main(["--gen-rows", "0"])
    assert exc.value.code == 2 and "no data set to run" in capsys.readouterr().err


def test_merge_without_only_skips_an_absent_data_set_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    merge = _bench("bench_merge")
    monkeypatch.setattr(merge, "DATA", tmp_path)
    (tmp_path / "libsvm").mkdir()
    for name in merge.PAIRS["agaricus"]:
        (tmp_path / name).write_text("1 1:1\n")
    assert list(merge.data_sets(0)) == ["agaricus"]
    err = capsys.readouterr().err
    assert f"skip a9a: not in {tmp_path}" in err and "skip agaricus" not in err
    assert list(merge.data_sets(0, ["agaricus"])) == ["agaricus"]
    assert "skip" not in capsys.readouterr().err  # the sets not named are not 'skipped'


# --- the --train-args example in the help works as shown ---------------------------


@pytest.mark.parametrize("script, flags", [
    ("bench_merge", ["--gen-rows", "1000", "--only", "gen1k"]),
    ("bench_handout", []),
])
def test_the_train_args_example_of_the_help_works(
        script: str, flags: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The help said "e.g. '--adaptive-rounds'", and `--train-args --adaptive-rounds`
    is 'expected one argument'."""
    import re

    bench = _bench(script)
    monkeypatch.setenv("COLUMNS", "50")  # a narrow terminal: the example is not broken up
    with pytest.raises(SystemExit) as exc:
        bench._parse_args(["--help"])
    assert exc.value.code == 0
    examples = re.findall(r"--train-args=[^\s,]+", capsys.readouterr().out)
    assert examples == ["--train-args=--adaptive-rounds"]
    args = bench._parse_args([*flags, examples[0]])
    assert args.train_args == ["--adaptive-rounds"]


def test_the_number_types_of_the_harness() -> None:
    import argparse

    h = _bench("_harness")
    assert (h.positive_int("3"), h.non_negative_int("0"), h.int_at_least(4)("4")) == (3, 0, 4)
    assert (h.positive_float("0.5"), h.non_negative_float("0")) == (0.5, 0.0)
    for parse, text in ((h.positive_int, "0"), (h.positive_int, "1.5"), (h.positive_int, "x"),
                        (h.non_negative_int, "-1"), (h.int_at_least(4), "3"),
                        (h.positive_float, "0"), (h.positive_float, "nan"),
                        (h.non_negative_float, "-0.1"), (h.non_negative_float, "inf")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
    assert h.reserved_given(["--workers=2", "--stal", "3", "--worker-timeout", "1"],
                            ["--workers", "--staleness"]) == ["--workers", "--staleness"]
    assert h.train_flags_problem(["--batch-size", "10", "--adaptive-rounds"],
                                 ["--workers"]) is None
