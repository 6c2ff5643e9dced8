"""Kernel shared by the libsvm parser's two paths: one row's slots sorted, duplicates summed.

A row's slots come out of the parser in file order; hashed names (and indices
of ``2**bits`` or more, which are mixed into the table) arrive in any order and
may collide. :func:`sort_merge` makes the row canonical: slots increasing,
each once, with the sum of its values, zero sums dropped. Runs without the GIL,
inlined into its callers.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit

__all__ = ["F32_LIMIT", "sort_merge"]

#: float64 magnitudes at or above this round to inf in float32
F32_LIMIT = 3.4028235677973366e38


@njit(inline="always")
def sort_merge(idx: np.ndarray, vals: np.ndarray, s: int, e: int) -> tuple[int, bool]:
    """Sort ``idx[s:e]`` (carrying ``vals``), sum duplicates, drop zero sums.

    Returns ``(new_end, ok)``; ``ok`` is False if a sum overflows float32 (the
    row is then not meaningful).
    """
    if e - s <= 64:  # insertion sort: no allocation (rows of CTR data hold tens of slots)
        for i in range(s + 1, e):
            ki = idx[i]
            kv = vals[i]
            j = i - 1
            while j >= s and idx[j] > ki:
                idx[j + 1] = idx[j]
                vals[j + 1] = vals[j]
                j -= 1
            idx[j + 1] = ki
            vals[j + 1] = kv
    else:
        order = np.argsort(idx[s:e], kind="mergesort")
        ti = idx[s:e][order]
        tv = vals[s:e][order]
        idx[s:e] = ti
        vals[s:e] = tv
    w = s
    i = s
    while i < e:
        slot = idx[i]
        acc = np.float64(vals[i])
        i += 1
        while i < e and idx[i] == slot:
            acc += np.float64(vals[i])
            i += 1
        if np.float32(acc) != 0.0:
            if not abs(acc) < F32_LIMIT:
                return w, False
            idx[w] = slot
            vals[w] = acc
            w += 1
    return w, True
