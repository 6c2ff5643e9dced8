"""A river-style online API: learn from one example at a time, from any stream in Python.

:class:`OnlineFTRL` is the FTRL-Proximal model of :class:`ftrl_ps.FTRL` driven
the way `river <https://riverml.xyz>`_ drives its models: ``learn_one(x, y)``
with ``x`` a dict of named features, ``predict_proba_one(x)`` returning
``{False: p0, True: p1}``, and ``learn_many``/``predict_proba_many`` for
batches (lists of dicts, scipy.sparse or dense matrices, pandas DataFrames).
Names are hashed exactly as ``ftrl-ps train`` hashes the tokens of a libsvm
line (rules in :mod:`ftrl_ps.data.features`), and :meth:`OnlineFTRL.save`
writes the model file of the command line, so a model can move freely between
Python and ``ftrl-ps train --resume`` / ``predict`` / ``eval``.

Each ``learn_one`` predicts first and then updates (progressive validation);
:attr:`OnlineFTRL.progressive_logloss` is the mean log loss of those predictions.

Examples
--------
>>> model = OnlineFTRL(alpha=0.5, l1=0.0, bits=18)
>>> for i in range(200):
...     model.learn_one({"site": "news" if i % 2 else "games", "hour": i % 24}, i % 2 == 1)
>>> p = model.predict_proba_one({"site": "news", "hour": 3})
>>> sorted(p), p[True] > 0.9
([False, True], True)
>>> model.predict_one({"site": "games", "hour": 3})
False
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.modelio import load_model, save_model
from ftrl_ps.core.params import DEFAULT_BITS, FTRLParams
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.features import (
    NameCache,
    binary_labels,
    rows_from_csr,
    rows_from_dense,
    rows_from_dicts,
    slots_of_row,
)
from ftrl_ps.errors import DataError

__all__ = ["OnlineFTRL", "to_rows"]

#: label of one example -> 0/1 (1 and True are a click; 0, -1 and False are none)
_LABELS: dict[Any, float] = {1: 1.0, 0: 0.0, -1: 0.0}


def to_rows(x: Any, bits: int, labels: Any = None, cache: NameCache | None = None,
            n_features: int | None = None) -> Batch:
    """Rows of any supported input: list of dicts, scipy.sparse matrix, array, DataFrame.

    ``labels`` (0/1 float32, or None for zeros) are attached as given.
    """
    rows = _count(x)
    lab = np.zeros(rows, np.float32) if labels is None else np.asarray(labels, np.float32)
    if isinstance(x, list | tuple) and (not x or isinstance(x[0], Mapping)):
        return rows_from_dicts(x, bits, lab, cache)
    if hasattr(x, "tocsr") and hasattr(x, "nnz"):  # scipy.sparse matrix or array
        csr = x.tocsr()
        if csr.ndim != 2:
            raise DataError("expected a 2-D sparse matrix")
        if n_features is not None and csr.shape[1] != n_features:
            raise DataError(f"X has {csr.shape[1]} features, expected {n_features}")
        return rows_from_csr(lab, csr.indptr, csr.indices, csr.data, csr.shape[1], bits,
                             canonical=bool(csr.has_canonical_format))
    if hasattr(x, "to_numpy"):  # pandas / polars DataFrame: its columns in order
        x = x.to_numpy()
    arr = np.asarray(x)
    if n_features is not None and arr.ndim == 2 and arr.shape[1] != n_features:
        raise DataError(f"X has {arr.shape[1]} features, expected {n_features}")
    return rows_from_dense(lab, arr, bits)


def _count(x: Any) -> int:
    shape = getattr(x, "shape", None)
    if shape is not None and len(shape) >= 1:
        return int(shape[0])
    try:
        return len(x)
    except TypeError:
        raise DataError(f"cannot read rows from {type(x).__name__}") from None


class OnlineFTRL:
    """FTRL-Proximal logistic regression that learns one example at a time.

    Parameters
    ----------
    alpha, beta, l1, l2 : float
        FTRL-Proximal hyper-parameters (defaults as ``ftrl-ps train``).
    bits : int
        Feature space ``2**bits`` slots plus the bias.
    dtype : {"float32", "float64"}
        Storage of the model state.
    model : FTRL, optional
        Drive this model (shared, not copied) instead of a new one; the other
        parameters are then taken from it.
    """

    def __init__(self, alpha: float = 0.1, beta: float = 1.0, l1: float = 1.0, l2: float = 1.0,
                 bits: int = DEFAULT_BITS, dtype: str = "float32",
                 model: FTRL | None = None) -> None:
        if model is None:
            model = FTRL(bits, FTRLParams(alpha=alpha, beta=beta, l1=l1, l2=l2), dtype=dtype)
        self.model = model
        self._names = NameCache(model.bits)
        #: examples learned and the sum of their progressive log loss
        self.rows_seen = 0
        self.loss_sum = 0.0

    def __repr__(self) -> str:
        p = self.model.params
        return (f"OnlineFTRL(alpha={p.alpha}, beta={p.beta}, l1={p.l1}, l2={p.l2}, "
                f"bits={self.model.bits}, dtype={self.model.dtype!r})")

    @property
    def progressive_logloss(self) -> float:
        """Mean log loss of the predictions made before each learned example."""
        return self.loss_sum / self.rows_seen if self.rows_seen else float("nan")

    def _rows(self, x: Any, labels: Any = None) -> Batch:
        return to_rows(x, self.model.bits, labels, self._names)

    def _one(self, x: Mapping[Any, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, indices, values)`` of one dict (the reader's row)."""
        if not isinstance(x, Mapping):
            raise DataError(f"x must be a dict of features, got {type(x).__name__}")
        if self._names.bits != self.model.bits:  # self.model was replaced
            self._names = NameCache(self.model.bits)
        indices, values = slots_of_row(x, self._names)
        return np.array([0, indices.size], dtype=np.int64), indices, values

    def learn_one(self, x: Mapping[Any, Any], y: Any) -> None:
        """Learn from one example: ``x`` a dict of features, ``y`` 1/True or 0/-1/False."""
        label = _LABELS.get(y) if isinstance(y, bool | int | float | np.number | np.bool_) \
            else None
        if label is None:
            raise DataError(f"labels must be -1, 0 or 1 (or booleans), got {y!r}")
        indptr, indices, values = self._one(x)
        self.loss_sum += self.model.fit_rows(np.array([label], np.float32), indptr, indices,
                                             values)
        self.rows_seen += 1

    def learn_many(self, X: Any, y: Any) -> None:
        """Learn from the rows of ``X`` in order (list of dicts, sparse, dense, DataFrame)."""
        rows = self._rows(X)
        self._learn(Batch(binary_labels(np.asarray(y).reshape(-1), rows.rows), rows.indptr,
                          rows.indices, rows.values))

    def _learn(self, rows: Batch) -> None:
        self.loss_sum += self.model.fit_rows(rows.labels, rows.indptr, rows.indices, rows.values)
        self.rows_seen += rows.rows

    def predict_proba_one(self, x: Mapping[Any, Any]) -> dict[bool, float]:
        """``{False: P(no click), True: P(click)}`` for one example."""
        p = float(self.model.predict_rows(*self._one(x))[0])
        return {False: 1.0 - p, True: p}

    def predict_one(self, x: Mapping[Any, Any]) -> bool:
        """The more likely label of one example (``True`` = click)."""
        return self.predict_proba_one(x)[True] > 0.5

    def predict_proba_many(self, X: Any) -> Any:
        """``P(False)``, ``P(True)`` of every row: an ``(n, 2)`` array, or for a
        pandas DataFrame a DataFrame with columns ``False``, ``True`` and X's index."""
        rows = self._rows(X)
        p = self.model.predict_rows(rows.indptr, rows.indices, rows.values)
        out = np.column_stack([1.0 - p, p])
        if hasattr(X, "iloc") and hasattr(X, "index"):
            import pandas as pd

            return pd.DataFrame(out, index=X.index, columns=[False, True])
        return out

    def predict_many(self, X: Any) -> np.ndarray:
        """The more likely label of every row (boolean array)."""
        rows = self._rows(X)
        return self.model.predict_rows(rows.indptr, rows.indices, rows.values) > 0.5

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model file (the format of ``ftrl-ps train --model``)."""
        return save_model(path, self.model, rows=self.rows_seen, source="python OnlineFTRL",
                          progressive_logloss=self.progressive_logloss
                          if self.rows_seen else None)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OnlineFTRL:
        """An OnlineFTRL on the model saved in ``path`` (by Python or the command line).

        :attr:`rows_seen` and :attr:`progressive_logloss` continue from the
        file's ``rows`` and ``progressive_logloss`` when it records both.
        """
        saved = load_model(path)
        online = cls(model=saved.to_ftrl())
        rows, loss = saved.training.get("rows"), saved.training.get("progressive_logloss")
        if isinstance(rows, int) and rows > 0 and isinstance(loss, int | float) \
                and math.isfinite(loss):
            online.rows_seen = rows
            online.loss_sum = float(loss) * rows
        return online
