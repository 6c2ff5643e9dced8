"""Evaluation metrics: log loss and ROC AUC, plus a streaming accumulator.

They share a tiny protocol, as river's metrics do: ``update`` then ``get``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ftrl_ps.errors import DataError

__all__ = ["EPS", "Evaluation", "auc", "auc_text", "logloss"]

#: :func:`logloss` clips probabilities to ``[EPS, 1 - EPS]`` before the log. The
#: same value as the training kernel's clip (``ftrl_ps._kernels.ftrl.EPS``, checked
#: by ``tests/test_metrics.py``), so evaluated and progressive log loss agree.
EPS = 1e-15


def _checked(labels: npt.ArrayLike, probs: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``(y, p)``: 0/1 float64 labels and float64 probabilities, validated.

    Labels are read as in a libsvm file: ``1``/``True`` is a click, ``0``,
    ``-1`` and ``False`` are none; anything else, a length mismatch, and
    probabilities that are NaN or outside ``[0, 1]`` raise :class:`DataError`.
    """
    y = np.asarray(labels).reshape(-1)
    p = np.asarray(probs).reshape(-1)
    if y.size != p.size:
        raise DataError(f"{y.size} labels but {p.size} probabilities")
    try:
        y = y.astype(np.float64)
        p = p.astype(np.float64)
    except (TypeError, ValueError):
        raise DataError("labels and probabilities must be numbers") from None
    bad = ~np.isin(y, (-1.0, 0.0, 1.0))
    if bad.any():
        raise DataError(f"labels must be 1 (click) or 0 / -1 (none), got {float(y[bad][0])!r}")
    bad = ~((p >= 0.0) & (p <= 1.0))  # NaN too
    if bad.any():
        raise DataError(f"probabilities must be in [0, 1], got {float(p[bad][0])!r}")
    return (y == 1.0).astype(np.float64), p


def logloss(labels: npt.ArrayLike, probs: npt.ArrayLike) -> float:
    """Mean binary cross-entropy, probabilities clipped to ``[EPS, 1 - EPS]`` (EPS = 1e-15).

    Labels ``1``/``True`` are a click, ``0``/``-1``/``False`` none, as in a
    libsvm file; other labels, a length mismatch and probabilities that are
    NaN or outside ``[0, 1]`` raise :class:`~ftrl_ps.errors.DataError`. No rows: NaN.

    >>> round(logloss([1, -1], [0.8, 0.2]), 6) == round(logloss([1, 0], [0.8, 0.2]), 6)
    True
    """
    y, p = _checked(labels, probs)
    p = np.clip(p, EPS, 1.0 - EPS)
    if y.size == 0:
        return float("nan")
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def auc_text(value: float | None) -> str:
    """An AUC for people: ``0.81234``, or why there is none (one class only).

    >>> auc_text(0.812345), auc_text(float("nan"))
    ('0.81234', '- (the data holds one class only)')
    """
    if value is None or math.isnan(value):
        return "- (the data holds one class only)"
    return f"{value:.5f}"


def auc(labels: npt.ArrayLike, probs: npt.ArrayLike) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula, ties counted as 1/2.

    Labels and probabilities are checked as by :func:`logloss`. Returns NaN
    when only one class is present.
    """
    y01, p = _checked(labels, probs)
    y = y01 > 0.5
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(p, kind="mergesort")
    sorted_p = p[order]
    # average ranks (1-based) over runs of equal scores
    starts = np.flatnonzero(np.concatenate([[True], sorted_p[1:] != sorted_p[:-1]]))
    ends = np.concatenate([starts[1:], [p.size]])
    avg_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(p.size, dtype=np.float64)
    ranks[order] = np.repeat(avg_rank, ends - starts)
    rank_sum = ranks[y].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


@dataclass
class Evaluation:
    """Collects labels and predictions batch by batch; ``get`` gives the summary."""

    labels: list[np.ndarray] = field(default_factory=list)
    probs: list[np.ndarray] = field(default_factory=list)

    def update(self, labels: np.ndarray, probs: np.ndarray) -> None:
        self.labels.append(np.asarray(labels, dtype=np.float32))
        self.probs.append(np.asarray(probs, dtype=np.float64))

    def get(self) -> dict[str, float]:
        y = np.concatenate(self.labels) if self.labels else np.zeros(0, np.float32)
        p = np.concatenate(self.probs) if self.probs else np.zeros(0)
        return {
            "rows": int(y.size),
            "logloss": logloss(y, p),
            "auc": auc(y, p),
            "positive_rate": float(y.mean()) if y.size else float("nan"),
            "mean_prediction": float(p.mean()) if p.size else float("nan"),
        }
