"""Rounds split so that every push fits in the servers' request body limit (ps.pushsize)."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL, FTRLParams
from ftrl_ps.errors import DataError, FTRLPSError
from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.pushsize import BODY_SHARE, max_push_keys
from ftrl_ps.ps.stream import StreamLearner
from ftrl_ps.ps.worker import Worker, WorkerConfig
from tests._servers import real_server
from tests.test_ftrl import random_rows
from tests.test_worker import MemoryServer, as_batches


def _reference(seed: int, rows: int, slots: int, max_nnz: int, bits: int, l1: float):
    """Random rows, their FTRL parameters and the one-process float64 model of them."""
    data = random_rows(np.random.default_rng(seed), rows, slots, max_nnz=max_nnz)
    params = FTRLParams(l1=l1)
    ref = FTRL(bits, params, dtype="float64")
    loss = ref.fit_rows(*data)
    return data, params, ref, loss


class Limited(MemoryServer):
    """A :class:`MemoryServer` whose servers say they take bodies up to ``limit`` bytes."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(size)
        self.max_body_bytes = limit


def test_a_key_costs_its_index_and_deltas_plus_the_merge_sections() -> None:
    class Client:
        max_body_bytes = 1 << 20
        dtype = np.dtype(np.float32)
        wire_format = "binary"

    c = Client()
    usable = int((1 << 20) * BODY_SHARE)
    assert max_push_keys(c, "threshold") == usable // 12  # uint32 key + 2 float32
    assert max_push_keys(c, "compose") == usable // 24  # + versions, rows, rho
    c.dtype = np.dtype(np.float64)
    assert max_push_keys(c, "threshold") == usable // 20
    c.wire_format = "json"
    assert max_push_keys(c, "threshold") < usable // 20
    assert max_push_keys(object(), "threshold") is None  # servers that do not say: no cap


@pytest.mark.parametrize("fetch_step, push_step", [(1, 1), (4, 4), (2, 5), (5, 2)])
def test_oversized_rounds_are_split_and_the_model_is_the_one_process_model(
        fetch_step: int, push_step: int) -> None:
    data, params, ref, ref_loss = _reference(5, 800, 1000, 30, bits=10, l1=0.2)
    size = ref.state.shape[0]
    cfg = WorkerConfig(batch_size=40, fetch_step=fetch_step, push_step=push_step)
    # without a limit a round touches several hundred keys
    free = MemoryServer(size)
    free_worker = Worker(free, 10, params, cfg)
    free_worker.train_batches(iter(as_batches(*data, per=100)))
    free_worker.push()
    # servers that take ~2.4 KB bodies: at most 60 float64 keys per push (with the
    # versioned merge rule's sections)
    server = Limited(size, 2400)
    worker = Worker(server, 10, params, cfg)
    cap = worker.max_push_keys
    assert cap == max_push_keys(server, worker.config.merge_rule) == 60
    assert max(k.size for k in free.pushed_keys) > 2 * cap  # the limit does bind
    worker.train_batches(iter(as_batches(*data, per=100)))
    worker.push()
    assert max(k.size for k in server.pushed_keys) <= cap
    assert worker.report.pushes > free_worker.report.pushes
    assert worker.report.rows == 800
    # nothing lost, nothing doubled: one worker is still exactly one process
    assert worker.report.loss_sum == pytest.approx(ref_loss, rel=1e-9)
    np.testing.assert_allclose(server.n, ref.n, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(server.z, ref.z, rtol=1e-12, atol=1e-12)


def test_a_row_wider_than_a_push_is_a_clear_error() -> None:
    params = FTRLParams()
    server = Limited(FTRL(8, params).state.shape[0], 200)  # 5 float64 keys per push
    worker = Worker(server, 8, params, WorkerConfig(batch_size=4, fetch_step=1, push_step=1))
    wide = np.arange(0, 60, 3, dtype=np.int32)  # 20 features
    labels = np.array([1.0, 0.0], np.float32)
    indptr = np.array([0, 3, 3 + wide.size])
    indices = np.concatenate([wide[:3], wide]).astype(np.int32)
    values = np.ones(indices.size, np.float32)
    with pytest.raises(DataError, match="a row has 20 distinct features.*max-body-mb"):
        worker.train_batches(iter(as_batches(labels, indptr, indices, values, per=2)))
    worker.push()  # the row before it was trained and is pushed
    assert worker.report.rows == 1
    assert [k.size for k in server.pushed_keys] == [4]


def test_a_worker_trains_through_a_real_server_with_a_small_body_limit() -> None:
    data, params, ref, _ = _reference(8, 1500, 4000, 40, bits=12, l1=0.5)
    with real_server(["--bits", "12", "--dtype", "float64", "--max-body-mb", "0.02",
                      "--staleness", "0", "--num-workers", "1"]) as srv:
        client = PSClient(srv.url)
        try:
            assert client.max_body_bytes == int(0.02 * (1 << 20))
            # a push of every key at once is refused: the limit is real
            keys = np.arange(3000, dtype=np.uint32)
            with pytest.raises(FTRLPSError, match="exceed"):
                client.push(keys, np.zeros(keys.size), np.zeros(keys.size))
            client.register(0, 1)
            worker = Worker(client, 12, params,
                            WorkerConfig(batch_size=500, fetch_step=2, push_step=2))
            worker.train_batches(iter(as_batches(*data, per=500)))
            worker.push()
            client.finish()
            n, z = client.pull(np.arange(ref.state.shape[0], dtype=np.uint32))
        finally:
            client.close()
    assert worker.report.rows == 1500
    assert worker.report.keys_pushed <= worker.report.pushes * worker.max_push_keys
    np.testing.assert_allclose(n, ref.n, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(z, ref.z, rtol=1e-9, atol=1e-12)


def test_the_stream_learner_splits_a_large_backlog_too() -> None:
    data, params, ref, _ = _reference(9, 600, 1000, 30, bits=10, l1=0.2)
    server = Limited(ref.state.shape[0], 2400)
    learner = StreamLearner(server, 10, params, WorkerConfig(batch_size=50), push_interval=60)
    cap = learner.worker.max_push_keys
    # the in-process store names its rule (compose): the learner's pushes follow it
    assert learner.worker.config.merge_rule == "compose"
    assert cap == max_push_keys(server, "compose") == int(2400 * BODY_SHARE) // 36
    for batch in as_batches(*data, per=300):  # queued before the learner starts: one backlog
        learner.submit(batch)
    learner.start()
    learner.stop()
    status = learner.status()
    assert status["error"] is None and status["rows_trained"] == 600, status
    assert max(k.size for k in server.pushed_keys) <= cap
    np.testing.assert_allclose(server.n, ref.n, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(server.z, ref.z, rtol=1e-12, atol=1e-12)
