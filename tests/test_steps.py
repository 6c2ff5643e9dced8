"""Steps given as the parts they span (ps.steps, data.minibatch.steps): rounds,
step ends, and a worker that trains them as it trained joined mini-batches."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRLParams
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.minibatch import minibatches, steps
from ftrl_ps.ps.steps import StepTracker
from ftrl_ps.ps.worker import Worker, WorkerConfig
from tests.test_ftrl import random_rows
from tests.test_worker import MemoryServer, as_batches


def _rows(parts: list[Batch]) -> list[int]:
    return [p.rows for p in parts]


def test_steps_are_views_of_the_chunks_in_order() -> None:
    data = random_rows(np.random.default_rng(1), 50, 32)
    chunks = as_batches(*data, per=7)
    got = list(steps(iter(chunks), 10))
    assert [sum(_rows(s)) for s in got] == [10] * 5
    assert [_rows(s) for s in got[:2]] == [[7, 3], [4, 6]]
    parts = [p for s in got for p in s]
    for name in ("labels", "indices", "values"):
        joined = np.concatenate([getattr(p, name) for p in parts])
        np.testing.assert_array_equal(joined, np.concatenate([getattr(c, name) for c in chunks]))
    # nothing copied: every part's arrays share memory with its chunk
    assert all(any(np.shares_memory(p.indices, c.indices) for c in chunks)
               for p in parts if p.nnz)
    # minibatches joins the same steps
    for mb, s in zip(minibatches(iter(chunks), 10), got, strict=True):
        np.testing.assert_array_equal(mb.indices, np.concatenate([p.indices for p in s]))


def test_the_tracker_ends_steps_where_their_rows_end() -> None:
    data = random_rows(np.random.default_rng(2), 40, 16)
    chunks = as_batches(*data, per=6)
    tracker = StepTracker()
    rounds = list(tracker.rounds(steps(iter(chunks), 8), lambda: 2))
    assert [sum(_rows(r)) for r in rounds] == [16, 16, 8]
    ends = [tracker.trained(p.rows) for r in rounds for p in r]
    assert sum(ends) == 5  # 40 rows in steps of 8
    cut = np.cumsum([p.rows for r in rounds for p in r])
    assert [int(c) for c, e in zip(cut, ends, strict=True) if e] == [8, 16, 24, 32, 40]
    assert tracker.trained(3)  # nothing read: a part of its own is a step
    # a stream given up on (not trained to its end) does not shift the next one's steps
    unfinished = tracker.rounds(steps(iter(chunks), 5), lambda: 2)
    next(unfinished)  # two steps of 5 rows read, none trained
    again = [p for r in tracker.rounds(steps(iter(chunks), 8), lambda: 2) for p in r]
    ends = [tracker.trained(p.rows) for p in again]
    cut = np.cumsum([p.rows for p in again])
    assert [int(c) for c, e in zip(cut, ends, strict=True) if e] == [8, 16, 24, 32, 40]


@pytest.mark.parametrize("per", [3, 7, 20, 45])
def test_a_worker_trains_parts_as_it_trained_joined_minibatches(per: int) -> None:
    """Chunks that steps span (per < batch size, or not a multiple of it) give the
    model, pushes, clock ticks, steps and timeline of chunks that are exactly the
    steps; and the worker never joins (copies) them."""
    data = random_rows(np.random.default_rng(3), 400, 64)
    params = FTRLParams(l1=0.2)
    cfg = WorkerConfig(batch_size=20, fetch_step=2, push_step=3)

    def run(chunks: list[Batch]) -> tuple[MemoryServer, Worker]:
        server = MemoryServer((1 << 6) + 1)
        worker = Worker(server, 6, params, cfg)
        worker.train_batches(iter(chunks))
        worker.push()
        return server, worker

    ref_server, ref = run(as_batches(*data, per=20))
    joined = Batch.concat
    try:
        def refuse(batches: list[Batch]) -> Batch:
            raise AssertionError("a step was copied")
        Batch.concat = staticmethod(refuse)  # type: ignore[method-assign]
        server, worker = run(as_batches(*data, per=per))
    finally:
        Batch.concat = joined  # type: ignore[method-assign]
    np.testing.assert_array_equal(server.n, ref_server.n)
    np.testing.assert_array_equal(server.z, ref_server.z)
    assert server.clocks == ref_server.clocks
    for field in ("rows", "steps", "pushes", "pulls", "keys_pushed"):
        assert getattr(worker.report, field) == getattr(ref.report, field), field
    assert worker.report.loss_sum == pytest.approx(ref.report.loss_sum, rel=1e-12)
    assert ([p["rows"] for p in worker.timeline.points()]
            == [p["rows"] for p in ref.timeline.points()])
