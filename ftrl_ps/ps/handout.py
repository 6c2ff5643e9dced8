"""The worker side of work handed out on demand: plan, ask, train, report.

Every worker cuts the same input into the same units
(:func:`ftrl_ps.data.sources.work_units`), loads that plan into shard 0
(:mod:`ftrl_ps.ps.workqueue`; the first one loads it, the others are checked
against it), then asks for a unit, trains its rows, pushes everything and
ticks, and reports the unit done with a later request, once its pushes cover
all the unit's rows (:class:`UnitStream`). A faster worker simply asks more
often.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ftrl_ps.data.batch import Batch
from ftrl_ps.data.inputs import read_unit
from ftrl_ps.data.minibatch import skip_rows
from ftrl_ps.data.prefetch import prefetch
from ftrl_ps.data.sources import MAX_UNIT, MIN_UNIT, Unit, expand, is_url, work_units
from ftrl_ps.errors import ProtocolError
from ftrl_ps.ps.worker import Worker

__all__ = ["WAIT", "UnitStream", "WorkClient", "default_unit_bytes", "plan",
           "train_units", "wait_for_units"]

#: shard 0's answer "nothing to take now, but others hold units: ask again"
WAIT = "wait"
#: seconds between two asks of a worker waiting for others' units in asynchronous
#: runs; under SSP it asks again right after its clock tick, which waits for the
#: others anyway (a sleep there held BSP peers to one round per sleep)
IDLE_POLL = 0.05

#: units per worker and pass the default unit size aims at
UNITS_PER_WORKER = 16
#: the last quarter of every pass is cut into quarter-size units, so that the
#: last unit a slow worker takes holds up the end of the pass less
TAIL_FRACTION, TAIL_SPLIT = 0.25, 4


def default_unit_bytes(total_bytes: int, num_workers: int) -> int:
    """About :data:`UNITS_PER_WORKER` units per worker, within 64 KiB .. 64 MiB.

    >>> default_unit_bytes(100 << 20, 4)
    1638400
    """
    return min(MAX_UNIT, max(MIN_UNIT, total_bytes // max(1, num_workers * UNITS_PER_WORKER)))


def plan(spec: str, num_workers: int, epochs: int, unit_bytes: int | None = None
         ) -> tuple[list[Unit], str]:
    """The units of ``spec`` for ``epochs`` passes and the plan's id (a digest of them).

    Local parts are named by their absolute paths: workers that spell the same
    input differently (``data/x.svm``, ``./data/x.svm``, ``/work/data/x.svm``) or
    run in other folders make the same plan, and every unit shard 0 hands out names
    a file any of them can open."""
    parts = [p if is_url(p.name) else replace(p, name=os.path.abspath(p.name))
             for p in expand(spec)]
    size = unit_bytes or default_unit_bytes(sum(p.size for p in parts), num_workers)
    units = _finer_tail(work_units(parts, size, epochs), epochs)
    text = json.dumps([u.as_dict() for u in units], sort_keys=True).encode()
    return units, hashlib.sha256(text).hexdigest()[:16]


def _finer_tail(units: list[Unit], epochs: int) -> list[Unit]:
    """Cut the plain units in the last :data:`TAIL_FRACTION` of each pass's bytes
    into :data:`TAIL_SPLIT` pieces (ids renumbered in order)."""
    per_epoch = len(units) // epochs
    out: list[Unit] = []
    for e in range(epochs):
        epoch = units[e * per_epoch:(e + 1) * per_epoch]
        total = sum(u.end - u.start for u in epoch)
        seen = 0
        for u in epoch:  # (gzip parts and packed small parts are read whole)
            whole = u.gzip or u.parts or seen < (1 - TAIL_FRACTION) * total
            pieces = 1 if whole else TAIL_SPLIT
            seen += u.end - u.start
            cuts = [u.start + (u.end - u.start) * i // pieces for i in range(pieces + 1)]
            out.extend(replace(u, start=cuts[i], end=cuts[i + 1])
                       for i in range(pieces) if cuts[i + 1] > cuts[i])
    return [replace(u, id=i) for i, u in enumerate(out)]


class WorkClient:
    """The ``/v1/work`` calls of shard 0 through a :class:`~ftrl_ps.ps.client.PSClient`."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._net = client._net  # the client's connections (retries, error mapping)

    def load(self, units: list[Unit], plan_id: str) -> int:
        body = {"plan_id": plan_id, "units": [u.as_dict() for u in units]}
        answer = self._net.post_json(0, "/v1/work/plan", body, idempotent=True).json()
        return int(answer["units"])

    def progress(self, worker_index: int, progress: list[tuple[int, int]]) -> None:
        body = {"worker_index": worker_index, "progress": progress}
        self._net.post_json(0, "/v1/work/progress", body, idempotent=True)

    def next(self, worker_index: int, done: list[tuple[int, int]], holding: list[int],
             position: int | None = None, applied: int | None = None
             ) -> tuple[Unit, int] | str | None:
        """The next unit and the rows of it already applied, None when none is left,
        :data:`WAIT` when none is left to take but other workers still hold units.

        ``position``/``applied``: the worker's rows trained and rows applied so far
        (see :meth:`ftrl_ps.ps.workqueue.WorkQueue.next`)."""
        body: dict[str, Any] = {"worker_index": worker_index, "done": done, "holding": holding}
        if position is not None:
            body["position"] = position
        if applied is not None:
            body["applied"] = applied
        answer = self._net.post_json(0, "/v1/work/next", body, idempotent=True).json()
        got = answer["unit"]
        if got is None:
            return WAIT if answer.get("wait") else None
        # a dead worker's late push is withdrawn everywhere before its rows are retrained
        self._client.apply_fences(answer.get("fences", []))
        try:
            skip = int(got.pop("rows_done"))
            return Unit.from_dict(got), skip
        except (KeyError, TypeError) as exc:
            raise ProtocolError(f"shard 0 answered a malformed work unit: {got!r}") from exc


class UnitStream:
    """The batches of the units shard 0 hands this worker, one unit after the other.

    A unit is asked for when the previous one is read to its end, so a worker
    holds one unit at a time (a straggler cannot sit on work the others could
    do). A unit is reported done with the next request once the worker's
    pushes cover all its rows (``Worker.rows_applied``); the worker's rounds run
    on across unit boundaries, no push is forced at the end of a unit.
    """

    def __init__(self, worker: Worker, work: WorkClient, worker_index: int) -> None:
        self.worker, self.work, self.index = worker, work, worker_index
        #: units read but not all applied yet: unit, its rows, rows yielded at its end,
        #: rows yielded before it, rows of it skipped (resumed)
        self.held: list[tuple[Unit, int, int, int, int]] = []
        self.yielded = 0
        self.units = 0
        self._reported = 0  # rows applied (of this stream) when progress was last reported
        self._base = worker.position  # rows trained before (a resumed worker's)
        self._current: tuple[Unit, int, int] | None = None  # unit, rows skipped, yielded before

    def _applied(self) -> int:
        """Rows of this stream whose pushes the shards acknowledged."""
        return max(0, self.worker.rows_applied - self._base)

    def _confirmed(self) -> list[tuple[int, int]]:
        applied = self._applied()
        done = [(h[0].id, h[1]) for h in self.held if h[2] <= applied]
        self.held = [h for h in self.held if h[2] > applied]
        return done

    def _report_progress(self) -> None:
        """After each acknowledged push: the rows applied of the unit being read."""
        applied = self._applied()
        if applied <= self._reported:
            return
        self._reported = applied
        spans = [(h[0], h[4], h[3], h[2]) for h in self.held]  # unit, skip, start, end
        if self._current is not None:
            spans.append((*self._current, self.yielded))
        report = [(u.id, skip + min(applied, end) - start)
                  for u, skip, start, end in spans if start < applied]
        if report:
            self.work.progress(self.index, report)

    def next_unit(self) -> tuple[Unit, int] | str | None:
        return self.work.next(self.index, self._confirmed(), [h[0].id for h in self.held],
                              self._base + self.yielded, self.worker.rows_applied)

    def batches(self, first: tuple[Unit, int] | None = None) -> Iterator[Batch]:
        """Batches of ``first`` (if given) and of every unit asked for after it, until
        shard 0 has none to give now (None or :data:`WAIT`)."""
        cfg = self.worker.config
        got = first if first is not None else self.next_unit()
        while isinstance(got, tuple):  # not None, not WAIT
            unit, skip = got
            reader = read_unit(unit, self.worker.bits, chunk_bytes=cfg.chunk_bytes,
                               skip_bad_lines=cfg.skip_bad_lines)
            start = self.yielded
            self._current = (unit, skip, start)
            for batch in skip_rows(prefetch(reader, depth=2), skip):
                self._report_progress()
                self.yielded += batch.rows
                yield batch
            self._current = None
            self.held.append((unit, reader.stats.rows, self.yielded, start, skip))
            self.worker.report.bad_lines += reader.stats.bad_lines
            self.worker.report.bad_examples.extend(  # told by part and line, as InputReader's
                (f"{unit.part}:{at}" if isinstance(at, int) else at, token, why)
                for at, token, why in reader.stats.bad_examples)
            self.units += 1
            got = self.next_unit()


def train_units(worker: Worker, work: WorkClient, worker_index: int) -> int:
    """Train the units shard 0 hands out until none is left; returns how many.

    With nothing left to take while other workers still hold units, the worker
    waits (ticking its clock, so that under SSP it never holds the others back)
    and asks again: if one of them dies, its units are handed to this one
    (:func:`wait_for_units`)."""
    stream = UnitStream(worker, work, worker_index)
    got: tuple[Unit, int] | None = None
    while True:
        worker.train_batches(stream.batches(got))
        # every row trained is applied (the next request reports the rest); no tick:
        # more work, if any, goes on at the same clock
        worker.push(final=True)
        answer = stream.next_unit()  # None, unless a dead worker's unit was freed meanwhile
        if answer == WAIT:
            answer = wait_for_units(worker, stream)
        if not isinstance(answer, tuple):  # None: nothing is left
            break
        got = answer
    worker.report.epochs = worker.config.epochs
    return stream.units


def wait_for_units(worker: Worker, stream: UnitStream) -> tuple[Unit, int] | str | None:
    """After a :data:`WAIT`: tick (or sleep :data:`IDLE_POLL`) and ask again until
    shard 0 hands over a unit or has none left; its answer.

    The seconds from that first WAIT on are the report's ``idle_seconds``, not a
    training wait (the tick in :meth:`Worker.idle` is not in ``wait_seconds``),
    added before every tick so that the stats it sends show them so far."""
    report, mark = worker.report, time.perf_counter()
    answer: tuple[Unit, int] | str | None = WAIT
    while answer == WAIT:
        now = time.perf_counter()
        report.idle_seconds += now - mark
        mark = now
        if not worker.idle():
            time.sleep(IDLE_POLL)
        answer = stream.next_unit()
    report.idle_seconds += time.perf_counter() - mark
    return answer
