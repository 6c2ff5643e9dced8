"""FTRL-Proximal logistic regression: hyper-parameters and per-coordinate state.

This module is the math only: it knows nothing about files, HTTP or threads.
The numba kernels live in :mod:`ftrl_ps._kernels.ftrl`; the methods here check
their inputs and call them.

The state of coordinate ``i`` is ``n_i`` (sum of squared gradients) and ``z_i``;
its weight is derived lazily (McMahan et al., KDD 2013, Algorithm 1)::

    w_i = 0                                                   if |z_i| <= l1
    w_i = -(z_i - sign(z_i) * l1) / ((beta + sqrt(n_i)) / alpha + l2)   otherwise

A feature space of ``bits`` b has ``2**b`` slots plus one bias slot at key
``2**b`` that is on (value 1.0) in every row.

Examples
--------
>>> import numpy as np
>>> from ftrl_ps.core.ftrl import FTRL, FTRLParams
>>> model = FTRL(bits=4, params=FTRLParams(l1=0.0))
>>> loss = model.fit_rows(np.array([1.0], np.float32), np.array([0, 2]), np.array([3, 5], np.int32),
...                       np.ones(2, np.float32))
>>> round(loss, 4)  # log(2): every weight starts at zero
0.6931
>>> p = model.predict_rows(np.array([0, 1]), np.array([3], np.int32), np.ones(1, np.float32))
>>> bool(p[0] > 0.5)
True
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ftrl_ps._kernels.aot import kernels
from ftrl_ps.core.params import DTYPES, MAX_BITS, MIN_BITS, FTRLParams, check_bits, num_keys
from ftrl_ps.errors import ConfigError, DataError

__all__ = [
    "DTYPES",
    "FTRL",
    "MAX_BITS",
    "MIN_BITS",
    "FTRLParams",
    "check_bits",
    "check_rows",
    "fit_compact",
    "logloss_sum",
    "num_keys",
]

def check_rows(
    indptr: npt.ArrayLike, indices: npt.ArrayLike, values: npt.ArrayLike, num_slots: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate a CSR block of rows; return contiguous arrays the kernels accept."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.asarray(indices)
    values = np.asarray(values)
    if indptr.ndim != 1 or indices.ndim != 1 or values.ndim != 1:
        raise DataError("indptr, indices and values must be 1-D arrays")
    if indptr.size == 0 or indptr[0] != 0:
        raise DataError("indptr must start with 0")
    if indices.shape != values.shape or indptr[-1] != indices.size:
        raise DataError(
            f"indptr[-1]={indptr[-1]} must equal len(indices)={indices.size} "
            f"and len(values)={values.size}"
        )
    if indptr.size > 1 and np.any(np.diff(indptr) < 0):
        raise DataError("indptr must be non-decreasing")
    if not np.issubdtype(indices.dtype, np.integer):
        raise DataError(f"indices must be integers, got {indices.dtype}")
    if indices.size and (indices.min() < 0 or indices.max() >= num_slots):
        raise DataError(f"indices must be in [0, {num_slots})")
    values = np.ascontiguousarray(values, dtype=np.float32 if values.dtype != np.float64 else None)
    if not np.all(np.isfinite(values)):
        raise DataError("values must be finite (no NaN or inf)")
    return indptr, np.ascontiguousarray(indices, dtype=np.int32), values


#: the kernels (compiled ahead of time when built, else numba's JIT)
_k = kernels("ftrl")


class FTRL:
    """Per-coordinate FTRL-Proximal state for a ``2**bits`` feature space plus bias.

    Parameters
    ----------
    bits : int
        Feature slots ``2**bits`` (1..30).
    params : FTRLParams
        Hyper-parameters.
    dtype : {"float32", "float64"}
        Storage type of ``n`` and ``z``; arithmetic is always float64.
    """

    def __init__(self, bits: int, params: FTRLParams | None = None, dtype: str = "float32") -> None:
        self.bits = check_bits(bits)
        self.params = params if params is not None else FTRLParams()
        if dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        self.dtype = dtype
        #: interleaved state, row k = (n_k, z_k): one cache line per key
        self.state = np.zeros((num_keys(self.bits), 2), dtype=dtype)

    @property
    def n(self) -> np.ndarray:
        """Per-key sum of squared gradients (a view into :attr:`state`)."""
        return self.state[:, 0]

    @property
    def z(self) -> np.ndarray:
        """Per-key ``z`` (a view into :attr:`state`)."""
        return self.state[:, 1]

    @property
    def _flat(self) -> np.ndarray:
        return self.state.reshape(-1)

    @property
    def num_slots(self) -> int:
        return 1 << self.bits

    @property
    def bias_key(self) -> int:
        return self.num_slots

    def _hp(self) -> tuple[float, float, float, float]:
        p = self.params
        return p.alpha, p.beta, p.l1, p.l2

    def fit_rows(
        self,
        labels: npt.ArrayLike,
        indptr: npt.ArrayLike,
        indices: npt.ArrayLike,
        values: npt.ArrayLike,
    ) -> float:
        """Train on rows in order (predict, then update); return the summed log loss.

        ``labels`` are 0/1. Rows are CSR (``indptr``, ``indices``, ``values``);
        indices are slots in ``[0, 2**bits)``, sorted and unique within a row.
        """
        indptr, indices, values = check_rows(indptr, indices, values, self.num_slots)
        labels = np.ascontiguousarray(labels, dtype=np.float32)
        if labels.ndim != 1 or labels.size != indptr.size - 1:
            raise DataError(f"{labels.size} labels for {indptr.size - 1} rows")
        if labels.size and not np.all((labels == 0) | (labels == 1)):
            raise DataError("labels must be 0 or 1")
        return self._fit(labels, indptr, indices, values)

    def _fit(
        self, labels: np.ndarray, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray
    ) -> float:
        """Unchecked fast path for inputs already validated (reader output)."""
        return float(
            _k.train_rows(self._flat, labels, indptr, indices, values, self.bias_key, *self._hp())
        )

    def predict_rows(
        self, indptr: npt.ArrayLike, indices: npt.ArrayLike, values: npt.ArrayLike
    ) -> np.ndarray:
        """P(y=1) for every CSR row, as float64."""
        indptr, indices, values = check_rows(indptr, indices, values, self.num_slots)
        return self._predict(indptr, indices, values)

    def _predict(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.empty(indptr.size - 1, dtype=np.float64)
        _k.predict_rows(self._flat, indptr, indices, values, self.bias_key, *self._hp(), out)
        return out

    def margin_rows(
        self, indptr: npt.ArrayLike, indices: npt.ArrayLike, values: npt.ArrayLike
    ) -> np.ndarray:
        """The margin ``w . x + bias`` of every CSR row (float64; ``predict_rows``
        is its sigmoid, with the margin clipped to +-35)."""
        indptr, indices, values = check_rows(indptr, indices, values, self.num_slots)
        return self._margins(indptr, indices, values)

    def _margins(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> np.ndarray:
        # the weights of the keys these rows use (the weight kernel on their state),
        # then w . x per row; no kernel of its own
        keys, pos = np.unique(indices, return_inverse=True)
        keys = np.append(keys, self.bias_key)
        w = np.empty(keys.size, dtype=np.float64)
        _k.weights(np.ascontiguousarray(self.state[keys]).reshape(-1), *self._hp(), w)
        rows = indptr.size - 1
        row_of = np.repeat(np.arange(rows), np.diff(indptr))
        dots = np.bincount(row_of, weights=w[pos.reshape(-1)] * values, minlength=rows)
        return w[-1] + dots

    def weights(self) -> np.ndarray:
        """The dense weight vector (float64), bias last."""
        out = np.empty(self.state.shape[0], dtype=np.float64)
        _k.weights(self._flat, *self._hp(), out)
        return out

    def touched_keys(self) -> np.ndarray:
        """Keys whose state is not zero (those a model file stores; ``-0.0`` counts
        as zero, as ``state != 0`` says), uint32, in order."""
        return self.touched_state()[0]

    def touched_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``(keys, n, z, nonzero)``: :meth:`touched_keys`, their ``n`` and ``z`` (the
        state's dtype) and how many of them have a weight that is not zero.

        Two passes of a kernel over the state, no temporaries: what a model file
        and the training summary need, in ~10 ms for 2**22 keys where numpy's
        block-wise bit tests, the weights of the touched keys and the gathers of
        their ``n`` and ``z`` took 45-65 ms (the end of every ``ftrl-ps train``).
        """
        flat = self._flat
        count = int(_k.count_touched(flat))
        keys = np.empty(count, dtype=np.uint32)
        n = np.empty(count, dtype=self.state.dtype)
        z = np.empty(count, dtype=self.state.dtype)
        nonzero = int(_k.export_touched(flat, *self._hp(), keys, n, z))
        return keys, n, z, nonzero

    def count_nonzero_weights(self, keys: np.ndarray | None = None) -> int:
        """How many weights are not zero (``(weights() != 0).sum()``), computed on
        ``keys`` only (default: the touched keys; an untouched key's weight is 0)."""
        if keys is None:
            return self.touched_state()[3]
        keys = np.asarray(keys)
        w = np.empty(keys.size, dtype=np.float64)
        _k.weights(np.ascontiguousarray(self.state[keys]).reshape(-1), *self._hp(), w)
        return int(np.count_nonzero(w))

    def load_state(self, keys: npt.ArrayLike, n: npt.ArrayLike, z: npt.ArrayLike, *,
                   reset: bool = True) -> None:
        """Set the state of ``keys`` (all other keys are reset to zero).

        ``reset=False`` skips that reset for a model known to be all zero (a new
        one): its untouched pages then stay unallocated (a 2**30-slot model holding
        a few keys loads in a moment, not after writing 8 GiB of zeros).
        """
        keys = np.asarray(keys)
        n = np.asarray(n)
        z = np.asarray(z)
        if keys.shape != n.shape or keys.shape != z.shape or keys.ndim != 1:
            raise DataError("keys, n and z must be 1-D arrays of one length")
        size = self.state.shape[0]
        if keys.size and (keys.min() < 0 or keys.max() >= size):
            raise DataError(f"keys must be in [0, {size})")
        if reset:
            self.state[:] = 0
        self.state[keys, 0] = n
        self.state[keys, 1] = z


def fit_compact(
    state: np.ndarray,
    params: FTRLParams,
    labels: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray,
) -> float:
    """Train rows on a compact ``(k, 2)`` state (float64 or float32) whose last row
    is the bias.

    Unchecked fast path for a worker's working set and ``ftrl-ps tune``'s final
    model: ``indices`` are positions in ``[0, k - 1)`` (not feature slots),
    inputs as the reader yields them.
    Returns the summed progressive log loss.
    """
    flat = state.reshape(-1)
    bias = state.shape[0] - 1
    return float(
        _k.train_rows(flat, labels, indptr, indices, values, bias,
                      params.alpha, params.beta, params.l1, params.l2)
    )


def logloss_sum(labels: np.ndarray, probs: np.ndarray) -> float:
    """Summed clipped log loss (the same clipping as training)."""
    return float(_k.logloss_sum(np.ascontiguousarray(labels), np.ascontiguousarray(probs)))
