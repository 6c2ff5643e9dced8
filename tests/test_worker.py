"""The worker loop against an in-memory parameter server (no network)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from ftrl_ps.core.ftrl import FTRL, FTRLParams
from ftrl_ps.data.libsvm import Batch
from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.local_client import LocalClient
from ftrl_ps.ps.store import ParameterStore
from ftrl_ps.ps.straggle import StraggleConfig, Straggler
from ftrl_ps.ps.worker import Worker, WorkerConfig
from tests.test_ftrl import random_rows


class MemoryServer(LocalClient):
    """One float64 :class:`ParameterStore` of ``size`` keys (a power of two plus the
    bias), every push's keys kept, and the whole ``n``/``z`` at hand."""

    def __init__(self, size: int, merge_rule: str = "compose") -> None:
        bits = (size - 1).bit_length() - 1
        assert size == (1 << bits) + 1
        super().__init__(ParameterStore(Layout(bits, group_size=16), dtype="float64",
                                        merge_rule=merge_rule), keep_pushed=True)

    @property
    def n(self) -> np.ndarray:
        return self.store.pull(np.arange(self.store.size))[0]

    @property
    def z(self) -> np.ndarray:
        return self.store.pull(np.arange(self.store.size))[1]


def as_batches(labels, indptr, indices, values, per: int) -> list[Batch]:
    out = []
    for a in range(0, labels.size, per):
        b = min(a + per, labels.size)
        out.append(
            Batch(
                labels=labels[a:b],
                indptr=indptr[a : b + 1] - indptr[a],
                indices=indices[indptr[a] : indptr[b]],
                values=values[indptr[a] : indptr[b]],
            )
        )
    return out


@pytest.mark.parametrize("fetch_step, push_step", [(1, 1), (3, 3), (2, 5), (5, 2)])
def test_one_worker_equals_single_process(fetch_step: int, push_step: int) -> None:
    rng = np.random.default_rng(11)
    data = random_rows(rng, 600, 64)
    params = FTRLParams(l1=0.2)
    ref = FTRL(6, params, dtype="float64")
    ref_loss = ref.fit_rows(*data)
    server = MemoryServer(ref.state.shape[0])
    cfg = WorkerConfig(batch_size=7, fetch_step=fetch_step, push_step=push_step)
    worker = Worker(server, 6, params, cfg)
    worker.train_batches(iter(as_batches(*data, per=45)))
    worker.push()
    assert worker.report.rows == 600
    assert worker.report.loss_sum == pytest.approx(ref_loss, rel=1e-9)
    # the server holds everything the worker learned (float64 end to end)
    np.testing.assert_allclose(server.n, ref.n, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(server.z, ref.z, rtol=1e-12, atol=1e-12)
    assert server.clocks == worker.report.pushes


def test_the_final_push_does_not_tick() -> None:
    """A worker with nothing left to train pushes without a clock tick (its finish
    request says it is done); more work after it goes on at the same clock."""
    rng = np.random.default_rng(3)
    data = random_rows(rng, 300, 64)
    params = FTRLParams()
    ref = FTRL(6, params, dtype="float64")
    ref.fit_rows(*data)
    server = MemoryServer(ref.state.shape[0])
    # 15 steps per 150 rows, a push every 4: the last 3 steps are left for the final push
    worker = Worker(server, 6, params, WorkerConfig(batch_size=10, fetch_step=4, push_step=4))
    batches = as_batches(*data, per=50)
    worker.train_batches(iter(batches[:3]))
    worker.push(final=True)
    assert server.clocks == worker.report.pushes - 1
    worker.train_batches(iter(batches[3:]))  # handed more work afterwards
    worker.push(final=True)
    assert server.clocks == worker.report.pushes - 2
    assert worker.rows_applied == worker.report.rows == 300
    np.testing.assert_allclose(server.n, ref.n, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(server.z, ref.z, rtol=1e-12, atol=1e-12)


def test_the_timeline_counts_the_rows_trained_step_by_step() -> None:
    """A point at every round's start and every step's end: rows that only grow, one
    step's rows apart, up to everything trained (what ``timeline`` in the metrics
    JSON reports)."""
    rng = np.random.default_rng(5)
    data = random_rows(rng, 300, 64)
    server = MemoryServer((1 << 6) + 1)
    worker = Worker(server, 6, FTRLParams(), WorkerConfig(batch_size=20, fetch_step=3))
    worker.train_batches(iter(as_batches(*data, per=50)))
    worker.push()
    points = worker.timeline.points()
    rows = [p["rows"] for p in points]
    times = [p["t"] for p in points]
    assert rows[0] == 0 and rows[-1] == worker.report.rows == 300
    assert times == sorted(times) and rows == sorted(rows)
    steps = {b - a for a, b in zip(rows, rows[1:], strict=False)}
    assert steps <= {0, 20} and 20 in steps
    # 15 steps in 5 rounds: every step's end, and each round's start (a round
    # starting right after a step has the rows of that step's end)
    assert len(points) == 1 + 15 + 4


def test_the_first_pull_gate_is_passed_once_after_the_first_round_is_numbered() -> None:
    """The gate (worker_main: the servers' warm start) runs once, after the first
    round's keys are numbered and before its pull, and the model is as without it;
    a worker that trains nothing passes it when asked (before its finish)."""
    rng = np.random.default_rng(4)
    data = random_rows(rng, 200, 64)
    events: list[str] = []

    class Watched(MemoryServer):
        def pull(self, keys):  # type: ignore[no-untyped-def]
            events.append("pull")
            return super().pull(keys)

        def pull_versioned(self, keys):  # type: ignore[no-untyped-def]
            events.append("pull")
            return super().pull_versioned(keys)

    def trained(gate: bool) -> MemoryServer:
        server = Watched((1 << 6) + 1)
        worker = Worker(server, 6, FTRLParams(), WorkerConfig(batch_size=20, fetch_step=2))
        numbering = worker._numbering.number

        def number(parts):  # type: ignore[no-untyped-def]
            events.append("number")
            return numbering(parts)

        worker._numbering.number = number  # type: ignore[method-assign]
        if gate:
            worker.first_pull_gate = lambda: events.append("gate")
        worker.train_batches(iter(as_batches(*data, per=50)))
        worker.push()
        worker.pass_gate()  # already passed: nothing happens
        return server

    plain = trained(False)
    events.clear()
    gated = trained(True)
    assert events[:3] == ["number", "gate", "pull"] and events.count("gate") == 1
    np.testing.assert_array_equal(gated.n, plain.n)
    np.testing.assert_array_equal(gated.z, plain.z)
    idle = Worker(Watched((1 << 6) + 1), 6, FTRLParams(), WorkerConfig(batch_size=20))
    idle.first_pull_gate = lambda: events.append("idle gate")
    idle.push(final=True)  # nothing trained: no pull, no gate
    assert "idle gate" not in events
    idle.pass_gate()
    assert events[-1] == "idle gate"


class RecordingServer(MemoryServer):
    """A :class:`MemoryServer` that keeps every push's ``delta_n`` as sent."""

    def __init__(self, size: int, merge_rule: str) -> None:
        super().__init__(size, merge_rule)
        self.sent: list[np.ndarray] = []
        self.positions: list[int] = []  # the worker's rows trained at each push

    def push(self, keys, delta_n, delta_z, merge=None, **progress) -> None:  # type: ignore[no-untyped-def]
        self.sent.append(np.array(delta_n))
        self.positions.append(progress.get("position", -1))
        super().push(keys, delta_n, delta_z, merge, **progress)


@pytest.mark.parametrize("rule", ["contraction", "threshold"])
def test_the_warm_starts_lone_worker_pushes_as_one_worker(rule: str) -> None:
    """While it trains alone (the warm start) nobody else pushes: the lone worker's
    deltas reach the servers whole, as one process's, not shared out as one of
    ``num_workers`` concurrent pushes; from ``alone_until`` ticks on they are."""
    rng = np.random.default_rng(5)
    data = random_rows(rng, 600, 64)
    params = FTRLParams(l1=0.2)
    ref = FTRL(6, params, dtype="float64")
    ref.fit_rows(*data)

    def trained(alone_until: int) -> RecordingServer:
        server = RecordingServer(ref.state.shape[0], rule)
        cfg = WorkerConfig(batch_size=7, fetch_step=3, push_step=3, num_workers=4)
        worker = Worker(server, 6, params, cfg)
        worker.alone_until = alone_until
        worker.train_batches(iter(as_batches(*data, per=45)))
        worker.push()
        return server

    alone = trained(10**6)
    np.testing.assert_allclose(alone.n, ref.n, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(alone.z, ref.z, rtol=1e-12, atol=1e-12)
    shared = trained(0)  # one of 4 from the first push: the dense keys' deltas shrink
    assert not np.allclose(shared.n, ref.n)
    assert np.all(np.abs(shared.sent[0]) <= np.abs(alone.sent[0]))
    two = trained(2)  # alone for the pushes before its first two ticks, then one of 4
    for got, whole in zip(two.sent[:2], alone.sent[:2], strict=True):
        np.testing.assert_array_equal(got, whole)
    assert len(two.sent[2]) == len(alone.sent[2]) and not np.allclose(two.sent[2], alone.sent[2])
    # a tick with nothing to push (waiting for units) counts as one of those ticks
    idler = RecordingServer(ref.state.shape[0], rule)
    worker = Worker(idler, 6, params, WorkerConfig(batch_size=7, fetch_step=3, push_step=3,
                                                   num_workers=4))
    worker.alone_until = 1
    worker.idle()
    worker.train_batches(iter(as_batches(*data, per=45)[:1]))
    worker.push()
    np.testing.assert_array_equal(idler.sent[0], shared.sent[0])
    assert worker.report.pushes_alone == 0


def test_the_lone_worker_tells_the_servers_its_warm_start_is_in_before_its_tick() -> None:
    """The push that ends the warm start (the one before the tick that reaches
    ``alone_until``) is followed at once by ``warm_done``, before an injected
    straggle and the tick, so the held workers do not wait for those; no other
    push is, and no worker that does not train alone tells it."""
    rng = np.random.default_rng(7)
    data = random_rows(rng, 147, 64)  # 21 steps of 7 rows: 5 pushes and ticks, a last push

    class Logged(MemoryServer):
        def __init__(self) -> None:
            super().__init__((1 << 6) + 1, "contraction")
            self.events: list[str] = []

        def push(self, keys, delta_n, delta_z, merge=None, **progress) -> None:  # type: ignore[no-untyped-def]
            self.events.append("push")
            super().push(keys, delta_n, delta_z, merge, **progress)

        def warm_done(self) -> None:
            self.events.append("warm done")

        def clock(self, stats: dict[str, Any] | None = None) -> None:
            self.events.append("tick")

    class Sleeper(Straggler):
        def before_tick(self) -> float:
            server.events.append("straggle")
            return 0.0

    def events(alone_until: int) -> list[str]:
        cfg = WorkerConfig(batch_size=7, fetch_step=4, push_step=4, num_workers=2)
        worker = Worker(server, 6, FTRLParams(), cfg,
                        Sleeper(StraggleConfig(prob=1.0, delay=0.0), 0))
        worker.alone_until = alone_until
        worker.train_batches(iter(as_batches(*data, per=35)))
        worker.push(final=True)
        return server.events

    server = Logged()
    one_round = ["push", "straggle", "tick"]
    warm_round = ["push", "warm done", "straggle", "tick"]
    assert events(2) == one_round + warm_round + one_round * 3 + ["push"]
    server = Logged()
    assert events(1) == warm_round + one_round * 4 + ["push"]
    server = Logged()
    assert events(0) == one_round * 5 + ["push"]
    server = Logged()  # alone to the end: the finish, not this, ends the warm start
    assert events(10) == one_round * 5 + ["push"]


def test_the_lone_worker_pushes_every_warm_push_step_steps_while_alone() -> None:
    """``warm_push_step`` (a warm start shorter than one push): the lone worker
    pushes and ticks after that many steps until its ``alone_until`` ticks, then
    every ``push_step``; the model is still one process's."""
    rng = np.random.default_rng(9)
    data = random_rows(rng, 420, 64)  # 60 steps of 7 rows
    params = FTRLParams(l1=0.2)
    ref = FTRL(6, params, dtype="float64")
    ref.fit_rows(*data)
    server = RecordingServer(ref.state.shape[0], "contraction")
    cfg = WorkerConfig(batch_size=7, fetch_step=8, push_step=8, num_workers=2,
                       warm_push_step=2)
    worker = Worker(server, 6, params, cfg)
    worker.alone_until = 3
    worker.train_batches(iter(as_batches(*data, per=35)))
    worker.push()
    rows_at_push = server.positions
    # pushes every 2 steps until 3 ticks, then every 8 steps, as without them: the
    # rounds (8 steps) still end with a push, and the round's deltas are not taken
    # out at its end again; then the final push
    assert rows_at_push[:5] == [14, 28, 42, 56, 112]
    assert worker.report.pushes_alone == 3
    assert rows_at_push[-1] == 420
    # alone all along, with those extra pushes: one process's model
    lone = Worker(RecordingServer(ref.state.shape[0], "contraction"), 6, params, cfg)
    lone.alone_until = 10**6
    lone.train_batches(iter(as_batches(*data, per=35)))
    lone.push()
    assert lone.report.pushes == lone.report.pushes_alone == 420 // 14  # every 2 steps
    np.testing.assert_allclose(lone.client.n, ref.n, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lone.client.z, ref.z, rtol=1e-12, atol=1e-12)
    # without the warm start nothing changes: every push_step steps
    plain = Worker(MemoryServer(ref.state.shape[0], "contraction"), 6, params, cfg)
    plain.train_batches(iter(as_batches(*data, per=35)))
    plain.push()
    assert plain.report.pushes == 420 // 56 + 1 and plain.report.pushes_alone == 0
    with pytest.raises(ConfigError, match="warm_push_step"):
        WorkerConfig(warm_push_step=0)


def test_a_longer_warm_push_step_makes_the_warm_start_one_push_and_one_tick() -> None:
    """``warm_push_step`` above ``push_step`` (the launcher's warm start of several
    pushes' rows): the lone worker pushes and ticks once after that many steps,
    then every ``push_step`` steps; the model is still one process's."""
    rng = np.random.default_rng(10)
    data = random_rows(rng, 420, 64)  # 60 steps of 7 rows
    params = FTRLParams(l1=0.2)
    ref = FTRL(6, params, dtype="float64")
    ref.fit_rows(*data)
    cfg = WorkerConfig(batch_size=7, fetch_step=2, push_step=4, num_workers=2,
                       warm_push_step=12)
    server = RecordingServer(ref.state.shape[0], "contraction")
    worker = Worker(server, 6, params, cfg)
    worker.alone_until = 1
    worker.train_batches(iter(as_batches(*data, per=35)))
    worker.push()
    # one push of 12 steps (6 rounds of 2 steps: pending deltas carried between
    # them), then every 4 steps, as without the warm start, then the final push
    assert server.positions[:4] == [84, 112, 140, 168]
    assert worker.report.pushes_alone == 1 and server.positions[-1] == 420
    lone = Worker(RecordingServer(ref.state.shape[0], "contraction"), 6, params, cfg)
    lone.alone_until = 10**6
    lone.train_batches(iter(as_batches(*data, per=35)))
    lone.push()
    assert lone.report.pushes == lone.report.pushes_alone == 60 // 12
    np.testing.assert_allclose(lone.client.n, ref.n, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lone.client.z, ref.z, rtol=1e-12, atol=1e-12)


def test_pull_keeps_unpushed_local_updates() -> None:
    """Goline's bug: a pull must not overwrite the worker's own unpushed updates."""
    params = FTRLParams()
    server = MemoryServer(FTRL(4, params).state.shape[0])
    worker = Worker(server, 4, params, WorkerConfig(batch_size=1, fetch_step=1, push_step=100))
    rows = (
        np.array([1.0, 1.0], np.float32),
        np.array([0, 1, 2]),
        np.array([3, 3], np.int32),
        np.ones(2, np.float32),
    )
    ref = FTRL(4, params, dtype="float64")
    ref.fit_rows(*rows)
    worker.train_batches(iter(as_batches(*rows, per=2)))
    assert not server.pushed_keys  # nothing pushed yet: the updates are pending
    # another worker pushes to key 3 meanwhile; this worker pulls key 3 again
    server.push(np.array([3], np.uint32), np.array([0.5]), np.array([-0.25]))  # a plain push
    one = as_batches(np.array([0.0], np.float32), np.array([0, 1]), np.array([3], np.int32),
                     np.ones(1, np.float32), per=1)
    rnd = worker._open(one)
    slot = int(np.searchsorted(rnd.keys, 3))
    assert rnd.state[slot, 0] == pytest.approx(ref.n[3] + 0.5)
    assert rnd.state[slot, 1] == pytest.approx(ref.z[3] - 0.25)
    worker.push()
    # the server now has the other worker's delta plus all of ours, exactly once
    assert server.n[3] == pytest.approx(ref.n[3] + 0.5)
    assert server.z[3] == pytest.approx(ref.z[3] - 0.25)
    assert server.n[ref.bias_key] == pytest.approx(ref.n[ref.bias_key])  # pending until now
    worker.push()
    assert len(server.pushed_keys) == 2  # the other worker's push and ours: nothing left


def _bsp_rounds(data: Batch, workers: int, cfg: WorkerConfig, params: FTRLParams) -> MemoryServer:
    """``workers`` Workers in lockstep on contiguous shares: all pull, all train, all push."""
    from ftrl_ps.data.minibatch import minibatches, slice_rows

    bits = 18
    server = MemoryServer(FTRL(bits, params).state.shape[0], str(cfg.merge_rule))
    cuts = [data.rows * i // workers for i in range(workers + 1)]
    shares = [
        list(minibatches(iter([slice_rows(data, cuts[i], cuts[i + 1])]), cfg.batch_size))
        for i in range(workers)
    ]
    ws = [Worker(server, bits, params, cfg) for _ in range(workers)]
    step = cfg.fetch_step
    r = 0
    while any(r * step < len(s) for s in shares):
        active = [(w, s[r * step : (r + 1) * step]) for w, s in zip(ws, shares, strict=True)]
        active = [(w, rnd) for w, rnd in active if rnd]
        rounds = [w._open(rnd) for w, rnd in active]
        for (w, parts), rnd in zip(active, rounds, strict=True):
            for _ in parts:
                w._step(rnd)
        for w, _ in active:
            w.push()
            w._close()
        r += 1
    return server


def test_concurrent_pushes_are_composed_so_many_workers_do_not_diverge(synth_small) -> None:
    """Summed deltas of keys every row has overshoot N-fold; the compose rule (and the
    old threshold rule) do not."""
    from ftrl_ps.core.metrics import logloss
    from ftrl_ps.data.libsvm import read_all

    data = read_all(synth_small / "train.svm", 18)
    test = read_all(synth_small / "test.svm", 18)
    params = FTRLParams()
    single = FTRL(18, params)
    single.fit_rows(data.labels, data.indptr, data.indices, data.values)

    def test_loss(server: MemoryServer) -> float:
        model = FTRL(18, params)
        model.state[:, 0] = server.n
        model.state[:, 1] = server.z
        return logloss(test.labels, model.predict_rows(test.indptr, test.indices, test.values))

    base = logloss(test.labels, single.predict_rows(test.indptr, test.indices, test.values))
    def config(rule: str) -> WorkerConfig:
        return WorkerConfig(batch_size=250, fetch_step=4, push_step=4, num_workers=4,
                            merge_rule=rule)

    assert test_loss(_bsp_rounds(data, 4, config("compose"), params)) <= base + 0.002
    assert test_loss(_bsp_rounds(data, 4, config("threshold"), params)) <= base + 0.01
    assert test_loss(_bsp_rounds(data, 4, config("contraction"), params)) <= base + 0.01
    assert test_loss(_bsp_rounds(data, 4, config("sum"), params)) > base + 0.05  # the failure


def test_a_worker_follows_the_servers_merge_rule_and_refuses_another() -> None:
    """``WorkerConfig.merge_rule`` unset: the rule the servers announce (an
    in-process store's, a real shard's; ``sum`` for a client that announces
    none). Another rule than the servers' is a clear error before anything is
    pushed: one key must not be merged two ways in a round."""
    from ftrl_ps.errors import ConfigError
    from ftrl_ps.ps.client import PSClient
    from ftrl_ps.ps.merge import DEFAULT_RULE
    from tests._servers import real_server

    params = FTRLParams()
    server = MemoryServer(17, merge_rule="contraction")  # 2**4 keys and the bias
    assert Worker(server, 4, params, WorkerConfig()).config.merge_rule == "contraction"
    assert Worker(server, 4, params,
                  WorkerConfig(merge_rule="contraction")).config.merge_rule == "contraction"
    with pytest.raises(ConfigError, match="servers merge pushes by 'contraction', this "
                                          "worker by 'compose'"):
        Worker(server, 4, params, WorkerConfig(merge_rule="compose"))

    class Bare:  # announces nothing
        def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return np.zeros(keys.size), np.zeros(keys.size)

    assert Worker(Bare(), 4, params, WorkerConfig()).config.merge_rule == "sum"  # type: ignore[arg-type]

    with real_server(["--bits", "8"]) as srv:
        client = PSClient(srv.url)
        try:
            assert client.server_settings["merge_rule"] == DEFAULT_RULE
            worker = Worker(client, 8, params, WorkerConfig())
            assert worker.config.merge_rule == DEFAULT_RULE
            other = "compose" if DEFAULT_RULE != "compose" else "sum"
            with pytest.raises(ConfigError, match=f"by {DEFAULT_RULE!r}, this worker by"):
                Worker(client, 8, params, WorkerConfig(merge_rule=other))
        finally:
            client.close()


def test_read_share_parses_ahead_before_the_first_batch_is_taken(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A worker waiting for its servers finds its share parsed (up to its part of
    START_AHEAD_BYTES, and at least two chunks when that part is smaller)."""
    from ftrl_ps.ps.shares import START_AHEAD_BYTES, read_share
    from tests.conftest import wait_until

    path = tmp_path / "share.svm"
    lines = [f"{i % 2} {i % 97}:1 {100 + i % 13}:0.5\n" for i in range(2000)]
    path.write_text("".join(lines))
    config = WorkerConfig(chunk_bytes=256)  # ~120 chunks, all within START_AHEAD_BYTES
    assert path.stat().st_size < START_AHEAD_BYTES
    share = read_share(path, (0, path.stat().st_size), 10, config)
    wait_until(lambda: share.reader.stats.rows == 2000, 10, "the whole share parsed ahead")
    batches = list(share.batches)
    labels = np.concatenate([b.labels for b in batches])
    assert labels.size == 2000 and np.array_equal(labels, np.arange(2000) % 2)
    # the budget is shared by the run's workers: one of 2**20 parses 2 chunks ahead
    crowd = WorkerConfig(chunk_bytes=256, num_workers=START_AHEAD_BYTES // 256)
    share = read_share(path, (0, path.stat().st_size), 10, crowd)
    wait_until(lambda: share.reader.stats.rows > 0, 10, "the first chunks parsed")
    time.sleep(0.2)
    assert share.reader.stats.rows < 200  # 2 queued + 1 being handed over: ~18 rows each
    assert sum(b.rows for b in share.batches) == 2000


def test_read_share_keeps_its_budget_ahead_while_the_worker_trains(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """After the first batch is taken the parser stays this worker's share of
    START_AHEAD_BYTES ahead (a whole round parsed during the one before), not
    two chunks, and never more."""
    from ftrl_ps.ps.shares import START_AHEAD_BYTES, read_share
    from tests.conftest import wait_until

    path = tmp_path / "share.svm"
    path.write_text("".join(f"{i % 2} {i % 97}:1 {100 + i % 13}:0.5\n" for i in range(4000)))
    chunk, ahead = 256, 10
    config = WorkerConfig(chunk_bytes=chunk, num_workers=START_AHEAD_BYTES // (chunk * ahead))
    share = read_share(path, (0, path.stat().st_size), 10, config)
    first = next(share.batches)
    wait_until(lambda: share.reader.stats.rows >= first.rows * (ahead - 1), 10,
               f"{ahead} chunks parsed ahead after the first was taken")
    time.sleep(0.2)
    # queued + the one being handed over, ~18 rows a chunk; far below the 4,000 rows
    assert share.reader.stats.rows <= first.rows * (ahead + 3)
    assert first.rows + sum(b.rows for b in share.batches) == 4000
