"""Evaluation metrics: log loss and ROC AUC, plus a streaming accumulator.

They share a tiny protocol, as river's metrics do: ``update`` then ``get``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["EPS", "Evaluation", "auc", "logloss"]

#: :func:`logloss` clips probabilities to ``[EPS, 1 - EPS]`` before the log. The
#: same value as the training kernel's clip (``ftrl_ps._kernels.ftrl.EPS``, checked
#: by ``tests/test_metrics.py``), so evaluated and progressive log loss agree.
EPS = 1e-15


def logloss(labels: npt.ArrayLike, probs: npt.ArrayLike) -> float:
    """Mean binary cross-entropy, probabilities clipped to ``[EPS, 1 - EPS]`` (EPS = 1e-15)."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probs, dtype=np.float64), EPS, 1.0 - EPS)
    if y.size == 0:
        return float("nan")
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def auc(labels: npt.ArrayLike, probs: npt.ArrayLike) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula, ties counted as 1/2.

    Returns NaN when only one class is present.
    """
    y = np.asarray(labels, dtype=np.float64) > 0.5
    p = np.asarray(probs, dtype=np.float64)
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
