from __future__ import annotations

import numpy as np
import pytest

from ftrl_ps.data.libsvm import Batch
from ftrl_ps.data.minibatch import minibatches, skip_rows
from ftrl_ps.errors import ConfigError


def make_batch(rng: np.random.Generator, rows: int, start_label: int) -> Batch:
    lens = rng.integers(0, 5, rows)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return Batch(
        labels=(np.arange(start_label, start_label + rows) % 2).astype(np.float32),
        indptr=indptr,
        indices=rng.integers(0, 100, indptr[-1]).astype(np.int32),
        values=rng.random(indptr[-1]).astype(np.float32),
    )


@pytest.mark.parametrize("batch_size", [1, 3, 7, 50, 1000])
def test_minibatches_are_exact_and_lossless(batch_size: int) -> None:
    rng = np.random.default_rng(0)
    chunks = [make_batch(rng, r, 0) for r in (5, 0, 13, 1, 40, 2)]
    out = list(minibatches(iter(chunks), batch_size))
    total = sum(c.rows for c in chunks)
    assert sum(b.rows for b in out) == total
    assert all(b.rows == batch_size for b in out[:-1]) and 0 < out[-1].rows <= batch_size
    for b in out:
        assert b.indptr[0] == 0 and b.indptr[-1] == b.indices.size == b.values.size
    cat = lambda name, bs: np.concatenate([getattr(b, name) for b in bs])  # noqa: E731
    for name in ("labels", "indices", "values"):
        np.testing.assert_array_equal(cat(name, out), cat(name, chunks))
    lens = lambda bs: np.concatenate([np.diff(b.indptr) for b in bs])  # noqa: E731
    np.testing.assert_array_equal(lens(out), lens(chunks))


def test_bad_batch_size() -> None:
    with pytest.raises(ConfigError):
        list(minibatches(iter([]), 0))


def test_skip_rows_drops_exactly_the_first_rows() -> None:
    batches = [make_batch(np.random.default_rng(3), 4, 4 * i) for i in range(3)]  # 12 rows
    labels = np.concatenate([b.labels for b in batches])
    for k in (0, 3, 4, 9, 12, 20):
        kept = list(skip_rows(iter(batches), k))
        assert sum(b.rows for b in kept) == max(12 - k, 0)
        got = np.concatenate([b.labels for b in kept]) if kept else labels[:0]
        np.testing.assert_array_equal(got, labels[k:])
