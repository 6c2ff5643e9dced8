"""The ``contraction`` merge rule: dense keys composed by how much their rows contract them.

Derivation (docs/algorithm.md, section 11). Under ``threshold`` a key in at
least ``dense_fraction`` of a push's rows (and the bias) is divided by the
number of workers ``N``: it is treated as *pinned* (``rho = 0`` of section 3),
so the ``N`` concurrent pushes, each moving it to where its rows want it, are
averaged. That is right when a round's rows do pin the key down, and wrong
when they barely move it (iPinYou: 0.24 % positives, ``p (1 - p)`` about
0.002), where one process would have added the ``N`` moves up.

A dense key's error is an error of the margin of every row that holds it, and
each row's step corrects the margin through *all* its features: a row ``r``
shrinks a margin error by ``h_r s_r``, with ``h_r = p_r (1 - p_r)`` and
``s_r = sum_j x_j^2 / P_j`` over its features and the bias (``P``: FTRL's
precision ``(beta + sqrt(n)) / alpha + l2``). Over a push the key's error
shrinks by ``rho = exp(-K)``, ``K = sum over the push's rows holding the key of
h_r s_r``, and ``N`` concurrent pushes of a common ``rho`` add up to
``C(rho, N) = (1 - rho^N) / (1 - rho)`` times their mean (section 3): each
worker scales its deltas of a dense key by ``C(rho, N) / N`` (``1 / N`` for a
pinned key, 1 for a key the rows do not move). Keys below the density line
are summed, as under ``threshold``.

``K`` is measured on the push's last rows (at most :data:`SAMPLE_ROWS`), at the
state the push ends with, and scaled to the push's rows: a dense key is in at
least half of them, so the sample holds it hundreds of times.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl_ps.core.params import FTRLParams
from ftrl_ps.ps.groups import composed

__all__ = ["SAMPLE_ROWS", "composed_share", "contraction_scale", "push_contraction",
           "row_contraction"]

#: rows of a push on which its contraction is measured (the last ones)
SAMPLE_ROWS = 2048


def composed_share(rho: np.ndarray, workers: int) -> np.ndarray:
    """``C(rho, N) / N = (1 - rho^N) / (N (1 - rho))``: the factor of each of ``N``
    concurrent updates whose rounds contract the key by ``rho``.

    >>> composed_share(np.array([0.0, 0.5, 1.0]), 4).round(4)
    array([0.25  , 0.4688, 1.    ])
    """
    return composed(np.clip(np.asarray(rho, np.float64), 0.0, 1.0), workers) / workers


def contraction_scale(dense: np.ndarray, num_workers: int, k: np.ndarray) -> np.ndarray:
    """Each key's delta factor under ``contraction``: ``C(exp(-K), N) / N`` for the
    ``dense`` keys (:func:`ftrl_ps.ps.merge.dense_keys`), 1 for the others.

    >>> contraction_scale(np.array([False, True, True]), 2, np.array([50.0, 50.0, 0.0]))
    array([1. , 0.5, 1. ])
    """
    dense = np.asarray(dense, bool)
    if num_workers <= 1:
        return np.ones(dense.shape)
    rho = np.exp(-np.maximum(np.asarray(k, np.float64), 0.0))
    return np.where(dense, composed_share(rho, num_workers), 1.0)


def row_contraction(state: np.ndarray, parts: list[Any], local: np.ndarray,
                    params: FTRLParams, sample_rows: int = SAMPLE_ROWS) -> np.ndarray:
    """``K`` per slot of a working set for the rows of ``parts`` (a push's mini-batches).

    ``state`` is the ``(k, 2)`` compact ``n``/``z`` (the bias last), ``local``
    the parts' indices renumbered to slots, concatenated. Measured on the last
    ``sample_rows`` rows at ``state`` and scaled by all rows / sampled rows.
    """
    k = state.shape[0]
    out = np.zeros(k)
    total = sum(mb.rows for mb in parts)
    if not total:
        return out
    # the last parts holding sample_rows rows, then the last sample_rows rows of them
    taken, first = 0, len(parts)
    while first > 0 and taken < sample_rows:
        first -= 1
        taken += parts[first].rows
    tail = parts[first:]
    nnz_before = sum(mb.nnz for mb in parts[:first])
    counts = np.concatenate([np.diff(mb.indptr) for mb in tail])
    values = np.concatenate([mb.values for mb in tail]).astype(np.float64)
    seg = local[nnz_before:nnz_before + values.size]
    drop = max(counts.size - sample_rows, 0)
    if drop:
        cut = int(counts[:drop].sum())
        counts, values, seg = counts[drop:], values[cut:], seg[cut:]
    # only workers measure K: the servers (which import this module for the scale)
    # and the launcher before it forks them never load numba
    from ftrl_ps._kernels.aot import kernels

    kernels("contraction").add_row_contraction(
        np.ascontiguousarray(state, dtype=np.float64), np.ascontiguousarray(seg, dtype=np.int64),
        values, counts.astype(np.int64, copy=False), float(params.alpha), float(params.beta),
        float(params.l1), float(params.l2), out)
    out *= total / counts.size
    return out


def push_contraction(rnd: Any, params: FTRLParams) -> np.ndarray:
    """``K`` per slot of a worker's round (:class:`ftrl_ps.ps.workingset.WorkingSet`)
    for its rows since the last push, plus that of the pending deltas it carries."""
    seg = rnd.local[rnd.offsets[rnd.pushed]:rnd.offsets[rnd.done]]
    return row_contraction(rnd.state, rnd.parts[rnd.pushed:rnd.done], seg, params) + (
        rnd.carried_kappa)
