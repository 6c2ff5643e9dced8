"""The ``compose-last`` merge rule: ``compose``, with a late push taken as the *last* round.

``compose`` (:mod:`ftrl_ps.ps.groups`) adds a *late* push (one that missed
``m`` pushes of older groups) as ``delta * rho**m``: as if its rows had come
*first*, before the ``m`` it missed, which contract it ``m`` times. For a key
the rounds pin down (``rho = 0``: the bias, dense keys) that adds nothing,
``n`` included, and in runs of few, long rounds most pushes of the bias are
late: its ``n`` stays a fraction of one process's and its learning rate too
high (docs/algorithm.md, section 7).

The late push's rows were trained *after* the ones it missed (in wall
time), so this rule takes it as the last round of the sequence. A round maps
a start error ``e`` to ``rho * e``; started from the current state instead of
the one it pulled, the push would have moved the weight by its own move
``d_w`` minus ``(1 - rho)`` times the distance between the two starts:

    w_new = rho * (w_now + d_w) + (1 - rho) * (w_pulled + d_w)

(``d_w = w(pulled + delta) - w(pulled)``, ``w`` the FTRL weight of a state):
the sum for keys a round barely moves (``rho = 1``, as ``compose``), and for a
pinned key the weight the pushing worker ended its round at, whatever the
others did meanwhile. ``n`` is the sum of the squared gradients of the rows,
in any order, so a late push adds its ``delta n`` in full; ``z`` is set so
that the weight at the new ``n`` is ``w_new``.

The shard needs the state the worker pulled. It keeps, for every key some
push marked ``rho < 1`` (the bias and dense keys: few), the states after its
last :data:`HISTORY` pushes, with their versions. A late key whose pulled
state is no longer (or not yet) kept gets ``compose``'s weight
(``delta * rho**m`` added to the current state) with ``delta n`` added in
full. Fresh and joining pushes are merged as ``compose`` merges them (the
group's composed mean, ``n`` included), so concurrent rounds keep
``compose``'s behaviour (a summed ``n`` there learns dense keys ``N`` times
slower: ``compose-n``, docs/algorithm.md section 6).

Measured (docs/algorithm.md section 8): it gives the bias one process's
``n``, but does not remove the failure in few, long rounds (replayed
schedules of ``benchmarks/bench_late.py``: worst +0.071 against ``compose``'s
+0.050 and ``threshold``'s +0.004); kept selectable for the experiment.

Interface for the shard (:func:`apply_last`): ``groups`` with the arrays of
:class:`ftrl_ps.ps.merge.ComposeState` plus ``history`` (a dict: key -> its
kept ``(version, n, z)``) and ``tracked`` (``(size,)`` bool: the keys in
``history``); the push's local keys, ``(len, 2)`` deltas, pulled versions,
rows, ``rho``; the keys' current ``n``, ``z`` (float64); ``params = (alpha,
beta, l1, l2)``. It returns the ``(len, 2)`` float64 amounts to add to
``(n, z)`` and updates the groups and the history (not ``version``: the
caller bumps it).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ftrl_ps.ps.groups import classify, compose_add
from ftrl_ps.ps.wspace import precision

__all__ = ["HISTORY", "apply_last", "weight", "z_for"]

#: states kept per tracked key: a late push that missed more pushes of the key
#: than this falls back to ``compose``'s weight (with ``delta n`` in full)
HISTORY = 32


def weight(n: np.ndarray, z: np.ndarray, params: tuple[float, float, float, float]
           ) -> np.ndarray:
    """FTRL's weight of the state ``(n, z)``.

    >>> weight(np.array([4.0, 4.0]), np.array([3.0, 0.5]), (0.5, 1.0, 1.0, 1.0)).tolist()
    [-0.2857142857142857, 0.0]
    """
    alpha, beta, l1, l2 = params
    excess = np.abs(z) - l1
    return np.where(excess > 0, -np.sign(z) * excess / precision(n, alpha, beta, l2), 0.0)


def z_for(w: np.ndarray, n: np.ndarray, hint: np.ndarray,
          params: tuple[float, float, float, float]) -> np.ndarray:
    """A ``z`` whose weight at ``n`` is ``w``; for ``w = 0`` (the L1 zone) ``hint``
    clipped to ``[-l1, l1]``.

    >>> p = (0.5, 1.0, 1.0, 1.0)
    >>> z_for(np.array([-0.2857142857142857, 0.0]), np.array([4.0, 4.0]),
    ...       np.array([0.0, 7.0]), p).round(12).tolist()
    [3.0, 1.0]
    """
    alpha, beta, l1, l2 = params
    return np.where(w != 0, -w * precision(n, alpha, beta, l2) - np.sign(w) * l1,
                    np.clip(hint, -l1, l1))


def _pulled_states(history: dict[int, deque], local: np.ndarray, pulled: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(found, n, z)``: the kept state of each key at the version it pulled."""
    found = np.zeros(local.size, bool)
    n_p, z_p = np.zeros(local.size), np.zeros(local.size)
    for i, (key, ver) in enumerate(zip(local.tolist(), pulled.tolist(), strict=True)):
        for v, n, z in history.get(key, ()):
            if v == ver:
                found[i], n_p[i], z_p[i] = True, n, z
                break
    return found, n_p, z_p


def _remember(history: dict[int, deque], tracked: np.ndarray, local: np.ndarray,
              track: np.ndarray,
              version: np.ndarray, before: tuple[np.ndarray, np.ndarray],
              after: tuple[np.ndarray, np.ndarray]) -> None:
    """Keep the states after this push of the tracked keys (and, for a key seen
    for the first time, the state before it)."""
    for i in np.flatnonzero(track | tracked[local]).tolist():
        key = int(local[i])
        kept = history.get(key)
        if kept is None:
            kept = history[key] = deque(maxlen=HISTORY)
            tracked[key] = True
            kept.append((int(version[i]), float(before[0][i]), float(before[1][i])))
        kept.append((int(version[i]) + 1, float(after[0][i]), float(after[1][i])))


def apply_last(groups: Any, local: np.ndarray, delta: np.ndarray, pulled: np.ndarray,
               rows: np.ndarray, rho: np.ndarray, n: np.ndarray, z: np.ndarray,
               params: tuple[float, float, float, float]) -> np.ndarray:
    """Amounts to add to ``(n, z)`` of ``local`` keys for one push; updates ``groups``.
    See the module docstring."""
    rho = np.asarray(rho, np.float64)
    version, _, _, _, late = classify(groups, local, pulled)
    out, _ = compose_add(groups, local, delta, pulled, rows, rho)
    redo = np.flatnonzero(late & (rho < 1.0))
    if redo.size:
        k, d, r = local[redo], delta[redo], rho[redo]
        n_now, z_now = n[redo], z[redo]
        n_new = np.maximum(n_now + d[:, 0], 0.0)
        # compose's weight (the fallback): delta * rho**m on the current state
        w_new = weight(n_now + out[redo, 0], z_now + out[redo, 1], params)
        hint = z_now + out[redo, 1]
        found, n_p, z_p = _pulled_states(groups.history, k, pulled[redo])
        if found.any():
            f = found
            end_n, end_z = np.maximum(n_p[f] + d[f, 0], 0.0), z_p[f] + d[f, 1]
            w_end = weight(end_n, end_z, params)  # where the worker's round ended
            w_move = w_end - weight(n_p[f], z_p[f], params)
            w_now = weight(n_now[f], z_now[f], params)
            w_new[f] = r[f] * (w_now + w_move) + (1.0 - r[f]) * w_end
            hint[f] = end_z
        out[redo, 0] = n_new - n_now
        out[redo, 1] = z_for(w_new, n_new, hint, params) - z_now
    _remember(groups.history, groups.tracked, local, rho < 1.0, version,
              (n, z), (np.maximum(n + out[:, 0], 0.0), z + out[:, 1]))
    return out
