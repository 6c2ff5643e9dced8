"""ftrl-ps tune: the search (learn/search.py) against single-model training, the
budget, the command, and train --params-from (one process and a local cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.metrics import logloss
from ftrl_ps.core.modelio import load_model
from ftrl_ps.core.multi import compact_keys
from ftrl_ps.core.params import FTRLParams
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.libsvm import read_all
from ftrl_ps.errors import ConfigError, DataError
from ftrl_ps.learn import search
from ftrl_ps.learn.tune import tuned_settings
from tests.conftest import run_cli
from tests.test_ftrl import random_rows


def _rows(seed: int = 0, rows: int = 1500, slots: int = 200) -> Batch:
    rng = np.random.default_rng(seed)
    labels, indptr, indices, values = random_rows(rng, rows, slots, max_nnz=10)
    w = rng.normal(size=slots)  # labels from a true model, so there is signal
    margin = np.add.reduceat(w[indices] * values, indptr[:-1]) * (np.diff(indptr) > 0)
    labels = (rng.random(rows) < 1 / (1 + np.exp(-margin))).astype(np.float32)
    return Batch(labels, indptr, indices, values)


def _take(rows: Batch, order: np.ndarray) -> Batch:
    """The rows ``order`` of ``rows``, copied in that order."""
    parts = [slice(rows.indptr[r], rows.indptr[r + 1]) for r in order]
    indptr = np.concatenate([[0], np.cumsum([p.stop - p.start for p in parts])])
    return Batch(rows.labels[order], indptr.astype(np.int64),
                 np.concatenate([rows.indices[p] for p in parts]),
                 np.concatenate([rows.values[p] for p in parts]))


def test_candidates_start_with_the_defaults_and_stay_in_range() -> None:
    cands = search.candidates(40)
    assert cands[0] == FTRLParams()
    assert len(set(cands)) == 40
    for p in cands[1:]:
        for name, (lo, hi) in search.RANGES.items():
            assert lo * 0.999 <= getattr(p, name) <= hi * 1.001
    alphas = sorted(p.alpha for p in cands[1:])  # spread over the whole range
    assert alphas[0] < 0.02 and alphas[-1] > 10


@settings(max_examples=40, deadline=None)
@given(budget=st.floats(0.5, 50), max_epochs=st.integers(1, 20),
       features=st.integers(10**3, 10**9))
def test_plan_stays_within_the_budget(budget: float, max_epochs: int, features: int) -> None:
    train, held = int(features * 0.8), features - int(features * 0.8)
    try:
        p = search.plan(budget, max_epochs, features, train, held)
    except ConfigError:
        return
    fixed = search.fixed_cost(features, p.rungs[-1])
    assert fixed + p.cost(train, held) <= budget * search.default_run_cost(features) + 1e-6
    assert p.rungs[0] == 1 and p.rungs[-1] <= max_epochs
    assert 1 <= p.candidates <= search.MAX_CANDIDATES


def test_a_small_budget_tries_fewer_settings() -> None:
    big = search.plan(10, 16, 10**8, 8 * 10**7, 2 * 10**7)
    small = search.plan(6, 16, 10**8, 8 * 10**7, 2 * 10**7)
    assert small.rungs[-1] * small.candidates < big.rungs[-1] * big.candidates
    with pytest.raises(ConfigError, match="too small"):
        search.plan(0.5, 4, 10**8, 8 * 10**7, 2 * 10**7)


@pytest.mark.parametrize("threads", [1, 2])
def test_every_trial_equals_training_that_setting_alone(threads: int) -> None:
    rows = _rows()
    slots, compact = compact_keys(rows.indices)
    data = Batch(rows.labels, rows.indptr, compact, rows.values)
    train, held = search.holdout_split(rows.rows, 0.25, "every")
    schedule = search.Plan(8, (1, 2, 4))
    cands = search.candidates(8)
    result = search.successive_halving(data, slots.size + 1, train, held, cands, schedule,
                                       threads=threads)
    # successive halving: 8 settings x 1 pass, 4 x 2 passes, 2 x 4 passes
    per_candidate = {c: len([t for t in result.trials if t.candidate == c]) for c in range(8)}
    assert sorted(per_candidate.values()) == [1, 1, 1, 1, 2, 2, 4, 4]
    # each trial's held-out loss is that of the setting trained alone (float64 kernel)
    tr, he = _take(rows, train), _take(rows, held)
    for trial in result.trials:
        model = FTRL(8, trial.params, dtype="float64")
        for _ in range(trial.epochs):
            model.fit_rows(tr.labels, tr.indptr, tr.indices, tr.values)
        expected = logloss(he.labels, model.predict_rows(he.indptr, he.indices, he.values))
        assert trial.holdout_logloss == pytest.approx(expected, rel=1e-4)
    # the survivors of each rung were the best of the one before
    first = sorted((t.holdout_logloss, t.candidate) for t in result.trials if t.epochs == 1)
    assert {c for _, c in first[:4]} == {t.candidate for t in result.trials if t.epochs == 2}
    best = result.best
    assert best.holdout_logloss == min(t.holdout_logloss for t in result.trials)
    assert best.holdout_logloss <= result.best_of(0).holdout_logloss


def test_holdout_split_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError, match="validation"):
        search.holdout_split(10, 0.2, "random")
    with pytest.raises(ConfigError, match="between 0 and 1"):
        search.holdout_split(10, 1.0, "every")
    with pytest.raises(ConfigError, match="at most 0.5"):  # was quietly one row in 2
        search.holdout_split(10, 0.6, "every")
    assert search.holdout_split(10, 0.6, "tail")[1].size == 6
    with pytest.raises(ConfigError, match="too few"):
        search.holdout_split(1, 0.2, "tail")


def test_tune_command_and_train_params_from(tmp_path: Path, synth_small: Path) -> None:
    train = synth_small / "train.svm"
    tuned = tmp_path / "tuned.ftrl"
    report = tmp_path / "tune.json"
    res = run_cli("tune", str(train), "--model", str(tuned), "--bits", "18",
                  "--metrics-json", str(report), "--max-epochs", "4")
    assert res.returncode == 0, res.stderr
    assert "held-out logloss" in res.stdout and "(defaults)" in res.stdout
    assert "held back: one row in 5" in res.stderr
    out = json.loads(report.read_text())
    chosen = out["best"]
    assert chosen["holdout_logloss"] <= chosen["defaults_holdout_logloss"]
    assert out["cost"] <= out["budget_cost"]
    assert len(out["table"]) == chosen["candidates"]
    saved = load_model(tuned)
    assert saved.training["tuned"]["epochs"] == chosen["epochs"] <= 4
    assert saved.params.as_dict() == {k: chosen[k] for k in ("alpha", "beta", "l1", "l2")}
    settings_ = tuned_settings(tuned)
    assert settings_.tuned and settings_.epochs == chosen["epochs"] and settings_.bits == 18
    # the tuned model beats the defaults on the test rows
    test = read_all(synth_small / "test.svm", 18)
    model = saved.to_ftrl()
    tuned_loss = logloss(test.labels, model.predict_rows(test.indptr, test.indices, test.values))
    default = FTRL(18)
    rows = read_all(train, 18)
    default.fit_rows(rows.labels, rows.indptr, rows.indices, rows.values)
    default_loss = logloss(test.labels,
                           default.predict_rows(test.indptr, test.indices, test.values))
    assert tuned_loss < default_loss + 0.001
    # train --params-from rebuilds exactly the model tune saved
    again = tmp_path / "again.ftrl"
    res = run_cli("train", str(train), "--params-from", str(tuned), "--model", str(again), "-q")
    assert res.returncode == 0, res.stderr
    rebuilt = load_model(again)
    assert rebuilt.bits == 18 and rebuilt.training["epochs"] == chosen["epochs"]
    np.testing.assert_array_equal(rebuilt.keys, saved.keys)
    np.testing.assert_array_equal(rebuilt.n, saved.n)
    np.testing.assert_array_equal(rebuilt.z, saved.z)
    # an explicit flag wins over the tuned value
    res = run_cli("train", str(train), "--params-from", str(tuned), "--epochs", "1",
                  "--l1", "0.5", "--model", str(again), "-q")
    assert res.returncode == 0, res.stderr
    assert load_model(again).training["epochs"] == 1
    assert load_model(again).params.l1 == 0.5


@pytest.mark.slow
def test_a_local_cluster_takes_the_tuned_settings(tmp_path: Path, synth_small: Path) -> None:
    train = synth_small / "train.svm"
    tuned = tmp_path / "tuned.ftrl"
    res = run_cli("tune", str(train), "--model", str(tuned), "--bits", "18", "-q",
                  "--max-epochs", "2", "--budget", "6")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "cluster.ftrl"
    res = run_cli("train", str(train), "--params-from", str(tuned), "--workers", "2",
                  "--model", str(out), "-q")
    assert res.returncode == 0, res.stderr
    cluster, chosen = load_model(out), load_model(tuned)
    assert cluster.params == chosen.params and cluster.bits == 18
    assert cluster.training["epochs"] == chosen.training["tuned"]["epochs"]
    assert cluster.training["params_from"] == str(tuned)


def test_max_rows_searches_the_first_rows_and_trains_on_all(tmp_path: Path,
                                                            synth_small: Path) -> None:
    """--max-rows: the search sees the first N rows only; the model is trained on all
    of TRAIN, streamed, and is the model 'train --params-from' makes."""
    train = synth_small / "train.svm"
    tuned, report = tmp_path / "tuned.ftrl", tmp_path / "tune.json"
    res = run_cli("tune", str(train), "--model", str(tuned), "--bits", "18", "--max-rows",
                  "5000", "--max-epochs", "2", "--metrics-json", str(report))
    assert res.returncode == 0, res.stderr
    assert "tuning on the first 5,000 rows (4,000 train, 1,000 held back" in res.stderr
    assert "training the model on all of" in res.stderr
    out = json.loads(report.read_text())
    assert out["rows_searched"] == 5000 and out["rows"] == 20000 and out["max_rows"] == 5000
    saved = load_model(tuned)
    assert saved.training["rows"] == 20000 * out["best"]["epochs"]
    again = tmp_path / "again.ftrl"
    res = run_cli("train", str(train), "--params-from", str(tuned), "--model", str(again), "-q")
    assert res.returncode == 0, res.stderr
    rebuilt = load_model(again)
    for name in ("keys", "n", "z"):
        np.testing.assert_array_equal(getattr(rebuilt, name), getattr(saved, name))
    # N at or above TRAIN's rows: every row is searched, as without the flag
    res = run_cli("tune", str(train), "--model", str(tmp_path / "all.ftrl"), "--bits", "18",
                  "--max-rows", "20000", "--max-epochs", "1", "--budget", "4")
    assert res.returncode == 0, res.stderr
    assert "tuning on the 20,000 rows" in res.stderr
    assert "training the model on all of" not in res.stderr


def test_max_rows_reports_the_bad_lines_of_all_of_train(tmp_path: Path,
                                                        synth_small: Path) -> None:
    """A malformed line after the first N rows: skipped and reported with
    --skip-bad-lines (the final model's pass over all of TRAIN meets it; the bad
    lines in the report are that pass's), an error without."""
    lines = (synth_small / "train.svm").read_text().splitlines()[:600]
    train = tmp_path / "bad.svm"
    train.write_text("\n".join(lines[:500] + ["1 7:oops"] + lines[500:]) + "\n")
    report = tmp_path / "tune.json"
    res = run_cli("tune", str(train), "--model", str(tmp_path / "m.ftrl"), "--bits", "18",
                  "--max-rows", "400", "--max-epochs", "1", "--budget", "4",
                  "--skip-bad-lines", "--metrics-json", str(report))
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("skipped 1 malformed line(s)") == 1  # by the final pass
    assert "line 501: '7:oops'" in res.stderr
    out = json.loads(report.read_text())
    assert out["bad_lines"] == 1 and out["rows"] == 600 and out["rows_searched"] == 400
    res = run_cli("tune", str(train), "--model", str(tmp_path / "n.ftrl"), "--bits", "18",
                  "--max-rows", "400", "--max-epochs", "1", "--budget", "4")
    assert res.returncode != 0 and "bad.svm:501: feature value" in res.stderr
    assert not (tmp_path / "n.ftrl").exists()


@pytest.mark.parametrize("max_rows", [None, 5000])
def test_reading_train_shows_its_progress(synth_small: Path, max_rows: int | None) -> None:
    """tune's read of TRAIN (~30 s for 20M rows) shows rows read and the share done:
    of the file, or of --max-rows."""
    import io

    from ftrl_ps.learn.progress import Progress
    from ftrl_ps.learn.tune import TuneOptions, _read

    out = io.StringIO()
    options = TuneOptions(train=str(synth_small / "train.svm"), model="m", chunk_mb=1,
                          max_rows=max_rows)
    rows, left_out, _, _ = _read(options, 18, Progress("reading", stream=out, log_interval=0))
    lines = out.getvalue().splitlines()
    assert rows.rows == (max_rows or 20000) and left_out == (max_rows is not None)
    assert len(lines) >= 2 and all(line.startswith("reading: ") for line in lines)
    shares = [int(line.rsplit(" ", 1)[1].rstrip("%")) for line in lines]
    assert shares == sorted(shares) and shares[0] < 100 and shares[-1] == 100
    assert lines[-1].startswith(f"reading: {rows.rows / 1000:.2f}k rows")


def test_first_rows_cuts_batches_and_tells_what_was_left_out() -> None:
    from ftrl_ps.learn.tune import _FirstRows

    parts = [Batch(*random_rows(np.random.default_rng(seed), n, 50))
             for seed, n in enumerate((7, 5, 9))]
    for limit, rows, left_out in ((None, 21, False), (21, 21, False), (12, 12, True),
                                  (10, 10, True), (3, 3, True), (40, 21, False)):
        cut = _FirstRows(iter(parts), limit)
        got = Batch.collect(cut)
        assert got.rows == rows and cut.left_out == left_out, limit
        whole = Batch.concat(parts)
        np.testing.assert_array_equal(got.indices, whole.indices[:whole.indptr[rows]])
        np.testing.assert_array_equal(got.labels, whole.labels[:rows])
    with pytest.raises(DataError):
        parts[0].head(8)


def test_a_train_file_larger_than_the_memory_is_warned_about(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ftrl_ps.learn import tune

    path = tmp_path / "t.svm"
    path.write_text("1 1:1\n")
    options = tune.TuneOptions(train=str(path), model=str(tmp_path / "m"))
    tune._warn_if_too_big(options, tune._size(options.train))
    assert capsys.readouterr().err == ""  # 6 bytes: no warning
    monkeypatch.setattr(tune.os.path, "getsize", lambda _p: 1 << 50)
    tune._warn_if_too_big(options, tune._size(options.train))
    assert "may run out: --max-rows N" in capsys.readouterr().err
    tune._warn_if_too_big(tune.TuneOptions(train=str(path), model="m", max_rows=10), 1 << 50)
    assert capsys.readouterr().err == ""  # --max-rows given: the user chose


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--holdout", "1.5"], 2, "between 0 and 1"),
        (["--budget", "0"], 2, "positive number"),
        (["--validation", "random"], 2, "invalid choice"),
        (["--budget", "0.01"], 2, "too small"),
        (["--max-rows", "1"], 2, "--max-rows must be >= 2"),
        (["--max-rows", "0"], 2, "positive"),
    ],
)
def test_bad_tune_arguments(tmp_path: Path, synth_small: Path, args: list[str], code: int,
                            message: str) -> None:
    res = run_cli("tune", str(synth_small / "train.svm"), "--model", str(tmp_path / "m"), *args)
    assert res.returncode == code and message in res.stderr
    assert not (tmp_path / "m").exists()


def test_tune_needs_a_file_with_rows(tmp_path: Path) -> None:
    empty = tmp_path / "empty.svm"
    empty.write_text("# nothing\n")
    res = run_cli("tune", str(empty), "--model", str(tmp_path / "m"))
    assert res.returncode == 1 and "0 row(s)" in res.stderr
    res = run_cli("tune", "-", "--model", str(tmp_path / "m"))
    assert res.returncode == 2 and "not stdin" in res.stderr
    res = run_cli("train", str(empty), "--params-from", str(tmp_path / "none.ftrl"))
    assert res.returncode == 2 and "--params-from model file not found" in res.stderr


@pytest.mark.parametrize("defaults_rank", [0, 19])
def test_the_table_says_how_many_settings_it_leaves_out(defaults_rank: int) -> None:
    import io
    from types import SimpleNamespace

    from ftrl_ps.core.params import FTRLParams
    from ftrl_ps.learn.tune import SHOWN, _table

    # 20 candidates; candidate c scores (c + shift) % 20, the defaults (0) at rank defaults_rank
    loss = {c: 0.3 + 0.001 * ((c + defaults_rank) % 20) for c in range(20)}
    trials = [SimpleNamespace(candidate=c, params=FTRLParams(alpha=0.1 + c), epochs=1,
                              holdout_logloss=loss[c]) for c in range(20)]
    best = {c: t for c, t in enumerate(trials)}
    result = SimpleNamespace(trials=trials, best_of=lambda c: best[c])
    out = io.StringIO()
    _table(result, trials[0], out)
    lines = out.getvalue().splitlines()
    assert f"... {20 - SHOWN - (defaults_rank >= SHOWN)} more" in out.getvalue()
    assert sum("(defaults)" in line for line in lines) == 1
    assert len(lines) == 1 + SHOWN + (defaults_rank >= SHOWN) + 1  # header, rows, the note


def test_tune_reads_a_folder_or_glob_of_parts_as_train_does(synth_small: Path,
                                                             tmp_path: Path) -> None:
    lines = (synth_small / "train.svm").read_text().splitlines(keepends=True)
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(4):  # was: 'cannot open parts/part-*: No such file or directory'
        (parts / f"part-{i}").write_text("".join(lines[i * 5000:(i + 1) * 5000]))
    models = {}
    for name, source in (("file", synth_small / "train.svm"), ("dir", parts),
                         ("glob", parts / "part-*")):
        models[name] = tmp_path / f"{name}.ftrl"
        res = run_cli("tune", str(source), "--model", str(models[name]), "--budget", "2",
                      "--max-epochs", "2", "--bits", "18", "-q")
        assert res.returncode == 0, res.stderr
    first = load_model(models["file"])
    for name in ("dir", "glob"):
        other = load_model(models[name])
        assert other.params == first.params and np.array_equal(other.z, first.z)


@pytest.mark.parametrize("quiet", [[], ["-q"]])
def test_metrics_json_to_stdout_keeps_stdout_json_alone(tmp_path: Path, quiet: list[str]) -> None:
    """``--metrics-json -``: the table and the summary go to stderr, as train's do."""
    rng = np.random.default_rng(3)
    train = tmp_path / "t.svm"
    train.write_text("".join(
        f"{int(rng.random() < 0.3)} " + " ".join(f"{j}:1" for j in sorted(
            rng.choice(300, size=5, replace=False))) + "\n" for _ in range(600)))
    res = run_cli("tune", str(train), "--model", str(tmp_path / "m.ftrl"), "--bits", "12",
                  "--budget", "4", "--max-epochs", "2", "--metrics-json", "-", *quiet)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["rows"] == 600 and out["table"]
    assert "held-out logloss" in res.stderr and "best: alpha" in res.stderr
    assert "saved to" in res.stderr
