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
