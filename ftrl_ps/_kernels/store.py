"""Kernels of the parameter store (``ftrl_ps.store``).

All kernels work on ONE segment ``[lo, hi)`` of the request arrays, which the
caller has already restricted to a single parameter group and protected with
that group's lock. They are ``nogil``, so requests that touch different groups
run in parallel threads.

Assumptions (checked by ``ParameterStore``, not here):

* ``local_keys`` are int64 offsets into ``n``/``z`` (key - shard begin), in
  range, sorted and unique;
* value arrays have the dtype of ``n``/``z`` and the length of ``local_keys``.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit


@njit
def gather_segment(
    n: np.ndarray,
    z: np.ndarray,
    local_keys: np.ndarray,
    lo: int,
    hi: int,
    out_n: np.ndarray,
    out_z: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """``out_n[i] = n[local_keys[i]]`` (same for z) for i in [lo, hi)."""
    for i in range(lo, hi):
        k = local_keys[i]
        out_n[i] = n[k]
        out_z[i] = z[k]


@njit
def scatter_add_segment(
    n: np.ndarray,
    z: np.ndarray,
    local_keys: np.ndarray,
    delta_n: np.ndarray,
    delta_z: np.ndarray,
    lo: int,
    hi: int,
) -> None:  # pragma: no cover - compiled
    """``n[local_keys[i]] += delta_n[i]`` (same for z) for i in [lo, hi)."""
    for i in range(lo, hi):
        k = local_keys[i]
        n[k] += delta_n[i]
        z[k] += delta_z[i]


@njit
def scatter_set_segment(
    n: np.ndarray,
    z: np.ndarray,
    local_keys: np.ndarray,
    new_n: np.ndarray,
    new_z: np.ndarray,
    lo: int,
    hi: int,
) -> None:  # pragma: no cover - compiled
    """``n[local_keys[i]] = new_n[i]`` (same for z) for i in [lo, hi)."""
    for i in range(lo, hi):
        k = local_keys[i]
        n[k] = new_n[i]
        z[k] = new_z[i]


@njit
def segment_bounds(groups: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Start indices of the runs of equal values in sorted ``groups``, plus ``len``.

    ``[0, 0, 1, 1, 1, 3] -> [0, 2, 5, 6]``; an empty input gives ``[0]``.
    """
    m = groups.shape[0]
    count = 1
    for i in range(1, m):
        if groups[i] != groups[i - 1]:
            count += 1
    out = np.empty(count + 1 if m > 0 else 1, dtype=np.int64)
    out[0] = 0
    j = 1
    for i in range(1, m):
        if groups[i] != groups[i - 1]:
            out[j] = i
            j += 1
    if m > 0:
        out[j] = m
    return out
