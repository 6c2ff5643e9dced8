"""Python inputs to CSR rows of slots, exactly as the libsvm reader makes them.

What the estimator (:mod:`ftrl_ps.learn.estimator`) and the online API
(:mod:`ftrl_ps.learn.online`) accept, turned into the :class:`Batch` rows the
kernels train on. The rules are those of a libsvm line read by ``ftrl-ps
train`` (:mod:`ftrl_ps.data.libsvm`, :mod:`ftrl_ps.data.hashing`), so the same
examples give the same model:

* **Columns** of a matrix (dense or scipy.sparse) are the features named
  ``"0"``, ``"1"``, ...: column ``j < 2**bits`` is slot ``j``, a later column
  is hashed (``mix64(j) & (2**bits - 1)``), as the reader treats index ``j``.
* **Dicts** map feature names to values. A ``str`` name is hashed as the
  reader hashes that token (``{"user=7": 1}`` is the token ``user=7``); an
  ``int`` name ``i`` is the name ``str(i)``. A value is a number (``True`` is
  1, ``False`` 0) or a string ``v``, which stands for the feature
  ``"name=v"`` with value 1 (one-hot, as ``DictVectorizer`` spells it).
* Zero values are dropped; features that land on the same slot in a row are
  summed (:func:`ftrl_ps.data.bodies.canonical_batch`, the rows of the
  prediction service's bodies); non-finite values and values beyond float32
  are errors.
* **Labels** are two-valued: ``1``/``True`` is a click, ``0``/``-1``/``False``
  is none (:func:`binary_labels`).

>>> rows = rows_from_dicts([{"user": "7", "age": 31}, {"3": 2.0}], bits=20)
>>> rows.indptr.tolist(), rows.indices[2:].tolist(), rows.values[2:].tolist()
([0, 2, 3], [3], [2.0])
>>> first = dict(zip(rows.indices[:2].tolist(), rows.values[:2].tolist()))
>>> first == {slot_of("user=7", 20): 1.0, slot_of("age", 20): 31.0}
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ftrl_ps.core.params import check_bits
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.bodies import F32_LIMIT, canonical_batch
from ftrl_ps.data.hashing import slot_of, slots_of
from ftrl_ps.errors import DataError

__all__ = [
    "NameCache",
    "binary_labels",
    "column_slots",
    "rows_from_csr",
    "rows_from_dense",
    "rows_from_dicts",
    "slots_of_row",
]



def column_slots(n_features: int, bits: int) -> np.ndarray:
    """The slot of every column ``0 .. n_features - 1`` (int64), as the reader maps indices.

    >>> column_slots(3, 4).tolist()
    [0, 1, 2]
    >>> int(column_slots(17, 4)[16]) == slot_of("16", 4)
    True
    """
    from ftrl_ps._kernels.aot import kernels

    bits = check_bits(bits)
    mask = (1 << bits) - 1
    cols = np.arange(n_features, dtype=np.uint64)
    if n_features <= mask + 1:
        return cols.astype(np.int64)
    mixed = kernels("mix").mix64_array(cols)
    out = np.where(cols <= np.uint64(mask), cols, mixed & np.uint64(mask))
    return out.astype(np.int64)


def _check_values(values: np.ndarray) -> None:
    if values.size and not np.all(np.isfinite(values)):
        raise DataError("feature values must be finite (no NaN or inf)")
    if values.size and np.abs(values).max() >= F32_LIMIT:
        raise DataError("feature values must be within float32 range")


def binary_labels(y: npt.ArrayLike, rows: int) -> np.ndarray:
    """0/1 float32 labels from ``1``/``True`` (click) and ``0``/``-1``/``False``.

    >>> binary_labels([1, -1, 0, True], 4).tolist()
    [1.0, 0.0, 0.0, 1.0]
    """
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.size != rows:
        raise DataError(f"{arr.size} labels for {rows} rows")
    try:
        num = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise DataError("labels must be numbers or booleans (1 = click, 0 or -1 = none)") from None
    bad = ~np.isin(num, (-1.0, 0.0, 1.0))
    if bad.any():
        raise DataError(f"labels must be -1, 0 or 1 (or booleans), got {arr[bad][0]!r}")
    return (num == 1.0).astype(np.float32)


def rows_from_csr(
    labels: np.ndarray, indptr: npt.ArrayLike, indices: npt.ArrayLike, data: npt.ArrayLike,
    n_features: int, bits: int, *, canonical: bool = False,
) -> Batch:
    """Rows of a CSR matrix (columns are the features ``"0"``, ``"1"``, ...).

    ``canonical=True`` promises indices sorted and unique within each row
    (scipy's ``has_canonical_format``).
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices)
    rows = indptr.size - 1
    if rows < 0 or (indptr.size and indptr[0] != 0) or indices.size != indptr[-1]:
        raise DataError("malformed CSR matrix")
    if indices.size and (indices.min() < 0 or indices.max() >= n_features):
        raise DataError(f"column indices must be in [0, {n_features})")
    values = np.asarray(data, dtype=np.float64)
    _check_values(values)
    if canonical and n_features <= (1 << check_bits(bits)):  # slots = columns, in order
        keep = values.astype(np.float32) != 0
        if keep.all():
            return Batch(np.ascontiguousarray(labels, dtype=np.float32), indptr,
                         indices.astype(np.int32), values.astype(np.float32))
    slots = column_slots(n_features, bits)[indices]
    return canonical_batch(np.asarray(labels), indptr, slots, values)


def rows_from_dense(labels: np.ndarray, x: npt.ArrayLike, bits: int) -> Batch:
    """Rows of a 2-D array (zeros are absent features)."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise DataError(f"expected a 2-D array, got {arr.ndim} dimension(s)")
    try:
        arr = arr.astype(np.float64, copy=False)
    except (TypeError, ValueError):
        raise DataError("feature values must be numbers") from None
    row_of, cols = np.nonzero(arr)
    values = arr[row_of, cols]
    _check_values(values)
    indptr = np.zeros(arr.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of, minlength=arr.shape[0]), out=indptr[1:])
    return canonical_batch(np.asarray(labels), indptr, column_slots(arr.shape[1], bits)[cols],
                           values)


class NameCache:
    """Feature name -> slot, remembered (the hash of a name costs ~1 us in Python).

    Holds at most ``limit`` names; when full it starts over.
    """

    def __init__(self, bits: int, limit: int = 1 << 20) -> None:
        self.bits = check_bits(bits)
        self.limit = limit
        self._slots: dict[str, int] = {}

    def slot(self, name: str) -> int:
        slot = self._slots.get(name)
        if slot is None:
            slot = slot_of(name, self.bits)
            if len(self._slots) >= self.limit:
                self._slots.clear()
            self._slots[name] = slot
        return slot

    def slots(self, names: Sequence[str]) -> list[int]:
        """Slots of many names; unknown ones are hashed together by the reader's kernel."""
        missing = list(dict.fromkeys(n for n in names if n not in self._slots))
        if len(missing) > 64:
            if len(self._slots) + len(missing) > self.limit:
                self._slots.clear()
            self._slots.update(zip(missing, slots_of(missing, self.bits).tolist(), strict=True))
        return [self.slot(n) for n in names]


def _name_value(name: Any, value: Any) -> tuple[str, float]:
    if isinstance(name, bool) or not isinstance(name, str | int | np.integer):
        raise DataError(f"feature names must be str or int, got {name!r}")
    key = name if isinstance(name, str) else str(int(name))
    if isinstance(value, str):
        return f"{key}={value}", 1.0
    if isinstance(value, bool | np.bool_):
        return key, float(value)
    if isinstance(value, int | float | np.integer | np.floating):
        v = float(value)
        if not math.isfinite(v) or abs(v) >= F32_LIMIT:
            raise DataError(f"feature {key!r}: value {value!r} is not a finite float32")
        return key, v
    raise DataError(f"feature {key!r}: value must be a number, bool or str, got {value!r}")


def slots_of_row(row: Mapping[Any, Any], cache: NameCache) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, values)`` of one dict, as :func:`rows_from_dicts` makes its row
    (int32 slots sorted, float32 values, repeats summed, zeros dropped); the fast
    path of ``learn_one``, without numpy's per-call overhead of the batch path."""
    if not isinstance(row, Mapping):
        raise DataError(f"expected a dict of features, got {type(row).__name__}")
    acc: dict[int, float] = {}
    for name, value in row.items():
        key, v = _name_value(name, value)
        if not key:
            raise DataError("empty feature name")
        slot = cache.slot(key)
        acc[slot] = acc.get(slot, 0.0) + v
    slots = sorted(acc)
    sums = [acc[s] for s in slots]
    if any(abs(v) >= F32_LIMIT for v in sums):
        raise DataError("a sum of repeated features is beyond float32 range")
    values = np.array(sums, dtype=np.float32)
    indices = np.array(slots, dtype=np.int32)
    if 0.0 in sums or not values.all():
        keep = values != 0
        indices, values = indices[keep], values[keep]
    return indices, values


def rows_from_dicts(
    rows: Iterable[Mapping[Any, Any]], bits: int, labels: npt.ArrayLike | None = None,
    cache: NameCache | None = None,
) -> Batch:
    """Rows of dicts ``{name: value}`` (see the module docstring for the rules)."""
    names: list[str] = []
    values: list[float] = []
    counts: list[int] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise DataError(f"row {i}: expected a dict of features, got {type(row).__name__}")
        before = len(names)
        for name, value in row.items():
            key, v = _name_value(name, value)
            names.append(key)
            values.append(v)
        counts.append(len(names) - before)
    if any(not n for n in names):
        raise DataError("empty feature name")
    cache = cache if cache is not None and cache.bits == check_bits(bits) else NameCache(bits)
    slots = np.asarray(cache.slots(names), dtype=np.int64)
    n = len(counts)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    lab = np.zeros(n, np.float32) if labels is None else np.asarray(labels, np.float32)
    return canonical_batch(lab, indptr, slots, np.asarray(values, dtype=np.float64))
