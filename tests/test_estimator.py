"""FTRLClassifier: scikit-learn's estimator checks, the command line's predictions,
Pipeline / GridSearchCV, sparse coef_, partial_fit, the model file."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

from scipy import sparse  # noqa: E402
from sklearn.datasets import load_svmlight_file, make_classification  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import MaxAbsScaler  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

from ftrl_ps.core.modelio import load_model  # noqa: E402
from ftrl_ps.learn.estimator import EXPECTED_FAILED_CHECKS, FTRLClassifier  # noqa: E402
from tests.conftest import run_cli  # noqa: E402


@pytest.mark.parametrize(
    "params",
    [{}, {"bits": 3, "epochs": 3, "l1": 0.0, "dtype": "float64"}],
    ids=["defaults", "hashed"],
)
def test_passes_scikit_learns_estimator_checks(params: dict) -> None:
    assert len(EXPECTED_FAILED_CHECKS) <= 3
    results = check_estimator(
        FTRLClassifier(**params), expected_failed_checks=EXPECTED_FAILED_CHECKS, on_fail=None
    )
    failed = {r["check_name"]: repr(r["exception"]) for r in results if r["status"] == "failed"}
    assert not failed
    # skipped only where the environment lacks something, never by our choice
    for r in results:
        if r["status"] == "skipped":
            assert "not installed" in str(r["exception"]) or "ARRAY_API" in str(r["exception"])
    assert sum(r["status"] == "passed" for r in results) >= 50


def _libsvm(tmp_path: Path, rows: int = 600, seed: int = 0) -> Path:
    """A small libsvm file with integer indices (some beyond 2**10) and real values."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rows):
        idx = np.sort(rng.choice(3000, size=rng.integers(1, 12), replace=False))
        val = rng.normal(size=idx.size).round(3)
        val[val == 0] = 0.5
        y = 1 if val.sum() + 0.3 * (idx < 100).sum() > 0 else -1
        lines.append(" ".join([f"{y:+d}", *(f"{i}:{v}" for i, v in zip(idx, val, strict=True))]))
    path = tmp_path / "data.svm"
    path.write_text("\n".join(lines) + "\n")
    return path


def _cli_predictions(tmp_path: Path, train: Path, test: Path, *flags: str) -> np.ndarray:
    model = tmp_path / "cli.ftrl"
    out = tmp_path / "cli.pred"
    res = run_cli("train", str(train), "--model", str(model), "-q", *flags)
    assert res.returncode == 0, res.stderr
    res = run_cli("predict", str(model), str(test), "-o", str(out))
    assert res.returncode == 0, res.stderr
    return np.loadtxt(out)


def test_predictions_equal_the_command_lines_with_hashed_columns(tmp_path: Path) -> None:
    """2**10 slots for 3000 columns: columns >= 1024 are hashed as the reader hashes them."""
    path = _libsvm(tmp_path)
    flags = ["--bits", "10", "--alpha", "0.3", "--l1", "0.2", "--epochs", "2"]
    expected = _cli_predictions(tmp_path, path, path, *flags)
    X, y = load_svmlight_file(str(path), zero_based=True, n_features=3000)
    clf = FTRLClassifier(bits=10, alpha=0.3, l1=0.2, epochs=2).fit(X, y)
    np.testing.assert_allclose(clf.predict_proba(X)[:, 1], expected, atol=1e-4)
    # a dense copy and lists of dicts with the same names give the same model
    dense = FTRLClassifier(bits=10, alpha=0.3, l1=0.2, epochs=2).fit(X.toarray(), y)
    np.testing.assert_allclose(dense.predict_proba(X)[:, 1], expected, atol=1e-4)
    dicts = [{str(j): float(v) for j, v in zip(r.indices, r.data, strict=True)} for r in X]
    named = FTRLClassifier(bits=10, alpha=0.3, l1=0.2, epochs=2).fit(dicts, y)
    np.testing.assert_allclose(named.predict_proba(dicts)[:, 1], expected, atol=1e-4)


def test_a9a_predictions_equal_the_command_lines(tmp_path: Path, a9a: tuple[Path, Path]) -> None:
    train, test = a9a
    expected = _cli_predictions(tmp_path, train, test)
    X, y = load_svmlight_file(str(train))  # 1-based file: columns shift by one, same model
    Xt, _ = load_svmlight_file(str(test), n_features=X.shape[1])
    clf = FTRLClassifier().fit(X, y)
    assert clf.classes_.tolist() == [-1.0, 1.0]
    np.testing.assert_allclose(clf.predict_proba(Xt)[:, 1], expected, atol=1e-4)


def test_coef_is_sparse_and_explains_the_decision_function() -> None:
    X, y = make_classification(n_samples=1500, n_features=30, n_informative=5, random_state=1)
    clf = FTRLClassifier(alpha=0.5, l1=3.0, epochs=2).fit(X, y)
    assert sparse.issparse(clf.coef_) and clf.coef_.shape == (1, 30)
    assert 0 < clf.coef_.nnz < 30  # L1 zeroes some weights exactly
    assert clf.intercept_.shape == (1,)
    margin = np.asarray(X @ clf.coef_.T.toarray()).ravel() + clf.intercept_[0]
    # rows are float32 inside (as the reader makes them), X @ coef_ is float64
    np.testing.assert_allclose(clf.decision_function(X), margin, rtol=1e-6, atol=1e-6)
    assert clf.score(X, y) > 0.65  # (a linear model reaches ~0.71 here)


def test_partial_fit_in_chunks_equals_fit() -> None:
    X, y = make_classification(n_samples=900, n_features=12, random_state=2)
    whole = FTRLClassifier(alpha=0.3).fit(X, y)
    parts = FTRLClassifier(alpha=0.3)
    for a in range(0, 900, 250):
        parts.partial_fit(X[a : a + 250], y[a : a + 250], classes=[0, 1])
    np.testing.assert_array_equal(parts.model_.state, whole.model_.state)
    with pytest.raises(ValueError, match="classes must be passed"):
        FTRLClassifier().partial_fit(X, y)


def test_pipeline_and_grid_search() -> None:
    X, y = make_classification(n_samples=1200, n_features=15, random_state=3)
    X = sparse.csr_matrix(X * 10)
    pipe = Pipeline([("scale", MaxAbsScaler()), ("ftrl", FTRLClassifier(l1=0.0))])
    search = GridSearchCV(
        pipe, {"ftrl__alpha": [0.01, 0.5], "ftrl__epochs": [1, 3]}, cv=3, scoring="neg_log_loss"
    )
    search.fit(X, y)
    assert search.best_params_ == {"ftrl__alpha": 0.5, "ftrl__epochs": 3}
    assert search.predict_proba(X).shape == (1200, 2)
    # dicts go through GridSearchCV too
    dicts = [{"f": int(v > 0), "g": str(int(w > 0))} for v, w in X[:, :2].toarray()]
    GridSearchCV(FTRLClassifier(), {"alpha": [0.1, 1.0]}, cv=2).fit(dicts, y)


def test_string_classes_save_load_and_the_command_line(tmp_path: Path) -> None:
    X, y01 = make_classification(n_samples=400, n_features=8, random_state=4)
    y = np.where(y01 == 1, "spam", "ham")
    clf = FTRLClassifier(alpha=0.4, bits=12).fit(X, y)
    assert clf.classes_.tolist() == ["ham", "spam"]
    path = clf.save(tmp_path / "m.ftrl")
    again = FTRLClassifier.load(path)
    assert again.get_params() == clf.get_params()
    np.testing.assert_array_equal(again.predict(X), clf.predict(X))
    assert load_model(path).training["classes"] == ["ham", "spam"]
    copy = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(copy.predict_proba(X), clf.predict_proba(X))
    # the command line scores with the Python model
    data = tmp_path / "x.svm"
    data.write_text("".join(
        "0 " + " ".join(f"{j}:{float(v)!r}" for j, v in enumerate(row)) + "\n" for row in X
    ))
    res = run_cli("predict", str(path), str(data))
    assert res.returncode == 0, res.stderr
    np.testing.assert_allclose(
        np.array(res.stdout.split(), float), clf.predict_proba(X)[:, 1], atol=1e-5
    )


def test_online_view_shares_the_model() -> None:
    X, y = make_classification(n_samples=300, n_features=5, random_state=5)
    clf = FTRLClassifier(alpha=0.5).fit(X, y)
    online = clf.online()
    before = clf.predict_proba(X[:1])[0, 1]
    for _ in range(20):
        online.learn_one({"0": float(X[0, 0]), "1": float(X[0, 1])}, True)
    assert clf.predict_proba(X[:1])[0, 1] > before


def test_bad_input_is_a_clear_error_and_keeps_the_model() -> None:
    X, y = make_classification(n_samples=200, n_features=6, random_state=6)
    clf = FTRLClassifier().fit(X, y)
    state = clf.model_.state.copy()
    with pytest.raises(ValueError, match="Only binary classification"):
        FTRLClassifier().fit(X, np.arange(200) % 3)
    with pytest.raises(ValueError, match="2 classes"):
        FTRLClassifier().fit(X, np.ones(200))
    with pytest.raises(ValueError, match="epochs"):
        FTRLClassifier(epochs=0).fit(X, y)
    with pytest.raises(ValueError, match="alpha"):
        FTRLClassifier(alpha=-1).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        clf.partial_fit(X[:, :4], y)
    with pytest.raises(ValueError, match="not one of classes_"):
        clf.partial_fit(X, np.full(200, 7))
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clf.partial_fit(bad, y)
    np.testing.assert_array_equal(clf.model_.state, state)
