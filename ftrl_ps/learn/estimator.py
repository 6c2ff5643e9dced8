"""``FTRLClassifier``: FTRL-Proximal logistic regression as a scikit-learn estimator.

Needs scikit-learn (``pip install 'ftrl-ps[sklearn]'``); the rest of ftrl-ps
does not. The model is the one ``ftrl-ps train`` learns: the same kernels,
hashing and defaults, so on the same rows and hyper-parameters its
predictions equal the command line's (the tests check 1e-4 on a9a).

Inputs: scipy.sparse matrices (CSR is used as is, others are converted),
dense arrays and DataFrames (column ``j`` is the feature ``"j"``, i.e. libsvm
index ``j``), or lists of dicts of named features, hashed exactly as the
command line hashes the tokens of a libsvm line (:mod:`ftrl_ps.data.features`).
Labels: any two classes; ``classes_[1]`` (the larger, as sorted by
``numpy.unique``) is the positive class, so ``-1/+1`` and ``0/1`` mean what
they mean in a libsvm file.

Fitted attributes: ``classes_``, ``model_`` (the :class:`~ftrl_ps.FTRL`),
``coef_`` (a 1 x n_features ``scipy.sparse.csr_matrix``: FTRL-Proximal's L1
makes most weights exactly 0; 1 x 2**bits slots after fitting on dicts),
``intercept_`` and ``n_features_in_`` (array inputs).

Parameters changed after fitting
--------------------------------
``set_params`` on a fitted estimator works as in scikit-learn's online
estimators: ``fit`` always starts a new model from the current parameters.
``alpha``, ``beta``, ``l1``, ``l2`` and ``dtype`` take effect at the next
``partial_fit``, which continues the fitted model under them (FTRL-Proximal's
``n``/``z`` state is valid under any of them; a new ``dtype`` casts it); until
then the predict methods and :meth:`FTRLClassifier.save` use the fitted
model's values (``model_.params``). ``bits`` is the size of the model, which
only ``fit`` can change: after ``set_params(bits=...)`` ``partial_fit`` and
every predict method raise ``ValueError("bits changed from A to B since fit;
call fit ...")``.

Model files
-----------
:meth:`FTRLClassifier.save` records ``classes_`` in the file's header. A file
of the command line records none: ``FTRLClassifier.load(path, classes=[-1, 1])``
names them; without ``classes`` the loaded estimator has ``classes_ = [0, 1]``
and reads labels as a libsvm file does (``1`` a click, ``0`` and ``-1`` none)
in ``partial_fit`` and ``score``, so both work on the file's own -1/+1 labels.

scikit-learn's checks
---------------------
The estimator passes every check of ``sklearn.utils.estimator_checks.check_estimator``
(scikit-learn 1.9; ``tests/test_estimator.py`` runs them). It is binary only
(tag ``classifier_tags.multi_class = False``: fitting three classes raises
``ValueError``). Checks it might be expected to fail would be named, with the
reason, in :data:`EXPECTED_FAILED_CHECKS` (scikit-learn >= 1.6 takes them as
``check_estimator(..., expected_failed_checks=...)`` rather than from the
tags); that dict is empty.

Examples
--------
>>> from sklearn.datasets import make_classification
>>> X, y = make_classification(n_samples=2000, n_features=20, random_state=0)
>>> clf = FTRLClassifier(alpha=0.5, l1=0.1, epochs=3).fit(X, y)
>>> clf.score(X, y) > 0.9, clf.coef_.shape, clf.predict_proba(X[:2]).shape
(True, (1, 20), (2, 2))
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.modelio import load_model, save_model
from ftrl_ps.core.params import DEFAULT_BITS, DTYPES, FTRLParams, check_bits
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.features import (
    NameCache,
    binary_labels,
    column_slots,
    rows_from_csr,
    rows_from_dense,
)
from ftrl_ps.errors import ConfigError
from ftrl_ps.learn.online import OnlineFTRL, to_rows

__all__ = ["EXPECTED_FAILED_CHECKS", "FTRLClassifier"]

#: the checks of ``check_estimator`` this estimator is expected to fail, with the
#: reason of each; none at present: every check passes (tests/test_estimator.py)
EXPECTED_FAILED_CHECKS: dict[str, str] = {}


def _is_dicts(X: Any) -> bool:
    return isinstance(X, list | tuple) and bool(X) and isinstance(X[0], Mapping)


class FTRLClassifier(ClassifierMixin, BaseEstimator):
    """Sparse logistic regression trained with FTRL-Proximal (McMahan et al., KDD 2013).

    Parameters
    ----------
    alpha, beta, l1, l2 : float, default 0.1, 1, 1, 1
        FTRL-Proximal hyper-parameters, as ``ftrl-ps train --alpha --beta --l1 --l2``.
    epochs : int, default 1
        Passes over the rows in :meth:`fit` (rows are seen in the given order).
    bits : int, default 22
        Feature space of ``2**bits`` slots plus a bias; columns or names beyond it are hashed.
    dtype : {"float32", "float64"}, default "float32"
        Storage of the model state.
    """

    EXPECTED_FAILED_CHECKS = EXPECTED_FAILED_CHECKS

    def __init__(self, alpha: float = 0.1, beta: float = 1.0, l1: float = 1.0, l2: float = 1.0,
                 epochs: int = 1, bits: int = DEFAULT_BITS, dtype: str = "float32") -> None:
        self.alpha = alpha
        self.beta = beta
        self.l1 = l1
        self.l2 = l2
        self.epochs = epochs
        self.bits = bits
        self.dtype = dtype

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        tags.input_tags.sparse = True
        tags.input_tags.dict = True
        return tags

    # -- input -----------------------------------------------------------------------------

    def _params(self) -> FTRLParams:
        return FTRLParams(alpha=self.alpha, beta=self.beta, l1=self.l1, l2=self.l2)

    def _fitted_bits(self) -> int:
        """The fitted model's ``bits``; ValueError if ``set_params`` changed ``bits`` since.

        ``bits`` is the size of the model's arrays: ``partial_fit`` and the
        predict methods cannot apply a new value, only ``fit`` can.
        """
        bits = check_bits(self.bits)
        if bits != self.model_.bits:
            raise ValueError(f"bits changed from {self.model_.bits} to {bits} since fit; "
                             "call fit (partial_fit and predict use the fitted model's "
                             "feature space)")
        return bits

    def _rows(self, X: Any, reset: bool, y: Any = None) -> tuple[Batch, Any]:
        """Validated rows of X (labels zero) and, when given, validated y."""
        bits = check_bits(self.bits) if reset else self._fitted_bits()
        if _is_dicts(X):
            if reset:  # a model of named features has no columns
                for name in ("n_features_in_", "feature_names_in_"):
                    if hasattr(self, name):
                        delattr(self, name)
            if y is not None:
                y = np.asarray(y)
                if y.ndim != 1 or y.shape[0] != len(X):
                    raise ValueError(f"{len(X)} rows of X but y has shape {y.shape}")
            cache = getattr(self, "_names", None)
            if cache is None or cache.bits != bits:
                cache = self._names = NameCache(bits)
            return to_rows(list(X), bits, cache=cache), y
        kw: dict[str, Any] = {"accept_sparse": "csr", "dtype": [np.float64, np.float32],
                              "accept_large_sparse": True, "reset": reset}
        if y is not None:
            X, y = validate_data(self, X, y, **kw)
        else:
            X = validate_data(self, X, **kw)
        zeros = np.zeros(X.shape[0], np.float32)
        if hasattr(X, "indptr"):
            rows = rows_from_csr(zeros, X.indptr, X.indices, X.data, X.shape[1], bits,
                                 canonical=bool(X.has_canonical_format))
        else:
            rows = rows_from_dense(zeros, X, bits)
        return rows, y

    def _labels(self, y: np.ndarray) -> np.ndarray:
        if getattr(self, "_libsvm_labels", False):  # a model file that records no classes
            return binary_labels(y, y.shape[0])  # 1 a click; 0 and -1 none, as in a libsvm file
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            raise ValueError(f"y holds {y[unknown][0]!r}, not one of classes_ {self.classes_}")
        return (y == self.classes_[1]).astype(np.float32)

    @staticmethod
    def _binary_classes(y: Any) -> np.ndarray:
        check_classification_targets(y)
        kind = type_of_target(y, input_name="y", raise_unknown=True)
        if kind != "binary":
            raise ValueError(
                f"Only binary classification is supported. The type of the target is {kind}."
            )
        classes = np.unique(y)
        if classes.size != 2:
            raise ValueError(
                f"FTRLClassifier needs samples of 2 classes, got 1 class ({classes[0]!r})"
            )
        return classes

    # -- training --------------------------------------------------------------------------

    def fit(self, X: Any, y: Any) -> FTRLClassifier:
        """Train a new model on ``X, y`` for ``epochs`` passes, rows in order."""
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int | np.integer) \
                or self.epochs < 1:
            raise ConfigError(f"epochs must be a positive integer, got {self.epochs!r}")
        rows, y = self._rows(X, reset=True, y=y)
        classes = self._binary_classes(y)
        model = FTRL(check_bits(self.bits), self._params(), dtype=self.dtype)
        self.classes_ = classes
        self._libsvm_labels = False
        labels = self._labels(y)
        for _ in range(int(self.epochs)):
            model.fit_rows(labels, rows.indptr, rows.indices, rows.values)
        self.model_ = model
        return self

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> FTRLClassifier:
        """One pass over ``X, y`` continuing from the current model.

        The first call needs ``classes`` (both labels), as in scikit-learn's
        other online estimators. ``alpha``, ``beta``, ``l1``, ``l2`` and ``dtype``
        changed by ``set_params`` since the last fit apply from this call on;
        a changed ``bits`` raises ``ValueError`` (only ``fit`` can resize the model).
        """
        first = not hasattr(self, "model_")
        if first and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit")
        rows, y = self._rows(X, reset=first, y=y)
        if first:
            self.classes_ = self._binary_classes(np.asarray(classes))
            self._libsvm_labels = False
            self.model_ = FTRL(check_bits(self.bits), self._params(), dtype=self.dtype)
        elif classes is not None and getattr(self, "_libsvm_labels", False):
            # a model file that records no classes takes the first ones it is given
            self.classes_ = self._binary_classes(np.asarray(classes))
            self._libsvm_labels = False
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError(f"classes {classes!r} differ from classes_ {self.classes_}")
        labels = self._labels(np.asarray(y))
        self._apply_params()
        self.model_.fit_rows(labels, rows.indptr, rows.indices, rows.values)
        return self

    def _apply_params(self) -> None:
        """Give the fitted model the current ``alpha``/``beta``/``l1``/``l2`` and ``dtype``.

        FTRL-Proximal's ``n``/``z`` state is valid under any of them (the weights
        are derived from it), so training simply continues with the new values;
        a new ``dtype`` casts the state.
        """
        params = self._params()
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        model = self.model_
        if params != model.params:
            model.params = params
        if self.dtype != model.dtype:
            model.state = model.state.astype(self.dtype)
            model.dtype = self.dtype

    # -- prediction ------------------------------------------------------------------------

    def decision_function(self, X: Any) -> np.ndarray:
        """The margin ``w . x + bias`` of every row (> 0 predicts ``classes_[1]``)."""
        check_is_fitted(self)
        rows, _ = self._rows(X, reset=False)
        return self.model_.margin_rows(rows.indptr, rows.indices, rows.values)

    def predict_proba(self, X: Any) -> np.ndarray:
        """``P(classes_[0])``, ``P(classes_[1])`` of every row, shape ``(n, 2)``."""
        check_is_fitted(self)
        rows, _ = self._rows(X, reset=False)
        p = self.model_.predict_rows(rows.indptr, rows.indices, rows.values)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """The predicted class of every row."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(np.intp)]

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy on ``X, y``. A model loaded from a file that records no
        classes (the command line's) reads ``y`` as a libsvm file's labels:
        ``1`` is ``classes_[1]``, ``0`` and ``-1`` are ``classes_[0]``."""
        if getattr(self, "_libsvm_labels", False):
            y = np.asarray(y)
            y = self.classes_[self._labels(y.reshape(-1)).astype(np.intp)].reshape(y.shape)
        return float(super().score(X, y, sample_weight))

    # -- fitted model as scikit-learn shows it ---------------------------------------------

    @property
    def coef_(self) -> Any:
        """Weights as a ``1 x n_features`` CSR matrix (``1 x 2**bits`` after dict input)."""
        check_is_fitted(self)
        from scipy import sparse

        w = self.model_.weights()[:-1]
        n = getattr(self, "n_features_in_", None)
        dense = w if n is None else w[column_slots(n, self.model_.bits)]
        return sparse.csr_matrix(dense.reshape(1, -1))

    @property
    def intercept_(self) -> np.ndarray:
        """The bias weight, shape ``(1,)``."""
        check_is_fitted(self)
        return self.model_.weights()[-1:].copy()

    # -- online use and the model file -----------------------------------------------------

    def online(self) -> OnlineFTRL:
        """A river-style :class:`OnlineFTRL` driving this fitted model (shared, not copied)."""
        check_is_fitted(self)
        return OnlineFTRL(model=self.model_)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model file of ``ftrl-ps train --model`` (classes in its header)."""
        check_is_fitted(self)
        extra: dict[str, Any] = {"source": "python FTRLClassifier", "epochs": int(self.epochs)}
        if not getattr(self, "_libsvm_labels", False) and all(
                isinstance(c, int | float | str | np.integer | np.floating | np.str_ | np.bool_)
                for c in self.classes_):
            extra["classes"] = self.classes_.tolist()
        if hasattr(self, "n_features_in_"):
            extra["n_features_in"] = int(self.n_features_in_)
        return save_model(path, self.model_, **extra)

    @classmethod
    def load(cls, path: str | os.PathLike[str], classes: Any = None) -> FTRLClassifier:
        """A fitted FTRLClassifier from a model file (Python's or the command line's).

        ``classes`` (two labels, e.g. ``[-1, 1]``) sets ``classes_`` of a file
        that records none; a file saved by :meth:`save` records its own, and
        different ``classes`` are an error. Without either, ``classes_`` is
        ``[0, 1]`` and labels are read as in a libsvm file (``1`` is a click,
        ``0`` and ``-1`` are none) by :meth:`partial_fit` and :meth:`score`;
        the first ``classes`` passed to ``partial_fit`` replace them.
        """
        saved = load_model(path)
        p = saved.params
        epochs = saved.training.get("epochs", 1)
        clf = cls(alpha=p.alpha, beta=p.beta, l1=p.l1, l2=p.l2, bits=saved.bits,
                  dtype=saved.dtype, epochs=epochs if isinstance(epochs, int) else 1)
        clf.model_ = saved.to_ftrl()
        recorded = saved.training.get("classes")
        given = None if classes is None else cls._binary_classes(np.asarray(classes))
        if recorded is not None and given is not None \
                and not np.array_equal(given, np.asarray(recorded)):
            raise ValueError(f"classes {classes!r} differ from the classes {recorded} "
                             f"recorded in {os.fspath(path)}")
        clf.classes_ = np.asarray(recorded) if recorded is not None \
            else given if given is not None else np.array([0, 1])
        clf._libsvm_labels = recorded is None and given is None
        if "n_features_in" in saved.training:
            clf.n_features_in_ = int(saved.training["n_features_in"])
        return clf
