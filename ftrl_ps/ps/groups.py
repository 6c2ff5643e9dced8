"""Groups of concurrent pushes: where a push's keys stand, and ``compose``'s three cases.

A shard keeps per key its *version* (pushes applied) and the current group of
concurrent pushes (``base`` version, ``count``, ``weight``, ``rho``, ``mean``;
:class:`ftrl_ps.ps.merge.ComposeState`). Every versioned merge rule first
sorts a push's keys by the version each worker pulled (:func:`classify`);
``compose`` then adds what :func:`compose_add` computes, which ``compose-n``
(:mod:`ftrl_ps.ps.wspace`) applies in its own state. The derivation is in
``docs/algorithm.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["classify", "compose_add", "composed"]


def composed(rho: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """``1 + rho + ... + rho**(count - 1)``: how many single updates ``count``
    concurrent ones add up to.

    >>> composed(np.array([0.0, 0.5, 1.0]), np.array([3, 3, 3]))
    array([1.  , 1.75, 3.  ])
    """
    rho = np.asarray(rho, np.float64)
    count = np.asarray(count, np.float64)
    one = 1.0 - rho
    near = one < 1e-9
    return np.where(near, count, (1.0 - rho**count) / np.where(near, 1.0, one))


def classify(groups: Any, local: np.ndarray, pulled: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(version, missed, fresh, join, late)`` of a push's ``local`` keys.

    ``fresh``: nothing since the worker's pull (or a version this shard has not
    reached: it restarted from a checkpoint, which keeps no versions, so nothing
    is known about concurrency): a new group. ``join``: changed only by the
    current group. ``late``: it missed ``missed`` pushes of older groups.

    >>> class G: version = np.array([0, 2, 3], np.uint32); base = np.array([0, 1, 1], np.uint32)
    >>> [m.tolist() for m in classify(G, np.array([0, 1, 2]), np.array([0, 1, 2]))[1:]]
    [[0, 1, 1], [True, False, False], [False, True, False], [False, False, True]]
    """
    version = groups.version[local].astype(np.int64)
    pulled = pulled.astype(np.int64)
    missed = version - pulled
    fresh = missed <= 0
    join = ~fresh & (pulled == groups.base[local])
    late = ~(fresh | join)
    return version, missed, fresh, join, late


def compose_add(groups: Any, local: np.ndarray, delta: np.ndarray, pulled: np.ndarray,
                rows: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``compose`` adds to ``(n, z)`` of ``local`` keys for one push, which
    keys started a group and which were late (:func:`classify`); updates the
    groups (not ``version``).

    ``delta`` is the push's ``(len, 2)`` deltas, ``pulled`` the versions the
    worker pulled, ``rows`` its rows containing each key (the weight in the
    group's mean), ``rho`` its saturation. A fresh key's delta is added as it
    is; a key joining the group adds the change of the group's composed total;
    a late key adds its delta scaled by ``rho ** missed``.
    """
    version, missed, fresh, join, late = classify(groups, local, pulled)
    out = np.empty(delta.shape, dtype=np.float64)
    w = np.maximum(rows, 1).astype(np.float64)
    if fresh.any():
        k = local[fresh]
        groups.base[k] = version[fresh]
        groups.count[k] = 1
        groups.weight[k] = w[fresh]
        groups.rho[k] = rho[fresh]
        groups.mean[k] = delta[fresh]
        out[fresh] = delta[fresh]
    if join.any():
        k = local[join]
        count = groups.count[k].astype(np.float64)
        mean = groups.mean[k].astype(np.float64)
        before = mean * composed(groups.rho[k], count)[:, None]
        total = groups.weight[k] + w[join]
        share = (w[join] / total)[:, None]
        mean += (delta[join] - mean) * share
        mrho = groups.rho[k] + (rho[join] - groups.rho[k]) * share[:, 0]
        after = mean * composed(mrho, count + 1)[:, None]
        groups.mean[k] = mean
        groups.rho[k] = mrho
        groups.weight[k] = total
        groups.count[k] += np.uint32(1)
        out[join] = after - before
    if late.any():
        out[late] = delta[late] * (rho[late] ** missed[late])[:, None]
    return out, fresh, late
