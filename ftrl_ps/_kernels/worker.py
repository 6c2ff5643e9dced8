"""Kernels of the worker loop: the key set of a round and its compact numbering.

:func:`first_seen` numbers keys in order of first appearance (one pass over
the round's indices, through a small open-addressing hash table that stays in
cache); sorting the few distinct keys is left to numpy (several times faster
than numba's argsort); :func:`renumber` then maps the numbers to positions in
the sorted key set.

Assumptions (checked or guaranteed by :mod:`ftrl_ps.ps.workingset`): every index is
in ``[0, 2**30)`` (``MAX_BITS``), ``extra_key`` too; ``table`` is an int64 array
whose size is a power of two, ``2**(64 - shift)``.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit
from ftrl_ps._kernels._intrinsics import prefetch

__all__ = ["EMPTY", "HASH_MULTIPLIER", "PREFETCH_AHEAD", "first_seen", "renumber"]

#: an empty slot of the hash table (a filled one holds ``key << 32 | number``)
EMPTY = -1
#: Fibonacci hashing: the top bits of ``key * HASH_MULTIPLIER`` (2**64 / golden ratio)
HASH_MULTIPLIER = 0x9E3779B97F4A7C15
#: :func:`first_seen` prefetches the table slot of the key this many entries ahead
#: (16-64 measured alike on a 2**18-slot table; 0.55-0.75x the loop's time without)
PREFETCH_AHEAD = 32


@njit
def first_seen(indices, extra_key, table, shift, limit, local, seen, count):
    """Number the distinct keys of ``indices`` (``extra_key`` first) by first appearance.

    Writes, for ``count`` distinct keys (the return value): ``seen[s]`` the key
    numbered ``s`` (``seen[0] = extra_key``) and ``local[j]`` the number of
    ``indices[j]``. ``seen`` needs ``len(indices) + 1`` entries, ``local`` as
    many as ``indices``. ``table`` maps keys to numbers by linear probing from
    the top ``64 - shift`` bits of the key's hash; the slot of the key
    ``PREFETCH_AHEAD`` entries on is prefetched. When there are more than
    ``limit`` distinct keys (``extra_key`` included) it stops and returns -1:
    the caller retries with a larger table (keep ``limit`` well below the
    table's size, e.g. 60 %). Counting the keys' entries here took half of this
    loop's time (a store to a random slot in every step): :func:`renumber`
    counts them.

    ``count`` is how many keys the earlier calls of the same numbering gave
    (their ``table`` and ``seen`` kept): 0 starts a numbering (the table
    cleared, ``extra_key`` numbered 0), the result of the previous call goes on
    with the next array of indices (``seen`` then needs room for every array's
    keys), so a round's mini-batches are numbered without concatenating them.
    """
    n = indices.shape[0]
    mask = np.uint64(table.shape[0] - 1)
    mult = np.uint64(HASH_MULTIPLIER)
    sh = np.uint64(shift)
    if count == 0:
        table[:] = EMPTY
        key = np.int64(extra_key)
        table[(np.uint64(key) * mult) >> sh] = key << 32
        seen[0] = extra_key
        count = 1
    for j in range(n):
        if j + PREFETCH_AHEAD < n:
            prefetch(table, (np.uint64(np.int64(indices[j + PREFETCH_AHEAD])) * mult) >> sh)
        key = np.int64(indices[j])
        h = (np.uint64(key) * mult) >> sh
        while True:
            e = table[h]
            if e == EMPTY:
                if count >= limit:
                    return -1
                table[h] = (key << 32) | count
                seen[count] = key
                s = count
                count += 1
                break
            if (e >> 32) == key:
                s = e & 0xFFFFFFFF
                break
            h = (h + np.uint64(1)) & mask
        local[j] = s
    return count


@njit
def renumber(local, packed, keys, occurrences):
    """Renumber ``local`` from first-appearance order to sorted-key order.

    ``packed`` holds ``key << 32 | number`` for every number, sorted; writes
    the sorted ``keys`` (uint32) and their ``occurrences``: how many entries
    of ``local`` hold each.
    """
    count = packed.shape[0]
    rank = np.empty(count, dtype=np.int32)
    hits = np.zeros(count, dtype=np.int32)
    for i in range(count):
        s = packed[i] & 0xFFFFFFFF
        rank[s] = i
        keys[i] = packed[i] >> 32
    for j in range(local.shape[0]):
        s = local[j]
        hits[s] += 1
        local[j] = rank[s]
    for s in range(count):
        occurrences[rank[s]] = hits[s]
