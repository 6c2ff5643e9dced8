"""The cluster at a glance, from shard 0's clock snapshot: workers, totals, history.

Workers send their progress with every clock tick (``rows``, ``loss_sum``,
``rows_per_second``, ``pushes``, ``pulls``, ``keys_pushed``, ``keys_pulled``,
``wait_seconds``, ``idle_seconds``; see :meth:`ftrl_ps.ps.worker.Worker.stats`);
shard 0 keeps the last one per worker (:meth:`ftrl_ps.ps.clock.SSPClock.snapshot`).
:class:`Overview` sums them up the same way for everyone who shows progress:
the local cluster's live line, ``ftrl-ps status``, the dashboard and the
metrics of shard 0. :class:`History` keeps a bounded time series of the
totals, sampled by shard 0, for the dashboard's charts and the current rows/s.

Restarts: a worker index that registered more than once (a dead worker
replaced) counts one restart per extra registration. A predecessor killed -9
never reported the rows of its last pushes; its successor reports the rows its
index pushed before it (``resumed_rows``, and ``resumed_loss`` when its journal
knew their loss), so an index counts the larger of the two totals.

Examples
--------
>>> snap = {"staleness": 3, "workers": [
...     {"worker_id": 0, "index": 0, "state": "live", "clock": 4,
...      "stats": {"rows": 1000, "loss_sum": 400.0}},
...     {"worker_id": 1, "index": 1, "state": "finished", "clock": 6,
...      "stats": {"rows": 3000, "loss_sum": 1200.0}}]}
>>> o = Overview.from_clock(snap)
>>> o.rows, o.progressive_logloss, (o.min_clock, o.max_clock), o.states
(4000, 0.4, (4, 4), {'finished': 1, 'live': 1})
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ftrl_ps.learn.progress import human
from ftrl_ps.ps.completion import workers_text
from ftrl_ps.ps.registry import online_totals

__all__ = ["History", "Overview", "WorkerView"]


@dataclass(frozen=True)
class WorkerView:
    """One worker incarnation as shard 0 last saw it."""

    worker_id: int
    index: int
    state: str
    clock: int
    seconds_since_seen: float
    stats: dict[str, float]

    @property
    def rows(self) -> int:
        return int(self.stats.get("rows", 0))

    @property
    def loss_sum(self) -> float:
        return float(self.stats.get("loss_sum", 0.0))

    @property
    def progressive_logloss(self) -> float:
        return self.loss_sum / self.rows if self.rows else math.nan

    @property
    def rows_per_second(self) -> float:
        return float(self.stats.get("rows_per_second", 0.0))

    def stat(self, name: str) -> float:
        return float(self.stats.get(name, 0.0))

    @classmethod
    def from_dict(cls, w: dict[str, Any]) -> WorkerView:
        stats = w.get("stats") or {}
        return cls(
            worker_id=int(w.get("worker_id", -1)),
            index=int(w.get("index", -1)),
            state=str(w.get("state", "?")),
            clock=int(w.get("clock", 0)),
            seconds_since_seen=float(w.get("seconds_since_seen", 0.0)),
            stats={str(k): float(v) for k, v in stats.items()},
        )


@dataclass(frozen=True)
class Overview:
    """Totals over every worker incarnation; ``workers`` holds the latest per index."""

    workers: list[WorkerView] = field(default_factory=list)
    rows: int = 0
    loss_sum: float = 0.0
    states: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    min_clock: int | None = None
    max_clock: int | None = None
    staleness: int | None = None
    num_workers: int | None = None
    max_gap_allowed: int = 0
    missing: list[int] = field(default_factory=list)
    #: rows pushed by online learners (``serve --learn``, outside the SSP clock);
    #: counted in ``rows`` and ``loss_sum`` too
    online_rows: int = 0

    #: the rows ``loss_sum`` is over (fewer than ``rows`` where a predecessor's
    #: pushed rows are counted but their loss is unknown); None: ``rows``
    loss_rows: int | None = None

    @property
    def progressive_logloss(self) -> float:
        rows = self.rows if self.loss_rows is None else self.loss_rows
        return self.loss_sum / rows if rows else math.nan

    @property
    def gap(self) -> int:
        """Clock gap between the fastest and the slowest live worker."""
        if self.min_clock is None or self.max_clock is None:
            return 0
        return self.max_clock - self.min_clock

    @property
    def slowest(self) -> list[int]:
        """Who the others may be held at: the indices the clock still expects and
        that never registered (clock 0), else the live workers at the smallest clock."""
        if self.missing:
            return list(self.missing)
        return [w.index for w in self.workers if w.state == "live" and w.clock == self.min_clock]

    @classmethod
    def from_clock(cls, snapshot: dict[str, Any] | None) -> Overview:
        """Summarise a clock snapshot (``/v1/status``'s ``clock``; None: no workers)."""
        snap = snapshot or {}
        every = [WorkerView.from_dict(w) for w in snap.get("workers", [])]
        latest: dict[int, WorkerView] = {}
        for w in sorted(every, key=lambda w: w.worker_id):
            latest[w.index] = w
        states: dict[str, int] = {}
        for w in latest.values():
            states[w.state] = states.get(w.state, 0) + 1
        clocks = [w.clock for w in latest.values() if w.state == "live"]
        online_rows, online_loss = online_totals(snap)
        rows, loss, loss_rows = online_rows, online_loss, online_rows
        for index, last in latest.items():
            mine = [w for w in every if w.index == index]
            reported, loss_i = sum(w.rows for w in mine), sum(w.loss_sum for w in mine)
            resumed = last.rows + int(last.stat("resumed_rows"))
            if resumed > reported and "resumed_loss" in last.stats:
                reported, loss_i = resumed, last.loss_sum + last.stat("resumed_loss")
            rows, loss, loss_rows = rows + max(reported, resumed), loss + loss_i, \
                loss_rows + reported
        return cls(
            workers=[latest[i] for i in sorted(latest)],
            rows=rows, loss_sum=loss, loss_rows=loss_rows if loss_rows != rows else None,
            online_rows=online_rows,
            states=dict(sorted(states.items())),
            restarts=len(every) - len(latest),
            min_clock=min(clocks) if clocks else None,
            max_clock=max(clocks) if clocks else None,
            staleness=snap.get("staleness"),
            num_workers=snap.get("num_workers"),
            max_gap_allowed=int(snap.get("max_gap_allowed") or 0),
            missing=list(snap.get("missing_indices") or []),
        )

    def line(self, rows_per_second: float | None = None) -> str:
        """One line for a terminal: rows, rows/s, logloss, clocks, restarts, states."""
        parts = [f"{human(self.rows)} rows"]
        if rows_per_second is not None:
            parts.append(f"{human(rows_per_second)} rows/s")
        if self.rows:
            parts.append(f"logloss {self.progressive_logloss:.5f}")
        return "  ".join([*parts, self.extra()])

    def extra(self, restarts: str | None = None) -> str:
        """``clock MIN..MAX  restarts R  live L ...`` (the end of :meth:`line`);
        ``restarts``: what to show instead of ``restarts R`` (the local cluster's
        supervisor knows the restarts of workers and of shards)."""
        parts = [f"clock {self.min_clock}..{self.max_clock}"] if self.min_clock is not None else []
        parts.append(f"restarts {self.restarts}" if restarts is None else restarts)
        parts.append(" ".join(f"{k} {v}" for k, v in self.states.items()) or "no workers yet")
        if self.online_rows:
            parts.append(f"online {human(self.online_rows)} rows")
        return "  ".join(parts)


class History:
    """A bounded time series of ``(time, rows, loss_sum)`` totals, and rates from it.

    :meth:`sample` appends a point (thread-safe); :meth:`points` returns them
    with rows/s between consecutive samples. At most ``maxlen`` points are
    kept: when full, every other old point is dropped, so a long run keeps
    its whole span at a coarser resolution.
    """

    def __init__(self, maxlen: int = 1200) -> None:
        self.maxlen = max(4, maxlen)
        self._points: deque[tuple[float, int, float]] = deque()
        self._lock = threading.Lock()
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()

    def sample(self, rows: int, loss_sum: float, now: float | None = None) -> None:
        t = time.time() if now is None else now
        with self._lock:
            if self._points and rows == self._points[-1][1] and len(self._points) > 1 \
                    and rows == self._points[-2][1]:
                self._points[-1] = (t, rows, loss_sum)  # idle: move the last point
                return
            self._points.append((t, rows, loss_sum))
            if len(self._points) > self.maxlen:
                kept = list(self._points)
                half = len(kept) // 2
                self._points = deque(kept[:half:2] + kept[half:])

    def points(self) -> list[dict[str, float | None]]:
        """``[{"t", "rows", "rows_per_second", "logloss"}, ...]`` oldest first.

        ``logloss`` is the progressive log loss of all rows so far;
        ``rows_per_second`` the rate since the previous point (None first).
        """
        with self._lock:
            pts = list(self._points)
        out: list[dict[str, float | None]] = []
        for i, (t, rows, loss) in enumerate(pts):
            rate = None
            if i:
                dt = t - pts[i - 1][0]
                rate = (rows - pts[i - 1][1]) / dt if dt > 0 else None
            out.append({"t": t, "rows": rows, "rows_per_second": rate,
                        "logloss": loss / rows if rows else None})
        return out

    def rate(self, window: float = 5.0) -> float:
        """Rows per second over the last ``window`` seconds of samples (0 if unknown)."""
        with self._lock:
            pts = list(self._points)
        if len(pts) < 2:
            return 0.0
        t1, r1, _ = pts[-1]
        first = pts[-2]
        for p in reversed(pts[:-1]):
            first = p
            if t1 - p[0] >= window:
                break
        dt = t1 - first[0]
        return max(0.0, (r1 - first[1]) / dt) if dt > 0 else 0.0

    def start(self, read: Callable[[], tuple[int, float]], interval: float = 1.0) -> None:
        """Sample ``read()`` -> ``(rows, loss_sum)`` every ``interval`` s in a daemon thread."""
        if self._sampler is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while True:
                try:
                    rows, loss = read()
                    self.sample(rows, loss)
                except Exception:  # noqa: BLE001 - sampling must never kill the thread
                    pass
                if self._stop.wait(interval):
                    return

        self._sampler = threading.Thread(target=loop, name="ftrl-ps-history", daemon=True)
        self._sampler.start()

    def stop(self) -> None:
        """Stop the sampler thread (if running)."""
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join(timeout=5)
            self._sampler = None


def held_by(slowest: list[int] | None) -> str:
    """Whom a waiting worker waits for, in words.

    >>> held_by([2]), held_by([0, 3]), held_by([])
    ('worker 2', 'workers 0, 3', 'the others')
    """
    return workers_text(slowest) if slowest else "the others"
