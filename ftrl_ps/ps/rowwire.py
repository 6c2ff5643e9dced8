"""Binary bodies of the prediction service: rows to score or learn, probabilities back.

Same media type and 24-byte header as :mod:`ftrl_ps.ps.wire` (magic ``FTPS``,
version 2, ``wire.VERSION``), two more kinds. All little-endian::

    ROWS (kind 6), a request      count = rows; flags bit 0: values float64
                                  (else float32), bit 2: labels present
    offset   size        field
    24       8           nnz (uint64)
    32       4(rows+1)   indptr uint32: 0, non-decreasing, last = nnz
    ...      4 nnz       slots uint32, each < 2**bits (names already hashed
                         with ftrl_ps.data.hashing; order and repeats free)
    ...      s nnz       values (aligned to s = 4 or 8 bytes)
    ...      4 rows      labels float32, 0 or 1 (if flag bit 2; aligned to 4)

    PROBS (kind 7), the answer    count = rows; flags bit 0 set; seq = model version
    24       8 rows      P(y=1) float64

>>> import numpy as np
>>> body = encode_rows(np.array([0, 2, 3]), np.array([5, 1, 7]), np.array([1.0, 2.0, 1.0]))
>>> batch = decode_rows(body, bits=10, labels=False)
>>> batch.indices.tolist(), batch.values.tolist()  # sorted within each row
([1, 5, 7], [2.0, 1.0, 1.0])
>>> decode_probs(encode_probs(np.array([0.25, 0.5]), version=3))
([0.25, 0.5], 3)
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ftrl_ps.data.batch import Batch
from ftrl_ps.data.bodies import F32_LIMIT, canonical_batch
from ftrl_ps.errors import DataError, ProtocolError
from ftrl_ps.ps import wire

__all__ = ["FLAG_LABELS", "PROBS", "ROWS", "decode_probs", "decode_rows", "encode_probs",
           "encode_rows"]

ROWS, PROBS = 6, 7
FLAG_LABELS = 4
_HEADER = struct.Struct("<4sBBHIIQ")
_NNZ = struct.Struct("<Q")


def _align(offset: int, size: int) -> int:
    return offset + (-offset % size)


def encode_rows(indptr: Any, slots: Any, values: Any, labels: Any = None, *,
                dtype: Any = np.float32) -> bytes:
    """A ROWS body (``labels`` None: rows to score)."""
    ptr = np.asarray(indptr, dtype="<u4")
    dt = np.dtype(dtype).newbyteorder("<")
    flags = (wire.FLAG_FLOAT64 if dt.itemsize == 8 else 0) | (FLAG_LABELS if labels is not None
                                                               else 0)
    rows = ptr.size - 1
    nnz = int(ptr[-1]) if rows >= 0 else 0
    parts = [_HEADER.pack(wire.MAGIC, wire.VERSION, ROWS, flags, rows, 0, 0), _NNZ.pack(nnz),
             ptr.tobytes(), np.asarray(slots, dtype="<u4").tobytes()]
    size = sum(len(p) for p in parts)
    parts.append(b"\0" * (_align(size, dt.itemsize) - size))
    parts.append(np.asarray(values, dtype=dt).tobytes())
    if labels is not None:
        size = sum(len(p) for p in parts)
        parts.append(b"\0" * (_align(size, 4) - size))
        parts.append(np.asarray(labels, dtype="<f4").tobytes())
    return b"".join(parts)


def decode_rows(body: bytes, bits: int, *, labels: bool) -> Batch:
    """A ROWS body as a canonical Batch; ProtocolError for a bad structure,
    DataError for bad rows (slot out of range, non-finite value, bad label)."""
    size = len(body)
    if size < _HEADER.size + _NNZ.size:
        raise ProtocolError(f"ROWS body of {size} bytes is shorter than its 32-byte header")
    magic, version, kind, flags, rows, _, _ = _HEADER.unpack_from(body, 0)
    if magic != wire.MAGIC or version != wire.VERSION:
        raise ProtocolError(f"not an {wire.BINARY_MEDIA_TYPE} version {wire.VERSION} body")
    if kind != ROWS:
        raise ProtocolError(f"expected a ROWS body (kind {ROWS}), got kind {kind}")
    if flags & ~(wire.FLAG_FLOAT64 | FLAG_LABELS):
        raise ProtocolError(f"unknown flags 0x{flags:04x}")
    (nnz,) = _NNZ.unpack_from(body, _HEADER.size)
    dt = np.dtype("<f8" if flags & wire.FLAG_FLOAT64 else "<f4")
    off = _HEADER.size + _NNZ.size
    slots_at = off + 4 * (rows + 1)
    values_at = _align(slots_at + 4 * nnz, dt.itemsize)
    end = values_at + dt.itemsize * nnz
    labels_at = _align(end, 4)
    has_labels = bool(flags & FLAG_LABELS)
    if has_labels:
        end = labels_at + 4 * rows
    if size != end:
        raise ProtocolError(f"ROWS body of {size} bytes, expected {end} for {rows} rows "
                            f"and {nnz} features")
    if labels and not has_labels:
        raise DataError("ROWS body has no labels (flag bit 2); learning needs them")
    ptr = np.frombuffer(body, dtype="<u4", count=rows + 1, offset=off).astype(np.int64)
    if ptr[0] != 0 or ptr[-1] != nnz or np.any(np.diff(ptr) < 0):
        raise ProtocolError("indptr must start at 0, not decrease and end at nnz")
    slots = np.frombuffer(body, dtype="<u4", count=nnz, offset=slots_at)
    values = np.frombuffer(body, dtype=dt, count=nnz, offset=values_at).astype(np.float64)
    if nnz and int(slots.max()) >= 1 << bits:
        row = int(np.searchsorted(ptr, int(np.argmax(slots >= 1 << bits)), side="right")) - 1
        raise DataError(f"rows[{row}]: slot {int(slots.max())} is outside [0, 2**{bits})")
    bad = ~(np.abs(values) < F32_LIMIT)
    if np.any(bad):
        row = int(np.searchsorted(ptr, int(np.argmax(bad)), side="right")) - 1
        raise DataError(f"rows[{row}]: value is NaN, infinite or beyond float32 range")
    y = np.zeros(rows, dtype=np.float32)
    if labels:
        y = np.frombuffer(body, dtype="<f4", count=rows, offset=labels_at).astype(np.float32)
        wrong = (y != 0) & (y != 1)
        if np.any(wrong):
            raise DataError(f"rows[{int(np.argmax(wrong))}].label: must be 0 or 1")
    return canonical_batch(y, ptr, slots.astype(np.int64), values)


def encode_probs(probs: Any, *, version: int = 0) -> bytes:
    """A PROBS body (float64 probabilities, the model version in ``seq``)."""
    p = np.asarray(probs, dtype="<f8")
    head = _HEADER.pack(wire.MAGIC, wire.VERSION, PROBS, wire.FLAG_FLOAT64, p.size, 0, version)
    return head + p.tobytes()


def decode_probs(body: bytes) -> tuple[list[float], int]:
    """``(probabilities, model version)`` of a PROBS body."""
    if len(body) < _HEADER.size:
        raise ProtocolError("PROBS body shorter than its header")
    magic, version, kind, _flags, count, _, seq = _HEADER.unpack_from(body, 0)
    if magic != wire.MAGIC or kind != PROBS or len(body) != _HEADER.size + 8 * count:
        raise ProtocolError("not a PROBS body of the right length")
    probs = np.frombuffer(body, dtype="<f8", count=count, offset=_HEADER.size)
    return probs.tolist(), int(seq)
