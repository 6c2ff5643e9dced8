"""Key numbering, working sets and pending deltas of a worker round."""

from __future__ import annotations

import numpy as np

from ftrl_ps.data.batch import Batch
from ftrl_ps.ps.workingset import KeyNumbering, PendingDeltas, WorkingSet
from tests.test_worker import as_batches


def _parts(indices: np.ndarray, per: int) -> list[Batch]:
    """One index per row."""
    size = indices.size
    return as_batches(np.zeros(size, np.float32), np.arange(size + 1), indices.astype(np.int32),
                      np.ones(size, np.float32), per=per)


def test_numbering_matches_the_keys_and_stamps_do_not_leak() -> None:
    rng = np.random.default_rng(3)
    numbering = KeyNumbering(10)
    for size in (5000, 2500, 9000):  # an earlier round's stamps must not leak into the next
        indices = rng.integers(0, 1000, size)
        keys, occ, local = numbering.number(_parts(indices, per=700))
        expect, counts = np.unique(indices, return_counts=True)
        np.testing.assert_array_equal(keys, np.append(expect, 1024))  # the bias last
        np.testing.assert_array_equal(occ, np.append(counts, size))  # the bias: every row
        np.testing.assert_array_equal(keys[local], indices)


def test_pending_deltas_merge_in_key_order() -> None:
    a = PendingDeltas(np.array([1, 7], np.uint32), np.array([[1.0, 2.0], [3.0, 4.0]]),
                      np.array([1, 2]))
    b = PendingDeltas(np.array([4], np.uint32), np.array([[5.0, 6.0]]), np.array([3]))
    m = a.merge(b)
    assert m.keys.tolist() == [1, 4, 7]
    assert m.delta.tolist() == [[1.0, 2.0], [5.0, 6.0], [3.0, 4.0]]
    assert m.rows.tolist() == [1, 3, 2]
    assert PendingDeltas().merge(b) is b and a.merge(PendingDeltas()) is a


def test_adopt_adds_pending_deltas_of_its_keys_and_returns_the_rest() -> None:
    parts = _parts(np.array([2, 5, 2]), per=3)
    numbered = KeyNumbering(4).number(parts)  # keys 2, 5, bias 16
    ws = WorkingSet.pulled(parts, numbered, np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.5, 0.5]))
    pending = PendingDeltas(np.array([3, 5], np.uint32), np.array([[0.25, -1.0], [0.5, 2.0]]),
                            np.array([1, 4]))
    rest = ws.adopt(pending)
    assert rest.keys.tolist() == [3]
    assert ws.state[1].tolist() == [2.5, 2.5]  # key 5: pulled + unpushed
    assert ws.base[1].tolist() == [2.0, 0.5]  # the servers have not seen it
    assert ws.dirty
    out = ws.unpushed()  # nothing trained: only the carried key
    assert out.keys.tolist() == [5] and out.delta.tolist() == [[0.5, 2.0]]
    ws.mark_pushed()
    assert not ws.dirty and not ws.unpushed().keys.size


def _first_seen_reference(indices: np.ndarray, extra_key: int) -> tuple[list[int], list[int],
                                                                         list[int]]:
    """Plain Python: keys by first appearance (``extra_key`` first), hits, numbers."""
    number: dict[int, int] = {extra_key: 0}
    hits = [0]
    local = []
    for k in indices.tolist():
        if k not in number:
            number[k] = len(number)
            hits.append(0)
        hits[number[k]] += 1
        local.append(number[k])
    return list(number), hits, local


def test_first_seen_and_renumber_kernels_match_plain_python() -> None:
    from ftrl_ps._kernels.worker import PREFETCH_AHEAD, first_seen, renumber

    rng = np.random.default_rng(5)
    # keys up to 2**30 (MAX_BITS), clustered (shared high bits) and repeated
    indices = np.concatenate([rng.integers(0, 1 << 30, 300), (rng.integers(0, 40, 500) << 20),
                              rng.integers(0, 50, 200)]).astype(np.int32)
    rng.shuffle(indices)
    extra = 1 << 30  # the bias key at MAX_BITS
    seen = np.empty(indices.size + 1, np.int64)
    local = np.empty(indices.size, np.int32)
    small = np.empty(1 << 8, np.int64)
    assert first_seen(indices, extra, small, 64 - 8, 150, local, seen, 0) == -1  # > 150 keys
    table = np.empty(1 << 11, np.int64)
    count = first_seen(indices, extra, table, 64 - 11, 1200, local, seen, 0)
    keys, ref_hits, ref_local = _first_seen_reference(indices, extra)
    assert count == len(keys)
    assert seen[:count].tolist() == keys and local.tolist() == ref_local
    # shorter than the prefetch distance, and empty
    for short in (indices[: PREFETCH_AHEAD // 2], indices[:0]):
        n = first_seen(short, extra, table, 64 - 11, 1200, local, seen, 0)
        ref_keys, _, ref_short = _first_seen_reference(short, extra)
        assert seen[:n].tolist() == ref_keys and local[: short.size].tolist() == ref_short

    # in pieces, each going on from the count before it: the same numbering
    pieces = np.split(np.arange(indices.size), [1, 1, 400, 777])  # an empty piece too
    got = 0
    for piece in pieces:
        got = first_seen(indices[piece], extra, table, 64 - 11, 1200, local[piece], seen, got)
    assert got == len(keys) and seen[:got].tolist() == keys and local.tolist() == ref_local
    got = 0
    for piece in pieces:  # the limit holds for the keys of all pieces together
        got = first_seen(indices[piece], extra, small, 64 - 8, 150, local[piece], seen, got)
        if got < 0:
            break
    assert got == -1

    # renumber: positions in the sorted keys, and each key's entries counted
    count = first_seen(indices, extra, table, 64 - 11, 1200, local, seen, 0)
    packed = np.sort((seen[:count] << 32) | np.arange(count))
    sorted_keys, occurrences = np.empty(count, np.uint32), np.empty(count, np.int64)
    renumber(local, packed, sorted_keys, occurrences)
    assert sorted_keys.tolist() == sorted(keys)
    assert local.tolist() == [sorted(keys).index(k) for k in indices.tolist()]
    by_key = dict(zip(keys, ref_hits, strict=True))
    assert occurrences.tolist() == [by_key[k] for k in sorted(keys)]


def test_numbering_grows_and_shrinks_its_table_with_the_rounds() -> None:
    rng = np.random.default_rng(8)
    numbering = KeyNumbering(22)
    for distinct in (10, 30_000, 200, 5000):
        indices = rng.choice(1 << 22, distinct, replace=False)
        indices = np.concatenate([indices, indices[: distinct // 2]])
        keys, occ, local = numbering.number(_parts(indices, per=997))
        np.testing.assert_array_equal(keys, np.append(np.unique(indices), numbering.bias_key))
        np.testing.assert_array_equal(keys[local], indices)
        assert numbering._table.size >= keys.size / KeyNumbering.MAX_LOAD
        assert numbering._table.size <= 8 * max(keys.size, 1 << 7)  # shrunk again
