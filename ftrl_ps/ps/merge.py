"""The merge rule: how a shard combines the ``n``/``z`` deltas that workers push.

The derivation is in ``docs/algorithm.md``; in short, a worker's push on key
``k`` is its round's FTRL steps, taken from the state it pulled. If nobody
else changed ``k`` since that pull, one process would have taken exactly
these steps: the push is added as it is. If ``j`` other pushes changed ``k``
meanwhile (*concurrent* pushes: computed from the same pulled state, none
seeing the others), one process would have taken the steps one after the
other, and each worker's steps would have started where the previous ones
ended. A round contracts an error in its start by ``rho`` (``0``: the round's
rows pin the key down, whatever the start; ``1``: the steps do not depend on
the start), so the second worker adds ``rho`` times its steps, the third
``rho**2`` ..., and ``j`` concurrent pushes of one (mean) update ``d`` add up
to ``d * (1 - rho**j) / (1 - rho)``: their sum for keys a round barely
moves, their mean for keys a round saturates (the bias), one formula between.

Every push carries, per key, the *version* of the key it pulled (how many
pushes the shard had applied to it), the rows of the push that contain the
key (its weight in the mean) and ``rho`` (:func:`saturation`, from the
worker's own ``n`` before and after the round). The shard keeps, per key, its
version and the current *group* of concurrent pushes (their base version,
count, weight, mean ``rho`` and mean delta), so that every push of a group is
merged the same way, whichever worker sends it and in whatever order
(:class:`ComposeState`). Plain pushes (without versions) are summed.

``RULES`` also names the rules that workers apply before they push (the
shards sum those pushes): ``sum`` (every delta added as pushed), ``threshold``
(the rule before issue 12: each worker divides the deltas of keys in at least
``dense_fraction`` of its push's rows, and of the bias, by the configured
number of workers) and ``contraction`` (those keys scaled by how much the
push's rows contract them instead, :mod:`ftrl_ps.ps.contraction`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.contraction import contraction_scale
from ftrl_ps.ps.curvature import apply_curvature, to_wire
from ftrl_ps.ps.groups import compose_add, composed
from ftrl_ps.ps.late import apply_late
from ftrl_ps.ps.wspace import apply_n_summed

__all__ = [
    "DEFAULT_RULE",
    "RULES",
    "VERSIONED",
    "ComposeState",
    "composed",
    "delta_scale",
    "dense_keys",
    "push_payload",
    "saturation",
    "servers_rule",
]

#: merge rules a cluster can run (``--merge-rule``)
RULES = ("compose", "compose-late", "compose-n", "contraction", "curvature", "sum", "threshold")
#: the default (docs/algorithm.md 11): ``threshold`` with dense keys scaled by their
#: rows' contraction; ``compose`` lost badly in runs of few, long rounds (section 7)
DEFAULT_RULE = "contraction"
#: rules whose pushes carry the merge sections (versions pulled, rows, rho)
VERSIONED = ("compose", "compose-late", "compose-n", "curvature")

def saturation(
    rows: np.ndarray,
    keys: np.ndarray,
    bias_key: int,
    push_rows: int,
    dense_fraction: float,
) -> np.ndarray:
    """``rho`` per key of a push: 0 for keys the round pins down, 1 for the others.

    A key in at least ``dense_fraction`` of the rows of a full push
    (``push_rows``: ``batch_size * push_step``; a short last push counts as a
    full one) is corrected by most of the round's rows: every worker drives it
    to where its rows want it, whatever the start (``rho = 0``). A rarer key
    gets a few steps that hardly depend on its start (``rho = 1``). The bias
    is in every row. ``rows[i]`` is how many rows of the push contain ``keys[i]``.

    >>> saturation(np.array([1, 9, 3]), np.array([3, 5, 99]), 99, 10, 0.5)
    array([1., 0., 0.])
    """
    dense = np.asarray(rows) >= max(1.0, dense_fraction * push_rows)
    dense |= np.asarray(keys) == bias_key
    return np.where(dense, 0.0, 1.0)


class ComposeState:
    """Per-key versions and groups of concurrent pushes of one shard's key range
    (a shard of a :data:`VERSIONED` rule; for the others every array is empty).

    Keys are local positions ``0..size-1``. Arrays are allocated zeroed (pages
    of untouched keys cost no memory; the store faults in ``version``, which every
    push writes, at start). Callers hold the locks of the keys'
    parameter groups (see :class:`ftrl_ps.ps.store.ParameterStore`).
    """

    def __init__(self, size: int, dtype: np.dtype, rule: str = "compose",
                 params: tuple[float, float, float, float] = (0.1, 1.0, 1.0, 1.0)) -> None:
        #: "curvature" (ftrl_ps.ps.curvature), "compose-n" (ftrl_ps.ps.wspace),
        #: "compose-late" (ftrl_ps.ps.late), else compose
        self.rule = rule
        self.params = params  # FTRL's alpha, beta, l1, l2 (compose-n)
        #: only the VERSIONED rules read versions and groups; the others keep none
        #: (no array, nothing faulted in: 4 bytes a key less on every shard)
        self.versioned = rule in VERSIONED
        kept = size if self.versioned else 0
        self.version = np.zeros(kept, np.uint32)  # pushes applied to the key
        self.base = np.zeros(kept, np.uint32)  # version the current group started from
        self.count = np.zeros(kept, np.uint32)  # pushes in the current group
        self.weight = np.zeros(kept, dtype)  # their rows with the key
        self.rho = np.zeros(kept, dtype)  # their weighted mean rho
        self.mean = np.zeros((kept, 2), dtype)  # their weighted mean (delta n, delta z)
        #: compose-n: compose's n minus the actual (summed) n (ftrl_ps.ps.wspace)
        self.extra = np.zeros(size if rule == "compose-n" else 0, np.float64)

    def bump(self, local: np.ndarray) -> None:
        """Count a plain (summed) push of ``local`` keys (a versioned rule's shard)."""
        if self.versioned:
            self.version[local] += np.uint32(1)

    def apply(
        self,
        local: np.ndarray,
        delta: np.ndarray,
        pulled: np.ndarray,
        rows: np.ndarray,
        rho: np.ndarray,
        current: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """The amounts to add to ``(n, z)`` of ``local`` keys for one push; updates the groups.

        ``current``: the keys' ``(n, z)`` now (``compose-n`` and ``compose-late`` need them).

        ``delta`` is the push's ``(len, 2)`` deltas, ``pulled`` the versions the
        worker pulled, ``rows`` its rows containing each key, ``rho`` its
        :func:`saturation`. Three cases per key:

        * nobody pushed since the pull (or the shard does not know the
          version: it restarted): the push starts a new group and is added as
          it is;
        * only pushes of the current group, which started from the same
          version: it joins the group, whose total becomes
          ``mean * composed(mean rho, count)``; the difference is added;
        * anything else (it missed pushes of older groups): it is added
          scaled by ``rho ** missed``, as the last of ``missed + 1``.
        """
        if self.rule == "curvature":
            out = apply_curvature(self, local, delta, pulled, rho)
        elif self.rule in ("compose-n", "compose-late"):
            assert current is not None, f"{self.rule} needs the keys' current n and z"
            n, z = (np.asarray(a, np.float64) for a in current)
            apply = apply_n_summed if self.rule == "compose-n" else apply_late
            out = apply(self, local, delta, pulled, rows, rho, n, z, self.params)
        else:
            out = compose_add(self, local, delta, pulled, rows, rho)[0]
        self.version[local] += np.uint32(1)
        return out


def dense_keys(
    rows_per_key: np.ndarray,
    keys: np.ndarray,
    bias_key: int,
    rows_in_push: int,
    dense_fraction: float,
) -> np.ndarray:
    """The keys ``threshold`` and ``contraction`` scale: in at least ``dense_fraction``
    of the push's ``rows_in_push`` rows (``rows_per_key[i]`` of them hold ``keys[i]``),
    and the bias.

    >>> dense_keys(np.array([1, 9, 10]), np.array([3, 5, 99]), 99, 10, 0.5)
    array([False,  True,  True])
    """
    dense = np.asarray(rows_per_key) >= max(1.0, dense_fraction * rows_in_push)
    dense |= np.asarray(keys) == bias_key  # every worker moves the bias alike
    return dense


def delta_scale(
    rows_per_key: np.ndarray,
    keys: np.ndarray,
    bias_key: int,
    rows_in_push: int,
    num_workers: int,
    dense_fraction: float,
) -> np.ndarray:
    """The ``threshold`` rule (the default until session 8): each key's delta factor,
    ``1 / num_workers`` for the :func:`dense_keys`, 1 for the others.

    >>> delta_scale(np.array([1, 9, 10]), np.array([3, 5, 99]), 99, 10, 2, 0.5)
    array([1. , 0.5, 0.5])
    """
    dense = dense_keys(rows_per_key, keys, bias_key, rows_in_push, dense_fraction)
    return np.where(dense, 1.0 / num_workers, 1.0)


def push_payload(
    rule: str,
    todo: Any,
    bias_key: int,
    rows_in_push: int,
    push_rows: int,
    num_workers: int,
    dense_fraction: float,
    dtype: np.dtype,
) -> tuple[np.ndarray, np.ndarray, Any]:
    """What a worker sends for its pending deltas ``todo`` (keys, ``(k, 2)`` delta,
    rows, versions) under ``rule``: ``delta_n``, ``delta_z`` in the servers' float
    type, and the merge sections (``compose``: versions, rows, rho; else None)."""
    dn, dz = todo.delta[:, 0], todo.delta[:, 1]
    if rule == "threshold":
        scale = delta_scale(todo.rows, todo.keys, bias_key, rows_in_push, num_workers,
                            dense_fraction)
        dn, dz = dn * scale, dz * scale
    elif rule == "contraction":
        dense = dense_keys(todo.rows, todo.keys, bias_key, rows_in_push, dense_fraction)
        scale = contraction_scale(dense, num_workers, todo.kappa)
        dn, dz = dn * scale, dz * scale
    merge = None
    if rule in ("compose", "compose-late", "compose-n"):
        # compose-late judges density against the push's own rows (ftrl_ps.ps.late)
        full = rows_in_push if rule == "compose-late" else push_rows
        rho = saturation(todo.rows, todo.keys, bias_key, full, dense_fraction)
        merge = (todo.versions, todo.rows, rho.astype(dtype))
    elif rule == "curvature":
        merge = (todo.versions, todo.rows, to_wire(todo.kappa).astype(dtype))
    return dn.astype(dtype), dz.astype(dtype), merge


def servers_rule(client: Any, wanted: str | None) -> str:
    """The merge rule a worker of ``client`` uses: the one the servers announce
    (``client.server_settings["merge_rule"]``; servers that announce none sum),
    or ``wanted`` for a client without settings (``sum`` if None). Raises
    ConfigError if ``wanted`` is another rule than the servers': mixing rules
    would merge one key two ways in a round."""
    settings = getattr(client, "server_settings", None)
    if settings is None:
        return wanted or "sum"
    announced = str(settings.get("merge_rule", "sum"))
    if wanted is not None and wanted != announced:
        raise ConfigError(f"the servers merge pushes by {announced!r}, this worker by "
                          f"{wanted!r}: leave WorkerConfig.merge_rule unset (None) to use "
                          "the servers' rule")
    return announced
