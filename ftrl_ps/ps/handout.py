"""The worker side of work handed out on demand: plan, ask, train, report.

Every worker cuts the same input into the same units
(:func:`ftrl_ps.data.sources.work_units`), loads that plan into shard 0
(:mod:`ftrl_ps.ps.workqueue`; the first one loads it, the others are checked
against it), then asks for a unit, trains its rows, pushes everything and
ticks (:meth:`ftrl_ps.ps.worker.Worker.push` waits for both), and reports the
unit done with its next request. A faster worker simply asks more often.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from ftrl_ps.data.batch import Batch
from ftrl_ps.data.inputs import read_unit
from ftrl_ps.data.minibatch import slice_rows
from ftrl_ps.data.prefetch import prefetch
from ftrl_ps.data.sources import Unit, expand, work_units
from ftrl_ps.errors import ProtocolError
from ftrl_ps.ps.worker import Worker

__all__ = ["WorkClient", "default_unit_bytes", "plan", "skip_rows", "train_units"]

#: units per worker and pass the default unit size aims at
UNITS_PER_WORKER = 16
MIN_UNIT, MAX_UNIT = 64 << 10, 64 << 20


def default_unit_bytes(total_bytes: int, num_workers: int) -> int:
    """About :data:`UNITS_PER_WORKER` units per worker, within 64 KiB .. 64 MiB.

    >>> default_unit_bytes(100 << 20, 4)
    1638400
    """
    return min(MAX_UNIT, max(MIN_UNIT, total_bytes // max(1, num_workers * UNITS_PER_WORKER)))


def plan(spec: str, num_workers: int, epochs: int, unit_bytes: int | None = None
         ) -> tuple[list[Unit], str]:
    """The units of ``spec`` for ``epochs`` passes and the plan's id (a digest of them)."""
    parts = expand(spec)
    size = unit_bytes or default_unit_bytes(sum(p.size for p in parts), num_workers)
    units = work_units(parts, size, epochs)
    text = json.dumps([u.as_dict() for u in units], sort_keys=True).encode()
    return units, hashlib.sha256(text).hexdigest()[:16]


class WorkClient:
    """The ``/v1/work`` calls of shard 0 through a :class:`~ftrl_ps.ps.client.PSClient`."""

    def __init__(self, client: Any) -> None:
        self._net = client._net  # the client's connections (retries, error mapping)

    def load(self, units: list[Unit], plan_id: str) -> int:
        body = {"plan_id": plan_id, "units": [u.as_dict() for u in units]}
        answer = self._net.post_json(0, "/v1/work/plan", body, idempotent=True).json()
        return int(answer["units"])

    def next(self, worker_index: int, done: list[tuple[int, int]], holding: list[int]
             ) -> tuple[Unit, int] | None:
        """The next unit and the rows of it already applied, or None when none is left."""
        body = {"worker_index": worker_index, "done": done, "holding": holding}
        got = self._net.post_json(0, "/v1/work/next", body, idempotent=True).json()["unit"]
        if got is None:
            return None
        try:
            skip = int(got.pop("rows_done"))
            return Unit(**got), skip
        except (KeyError, TypeError) as exc:
            raise ProtocolError(f"shard 0 answered a malformed work unit: {got!r}") from exc


def skip_rows(batches: Iterator[Batch], rows: int) -> Iterator[Batch]:
    """``batches`` without their first ``rows`` rows (a resumed unit)."""
    for b in batches:
        if rows >= b.rows:
            rows -= b.rows
            continue
        yield slice_rows(b, rows, b.rows) if rows else b
        rows = 0


def train_units(worker: Worker, work: WorkClient, worker_index: int) -> int:
    """Ask for units until none is left, training each; returns the units trained."""
    cfg, count = worker.config, 0
    done: list[tuple[int, int]] = []
    while (got := work.next(worker_index, done, [])) is not None:
        unit, skip = got
        reader = read_unit(unit, worker.bits, chunk_bytes=cfg.chunk_bytes,
                           skip_bad_lines=cfg.skip_bad_lines)
        batches = prefetch(reader, depth=2)
        worker.train_batches(skip_rows(batches, skip) if skip else batches)
        worker.push()  # every row of the unit is applied on the shards
        worker.report.bad_lines += reader.stats.bad_lines
        worker.report.bad_examples.extend(reader.stats.bad_examples)
        done = [(unit.id, reader.stats.rows)]
        count += 1
    worker.report.epochs = cfg.epochs
    return count
