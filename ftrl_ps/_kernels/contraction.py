"""Kernel of the ``contraction`` merge rule: how much a push's rows contract each slot.

Called only through :func:`ftrl_ps.ps.contraction.row_contraction`, which picks
the sampled rows and scales the result. For every row ``r`` of the sample, at
the weights of a compact ``n``/``z`` state (the bias the last slot, in every
row), with ``P_i = (beta + sqrt(n_i)) / alpha + l2`` the FTRL precision of slot
``i``:

* ``h_r = p_r (1 - p_r)``, ``p_r`` the row's prediction (margin clipped to
  +-35, as everywhere in the package);
* ``s_r = sum_j x_j**2 / P_j + 1 / P_bias``;
* ``out[i] += h_r s_r`` for every slot ``i`` of the row, and for the bias.

One pass over the sampled entries (no array over the whole state, no
temporaries): the numpy version it replaces computed ``P`` and ``w`` for every
slot of the round at each push. Assumptions (guaranteed by the caller):
``state`` is the ``(k, 2)`` float64 ``n``/``z`` (C order, ``k >= 1``) and
``out`` float64 of size ``k``;
``local`` (int64) holds slots in ``[0, k - 1)``; ``values`` (float64) is as
long as ``local``; ``counts`` (int64) sums to that length.
"""

from __future__ import annotations

import math

import numpy as np

from ftrl_ps._kernels._config import njit

__all__ = ["add_row_contraction"]


@njit(inline="always")
def _precision(n: float, alpha: float, beta: float, l2: float) -> float:
    return (beta + math.sqrt(max(n, 0.0))) / alpha + l2


@njit(inline="always")
def _weight(z: float, prec: float, l1: float) -> float:
    if abs(z) <= l1:
        return 0.0
    return -(z - math.copysign(l1, z)) / prec


@njit
def add_row_contraction(state, local, values, counts, alpha, beta, l1, l2, out):  # type: ignore[no-untyped-def]
    """Add ``h_r s_r`` of every row to its slots and to the bias (``out[-1]``); returns
    the number of rows."""
    bias = out.size - 1
    prec_bias = _precision(state[bias, 0], alpha, beta, l2)
    w_bias = _weight(state[bias, 1], prec_bias, l1)
    pos = 0
    bias_total = 0.0
    for r in range(counts.size):
        end = pos + counts[r]
        dot = 0.0
        spread = 0.0
        for j in range(pos, end):
            s = local[j]
            x = values[j]
            prec = _precision(state[s, 0], alpha, beta, l2)
            dot += _weight(state[s, 1], prec, l1) * x
            spread += x * x / prec
        margin = min(max(dot + w_bias, -35.0), 35.0)
        p = 1.0 / (1.0 + np.exp(-margin))
        shrink = p * (1.0 - p) * (spread + 1.0 / prec_bias)
        for j in range(pos, end):
            out[local[j]] += shrink
        bias_total += shrink
        pos = end
    out[bias] += bias_total
    return counts.size
