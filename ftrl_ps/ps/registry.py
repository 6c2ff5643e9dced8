"""The worker registry's records: one :class:`WorkerInfo` per registered worker
incarnation (epoch), its life-cycle states, and the rows checkpoints store.

The registry itself (registration, SSP clock, dead-worker sweep) is
:class:`ftrl_ps.ps.clock.SSPClock`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEAD", "FINISHED", "LIVE", "WorkerInfo"]

LIVE, FINISHED, DEAD = "live", "finished", "dead"


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
    pid: int | None = None
    restored: bool = False
    superseded_by: int | None = None

    def as_dict(self, now: float) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "epoch": self.worker_id,
            "index": self.index,
            "pid": self.pid,
            "state": self.state,
            "clock": self.clock,
            "seconds_since_seen": round(max(0.0, now - self.last_seen), 3),
            "stats": dict(self.stats),
        }

    def to_row(self) -> list[Any]:
        """A JSON-ready row for checkpoints (see :meth:`from_row`)."""
        return [self.worker_id, self.index, self.instance, self.clock, self.state, self.pid,
                self.stats]

    @classmethod
    def from_row(cls, row: list[Any], now: float) -> WorkerInfo:
        """A record restored from a checkpoint row: seen ``now``, ``restored`` set."""
        wid, index, instance, clock, state, pid, stats = row
        if state not in (LIVE, FINISHED, DEAD):
            raise ValueError(f"unknown worker state {state!r}")
        return cls(int(wid), int(index), instance, int(clock), now, state, dict(stats),
                   pid=pid, restored=True)
