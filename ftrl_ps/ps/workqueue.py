"""Work handed out on demand (shard 0): the input's units, who has which, which are done.

The workers cut the input into line-aligned units
(:func:`ftrl_ps.data.sources.work_units`) and load that *plan* into shard 0
(every worker sends the same plan; a different one is refused). Then each
worker asks for its next unit whenever it has finished one, so faster
workers take more. Every unit is handed to one worker index at a time and
recorded as done exactly once, when its worker reports that the pushes of all
its rows were applied (the worker reports it with its next request):

* a worker asks (``next``) with the units it finished (and their rows) and
  the units it still holds;
* a unit assigned to this worker index that it no longer holds (the worker
  restarted) is handed to it again first, with the rows already recorded
  for it (``rows_done``), so a restarted worker resumes where it stood;
* then the next pending unit, in plan order (epoch by epoch);
* then a unit held by a worker index that the SSP clock has marked dead;
* otherwise nothing is left for this worker (``None``); while another live
  worker still holds units (:meth:`WorkQueue.held_by_others`) shard 0 tells it
  to wait and ask again (if that worker dies, its units go to this one), else
  it finishes.

Near the end of a pass a slow worker is not handed the next pending unit if
the pass would end sooner without it: the other workers, at the rates they
have been taking units so far, would finish the units they hold and *all*
pending units before it finished the units it holds and that one
(:meth:`WorkQueue.next`):
it finishes instead, and the others take the rest. A persistent straggler so
no longer holds up the end of the pass with its last unit. The decision
only changes who trains a unit, never whether: every unit is still handed
out and done exactly once, and the last worker still asking is never refused.

Rates count the time not held by the SSP clock (:meth:`~ftrl_ps.ps.clock.SSPClock.held`);
a much slower worker that the others are held at also slows them while it
trains on, which the comparison takes into account: such a worker is left
out as soon as every rate is known (0.25 s; docs/algorithm.md, section 9).

>>> q = WorkQueue()
>>> q.load([{"id": 0, "part": "a", "start": 0, "end": 9, "gzip": False},
...         {"id": 1, "part": "a", "start": 9, "end": 20, "gzip": False}], "p1")
2
>>> q.next(0)["id"], q.next(1)["id"], q.next(0, done=[(0, 5)], holding=[])
(0, 1, None)
>>> q.summary()["done"], q.summary()["rows_done"]
(1, 5)
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from ftrl_ps.errors import WorkerStateError
from ftrl_ps.ps.plandiff import plan_mismatch
from ftrl_ps.ps.worklog import WorkLog

__all__ = ["WorkQueue"]

PENDING, ASSIGNED, DONE = "pending", "assigned", "done"
#: a worker's rate is trusted (to leave it out of the tail) after this many seconds
MIN_RATE_SECONDS = 0.25
#: a worker slower than :data:`SLOWER` times the slowest of the others (rates per
#: second not held) while they were held more than this share of their time is
#: the one the SSP bound holds them at (:meth:`WorkQueue._others_finish_sooner`)
HELD_BACK, SLOWER = 0.25, 0.5
_UNIT_FIELDS, _PACKED = {"id", "part", "start", "end", "gzip"}, "parts"  # (optional)


class WorkQueue:
    """The plan, each unit's state and owner, and the rows recorded per unit."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: per worker index: when it first asked, bytes handed to it since, and its
        #: seconds held by the SSP clock when it first asked and as last read
        self._since: dict[int, float] = {}
        self._taken: dict[int, int] = {}
        self._held_seconds: dict[int, list[float]] = {}
        self._finished: set[int] = set()  # answered None (and not handed a unit since)
        self._lock = threading.Lock()
        self._units: list[dict[str, Any]] = []
        self._plan_id: str | None = None
        self._state: list[str] = []
        self._owner: list[int | None] = []
        self._rows: list[int] = []
        #: per unit: [position, rows skipped] when its worker began reading it (the
        #: worker's rows trained so far, and the unit's rows it did not read again)
        self._at: list[list[int] | None] = []
        self._cursor = 0  # every unit before it has left PENDING
        #: changes are written here before they are answered (ftrl_ps.ps.worklog)
        self._log: WorkLog | None = None
        self._seq = 0  # changes made (and logged) so far
        self._dirty: set[int] = set()  # units changed by the request in progress
        #: the log is rewritten as one snapshot once this many bytes were appended
        #: after the last snapshot (and at least twice the snapshot's size)
        self.compact_bytes = 4 << 20
        self._snapshot_bytes = 0

    def attach(self, log: WorkLog) -> int:
        """Replay ``log``'s changes made after the state restored so far (all of
        them without a checkpoint), then write every later change to it first.
        Returns the number of lines replayed."""
        with self._lock:
            replayed = 0
            for line in log.lines():
                if line["seq"] <= self._seq:
                    continue
                if "snapshot" in line:
                    self._restore(line["snapshot"])
                if "plan" in line:
                    self._set_plan(line["units"], str(line["plan"]))
                for unit, state, owner, rows, *at in line.get("set", ()):
                    self._state[unit], self._owner[unit], self._rows[unit] = state, owner, rows
                    self._at[unit] = list(at) if len(at) == 2 and at[0] is not None else None
                self._seq = line["seq"]
                replayed += 1
            self._cursor = 0
            self._log = log
            return replayed

    def load(self, units: list[dict[str, Any]], plan_id: str) -> int:
        """Load the plan (idempotent for the same ``plan_id``); returns its size."""
        with self._lock:
            if self._plan_id is not None:
                if plan_id != self._plan_id:
                    raise WorkerStateError(plan_mismatch(self._plan_id, self._units, plan_id,
                                                         units))
                return len(self._units)
            for i, u in enumerate(units):
                if (set(u) - {_PACKED} != _UNIT_FIELDS or u["id"] != i
                        or not 0 <= u["start"] <= u["end"]):
                    raise WorkerStateError(f"work unit {i} is malformed: {u!r}")
            self._set_plan(units, plan_id)
            self._write({"plan": plan_id, "units": self._units})
            return len(units)

    def _set_plan(self, units: list[dict[str, Any]], plan_id: str) -> None:
        self._units = [dict(u) for u in units]
        self._plan_id = plan_id
        self._state = [PENDING] * len(units)
        self._owner = [None] * len(units)
        self._rows = [0] * len(units)
        self._at = [None] * len(units)

    def next(
        self,
        worker_index: int,
        done: Iterable[tuple[int, int]] = (),
        holding: Iterable[int] | None = None,
        dead: Iterable[int] = (),
        progress: Iterable[tuple[int, int]] = (),
        position: int | None = None,
        applied: int | None = None,
        applied_by: dict[int, int] | None = None,
        held: dict[int, float] | None = None,
    ) -> dict[str, Any] | None:
        """Record ``done`` units of ``worker_index`` and hand it its next unit (or None).

        ``holding`` lists the units the worker is still working on (None: all
        units assigned to it, i.e. do not hand any back); ``dead`` the worker
        indices whose units may be taken over; ``progress`` the rows whose
        pushes were applied so far of units it holds (a resumed unit starts
        after them).

        ``position`` is the worker's count of rows trained when it begins the
        unit it asks for, ``applied`` its count of rows whose pushes the shards
        applied (both over every process of this worker index: a restarted
        worker takes them from its push journal). The queue keeps where each
        unit began in that count, so a restarted worker's units resume right
        after the rows its journal says were applied, not after the rows it had
        reported (:meth:`_resume`). ``applied_by`` gives, per worker index, the
        position of its last push that shard 0 applied: a dead worker's units are
        taken over after those rows (not only after the rows it had reported).
        ``held`` gives, per worker index, the seconds the SSP clock held its
        workers so far: rates are judged by the time not held (:meth:`_rate`).
        """
        with self._lock:
            for w, seconds in (held or {}).items():
                if w in self._held_seconds:
                    self._held_seconds[w][1] = seconds
                elif w == worker_index or w in self._since:  # counted from now on
                    self._held_seconds[w] = [seconds, seconds]
            try:
                return self._next(worker_index, done, holding, dead, progress, position,
                                  applied, applied_by or {})
            finally:
                self._commit()  # before the answer leaves (also what a refused part changed)

    def _next(
        self,
        worker_index: int,
        done: Iterable[tuple[int, int]],
        holding: Iterable[int] | None,
        dead: Iterable[int],
        progress: Iterable[tuple[int, int]],
        position: int | None,
        applied: int | None,
        applied_by: dict[int, int],
    ) -> dict[str, Any] | None:
        if self._plan_id is None:
            raise WorkerStateError("no work plan loaded on shard 0; load one first")
        for unit, rows in done:
            self._finish(worker_index, int(unit), int(rows))
        self._progress(worker_index, progress)
        held = None if holding is None else {int(u) for u in holding}
        if held is not None:
            resumed = self._resume(worker_index, held, position, applied)
            if resumed is not None:
                return resumed
        now = self._clock()
        self._since.setdefault(worker_index, now)
        dead_set = set(dead) - {worker_index}
        while self._cursor < len(self._units) and self._state[self._cursor] != PENDING:
            self._cursor += 1
        if self._cursor < len(self._units):
            if self._others_finish_sooner(worker_index, dead_set, now):
                self._finished.add(worker_index)
                return None
            return self._assign(self._cursor, worker_index, position)
        for d in sorted(dead_set & set(applied_by)):
            self._settle(d, applied_by[d])  # its pushes that shard 0 applied
        for i, owner in enumerate(self._owner):
            if self._state[i] == ASSIGNED and owner in dead_set:
                return self._assign(i, worker_index, position)
        self._finished.add(worker_index)
        return None

    def held_by_others(self, worker_index: int, dead: Iterable[int] = ()) -> bool:
        """Whether a unit is still assigned to another worker index that is not
        ``dead``: a worker with nothing left to take waits for it rather than
        finish (if that worker dies, its units are handed on to this one)."""
        gone = set(dead) | {worker_index}
        with self._lock:
            return any(state == ASSIGNED and owner not in gone
                       for state, owner in zip(self._state, self._owner, strict=True))

    def progress(self, worker_index: int, progress: Iterable[tuple[int, int]]) -> None:
        """Record the rows of held units whose pushes were applied (a unit taken
        over or resumed later starts after them)."""
        with self._lock:
            try:
                self._progress(worker_index, progress)
            finally:
                self._commit()

    def state(self) -> dict[str, Any] | None:
        """Everything to restore the queue from a checkpoint (None: no plan)."""
        with self._lock:
            return self._state_dict()

    def _state_dict(self) -> dict[str, Any] | None:
        if self._plan_id is None:
            return None
        return {"plan_id": self._plan_id, "units": self._units, "state": list(self._state),
                "owner": list(self._owner), "rows": list(self._rows),
                "at": [None if a is None else list(a) for a in self._at], "seq": self._seq}

    def restore(self, saved: dict[str, Any]) -> None:
        """Take back a :meth:`state` (a shard restarted from its checkpoint)."""
        with self._lock:
            self._restore(saved)
            self._seq = int(saved.get("seq", 0))  # the log's lines after it follow (attach)

    def _restore(self, saved: dict[str, Any]) -> None:
        self._plan_id = str(saved["plan_id"])
        self._units = [dict(u) for u in saved["units"]]
        self._state = list(saved["state"])
        self._owner = list(saved["owner"])
        self._rows = [int(r) for r in saved["rows"]]
        at = saved.get("at") or [None] * len(self._units)  # older checkpoints: unknown
        self._at = [None if a is None else [int(a[0]), int(a[1])] for a in at]
        self._cursor = 0

    def summary(self) -> dict[str, Any]:
        """Counts for the status page."""
        with self._lock:
            return {
                "plan": self._plan_id,
                "units": len(self._units),
                "pending": self._state.count(PENDING),
                "assigned": self._state.count(ASSIGNED),
                "done": self._state.count(DONE),
                # units assigned, by the worker index holding them
                "held": dict(Counter(str(o) for o, st in zip(self._owner, self._state,
                                                            strict=True) if st == ASSIGNED)),
                "rows_done": sum(r for r, s in zip(self._rows, self._state, strict=True)
                                 if s == DONE),
            }

    # --- internals (lock held) ----------------------------------------------------
    def _write(self, line: dict[str, Any]) -> None:
        self._seq += 1
        if self._log is None:
            return
        self._log.append({"seq": self._seq, **line})
        if self._log.appended > max(self.compact_bytes, 2 * self._snapshot_bytes):
            snapshot = self._state_dict()
            if snapshot is not None:
                self._snapshot_bytes = self._log.rewrite({"seq": self._seq,
                                                          "snapshot": snapshot})

    def _commit(self) -> None:
        """Log the units the current request changed (nothing if none)."""
        if self._dirty:
            self._write({"set": [[i, self._state[i], self._owner[i], self._rows[i],
                                  *(self._at[i] or (None, None))]
                                 for i in sorted(self._dirty)]})
            self._dirty.clear()

    def _finish(self, worker_index: int, unit: int, rows: int) -> None:
        if not 0 <= unit < len(self._units):
            raise WorkerStateError(f"unknown work unit {unit}")
        if self._state[unit] == DONE:
            if self._owner[unit] == worker_index:
                return  # a retried report
            raise WorkerStateError(f"work unit {unit} was done by worker {self._owner[unit]}")
        self._check_owner(worker_index, unit)
        self._state[unit] = DONE
        self._rows[unit] = max(self._rows[unit], rows)
        self._dirty.add(unit)

    def _progress(self, worker_index: int, progress: Iterable[tuple[int, int]]) -> None:
        for unit, rows in progress:
            self._check_owner(worker_index, int(unit))
            if int(rows) > self._rows[int(unit)]:
                self._rows[int(unit)] = int(rows)
                self._dirty.add(int(unit))

    def _check_owner(self, worker_index: int, unit: int) -> None:
        if not 0 <= unit < len(self._units):
            raise WorkerStateError(f"unknown work unit {unit}")
        if self._owner[unit] != worker_index or self._state[unit] != ASSIGNED:
            raise WorkerStateError(
                f"work unit {unit} is not held by worker {worker_index} "
                f"({self._state[unit]}, worker {self._owner[unit]})"
            )

    def _size(self, unit: int) -> int:
        return max(1, int(self._units[unit]["end"]) - int(self._units[unit]["start"]))

    def _rate(self, worker_index: int, now: float, waits: bool = False) -> float:
        """Bytes per second handed to ``worker_index`` since it first asked, per second
        not held by the clock (at most nine tenths off), or with its ``waits``."""
        elapsed = max(now - self._since[worker_index], 1e-3)
        busy = elapsed if waits else max(elapsed - self._waited(worker_index), 0.1 * elapsed)
        return self._taken.get(worker_index, 0) / busy

    def _waited(self, worker_index: int) -> float:
        first, last = self._held_seconds.get(worker_index, (0.0, 0.0))
        return max(last - first, 0.0)

    def _others_finish_sooner(self, worker_index: int, dead: set[int], now: float) -> bool:
        """Whether the pass ends sooner if ``worker_index`` is not handed the next
        pending unit: the others' rates (bytes handed per second) against its own,
        counting the units each side holds, and one unit more for the others
        (a unit is not split: someone takes it whole after its current one).

        Rates are per second not held by the SSP clock. While the others were
        held more than :data:`HELD_BACK` of their time and this worker is much
        slower than every one of them (:data:`SLOWER`), it is what the bound
        holds them at: while it trains on, they go at the rate they had *with*
        their waits; once it has finished, at their rate without them. (In
        lockstep every round waits for whoever is slowest at the moment:
        without the rate test such a worker was left out of clean runs.)"""
        me = worker_index
        if not self._taken.get(me) or now - self._since[me] < MIN_RATE_SECONDS:
            return False  # no rate known yet
        others = {w for w in self._since
                  if w != me and w not in dead and w not in self._finished and self._taken.get(w)}
        if not others:
            return False  # the last worker asking is never refused
        if any(now - self._since[w] < MIN_RATE_SECONDS for w in others):
            return False  # not every rate known yet
        mine = theirs = 0
        for i, state in enumerate(self._state):
            if state == PENDING or (state == ASSIGNED and self._owner[i] in others):
                theirs += self._size(i)
            elif state == ASSIGNED and self._owner[i] == me:
                mine += self._size(i)
        nxt = self._size(self._cursor)
        rate, rates = self._rate(me, now), [self._rate(w, now) for w in others]
        held = sum(map(self._waited, others)) / sum(now - self._since[w] for w in others)
        cause = held > HELD_BACK and rate < SLOWER * min(rates)
        during = [self._rate(w, now, waits=True) for w in others] if cause else rates
        take = max((mine + nxt) / rate, (theirs - nxt) / sum(during))
        leave = max(mine / rate, theirs / sum(rates) + nxt / max(rates))
        return leave < take

    def _resume(self, worker_index: int, held: set[int], position: int | None,
                applied: int | None) -> dict[str, Any] | None:
        """The first unit assigned to ``worker_index`` that it no longer holds
        (the worker restarted), or None.

        With ``applied`` known, each such unit's applied rows are worked out from
        where the worker began it: its rows up to ``applied`` in the worker's count,
        all of them if the worker had begun its next unit by then (that one began
        where this one ended; the unit is then done). A unit is so never read
        twice past what the worker's pushes covered, even when the worker was
        killed before it reported the progress.
        """
        lost = [i for i, owner in enumerate(self._owner)
                if owner == worker_index and self._state[i] == ASSIGNED and i not in held]
        if not lost:
            return None
        if applied is not None:
            self._settle(worker_index, applied, held)
        for i in lost:
            if self._state[i] == ASSIGNED:
                if position is not None:
                    self._at[i] = [position, self._rows[i]]
                    self._dirty.add(i)
                return self._answer(i)
        return None

    def _settle(self, worker_index: int, applied: int,
                held: set[int] | frozenset[int] = frozenset()) -> None:
        """Record the rows of ``worker_index``'s units (but ``held``) that its count
        ``applied`` covers: a unit's rows up to ``applied`` from where the worker
        began it, all of them (and the unit done) if the worker had begun its next
        unit by then, since that one began where this one ended."""
        begun = sorted((at[0], i) for i, owner in enumerate(self._owner)
                       if owner == worker_index and self._state[i] == ASSIGNED
                       and (at := self._at[i]) is not None)
        for k, (start, i) in enumerate(begun):
            if i in held:
                continue
            skip = self._at[i][1]  # type: ignore[index]
            end = begun[k + 1][0] if k + 1 < len(begun) else None
            if end is not None and applied >= end:
                self._rows[i] = max(self._rows[i], skip + end - start)
                self._state[i] = DONE
            else:
                self._rows[i] = max(self._rows[i], skip + max(0, applied - start))
            self._dirty.add(i)

    def _assign(self, unit: int, worker_index: int, position: int | None = None
                ) -> dict[str, Any]:
        self._taken[worker_index] = self._taken.get(worker_index, 0) + self._size(unit)
        self._finished.discard(worker_index)
        self._state[unit] = ASSIGNED
        self._owner[unit] = worker_index
        self._at[unit] = None if position is None else [position, self._rows[unit]]
        self._dirty.add(unit)
        return self._answer(unit)

    def _answer(self, unit: int) -> dict[str, Any]:
        return {**self._units[unit], "rows_done": self._rows[unit]}
