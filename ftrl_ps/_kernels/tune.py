"""FTRL-Proximal over K models at once: K hyper-parameter settings, one pass over the rows.

The kernels of ``ftrl-ps tune``, called only through :mod:`ftrl_ps.learn.multi`,
which checks their inputs. Every model sees the same rows in the same order
and takes the steps of McMahan et al. (KDD 2013) Algorithm 1 with its own
``alpha, beta, l1, l2``; reading a row's indices and values is paid once for
all K, and the loops over the K models run over contiguous memory without
branches, so they vectorise (SIMD).

To that end the kernels keep ``s = sqrt(n)`` instead of ``n`` (one square root
per update instead of two) and use the equivalent forms::

    w     = -(z - sign(z) * l1) * alpha / (beta + s + alpha * l2)   if |z| > l1, else 0
    s'    = sqrt(s**2 + g**2)
    z'    = z + g - (s' - s) / alpha * w

which equal Algorithm 1 up to rounding (the tests check them against the
plain-Python reference in ``tests/naive.py``).

Assumptions (checked by the wrapper, not here):

* ``state`` is a flat array of ``keys * 2 * K`` floats (float32 or float64):
  key ``i`` holds ``s`` of the K models at ``[2*K*i, 2*K*i + K)`` and their
  ``z`` right after; the last key is the bias (value 1.0 in every row);
* ``indptr``/``indices``/``values`` are CSR rows with ``0 <= indices < keys - 1``,
  sorted and unique within a row; ``order`` holds row numbers in
  ``[0, len(indptr) - 1)``, the rows to visit in that order (a row may repeat);
* ``alpha``, ``beta``, ``l1``, ``l2``, ``inv_alpha`` (``1 / alpha``) and
  ``alpha_l2`` (``alpha * l2``) are arrays of length K of the state's dtype,
  ``alpha > 0``, the others ``>= 0``; ``loss`` is float64 of length K.

The arithmetic is done in the state's dtype (float32 arithmetic vectorises
twice as wide and moves half the bytes; ``ftrl-ps tune`` uses it), the margins
and losses of the rows in float64.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit
from ftrl_ps._kernels._intrinsics import prefetch
from ftrl_ps._kernels.ftrl import _logloss, _sigmoid

__all__ = ["logloss_many", "train_many", "weights_many"]

#: rows ahead whose state the training loop prefetches
_AHEAD = 2
#: a zero that keeps float32 arithmetic in float32 (a float64 0.0 would widen it)
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
#: numpy's error model: a float division never raises (and never branches), so
#: the loops over the models vectorise; every denominator here is > 0 anyway
_VEC = {"error_model": "numpy"}


@njit(inline="always", **_VEC)
def _w(z, s, alpha, beta, l1, alpha_l2):
    """The FTRL-Proximal weight from ``z`` and ``s = sqrt(n)`` (branch-free select)."""
    w = -(z - np.copysign(l1, z)) * alpha / (beta + s + alpha_l2)
    return _ZERO if abs(z) <= l1 else w


@njit(**_VEC)
def train_many(state, labels, indptr, indices, values, order,
               alpha, beta, l1, inv_alpha, alpha_l2, loss):
    """Predict-then-update the rows ``order`` for every model; add each model's
    progressive log loss of those rows to ``loss[k]``."""
    m = alpha.shape[0]
    width = 2 * m
    bias = np.int64(state.shape[0] // width - 1) * width
    longest = 0
    for i in range(order.shape[0]):
        longest = max(longest, indptr[order[i] + 1] - indptr[order[i]])
    wbuf = np.empty((longest + 1) * m, dtype=state.dtype)  # weights used in the prediction
    margin = np.empty(m, dtype=np.float64)
    grad = np.empty(m, dtype=state.dtype)
    visits = order.shape[0]
    for i in range(visits):
        r = order[i]
        lo = indptr[r]
        hi = indptr[r + 1]
        if i + _AHEAD < visits:
            ahead = order[i + _AHEAD]
            for j in range(indptr[ahead], indptr[ahead + 1]):
                base = np.int64(indices[j]) * width
                prefetch(state, base)
                prefetch(state, base + width - 1)
        # predict: slot 0 of wbuf is the bias (value 1.0), then the row's features
        s_k = state[bias : bias + m]
        z_k = state[bias + m : bias + width]
        for k in range(m):
            w = _w(z_k[k], s_k[k], alpha[k], beta[k], l1[k], alpha_l2[k])
            wbuf[k] = w
            margin[k] = w
        for j in range(lo, hi):
            base = np.int64(indices[j]) * width
            x = values[j]
            s_k = state[base : base + m]
            z_k = state[base + m : base + width]
            w_k = wbuf[(j - lo + 1) * m : (j - lo + 2) * m]
            for k in range(m):
                w = _w(z_k[k], s_k[k], alpha[k], beta[k], l1[k], alpha_l2[k])
                w_k[k] = w
                margin[k] += w * x
        y = np.float64(labels[r])
        for k in range(m):
            p = _sigmoid(margin[k])
            loss[k] += _logloss(p, y)
            grad[k] = p - y
        # update, bias first
        for j in range(lo - 1, hi):
            if j < lo:
                base = bias
                x = _ONE
            else:
                base = np.int64(indices[j]) * width
                x = values[j]
            s_k = state[base : base + m]
            z_k = state[base + m : base + width]
            w_k = wbuf[(j - lo + 1) * m : (j - lo + 2) * m]
            for k in range(m):
                g = grad[k] * x
                s_old = s_k[k]
                s_new = np.sqrt(s_old * s_old + g * g)
                z_k[k] = z_k[k] + g - (s_new - s_old) * inv_alpha[k] * w_k[k]
                s_k[k] = s_new


@njit(**_VEC)
def weights_many(state, alpha, beta, l1, alpha_l2, out):
    """Weights of every key and model into ``out`` (``keys x K``)."""
    m = alpha.shape[0]
    width = 2 * m
    for i in range(out.shape[0]):
        s_k = state[i * width : i * width + m]
        z_k = state[i * width + m : (i + 1) * width]
        o_k = out[i]
        for k in range(m):
            o_k[k] = _w(z_k[k], s_k[k], alpha[k], beta[k], l1[k], alpha_l2[k])


@njit(**_VEC)
def logloss_many(weights, labels, indptr, indices, values, order, loss):
    """Add the log loss of the rows ``order`` under each model's ``weights``
    (``keys x K``, bias last) to ``loss[k]``."""
    m = weights.shape[1]
    bias = weights.shape[0] - 1
    margin = np.empty(m, dtype=np.float64)
    for i in range(order.shape[0]):
        r = order[i]
        b_k = weights[bias]
        for k in range(m):
            margin[k] = b_k[k]
        for j in range(indptr[r], indptr[r + 1]):
            w_k = weights[indices[j]]
            x = np.float64(values[j])
            for k in range(m):
                margin[k] += w_k[k] * x
        y = np.float64(labels[r])
        for k in range(m):
            loss[k] += _logloss(_sigmoid(margin[k]), y)
