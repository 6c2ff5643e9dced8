"""The merge rule: how a worker scales its ``n``/``z`` deltas before a push.

The servers add what workers push; this module decides what a push carries.
Between two syncs every worker trains on its own rows from the same pulled
state. For a key that most rows contain (the bias, numeric fields) each
worker's delta is the same journey towards the optimum, so the servers' *sum*
over N workers overshoots about N-fold and, with several workers, oscillates
and diverges (measured: 4 workers on the generated CTR data reached test
logloss 6.2 instead of 0.40). A key present in at least ``dense_fraction`` of
the rows of a push (and the bias) is therefore *dense*: its deltas are divided
by ``num_workers``, averaging the workers' journeys as if one learner had made
them. Rarer keys are seen by few workers; their deltas carry separate
information and are summed. With one worker nothing changes.

The rule is applied on the worker side, per push; the server only adds.
"""

from __future__ import annotations

import numpy as np

__all__ = ["delta_scale"]


def delta_scale(
    rows_per_key: np.ndarray,
    keys: np.ndarray,
    bias_key: int,
    rows_in_push: int,
    num_workers: int,
    dense_fraction: float,
) -> np.ndarray:
    """The factor each key's deltas are multiplied by before a push.

    ``rows_per_key[i]`` is how many of the push's ``rows_in_push`` rows
    contained ``keys[i]``. Dense keys (and the bias) get ``1 / num_workers``,
    the others 1.

    >>> delta_scale(np.array([1, 9, 10]), np.array([3, 5, 99]), 99, 10, 2, 0.5)
    array([1. , 0.5, 0.5])
    """
    dense = rows_per_key >= max(1.0, dense_fraction * rows_in_push)
    dense |= keys == bias_key  # every worker moves the bias alike
    return np.where(dense, 1.0 / num_workers, 1.0)
