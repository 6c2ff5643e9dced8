"""Kernel of the ``contraction`` merge rule: how much a push's rows contract each slot.

Called only through :func:`ftrl_ps.ps.contraction.row_contraction`, which picks
the sampled rows and scales the result. For every row ``r`` of the sample, at
the weights of a compact ``n``/``z`` state (the bias the last slot, in every
row; weights and the sigmoid as :mod:`ftrl_ps._kernels.ftrl` computes them), with
``P_i = (beta + sqrt(n_i)) / alpha + l2`` the FTRL precision of slot ``i``:

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

from ftrl_ps._kernels._config import njit
from ftrl_ps._kernels.ftrl import _sigmoid, _weight_s

__all__ = ["add_row_contraction"]


@njit
def add_row_contraction(state, local, values, counts, alpha, beta, l1, l2, out):
    """Add ``h_r s_r`` of every row to its slots and to the bias (``out[-1]``)."""
    bias = out.size - 1
    sqrt_n = math.sqrt(max(state[bias, 0], 0.0))
    prec_bias = (beta + sqrt_n) / alpha + l2
    w_bias = _weight_s(state[bias, 1], sqrt_n, alpha, beta, l1, l2)
    pos = 0
    bias_total = 0.0
    for r in range(counts.size):
        end = pos + counts[r]
        dot = 0.0
        spread = 0.0
        for j in range(pos, end):
            s = local[j]
            x = values[j]
            sqrt_n = math.sqrt(max(state[s, 0], 0.0))
            dot += _weight_s(state[s, 1], sqrt_n, alpha, beta, l1, l2) * x
            spread += x * x / ((beta + sqrt_n) / alpha + l2)
        p = _sigmoid(dot + w_bias)  # the package's margin clip and sigmoid
        shrink = p * (1.0 - p) * (spread + 1.0 / prec_bias)
        for j in range(pos, end):
            out[local[j]] += shrink
        bias_total += shrink
        pos = end
    out[bias] += bias_total
