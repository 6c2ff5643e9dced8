"""OnlineFTRL: river-style learning one example at a time, the same model as the
command line learns from the same lines, and the model file both ways."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.modelio import load_model
from ftrl_ps.errors import DataError
from ftrl_ps.learn.online import OnlineFTRL
from tests.conftest import run_cli


def _stream(rows: int, seed: int = 0) -> list[tuple[dict[str, object], int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rows):
        site = f"s{rng.integers(0, 20)}"
        hour = int(rng.integers(0, 24))
        price = round(float(rng.gamma(2.0)), 3)
        x: dict[str, object] = {"site": site, "hour": hour, "price": price, "17": 1}
        y = int(rng.random() < (0.8 if site in ("s1", "s2") else 0.2))
        out.append((x, y))
    return out


def _as_libsvm(stream: list[tuple[dict[str, object], int]]) -> str:
    lines = []
    for x, y in stream:
        tokens = [f"{k}={v}" if isinstance(v, str) else f"{k}:{v!r}" for k, v in x.items()]
        lines.append(" ".join([str(y), *tokens]))
    return "\n".join(lines) + "\n"


def test_learn_one_builds_the_model_the_command_line_builds(tmp_path: Path) -> None:
    stream = _stream(400)
    data = tmp_path / "s.svm"
    data.write_text(_as_libsvm(stream))
    cli_model = tmp_path / "cli.ftrl"
    res = run_cli("train", str(data), "--bits", "12", "--alpha", "0.3", "--model",
                  str(cli_model), "-q")
    assert res.returncode == 0, res.stderr
    online = OnlineFTRL(alpha=0.3, bits=12)
    for x, y in stream:
        online.learn_one(x, y)
    cli = load_model(cli_model)
    np.testing.assert_array_equal(online.model.touched_keys(), cli.keys)
    np.testing.assert_allclose(online.model.n[cli.keys], cli.n, rtol=1e-6)
    np.testing.assert_allclose(online.model.z[cli.keys], cli.z, rtol=1e-5, atol=1e-7)
    assert online.rows_seen == 400 and 0 < online.progressive_logloss < 0.7
    # and the file saved from Python is scored by the command line like in Python
    saved = online.save(tmp_path / "py.ftrl")
    res = run_cli("predict", str(saved), str(data))
    assert res.returncode == 0, res.stderr
    ours = [online.predict_proba_one(x)[True] for x, _ in stream]
    np.testing.assert_allclose(np.array(res.stdout.split(), float), ours, atol=1e-5)


def test_learn_many_equals_learn_one_and_batches_predict_like_one() -> None:
    stream = _stream(300, seed=1)
    one = OnlineFTRL(alpha=0.5, l1=0.1, bits=14)
    for x, y in stream:
        one.learn_one(x, bool(y))
    many = OnlineFTRL(alpha=0.5, l1=0.1, bits=14)
    xs = [x for x, _ in stream]
    ys = [1 if y else -1 for _, y in stream]  # -1/+1 labels mean the same
    many.learn_many(xs[:100], ys[:100])
    many.learn_many(xs[100:], ys[100:])
    np.testing.assert_array_equal(one.model.state, many.model.state)
    assert one.loss_sum == pytest.approx(many.loss_sum)
    probs = many.predict_proba_many(xs)
    assert probs.shape == (300, 2)
    np.testing.assert_allclose(probs[:, 1], [one.predict_proba_one(x)[True] for x in xs])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    assert many.predict_many(xs).tolist() == [one.predict_one(x) for x in xs]


def test_arrays_and_dataframes() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] > 0).astype(int)
    model = OnlineFTRL(alpha=0.5, l1=0.0, bits=10)
    for _ in range(3):
        model.learn_many(X, y)
    dense = model.predict_proba_many(X)[:, 1]
    named = [model.predict_proba_one({str(j): float(v) for j, v in enumerate(row)})[True]
             for row in X]
    np.testing.assert_allclose(dense, named)
    assert ((dense > 0.5) == y.astype(bool)).mean() > 0.9
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X, index=[f"r{i}" for i in range(200)])
    out = model.predict_proba_many(frame)
    assert list(out.columns) == [False, True] and list(out.index) == list(frame.index)
    np.testing.assert_allclose(out[True].to_numpy(), dense)


def test_save_load_and_resume_on_the_command_line(tmp_path: Path) -> None:
    stream = _stream(200, seed=3)
    model = OnlineFTRL(alpha=0.2, bits=12)
    for x, y in stream[:100]:
        model.learn_one(x, y)
    path = model.save(tmp_path / "half.ftrl")
    back = OnlineFTRL.load(path)
    assert repr(back) == repr(model)
    np.testing.assert_array_equal(back.model.state, model.model.state)
    rest = tmp_path / "rest.svm"
    rest.write_text(_as_libsvm(stream[100:]))
    res = run_cli("train", str(rest), "--resume", str(path), "--model",
                  str(tmp_path / "all.ftrl"), "-q")
    assert res.returncode == 0, res.stderr
    for x, y in stream[100:]:
        model.learn_one(x, y)
    cli = load_model(tmp_path / "all.ftrl")
    np.testing.assert_allclose(model.model.n[cli.keys], cli.n, rtol=1e-6)


def test_bad_examples_raise_and_change_nothing() -> None:
    model = OnlineFTRL(bits=8)
    model.learn_one({"a": 1}, 1)
    state = model.model.state.copy()
    with pytest.raises(DataError, match="labels must be"):
        model.learn_one({"a": 1}, 3)
    with pytest.raises(DataError, match="finite"):
        model.learn_one({"a": float("inf")}, 1)
    with pytest.raises(DataError, match="dict of features"):
        model.learn_one([("a", 1)], 1)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="labels for"):
        model.learn_many([{"a": 1}, {"b": 2}], [1])
    np.testing.assert_array_equal(model.model.state, state)
    assert model.rows_seen == 1


def test_numpy_booleans_are_labels_too() -> None:
    labels = np.array([True, False, True])
    model, ref = OnlineFTRL(bits=8), OnlineFTRL(bits=8)
    for i, y in enumerate(labels):
        model.learn_one({"a": i}, y)
        ref.learn_one({"a": i}, bool(y))
    np.testing.assert_array_equal(model.model.state, ref.model.state)


def test_load_continues_the_progressive_logloss(tmp_path: Path) -> None:
    model = OnlineFTRL(bits=10)
    for x, y in _stream(50, seed=4):
        model.learn_one(x, y)
    back = OnlineFTRL.load(model.save(tmp_path / "m.ftrl"))
    assert back.rows_seen == 50
    assert back.progressive_logloss == pytest.approx(model.progressive_logloss, rel=1e-12)
    assert load_model(back.save(tmp_path / "again.ftrl")).training["rows"] == 50


def test_a_replaced_model_hashes_into_its_own_space() -> None:
    """``model.model`` swapped for a smaller FTRL: names are hashed into its 2**4
    slots (before, learn_one wrote slots of 2**16 outside its array)."""
    model, ref = OnlineFTRL(bits=16), OnlineFTRL(bits=4)
    model.predict_proba_one({"a": 1})  # the names of 2**16 slots are cached
    model.model = FTRL(4)
    for i, (x, y) in enumerate(_stream(100, seed=5)):
        model.learn_one(x, y)
        ref.learn_one(x, y)
        if i % 10 == 0:
            assert model.predict_proba_one(x) == ref.predict_proba_one(x)
    np.testing.assert_array_equal(model.model.state, ref.model.state)
