"""The warm start: one worker trains the first rounds alone (docs/algorithm.md, section 13).

With ``rounds`` R > 0 one worker trains the first rounds alone, as Downpour SGD
warm-starts with one replica (Dean et al., NIPS 2012): until some worker
reaches clock R (or finishes), :meth:`ftrl_ps.ps.clock.SSPClock.wait` lets
through only the first live worker that asked; the others ask before their
first pull and wait. Otherwise every worker would make the first, largest moves
from the initial model on its own rows. If that worker dies, the next one to
ask takes over. The lone worker may end it sooner, once its last push of the
warm start is on every shard and before its tick (:meth:`WarmStart.end`), so
that the others do not also wait for what delays that tick. Nobody pushes
alongside the lone worker, so its pushes are
merged as one worker's (:meth:`WarmStart.alone`; the clock routes answer
``"alone"``). Asynchronous workers tick after every push too, so the warm
start counts their rounds alike.

:class:`WarmStart` is the clock's bookkeeping of it; the clock calls it with
its lock held and passes its workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.registry import FINISHED, LIVE, WorkerInfo

__all__ = ["WarmStart"]


class WarmStart:
    """Who trains alone, and whether the warm start of ``rounds`` rounds is over.

    >>> warm = WarmStart(1)
    >>> a, b = (WorkerInfo(i, i, None, clock=0, last_seen=0.0) for i in (0, 1))
    >>> workers = {0: a, 1: b}
    >>> warm.turn(b, workers), warm.turn(a, workers), warm.alone(1, workers)
    (True, False, True)
    >>> a.clock = 1  # the warm start is over once some worker reached clock 1
    >>> warm.turn(b, workers), warm.alone(1, workers)
    (None, False)
    """

    def __init__(self, rounds: int) -> None:
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
            raise ConfigError(f"warm_rounds must be an int >= 0, got {rounds!r}")
        self.rounds = rounds
        self.worker_id: int | None = None  # the worker training alone
        self._over = rounds == 0

    def over(self, workers: Mapping[int, WorkerInfo]) -> bool:
        """Whether the warm start is over: some worker reached ``rounds`` or
        finished (the tick or the finish wakes the clock's waiters). It stays
        over, also when that worker later dies."""
        if not self._over:
            self._over = any(w.clock >= self.rounds or w.state == FINISHED
                             for w in workers.values())
        return self._over

    def end(self, worker_id: int, workers: Mapping[int, WorkerInfo]) -> bool:
        """The lone worker says its warm start's pushes are all applied: over now,
        before its tick reaches ``rounds``. False (nothing changes) when it was
        over already or ``worker_id`` is not the worker training alone.

        >>> warm = WarmStart(3)
        >>> a, b = (WorkerInfo(i, i, None, clock=0, last_seen=0.0) for i in (0, 1))
        >>> warm.turn(a, {0: a, 1: b}), warm.end(1, {0: a, 1: b}), warm.end(0, {0: a, 1: b})
        (True, False, True)
        >>> warm.over({0: a, 1: b}), warm.turn(b, {0: a, 1: b})
        (True, None)
        """
        if self.over(workers) or self.worker_id != worker_id:
            return False
        self._over = True
        return True

    def turn(self, w: WorkerInfo, workers: Mapping[int, WorkerInfo]) -> bool | None:
        """The warm start's say on ``w``: None once it is over (SSP decides), True
        for the worker training alone (the first live one to ask), False for the
        others."""
        if self.over(workers):
            return None
        current = workers.get(self.worker_id) if self.worker_id is not None else None
        if current is None or current.state != LIVE:
            self.worker_id = w.worker_id
        return self.worker_id == w.worker_id

    def alone(self, worker_id: int, workers: Mapping[int, WorkerInfo]) -> bool:
        """Whether ``worker_id`` trains alone now: nobody else pushes while it does."""
        return not self.over(workers) and self.worker_id == worker_id

    def state(self) -> dict[str, Any]:
        """Restorable (shard 0's checkpoints): the lone worker's id, whether it is over."""
        return {"worker_id": self.worker_id, "over": self._over}

    def restore(self, saved: Mapping[str, Any] | None) -> None:
        """Load :meth:`state`, so that after a restart of shard 0 the same worker
        goes on alone (not the first to ask again, beside the one that still
        pushes as the lone one); None (a checkpoint without it): as new."""
        if saved:
            worker_id = saved.get("worker_id")
            self.worker_id = None if worker_id is None else int(worker_id)
            self._over = self._over or bool(saved.get("over"))

    def snapshot(self, workers: Mapping[int, WorkerInfo]) -> dict[str, Any] | None:
        """Its rounds, the index of the worker that trained alone (None before one
        asked) and whether it is over; None without a warm start."""
        if self.rounds == 0:
            return None
        alone = workers.get(self.worker_id) if self.worker_id is not None else None
        return {"rounds": self.rounds, "worker": alone.index if alone else None,
                "over": self.over(workers)}
