from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from ftrl_ps._kernels import ftrl as kernels
from ftrl_ps.core.metrics import EPS, Evaluation, auc, logloss
from ftrl_ps.errors import DataError
from tests import naive


def test_against_naive_and_sklearn_with_ties() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random(300) < 0.3).astype(float)
    p = np.round(rng.random(300), 1)  # many ties
    assert auc(y, p) == pytest.approx(naive.auc(y, p), abs=1e-12)
    assert auc(y, p) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert logloss(y, p) == pytest.approx(naive.logloss(y, p), rel=1e-9)
    assert logloss(y, np.clip(p, 1e-15, 1 - 1e-15)) == pytest.approx(
        log_loss(y, np.clip(p, 1e-15, 1 - 1e-15)), rel=1e-9
    )


def test_clip_constant_is_the_kernels() -> None:
    # evaluation and the training kernel's progressive loss clip probabilities alike
    assert EPS == kernels.EPS == 1e-15
    assert logloss([1], [0.0]) == pytest.approx(-math.log(EPS))
    assert logloss([1.0, 0.0], [0.0, 1.0]) == pytest.approx(
        kernels.logloss_sum(np.array([1.0, 0.0]), np.array([0.0, 1.0])) / 2
    )


def test_edge_cases() -> None:
    assert math.isnan(auc([1, 1], [0.2, 0.3]))
    assert auc([0, 1], [0.2, 0.3]) == 1.0
    assert auc([0, 1], [0.3, 0.2]) == 0.0
    assert auc([0, 1], [0.5, 0.5]) == 0.5
    assert math.isfinite(logloss([1, 0], [0.0, 1.0]))  # clipped, not inf
    assert math.isnan(logloss([], []))


def test_evaluation_accumulates() -> None:
    ev = Evaluation()
    ev.update(np.array([1, 0]), np.array([0.9, 0.2]))
    ev.update(np.array([0]), np.array([0.4]))
    got = ev.get()
    assert got["rows"] == 3
    assert got["auc"] == 1.0
    assert got["positive_rate"] == pytest.approx(1 / 3)


def test_minus_one_labels_and_bad_input() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 1000).astype(float)
    p = rng.random(1000)
    assert logloss(2 * y - 1, p) == pytest.approx(log_loss(2 * y - 1, p), rel=1e-12)
    assert logloss(2 * y - 1, p) == logloss(y, p) == logloss(y == 1, p)
    assert auc(2 * y - 1, p) == auc(y, p) == pytest.approx(roc_auc_score(y, p))
    for f in (logloss, auc):
        with pytest.raises(DataError, match="probabilities must be in"):
            f([1, 0], [np.nan, 0.5])
        with pytest.raises(DataError, match="probabilities must be in"):
            f([1, 0], [1.5, -0.2])
        with pytest.raises(DataError, match="3 labels but 2 probabilities"):
            f([1, 0, 1], [0.5, 0.5])
        with pytest.raises(DataError, match="labels must be"):
            f([2, 0], [0.5, 0.5])
