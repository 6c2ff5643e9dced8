"""Kernels of the libsvm reader: feature hashing and the chunk parser.

Called only through :mod:`ftrl_ps.data.libsvm` and :mod:`ftrl_ps.data.hashing`, which
validate the inputs. Assumptions (not checked here):

* ``buf`` is a C-contiguous ``uint8`` array and ``0 <= n <= len(buf)``;
* ``buf[:n]`` holds whole lines (the last may lack its ``\\n``);
* ``1 <= bits <= 30``.

The parsing rules are those documented in :mod:`ftrl_ps.data.libsvm`; the hashing
rules those of :mod:`ftrl_ps.data.hashing`, with the mix and hash of
:mod:`ftrl_ps._kernels.mix`. Everything runs without the GIL.
"""

from __future__ import annotations

import numpy as np

from ftrl_ps._kernels._config import njit
from ftrl_ps._kernels.codes import (  # reason codes of a bad line
    R_BAD_VALUE,
    R_EMPTY_NAME,
    R_EMPTY_VALUE,
    R_LABEL,
    R_RANGE,
    R_SUM_RANGE,
)
from ftrl_ps._kernels.mix import fnv1a64, mix64
from ftrl_ps._kernels.plain import plain_lines
from ftrl_ps._kernels.rowsort import F32_LIMIT as _F32_LIMIT
from ftrl_ps._kernels.rowsort import sort_merge

__all__ = [
    "R_BAD_VALUE",
    "R_EMPTY_NAME",
    "R_EMPTY_VALUE",
    "R_LABEL",
    "R_RANGE",
    "R_SUM_RANGE",
    "parse_chunk",
    "parse_float",
    "slot_of_bytes",
    "slots_of_names",
]


_ONE = np.uint64(1)
_TEN = np.uint64(10)
_NINE = np.uint64(9)
_ZERO_CHAR = np.uint64(48)
_U64_DIV10 = np.uint64(1844674407370955161)  # (2**64 - 1) // 10
_U64_LAST = np.uint64(5)  # (2**64 - 1) % 10
_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)
_EXACT_MANTISSA = 1 << 53
_MAX_SIG_DIGITS = 18  # fits an int64 mantissa


@njit(inline="always")
def slot_of_bytes(buf: np.ndarray, start: int, end: int, bits: int) -> np.int64:
    """Slot of the feature name ``buf[start:end]`` (non-empty) in ``[0, 2**bits)``."""
    size = _ONE << np.uint64(bits)
    mask = size - _ONE
    v = np.uint64(0)
    is_int = True
    for i in range(start, end):
        d = np.int64(buf[i]) - 48
        if d < 0 or d > 9:
            is_int = False
            break
        du = np.uint64(d)
        if v > _U64_DIV10 or (v == _U64_DIV10 and du > _U64_LAST):
            is_int = False  # more than 64 bits: a name
            break
        v = v * _TEN + du
    if is_int:
        if v < size:
            return np.int64(v)
        return np.int64(mix64(v) & mask)
    return np.int64(mix64(fnv1a64(buf, start, end)) & mask)


@njit
def slots_of_names(buf: np.ndarray, offsets: np.ndarray, bits: int) -> np.ndarray:
    """Slot of each name ``buf[offsets[i]:offsets[i+1]]``."""
    k = offsets.shape[0] - 1
    out = np.empty(k, dtype=np.int64)
    for i in range(k):
        out[i] = slot_of_bytes(buf, offsets[i], offsets[i + 1], bits)
    return out


@njit(inline="always")
def parse_float(buf: np.ndarray, s: int, e: int) -> tuple[int, float]:
    """Parse ``buf[s:e]`` as ``[+-]digits[.digits][(e|E)[+-]digits]``.

    Returns ``(0, value)``, ``(R_BAD_VALUE, 0.0)`` for bad syntax or
    ``(R_RANGE, 0.0)`` when the value does not fit a finite float32. The
    result is correctly rounded in the common case (mantissa < 2**53 and
    |exponent| <= 22), else within an ulp of float64.
    """
    p = s
    neg = False
    if p < e and (buf[p] == 43 or buf[p] == 45):  # + -
        neg = buf[p] == 45
        p += 1
    m = np.int64(0)
    nsig = 0
    exp10 = np.int64(0)
    any_digit = False
    while p < e:
        d = np.int64(buf[p]) - 48
        if d < 0 or d > 9:
            break
        any_digit = True
        if nsig < _MAX_SIG_DIGITS:
            if m != 0 or d != 0:
                m = m * 10 + d
                nsig += 1
        else:
            exp10 += 1
        p += 1
    if p < e and buf[p] == 46:  # .
        p += 1
        while p < e:
            d = np.int64(buf[p]) - 48
            if d < 0 or d > 9:
                break
            any_digit = True
            if nsig < _MAX_SIG_DIGITS:
                if m != 0 or d != 0:
                    m = m * 10 + d
                    nsig += 1
                exp10 -= 1
            p += 1
    if not any_digit:
        return R_BAD_VALUE, 0.0
    if p < e and (buf[p] == 101 or buf[p] == 69):  # e E
        p += 1
        eneg = False
        if p < e and (buf[p] == 43 or buf[p] == 45):
            eneg = buf[p] == 45
            p += 1
        ev = np.int64(0)
        edig = False
        while p < e:
            d = np.int64(buf[p]) - 48
            if d < 0 or d > 9:
                break
            edig = True
            if ev < 100000:
                ev = ev * 10 + d
            p += 1
        if not edig:
            return R_BAD_VALUE, 0.0
        exp10 += -ev if eneg else ev
    if p != e:
        return R_BAD_VALUE, 0.0
    v = float(m)
    if m == 0 or exp10 == 0:
        pass
    elif m < _EXACT_MANTISSA and 0 < exp10 <= 22:
        v = v * _POW10[exp10]
    elif m < _EXACT_MANTISSA and -22 <= exp10 < 0:
        v = v / _POW10[-exp10]
    elif exp10 > 0:
        if exp10 > 330:
            return R_RANGE, 0.0
        v = v * 10.0**exp10
    else:
        x = -exp10
        if x > 300:
            v = v / 1e300
            x -= 300
        v = 0.0 if x > 330 else v / 10.0**x
    if neg:
        v = -v
    if not abs(v) < _F32_LIMIT:
        return R_RANGE, 0.0
    return 0, v


# byte classes of the token scanner
_ORD, _DIGIT, _COLON, _END = 0, 1, 2, 3
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[48:58] = _DIGIT
_CLASS[58] = _COLON
for _c in b" \t\r\n#":
    _CLASS[_c] = _END


@njit
def _grown(a: np.ndarray, used: int, size: int) -> np.ndarray:
    """A new array of ``size`` entries of ``a``'s dtype beginning with ``a[:used]``."""
    out = np.empty(size, dtype=a.dtype)
    out[:used] = a[:used]
    return out


@njit
def parse_chunk(buf: np.ndarray, n: int, bits: int, skip_bad: bool,
                max_examples: int, label_optional: bool = False, capacity: int = 0,
                row_capacity: int = 0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, np.ndarray]:
    """Parse the whole lines in ``buf[:n]``.

    With ``label_optional`` (rows to score) a first token with ``:`` or that is
    not a number starts the features, and a numeric first token is a label of
    any value (ignored: labels come out 0).

    ``capacity`` and ``row_capacity``: the features and rows to make room for
    first (a guess from the chunk before: the reader's), doubled whenever a
    line needs more; 0 makes room for the most the text could hold.

    Returns ``(labels f32, indptr i64, indices i32, values f32, n_lines,
    n_bad, bad)`` where ``bad[k] = (line_index, token_start, token_end,
    reason)`` for the first ``max_examples`` bad lines (``line_index`` is
    0-based within the chunk). Without ``skip_bad`` the parse stops at the
    first bad line (``n_bad == 1``) and the arrays are not meaningful.
    """
    # The most the text can hold, from its length alone: a row takes at least two
    # bytes (a label and the end of its line, but for the data's last line), a
    # feature at least two (itself, and a separator or line end before it, but for
    # the data's first token); counting the lines and separators first cost 13 % of
    # a parse. Arrays that large (40 MiB for 4 MiB of text, ~3.5 MiB written) were
    # reused at other offsets once freed, so each chunk wrote pages never written
    # before: a worker parsing 64 MiB ahead grew by 122-283 MiB after 20 % of a
    # 20M-row run. The reader's room from the chunk before keeps them small.
    worst = n // 2 + 2
    cap = worst if capacity <= 0 else min(capacity, worst)
    row_cap = worst if row_capacity <= 0 else min(row_capacity, worst)
    labels = np.empty(row_cap, dtype=np.float32)
    indptr = np.empty(row_cap + 1, dtype=np.int64)
    idx = np.empty(cap, dtype=np.int32)
    vals = np.empty(cap, dtype=np.float32)
    bad = np.zeros((max(max_examples, 1), 4), dtype=np.int64)
    size = _ONE << np.uint64(bits)
    mask = size - _ONE
    indptr[0] = 0
    rows = 0
    nnz = 0
    n_lines = 0
    n_bad = 0
    pos = 0
    # the fast path takes the lines that end with a newline: those that begin at
    # or before the last one (a chunk's last line may lack it)
    last_nl = n - 1
    while last_nl >= 0 and buf[last_nl] != 10:
        last_nl -= 1
    # parse line by line
    while pos < n:
        if not label_optional and pos <= last_nl:
            before = rows
            pos, nnz, rows = plain_lines(buf, pos, last_nl, idx, vals, labels, indptr, nnz,
                                         rows, size, mask, cap, row_cap)
            n_lines += rows - before
            if pos >= n:
                break
        line_index = n_lines
        n_lines += 1
        line_start = pos
        p = pos
        have_label = False
        label = np.float32(0.0)
        err = 0
        err_s = 0
        err_e = 0
        row0 = nnz
        last = np.int64(-1)
        in_order = True
        while True:
            while p < n and (buf[p] == 32 or buf[p] == 9 or buf[p] == 13):
                p += 1
            if p >= n or buf[p] == 10 or buf[p] == 35:  # end of line or '#'
                break
            ts = p
            colon = -1
            dig = True
            nd = 0
            u = np.uint64(0)
            name_dig = False
            name_nd = 0
            name_u = np.uint64(0)
            fast = False
            if have_label:
                # fast path, the usual "digits:value" with no other ':'
                while p < n:
                    d = np.uint64(buf[p]) - _ZERO_CHAR  # wraps for bytes below '0'
                    if d > _NINE:
                        break
                    u = u * _TEN + d
                    p += 1
                if p > ts and p < n and buf[p] == 58:
                    cp = p
                    p += 1
                    while p < n and _CLASS[buf[p]] < _COLON:
                        p += 1
                    if p == n or _CLASS[buf[p]] == _END:
                        fast = True
                        colon = cp
                        name_dig = True
                        name_nd = cp - ts
                        name_u = u
                if not fast:
                    p = ts
                    u = np.uint64(0)
            # general scan; keep the decimal value of the name while it is all digits
            while not fast and p < n:
                c = buf[p]
                k = _CLASS[c]
                if k == _DIGIT:
                    u = u * _TEN + np.uint64(c - 48)
                    nd += 1
                elif k == _ORD:
                    dig = False
                elif k == _COLON:
                    colon = p
                    name_dig = dig
                    name_nd = nd
                    name_u = u
                    dig = False
                else:
                    break
                p += 1
            te = p
            if not have_label:
                code, lv = parse_float(buf, ts, te) if colon < 0 else (R_LABEL, 0.0)
                have_label = True
                if label_optional:
                    if code == 0:
                        continue  # a label: ignored
                elif code != 0 or not (lv == 1.0 or lv == 0.0 or lv == -1.0):
                    err, err_s, err_e = R_LABEL, ts, te
                    break
                else:
                    label = np.float32(1.0) if lv == 1.0 else np.float32(0.0)
                    continue
            if buf[ts] == 124:  # '|' namespace
                continue
            if colon == ts + 3 and buf[ts] == 113 and buf[ts + 1] == 105 and buf[ts + 2] == 100:
                continue  # qid:N
            v = 1.0
            ne = te
            if colon >= 0:
                ne = colon
                if colon == ts:
                    err, err_s, err_e = R_EMPTY_NAME, ts, te
                    break
                if colon + 1 == te:
                    err, err_s, err_e = R_EMPTY_VALUE, ts, te
                    break
                if colon + 2 == te and buf[colon + 1] == 49:  # the usual ":1"
                    v = 1.0
                else:
                    code, v = parse_float(buf, colon + 1, te)
                    if code != 0:
                        err, err_s, err_e = code, ts, te
                        break
                    if np.float32(v) == 0.0:  # also drops float32 underflow
                        continue
            else:
                name_dig = dig
                name_nd = nd
                name_u = u
            if name_dig and name_nd <= 19:  # < 10**19 < 2**64: no overflow
                slot = np.int64(name_u) if name_u < size else np.int64(mix64(name_u) & mask)
            elif name_dig:
                slot = slot_of_bytes(buf, ts, ne, bits)
            else:
                slot = np.int64(mix64(fnv1a64(buf, ts, ne)) & mask)
            if nnz >= cap:  # (the plain lines leave a line that does not fit to here)
                cap = min(2 * cap + 1024, worst)
                idx = _grown(idx, nnz, cap)
                vals = _grown(vals, nnz, cap)
            idx[nnz] = slot
            vals[nnz] = v
            nnz += 1
            if slot <= last:
                in_order = False
            last = slot
        while p < n and buf[p] != 10:
            p += 1
        pos = p + 1
        if err == 0 and have_label and not in_order:
            nnz, ok = sort_merge(idx, vals, row0, nnz)
            if not ok:
                err, err_s, err_e = R_SUM_RANGE, line_start, p
        if err != 0:
            if n_bad < max_examples:
                bad[n_bad, 0] = line_index
                bad[n_bad, 1] = err_s
                bad[n_bad, 2] = err_e
                bad[n_bad, 3] = err
            n_bad += 1
            nnz = row0
            if not skip_bad:
                break
            continue
        if not have_label:
            continue  # blank or comment-only line
        if rows >= row_cap:
            row_cap = min(2 * row_cap + 1024, worst)
            labels = _grown(labels, rows, row_cap)
            indptr = _grown(indptr, rows + 1, row_cap + 1)
        labels[rows] = label
        rows += 1
        indptr[rows] = nnz
    return labels[:rows], indptr[: rows + 1], idx[:nnz], vals[:nnz], n_lines, n_bad, bad
