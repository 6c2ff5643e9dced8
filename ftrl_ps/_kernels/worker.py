"""Kernels of the worker loop: key sets and local/server state bookkeeping.

Assumptions (checked or guaranteed by :mod:`ftrl_ps.worker`): ``state`` and
``base`` are C-contiguous ``(num_keys, 2)`` float64 arrays (``n`` then ``z``);
every key is in ``[0, num_keys)``; ``stamp`` is an int32 array of ``num_keys``
entries (int32) that only :func:`unique_keys` writes.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit


@njit
def unique_keys(indices, extra_key, stamp, token, counts):  # type: ignore[no-untyped-def]
    """Sorted unique keys of ``indices`` plus ``extra_key`` (uint32), and how often each occurs.

    ``stamp[k] == token`` marks keys already seen in this call; ``token`` must
    differ from every earlier call's (the caller counts up), so the stamp
    array never needs clearing. ``counts`` (int32, ``num_keys`` entries, all
    zero on entry) is used as scratch and left all zero again. Rows hold each
    key at most once, so a key's count is the number of rows that contain it
    (``extra_key``, the bias, gets the count 0: the caller knows it is in
    every row).
    """
    out = np.empty(indices.shape[0] + 1, dtype=np.int64)
    count = 0
    stamp[extra_key] = token
    out[count] = extra_key
    count += 1
    for j in range(indices.shape[0]):
        k = indices[j]
        counts[k] += 1
        if stamp[k] != token:
            stamp[k] = token
            out[count] = k
            count += 1
    keys = np.sort(out[:count])
    occurrences = np.empty(count, dtype=np.int64)
    for j in range(count):
        occurrences[j] = counts[keys[j]]
        counts[keys[j]] = 0
    return keys.astype(np.uint32), occurrences


@njit
def merge_pulled(state, base, keys, n, z):  # type: ignore[no-untyped-def]
    """Take the server's ``n``/``z`` for ``keys`` and keep the local unpushed delta.

    ``local = pulled + (local - base)``; ``base = pulled``.
    """
    for j in range(keys.shape[0]):
        k = keys[j]
        un_n = state[k, 0] - base[k, 0]
        un_z = state[k, 1] - base[k, 1]
        pn = np.float64(n[j])
        pz = np.float64(z[j])
        base[k, 0] = pn
        base[k, 1] = pz
        state[k, 0] = pn + un_n
        state[k, 1] = pz + un_z


@njit
def deltas(state, base, keys, occurrences, dense_rows, dense_scale, delta_n, delta_z):  # type: ignore[no-untyped-def]
    """``delta = local - base`` for ``keys`` (what the server has not seen yet).

    Keys that occur in at least ``dense_rows`` rows (and the last key, the
    bias) have their deltas multiplied by ``dense_scale``.
    """
    last = keys.shape[0] - 1
    for j in range(keys.shape[0]):
        k = keys[j]
        scale = dense_scale if (occurrences[j] >= dense_rows or j == last) else 1.0
        delta_n[j] = (state[k, 0] - base[k, 0]) * scale
        delta_z[j] = (state[k, 1] - base[k, 1]) * scale


@njit
def commit(state, base, keys):  # type: ignore[no-untyped-def]
    """After a successful push: the server now holds ``keys``' local values."""
    for j in range(keys.shape[0]):
        k = keys[j]
        base[k, 0] = state[k, 0]
        base[k, 1] = state[k, 1]
