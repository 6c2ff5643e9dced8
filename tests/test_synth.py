"""Tests of the synthetic data generator (ftrl_ps.data.synth) and ``ftrl-ps gen``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from ftrl_ps.cli import main
from ftrl_ps.data.synth import (
    BLOCK_ROWS,
    SynthConfig,
    format_rows,
    generate,
    make_design,
    true_weights,
)
from ftrl_ps.errors import ConfigError, DataError


def _reference_format(labels, milli, slots) -> bytes:
    """Slow, obvious formatter: the kernel must agree with it byte for byte."""
    lines = []
    for i in range(len(labels)):
        tokens = [str(int(labels[i]))]
        for j, m in enumerate(milli[i]):
            if m > 0:
                text = f"{m / 1000:.3f}".rstrip("0").rstrip(".")
                tokens.append(f"{j}:{text}")
        uniq, counts = np.unique(slots[i], return_counts=True)
        tokens += [f"{s}:{c}" for s, c in zip(uniq, counts, strict=True)]
        lines.append(" ".join(tokens) + "\n")
    return "".join(lines).encode()


def _parse(path: Path) -> list[tuple[int, list[int], list[float]]]:
    rows = []
    for line in path.read_text().splitlines():
        label, *tokens = line.split(" ")
        pairs = [t.split(":") for t in tokens]
        rows.append((int(label), [int(i) for i, _ in pairs], [float(v) for _, v in pairs]))
    return rows


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SynthConfig, dict]:
    config = SynthConfig(rows=3000, test_rows=2000, seed=7, bits=16)
    out = tmp_path_factory.mktemp("small")
    return out, config, generate(out, config)


def test_format_rows_matches_reference() -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 50).astype(np.uint8)
    milli = rng.integers(0, 12000, (50, 4)) * rng.integers(0, 2, (50, 4))
    milli[0] = [1000, 1500, 1050, 1005]  # trailing-zero corner cases
    slots = np.sort(rng.integers(4, 12, (50, 6)), axis=1)  # many duplicates
    assert format_rows(labels, milli, slots) == _reference_format(labels, milli, slots)
    empty = np.zeros((0, 3), np.int64)
    assert format_rows(np.zeros(0, np.uint8), empty, empty) == b""


@pytest.mark.parametrize(
    "labels, milli, slots",
    [
        (np.array([2], np.uint8), np.zeros((1, 1), np.int64), np.array([[5]])),
        (np.array([1], np.int64), np.zeros((1, 1), np.int64), np.array([[5]])),
        (np.array([1], np.uint8), np.array([[-1]]), np.array([[5]])),
        (np.array([1], np.uint8), np.zeros((1, 1), np.int64), np.array([[6, 5]])),
        (np.array([1], np.uint8), np.zeros((1, 1), np.int64), np.array([[0]])),
        (np.array([1, 0], np.uint8), np.zeros((1, 1), np.int64), np.array([[5]])),
    ],
)
def test_format_rows_rejects_bad_input(labels, milli, slots) -> None:
    with pytest.raises(DataError):
        format_rows(labels, milli, slots)


def test_same_seed_gives_identical_files_and_prefixes(small, tmp_path: Path) -> None:
    out, config, _ = small
    generate(tmp_path / "again", config)
    for name in ("train.svm", "test.svm", "truth.json"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes()
    shorter = SynthConfig(rows=1000, test_rows=10, seed=7, bits=16)
    generate(tmp_path / "short", shorter)
    lines = (out / "train.svm").read_bytes().splitlines(keepends=True)
    assert (tmp_path / "short" / "train.svm").read_bytes() == b"".join(lines[:1000])
    other = SynthConfig(rows=1000, test_rows=10, seed=8, bits=16)
    generate(tmp_path / "other", other)
    assert (tmp_path / "other" / "train.svm").read_bytes() != b"".join(lines[:1000])


def test_rows_beyond_one_block_are_written(tmp_path: Path) -> None:
    rows = BLOCK_ROWS + 5
    generate(tmp_path, SynthConfig(rows=rows, test_rows=1, bits=12))
    data = (tmp_path / "train.svm").read_bytes()
    assert data.count(b"\n") == rows and data.endswith(b"\n")
    assert len(set(data.splitlines()[:BLOCK_ROWS + 5])) > BLOCK_ROWS  # blocks differ


@pytest.mark.parametrize("bits", [8, 16])
def test_every_line_is_sorted_libsvm(tmp_path: Path, bits: int) -> None:
    config = SynthConfig(rows=1500, test_rows=200, seed=3, bits=bits)
    generate(tmp_path, config)
    for name in ("train.svm", "test.svm"):
        assert (tmp_path / name).read_bytes().endswith(b"\n")
        rows = _parse(tmp_path / name)
        assert len(rows) == (config.rows if name == "train.svm" else config.test_rows)
        for label, idx, val in rows:
            assert label in (0, 1)
            assert all(a < b for a, b in zip(idx, idx[1:], strict=False))
            assert 0 <= idx[0] and idx[-1] < 2**bits
            assert min(val) > 0
            cats = [v for i, v in zip(idx, val, strict=True) if i >= config.n_numeric]
            assert sum(cats) == config.n_categorical  # merged collisions keep the count
            assert len(idx) <= config.fields
    rows = _parse(tmp_path / "train.svm")
    mean_features = np.mean([len(idx) for _, idx, _ in rows])
    if bits == 8:  # 26 fields in 243 slots: collisions are merged into values > 1
        assert any(v > 1 for _, idx, val in rows for i, v in zip(idx, val, strict=True) if i >= 13)
    else:
        assert 33 <= mean_features <= 39


def test_truth_matches_the_files(small) -> None:
    out, config, truth = small
    on_disk = json.loads((out / "truth.json").read_text())
    assert on_disk["config"] == {**truth["config"]} and "seconds" not in on_disk
    design = make_design(SynthConfig(**on_disk["config"]))
    assert design.bias == pytest.approx(on_disk["model"]["bias"], abs=0)
    rows = _parse(out / "test.svm")
    y = np.array([label for label, _, _ in rows])
    score = np.array(
        [design.bias + true_weights(design, np.array(idx)) @ np.array(val) for _, idx, val in rows]
    )
    prob = 1.0 / (1.0 + np.exp(-score))
    stats = on_disk["stats"]
    assert stats["bayes_test_logloss"] == pytest.approx(log_loss(y, prob), rel=1e-9)
    assert stats["bayes_test_auc"] == pytest.approx(roc_auc_score(y, prob), rel=1e-9)
    assert stats["test_positive_rate"] == pytest.approx(y.mean())
    assert stats["bayes_test_logloss"] < stats["constant_test_logloss"] - 0.05
    assert 0.7 < stats["bayes_test_auc"] < 0.95
    weights = true_weights(design, np.arange(config.n_numeric, 2**config.bits))
    assert 0.4 < np.mean(weights == 0) < 0.6  # a sparse true model


@pytest.mark.parametrize("rate", [0.2, 0.1])
def test_positive_rate_near_target(tmp_path: Path, rate: float) -> None:
    truth = generate(tmp_path, SynthConfig(rows=20000, test_rows=5000, seed=1, bits=18,
                                           positive_rate=rate))
    assert truth["stats"]["train_positive_rate"] == pytest.approx(rate, abs=0.015)
    assert truth["stats"]["bayes_test_logloss"] < truth["stats"]["constant_test_logloss"]


def test_design_spans_cardinalities_and_power_law() -> None:
    design = make_design(SynthConfig(rows=1, test_rows=1))
    assert design.cardinalities.min() == 10 and design.cardinalities.max() == 10**6
    assert design.numeric_weights.shape == (13,) and (design.numeric_weights == 0).any()


@pytest.mark.parametrize(
    "kwargs",
    [{"rows": 0}, {"test_rows": -1}, {"bits": 7}, {"bits": 31}, {"fields": 1},
     {"positive_rate": 0.0}, {"seed": -1}, {"bits": 8, "fields": 1000}],
)
def test_config_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        SynthConfig(**{"rows": 10, "test_rows": 10, **kwargs}).validate()


def test_cli_writes_files_and_reports_bayes_logloss(tmp_path: Path, capsys) -> None:
    code = main(["gen", str(tmp_path), "--rows", "500", "--test-rows", "300", "--bits", "12",
                 "--quiet"])
    assert code == 0
    out = capsys.readouterr()
    assert "logloss" in out.out and out.err == ""
    assert {p.name for p in tmp_path.iterdir()} == {"train.svm", "test.svm", "truth.json"}


def test_an_interrupted_run_leaves_the_old_set_whole(tmp_path: Path, monkeypatch) -> None:
    generate(tmp_path, SynthConfig(rows=300, test_rows=200, bits=12, seed=0))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    import ftrl_ps.data.synth as synth

    real = synth._write_split

    def write_then_stop(design, path, split, rows, progress, keep):
        result = real(design, path, split, rows, progress, keep)
        if path.name == "test.svm":  # train.svm's new part is written by now
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(synth, "_write_split", write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        generate(tmp_path, SynthConfig(rows=300, test_rows=200, bits=12, seed=7))
    # no seed-7 train.svm beside seed-0 test.svm and truth, and no parts left
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize(
    "bad",
    [["--rows", "-5"], ["--test-rows", "0"], ["--bits", "40"], ["--bits", "2"],
     ["--positive-rate", "1.5"], ["--rows", "many"], ["--fields", "1"]],
)
def test_cli_bad_arguments_exit_2(tmp_path: Path, bad: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["gen", str(tmp_path), *bad])
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err
    assert not (tmp_path / "train.svm").exists()


def test_cli_help_in_a_real_process() -> None:
    done = subprocess.run([sys.executable, "-m", "ftrl_ps", "gen", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--positive-rate" in done.stdout
