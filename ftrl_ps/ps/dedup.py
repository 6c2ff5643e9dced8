"""Exactly-once pushes: one stream record per worker index on every shard.

A worker index's pushes form a stream numbered 1, 2, 3, ... across all its
incarnations (epochs). Each push a shard receives names the seq of the same
index's previous push *to this shard* (``prev_seq``), so a shard can tell a
retry (seq already applied, same content) from a gap (it lost pushes, e.g. it
restarted from an older checkpoint) and from a superseded or unknown
incarnation. The rules are tabled in docs/durability.md, section 2.

Every record also keeps the count and an order-independent digest of the
pushes it applied (the sum mod 2**64 of :func:`push_digest`), which a worker can
compare with the same figures of what it sent.

*Fences* (docs/durability.md, section 4): when shard 0 hands a dead worker's
input on after its last push there (``seq``), that worker's epochs up to the
dead one are fenced off on every shard (their pushes and claims refused from
then on) and a push of theirs a shard applied after ``seq`` is withdrawn. A
shard other than 0 can withdraw its last applied push of a stream (it keeps
that push's deltas, :class:`Undo`): with shard 0 as the commit point
(``PSClient(commit_on_shard0=True)``) no more than that one can be ahead of
shard 0.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ftrl_ps.errors import PushGapError, WorkerStateError
from ftrl_ps.ps.wire import PushOrigin

__all__ = ["DIGEST_WINDOW", "UNDO_BUDGET_BYTES", "PushDeduper", "StreamRecord", "Undo",
           "push_digest"]

#: digests of this many most recent seqs are kept to recognise retries
DIGEST_WINDOW = 1024
#: the kept last pushes (:class:`Undo`) of all streams together stay below this many
#: bytes: beyond it the oldest are dropped (a fence that needs one then fails loudly)
UNDO_BUDGET_BYTES = 256 << 20
_MASK = (1 << 64) - 1


def push_digest(seq: int, keys: Any, delta_n: Any, delta_z: Any, dtype: Any) -> int:
    """64-bit digest of one push part as the shard applies it.

    Keys are hashed as little-endian uint32 and deltas in the store's ``dtype``
    (little-endian), so the worker and the shard compute the same number.
    """
    dt = np.dtype(dtype).newbyteorder("<")
    h = hashlib.blake2b(int(seq).to_bytes(8, "little"), digest_size=8)
    for array, dtype_ in ((keys, np.dtype("<u4")), (delta_n, dt), (delta_z, dt)):
        h.update(np.ascontiguousarray(array, dtype=dtype_).data)  # no copy
    return int.from_bytes(h.digest(), "little")


@dataclass(frozen=True)
class Undo:
    """The last push a shard applied for a stream, as it was applied, and the
    record's fields before it: what withdrawing it restores."""

    seq: int
    epoch: int
    digest: int
    last_seq: int  # the record's before the push
    position: int
    #: keys, delta_n, delta_z as added to the store; None: cannot be taken back
    #: (a push merged by the compose rule depends on the pushes around it)
    deltas: tuple[np.ndarray, np.ndarray, np.ndarray] | None

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.deltas) if self.deltas is not None else 0


@dataclass
class StreamRecord:
    """What a shard knows of one worker index's stream of pushes."""

    worker: int
    epoch: int = 0
    last_seq: int = 0
    position: int = 0
    pushes: int = 0
    digest: int = 0
    durable_seq: int = 0
    recent: OrderedDict[int, int] = field(default_factory=OrderedDict)
    #: epochs up to this one are fenced off; ``fence_seq``: their pushes after it
    #: were withdrawn (None once a later epoch pushed: its process has dealt with it)
    fenced: int = 0
    fence_seq: int | None = None
    undo: Undo | None = field(default=None, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: ``time.monotonic()`` right after the record last changed in a way a checkpoint
    #: must hold (a push applied or withdrawn, a fence, a new epoch); not kept in
    #: checkpoints (a restored record is what its checkpoint holds)
    changed_at: float = field(default=-math.inf, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready record (the digest as a hex string: JSON numbers lose bits)."""
        return {
            "worker": self.worker, "epoch": self.epoch, "last_seq": self.last_seq,
            "position": self.position, "pushes": self.pushes,
            "digest": f"{self.digest:016x}", "durable_seq": self.durable_seq,
            "fenced": self.fenced, "fence_seq": self.fence_seq,
        }

    def state(self) -> dict[str, Any]:
        """Everything needed to restore the record (for checkpoints)."""
        return {**self.as_dict(), "recent": [[s, f"{d:016x}"] for s, d in self.recent.items()]}

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> StreamRecord:
        fence_seq = data.get("fence_seq")
        rec = cls(
            worker=int(data["worker"]), epoch=int(data["epoch"]),
            last_seq=int(data["last_seq"]), position=int(data["position"]),
            pushes=int(data["pushes"]), digest=int(data["digest"], 16),
            fenced=int(data.get("fenced", 0)),
            fence_seq=None if fence_seq is None else int(fence_seq),
        )
        rec.durable_seq = rec.last_seq
        rec.recent = OrderedDict((int(s), int(d, 16)) for s, d in data.get("recent", []))
        return rec


class PushDeduper:
    """The stream records of one shard (see the module docstring).

    Examples
    --------
    >>> dedup = PushDeduper()
    >>> _ = dedup.claim(0, epoch=5)
    >>> push = PushOrigin(worker=0, epoch=5, seq=1, prev_seq=0, position=10)
    >>> total = []
    >>> dedup.apply(push, 42, lambda: total.append(1))[0]
    True
    >>> dedup.apply(push, 42, lambda: total.append(1))[0]   # a retry
    False
    >>> total
    [1]
    """

    def __init__(self, *, durable_on_apply: bool = True, keep_undo: bool = False,
                 undo_budget: int = UNDO_BUDGET_BYTES) -> None:
        #: without checkpoints, a push is as durable as it will ever be once applied
        self.durable_on_apply = durable_on_apply
        #: keep each stream's last push to withdraw it (shards other than 0), within
        #: ``undo_budget`` bytes for all streams (the oldest dropped first)
        self.keep_undo = keep_undo
        self.undo_budget = undo_budget
        self._undos: OrderedDict[int, Undo] = OrderedDict()  # kept, oldest first
        self._lock = threading.Lock()
        self._records: dict[int, StreamRecord] = {}
        self.duplicates = 0

    def _record(self, worker: int) -> StreamRecord:
        with self._lock:
            rec = self._records.get(worker)
            if rec is None:
                rec = self._records[worker] = StreamRecord(worker)
            return rec

    def claim(self, worker: int, epoch: int) -> dict[str, Any]:
        """Make ``epoch`` the current incarnation of ``worker``; its record.

        Raises WorkerStateError if a newer epoch has claimed the index already.
        """
        rec = self._record(worker)
        with rec.lock:
            if epoch < rec.epoch:
                raise WorkerStateError(
                    f"epoch {epoch} of worker {worker} was superseded by epoch {rec.epoch}"
                )
            _check_not_fenced(rec, epoch)
            if epoch != rec.epoch:
                rec.epoch = epoch
                rec.changed_at = time.monotonic()
            return rec.as_dict()

    def apply(
        self, origin: PushOrigin | None, digest: int, action: Callable[[], None],
        deltas: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> tuple[bool, dict[str, Any] | None]:
        """Run ``action`` (the store update) once per push; ``(applied, record)``.

        ``origin=None`` (an anonymous push) always runs and has no record.
        If ``action`` raises, nothing is recorded. ``deltas``: the push's keys
        and deltas as ``action`` adds them (kept with ``keep_undo`` to withdraw
        the push, see :meth:`fence`; None: it cannot be withdrawn).
        """
        if origin is None:
            action()
            return True, None
        rec = self._record(origin.worker)
        with rec.lock:
            self._check(rec, origin, digest)
            if origin.seq <= rec.last_seq:
                with self._lock:
                    self.duplicates += 1
                return False, rec.as_dict()
            action()
            if self.keep_undo:
                rec.undo = Undo(origin.seq, origin.epoch, digest, rec.last_seq, rec.position,
                                deltas)
                self._budget(rec, rec.undo)
            if origin.epoch > rec.fenced:
                rec.fence_seq = None  # a later process pushes: it has seen the fence
            rec.last_seq, rec.position = origin.seq, origin.position
            rec.pushes += 1
            rec.digest = (rec.digest + digest) & _MASK
            rec.recent[origin.seq] = digest
            while len(rec.recent) > DIGEST_WINDOW:
                rec.recent.popitem(last=False)
            if self.durable_on_apply:
                rec.durable_seq = rec.last_seq
            rec.changed_at = time.monotonic()
            return True, rec.as_dict()

    @staticmethod
    def _check(rec: StreamRecord, origin: PushOrigin, digest: int) -> None:
        who = f"worker {origin.worker}"
        if origin.prev_seq >= origin.seq:
            raise WorkerStateError(
                f"push {origin.seq} of {who} names prev_seq {origin.prev_seq}, not below it"
            )
        if origin.epoch < rec.epoch:
            raise WorkerStateError(
                f"push {origin.seq} of {who} comes from epoch {origin.epoch}, superseded by "
                f"epoch {rec.epoch}: this process was replaced; stop it"
            )
        _check_not_fenced(rec, origin.epoch)
        if origin.epoch > rec.epoch:
            raise PushGapError(
                f"push {origin.seq} of {who} comes from unknown epoch {origin.epoch} "
                f"(this shard knows epoch {rec.epoch}): claim it first (POST /v1/streams/"
                f"{origin.worker})"
            )
        if origin.seq <= rec.last_seq:
            known = rec.recent.get(origin.seq)
            if known != digest:
                raise WorkerStateError(
                    f"push {origin.seq} of {who} was already applied "
                    + ("with other content" if known is not None else "and is too old to check")
                    + f" (last applied seq {rec.last_seq}): sequence numbers were reused"
                )
            return
        if origin.prev_seq > rec.last_seq:
            raise PushGapError(
                f"push {origin.seq} of {who} follows seq {origin.prev_seq}, but this shard "
                f"applied up to seq {rec.last_seq}: replay the missing pushes"
            )
        if origin.prev_seq < rec.last_seq:
            raise WorkerStateError(
                f"push {origin.seq} of {who} follows seq {origin.prev_seq}, but this shard "
                f"applied seq {rec.last_seq} after it: pushes out of order"
            )

    def _budget(self, rec: StreamRecord, undo: Undo) -> None:
        """Account ``rec``'s new ``undo``; drop the oldest others' beyond the budget.
        (A dropped undo only makes a later fence that needs it fail loudly.)"""
        with self._lock:
            self._undos.pop(rec.worker, None)
            self._undos[rec.worker] = undo
            total = sum(u.nbytes for u in self._undos.values())
            for other, kept in list(self._undos.items()):
                if total <= self.undo_budget or other == rec.worker:
                    break
                del self._undos[other]
                total -= kept.nbytes
                holder = self._records[other]
                if holder.undo is kept:  # not replaced since (an assignment: atomic)
                    holder.undo = None

    def fence(self, worker: int, epoch: int, seq: int,
              withdraw: Callable[[np.ndarray, np.ndarray, np.ndarray], None]) -> dict[str, Any]:
        """Fence off ``worker``'s epochs up to ``epoch`` and withdraw (through
        ``withdraw(keys, delta_n, delta_z)``) a push of theirs applied after
        ``seq``; the record. Idempotent; a fence of an epoch already fenced does
        nothing.

        Raises WorkerStateError when such a push cannot be withdrawn (more than
        one, or its deltas are not kept: a shard restarted since, or shard 0).
        """
        rec = self._record(worker)
        with rec.lock:
            if epoch <= rec.fenced:
                return rec.as_dict()
            if rec.last_seq > seq:
                undo = rec.undo
                if (undo is None or undo.deltas is None or undo.seq != rec.last_seq
                        or undo.epoch > epoch or undo.last_seq > seq):
                    raise WorkerStateError(
                        f"worker {worker}'s pushes after seq {seq} are to be withdrawn (its "
                        f"input was handed on), but this shard applied up to seq "
                        f"{rec.last_seq} and can only withdraw its last push, if it still "
                        "holds it: those rows would count twice"
                    )
                withdraw(*undo.deltas)
                rec.recent.pop(undo.seq, None)
                rec.last_seq, rec.position = undo.last_seq, undo.position
                rec.pushes -= 1
                rec.digest = (rec.digest - undo.digest) & _MASK
                rec.durable_seq = min(rec.durable_seq, rec.last_seq)
                rec.undo = None
                with self._lock:
                    self._undos.pop(worker, None)
            rec.fenced, rec.fence_seq = epoch, seq
            rec.changed_at = time.monotonic()
            return rec.as_dict()

    def fence_here(self, worker: int, epoch: int) -> dict[str, Any] | None:
        """Shard 0's fence of a dead ``epoch`` of ``worker``, at its last push
        here (the commit point); the record, or None if a later epoch has claimed
        the stream since (the worker is back: its input is not handed on)."""
        rec = self._record(worker)
        with rec.lock:
            if rec.epoch > epoch:
                return None
            if epoch > rec.fenced:
                rec.fenced, rec.fence_seq = epoch, rec.last_seq
                rec.changed_at = time.monotonic()
            return rec.as_dict()

    def fences(self) -> list[dict[str, int]]:
        """The fences not yet seen by a later process of their worker:
        ``{"worker", "epoch", "seq"}`` each (every worker applies them everywhere)."""
        with self._lock:
            recs = sorted(self._records.values(), key=lambda r: r.worker)
        return [{"worker": r.worker, "epoch": r.fenced, "seq": r.fence_seq}
                for r in recs if r.fence_seq is not None]

    def changed_at(self, worker: int) -> float:
        """``time.monotonic()`` right after ``worker``'s record last changed in a way
        a checkpoint must hold (``-inf``: not since this shard started or restored
        it, or no record): a checkpoint whose cut is later holds the whole record."""
        with self._lock:
            rec = self._records.get(worker)
        return -math.inf if rec is None else rec.changed_at

    def last_seq(self, worker: int) -> int:
        """Last applied sequence number of ``worker`` (0 if none)."""
        with self._lock:
            rec = self._records.get(worker)
        return 0 if rec is None else rec.last_seq

    def record(self, worker: int) -> dict[str, Any] | None:
        """``worker``'s record (None if this shard has none)."""
        with self._lock:
            rec = self._records.get(worker)
        if rec is None:
            return None
        with rec.lock:
            return rec.as_dict()

    def records(self) -> list[dict[str, Any]]:
        """Every stream record, by worker index."""
        with self._lock:
            recs = sorted(self._records.values(), key=lambda r: r.worker)
        return [r.as_dict() for r in recs]

    def state(self) -> list[dict[str, Any]]:
        """Restorable state of every record (call with pushes held back)."""
        with self._lock:
            return [r.state() for r in sorted(self._records.values(), key=lambda r: r.worker)]

    def restore(self, state: list[dict[str, Any]]) -> None:
        """Replace every record by ``state`` (from :meth:`state`)."""
        with self._lock:
            self._records = {int(d["worker"]): StreamRecord.from_state(d) for d in state}
            self._undos.clear()  # restored records hold no pushes to withdraw

    def mark_durable(self, state: list[dict[str, Any]]) -> None:
        """Pushes up to each record's ``last_seq`` in ``state`` are now in a checkpoint."""
        for data in state:
            rec = self._record(int(data["worker"]))
            with rec.lock:
                rec.durable_seq = max(rec.durable_seq, int(data["last_seq"]))


def _check_not_fenced(rec: StreamRecord, epoch: int) -> None:
    if epoch <= rec.fenced:
        raise WorkerStateError(
            f"epoch {epoch} of worker {rec.worker} is fenced off: the worker was declared "
            "dead and its input handed on; stop this process (a new one registers again)"
        )
