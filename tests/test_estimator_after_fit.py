"""FTRLClassifier after fit: set_params on a fitted model (bits, the hyper-parameters,
dtype), the command line's model files (no classes recorded) and odd parameter types."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.datasets import load_svmlight_file, make_classification  # noqa: E402

from ftrl_ps.core.ftrl import FTRL  # noqa: E402
from ftrl_ps.core.modelio import load_model  # noqa: E402
from ftrl_ps.core.params import FTRLParams  # noqa: E402
from ftrl_ps.learn.estimator import FTRLClassifier  # noqa: E402
from tests.conftest import REPO, run_cli  # noqa: E402
from tests.test_estimator import _libsvm  # noqa: E402

#: QA's reproduction (segfault, exit 139, before the fix) and the paths around it;
#: a child process, so that memory corruption fails this test instead of killing pytest
_BITS_CHANGED = """
import numpy as np
from ftrl_ps import FTRLClassifier
from ftrl_ps.data.batch import Batch
X = np.eye(200)[np.arange(2000) % 200]; y = np.arange(2000) % 2
clf = FTRLClassifier(bits=6).fit(X, y)
before = clf.predict_proba(X[:3])
clf.set_params(bits=16)
calls = {"predict_proba": lambda: clf.predict_proba(X[:3]), "predict": lambda: clf.predict(X),
         "decision_function": lambda: clf.decision_function(X),
         "score": lambda: clf.score(X, y), "partial_fit": lambda: clf.partial_fit(X, y)}
for name, call in calls.items():
    for _ in range(20 if name == "partial_fit" else 1):
        try:
            call()
            print(name, "no error")
        except ValueError as exc:
            print(name, "ValueError:", exc)
clf.set_params(bits=6)  # back to the fitted value: all is well again
assert np.array_equal(clf.predict_proba(X[:3]), before)
# rows beyond the model (as a bits change used to make) stop at the wrappers' checks
bad = Batch(np.zeros(1, np.float32), np.array([0, 1]), np.array([5000], np.int32),
            np.ones(1, np.float32))
clf._rows = lambda X, reset, y=None: (bad, y)
for name in ("predict_proba", "decision_function", "partial_fit"):
    try:
        getattr(clf, name)(*((X[:1], y[:1]) if name == "partial_fit" else (X[:1],)))
        print("outside", name, "no error")
    except ValueError as exc:
        print("outside", name, "ValueError:", exc)
"""


def test_changing_bits_after_fit_is_a_clear_error_not_a_crash() -> None:
    res = subprocess.run([sys.executable, "-c", _BITS_CHANGED], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    lines = res.stdout.splitlines()
    for name in ("predict_proba", "predict", "decision_function", "score", "partial_fit"):
        assert f"{name} ValueError: bits changed from 6 to 16 since fit; call fit" in lines[
            [i for i, line in enumerate(lines) if line.startswith(name + " ")][0]]
    assert "no error" not in res.stdout
    for name in ("predict_proba", "decision_function", "partial_fit"):
        assert f"outside {name} ValueError: indices must be in [0, 64)" in lines


def test_hyper_parameters_set_after_fit_apply_at_the_next_partial_fit(tmp_path: Path) -> None:
    X, y = make_classification(n_samples=600, n_features=10, random_state=7)
    clf = FTRLClassifier(bits=8).fit(X[:300], y[:300])
    fitted = clf.predict_proba(X)
    clf.set_params(alpha=0.5, beta=2.0, l1=0.1, l2=0.5, dtype="float64")
    # the fitted model predicts until training continues
    np.testing.assert_array_equal(clf.predict_proba(X), fitted)
    clf.partial_fit(X[300:], y[300:])
    new = FTRLParams(alpha=0.5, beta=2.0, l1=0.1, l2=0.5)
    assert clf.model_.params == new and clf.model_.state.dtype == np.float64
    # = the fitted state, cast, trained on under the new settings
    ref = FTRLClassifier(bits=8).fit(X[:300], y[:300]).model_
    ref.params, ref.state, ref.dtype = new, ref.state.astype(np.float64), "float64"
    rows = clf._rows(X[300:], reset=False)[0]
    ref.fit_rows(y[300:].astype(np.float32), rows.indptr, rows.indices, rows.values)
    np.testing.assert_array_equal(clf.model_.state, ref.state)
    # the model file and get_params agree
    back = FTRLClassifier.load(clf.save(tmp_path / "m.ftrl"))
    assert back.get_params()["alpha"] == 0.5 and back.model_.dtype == "float64"
    with pytest.raises(ValueError, match="dtype"):
        clf.set_params(dtype="float16").partial_fit(X, y)


def test_a_command_line_model_takes_its_files_labels(tmp_path: Path) -> None:
    path = _libsvm(tmp_path)  # labels -1/+1
    model = tmp_path / "cli.ftrl"
    res = run_cli("train", str(path), "--model", str(model), "--bits", "12", "--alpha", "0.3",
                  "--l1", "0.2", "--epochs", "3", "-q")
    assert res.returncode == 0, res.stderr
    X, y = load_svmlight_file(str(path), zero_based=True, n_features=3000)
    assert sorted(set(y)) == [-1.0, 1.0]
    y01 = (y > 0).astype(int)
    clf = FTRLClassifier.load(model)
    expected = FTRLClassifier.load(model).score(X, y01)
    assert expected > 0.6
    assert clf.score(X, y) == expected  # -1 is the negative class, as in the file
    clf.partial_fit(X, y)  # and it continues training on the file's own labels
    assert clf.classes_.tolist() == [0, 1]
    with pytest.raises(ValueError, match="labels must be"):
        clf.partial_fit(X, y * 2)
    # load(classes=...) names them: predict gives the file's labels
    named = FTRLClassifier.load(model, classes=[1, -1])
    assert named.classes_.tolist() == [-1, 1]
    assert set(named.predict(X)) <= {-1, 1} and named.score(X, y) == expected
    named.partial_fit(X, y)
    assert load_model(named.save(tmp_path / "named.ftrl")).training["classes"] == [-1, 1]
    # the first classes given to partial_fit are taken too
    adopted = FTRLClassifier.load(model).partial_fit(X, y, classes=[-1, 1])
    assert adopted.classes_.tolist() == [-1, 1]
    with pytest.raises(ValueError, match="differ from the classes"):
        FTRLClassifier.load(tmp_path / "named.ftrl", classes=[0, 1])


def test_numpy_scalar_parameters_and_boolean_classes(tmp_path: Path) -> None:
    X, y = make_classification(n_samples=300, n_features=6, random_state=8)
    clf = FTRLClassifier(alpha=np.float32(0.25), l1=np.float32(0.5), bits=10).fit(X, y == 1)
    assert clf.model_.params.alpha == float(np.float32(0.25))
    assert clf.classes_.tolist() == [False, True]
    back = FTRLClassifier.load(clf.save(tmp_path / "b.ftrl"))
    assert back.classes_.dtype == np.bool_
    np.testing.assert_array_equal(back.predict(X), clf.predict(X))
    assert isinstance(FTRL(4, FTRLParams(beta=np.float32(2))).params.beta, float)
