"""Request bodies of the prediction service as CSR rows: libsvm text and JSON rows.

Both turn into a :class:`~ftrl_ps.data.batch.Batch` exactly as the reader
would: the same parser kernel for text, the same feature hash
(:mod:`ftrl_ps.data.hashing`) for JSON names, the same canonical rows
(slots sorted, repeated features and collisions summed, zeros dropped).

Text (``text/plain``): libsvm lines as in :mod:`ftrl_ps.data.libsvm`. With
``labels=False`` (rows to score) the label is optional and ignored: a first
token that has a ``:`` or is not a number starts the features (write ``7:1``,
not ``7``, for a feature in first position of an unlabelled row).

JSON (``application/json``)::

    {"rows": [{"features": {"user=42": 1, "123": 0.5}, "label": 1}, ...]}

``features`` maps names to finite numbers; names are hashed as the reader
hashes them (``"123"`` is slot 123 when ``bits`` allows). ``label`` (-1, 0
or 1) is required with ``labels=True`` and ignored otherwise.

A malformed body raises :class:`~ftrl_ps.errors.ParseError` (text: line and
token) or :class:`~ftrl_ps.errors.DataError` (JSON: row and field); nothing of
the body is returned then.

>>> b = parse_text(b"1 3:0.5 1\\n2:1 2:1\\n", bits=10, labels=False)
>>> b.indptr.tolist(), b.indices.tolist(), b.values.tolist()
([0, 2, 3], [1, 3, 2], [1.0, 0.5, 2.0])
>>> parse_json_rows(b'{"rows": [{"features": {"5": 2}, "label": 1}]}', 10, labels=True).labels
array([1.], dtype=float32)
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ftrl_ps.core.params import check_bits
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.hashing import slots_of
from ftrl_ps.data.libsvm import bad_line_reason, shorten_token
from ftrl_ps.errors import DataError, ParseError

__all__ = ["F32_LIMIT", "canonical_batch", "parse_json_rows", "parse_text"]

#: float64 magnitudes at or above this round to inf in float32
F32_LIMIT = 3.4028235677973366e38


def parse_text(body: bytes, bits: int, *, labels: bool, source: str = "body") -> Batch:
    """libsvm lines of a request body as a Batch; ParseError ``source:LINE: reason: token``."""
    from ftrl_ps._kernels.aot import kernels

    bits = check_bits(bits)
    buf = np.frombuffer(bytearray(body) if body else bytearray(1), dtype=np.uint8)
    result = kernels("parse").parse_chunk(buf, len(body), bits, False, 1, not labels)
    y, indptr, indices, values, _lines, n_bad, bad = result
    if n_bad:
        line, start, end, code = (int(v) for v in bad[0])
        raw = bytes(buf[start:end])
        raise ParseError(source, line + 1, shorten_token(raw), bad_line_reason(code, raw))
    return Batch(y, indptr, indices, values)


def _fail(row: int, what: str) -> DataError:
    return DataError(f"rows[{row}]{what}")


def _label(row: int, obj: dict[str, Any]) -> float:
    if "label" not in obj:
        raise _fail(row, ": missing 'label' (-1, 0 or 1)")
    value = obj["label"]
    if isinstance(value, bool) or not isinstance(value, int | float) or value not in (-1, 0, 1):
        raise _fail(row, f".label: must be -1, 0 or 1, got {value!r}")
    return 1.0 if value == 1 else 0.0


def parse_json_rows(body: bytes | str, bits: int, *, labels: bool) -> Batch:
    """``{"rows": [{"features": {...}, "label": y}, ...]}`` as a Batch (see the module doc)."""
    bits = check_bits(bits)
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"invalid JSON body: {exc}") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("rows"), list):
        raise DataError('JSON body must be an object {"rows": [...]}')
    if set(obj) != {"rows"}:
        raise DataError(f"unknown fields {sorted(set(obj) - {'rows'})}; expected ['rows']")
    rows: list[Any] = obj["rows"]
    names: list[str] = []
    vals: list[float] = []
    counts = np.zeros(len(rows), dtype=np.int64)
    y = np.zeros(len(rows), dtype=np.float32)
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("features"), dict):
            raise _fail(i, ': must be an object {"features": {name: value, ...}}')
        extra = set(row) - {"features", "label"}
        if extra:
            raise _fail(i, f": unknown fields {sorted(extra)}; expected features, label")
        if labels:
            y[i] = _label(i, row)
        for name, value in row["features"].items():
            if not name:
                raise _fail(i, ".features: empty feature name")
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _fail(i, f".features[{name!r}]: value must be a number, got {value!r}")
            if not (abs(value) < F32_LIMIT):  # (no float() of a 400-digit integer)
                raise _fail(i, f".features[{name!r}]: value is NaN, infinite or beyond "
                               f"float32 range: {_short(value)}")
            names.append(name)
            vals.append(value)
        counts[i] = len(row["features"])
    try:
        slots = slots_of(names, bits) if names else np.zeros(0, np.int64)
    except UnicodeEncodeError:  # a lone surrogate ("\ud800"): no UTF-8 text to hash
        i, name = next((int(np.searchsorted(np.cumsum(counts), k, side="right")), name)
                       for k, name in enumerate(names) if _not_utf8(name))
        raise _fail(i, f".features[{name!r}]: feature name is not valid Unicode text") from None
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return canonical_batch(y, indptr, slots, np.asarray(vals, dtype=np.float64))


def _short(value: float) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _not_utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return True
    return False


def canonical_batch(labels: np.ndarray, indptr: np.ndarray, slots: np.ndarray,
                    values: np.ndarray) -> Batch:
    """Rows with slots sorted and unique (repeats summed), zero sums dropped, as the
    reader makes them. ``indptr`` must be valid CSR offsets of ``slots``/``values``.

    Raises DataError when a sum of repeated features overflows float32.
    """
    rows = labels.size
    slots = np.asarray(slots, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    row_of = np.repeat(np.arange(rows, dtype=np.int64), np.diff(indptr))
    if slots.size > 1:
        same_row = row_of[1:] == row_of[:-1]
        if np.any(same_row & (slots[1:] <= slots[:-1])):  # not canonical yet
            order = np.lexsort((slots, row_of))
            row_of, slots, values = row_of[order], slots[order], values[order]
            new = np.ones(slots.size, dtype=bool)
            new[1:] = (row_of[1:] != row_of[:-1]) | (slots[1:] != slots[:-1])
            starts = np.flatnonzero(new)
            values = np.add.reduceat(values, starts)
            row_of, slots = row_of[starts], slots[starts]
            if values.size and not np.all(np.abs(values) < F32_LIMIT):
                bad = int(row_of[np.argmax(~(np.abs(values) < F32_LIMIT))])
                raise DataError(f"rows[{bad}]: sum of repeated features overflows float32")
    keep = values.astype(np.float32) != 0
    if not np.all(keep):
        row_of, slots, values = row_of[keep], slots[keep], values[keep]
    out_ptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of, minlength=rows), out=out_ptr[1:])
    return Batch(np.ascontiguousarray(labels, dtype=np.float32), out_ptr,
                 slots.astype(np.int32), values.astype(np.float32))
