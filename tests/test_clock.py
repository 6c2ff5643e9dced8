"""SSP clock: the staleness invariant, lockstep, dead/finished workers, no deadlock."""

from __future__ import annotations

import json
import math
import random
import threading
import time

import pytest

from ftrl_ps.errors import (
    ConfigError,
    LayoutMismatchError,
    UnknownWorkerError,
    WorkerStateError,
)
from ftrl_ps.ps.clock import SSPClock


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_workers(clock: SSPClock, num_workers: int, ticks: int, slow: dict[int, float]):
    """Worker threads that tick ``ticks`` times; returns the violations of the
    SSP invariant seen from outside the clock (see the comment below)."""
    started = [0] * num_workers  # ticks each worker has started (before the server sees them)
    lock = threading.Lock()
    violations: list[tuple[int, int, int]] = []
    ids = [clock.register(i, num_workers) for i in range(num_workers)]

    def work(i: int) -> None:
        for _ in range(ticks):
            time.sleep(slow.get(i, 0.0))
            with lock:
                started[i] += 1
            c = clock.tick(ids[i])
            assert clock.wait(ids[i], timeout=20)
            # a wait at clock c is granted only when every worker has ticked to
            # c - s, i.e. started that many ticks: check it independently
            with lock:
                if clock.staleness is not None and c - min(started) > clock.staleness:
                    violations.append((i, c, min(started)))
        clock.finish(ids[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(num_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "deadlock: a worker did not finish"
    return violations


def test_doc_example_semantics():
    clock = SSPClock(staleness=1, num_workers=2)
    a, b = clock.register(0, 2), clock.register(1, 2)
    assert (clock.tick(a), clock.wait(a, 0)) == (1, True)
    assert (clock.tick(a), clock.wait(a, 0)) == (2, False)
    assert clock.tick(b) == 1 and clock.wait(a, 0)
    assert clock.min_clock() == 1


@pytest.mark.parametrize("staleness", [None, math.inf])
def test_async_never_waits(staleness):
    clock = SSPClock(staleness, num_workers=2)
    a = clock.register(0, 2)
    clock.register(1, 2)
    for _ in range(50):
        clock.tick(a)
    assert clock.wait(a, timeout=0)
    assert clock.staleness is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("staleness", [1, 3])
def test_invariant_with_a_slow_worker(staleness):
    clock = SSPClock(staleness, num_workers=4)
    violations = run_workers(clock, 4, ticks=15, slow={3: 0.01})
    assert violations == []
    # the fast workers had to wait for the slow one: the bound was reached, never passed
    assert clock.max_gap_allowed == staleness


@pytest.mark.timeout(60)
def test_bsp_moves_in_lockstep():
    clock = SSPClock(0, num_workers=3)
    violations = run_workers(clock, 3, ticks=12, slow={0: 0.005, 2: 0.002})
    assert violations == [] and clock.max_gap_allowed == 0


def test_finished_worker_does_not_block():
    clock = SSPClock(1, num_workers=2)
    a, b = clock.register(0, 2), clock.register(1, 2)
    clock.tick(b)
    clock.finish(b)
    clock.finish(b)  # idempotent
    for _ in range(10):
        clock.tick(a)
        assert clock.wait(a, timeout=1)
    with pytest.raises(WorkerStateError, match="finished"):
        clock.tick(b)
    with pytest.raises(WorkerStateError, match="already finished"):
        clock.register(1, 2)


def test_dead_worker_leaves_the_minimum_and_gets_a_clear_error():
    fake = FakeTime()
    clock = SSPClock(1, num_workers=2, worker_timeout=10, time_source=fake)
    a, b = clock.register(0, 2), clock.register(1, 2)
    clock.tick(a)
    clock.tick(a)
    assert not clock.wait(a, timeout=0)  # b holds a back
    fake.now += 6
    clock.heartbeat(a)
    fake.now += 5  # b silent for 11 s > 10, a for 5 s
    assert clock.wait(a, timeout=0)
    assert clock.worker(b).state == "dead"
    with pytest.raises(WorkerStateError, match="declared dead"):
        clock.tick(b)
    with pytest.raises(WorkerStateError):
        clock.heartbeat(b)
    # b registers again: new id, starting at the live minimum (not 0)
    b2 = clock.register(1, 2)
    assert b2 != b and clock.worker(b2).clock == 2
    assert clock.snapshot()["workers"][1]["state"] == "dead"


def test_sweep_wakes_a_blocked_waiter():
    fake = FakeTime()
    clock = SSPClock(0, num_workers=2, worker_timeout=5, time_source=fake)
    a, _ = clock.register(0, 2), clock.register(1, 2)
    clock.tick(a)
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(clock.wait(a, timeout=10)))
    t0 = time.monotonic()
    waiter.start()
    time.sleep(0.1)
    assert not result
    fake.now += 6
    assert len(clock.sweep()) == 1  # only the silent one: the waiter is alive
    waiter.join(5)
    assert result == [True] and time.monotonic() - t0 < 3


def test_a_waiting_worker_is_not_declared_dead():
    fake = FakeTime()
    clock = SSPClock(0, num_workers=2, worker_timeout=5, time_source=fake)
    a, b = clock.register(0, 2), clock.register(1, 2)
    clock.tick(a)
    done = threading.Event()
    threading.Thread(target=lambda: (clock.wait(a, timeout=10), done.set())).start()
    time.sleep(0.05)
    fake.now += 4
    clock.heartbeat(b)
    fake.now += 4  # a has been waiting for 8 fake seconds, b seen 4 s ago
    assert clock.sweep() == []
    clock.tick(b)
    assert done.wait(5)
    assert clock.worker(a).state == "live"


def test_background_sweeper_with_real_time():
    clock = SSPClock(1, num_workers=2, worker_timeout=0.3)
    a, b = clock.register(0, 2), clock.register(1, 2)
    clock.start_sweeper(0.05)
    try:
        for _ in range(3):
            clock.tick(a)
            assert clock.wait(a, timeout=5)  # b dies after 0.3 s and stops blocking
        assert clock.worker(b).state == "dead"
    finally:
        clock.stop_sweeper()


def test_missing_workers_count_at_zero_until_registration_timeout():
    fake = FakeTime()
    clock = SSPClock(1, num_workers=3, registration_timeout=30, worker_timeout=100,
                     time_source=fake)
    a = clock.register(0, 3)
    fake.now += 1
    b = clock.register(1, 3)
    assert clock.worker(b).clock == 0
    for _ in range(2):
        clock.tick(a)
        clock.tick(b)
    assert not clock.wait(a, timeout=0)  # index 2 never registered: counts at 0
    assert clock.snapshot()["missing_indices"] == [2]
    fake.now += 30
    clock.sweep()
    assert clock.wait(a, timeout=0) and clock.snapshot()["missing_indices"] == []
    late = clock.register(2, 3)  # after the deadline: joins at the live minimum
    assert clock.worker(late).clock == 2


def test_late_registration_before_deadline_starts_at_zero():
    clock = SSPClock(2, num_workers=2)
    a = clock.register(0, 2)
    clock.tick(a)
    clock.tick(a)
    assert clock.wait(a, timeout=0)
    clock.tick(a)
    assert not clock.wait(a, timeout=0)
    b = clock.register(1, 2)
    assert clock.worker(b).clock == 0 and not clock.wait(a, timeout=0)
    clock.tick(b)
    assert clock.wait(a, timeout=0)


def test_registration_rules():
    clock = SSPClock(0)
    a = clock.register(0, 2, instance="x")
    assert clock.num_workers == 2
    assert clock.register(0, 2, instance="x") == a  # retried registration
    with pytest.raises(WorkerStateError, match="already registered"):
        clock.register(0, 2, instance="y")
    with pytest.raises(LayoutMismatchError, match="expects 2 workers"):
        clock.register(1, 3)
    with pytest.raises(ConfigError):
        clock.register(2, 2)
    with pytest.raises(ConfigError):
        clock.register(0, 0)
    with pytest.raises(UnknownWorkerError):
        clock.tick(99)
    with pytest.raises(UnknownWorkerError):
        clock.wait(99, 0)


def test_tick_with_expected_clock_is_idempotent():
    clock = SSPClock(None)
    a = clock.register(0, 1)
    assert clock.tick(a, expected=1) == 1
    assert clock.tick(a, expected=1) == 1  # the retry does not count twice
    assert clock.tick(a, {"rows": 5.0}, expected=2) == 2
    with pytest.raises(WorkerStateError, match="cannot tick to 5"):
        clock.tick(a, expected=5)
    assert clock.snapshot()["workers"][0]["stats"] == {"rows": 5.0}


def test_finish_keeps_the_last_stats_it_is_given():
    clock = SSPClock(0)
    a, b = clock.register(0, 2), clock.register(1, 2)
    clock.tick(a, {"rows": 5.0})
    clock.finish(a, {"rows": 9.0})
    clock.finish(a, {"rows": 1.0})  # a retried finish changes nothing
    clock.finish(b)
    workers = clock.snapshot()["workers"]
    assert [w["stats"] for w in workers] == [{"rows": 9.0}, {}]
    assert [w["state"] for w in workers] == ["finished", "finished"]


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_bad_staleness(bad):
    with pytest.raises(ConfigError):
        SSPClock(bad)


def test_close_releases_waiters():
    clock = SSPClock(0, num_workers=2)
    a = clock.register(0, 2)
    clock.register(1, 2)
    clock.tick(a)
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(clock.wait(a, timeout=30)))
    t.start()
    time.sleep(0.05)
    clock.close()
    t.join(5)
    assert result == [False]


@pytest.mark.timeout(60)
def test_no_deadlock_in_a_random_mix_of_calls():
    """Threads tick, wait, heartbeat, finish and die at random; all must end."""
    fake = FakeTime()
    clock = SSPClock(1, num_workers=6, worker_timeout=0.5, time_source=fake)
    ids = [clock.register(i, 6) for i in range(6)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        rng = random.Random(i)
        try:
            for _ in range(200):
                op = rng.random()
                try:
                    if op < 0.5:
                        clock.tick(ids[i])
                        clock.wait(ids[i], timeout=0.02)
                    elif op < 0.8:
                        clock.heartbeat(ids[i])
                    elif op < 0.805:
                        clock.finish(ids[i])
                    elif op < 0.81:
                        return  # this worker "dies" silently
                    else:
                        clock.snapshot()
                except WorkerStateError:
                    return  # finished or declared dead
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def advance() -> None:
        while not stop.is_set():
            fake.now += 0.1
            clock.sweep()
            time.sleep(0.005)

    ticker = threading.Thread(target=advance, daemon=True)
    ticker.start()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    stop.set()
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert errors == []
    assert clock.max_gap_allowed <= 1


def test_auto_index_takes_lowest_free_then_dead_ones() -> None:
    now = [0.0]
    clock = SSPClock(1, num_workers=3, worker_timeout=5.0, time_source=lambda: now[0])
    a = clock.register(None, 3, instance="a")
    b = clock.register(1, 3, instance="b")
    c = clock.register(None, 3, instance="c")
    assert [clock.worker(w).index for w in (a, b, c)] == [0, 1, 2]
    assert clock.register(None, 3, instance="c") == c  # a retried registration
    with pytest.raises(WorkerStateError, match="no free worker index"):
        clock.register(None, 3, instance="d")
    now[0] = 3.0
    clock.heartbeat(a)
    clock.heartbeat(c)
    now[0] = 6.0  # b missed its heartbeats: dead, its index is free again
    d = clock.register(None, 3, instance="d")
    assert clock.worker(d).index == 1


def test_auto_index_with_an_identity_takes_back_its_index_at_once() -> None:
    """A restarted container (same identity, new process) gets its index back without
    waiting for the old incarnation to be declared dead; the old epoch is superseded."""
    now = [0.0]
    clock = SSPClock(1, num_workers=2, worker_timeout=30.0, time_source=lambda: now[0])
    a = clock.register(None, 2, instance="a1", identity="host-a")
    b = clock.register(None, 2, instance="b1", identity="host-b")
    assert [clock.worker(w).index for w in (a, b)] == [0, 1]
    with pytest.raises(WorkerStateError, match="no free worker index"):
        clock.register(None, 2, instance="x")  # a stranger still waits for a free index
    a2 = clock.register(None, 2, instance="a2", identity="host-a")  # host-a restarted
    assert clock.worker(a2).index == 0 and a2 > a
    assert clock.worker(a).state == "dead"
    with pytest.raises(WorkerStateError, match="superseded"):
        clock.tick(a)  # the old process, were it alive, is fenced off
    assert clock.register(None, 2, instance="a2", identity="host-a") == a2  # a retry
    clock.finish(b)
    with pytest.raises(WorkerStateError, match="no free worker index"):
        clock.register(None, 2, instance="b2", identity="host-b")  # finished: not again
    restored = SSPClock(1, num_workers=2, time_source=lambda: now[0])
    restored.restore(clock.state())  # the identity is in the checkpoint
    a3 = restored.register(None, 2, instance="a3", identity="host-a")
    assert restored.worker(a3).index == 0 and restored.worker(a2).state == "dead"


# --- warm start ------------------------------------------------------------------------
@pytest.mark.parametrize("staleness", [0, 3])
def test_warm_start_lets_one_worker_train_alone_then_ssp_as_usual(staleness: int) -> None:
    clock = SSPClock(staleness, num_workers=3, warm_rounds=2)
    a, b, c = (clock.register(i, 3) for i in range(3))
    assert not clock.alone(b)  # nobody has asked yet
    assert clock.wait(b, timeout=0)  # the first to ask trains alone
    assert not clock.wait(a, timeout=0) and not clock.wait(c, timeout=0)
    assert clock.warming and clock.alone(b) and not clock.alone(a)
    clock.tick(b)  # alone, it is not held back by the others' clock 0 (also in BSP)
    assert clock.wait(b, timeout=0) and clock.warming and clock.alone(b)
    clock.tick(b)
    assert not clock.warming and not clock.alone(b)
    assert clock.wait(a, timeout=0) and clock.wait(c, timeout=0)
    # from here the plain SSP bound: b (clock 2) goes on only within the staleness
    assert clock.wait(b, timeout=0) is (2 <= staleness)


def test_warm_start_releases_a_waiter_blocked_on_the_server() -> None:
    clock = SSPClock(1, num_workers=2, warm_rounds=1)
    a, b = clock.register(0, 2), clock.register(1, 2)
    assert clock.wait(a, timeout=0)
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(clock.wait(b, timeout=5)))
    t.start()
    time.sleep(0.05)
    assert not got  # still held
    clock.tick(a)
    t.join(timeout=5)
    assert got == [True]


def test_the_lone_worker_ends_the_warm_start_before_its_tick() -> None:
    """``warm_done``: the lone worker's warm pushes are all applied, so the held
    workers go on at once, not after its tick (which an injected straggle, or a
    slow network, may delay). Only the lone worker can end it, once."""
    clock = SSPClock(0, num_workers=3, warm_rounds=2)
    a, b, c = (clock.register(i, 3) for i in range(3))
    assert clock.wait(a, timeout=0) and not clock.wait(b, timeout=0)
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(clock.wait(b, timeout=5)))
    t.start()
    assert not clock.warm_done(c) and not clock.warm_done(b)  # not the lone worker
    time.sleep(0.05)
    assert not got and clock.warming and clock.alone(a)
    clock.tick(a)  # one of its two rounds: still warming
    assert clock.warming and clock.warm_done(a) and not clock.warming
    t.join(timeout=5)
    assert got == [True] and clock.wait(c, timeout=0) and not clock.alone(a)
    assert not clock.warm_done(a)  # over already: nothing changes
    assert clock.worker(a).clock == 1  # no tick implied: in BSP a now waits for b and c
    assert not clock.wait(a, timeout=0)
    with pytest.raises(UnknownWorkerError):
        clock.warm_done(999)
    clock.finish(c)
    with pytest.raises(WorkerStateError, match="finished"):
        clock.warm_done(c)


def test_warm_start_passes_to_the_next_worker_when_the_first_dies() -> None:
    fake = FakeTime()
    clock = SSPClock(0, num_workers=2, worker_timeout=10, warm_rounds=3, time_source=fake)
    a, b = clock.register(0, 2), clock.register(1, 2)
    assert clock.wait(a, timeout=0)
    clock.tick(a)
    assert not clock.wait(b, timeout=0)
    fake.now += 6
    clock.heartbeat(b)
    fake.now += 5  # a silent for 11 s: dead; b takes over the warm start
    assert clock.wait(b, timeout=0) and clock.alone(b)
    assert clock.worker(a).state == "dead" and clock.warming


def test_warm_start_ends_when_the_lone_worker_finishes() -> None:
    clock = SSPClock(3, num_workers=2, warm_rounds=5)
    a, b = clock.register(0, 2), clock.register(1, 2)
    assert clock.wait(a, timeout=0) and not clock.wait(b, timeout=0)
    clock.tick(a)
    clock.finish(a)  # a short share: fewer rounds than the warm start
    assert clock.wait(b, timeout=0) and not clock.warming


def test_a_restored_clock_keeps_the_warm_starts_lone_worker() -> None:
    """Shard 0 restarted from a checkpoint mid-warm-start: the worker that trained
    alone goes on alone, not whichever asks first now (two would push whole)."""
    clock = SSPClock(3, num_workers=2, warm_rounds=4)
    a, b = clock.register(0, 2), clock.register(1, 2)
    assert clock.wait(a, timeout=0) and not clock.wait(b, timeout=0)
    clock.tick(a)
    saved = json.loads(json.dumps(clock.state()))  # as a checkpoint keeps it
    restarted = SSPClock(3, num_workers=2, warm_rounds=4)
    restarted.restore(saved)
    assert not restarted.wait(b, timeout=0) and not restarted.alone(b)  # b asks first
    assert restarted.wait(a, timeout=0) and restarted.alone(a) and restarted.warming
    # a checkpoint from before the warm start was kept: as a new warm start
    older = SSPClock(3, num_workers=2, warm_rounds=4)
    older.restore({k: v for k, v in saved.items() if k != "warm_start"})
    assert older.wait(b, timeout=0) and older.alone(b)
    # once over, it stays over after a restore
    for _ in range(3):
        clock.tick(a)
    over = SSPClock(3, num_workers=2, warm_rounds=4)
    over.restore(json.loads(json.dumps(clock.state())))
    assert not over.warming and not over.alone(a)


def test_no_warm_start_with_zero_rounds() -> None:
    clock = SSPClock(0, num_workers=2)
    a, b = clock.register(0, 2), clock.register(1, 2)
    assert clock.wait(a, timeout=0) and clock.wait(b, timeout=0) and not clock.warming
    assert not clock.alone(a) and not clock.alone(b)


def test_asynchronous_workers_have_a_warm_start_too() -> None:
    """They tick after every push (the tick never waits), which counts the rounds."""
    clock = SSPClock(None, num_workers=2, warm_rounds=2)
    a, b = clock.register(0, 2), clock.register(1, 2)
    assert clock.wait(a, timeout=0) and clock.alone(a)
    assert not clock.wait(b, timeout=0)
    clock.tick(a)
    assert clock.wait(a, timeout=0) and not clock.wait(b, timeout=0)
    clock.tick(a)
    assert clock.wait(b, timeout=0) and not clock.alone(a) and not clock.warming
    for _ in range(10):  # then no bound at all
        clock.tick(a)
    assert clock.wait(a, timeout=0)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_warm_rounds(bad: object) -> None:
    with pytest.raises(ConfigError, match="warm_rounds"):
        SSPClock(1, warm_rounds=bad)  # type: ignore[arg-type]


def test_the_snapshot_names_the_warm_start() -> None:
    clock = SSPClock(0, num_workers=2, warm_rounds=1)
    a, _ = clock.register(0, 2), clock.register(1, 2)
    assert clock.snapshot()["warm_start"] == {"rounds": 1, "worker": None, "over": False}
    clock.wait(a, timeout=0)
    clock.tick(a)
    assert clock.snapshot()["warm_start"] == {"rounds": 1, "worker": 0, "over": True}
    assert SSPClock(0, num_workers=2).snapshot()["warm_start"] is None


def test_held_counts_the_seconds_a_worker_waits_for_the_bound() -> None:
    clock = SSPClock(0, num_workers=2)
    a, b = clock.register(0, 2), clock.register(1, 2)
    clock.tick(a)
    assert clock.wait(b, timeout=0)  # b is behind: never held
    waiter = threading.Thread(target=lambda: clock.wait(a, timeout=10))
    waiter.start()
    time.sleep(0.2)
    during = clock.held()  # a wait in progress counts up to now
    assert during[0] >= 0.15 and during[1] == 0.0
    clock.tick(b)
    waiter.join(5)
    after = clock.held()
    assert 0.15 <= after[0] < 5 and after[1] == 0.0
    time.sleep(0.1)
    assert clock.held()[0] == after[0]  # no longer held: no longer counting
    assert clock.wait(a, timeout=0) and clock.held()[0] == after[0]  # not held: adds nothing


def test_a_worker_that_leaves_is_dead_at_once_and_wakes_the_waiters() -> None:
    fake = FakeTime()
    clock = SSPClock(0, num_workers=2, worker_timeout=30, time_source=fake)
    a, b = clock.register(0, 2), clock.register(1, 2)
    clock.tick(a)
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(clock.wait(a, timeout=10)))
    waiter.start()
    time.sleep(0.05)
    assert not result  # b holds a back
    assert clock.leave(b) is True  # no time passed: not the worker timeout
    waiter.join(5)
    assert result == [True]
    assert clock.worker(b).state == "dead" and clock.min_clock() == 1
    with pytest.raises(WorkerStateError, match="left the cluster"):
        clock.tick(b)
    assert clock.leave(b) is False  # once only
    clock.finish(a)
    assert clock.leave(a) is False and clock.worker(a).state == "finished"
    with pytest.raises(UnknownWorkerError):
        clock.leave(12345)
    # its index registers again: a new epoch at the live minimum, as after a death
    b2 = clock.register(1, 2)
    assert b2 != b and clock.worker(b2).state == "live"


def test_the_shard_says_when_it_declares_a_worker_dead(caplog) -> None:
    fake = FakeTime()
    clock = SSPClock(1, num_workers=2, worker_timeout=10, time_source=fake)
    a, b = clock.register(0, 2), clock.register(1, 2)
    fake.now += 6
    clock.heartbeat(a)
    fake.now += 5  # b silent for 11 s
    with caplog.at_level("WARNING", logger="ftrl_ps.ps.clock"):
        assert clock.sweep() == [b]
        assert clock.sweep() == []  # said once
    said = [r.getMessage() for r in caplog.records if r.name == "ftrl_ps.ps.clock"]
    assert said == [f"worker {b} (index 1) sent nothing for 10 s: dead now, it no longer "
                    "holds back the others"]


def test_online_learners_totals_are_kept_never_lowered_and_checkpointed() -> None:
    clock = SSPClock(None, num_workers=1)
    clock.report_online("serve-a", 100, 30.0)
    clock.report_online("serve-a", 40, 10.0)  # late: lowers nothing
    clock.report_online("serve-b", 5, 1.0)
    assert clock.snapshot()["online"] == {"serve-a": {"rows": 100, "loss_sum": 30.0},
                                          "serve-b": {"rows": 5, "loss_sum": 1.0}}
    again = SSPClock(None, num_workers=1)
    again.restore(json.loads(json.dumps(clock.state())))  # as a checkpoint keeps it
    assert again.snapshot()["online"] == clock.snapshot()["online"]
    for i in range(70):  # bounded: the oldest learners go first
        again.report_online(f"l{i}", 1, 0.0)
    assert len(again.snapshot()["online"]) == 64 and "serve-a" not in again.snapshot()["online"]
