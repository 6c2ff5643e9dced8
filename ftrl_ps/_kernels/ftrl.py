"""FTRL-Proximal kernels (McMahan et al., KDD 2013, Algorithm 1).

Assumptions (checked by the wrappers in :mod:`ftrl_ps.core.ftrl`, not here):

* ``state`` is a flat float array ``[n_0, z_0, n_1, z_1, ...]`` (interleaved so
  one key's ``n`` and ``z`` share a cache line) of ``bias_key + 1`` keys, the
  bias last; every index in ``indices`` is in ``[0, bias_key)``.
* ``indptr`` is non-decreasing with ``indptr[0] == 0`` and
  ``indptr[-1] == len(indices) == len(values)``.
* Rows are sorted and unique (the reader guarantees it); duplicates would
  still be deterministic but each occurrence would be updated separately.

All arithmetic is done in float64 whatever the storage dtype.
"""

from __future__ import annotations

import math

import numpy as np

from ftrl_ps._kernels._config import njit
from ftrl_ps._kernels._intrinsics import prefetch

__all__ = [
    "EPS",
    "MAX_MARGIN",
    "PREFETCH_ROWS",
    "ROW_SCRATCH",
    "count_touched",
    "export_touched",
    "logloss_sum",
    "predict_rows",
    "train_rows",
    "weights",
]

#: probabilities are clipped to [EPS, 1 - EPS] before taking the log loss
EPS = 1e-15
#: the margin is clipped to [-MAX_MARGIN, MAX_MARGIN] before the sigmoid
MAX_MARGIN = 35.0


@njit(inline="always")
def _weight_s(z: float, sqrt_n: float, alpha: float, beta: float, l1: float, l2: float) -> float:
    """Closed-form per-coordinate weight from the FTRL state (Algorithm 1), given
    ``sqrt(n)``: ``-(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)``, computed
    as ``-(z - sign(z) l1) * alpha / (beta + l2 alpha + sqrt(n))`` (one division
    instead of two, ``beta + l2 alpha`` hoisted out of the loops: 17 % of the
    training loop's time; the same value to a few ulps)."""
    if abs(z) <= l1:
        return 0.0
    return -(z - math.copysign(l1, z)) * alpha / (beta + l2 * alpha + sqrt_n)


@njit(inline="always")
def _weight(z: float, n: float, alpha: float, beta: float, l1: float, l2: float) -> float:
    """As :func:`_weight_s`, from ``n`` (no square root for a weight of 0)."""
    if abs(z) <= l1:
        return 0.0
    return _weight_s(z, math.sqrt(n), alpha, beta, l1, l2)


@njit(inline="always")
def _sigmoid(margin: float) -> float:
    if margin > MAX_MARGIN:
        margin = MAX_MARGIN
    elif margin < -MAX_MARGIN:
        margin = -MAX_MARGIN
    return 1.0 / (1.0 + math.exp(-margin))


@njit(inline="always")
def _logloss(p: float, y: float) -> float:
    if p < EPS:
        p = EPS
    elif p > 1.0 - EPS:
        p = 1.0 - EPS
    return -math.log(p) if y > 0.5 else -math.log(1.0 - p)


@njit(inline="always")
def _update(state, key, g, w, sqrt_n_old, inv_alpha):
    """FTRL-Proximal update of one coordinate (``key`` indexes ``n``; ``z`` follows);
    ``inv_alpha`` is ``1 / alpha`` (a product, not a division, per key)."""
    n_new = np.float64(state[key]) + g * g
    if w != 0.0:
        sigma = (math.sqrt(n_new) - sqrt_n_old) * inv_alpha
        state[key + 1] = np.float64(state[key + 1]) + g - sigma * w
    else:
        state[key + 1] = np.float64(state[key + 1]) + g
    state[key] = n_new


#: rows ahead whose state the training loop prefetches
PREFETCH_ROWS = 2
#: features per row the training loop's scratch holds at first (grown for longer rows)
ROW_SCRATCH = 256


@njit
def train_rows(state, labels, indptr, indices, values, bias_key, alpha, beta, l1, l2):
    """Predict-then-update every row in order; returns the summed progressive log loss.

    ``state`` is the flat interleaved state ``[n_0, z_0, n_1, z_1, ...]`` so that
    one key's ``n`` and ``z`` share a cache line.
    """
    rows = labels.shape[0]
    # per feature of the row being trained: the weight used in its prediction, and
    # sqrt(n) before the update; a row's worth, so they stay in L1 (sized for the
    # whole batch they were written to memory and read back, and a batch of millions
    # of rows first faulted in gigabytes of fresh pages: 2.3x the time, measured)
    cap = np.int64(ROW_SCRATCH)
    wbuf = np.empty(cap, dtype=np.float64)
    sbuf = np.empty(cap, dtype=np.float64)
    inv_alpha = 1.0 / alpha
    loss = 0.0
    for r in range(rows):
        start = indptr[r]
        end = indptr[r + 1]
        if end - start > cap:
            cap = max(end - start, 2 * cap)
            wbuf = np.empty(cap, dtype=np.float64)
            sbuf = np.empty(cap, dtype=np.float64)
        if r + PREFETCH_ROWS < rows:
            for j in range(indptr[r + PREFETCH_ROWS], indptr[r + PREFETCH_ROWS + 1]):
                prefetch(state, 2 * np.int64(indices[j]))
        # predict with the current weights (bias first, value 1.0)
        zb = np.float64(state[2 * bias_key + 1])
        sqb = math.sqrt(np.float64(state[2 * bias_key]))
        w_bias = _weight_s(zb, sqb, alpha, beta, l1, l2)
        margin = w_bias
        for j in range(start, end):
            key = 2 * np.int64(indices[j])
            zk = np.float64(state[key + 1])
            if abs(zk) <= l1:
                wbuf[j - start] = 0.0
            else:
                sq = math.sqrt(np.float64(state[key]))
                sbuf[j - start] = sq
                w = _weight_s(zk, sq, alpha, beta, l1, l2)
                wbuf[j - start] = w
                margin += w * np.float64(values[j])
        p = _sigmoid(margin)
        y = np.float64(labels[r])
        loss += _logloss(p, y)
        g = p - y
        # update: sigma * w vanishes when w == 0, so sqrt is only needed then
        _update(state, 2 * np.int64(bias_key), g, w_bias, sqb, inv_alpha)
        for j in range(start, end):
            _update(state, 2 * np.int64(indices[j]), g * np.float64(values[j]), wbuf[j - start],
                    sbuf[j - start], inv_alpha)
    return loss


@njit
def predict_rows(state, indptr, indices, values, bias_key, alpha, beta, l1, l2, out):
    """Write P(y=1 | row) for every row into ``out`` (float64); state is interleaved."""
    rows = out.shape[0]
    b = 2 * np.int64(bias_key)
    w_bias = _weight(np.float64(state[b + 1]), np.float64(state[b]), alpha, beta, l1, l2)
    for r in range(rows):
        margin = w_bias
        for j in range(indptr[r], indptr[r + 1]):
            key = 2 * np.int64(indices[j])
            w = _weight(np.float64(state[key + 1]), np.float64(state[key]), alpha, beta, l1, l2)
            margin += w * np.float64(values[j])
        out[r] = _sigmoid(margin)


@njit
def logloss_sum(labels, probs):
    """Summed clipped log loss of ``probs`` against 0/1 ``labels``."""
    total = 0.0
    for r in range(labels.shape[0]):
        total += _logloss(probs[r], np.float64(labels[r]))
    return total


@njit
def count_touched(state):
    """How many keys of the interleaved ``state`` have ``n != 0`` or ``z != 0``
    (``-0.0`` is zero, as for ``!=``)."""
    count = 0
    for i in range(state.shape[0] // 2):
        if state[2 * i] != 0 or state[2 * i + 1] != 0:
            count += 1
    return count


@njit
def export_touched(state, alpha, beta, l1, l2, keys, n, z):
    """Write the keys :func:`count_touched` counts, in order, with their ``n`` and
    ``z`` (``keys``, ``n``, ``z`` hold exactly that many); the number of them
    whose weight is not zero (an untouched key's weight is 0)."""
    j = 0
    nonzero = 0
    for i in range(state.shape[0] // 2):
        ni = state[2 * i]
        zi = state[2 * i + 1]
        if ni != 0 or zi != 0:
            keys[j] = i
            n[j] = ni
            z[j] = zi
            j += 1
            if _weight(np.float64(zi), np.float64(ni), alpha, beta, l1, l2) != 0.0:
                nonzero += 1
    return nonzero


@njit
def weights(state, alpha, beta, l1, l2, out):
    """Dense weight vector derived from the interleaved state."""
    for i in range(out.shape[0]):
        out[i] = _weight(
            np.float64(state[2 * i + 1]), np.float64(state[2 * i]), alpha, beta, l1, l2
        )
