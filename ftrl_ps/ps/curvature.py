"""The ``curvature`` merge rule: concurrent pushes composed by how much their rows contract a key.

Derivation (docs/algorithm.md, section 3b). A worker's round moves key ``i``
by ``d``; an error ``e`` in the round's start would have been shrunk to
``exp(-K) e``, where ``K`` is the round's *contraction* of the key: the sum,
over the round's rows that contain the key, of the row's curvature times the
key's step size, ``p (1 - p) x_i^2 / P_i`` (``P_i``: FTRL's precision of the
key; linearised, each row's step shrinks the key's own error by that much;
the sum over the whole row, ``sum_j x_j^2 / P_j``, was measured too and was
worse, docs/algorithm.md). Model the round as pulling the key towards a target
``t``: ``d = (1 - exp(-K)) (t - w)``. One process running several workers'
rows on the key (from the same start) would move it by ``(1 - exp(-sum K))``
times the targets' mean, each weighted by its rows' share of the contraction.
With ``f(x) = (1 - exp(-x)) / x`` (``f(0) = 1``) that is, for pushes ``i``
of one group (computed from the same pulled version):

    total = f(sum_i K_i) * sum_i d_i / f(K_i)

* ``K -> 0`` (rare keys, small steps): ``sum_i d_i``, the plain sum;
* ``K -> inf`` (keys the round pins down): ``sum_i K_i d_i / sum_i K_i``,
  the contraction-weighted mean;
* one push: ``d`` exactly; ``N`` equal pushes: ``N f(N K) / f(K)`` times
  ``d`` — one update for a pinned key, ``N`` for a rare one.

The total depends on the members only through two sums, so a group's merge
is the same whatever the order of its pushes. A push that missed ``m``
updates of older groups is added as ``d * exp(-m K)`` (the last of ``m + 1``
rounds in sequence, as under ``compose``).

``K`` travels in the push's ``rho`` section (float32 on the wire) as
``1 / (1 + K)``: in ``(0, 1]``, 1 meaning "no contraction" as ``rho = 1``
under ``compose``, and exact in relative terms for any ``K`` (``exp(-K)``
would underflow float32 at ``K > 87``; the bias of a long round reaches
that).

Interface for the shard (:func:`apply_curvature`) is deliberately small: the
per-key group arrays of :class:`ftrl_ps.ps.merge.ComposeState` (``version``,
``base``, ``count``, ``weight`` holding ``sum K``, ``mean`` holding
``sum d / f(K)``), the push's local keys, ``(len, 2)`` deltas, pulled
versions and ``rho``; it returns the ``(len, 2)`` float64 amounts to add and
updates the arrays (it does not bump ``version``; the caller does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl_ps.core.params import FTRLParams
from ftrl_ps.ps.groups import classify

__all__ = ["apply_curvature", "contraction", "from_wire", "row_curvature", "shrink", "to_wire",
           "unpushed_contraction"]


def shrink(k: np.ndarray) -> np.ndarray:
    """``f(K) = (1 - exp(-K)) / K``, ``f(0) = 1``: how much less than ``K``
    small steps a round of contraction ``K`` moves a key.

    >>> shrink(np.array([0.0, 1.0, 1000.0])).round(4)
    array([1.    , 0.6321, 0.001 ])
    """
    k = np.asarray(k, np.float64)
    safe = np.where(k > 1e-12, k, 1.0)
    return np.where(k > 1e-12, -np.expm1(-safe) / safe, 1.0 - 0.5 * k)


def to_wire(k: np.ndarray) -> np.ndarray:
    """``K`` as the ``rho`` section carries it: ``1 / (1 + K)``."""
    return 1.0 / (1.0 + np.asarray(k, np.float64))


def from_wire(rho: np.ndarray) -> np.ndarray:
    """``K`` from the ``rho`` section (``rho = 0`` reads as a very large ``K``)."""
    rho = np.asarray(rho, np.float64)
    return np.maximum(1.0 / np.maximum(rho, 1e-30) - 1.0, 0.0)


def contraction(state: np.ndarray, parts: list[Any], local: np.ndarray,
                params: FTRLParams, carried: np.ndarray | None = None) -> np.ndarray:
    """``K`` per slot of a working set for the rows of ``parts``.

    ``state`` is the ``(k, 2)`` compact ``n``/``z`` (the bias last),
    ``local`` the parts' indices renumbered to slots and concatenated;
    ``carried`` (per slot) is added (contraction of pending deltas). The
    rows' predictions use ``state`` as it is (the round's end).
    """
    k = state.shape[0]
    out = np.zeros(k) if carried is None else carried.astype(np.float64).copy()
    if not parts:
        return out
    values = np.concatenate([mb.values for mb in parts]).astype(np.float64)
    counts = np.concatenate([np.diff(mb.indptr) for mb in parts])
    prec, h, row_of = row_curvature(state, local, values, counts, params)
    bias = k - 1
    # each row shrinks an error of w_i by h x_i^2 / P_i
    out += np.bincount(local, weights=h[row_of] * values * values / prec[local], minlength=k)
    out[bias] += h.sum() / prec[bias]  # the bias is in every row (x = 1), not in the indices
    return out


def row_curvature(state: np.ndarray, local: np.ndarray, values: np.ndarray,
                  counts: np.ndarray, params: FTRLParams
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P, h, row_of)`` for rows given as CSR pieces over a compact state.

    ``state`` is the ``(k, 2)`` compact ``n``/``z`` (the bias last), ``local``
    the rows' slots concatenated, ``values`` (float64) their values and
    ``counts`` the entries of each row. ``P`` is each slot's FTRL precision
    ``(beta + sqrt(n)) / alpha + l2``, ``h = p (1 - p)`` each row's curvature at
    the weights of ``state``, ``row_of`` the row of every entry.
    """
    n, z = state[:, 0], state[:, 1]
    prec = (params.beta + np.sqrt(np.maximum(n, 0.0))) / params.alpha + params.l2
    w = np.where(np.abs(z) > params.l1, -(z - np.sign(z) * params.l1) / prec, 0.0)
    rows = counts.size
    row_of = np.repeat(np.arange(rows), counts)
    margin = np.bincount(row_of, weights=w[local] * values, minlength=rows) + w[-1]
    p = 1.0 / (1.0 + np.exp(-np.clip(margin, -35.0, 35.0)))
    return prec, p * (1.0 - p), row_of


def unpushed_contraction(rnd: Any, params: FTRLParams, rule: str) -> np.ndarray | None:
    """``K`` per slot of a worker's round (:class:`ftrl_ps.ps.workingset.WorkingSet`)
    for its rows since the last push (None unless ``rule`` is ``curvature``)."""
    if rule != "curvature":
        return None
    seg = rnd.local[rnd.offsets[rnd.pushed]:rnd.offsets[rnd.done]]
    return contraction(rnd.state, rnd.parts[rnd.pushed:rnd.done], seg, params,
                       rnd.carried_kappa)


def apply_curvature(groups: Any, local: np.ndarray, delta: np.ndarray, pulled: np.ndarray,
                    rho: np.ndarray) -> np.ndarray:
    """Amounts to add to ``(n, z)`` of ``local`` keys for one push; updates ``groups``.

    ``groups``: an object with the per-key arrays ``version``, ``base``,
    ``count`` (uint32), ``weight`` (``sum K`` of the current group) and
    ``mean`` (``(size, 2)``: ``sum d / f(K)``); see the module docstring.
    """
    k_push = from_wire(rho)
    version, missed, fresh, join, late = classify(groups, local, pulled)
    out = np.empty(delta.shape, dtype=np.float64)
    scaled = delta / shrink(k_push)[:, None]
    if fresh.any():
        i = local[fresh]
        groups.base[i] = version[fresh]
        groups.count[i] = 1
        groups.weight[i] = k_push[fresh]
        groups.mean[i] = scaled[fresh]
        out[fresh] = delta[fresh]
    if join.any():
        i = local[join]
        total_k = groups.weight[i].astype(np.float64)
        acc = groups.mean[i].astype(np.float64)
        before = acc * shrink(total_k)[:, None]
        total_k = total_k + k_push[join]
        acc = acc + scaled[join]
        out[join] = acc * shrink(total_k)[:, None] - before
        groups.weight[i] = total_k
        groups.mean[i] = acc
        groups.count[i] += np.uint32(1)
    if late.any():
        out[late] = delta[late] * np.exp(-k_push[late] * missed[late])[:, None]
    return out
