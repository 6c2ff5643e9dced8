"""The ``compose-n`` merge rule: ``compose``'s weights, with ``n`` summed.

``compose`` (:mod:`ftrl_ps.ps.merge`) composes the pair ``(n, z)``: for a key
that every concurrent worker pins down (``rho = 0``) the shard keeps the
*mean* of their ``n`` deltas, so the key's learning rate then decays as if
one worker's rows had been seen. One process would have summed them: ``n`` is
the sum of the squared gradients of all rows, whatever their order. This
rule keeps the *weights* ``compose`` gives and sums ``n``:

* per key the shard keeps ``compose``'s state without the current group,
  ``start`` (``(n, z)`` at the group's start plus the late pushes since), so
  ``compose``'s state is ``start + mean * C(rho, j)`` (the group's total);
* ``n`` gets every push's ``delta n`` as it is;
* ``z`` is set so that the weight at the summed ``n`` equals ``compose``'s
  weight: ``|z| - l1`` is scaled by ``P(n) / P(n_compose)`` (``P(n) = (beta +
  sqrt(n)) / alpha + l2``); a key in the L1 zone (weight 0) keeps ``z``.

So a push nobody overlapped is applied exactly (``n_compose = n``), a key
whose concurrent pushes ``compose`` sums (``rho = 1``) is (almost) summed,
and ``N`` identical workers leave a key they pin down at one worker's
weight, with ``N`` times its ``n`` (as one process given the ``N`` copies).
The final state of a group does not depend on the order of its pushes.

Interface for the shard (:func:`apply_n_summed`): ``groups`` with the arrays
of :class:`ftrl_ps.ps.merge.ComposeState` (``version``, ``base``, ``count``,
``weight``, ``rho``, ``mean``) plus ``start`` ``(size, 2)``; the push's local
keys, ``(len, 2)`` deltas, pulled versions, rows, ``rho``; the keys' current
``n``, ``z`` (float64); ``params = (alpha, beta, l1, l2)``. It returns the
``(len, 2)`` float64 amounts to add to ``(n, z)`` and updates the arrays (it
does not bump ``version``; the caller does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["apply_n_summed", "precision", "rescaled"]


def precision(n: np.ndarray, alpha: float, beta: float, l2: float) -> np.ndarray:
    """FTRL's ``P(n) = (beta + sqrt(n)) / alpha + l2``.

    >>> precision(np.array([0.0, 4.0]), 0.5, 1.0, 1.0).tolist()
    [3.0, 7.0]
    """
    return (beta + np.sqrt(np.maximum(n, 0.0))) / alpha + l2


def rescaled(z: np.ndarray, n_from: np.ndarray, n_to: np.ndarray,
             params: tuple[float, float, float, float]) -> np.ndarray:
    """``z`` giving at ``n_to`` the weight that ``z`` gives at ``n_from``.

    >>> rescaled(np.array([3.0, 0.5]), np.array([0.0, 0.0]), np.array([4.0, 4.0]),
    ...          (0.5, 1.0, 1.0, 1.0)).tolist()
    [5.666666666666666, 0.5]
    """
    alpha, beta, l1, l2 = params
    ratio = precision(n_to, alpha, beta, l2) / precision(n_from, alpha, beta, l2)
    excess = np.abs(z) - l1
    return np.where(excess > 0, np.sign(z) * (l1 + excess * ratio), z)


def _composed(rho: np.ndarray, count: np.ndarray) -> np.ndarray:
    one = 1.0 - rho
    near = one < 1e-9
    return np.where(near, count, (1.0 - rho**count) / np.where(near, 1.0, one))


def apply_n_summed(groups: Any, local: np.ndarray, delta: np.ndarray, pulled: np.ndarray,
                   rows: np.ndarray, rho: np.ndarray, n: np.ndarray, z: np.ndarray,
                   params: tuple[float, float, float, float]) -> np.ndarray:
    """Amounts to add to ``(n, z)`` of ``local`` keys for one push; updates ``groups``.
    See the module docstring."""
    rho = np.asarray(rho, np.float64)
    version = groups.version[local].astype(np.int64)
    pulled = pulled.astype(np.int64)
    missed = version - pulled
    fresh = missed <= 0  # nothing since the pull (or a restarted shard): a new group
    join = ~fresh & (pulled == groups.base[local])
    late = ~(fresh | join)
    w = np.maximum(rows, 1).astype(np.float64)
    if fresh.any():
        i = local[fresh]
        groups.base[i] = version[fresh]
        groups.count[i] = 1
        groups.weight[i] = w[fresh]
        groups.rho[i] = rho[fresh]
        groups.mean[i] = delta[fresh]
        groups.start[i, 0] = n[fresh]
        groups.start[i, 1] = z[fresh]
    if join.any():
        i = local[join]
        mean = groups.mean[i].astype(np.float64)
        share = (w[join] / (groups.weight[i] + w[join]))[:, None]
        groups.mean[i] = mean + (delta[join] - mean) * share
        groups.rho[i] = groups.rho[i] + (rho[join] - groups.rho[i]) * share[:, 0]
        groups.weight[i] = groups.weight[i] + w[join]
        groups.count[i] += np.uint32(1)
    if late.any():  # compose adds it scaled by rho ** missed, outside the group
        i = local[late]
        groups.start[i] = groups.start[i] + delta[late] * (rho[late] ** missed[late])[:, None]
    # compose's state of every key: its start plus its group's total
    total = groups.mean[local] * _composed(groups.rho[local].astype(np.float64),
                                           groups.count[local].astype(np.float64))[:, None]
    hyp = groups.start[local].astype(np.float64) + total
    new_n = np.maximum(n + delta[:, 0], 0.0)
    out = np.empty((local.size, 2))
    out[:, 0] = new_n - n
    out[:, 1] = rescaled(hyp[:, 1], np.maximum(hyp[:, 0], 0.0), new_n, params) - z
    out[fresh, 1] = delta[fresh, 1]  # exactly the push (no rounding through the rescale)
    return out
