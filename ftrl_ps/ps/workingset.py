"""A worker round's compact working set: its keys numbered 0..k-1, their state, pending deltas.

A round is the ``fetch_step`` mini-batches a worker trains between two pulls.
:class:`KeyNumbering` gives the round's distinct keys (plus the bias) the
numbers ``0..k-1`` in sorted key order and rewrites the rows' indices to those
numbers; :class:`WorkingSet` holds the pulled ``n``/``z`` of exactly those keys
as a ``(k, 2)`` float64 array that stays in cache while the round trains,
next to ``base``, what the servers are known to hold. :class:`PendingDeltas`
are deltas of a closed round that were not pushed yet (``push_step`` not a
multiple of ``fetch_step``); the next round adds them onto its pulled values.

No HTTP or threads here; :mod:`ftrl_ps.ps.worker` drives the rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ftrl_ps._kernels.aot import kernels
from ftrl_ps.core.ftrl import num_keys
from ftrl_ps.data.batch import Batch

__all__ = ["KeyNumbering", "PendingDeltas", "WorkingSet"]

_k = kernels("worker")


@dataclass
class PendingDeltas:
    """Deltas of sorted ``keys`` (``(len, 2)`` n/z), the rows each key was in, and
    the version each key had when it was pulled (the merge rule uses it), and
    the rows' contraction of each key (``curvature`` rule, else zeros)."""

    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    delta: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    versions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    kappa: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if not self.versions.size and self.keys.size:  # not given: version 0
            self.versions = np.zeros(self.keys.size, np.uint32)
        if not self.kappa.size and self.keys.size:
            self.kappa = np.zeros(self.keys.size)

    def merge(self, other: PendingDeltas) -> PendingDeltas:
        """Union with ``other``, whose keys are disjoint from these."""
        if not self.keys.size:
            return other
        if not other.keys.size:
            return self
        order = np.argsort(np.concatenate([self.keys, other.keys]), kind="stable")
        return PendingDeltas(*(np.concatenate([a, b])[order] for a, b in zip(
            self._arrays(), other._arrays(), strict=True)))

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return self.keys, self.delta, self.rows, self.versions, self.kappa

    def select(self, mask: np.ndarray) -> PendingDeltas:
        """The entries where ``mask`` is true."""
        return PendingDeltas(*(a[mask] for a in self._arrays()))


class KeyNumbering:
    """Numbers the distinct keys of a round's mini-batches (a few ms per round).

    Keys are found through an open-addressing hash table sized for the
    round's distinct keys (1.7 to 3.3 times their number, a power of two:
    512 KiB for 20,000 to 39,000 keys, so it stays in a core's L2 cache),
    grown and redone when a round has more keys than it holds; scratch
    buffers are reused from round to round. Memory does not depend on ``bits``.
    """

    #: the table is sized for this share of the last round's keys (the fewest slots,
    #: a power of two, above ``keys / TARGET_LOAD``): half the slots of a share of
    #: 0.3, first_seen ~20 % faster by fewer cache misses (RESULTS, session 14)
    TARGET_LOAD = 0.6
    #: it holds at most this share of keys before it is grown (a round with more)
    MAX_LOAD = 0.75
    MIN_TABLE_BITS = 10

    def __init__(self, bits: int) -> None:
        self.bias_key = num_keys(bits) - 1
        self._table = np.empty(1 << self.MIN_TABLE_BITS, np.int64)
        self._table_bits = self.MIN_TABLE_BITS
        self._scratch = (np.empty(0, np.int64), np.empty(0, np.int32))

    def _size_table(self, keys: int) -> None:
        """A table of at least ``keys / TARGET_LOAD`` slots (a power of two)."""
        table_bits = max(self.MIN_TABLE_BITS, int(np.ceil(np.log2(keys / self.TARGET_LOAD))))
        if table_bits != self._table_bits:
            self._table_bits = table_bits
            self._table = np.empty(1 << table_bits, np.int64)

    def number(self, parts: list[Batch]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted keys of ``parts`` plus the bias, rows per key, and the indices renumbered.

        Returns ``(keys, occurrences, local)``: ``keys`` uint32 (the bias
        last), how many rows contain each key (the bias: every row), and the
        parts' indices concatenated and rewritten as positions in ``keys``
        (a view of a buffer that the next call reuses).
        """
        total = sum(mb.indices.size for mb in parts)
        if self._scratch[0].size <= total:
            size = 2 * total + 1
            self._scratch = (np.empty(size, np.int64), np.empty(size, np.int32))
        seen, buf = self._scratch
        local = buf[:total]
        while True:
            limit = int(self._table.size * self.MAX_LOAD)
            count, at = 0, 0
            for mb in parts:  # one numbering over the parts, each into its slice of local
                count = _k.first_seen(mb.indices, self.bias_key, self._table,
                                      64 - self._table_bits, limit,
                                      local[at:at + mb.indices.size], seen, count)
                at += mb.indices.size
                if count < 0:
                    break
            if count >= 0:
                break
            self._size_table(min(total + 1, 2 * limit))  # more keys than it held: grow
        self._size_table(count)  # sized for this round's keys (the next is much alike)
        packed = (seen[:count] << 32) | np.arange(count)
        packed.sort()  # numpy's sort: several times faster than numba's argsort here
        keys = np.empty(count, np.uint32)
        occurrences = np.empty(count, np.int64)
        _k.renumber(local, packed, keys, occurrences)
        occurrences[-1] = sum(mb.rows for mb in parts)  # the bias is in every row
        return keys, occurrences, local


@dataclass
class WorkingSet:
    """The compact state of one round: slot ``i`` holds key ``keys[i]``, the bias last."""

    parts: list[Batch]
    keys: np.ndarray  # uint32, sorted, the bias last
    local: np.ndarray  # the parts' indices renumbered to slots, concatenated
    offsets: np.ndarray  # parts[i] uses local[offsets[i]:offsets[i + 1]]
    occurrences: np.ndarray  # rows of the whole round that contain each key
    state: np.ndarray  # (k, 2) float64: pulled values plus everything trained since
    base: np.ndarray  # (k, 2) float64: what the servers are known to hold
    carried: np.ndarray  # rows of pending deltas merged into this round, per slot
    versions: np.ndarray  # uint32: the keys' versions at the pull (plus own pushes since)
    carried_kappa: np.ndarray  # contraction of the pending deltas merged into this round
    done: int = 0  # parts trained
    pushed: int = 0  # parts whose deltas have been pushed

    @classmethod
    def pulled(
        cls,
        parts: list[Batch],
        numbered: tuple[np.ndarray, np.ndarray, np.ndarray],
        n: np.ndarray,
        z: np.ndarray,
        versions: np.ndarray | None = None,
    ) -> WorkingSet:
        """The round of ``parts`` (as :meth:`KeyNumbering.number` numbered them),
        starting from the servers' ``n``/``z`` (and versions) of its keys."""
        keys, occurrences, local = numbered
        state = np.empty((keys.size, 2))
        state[:, 0] = n
        state[:, 1] = z
        return cls(
            parts=parts,
            keys=keys,
            local=local,
            offsets=np.cumsum([0] + [mb.nnz for mb in parts]),
            occurrences=occurrences,
            state=state,
            base=state.copy(),
            carried=np.zeros(keys.size, dtype=np.int64),
            versions=(np.zeros(keys.size, np.uint32) if versions is None
                      else np.asarray(versions, np.uint32).copy()),
            carried_kappa=np.zeros(keys.size),
        )

    def rows_of(self, i: int) -> tuple[Batch, np.ndarray]:
        """Mini-batch ``i`` and its renumbered indices."""
        return self.parts[i], self.local[self.offsets[i] : self.offsets[i + 1]]

    def adopt(self, pending: PendingDeltas) -> PendingDeltas:
        """``local = pulled + unpushed`` for pending keys of this round; returns the rest."""
        if not pending.keys.size:
            return pending
        pos = np.minimum(np.searchsorted(self.keys, pending.keys), self.keys.size - 1)
        hit = self.keys[pos] == pending.keys
        self.state[pos[hit]] += pending.delta[hit]
        self.carried[pos[hit]] = np.maximum(pending.rows[hit], 1)
        self.carried_kappa[pos[hit]] = pending.kappa[hit]
        return pending.select(~hit)

    @property
    def dirty(self) -> bool:
        """Whether some deltas have not been pushed yet."""
        return self.pushed < self.done or bool(self.carried.any())

    def unpushed(self, kappa: np.ndarray | None = None) -> PendingDeltas:
        """The deltas not pushed yet (keys trained since the last push, or carried);
        ``kappa``: their contraction per slot (``curvature`` rule), else zeros."""
        kappa = np.zeros(self.keys.size) if kappa is None else kappa
        if self.pushed == 0 and self.done == len(self.parts):
            rows = self.occurrences + self.carried  # every key of the round was trained
        else:
            seg = self.local[self.offsets[self.pushed] : self.offsets[self.done]]
            rows = np.bincount(seg, minlength=self.keys.size).astype(np.int64)
            rows[-1] = sum(mb.rows for mb in self.parts[self.pushed : self.done])
            rows += self.carried
        sel = np.flatnonzero(rows)
        if sel.size == self.keys.size:
            return PendingDeltas(self.keys, self.state - self.base, rows, self.versions.copy(),
                                 kappa)
        return PendingDeltas(self.keys[sel], self.state[sel] - self.base[sel], rows[sel],
                             self.versions[sel], kappa[sel])

    def mark_pushed(self, keys: np.ndarray | None = None) -> None:
        """The servers now hold everything trained so far; ``keys`` (of this
        round) were in the push, so their versions grew by one."""
        self.base[:] = self.state
        self.carried[:] = 0
        self.carried_kappa[:] = 0.0
        self.pushed = self.done
        if keys is not None and keys.size:
            self.versions[np.searchsorted(self.keys, keys)] += np.uint32(1)
