"""End-to-end tests of the single-process commands (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ftrl_ps.cli import build_parser
from ftrl_ps.core.modelio import load_model
from tests.conftest import run_cli


def test_a9a_quality_matches_vowpal_wabbit(a9a: tuple[Path, Path], tmp_path: Path) -> None:
    train, test = a9a
    metrics = tmp_path / "m.json"
    model = tmp_path / "a9a.ftrl"
    res = run_cli(
        "train",
        str(train),
        "--test",
        str(test),
        "--model",
        str(model),
        "--metrics-json",
        str(metrics),
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(metrics.read_text())
    # Vowpal Wabbit --ftrl with the same hyper-parameters: 0.3243 / 0.9023
    assert got["test_logloss"] <= 0.326
    assert got["test_auc"] >= 0.900
    assert got["rows"] == 32561 and got["test_rows"] == 16281
    assert "logloss" in res.stdout and "AUC" in res.stdout
    ev = run_cli("eval", str(model), str(test), "--json", "-")
    assert ev.returncode == 0, ev.stderr
    again = json.loads(ev.stdout[ev.stdout.index("{") :])
    assert again["logloss"] == pytest.approx(got["test_logloss"], abs=1e-9)


def test_generated_data_train_predict_resume(synth_small: Path, tmp_path: Path) -> None:
    train, test = synth_small / "train.svm", synth_small / "test.svm"
    truth = json.loads((synth_small / "truth.json").read_text())
    m1, m2, m12 = tmp_path / "e1", tmp_path / "e2", tmp_path / "e12"
    assert run_cli("train", str(train), "--bits", "18", "--model", str(m1), "-q").returncode == 0
    two = run_cli(
        "train",
        str(train),
        "--bits",
        "18",
        "--epochs",
        "2",
        "--model",
        str(m2),
        "--test",
        str(test),
        "--metrics-json",
        str(tmp_path / "j"),
        "-q",
    )
    assert two.returncode == 0, two.stderr
    res = run_cli("train", str(train), "--resume", str(m1), "--model", str(m12), "-q")
    assert res.returncode == 0, res.stderr
    a, b = load_model(m2), load_model(m12)
    np.testing.assert_array_equal(a.keys, b.keys)
    np.testing.assert_allclose(a.n, b.n, rtol=1e-6)
    np.testing.assert_allclose(a.z, b.z, rtol=1e-6, atol=1e-6)
    got = json.loads((tmp_path / "j").read_text())
    constant = truth.get("constant_logloss") or truth.get("test", {}).get("constant_logloss")
    assert got["test_logloss"] < 0.7
    if constant:
        assert got["test_logloss"] < constant  # learns something beyond the base rate
    preds = tmp_path / "p.txt"
    pr = run_cli("predict", str(m2), str(test), "-o", str(preds))
    assert pr.returncode == 0, pr.stderr
    p = np.loadtxt(preds)
    assert p.shape == (5000,) and np.all((p > 0) & (p < 1))


def test_stdin_input(tmp_path: Path) -> None:
    data = "1 1:1 2:1\n0 3:1\n1 1:1\n"
    res = run_cli("train", "-", "--bits", "4", "--model", str(tmp_path / "m"), "-q", input=data)
    assert res.returncode == 0, res.stderr
    assert "trained 3 rows" in res.stdout
    res = run_cli("train", "-", "--epochs", "2", input=data)
    assert res.returncode == 2 and "stdin" in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["train"], "TRAIN"),
        (["train", "missing.svm"], "training data: input file not found: missing.svm"),
        (["train", "missing/*.svm"], "training data: no input files match missing/*.svm"),
        (["train", "README.md", "--test", "missing.svm"], "test data: input file not found"),
        (["train", "README.md", "--bits", "0"], "bits"),
        (["train", "README.md", "--alpha", "-1"], "alpha"),
        (["train", "README.md", "--epochs", "0"], "positive integer"),
        (["train", "README.md", "--l1", "nan"], "finite"),
        (["eval", "missing-model", "missing.svm"], "not found"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], message: str) -> None:
    res = run_cli(*args)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:1\n1 2:x\n0 3:1\n")
    res = run_cli("train", str(bad), "--bits", "4", "--model", str(tmp_path / "m"))
    assert res.returncode == 1
    assert "bad.svm:2" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "m").exists()  # nothing half-written
    ok = run_cli("train", str(bad), "--bits", "4", "--skip-bad-lines", "-q")
    assert ok.returncode == 0, ok.stderr
    assert "trained 2 rows" in ok.stdout and "skipped 1" in ok.stderr
    assert "  line 2: '2:x': feature value is not a decimal number" in ok.stderr
    corrupt = tmp_path / "corrupt.ftrl"
    corrupt.write_bytes(b"FTRLPSMD" + bytes(40))
    res = run_cli("eval", str(corrupt), str(bad))
    assert res.returncode == 1
    assert "corrupt" in res.stderr or "invalid" in res.stderr


def test_every_command_has_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in sub.choices:  # type: ignore[union-attr]
        res = run_cli(name, "--help")
        assert res.returncode == 0 and "usage: ftrl-ps " + name in res.stdout


def test_the_help_says_which_inputs_are_read() -> None:
    """QA: TEST accepts what TRAIN does; which files of a directory are read;
    memory:// (one process's files) is not offered on the command line."""
    helps = {name: " ".join(run_cli(name, "--help").stdout.split())
             for name in ("train", "worker", "eval")}
    assert "TEST libsvm data to score: a file (.gz is fine), a directory or glob" in helps["eval"]
    assert "directory, glob or URL, as TRAIN" in helps["train"]
    assert "starts with `.` or `_` (_SUCCESS, .crc, _tmp/)" in helps["train"]
    assert "symlinked sub-directories are not followed" in helps["train"]
    assert "names start with '.' or '_' are skipped" in helps["worker"]
    assert not any("memory://" in text for text in helps.values())


def test_command_exit_codes_and_output_survive_the_fast_exit(tmp_path: Path) -> None:
    """``ftrl-ps`` leaves via os._exit after main(): output must still be complete."""
    data = tmp_path / "d.svm"
    data.write_text("1 1:1 2:0.5\n0 3:1\n" * 50)
    ok = subprocess.run(
        [sys.executable, "-m", "ftrl_ps", "train", str(data), "--bits", "8",
         "--model", str(tmp_path / "m")],
        capture_output=True, text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert "model saved to" in ok.stdout.splitlines()[-1]
    (tmp_path / "nope").write_bytes(b"not a model")
    bad = subprocess.run(
        [sys.executable, "-m", "ftrl_ps", "eval", str(tmp_path / "nope"), str(data)],
        capture_output=True, text=True,
    )
    assert bad.returncode == 1 and "error" in bad.stderr


def test_train_loads_only_what_it_needs(tmp_path: Path) -> None:
    """Start-up: `ftrl-ps train` builds its own parser only, and neither the other
    commands, the HTTP stack nor scipy/yaml (numba's optional probes) are imported."""
    parser = build_parser("train")
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == ["train"]  # type: ignore[union-attr]
    data = tmp_path / "d.svm"
    data.write_text("1 1:1 2:0.5\n0 3:1\n" * 20)
    probe = (
        "import sys; from ftrl_ps.cli import main; "
        f"code = main(['train', {str(data)!r}, '--bits', '8', '-q']); "
        "tops = {m.split('.')[0] for m in sys.modules}; "
        "print(sorted(m for m in sys.modules if m.startswith('ftrl_ps.cli.'))); "
        "print(sorted(tops & {'fastapi', 'starlette', 'uvicorn', 'httpx', 'pydantic', "
        "'pydantic_settings', 'scipy', 'sklearn', 'yaml'}))"
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    cli_modules, heavy = res.stdout.strip().splitlines()[-2:]
    assert "serve_cmd" not in cli_modules and "tune_cmd" not in cli_modules
    assert "train_cmd" in cli_modules
    assert heavy == "[]"


def test_predict_output_is_written_whole(synth_small: Path, tmp_path: Path) -> None:
    """(Over its own input it is refused: test_an_output_that_is_an_input_...)"""
    test = synth_small / "test.svm"
    model = tmp_path / "m.ftrl"
    assert run_cli("train", str(synth_small / "train.svm"), "--bits", "18", "--model",
                   str(model), "-q").returncode == 0
    expected = run_cli("predict", str(model), str(test)).stdout
    victim = tmp_path / "victim.svm"
    victim.write_bytes(test.read_bytes())
    res = run_cli("predict", str(model), str(test), "-o", str(victim))
    assert res.returncode == 0, res.stderr
    assert victim.read_text() == expected  # replaced whole
    # a bad line ends the run: the old output stays as it was, nothing half-written
    bad = tmp_path / "bad.svm"
    bad.write_text(test.read_text() + "oops\n")
    res = run_cli("predict", str(model), str(bad), "-o", str(victim))
    assert res.returncode == 1 and "label must be" in res.stderr
    assert victim.read_text() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.svm", "m.ftrl", "victim.svm"]
    # skipped lines have no output line: said, with where the first one was
    res = run_cli("predict", str(model), str(bad), "--skip-bad-lines", "-o", "-")
    assert res.returncode == 0 and res.stdout == expected
    assert "skipped 1 malformed line" in res.stderr and "do not match" in res.stderr


def test_outputs_are_checked_before_the_run_and_errors_are_one_line(
    synth_small: Path, tmp_path: Path
) -> None:
    train, test = str(synth_small / "train.svm"), str(synth_small / "test.svm")
    (tmp_path / "none.ftrl").write_bytes(b"not read: the output is checked first")
    for args in (["train", train, "--model", str(tmp_path)],  # a folder
                 ["train", train, "--metrics-json", str(tmp_path / "nodir" / "m.json")],
                 ["predict", str(tmp_path / "none.ftrl"), test, "-o", str(tmp_path)]):
        res = run_cli(*args)
        assert res.returncode == 1, (args, res.stderr)
        assert "Traceback" not in res.stderr and "trained" not in res.stdout
        assert "cannot" in res.stderr.splitlines()[-1], res.stderr
    # a bad --test file no longer costs the model: it is saved first
    bad = tmp_path / "bad.svm"
    bad.write_text("nonsense\n")
    model = tmp_path / "m.ftrl"
    res = run_cli("train", train, "--bits", "18", "-q", "--model", str(model), "--test", str(bad))
    assert res.returncode == 1 and "label must be" in res.stderr
    assert load_model(model).bits == 18
    # JSON alone on stdout with '-': it parses; the summary line went to stderr
    res = run_cli("eval", str(model), test, "--json", "-")
    assert json.loads(res.stdout)["rows"] == 5000 and "logloss" in res.stderr
    res = run_cli("train", train, "--bits", "18", "-q", "--metrics-json", "-")
    assert json.loads(res.stdout)["rows"] == 20000 and "trained" in res.stderr
    empty = tmp_path / "empty.svm"
    empty.write_text("")
    res = run_cli("eval", str(model), str(empty))
    assert res.returncode == 1 and "no rows to evaluate" in res.stderr


def test_a_closed_stdout_pipe_ends_quietly(synth_small: Path, tmp_path: Path) -> None:
    model = tmp_path / "m.ftrl"
    assert run_cli("train", str(synth_small / "train.svm"), "--bits", "18", "--model",
                   str(model), "-q").returncode == 0
    proc = subprocess.Popen(  # `ftrl-ps predict ... | head -0`
        [sys.executable, "-m", "ftrl_ps", "predict", str(model), str(synth_small / "train.svm")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(timeout=120)
    assert err == b"" and proc.returncode == 141  # as a program killed by SIGPIPE


def test_a_state_that_overflowed_is_not_saved(tmp_path: Path) -> None:
    data = tmp_path / "ts.svm"  # nanosecond timestamps as feature values
    data.write_text("".join(f"{i % 2} 1:{1.7e18 + i * 1e9:.6e} 2:1\n" for i in range(2000)))
    model = tmp_path / "ts.ftrl"
    res = run_cli("train", str(data), "--bits", "10", "-q", "--model", str(model))
    assert res.returncode == 1 and "--dtype float64" in res.stderr
    assert not model.exists()


def test_cluster_flags_without_workers_are_said_to_be_ignored(synth_small: Path) -> None:
    train = str(synth_small / "train.svm")
    res = run_cli("train", train, "--bits", "18", "-q", "--servers", "4", "--staleness", "0")
    assert res.returncode == 0
    assert "--servers, --staleness: for a local cluster only (--workers N)" in res.stderr
    assert "local cluster only" not in run_cli("train", train, "--bits", "18", "-q").stderr


def test_no_rows_to_train_on_is_an_error_and_saves_nothing(tmp_path: Path) -> None:
    data = tmp_path / "bad.svm"
    data.write_text("nonsense\n")
    model = tmp_path / "m.ftrl"
    res = run_cli("train", str(data), "--skip-bad-lines", "--model", str(model), "-q")
    assert res.returncode == 1 and "no rows to train on (every line was skipped)" in res.stderr
    assert not model.exists()  # was: an empty model, exit 0, 'logloss nan'
    res = run_cli("train", "-", "--test", "-", input="1 3:1\n")
    assert res.returncode == 2 and "cannot both be stdin" in res.stderr


@pytest.mark.parametrize("args, flag", [
    (["eval", "{missing}", "{data}"], "model"),
    (["predict", "{missing}", "{data}"], "model"),
    (["train", "{data}", "--resume", "{missing}"], "--resume model"),
])
def test_a_missing_model_file_is_a_usage_error_before_any_work(
        tmp_path: Path, args: list[str], flag: str) -> None:
    """Exit 2 with one line, as for a missing data file (it was exit 1 after the
    kernels were loaded: bad arguments are 2, bad data or a corrupt model 1)."""
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n")
    missing = tmp_path / "nothing.ftrl"
    res = run_cli(*[a.format(missing=missing, data=data) for a in args])
    assert res.returncode == 2, res.stderr
    assert f"error: {flag} file not found: {missing}" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["train", "{data}", "--model", "{data}"], "--model {data} is also the training data"),
    (["train", "{data}", "--test", "{test}", "--model", "{test}"],
     "--model {test} is also the test data"),
    (["train", "{data}", "--model", "{out}", "--metrics-json", "{out}"],
     "--metrics-json {out} is also the --model file"),
    (["predict", "{model}", "{data}", "-o", "{data}"], "--output {data} is also the input"),
    (["predict", "{model}", "{data}", "-o", "{model}"], "--output {model} is also the model"),
    (["eval", "{model}", "{test}", "--json", "{test}"], "--json {test} is also the test data"),
    (["tune", "{data}", "--model", "{data}"], "--model {data} is also the training data"),
])
def test_an_output_that_is_an_input_or_another_output_is_refused(
        tmp_path: Path, args: list[str], message: str) -> None:
    """'train X --model X' replaced the training data with the model, exit 0 (found
    by QA, session 32): each such command now exits 2 and leaves the files alone."""
    paths = {"data": tmp_path / "d.svm", "test": tmp_path / "t.svm",
             "model": tmp_path / "m.ftrl", "out": tmp_path / "out"}
    paths["data"].write_text("1 1:1\n0 2:1\n" * 20)
    paths["test"].write_text("1 1:1\n")
    assert run_cli("train", str(paths["data"]), "--model", str(paths["model"]),
                   "-q").returncode == 0
    before = {k: p.read_bytes() for k, p in paths.items() if p.exists()}
    res = run_cli(*[a.format(**paths) for a in args])
    assert res.returncode == 2, res.stderr
    assert message.format(**paths) in res.stderr
    assert {k: p.read_bytes() for k, p in paths.items() if p.exists()} == before


def test_sigterm_stops_a_single_process_train_as_ctrl_c_does(tmp_path: Path) -> None:
    """It was killed silently (-15) while a local cluster says 'interrupted', 130."""
    import signal
    import time

    from tests.conftest import REPO

    data = tmp_path / "big.svm"
    data.write_bytes(b"1 1:1 2:0.5 3:1\n0 4:1 5:1\n" * 400_000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftrl_ps", "train", str(data), "--epochs", "50",
         "--model", str(tmp_path / "m.ftrl"), "--bits", "10"],
        cwd=REPO, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while "train:" not in proc.stderr.readline():  # the progress line: training
        assert time.monotonic() < deadline and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err
    assert not (tmp_path / "m.ftrl").exists()


def test_eval_of_one_class_says_why_there_is_no_auc(tmp_path: Path) -> None:
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n0 2:1\n" * 20)
    assert run_cli("train", str(data), "--model", str(tmp_path / "m"), "-q").returncode == 0
    ones = tmp_path / "ones.svm"
    ones.write_text("1 1:1\n1 2:1\n")
    res = run_cli("eval", str(tmp_path / "m"), str(ones))
    assert res.returncode == 0 and "AUC - (the data holds one class only)" in res.stdout
