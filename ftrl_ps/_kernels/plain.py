"""Kernel of the libsvm reader's fast path: *plain* lines, the shape of most files.

Called only by :func:`ftrl_ps._kernels.parse.parse_chunk`, which gives the
lines that end with a newline to :func:`plain_lines` first; that takes lines
as long as they are plain, and the general scanner takes (and reports the
errors of) the first line that is not, or a chunk's last line without a
newline, before the next call. A plain line needs no byte classes, no second
scan of a value and no general float parser; the rows are the same bit for
bit (``tests/test_libsvm.py``). Runs without the GIL.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit
from ftrl_ps._kernels.mix import mix64
from ftrl_ps._kernels.rowsort import sort_merge

__all__ = ["MAX_VALUE_DIGITS", "plain_lines"]

_ONE = np.uint64(1)
_TWO = np.uint64(2)
_TEN = np.uint64(10)
_NINE = np.uint64(9)
_ZERO = np.uint64(0)
_ZERO_CHAR = np.uint64(48)
_MAX_NAME_DIGITS = np.uint64(19)
#: digits of a plain value: below 10**15 < 2**53, so ``m / 10**f`` is correctly rounded
MAX_VALUE_DIGITS = 15
_MAX_DIGITS = np.uint64(MAX_VALUE_DIGITS)
_POW10 = np.array([10.0**k for k in range(MAX_VALUE_DIGITS + 1)], dtype=np.float64)


@njit
def plain_lines(buf: np.ndarray, pos: int, last_nl: int, idx: np.ndarray, vals: np.ndarray,
                labels: np.ndarray, indptr: np.ndarray, nnz: int, rows: int,
                size: np.uint64, mask: np.uint64, cap: int,
                row_cap: int) -> tuple[int | np.int64, int, int]:
    """Parse the *plain* lines from ``buf[pos]`` on, as long as they are plain and
    begin at or before ``last_nl`` (the position of the data's last ``\n``);
    ``(pos, nnz, rows)`` after them: ``pos`` is the start of the first line not
    taken (a line that is not plain, or the data's unterminated last line).

    Each line is a row: its label goes to ``labels[rows]``, its slots and values
    to ``idx``/``vals`` from ``nnz`` on, and ``indptr[rows + 1]`` ends it. A line
    that would write past ``cap`` entries or ``row_cap`` rows is not taken either
    (the caller makes the arrays larger).

    One call parses a whole chunk of plain lines: a call per line (an inlined
    helper) made numba take and drop a reference to each of the three arrays
    per line, ~5 % of one process's training (measured).

    Every loop here stops at a ``\n`` (the lines taken end with one inside
    ``buf``), so no position is compared with the end of the data, and positions
    are unsigned (numba adds no wraparound for negative indices): the parse of a
    generated 1M-row file is ~30 % faster than with those checks (measured).

    Plain: a label ``0``, ``1``, ``-1`` or ``+1``, then tokens ``" " name ":" value``
    up to ``\n`` (one space may end the line), the names 1-19 digits, the values
    ``1`` or ``[digits][.digits]`` with 1-15 digits in all. Slots out of order or
    repeated (names of ``2**bits`` or more are mixed into the table) are sorted
    and summed at the end of the line (:func:`~ftrl_ps._kernels.rowsort.sort_merge`,
    as the general scanner does). Such a line gives the same row as the general
    scanner (the same slots, and the same correctly rounded value: ``m / 10**f``
    with ``m < 2**53`` and ``f <= 15``). Anything else stops the loop and leaves
    the line to the general scanner, which also reports its errors.
    """
    last = np.uint64(last_nl)
    line = np.uint64(pos)
    while line <= last and rows < row_cap:
        p = line
        c = buf[p]
        if c == 49:  # 1
            label = np.float32(1.0)
            p += _ONE
        elif c == 48:  # 0
            label = np.float32(0.0)
            p += _ONE
        elif c == 45 and buf[p + _ONE] == 49:  # -1 (buf[p] is not the line's \n)
            label = np.float32(0.0)
            p += _TWO
        elif c == 43 and buf[p + _ONE] == 49:  # +1
            label = np.float32(1.0)
            p += _TWO
        else:
            break
        k = nnz
        prev = np.int64(-1)
        in_order = True
        plain = True
        while True:
            c = buf[p]
            if c == 10:
                break
            if c != 32:
                plain = False
                break
            p += _ONE
            if buf[p] == 10:  # one trailing space
                break
            ts = p
            u = _ZERO
            while True:  # stops at the \n at the latest, as every loop below
                d = np.uint64(buf[p]) - _ZERO_CHAR  # wraps for bytes below '0'
                if d > _NINE:
                    break
                u = u * _TEN + d
                p += _ONE
            if p == ts or p - ts > _MAX_NAME_DIGITS or buf[p] != 58:
                plain = False
                break
            p += _ONE
            vs = p
            m = _ZERO
            # the integer and the fraction digits: two copies of one loop on purpose (an
            # inlined helper returning (p, m) made the whole parse 30 % slower, measured)
            while True:
                d = np.uint64(buf[p]) - _ZERO_CHAR
                if d > _NINE:
                    break
                m = m * _TEN + d
                p += _ONE
            digits = p - vs
            frac = _ZERO
            if buf[p] == 46:  # .
                p += _ONE
                fs = p
                while True:
                    d = np.uint64(buf[p]) - _ZERO_CHAR
                    if d > _NINE:
                        break
                    m = m * _TEN + d
                    p += _ONE
                frac = p - fs
                digits += frac
            if digits == _ZERO or digits > _MAX_DIGITS or (buf[p] != 32 and buf[p] != 10):
                plain = False
                break
            if m == _ZERO:
                continue  # a zero value: no feature
            slot = np.int64(u) if u < size else np.int64(mix64(u) & mask)
            if slot <= prev:
                in_order = False  # hashed, out of order or repeated: sorted and merged below
            prev = slot
            if k >= cap:  # the arrays are full: the caller grows them
                plain = False
                break
            idx[k] = slot
            vals[k] = float(m) if frac == _ZERO else float(m) / _POW10[frac]
            k += 1
        if not plain:
            break
        if not in_order:
            k, ok = sort_merge(idx, vals, nnz, k)
            if not ok:  # a sum beyond float32: the general scanner reports the line
                break
        labels[rows] = label
        rows += 1
        nnz = k
        indptr[rows] = nnz
        line = p + _ONE
    return np.int64(line), nnz, rows
