"""The ``contraction`` merge rule (ftrl_ps.ps.contraction) against plain-Python references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRLParams
from ftrl_ps.data.batch import Batch
from ftrl_ps.ps.contraction import composed_share, contraction_scale, row_contraction
from ftrl_ps.ps.merge import dense_keys

PARAMS = FTRLParams(alpha=0.1, beta=1.0, l1=1.0, l2=1.0)


def test_composed_share_is_the_mean_for_pinned_keys_and_the_sum_for_free_ones() -> None:
    for n in (1, 2, 4, 8):
        rho = np.linspace(0.0, 1.0, 101)
        share = composed_share(rho, n)
        assert share[0] == pytest.approx(1.0 / n) and share[-1] == 1.0
        assert np.all(np.diff(share) >= -1e-15)  # more contraction, less of each update
        ref = [sum(r**i for i in range(n)) / n for r in rho]  # (1 + rho + ... + rho^(N-1)) / N
        np.testing.assert_allclose(share, ref, rtol=1e-9)
    assert composed_share(np.array([1.0 - 1e-12]), 8)[0] == pytest.approx(1.0)


def test_only_dense_keys_and_the_bias_are_scaled_and_one_worker_is_untouched() -> None:
    rows = np.array([1, 60, 90, 0])
    keys = np.array([7, 8, 9, 99])
    k = np.array([100.0, 100.0, 0.0, 100.0])
    dense = dense_keys(rows, keys, 99, 100, 0.5)
    scale = contraction_scale(dense, 4, k)
    # key 7 is rare (summed whatever K), 8 is dense and pinned (1/N), 9 is dense and free (1),
    # the bias is composed by its own K
    np.testing.assert_allclose(scale, [1.0, 0.25, 1.0, 0.25])
    np.testing.assert_array_equal(contraction_scale(dense, 1, k), 1.0)


def _round(rng: np.random.Generator, rows: int, slots: int) -> tuple[list[Batch], np.ndarray]:
    labels, indptr, idx, vals = [], [0], [], []
    for _ in range(rows):
        own = np.sort(rng.choice(slots - 1, size=rng.integers(1, 6), replace=False))
        idx.extend(own)
        vals.extend(rng.uniform(0.5, 2.0, own.size))
        indptr.append(len(idx))
        labels.append(float(rng.random() < 0.3))
    local = np.array(idx, np.int64)
    parts, start = [], 0
    stops = [*range(7, rows, 7), rows]  # mini-batches of 7 rows, the last shorter
    for stop in stops:
        lo, hi = indptr[start], indptr[stop]
        parts.append(Batch(np.array(labels[start:stop], np.float32),
                           np.array(indptr[start:stop + 1], np.int64) - lo,
                           np.array(idx[lo:hi], np.int32), np.array(vals[lo:hi], np.float32)))
        start = stop
    return parts, local


def _reference(state: np.ndarray, parts: list[Batch], local: np.ndarray, last: int) -> list[float]:
    """K per slot from the last ``last`` rows, one row and one feature at a time."""
    alpha, beta, l1, l2 = PARAMS.alpha, PARAMS.beta, PARAMS.l1, PARAMS.l2

    def prec(s: int) -> float:
        return (beta + math.sqrt(state[s, 0])) / alpha + l2

    def weight(s: int) -> float:
        z = state[s, 1]
        return 0.0 if abs(z) <= l1 else -(z - math.copysign(l1, z)) / prec(s)

    bias = state.shape[0] - 1
    rows = []
    pos = 0
    for mb in parts:
        for r in range(mb.rows):
            a, b = mb.indptr[r], mb.indptr[r + 1]
            rows.append([(int(local[pos + j]), float(mb.values[j])) for j in range(a, b)])
        pos += mb.nnz
    out = [0.0] * state.shape[0]
    for feats in rows[-last:]:
        margin = weight(bias) + sum(weight(s) * x for s, x in feats)
        p = 1.0 / (1.0 + math.exp(-margin))
        shrink = p * (1 - p) * (1.0 / prec(bias) + sum(x * x / prec(s) for s, x in feats))
        for s, _ in feats:
            out[s] += shrink
        out[bias] += shrink
    scale = len(rows) / min(last, len(rows))
    return [v * scale for v in out]


@pytest.mark.parametrize("sample", [1000, 30, 7, 1])
def test_row_contraction_matches_a_per_row_reference(sample: int) -> None:
    rng = np.random.default_rng(3)
    slots = 25
    parts, local = _round(rng, 95, slots)
    state = np.column_stack([rng.uniform(0.0, 50.0, slots), rng.normal(0.0, 3.0, slots)])
    got = row_contraction(state, parts, local, PARAMS, sample_rows=sample)
    np.testing.assert_allclose(got, _reference(state, parts, local, sample), rtol=1e-10)
    assert got[-1] > 0.0  # the bias is in every row


def test_a_key_the_rows_pin_down_is_averaged_and_a_free_one_summed() -> None:
    """A bias at 0 (p = 1/2) with small n is pinned by 500 rows; with a huge n (tiny
    steps) the same rows barely move it."""
    labels = np.zeros(500, np.float32)
    indptr = np.arange(501, dtype=np.int64)
    part = Batch(labels, indptr, np.zeros(500, np.int32), np.ones(500, np.float32))
    local = np.zeros(500, np.int64)
    for n_bias, expect in ((1.0, 0.25), (1e12, 1.0)):
        state = np.array([[n_bias, 0.0], [n_bias, 0.0]])
        k = row_contraction(state, [part], local, PARAMS)
        scale = contraction_scale(np.array([True, True]), 4, k)
        assert scale[1] == pytest.approx(expect, abs=1e-3)
