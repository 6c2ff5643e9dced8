"""Validators of the key and value arrays of a push or pull.

Shared by the server's store (:mod:`ftrl_ps.ps.store`) and the client
(:mod:`ftrl_ps.ps.client`), which checks its arguments before sending them.
Both raise :class:`~ftrl_ps.errors.ProtocolError`.

>>> check_keys([1, 5, 9], 0, 10).tolist()
[1, 5, 9]
>>> check_values([0.5, 2], "n", 2, np.dtype(np.float32), non_negative=True).dtype
dtype('float32')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl_ps.errors import ProtocolError

__all__ = ["check_keys", "check_merge", "check_values", "delta_limit"]


def check_keys(
    keys: Any, begin: int, end: int, *, name: str = "keys", where: str = "this shard's range"
) -> np.ndarray:
    """Validate a key array and return it as a 1-D integer ndarray.

    Keys must be integers, one-dimensional, sorted strictly increasing and
    inside ``[begin, end)``.

    Raises
    ------
    ProtocolError
        Naming the first offending position.
    """
    arr = np.asarray(keys)
    if arr.ndim != 1:
        raise ProtocolError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ProtocolError(f"{name} must be integers, got dtype {arr.dtype}")
    bad = np.flatnonzero(arr[1:] <= arr[:-1])
    if bad.size:
        i = int(bad[0]) + 1
        raise ProtocolError(
            f"{name} must be sorted strictly increasing (unique): "
            f"{name}[{i}]={int(arr[i])} <= {name}[{i - 1}]={int(arr[i - 1])}"
        )
    lo, hi = int(arr[0]), int(arr[-1])
    if lo < begin or hi >= end:
        which = lo if lo < begin else hi
        raise ProtocolError(f"{name} contain {which}, outside {where} [{begin}, {end})")
    return arr


#: a delta's largest magnitude, as a share of its dtype's largest value: a key then
#: takes over a million pushes of the largest deltas to overflow (two pushes of
#: 3e38 each took a float32 shard's key to inf, and its model could not be saved)
DELTA_SHARE = 2.0**-20


def delta_limit(dtype: np.dtype) -> float:
    """The largest magnitude :func:`check_values` lets a delta have in ``dtype``.

    >>> f"{delta_limit(np.dtype(np.float32)):.3g}", f"{delta_limit(np.dtype(np.float64)):.3g}"
    ('3.25e+32', '1.71e+302')
    """
    return float(np.finfo(dtype).max) * DELTA_SHARE


def check_values(
    values: Any, name: str, length: int, dtype: np.dtype, *, non_negative: bool = False,
    delta: bool = False,
) -> np.ndarray:
    """Validate a value array: 1-D, ``length`` long, real, finite (after the cast
    to ``dtype``) and, if ``non_negative``, ``>= 0``; a ``delta`` (added to the
    state) at most :func:`delta_limit` in magnitude. Returns it as ``dtype``."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ProtocolError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.shape[0] != length:
        raise ProtocolError(f"{name} has {arr.shape[0]} values but there are {length} keys")
    if length and arr.dtype.kind not in "iuf":
        raise ProtocolError(f"{name} must be real numbers, got dtype {arr.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        arr = arr.astype(dtype, copy=False)
    limit = delta_limit(arr.dtype) if delta and arr.dtype.kind == "f" else None
    with np.errstate(invalid="ignore"):  # (NaN compares False: caught either way)
        ok = np.isfinite(arr) if limit is None else np.abs(arr) <= limit
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        if not np.isfinite(arr[i]):
            raise ProtocolError(f"{name}[{i}] is {arr[i]!r}; values must be finite")
        raise ProtocolError(f"{name}[{i}] = {arr[i]!r} is too large for the {arr.dtype} "
                            f"state (a delta's limit is {limit:.3g}: it would overflow)")
    if non_negative and length:
        neg = np.flatnonzero(arr < 0)
        if neg.size:
            i = int(neg[0])
            raise ProtocolError(f"{name}[{i}] = {arr[i]!r} is negative; it must be >= 0")
    return arr


def check_merge(
    merge: Any, length: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate the merge information of a ``compose`` push: ``(versions pulled,
    rows, rho)``, ``length`` entries each, versions and rows non-negative
    integers, ``rho`` in [0, 1]. Returns them as uint32, uint32 and ``dtype``."""
    try:
        versions, rows, rho = (np.asarray(m) for m in merge)
    except (TypeError, ValueError) as exc:
        raise ProtocolError("merge information must be (versions, rows, rho)") from exc
    for name, arr in (("versions", versions), ("rows", rows)):
        if arr.shape != (length,) or (length and arr.dtype.kind not in "iu"):
            raise ProtocolError(f"{name} must be {length} integers, got {arr.dtype} {arr.shape}")
        if length and (int(arr.min()) < 0 or int(arr.max()) >= 1 << 32):
            raise ProtocolError(f"{name} must be in [0, 2**32)")
    r = check_values(rho, "rho", length, dtype)
    if length and (r.min() < 0 or r.max() > 1):
        raise ProtocolError("rho must be in [0, 1]")
    return versions.astype(np.uint32), rows.astype(np.uint32), r
