"""The parameter store of one shard: per-key ``n`` and ``z``, lock-striped by group.

The store is FTRL-agnostic (as ps-lite's default server handler,
``store[key] += val``): it keeps two arrays over the shard's key range
``[begin, end)`` and adds the deltas workers push. Each parameter group (see
:mod:`ftrl_ps.ps.layout`) has its own :class:`threading.Lock`; a push or pull
takes the locks of the groups it touches (in ascending order, a batch of up
to ``LOCKS_PER_CALL`` locks at a time) and gathers or scatters those groups'
segments with numpy fancy indexing, which releases the GIL, so requests
touching different groups run in parallel ("lock striping"). A push is atomic
per group, not across all its groups. A shard keeps at most ``MAX_LOCKS``
locks: with more groups (2**26 keys in groups of 4096 are 16,384 groups), one
lock guards a run of ``lock_span`` consecutive groups, so a request that
touches every group takes 1,024 locks, not 16,384.

No numba here, on purpose: the keys of a request are unique, so
``np.add.at(n, k, d)`` adds each delta once, numpy is fast enough for the
server's share of the work (0.5-0.9 ms per 34k-key push or pull on the 2-core
test machine, less than the HTTP around it), and a shard process that never imports numba is
ready ~0.7 s sooner (numba import ~0.35 s plus its first-kernel set-up
~0.35 s, measured).

Preconditions of every key array (ps-lite's rule): keys are **sorted in
strictly increasing order (unique)** and inside the shard's range. The public
methods check this, the lengths, the dtypes and the values (finite; pushed
``delta_n >= 0``) BEFORE touching the arrays and raise
:class:`~ftrl_ps.errors.ProtocolError`, leaving the state unchanged.

Keys returned by the store are ``uint32`` (the wire type); values have the
store's dtype (float32 by default, float64 on request).

Examples
--------
>>> import numpy as np
>>> from ftrl_ps.ps.layout import Layout
>>> store = ParameterStore(Layout(bits=8, group_size=16))
>>> store.push(np.array([3, 200]), np.array([1.0, 0.5]), np.array([-2.0, 4.0]))
>>> n, z = store.pull(np.array([3, 4, 200]))
>>> n.tolist(), z.tolist()
([1.0, 0.0, 0.5], [-2.0, 0.0, 4.0])
>>> keys, n, z = store.dump()
>>> keys.tolist()
[3, 200]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ftrl_ps.core.memory import populate_async
from ftrl_ps.errors import ConfigError, ProtocolError
from ftrl_ps.ps.changes import ChangeLog
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.merge import VERSIONED, ComposeState
from ftrl_ps.ps.validate import check_keys, check_merge, check_values

__all__ = ["MergeInfo", "ParameterStore"]

#: what a push under the ``compose`` merge rule carries besides its deltas, per
#: key: the versions the worker pulled (uint32), its rows that contain the key
#: and the round's saturation ``rho`` in [0, 1] (see :mod:`ftrl_ps.ps.merge`)
MergeInfo = tuple[np.ndarray, np.ndarray, np.ndarray]

_DTYPES = {"float32": np.float32, "float64": np.float64}

#: most locks one shard keeps (one per group up to this many groups, then one per
#: run of ``lock_span`` consecutive groups). A 142,000-key push or pull on a 2**26-key
#: shard took 6 ms with a lock per group (16,384 locks, 512 indexing calls per array)
#: and 2.9 ms with this cap; a 20M-row cluster run's shard 2.0 instead of 3.0-4.2 CPU
#: s (benchmarks/RESULTS.md, session 20)
MAX_LOCKS = 1024

#: most locks one indexing call holds (see ``_locked_runs``)
LOCKS_PER_CALL = 32


class ParameterStore:
    """``n`` and ``z`` of one shard, lock-striped by parameter group.

    Parameters
    ----------
    layout : Layout
        Cluster layout (bits, group size, number of shards).
    shard_index : int, default 0
        Which shard this store holds (its key range is
        ``layout.shard_range(shard_index)``).
    dtype : {"float32", "float64"}, default "float32"
        Storage dtype of ``n`` and ``z``. Pushed deltas are cast to it.
    merge_rule : str, default "compose"
        How pushes with merge sections are merged (``compose``, ``compose-late``,
        ``compose-n`` or ``curvature``, :mod:`ftrl_ps.ps.merge`).
    ftrl : tuple, default (0.1, 1.0, 1.0, 1.0)
        FTRL's ``(alpha, beta, l1, l2)`` (the ``compose-n`` rule needs them).
    """

    def __init__(self, layout: Layout, shard_index: int = 0, dtype: str = "float32",
                 merge_rule: str = "compose",
                 ftrl: tuple[float, float, float, float] = (0.1, 1.0, 1.0, 1.0)) -> None:
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        self.layout = layout
        self.shard_index = shard_index
        self.begin, self.end = layout.shard_range(shard_index)
        self.group_begin, self.group_end = layout.shard_group_range(shard_index)
        self.dtype = np.dtype(_DTYPES[dtype])
        size = self.end - self.begin
        self._n = np.zeros(size, dtype=self.dtype)
        self._z = np.zeros(size, dtype=self.dtype)
        self._merge = ComposeState(size, self.dtype, merge_rule, ftrl)
        # np.zeros maps its pages lazily, so the first pushes would pay the kernel's
        # zeroing of every page they touch (hashed keys touch them all within the
        # first percent of a run: at 2**26 keys the first tenth of a 20M-row run
        # was up to 20 % slower). A thread faults in the arrays every push writes
        # now, during start-up, as a one-process model's state is (core.memory).
        for array in (self._n, self._z, self._merge.version):  # version: maybe empty
            populate_async(array)
        num_groups = self.group_end - self.group_begin
        #: consecutive groups that share one lock (1 up to MAX_LOCKS groups)
        self.lock_span = -(-num_groups // MAX_LOCKS)
        self._lock_keys = self.lock_span * layout.group_size  # keys one lock guards
        self._locks = [threading.Lock() for _ in range(-(-num_groups // self.lock_span))]
        self._counter_lock = threading.Lock()
        #: which groups each push/load wrote (read by :meth:`changed_since`)
        self.changes = ChangeLog(self.group_end - self.group_begin, self.group_begin)
        self._counters = {
            "pushes": 0,
            "pulls": 0,
            "group_pulls": 0,
            "keys_pushed": 0,
            "keys_pulled": 0,
            "loads": 0,
            "withdrawals": 0,
        }
        self._key_count: tuple[float, int, float] = (0.0, -1, 0.0)  # at, value, seconds

    # --- public API ----------------------------------------------------------------
    @property
    def merge_rule(self) -> str:
        """How this store merges pushes that carry merge sections (ftrl_ps.ps.merge)."""
        return str(self._merge.rule)

    @property
    def size(self) -> int:
        """Number of keys this shard holds (``end - begin``)."""
        return self.end - self.begin

    def pull(self, keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """Current ``(n[keys], z[keys])``; keys sorted, unique, in the shard range."""
        n, z, _ = self.pull_versioned(keys)
        return n, z

    @property
    def keeps_versions(self) -> bool:
        """Whether pushes are counted per key (the :data:`~ftrl_ps.ps.merge.VERSIONED` rules)."""
        return self._merge.versioned

    def require_versions(self, what: str) -> None:
        """Raise :class:`~ftrl_ps.errors.ProtocolError` for ``what`` (a push with
        merge sections, a pull asking for versions) unless this store keeps versions."""
        if not self.keeps_versions:
            raise ProtocolError(
                f"this shard merges pushes by {self.merge_rule!r} and keeps no versions: "
                f"{what} is for the rules {', '.join(VERSIONED)}; the worker must use the "
                "servers' merge rule")

    def pull_versioned(self, keys: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(n, z, versions)`` at ``keys``: versions (uint32) count the pushes
        applied to each key; a ``compose`` push names the versions it pulled.
        A store that keeps no versions (:attr:`keeps_versions`) returns none
        (an empty array)."""
        arr = check_keys(keys, self.begin, self.end)
        local = arr.astype(np.int64) - self.begin
        out_n = np.empty(arr.size, dtype=self.dtype)
        out_z = np.empty(arr.size, dtype=self.dtype)
        versioned = self.keeps_versions
        out_v = np.empty(arr.size if versioned else 0, dtype=np.uint32)
        for lo, hi in self._locked_runs(arr):
            np.take(self._n, local[lo:hi], out=out_n[lo:hi])
            np.take(self._z, local[lo:hi], out=out_z[lo:hi])
            if versioned:
                np.take(self._merge.version, local[lo:hi], out=out_v[lo:hi])
        self._count(pulls=1, keys_pulled=arr.size)
        return out_n, out_z, out_v

    def pull_groups(self, group_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All keys of the given parameter groups with their ``n`` and ``z``.

        ``group_ids`` are global group ids, sorted, unique and owned by this
        shard. Returns ``(keys uint32, n, z)``.
        """
        groups = check_keys(group_ids, self.group_begin, self.group_end, name="group ids")
        keys = self.layout.group_keys(groups)
        out_n = np.empty(keys.size, dtype=self.dtype)
        out_z = np.empty(keys.size, dtype=self.dtype)
        pos = 0
        for g in groups.tolist():
            b, e = self.layout.group_range(g)
            b, e = b - self.begin, e - self.begin
            with self._locks[(g - self.group_begin) // self.lock_span]:
                out_n[pos : pos + e - b] = self._n[b:e]
                out_z[pos : pos + e - b] = self._z[b:e]
            pos += e - b
        self._count(group_pulls=1, keys_pulled=keys.size)
        return keys.astype(np.uint32), out_n, out_z

    def push(self, keys: Any, delta_n: Any, delta_z: Any, merge: MergeInfo | None = None) -> None:
        """Add ``delta_n``/``delta_z`` at ``keys``, atomically per parameter group.

        Without ``merge`` the deltas are added as they are; with it (the
        ``compose`` rule) they are merged with the pushes made concurrently
        (:meth:`ftrl_ps.ps.merge.ComposeState.apply`). All inputs are
        validated before the first group is touched; on a
        :class:`~ftrl_ps.errors.ProtocolError` nothing is changed.
        """
        arr = check_keys(keys, self.begin, self.end)
        dn = check_values(delta_n, "delta_n", arr.size, self.dtype, non_negative=True,
                          delta=True)
        dz = check_values(delta_z, "delta_z", arr.size, self.dtype, delta=True)
        local = arr.astype(np.int64) - self.begin
        if merge is not None:
            self.require_versions("a push with merge sections (versions, rows, rho)")
        info = None if merge is None else check_merge(merge, arr.size, np.dtype(np.float64))
        for lo, hi in self._locked_runs(arr):
            seg = local[lo:hi]  # unique keys: no update is lost to a duplicate
            if info is None:  # ufunc.at: one pass (n[seg] += d: a gather, then a scatter)
                np.add.at(self._n, seg, dn[lo:hi])
                np.add.at(self._z, seg, dz[lo:hi])
                self._merge.bump(seg)
                continue
            pulled, rows, rho = info
            delta = np.stack([dn[lo:hi], dz[lo:hi]], axis=1)
            add = self._merge.apply(seg, delta, pulled[lo:hi], rows[lo:hi], rho[lo:hi],
                                    (self._n[seg], self._z[seg]))
            self._n[seg] = np.maximum(self._n[seg] + add[:, 0], 0.0)
            self._z[seg] += add[:, 1]
        self._record_groups(arr)
        self._count(pushes=1, keys_pushed=arr.size)

    def _record_groups(self, keys: np.ndarray) -> None:
        """Tell the change log which groups ``keys`` touched (for /v1/changes)."""
        groups = keys // self.layout.group_size  # sorted, as the keys: no np.unique's sort
        self.changes.record(groups[segment_bounds(groups)[:-1]])

    def withdraw(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray) -> None:
        """Take back a plain push of (already validated) ``keys`` and deltas: ``n``
        minus ``delta_n`` (not below 0), ``z`` minus ``delta_z`` (ps.dedup's fence)."""
        local = np.asarray(keys).astype(np.int64) - self.begin
        for lo, hi in self._locked_runs(np.asarray(keys)):
            seg = local[lo:hi]
            self._n[seg] = np.maximum(self._n[seg] - delta_n[lo:hi], 0)
            self._z[seg] -= delta_z[lo:hi]
            self._merge.bump(seg)
        self._record_groups(np.asarray(keys))
        self._count(withdrawals=1)

    def load(self, keys: Any, n: Any, z: Any) -> None:
        """Set ``n``/``z`` at ``keys`` (e.g. from a saved model); other keys keep
        their values. Same validation as :meth:`push` (``n >= 0``, finite)."""
        arr = check_keys(keys, self.begin, self.end)
        nv = check_values(n, "n", arr.size, self.dtype, non_negative=True)
        zv = check_values(z, "z", arr.size, self.dtype)
        local = arr.astype(np.int64) - self.begin
        for lo, hi in self._locked_runs(arr):
            self._n[local[lo:hi]] = nv[lo:hi]
            self._z[local[lo:hi]] = zv[lo:hi]
        self._record_groups(arr)
        self._count(loads=1)

    def dump(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(keys uint32, n, z)`` of every touched key (``n != 0 or z != 0``).

        Each group is copied under its lock, so the dump is consistent per group
        (not a global snapshot while pushes are running). Memory: the touched
        entries plus one chunk (see :meth:`iter_touched`).
        """
        parts = list(self.iter_touched())
        if not parts:
            return np.zeros(0, np.uint32), np.zeros(0, self.dtype), np.zeros(0, self.dtype)
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]

    def iter_touched(
        self, chunk_keys: int = 1 << 16
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The touched keys with ``n``/``z``, in key order, one run of whole groups
        (about ``chunk_keys`` keys) at a time: memory stays at one chunk whatever
        the shard's size. Each run is copied under its groups' locks."""
        span = self._lock_keys
        per = max(1, chunk_keys // span)
        for first in range(0, len(self._locks), per):
            locks = self._locks[first:first + per]
            b = first * span
            e = min(b + len(locks) * span, self.size)
            for lock in locks:
                lock.acquire()
            try:
                n, z = self._n[b:e].copy(), self._z[b:e].copy()
            finally:
                for lock in reversed(locks):
                    lock.release()
            touched = np.flatnonzero((n != 0) | (z != 0))
            if touched.size:
                yield (touched + b + self.begin).astype(np.uint32), n[touched], z[touched]

    def changed_since(self, version: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """``(version, keys, n, z)``: the touched keys of the groups written after
        ``version`` (see :mod:`ftrl_ps.ps.changes`); ask from ``version`` next time."""
        current, groups = self.changes.since(version)
        if not groups:
            empty = np.zeros(0, dtype=self.dtype)
            return current, np.zeros(0, np.uint32), empty, empty.copy()
        keys, n, z = self.pull_groups(np.asarray(groups, dtype=np.int64))
        touched = (n != 0) | (z != 0)
        return current, keys[touched], n[touched], z[touched]

    def keys_with_state(self, max_age: float = 2.0) -> int:
        """Number of keys whose ``n`` or ``z`` is non-zero (what :meth:`dump` returns).

        Counted without locks, 1 Mi keys at a time (exact when no push runs),
        and cached: recounted when older than ``max_age`` seconds or 50 times
        the last count's duration, whichever is longer, so that frequent
        callers (metrics scrapes, the dashboard) cost at most ~2 % of a core
        whatever the shard's size.
        """
        if self.changes.version == 0:  # nothing pushed or loaded yet (a fresh shard)
            return 0
        now = time.monotonic()
        at, value, took = self._key_count
        if value >= 0 and now - at < max(max_age, 50 * took):
            return value
        total, step = 0, 1 << 20
        for b in range(0, self.size, step):
            total += int(np.count_nonzero((self._n[b : b + step] != 0)
                                          | (self._z[b : b + step] != 0)))
        self._key_count = (now, total, time.monotonic() - now)
        return total

    def counters(self) -> dict[str, int]:
        """Copy of the request counters (pushes, pulls, group_pulls, keys_pushed,
        keys_pulled, loads)."""
        with self._counter_lock:
            return dict(self._counters)

    # --- internals ---------------------------------------------------------------
    def _locked_runs(self, keys: np.ndarray) -> Iterator[tuple[int, int]]:
        """Yield ``(lo, hi)`` position ranges of the sorted ``keys`` while holding
        the locks of the parameter groups they fall in.

        The touched locks are taken in batches of up to :data:`LOCKS_PER_CALL`:
        the batch's locks are acquired in ascending key order (so two requests
        can never deadlock), the caller runs one numpy gather or scatter over the
        batch, and the locks are released before the next batch. Each group's
        segment is thus applied atomically, requests on other groups proceed in
        parallel, and a request spread over many groups pays one numpy call per
        batch instead of one per group.
        """
        if keys.size == 0:
            return
        stripes = (keys.astype(np.int64) - self.begin) // self._lock_keys
        bounds = segment_bounds(stripes).tolist()
        touched = stripes[bounds[:-1]].tolist()
        for start in range(0, len(touched), LOCKS_PER_CALL):
            batch = touched[start : start + LOCKS_PER_CALL]
            held: list[threading.Lock] = []
            try:
                for i in batch:
                    lock = self._locks[i]
                    lock.acquire()
                    held.append(lock)
                yield bounds[start], bounds[start + len(batch)]
            finally:
                for lock in reversed(held):
                    lock.release()

    def _count(self, **increments: int) -> None:
        with self._counter_lock:
            for name, value in increments.items():
                self._counters[name] += int(value)


def segment_bounds(groups: np.ndarray) -> np.ndarray:
    """Start indices of the runs of equal values in sorted ``groups``, plus ``len``.

    >>> segment_bounds(np.array([0, 0, 1, 1, 1, 3])).tolist()
    [0, 2, 5, 6]
    >>> segment_bounds(np.array([], dtype=np.int64)).tolist()
    [0]
    """
    if groups.size == 0:
        return np.zeros(1, dtype=np.int64)
    starts = np.flatnonzero(groups[1:] != groups[:-1]) + 1
    return np.concatenate(([0], starts, [groups.size])).astype(np.int64)
