"""The ``compose-late`` merge rule: ``compose``, with a late push's ``n`` added in full.

``compose`` (:mod:`ftrl_ps.ps.groups`) adds a *late* push (one that missed
``m`` pushes of older groups) as ``delta * rho**m``. For a key the rounds pin
down (``rho = 0``: the bias, dense keys) that is right for the key's
*weight* (the push repeats a journey the pushes it missed already made) but
not for its ``n``, the sum of the squared gradients of the rows, whatever
their order: in runs of few, long rounds most pushes of the bias are late,
its ``n`` stays a fraction of one process's and its learning rate too high
(docs/algorithm.md, sections 7 and 8). So for a late key with ``rho < 1``:

* ``n`` gets the push's ``delta n`` in full;
* ``z`` is set so that the weight at that ``n`` is the weight ``compose``
  would give the key (its state plus ``delta * rho**m``): ``|z| - l1``
  scaled by ``P(n) / P(n_compose)`` (:func:`ftrl_ps.ps.wspace.rescaled`; a
  key in the L1 zone keeps ``z``).

Fresh and joining pushes are merged as ``compose`` merges them (a group's
composed mean, ``n`` included): summing ``n`` there too learns dense keys
``N`` times slower per round (``compose-n``, docs/algorithm.md section 6),
since the group's mean move is one worker's move. A late push is not a
member of a group of concurrent moves; its ``n`` was earned by rows no other
push carried.

The worker judges a key dense (``rho = 0``) against the rows the push
actually carries (``compose`` judges it against a full push, so that in a
short last push a key in nearly every row is taken as rare, ``rho = 1``, and
the workers' concurrent short pushes are summed: the larger part of the
failure in few, long rounds, docs/algorithm.md section 8).

Interface for the shard (:func:`apply_late`): ``groups`` with the arrays of
:class:`ftrl_ps.ps.merge.ComposeState`; the push's local keys, ``(len, 2)``
deltas, pulled versions, rows, ``rho``; the keys' current ``n``, ``z``
(float64); ``params = (alpha, beta, l1, l2)``. It returns the ``(len, 2)``
float64 amounts to add to ``(n, z)`` and updates the groups (not
``version``: the caller bumps it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl_ps.ps.groups import compose_add
from ftrl_ps.ps.wspace import rescaled

__all__ = ["apply_late"]


def apply_late(groups: Any, local: np.ndarray, delta: np.ndarray, pulled: np.ndarray,
               rows: np.ndarray, rho: np.ndarray, n: np.ndarray, z: np.ndarray,
               params: tuple[float, float, float, float]) -> np.ndarray:
    """Amounts to add to ``(n, z)`` of ``local`` keys for one push; updates ``groups``.
    See the module docstring."""
    rho = np.asarray(rho, np.float64)
    out, _, late = compose_add(groups, local, delta, pulled, rows, rho)
    k = np.flatnonzero(late & (rho < 1.0))  # rho = 1: compose adds delta, n included
    if k.size:
        n_compose = np.maximum(n[k] + out[k, 0], 0.0)
        n_new = np.maximum(n[k] + delta[k, 0], 0.0)
        out[k, 0] = n_new - n[k]
        out[k, 1] = rescaled(z[k] + out[k, 1], n_compose, n_new, params) - z[k]
    return out
