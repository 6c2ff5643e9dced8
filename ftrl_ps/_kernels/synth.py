"""Kernel that formats one block of synthetic rows as libsvm text.

Private: call it only through :func:`ftrl_ps.data.synth.format_rows`, which checks
dtypes, shapes and value ranges first.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit

__all__ = ["format_block_kernel"]


@njit
def _write_uint(out: np.ndarray, pos: int, value: int) -> int:
    """Write the decimal digits of ``value >= 0`` at ``out[pos]``; return the new position."""
    if value == 0:
        out[pos] = 48
        return pos + 1
    ndigits = 0
    v = value
    while v > 0:
        ndigits += 1
        v //= 10
    v = value
    for k in range(ndigits - 1, -1, -1):
        out[pos + k] = 48 + v % 10
        v //= 10
    return pos + ndigits


@njit
def _write_milli(out: np.ndarray, pos: int, milli: int) -> int:
    """Write ``milli / 1000`` (``milli > 0``) with up to 3 decimals, no trailing zeros."""
    pos = _write_uint(out, pos, milli // 1000)
    frac = milli % 1000
    if frac != 0:
        out[pos] = 46  # '.'
        pos += 1
        d1 = frac // 100
        d2 = (frac // 10) % 10
        d3 = frac % 10
        out[pos] = 48 + d1
        pos += 1
        if d2 != 0 or d3 != 0:
            out[pos] = 48 + d2
            pos += 1
            if d3 != 0:
                out[pos] = 48 + d3
                pos += 1
    return pos


@njit
def format_block_kernel(
    labels: np.ndarray,
    numeric_milli: np.ndarray,
    cat_slots: np.ndarray,
    out: np.ndarray,
) -> int:
    """Write rows ``label idx:val ...\\n`` into ``out``; return the number of bytes.

    Assumptions (checked by the wrapper): ``labels`` is 0/1; numeric field ``j``
    sits at slot ``j`` and ``numeric_milli >= 0`` (zeros are skipped);
    every row of ``cat_slots`` is sorted ascending and every slot is
    ``>= numeric_milli.shape[1]``; equal neighbouring slots are merged into one
    feature whose value is their count; ``out`` is large enough.
    """
    n = labels.shape[0]
    p = numeric_milli.shape[1]
    q = cat_slots.shape[1]
    pos = 0
    for i in range(n):
        out[pos] = 48 + labels[i]
        pos += 1
        for j in range(p):
            m = numeric_milli[i, j]
            if m > 0:
                out[pos] = 32
                pos = _write_uint(out, pos + 1, j)
                out[pos] = 58  # ':'
                pos = _write_milli(out, pos + 1, m)
        k = 0
        while k < q:
            slot = cat_slots[i, k]
            count = 1
            while k + count < q and cat_slots[i, k + count] == slot:
                count += 1
            out[pos] = 32
            pos = _write_uint(out, pos + 1, slot)
            out[pos] = 58
            pos = _write_uint(out, pos + 1, count)
            k += count
        out[pos] = 10  # '\n'
        pos += 1
    return pos
