"""The worker registry's records: one :class:`WorkerInfo` per registered worker
incarnation (epoch), its life-cycle states, and the rows checkpoints store.

The registry itself (registration, SSP clock, dead-worker sweep) is
:class:`ftrl_ps.ps.clock.SSPClock`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ftrl_ps.errors import UnknownWorkerError, WorkerStateError

__all__ = ["DEAD", "FINISHED", "LIVE", "RegistryState", "WorkerInfo", "online_totals",
           "refusal"]

LIVE, FINISHED, DEAD = "live", "finished", "dead"
#: online learners (``serve --learn``) whose totals shard 0 keeps; the oldest go first
MAX_ONLINE = 64


@dataclass
class WorkerInfo:
    """State of one registered worker incarnation."""

    worker_id: int
    index: int
    instance: str | None
    clock: int
    last_seen: float
    state: str = LIVE
    stats: dict[str, float] = field(default_factory=dict)
    active_waits: int = 0
    #: seconds held by the SSP bound so far (this process of the shard), and since
    #: when while held now (``time.monotonic``): the hand-out reads them
    held_seconds: float = 0.0
    held_since: float | None = None
    pid: int | None = None
    restored: bool = False
    superseded_by: int | None = None
    #: the worker's stable name (e.g. its container's hostname), kept across restarts
    identity: str | None = None
    #: dead because its process said it was stopping (:meth:`RegistryState.leave`)
    left: bool = False
    #: per shard, the last push seq it sent there, as its finish said (None: not said)
    sent_to: list[int] | None = None

    def as_dict(self, now: float) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "epoch": self.worker_id,
            "index": self.index,
            "pid": self.pid,
            "identity": self.identity,
            "state": self.state,
            "clock": self.clock,
            "seconds_since_seen": round(max(0.0, now - self.last_seen), 3),
            "stats": dict(self.stats),
            **({"sent_to": list(self.sent_to)} if self.sent_to is not None else {}),
        }

    def to_row(self) -> list[Any]:
        """A JSON-ready row for checkpoints (see :meth:`from_row`)."""
        return [self.worker_id, self.index, self.instance, self.clock, self.state, self.pid,
                self.stats, self.identity, self.sent_to]

    @classmethod
    def from_row(cls, row: list[Any], now: float) -> WorkerInfo:
        """A record restored from a checkpoint row: seen ``now``, ``restored`` set."""
        wid, index, instance, clock, state, pid, stats, *rest = row  # identity, sent_to
        if state not in (LIVE, FINISHED, DEAD):
            raise ValueError(f"unknown worker state {state!r}")
        sent = rest[1] if len(rest) > 1 and rest[1] is not None else None
        return cls(int(wid), int(index), instance, int(clock), now, state, dict(stats),
                   pid=pid, restored=True, identity=rest[0] if rest else None,
                   sent_to=None if sent is None else [int(s) for s in sent])


def online_totals(snapshot: Mapping[str, Any] | None) -> tuple[int, float]:
    """Rows and loss sum of every online learner in a clock snapshot (``/v1/status``
    ``clock``; its ``online`` part).

    >>> online_totals({"online": {"a": {"rows": 3, "loss_sum": 1.5}, "b": {"rows": 2,
    ...                                                                 "loss_sum": 0.5}}})
    (5, 2.0)
    """
    online = list(((snapshot or {}).get("online") or {}).values())
    return int(sum(o["rows"] for o in online)), float(sum(o["loss_sum"] for o in online))


def refusal(w: WorkerInfo, worker_timeout: float) -> str | None:
    """Why a call from worker ``w`` is refused (None: it is live)."""
    who = f"worker {w.worker_id} (index {w.index})"
    if w.state == DEAD and w.superseded_by is not None:
        return (f"{who} was superseded by epoch {w.superseded_by}: another process "
                "registered this index; stop this one")
    if w.state == DEAD and w.left:
        return f"{who} left the cluster (its process was stopping); register again"
    if w.state == DEAD:
        return (f"{who} was declared dead after {worker_timeout:g} s without a heartbeat; "
                "register again")
    if w.state == FINISHED:
        return f"{who} has finished"
    return None


class RegistryState:
    """Mixin of :class:`~ftrl_ps.ps.clock.SSPClock`: its registry as checkpoint data."""

    _cond: threading.Condition
    _now: Callable[[], float]
    _workers: dict[int, WorkerInfo]
    _by_index: dict[int, WorkerInfo]
    _first_registration: float | None
    _missing_expired: bool
    _last_epoch: int
    num_workers: int | None
    #: per online learner (outside the SSP clock): rows and loss sum it pushed in all
    _online: dict[str, tuple[int, float]]

    def _sweep_locked(self, now: float) -> list[int]:  # pragma: no cover - SSPClock's
        raise NotImplementedError

    def _free_index_locked(self, num_workers: int, instance: str | None,
                           identity: str | None = None) -> tuple[int, bool]:
        """The index an auto-assigned registration gets, and whether it takes it over
        from a live registration: the index this ``identity`` held (a restarted
        container takes its index back at once; its old epoch is superseded), else
        the lowest index that never registered or whose worker was marked dead."""
        self._sweep_locked(self._now())
        if instance is not None:
            for idx, info in self._by_index.items():
                if info.instance == instance and info.state == LIVE:
                    return idx, False  # a retried registration
        if identity is not None:
            for idx, info in self._by_index.items():
                if info.identity == identity and info.state in (LIVE, DEAD):
                    return idx, True
        for idx in range(num_workers):
            held = self._by_index.get(idx)
            if held is None or held.state == DEAD:
                return idx, False
        raise WorkerStateError(
            f"no free worker index: all {num_workers} workers are registered and live or finished"
        )

    def state(self) -> dict[str, Any]:
        """Restorable registry state (for checkpoints): epochs, clocks, states."""
        with self._cond:
            return {
                "num_workers": self.num_workers, "last_epoch": self._last_epoch,
                "missing_expired": self._missing_expired,
                "workers": [w.to_row() for w in self._workers.values()],
                "online": {k: list(v) for k, v in self._online.items()},
            }

    def restore(self, state: dict[str, Any]) -> None:
        """Load :meth:`state`; restored live workers count as just seen."""
        with self._cond:
            now = self._now()
            self.num_workers = state["num_workers"]
            self._last_epoch = int(state["last_epoch"])
            self._missing_expired = bool(state["missing_expired"])
            self._first_registration = now
            self._workers, self._by_index = {}, {}
            self._online = {k: (int(r), float(s)) for k, (r, s) in
                            (state.get("online") or {}).items()}
            for row in state["workers"]:
                w = WorkerInfo.from_row(row, now)
                self._workers[w.worker_id] = w
                old = self._by_index.get(w.index)
                if old is None or old.worker_id < w.worker_id:
                    self._by_index[w.index] = w
            self._cond.notify_all()

    def leave(self, worker_id: int) -> bool:
        """The worker's process is stopping (Ctrl-C, SIGTERM, an error): it is dead
        from now on, as after ``worker_timeout`` without a heartbeat, so it holds
        back nobody and its units are handed on at once (fenced off as a dead
        worker's: docs/durability.md). False when it was not live (nothing changes).
        """
        with self._cond:
            w = self._workers.get(worker_id)
            if w is None:
                raise UnknownWorkerError(f"unknown worker id {worker_id}; register first")
            if w.state != LIVE:
                return False
            w.state, w.left = DEAD, True
            self._cond.notify_all()
            return True

    def note_sent(self, worker_id: int, sent_to: list[int]) -> None:
        """The finishing worker's last push seq per shard (shown in the snapshot,
        kept in checkpoints): what every shard must hold of its index for good."""
        with self._cond:
            w = self._workers.get(worker_id)
            if w is None:
                raise UnknownWorkerError(f"unknown worker id {worker_id}; register first")
            w.sent_to = list(sent_to)

    def report_online(self, learner: str, rows: int, loss_sum: float) -> None:
        """An online learner's totals so far (rows it trained and pushed, their
        loss sum): kept per learner, never lowered (a report that arrives late,
        or again after this shard restarted, changes nothing wrong)."""
        with self._cond:
            old = self._online.pop(learner, (0, 0.0))
            self._online[learner] = (max(old[0], rows), max(old[1], loss_sum))
            while len(self._online) > MAX_ONLINE:
                del self._online[next(iter(self._online))]

    def current_epoch(self, worker_index: int) -> int | None:
        """The epoch (worker id) of the index's live registration, else None."""
        with self._cond:
            info = self._by_index.get(worker_index)
            return info.worker_id if info is not None and info.state == LIVE else None
