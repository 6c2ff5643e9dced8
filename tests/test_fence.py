"""Fences (ps.dedup): a dead worker's epochs refused, its push that reached a shard
after its last push on shard 0 withdrawn there, exactly once; the route on a shard."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl_ps.errors import WorkerStateError
from ftrl_ps.ps import wire
from ftrl_ps.ps.dedup import PushDeduper, push_digest
from tests._servers import BINARY, assert_error, in_process_cluster


def _push(dedup: PushDeduper, seq: int, prev: int, position: int, value: float,
          epoch: int = 5, store: list | None = None) -> int:
    keys = np.array([3, 7], np.uint32)
    dn = np.full(2, value)
    dz = np.full(2, -value)
    digest = push_digest(seq, keys, dn, dz, np.float64)
    origin = wire.PushOrigin(0, epoch, seq, prev, position)
    dedup.apply(origin, digest, lambda: (store if store is not None else []).append(value),
                (keys, dn, dz))
    return digest


def test_a_fence_withdraws_the_last_push_after_its_seq_once_and_refuses_the_epoch() -> None:
    dedup = PushDeduper(keep_undo=True)
    dedup.claim(0, epoch=5)
    first = _push(dedup, 1, 0, 10, 1.0)
    _push(dedup, 2, 1, 20, 2.0)
    withdrawn: list[tuple] = []
    rec = dedup.fence(0, 5, 1, lambda *d: withdrawn.append(d))
    assert [d[1].tolist() for d in withdrawn] == [[2.0, 2.0]]  # push 2's deltas, once
    assert (rec["last_seq"], rec["position"], rec["pushes"]) == (1, 10, 1)
    assert rec["digest"] == f"{first:016x}" and (rec["fenced"], rec["fence_seq"]) == (5, 1)
    assert dedup.fence(0, 5, 1, lambda *d: withdrawn.append(d))["last_seq"] == 1
    assert len(withdrawn) == 1  # idempotent
    with pytest.raises(WorkerStateError, match="fenced off"):
        _push(dedup, 2, 1, 20, 2.0)  # a late retry of the dead process
    with pytest.raises(WorkerStateError, match="fenced off"):
        dedup.claim(0, epoch=5)
    assert dedup.claim(0, epoch=6)["fence_seq"] == 1  # a new process learns the fence
    _push(dedup, 3, 1, 30, 3.0, epoch=6)  # it pushed: it has dealt with the fence
    assert dedup.records()[0]["fence_seq"] is None and dedup.fences() == []


def test_a_fence_that_cannot_withdraw_is_an_error_and_changes_nothing() -> None:
    dedup = PushDeduper(keep_undo=True)
    dedup.claim(0, epoch=5)
    for seq in (1, 2, 3):
        _push(dedup, seq, seq - 1, 10 * seq, 1.0)
    with pytest.raises(WorkerStateError, match="can only withdraw its last push"):
        dedup.fence(0, 5, 1, lambda *d: None)  # two pushes after seq 1
    assert dedup.records()[0]["last_seq"] == 3 and dedup.records()[0]["fenced"] == 0
    no_undo = PushDeduper()  # shard 0: the commit point keeps nothing to withdraw
    no_undo.claim(0, epoch=5)
    _push(no_undo, 1, 0, 10, 1.0)
    with pytest.raises(WorkerStateError):
        no_undo.fence(0, 5, 0, lambda *d: None)
    assert no_undo.fence_here(0, 5)["fence_seq"] == 1  # shard 0 fences at its last push
    assert no_undo.fences() == [{"worker": 0, "epoch": 5, "seq": 1}]
    no_undo.claim(0, epoch=7)
    assert no_undo.fence_here(0, 6) is None  # a later epoch claimed it: the worker is back


def test_the_kept_pushes_stay_within_their_budget_oldest_dropped_first() -> None:
    one = 2 * 4 + 2 * 2 * 8  # keys uint32, delta_n and delta_z float64: 40 bytes a push
    dedup = PushDeduper(keep_undo=True, undo_budget=2 * one)
    for worker in (0, 1, 2):
        dedup.claim(worker, epoch=5)
        keys = np.array([3, 7], np.uint32)
        dedup.apply(wire.PushOrigin(worker, 5, 1, 0, 10), 1, lambda: None,
                    (keys, np.ones(2), np.ones(2)))
    with pytest.raises(WorkerStateError, match="if it still holds it"):
        dedup.fence(0, 5, 0, lambda *d: None)  # worker 0's, the oldest, was dropped
    for worker in (1, 2):
        assert dedup.fence(worker, 5, 0, lambda *d: None)["last_seq"] == 0


def _values(client, keys: list[int]) -> tuple[list[float], list[float]]:
    msg = wire.decode(client.post("/v1/pull", content=wire.encode_keys(keys),
                                  headers=BINARY).content, wire.VALUES)
    return msg.values[0].tolist(), msg.values[1].tolist()


def test_the_fence_route_restores_the_values_and_answers_409_to_the_dead_epoch() -> None:
    with in_process_cluster(2, bits=12, group_size=64, dtype="float64") as (_s0, s1):
        s1.post("/v1/streams/0", json={"epoch": 9})
        keys = [3000, 3001]

        def push(seq: int, value: float) -> object:
            body = wire.encode_push(keys, [value, value], [value, -value], dtype=np.float64,
                                    origin=wire.PushOrigin(0, 9, seq, seq - 1, 10 * seq))
            return s1.post("/v1/push", content=body, headers=BINARY)

        push(1, 0.25)
        before = _values(s1, keys)
        push(2, 0.5)
        assert _values(s1, keys) != before
        for _ in range(2):  # idempotent
            resp = s1.post("/v1/streams/0/fence", json={"epoch": 9, "seq": 1})
            assert resp.status_code == 200, resp.text
            assert resp.json()["last_seq"] == 1 and resp.json()["fence_seq"] == 1
        assert _values(s1, keys) == before
        assert_error(push(3, 1.0), 409, "WorkerStateError", "fenced off")
        assert s1.get("/metrics").text.count("ftrl_ps_withdrawals_total 1.0") == 1
        assert_error(s1.post("/v1/streams/0/fence", json={"epoch": 0, "seq": 1}), 400,
                     "ProtocolError", "epoch")


def test_withdrawn_pushes_leave_the_journal_file_for_good(tmp_path) -> None:
    """A returning worker drops the fenced pushes from its journal: the file keeps
    the pushes up to the fence and one part-less entry with the last seq, the
    chains and totals from before the withdrawn push and the fence's position;
    a process that loads the file again sees the same, and withdrawing again
    changes nothing."""
    from ftrl_ps.ps.journal import PushJournal
    from ftrl_ps.ps.replay import PushStream

    path = tmp_path / "worker-0.journal"
    stream = PushStream(PushJournal(path, 0, 2, np.float32))
    keys = np.array([5, 3000], np.uint32)
    splits = np.array([0, 1, 2])
    for i in (1, 2, 3):
        stream.record(keys, np.full(2, i, np.float32), np.ones(2, np.float32), splits,
                      position=10 * i, loss_sum=float(i))
    before = stream.journal.entries[1].totals  # after push 2
    stream.withdraw_after(2, position=999)
    for again in (stream, PushStream(PushJournal(path, 0, 2, np.float32))):
        last = again.journal.last
        assert [e.seq for e in again.journal.entries] == [1, 2, 3]
        assert not any(last.parts) and last.keys.size == 0
        assert (last.position, last.loss_sum) == (20, 2.0)  # push 2's, the journal has it
        assert again.journal.totals() == before and again.prev == [2, 2] and again.seq == 3
        again.withdraw_after(2, position=999)  # nothing left to withdraw
        assert [e.seq for e in again.journal.entries] == [1, 2, 3]
    nxt = stream.record(keys, np.ones(2, np.float32), np.ones(2, np.float32), splits, 40, 4.0)
    assert nxt.seq == 4 and nxt.prev == [2, 2]  # a withdrawn seq is never reused


def test_changed_at_moves_with_what_a_checkpoint_must_hold_only() -> None:
    """``changed_at`` (make_durable writes a checkpoint only for a record changed
    since the newest one began): a push, a new epoch, a fence, a withdrawal move
    it; a retried push, a claim of the same epoch, a fence already held do not."""
    dedup = PushDeduper(keep_undo=True)
    assert dedup.changed_at(0) == -np.inf  # no record
    marks = [dedup.changed_at(0)]

    def moved() -> bool:
        marks.append(dedup.changed_at(0))
        return marks[-1] > marks[-2]

    dedup.claim(0, epoch=5)
    assert moved()  # a new epoch
    dedup.claim(0, epoch=5)
    assert not moved()
    _push(dedup, 1, 0, 10, 1.0)
    assert moved()
    _push(dedup, 1, 0, 10, 1.0)  # the same push again: a retry, nothing applied
    assert not moved()
    _push(dedup, 2, 1, 20, 2.0)
    assert moved()
    dedup.fence(0, 5, 1, lambda *d: None)  # withdraws push 2
    assert moved()
    dedup.fence(0, 5, 1, lambda *d: None)  # already fenced
    assert not moved()
    assert dedup.fence_here(1, 3) is not None and dedup.changed_at(1) > -np.inf
