"""Rows of libsvm data in CSR form: what the reader yields and the kernels take."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ftrl_ps.errors import DataError

__all__ = ["Batch"]


@dataclass(frozen=True)
class Batch:
    """Rows of a libsvm file in CSR form.

    Attributes
    ----------
    labels : np.ndarray
        ``float32``, shape ``(rows,)``, values 0.0 / 1.0.
    indptr : np.ndarray
        ``int64``, shape ``(rows + 1,)``, ``indptr[0] == 0``.
    indices : np.ndarray
        ``int32`` slots in ``[0, 2**bits)``, sorted and unique within each row.
    values : np.ndarray
        ``float32``, same length as ``indices``; never 0.
    """

    labels: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        for name, dtype in (("labels", np.float32), ("indptr", np.int64),
                            ("indices", np.int32), ("values", np.float32)):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 1:
                raise DataError(f"Batch.{name} must be a 1-D {np.dtype(dtype)} array")
        if len(self.indptr) != len(self.labels) + 1 or self.indptr[0] != 0:
            raise DataError("Batch.indptr must have rows + 1 entries starting at 0")
        if len(self.indices) != len(self.values) or self.indptr[-1] != len(self.indices):
            raise DataError("Batch.indices/values lengths must equal indptr[-1]")

    @property
    def rows(self) -> int:
        """Number of examples."""
        return len(self.labels)

    @property
    def nnz(self) -> int:
        """Number of stored features."""
        return len(self.indices)

    def head(self, rows: int) -> Batch:
        """The first ``rows`` rows (views of these arrays)."""
        if not 0 <= rows <= self.rows:
            raise DataError(f"head({rows}) of a batch of {self.rows} rows")
        end = int(self.indptr[rows])
        return Batch(self.labels[:rows], self.indptr[:rows + 1], self.indices[:end],
                     self.values[:end])

    @classmethod
    def empty(cls) -> Batch:
        """A batch with no rows."""
        return cls(np.zeros(0, np.float32), np.zeros(1, np.int64),
                   np.zeros(0, np.int32), np.zeros(0, np.float32))

    @classmethod
    def concat(cls, batches: list[Batch]) -> Batch:
        """All rows of ``batches`` in order, as one batch."""
        if not batches:
            return cls.empty()
        if len(batches) == 1:
            return batches[0]
        starts = np.cumsum([0] + [b.nnz for b in batches[:-1]])
        indptr = np.concatenate([np.zeros(1, np.int64)]
                                + [b.indptr[1:] + s for b, s in zip(batches, starts, strict=True)])
        return cls(np.concatenate([b.labels for b in batches]), indptr,
                   np.concatenate([b.indices for b in batches]),
                   np.concatenate([b.values for b in batches]))

    @classmethod
    def collect(cls, batches: Iterable[Batch]) -> Batch:
        """All rows of ``batches`` in order, as one batch, each batch copied as
        it comes. Unlike :meth:`concat` of a list, the batches need not all be
        held at once (a reader reuses its chunks' memory) and the output grows in
        place (``realloc``): the rows occupy fresh memory once, not twice.

        >>> parts = [Batch(np.ones(1, np.float32), np.array([0, 2]),
        ...                np.array([3, 5], np.int32), np.ones(2, np.float32))] * 2
        >>> Batch.collect(iter(parts)).indptr.tolist()
        [0, 2, 4]
        """
        labels, indices, values = (np.empty(0, np.float32), np.empty(0, np.int32),
                                    np.empty(0, np.float32))
        indptr = np.zeros(1, np.int64)
        rows = nnz = 0
        for b in batches:
            r, k = b.rows, b.nnz
            for arr, need in ((labels, rows + r), (indptr, rows + r + 1),
                              (indices, nnz + k), (values, nnz + k)):
                if need > arr.size:
                    arr.resize(max(need, arr.size * 3 // 2), refcheck=False)
            labels[rows:rows + r] = b.labels
            indptr[rows + 1:rows + r + 1] = b.indptr[1:] + nnz
            indices[nnz:nnz + k] = b.indices
            values[nnz:nnz + k] = b.values
            rows, nnz = rows + r, nnz + k
        for arr, size in ((labels, rows), (indptr, rows + 1), (indices, nnz), (values, nnz)):
            arr.resize(size, refcheck=False)  # the unused tail goes back
        return cls(labels, indptr, indices, values)
