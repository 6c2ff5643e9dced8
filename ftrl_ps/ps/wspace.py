"""The ``compose-n`` merge rule: ``compose``'s weights, with ``n`` summed.

``compose`` (:mod:`ftrl_ps.ps.merge`) composes the pair ``(n, z)``: for a key
that every concurrent worker pins down (``rho = 0``) the shard keeps the
*mean* of their ``n`` deltas, so the key's learning rate then decays as if
one worker's rows had been seen. One process would have summed them: ``n`` is
the sum of the squared gradients of all rows, whatever their order. This
rule keeps the *weights* ``compose`` gives and sums ``n``:

* ``n`` gets every push's ``delta n`` as it is;
* ``z`` is set so that the weight at the summed ``n`` equals the weight of
  ``compose``'s state ``(n_compose, z_compose)``: ``|z| - l1`` is
  ``|z_compose| - l1`` scaled by ``P(n) / P(n_compose)`` (``P(n) = (beta +
  sqrt(n)) / alpha + l2``); a key in the L1 zone (weight 0) keeps ``z``;
* per key the shard keeps ``extra = n_compose - n`` (one number); the map
  between ``z`` and ``z_compose`` is one-to-one, so ``compose``'s state is
  known exactly; a push that starts a group resets ``extra`` to 0 (the
  group composes from the actual state).

So a push nobody overlapped is applied exactly (``n_compose = n``), a key
whose concurrent pushes ``compose`` sums (``rho = 1``) is (almost) summed,
and ``N`` identical workers leave a key they pin down at one worker's
weight, with ``N`` times its ``n`` (as one process given the ``N`` copies).
The final state of a group does not depend on the order of its pushes.

Interface for the shard (:func:`apply_n_summed`): ``groups`` with the arrays
of :class:`ftrl_ps.ps.merge.ComposeState` (``version``, ``base``, ``count``,
``weight``, ``rho``, ``mean``) plus ``extra`` ``(size,)``; the push's local
keys, ``(len, 2)`` deltas, pulled versions, rows, ``rho``; the keys' current
``n``, ``z`` (float64); ``params = (alpha, beta, l1, l2)``. It returns the
``(len, 2)`` float64 amounts to add to ``(n, z)`` and updates the arrays (it
does not bump ``version``; the caller does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl_ps.ps.groups import compose_add

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
    ...          (0.5, 1.0, 1.0, 1.0)).round(6).tolist()
    [5.666667, 0.5]
    """
    alpha, beta, l1, l2 = params
    ratio = precision(n_to, alpha, beta, l2) / precision(n_from, alpha, beta, l2)
    excess = np.abs(z) - l1
    return np.where(excess > 0, np.sign(z) * (l1 + excess * ratio), z)


def apply_n_summed(groups: Any, local: np.ndarray, delta: np.ndarray, pulled: np.ndarray,
                   rows: np.ndarray, rho: np.ndarray, n: np.ndarray, z: np.ndarray,
                   params: tuple[float, float, float, float]) -> np.ndarray:
    """Amounts to add to ``(n, z)`` of ``local`` keys for one push; updates ``groups``.
    See the module docstring."""
    rho = np.asarray(rho, np.float64)
    # compose's state of the keys: n + extra, and the z giving the same weight there
    n_c = np.maximum(n + groups.extra[local], 0.0)
    z_c = rescaled(z, n, n_c, params)
    add, fresh, _ = compose_add(groups, local, delta, pulled, rows, rho)
    n_c = np.maximum(n_c + add[:, 0], 0.0)
    z_c = z_c + add[:, 1]
    new_n = np.maximum(n + delta[:, 0], 0.0)
    n_c[fresh], z_c[fresh] = new_n[fresh], z[fresh] + delta[fresh, 1]  # a new group
    groups.extra[local] = n_c - new_n
    out = np.empty((local.size, 2))
    out[:, 0] = new_n - n
    out[:, 1] = rescaled(z_c, n_c, new_n, params) - z
    out[fresh, 1] = delta[fresh, 1]  # exactly the push (no rounding through the rescale)
    return out
