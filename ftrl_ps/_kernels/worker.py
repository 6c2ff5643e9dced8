"""Kernels of the worker loop: the key set of a round and its compact numbering.

:func:`first_seen` numbers keys in order of first appearance (one pass, the
tags of upcoming keys prefetched); sorting the few distinct keys is left to
numpy (several times faster than numba's argsort); :func:`renumber` then maps
the numbers to positions in the sorted key set.

Assumptions (checked or guaranteed by :mod:`ftrl_ps.ps.workingset`): every index is
in ``[0, extra_key)``; ``tags`` is a C-contiguous ``(extra_key + 1, 2)`` int32
array that only :func:`first_seen` writes (column 0 a stamp, column 1 a
slot, side by side so one cache line serves both).
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit
from ftrl_ps._kernels._intrinsics import prefetch

__all__ = ["PREFETCH_AHEAD", "first_seen", "renumber"]

#: entries ahead whose tags :func:`first_seen` prefetches
PREFETCH_AHEAD = 16


@njit
def first_seen(indices, extra_key, tags, token, local, seen, hits):  # type: ignore[no-untyped-def]
    """Number the distinct keys of ``indices`` (``extra_key`` first) by first appearance.

    Writes, for ``count`` distinct keys (the return value): ``seen[s]`` the key
    numbered ``s`` (``seen[0] = extra_key``), ``hits[s]`` how many entries of
    ``indices`` hold it, and ``local[j]`` the number of ``indices[j]``.
    ``seen``/``hits`` need ``len(indices) + 1`` entries, ``local`` as many as
    ``indices``. ``tags[k, 0] == token`` marks keys already numbered in this
    call; ``token`` must differ from every earlier call's (the caller counts
    up), so ``tags`` never needs clearing.
    """
    n = indices.shape[0]
    flat = tags.reshape(-1)
    tags[extra_key, 0] = token
    tags[extra_key, 1] = 0
    seen[0] = extra_key
    hits[0] = 0
    count = 1
    for j in range(n):
        if j + PREFETCH_AHEAD < n:
            prefetch(flat, 2 * np.int64(indices[j + PREFETCH_AHEAD]))
        k = indices[j]
        if tags[k, 0] != token:
            tags[k, 0] = token
            tags[k, 1] = count
            seen[count] = k
            hits[count] = 0
            count += 1
        s = tags[k, 1]
        hits[s] += 1
        local[j] = s
    return count


@njit
def renumber(local, packed, hits, keys, occurrences):  # type: ignore[no-untyped-def]
    """Renumber ``local`` from first-appearance order to sorted-key order.

    ``packed`` holds ``key << 32 | number`` for every number, sorted; writes
    the sorted ``keys`` (uint32) and their ``occurrences`` (from ``hits``).
    """
    count = packed.shape[0]
    rank = np.empty(count, dtype=np.int32)
    for i in range(count):
        s = packed[i] & 0xFFFFFFFF
        rank[s] = i
        keys[i] = packed[i] >> 32
        occurrences[i] = hits[s]
    for j in range(local.shape[0]):
        local[j] = rank[local[j]]
