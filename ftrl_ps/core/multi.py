"""K FTRL-Proximal models trained side by side on one compact key space.

The checked wrapper of :mod:`ftrl_ps._kernels.tune`: ``ftrl-ps tune`` trains K
hyper-parameter settings in the same pass over rows that are parsed once. The
rows' indices are *compact keys* ``0 .. keys - 2`` (positions in the sorted
array of the feature slots that occur, see :func:`compact_keys`); the last key
is the bias. Each model is the FTRL-Proximal of :class:`ftrl_ps.core.ftrl.FTRL`
with its own :class:`FTRLParams`; :meth:`MultiFTRL.state_of` gives one model's
``n`` and ``z``.

Examples
--------
>>> import numpy as np
>>> grid = [FTRLParams(alpha=a, l1=0.0) for a in (0.1, 1.0)]
>>> models = MultiFTRL(keys=3, params=grid)
>>> labels = np.tile(np.array([1, 0], np.float32), 20)    # key 0 => click, key 1 => none
>>> indptr, indices = np.arange(41), np.tile(np.array([0, 1], np.int32), 20)
>>> loss = models.fit(labels, indptr, indices, np.ones(40, np.float32))
>>> (loss / 40).round(3)   # progressive log loss: the larger step learns faster here
array([0.602, 0.328])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ftrl_ps._kernels.aot import kernels
from ftrl_ps.core.ftrl import check_rows
from ftrl_ps.core.params import DTYPES, FTRLParams
from ftrl_ps.errors import ConfigError, DataError

__all__ = ["MultiFTRL", "check_order", "compact_keys", "warm_up"]

_k = kernels("tune")


def check_order(order: npt.ArrayLike | None, rows: int) -> np.ndarray:
    """Row numbers to visit, as int64 in ``[0, rows)`` (None: every row in order)."""
    if order is None:
        return np.arange(rows, dtype=np.int64)
    arr = np.asarray(order)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise DataError("order must be a 1-D array of row numbers")
    if arr.size and (arr.min() < 0 or arr.max() >= rows):
        raise DataError(f"row numbers in order must be in [0, {rows})")
    return np.ascontiguousarray(arr, dtype=np.int64)


#: up to this many slots, :func:`compact_keys` numbers them with a table (one
#: byte and four bytes per slot) instead of sorting every index
_TABLE_SLOTS = 1 << 26


def compact_keys(
    indices: npt.ArrayLike, num_slots: int | None = None, *, in_place: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(slots, compact)``: the sorted distinct slots of ``indices`` and every
    index replaced by its position among them (``slots[compact] == indices``).

    Positions keep the order of the slots, so rows sorted by slot stay sorted.
    Given ``num_slots`` (indices are below it, at most 2**26) a lookup table
    does it in linear time (37M indices: 0.5 s instead of 8 s for a sort).
    ``in_place``: ``indices`` (a 1-D int32 array) is overwritten with the
    positions and returned as ``compact``, so the rows' indices are held once
    (``ftrl-ps tune`` holds every row of TRAIN).

    >>> [a.tolist() for a in compact_keys([7, 3, 1000, 3], num_slots=1024)]
    [[3, 7, 1000], [1, 0, 2, 0]]
    """
    out = None
    if in_place:
        if not (isinstance(indices, np.ndarray) and indices.dtype == np.int32
                and indices.ndim == 1 and indices.flags.c_contiguous
                and indices.flags.writeable):
            raise ConfigError("in_place needs a writeable 1-D C-contiguous int32 array "
                              "of indices")
        out = indices
    arr = np.asarray(indices).reshape(-1)
    if num_slots is not None and num_slots <= _TABLE_SLOTS:
        if arr.size and (arr.min() < 0 or arr.max() >= num_slots):
            raise DataError(f"indices must be in [0, {num_slots})")
        present = np.zeros(num_slots, dtype=np.bool_)
        present[arr] = True
        position = np.cumsum(present, dtype=np.int32)
        position -= 1
        slots = np.flatnonzero(present).astype(np.int64)
        if out is None:
            return slots, position[arr]
        for at in range(0, out.size, _IN_PLACE_STEP):  # a step's worth of temporaries
            part = out[at:at + _IN_PLACE_STEP]
            part[:] = position[part]
        return slots, out
    unique, compact = np.unique(arr, return_inverse=True)
    if out is None:
        return unique.astype(np.int64), compact.astype(np.int32).reshape(-1)
    out[:] = compact.reshape(-1)
    return unique.astype(np.int64), out


#: :func:`compact_keys` in place rewrites this many indices at a time
_IN_PLACE_STEP = 1 << 20


class MultiFTRL:
    """K FTRL-Proximal models over ``keys`` compact keys (the last one the bias).

    Parameters
    ----------
    keys : int
        Keys of each model, the bias included (``>= 1``).
    params : sequence of FTRLParams
        One setting per model (``K >= 1``).
    dtype : {"float32", "float64"}
        Storage of the state and type of the arithmetic (float32 is about 1.3x
        faster and what ``ftrl-ps tune`` uses; float64 agrees with the
        single-model kernel to rounding).
    """

    def __init__(self, keys: int, params: Sequence[FTRLParams], dtype: str = "float32") -> None:
        if keys < 1:
            raise ConfigError(f"keys must be >= 1, got {keys}")
        if not params:
            raise ConfigError("MultiFTRL needs at least one setting")
        if dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        self.keys = int(keys)
        self.params = list(params)
        self.dtype = dtype
        self._set_hp()
        #: row i = key i: ``s = sqrt(n)`` of the K models, then their ``z``
        self.state = np.zeros((self.keys, 2, len(self.params)), dtype=dtype)
        #: the weights :meth:`logloss` scores with, kept for the next call: a
        #: new array of this size is new memory, which Linux zeroes page by page
        self._scratch: np.ndarray | None = None

    @property
    def size(self) -> int:
        """K, the number of models."""
        return len(self.params)

    def _set_hp(self) -> None:
        """Per-model ``alpha, beta, l1, 1/alpha, alpha*l2`` in the state's dtype."""
        p = np.array([[q.alpha, q.beta, q.l1, q.l2] for q in self.params], dtype=np.float64).T
        cols = (p[0], p[1], p[2], 1.0 / p[0], p[0] * p[3])
        self._hp_arrays = tuple(np.ascontiguousarray(c, dtype=self.dtype) for c in cols)

    def _hp(self) -> tuple[np.ndarray, ...]:
        return self._hp_arrays

    def _check(
        self, labels: npt.ArrayLike, indptr: npt.ArrayLike, indices: npt.ArrayLike,
        values: npt.ArrayLike, order: npt.ArrayLike | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        indptr_a, indices_a, values_a = check_rows(indptr, indices, values, self.keys - 1)
        labels_a = np.ascontiguousarray(labels, dtype=np.float32)
        rows = indptr_a.size - 1
        if labels_a.ndim != 1 or labels_a.size != rows:
            raise DataError(f"{labels_a.size} labels for {rows} rows")
        order_a = check_order(order, rows)
        return labels_a, indptr_a, indices_a, values_a, order_a

    def fit(
        self, labels: npt.ArrayLike, indptr: npt.ArrayLike, indices: npt.ArrayLike,
        values: npt.ArrayLike, order: npt.ArrayLike | None = None,
    ) -> np.ndarray:
        """Train every model on the rows ``order`` (row numbers; all rows by default).

        Returns each model's summed progressive log loss over those rows
        (float64, length K). Labels are 0/1; indices compact keys below
        ``keys - 1``, sorted and unique within a row.
        """
        return self._fit(*self._check(labels, indptr, indices, values, order))

    def _fit(
        self, labels: np.ndarray, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
        order: np.ndarray,
    ) -> np.ndarray:
        """Unchecked :meth:`fit` for inputs already validated."""
        loss = np.zeros(self.size, dtype=np.float64)
        _k.train_many(self.state.reshape(-1), labels, indptr, indices, values, order,
                      *self._hp(), loss)
        return loss

    def weights(self) -> np.ndarray:
        """Every model's weights, ``keys x K`` in the state's dtype (the bias last)."""
        return self._weights_into(np.empty((self.keys, self.size), dtype=self.dtype))

    def _weights_into(self, out: np.ndarray) -> np.ndarray:
        alpha, beta, l1, _, alpha_l2 = self._hp()
        _k.weights_many(self.state.reshape(-1), alpha, beta, l1, alpha_l2, out)
        return out

    def logloss(
        self, labels: npt.ArrayLike, indptr: npt.ArrayLike, indices: npt.ArrayLike,
        values: npt.ArrayLike, order: npt.ArrayLike | None = None,
    ) -> np.ndarray:
        """Each model's summed log loss on the rows ``order`` (no training)."""
        return self._logloss(*self._check(labels, indptr, indices, values, order))

    def _logloss(
        self, labels: np.ndarray, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
        order: np.ndarray,
    ) -> np.ndarray:
        loss = np.zeros(self.size, dtype=np.float64)
        out = self._scratch
        if out is None or out.shape != (self.keys, self.size):
            out = self._scratch = np.empty((self.keys, self.size), dtype=self.dtype)
        _k.logloss_many(self._weights_into(out), labels, indptr, indices, values, order, loss)
        return loss

    def keep(self, which: Sequence[int]) -> None:
        """Keep only the models ``which`` (in that order), with their state."""
        kept = MultiFTRL.regroup([self], which, 1)[0]
        self.params, self.state = kept.params, kept.state
        self._set_hp()

    def split(self, parts: int) -> list[MultiFTRL]:
        """The models in ``parts`` groups of about equal size (in order; fewer if K
        is smaller), each with its own copy of its models' state."""
        return MultiFTRL.regroup([self], range(self.size), parts)

    @classmethod
    def fresh_groups(cls, keys: int, params: Sequence[FTRLParams], parts: int,
                     dtype: str = "float32") -> list[MultiFTRL]:
        """New models of ``params`` in ``parts`` groups: :meth:`split` of a new
        MultiFTRL, without copying its zeros (new memory, page by page)."""
        if not params:
            raise ConfigError("MultiFTRL needs at least one setting")
        return [cls(keys, params[a:b], dtype=dtype) for a, b in _bounds(len(params), parts)]

    @classmethod
    def regroup(cls, groups: Sequence[MultiFTRL], which: Sequence[int],
                parts: int) -> list[MultiFTRL]:
        """The models ``which`` (positions among all the models of ``groups``, in
        that order) in ``parts`` groups: what :meth:`join`, :meth:`keep` and
        :meth:`split` give in a row, with one copy of each kept model's state
        instead of three (each copy fills new memory, page by page)."""
        _check_groups(groups, "regroup")
        models = [(g, k) for g in groups for k in range(g.size)]
        idx = [int(i) for i in which]
        if not idx or min(idx) < 0 or max(idx) >= len(models):
            raise ConfigError(f"models to keep must be in [0, {len(models)}), got {idx}")
        picked = [models[i] for i in idx]
        out = []
        for a, b in _bounds(len(picked), parts):
            group = cls(groups[0].keys, [g.params[k] for g, k in picked[a:b]],
                        dtype=groups[0].dtype)
            for j, (g, k) in enumerate(picked[a:b]):
                group.state[:, :, j] = g.state[:, :, k]
            out.append(group)
        return out

    @classmethod
    def join(cls, groups: Sequence[MultiFTRL]) -> MultiFTRL:
        """All models of ``groups``, in order, as one MultiFTRL (states copied)."""
        _check_groups(groups, "join")
        return cls.regroup(groups, range(sum(g.size for g in groups)), 1)[0]

    def state_of(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(n, z)`` of model ``k``, float64, one entry per key (as :class:`FTRL` keeps them)."""
        s = self.state[:, 0, k].astype(np.float64)
        return s * s, self.state[:, 1, k].astype(np.float64)


def _check_groups(groups: Sequence[MultiFTRL], what: str) -> None:
    if not groups or len({(g.keys, g.dtype) for g in groups}) != 1:
        raise ConfigError(f"{what} needs groups of one key count and dtype")


def _bounds(size: int, parts: int) -> list[tuple[int, int]]:
    """``[a, b)`` ranges splitting ``size`` models in ``parts`` (at most ``size``)
    groups of about equal size."""
    edges = np.linspace(0, size, min(max(1, parts), size) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def warm_up() -> None:
    """Compile (or load from the cache) every K-model kernel, for both dtypes."""
    labels = np.array([1.0, 0.0], np.float32)
    indptr = np.array([0, 2, 3])
    indices = np.array([0, 1, 1], np.int32)
    values = np.ones(3, np.float32)
    for dtype in DTYPES:
        multi = MultiFTRL(3, [FTRLParams(), FTRLParams(alpha=0.5)], dtype=dtype)
        multi.fit(labels, indptr, indices, values)
        multi.logloss(labels, indptr, indices, values)
