"""Rows of libsvm data in CSR form: what the reader yields and the kernels take."""

from __future__ import annotations

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
