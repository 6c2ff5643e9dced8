"""Hypothesis property tests: the wire format round-trips, and the dedup/journal/replay
logic applies every push exactly once through retries, lost answers, shard crashes
(restore from the last checkpoint) and worker restarts."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftrl_ps.errors import PushGapError
from ftrl_ps.ps import wire
from ftrl_ps.ps.dedup import PushDeduper, push_digest
from ftrl_ps.ps.journal import PushJournal
from ftrl_ps.ps.replay import PushStream

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)

sorted_keys = st.lists(st.integers(0, 2**32 - 1), max_size=40, unique=True).map(sorted)


@SETTINGS
@given(keys=sorted_keys, dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1),
       origin=st.none() | st.builds(wire.PushOrigin, st.integers(0, 2**32 - 1),
                                    st.integers(0, 2**64 - 1), st.integers(1, 2**64 - 1),
                                    st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)))
def test_push_round_trips_binary_and_json(keys, dtype, seed, origin):
    rng = np.random.default_rng(seed)
    dn = rng.random(len(keys)).astype(dtype)
    dz = rng.normal(size=len(keys)).astype(dtype)
    msg = wire.decode(wire.encode_push(keys, dn, dz, origin=origin, dtype=dtype), wire.PUSH)
    assert msg.keys.tolist() == keys and msg.origin == origin
    assert msg.delta_n.tolist() == dn.tolist() and msg.delta_z.dtype == np.dtype(dtype)
    obj = wire.to_json(wire.PUSH, keys, (dn, dz))
    if origin is not None:
        obj.update(worker=origin.worker, epoch=origin.epoch, seq=origin.seq,
                   prev_seq=origin.prev_seq, position=origin.position)
    import json

    from ftrl_ps.errors import ProtocolError
    from ftrl_ps.ps.wire_json import JSON_INT_LIMIT

    if origin is not None and max(origin.epoch, origin.seq, origin.prev_seq,
                                  origin.position) > JSON_INT_LIMIT:
        with pytest.raises(ProtocolError, match="2\\*\\*53"):  # not exact in JSON numbers
            wire.decode_json(json.dumps(obj), wire.PUSH)
        return
    back = wire.decode_json(json.dumps(obj), wire.PUSH)
    assert back.keys.tolist() == keys and back.origin == origin
    assert back.delta_z.astype(dtype).tolist() == dz.tolist()


@SETTINGS
@given(parts=st.lists(sorted_keys, min_size=1, max_size=5), cuts=st.lists(st.integers(1, 97)))
def test_a_stream_of_messages_decodes_in_any_chunking(parts, cuts):
    body = b"".join(wire.encode_entries(k, np.ones(len(k)), np.zeros(len(k))) for k in parts)
    chunks, pos = [], 0
    for cut in cuts:
        chunks.append(body[pos:pos + cut])
        pos += cut
    chunks.append(body[pos:])
    got = [m.keys.tolist() for m in wire.iter_messages(chunks, wire.ENTRIES)]
    assert got == parts


# --- exactly once through faults: a model of 2 shards and 1 worker index -------------------
SPLIT = 100  # keys [0, 100) on shard 0, [100, 200) on shard 1


@dataclass
class Shard:
    index: int
    dedup: PushDeduper = field(default_factory=lambda: PushDeduper(durable_on_apply=False))
    store: np.ndarray = field(default_factory=lambda: np.zeros(200))
    saved: tuple[list, np.ndarray] | None = None

    def apply(self, origin: wire.PushOrigin, keys, dn, lose_answer: bool) -> dict:
        digest = push_digest(origin.seq, keys, dn, -dn, np.float64)

        def add() -> None:
            self.store[keys] += dn

        _, record = self.dedup.apply(origin, digest, add)
        if lose_answer:
            raise ConnectionError("the answer was lost")
        assert record is not None
        return record

    def checkpoint(self) -> None:
        state = self.dedup.state()
        self.saved = (state, self.store.copy())
        self.dedup.mark_durable(state)

    def crash(self) -> None:
        self.dedup = PushDeduper(durable_on_apply=False)
        self.store = np.zeros(200)
        if self.saved is not None:
            self.dedup.restore(self.saved[0])
            self.store = self.saved[1].copy()


class Worker:
    def __init__(self, shards: list[Shard], journal: PushJournal, epoch: int) -> None:
        self.shards, self.journal, self.epoch = shards, journal, epoch
        self.stream = PushStream(journal)
        for s in shards:
            self.sync(s)

    def sync(self, shard: Shard) -> None:
        record = shard.dedup.claim(0, self.epoch)
        self.stream.acknowledged(shard.index, record["durable_seq"])
        for entry in self.stream.plan(shard.index, record["last_seq"]):
            self.send(shard, entry, lose_answer=False)

    def send(self, shard: Shard, entry, lose_answer: bool) -> None:
        a, b = np.searchsorted(entry.keys, [0, SPLIT]) if shard.index == 0 else (
            np.searchsorted(entry.keys, [SPLIT, 200]))
        origin = wire.PushOrigin(0, self.epoch, entry.seq, entry.prev[shard.index],
                                 entry.position)
        for attempt in range(3):  # a lost answer is retried with the same seq
            try:
                record = shard.apply(origin, entry.keys[a:b], entry.delta_n[a:b],
                                     lose_answer and attempt == 0)
            except ConnectionError:
                continue
            except PushGapError:
                self.sync(shard)
                return
            self.stream.acknowledged(shard.index, record["durable_seq"])
            return

    def push(self, keys: list[int], value: float, lose: int | None) -> np.ndarray:
        k = np.array(keys, dtype=np.uint32)
        dn = np.full(k.size, value)
        splits = np.searchsorted(k, [0, SPLIT, 200])
        entry = self.stream.record(k, dn, -dn, splits, position=0, loss_sum=0.0)
        for s in self.shards:
            if entry.parts[s.index]:
                self.send(s, entry, lose_answer=lose == s.index)
        self.stream.release()
        out = np.zeros(200)
        out[k] += dn
        return out


events = st.one_of(
    st.tuples(st.just("push"), st.lists(st.integers(0, 199), min_size=1, max_size=6,
                                         unique=True).map(sorted),
              st.integers(1, 9), st.none() | st.integers(0, 1)),
    st.tuples(st.just("checkpoint"), st.integers(0, 1)),
    st.tuples(st.just("crash shard"), st.integers(0, 1)),
    st.tuples(st.just("crash worker")),
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(events, max_size=40))
def test_every_push_applied_exactly_once_through_faults(script):
    shards = [Shard(0), Shard(1)]
    journal = PushJournal(None, 0, 2, np.float64)
    worker = Worker(shards, journal, epoch=1)
    expected = np.zeros(200)
    for event in script:
        if event[0] == "push":
            expected += worker.push(event[1], float(event[2]), event[3])
        elif event[0] == "checkpoint":
            shards[event[1]].checkpoint()
        elif event[0] == "crash shard":
            shards[event[1]].crash()  # the worker learns of it at its next push there
        else:  # a new process: the same journal, a newer epoch, claims and replays
            worker = Worker(shards, journal, epoch=worker.epoch + 1)
    for s in shards:  # a last sync, as a restarted worker or a gap answer would do
        worker.sync(s)
    np.testing.assert_allclose(shards[0].store + shards[1].store, expected)
    totals = journal.totals()
    for s in shards:
        (rec,) = [r for r in s.dedup.records() if r["worker"] == 0] or [None]
        pushes = rec["pushes"] if rec else 0
        digest = int(rec["digest"], 16) if rec else 0
        assert (pushes, digest) == totals[s.index]
