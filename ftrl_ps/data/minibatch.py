"""Re-slice reader chunks into mini-batches of exactly ``batch_size`` rows.

The reader yields one :class:`~ftrl_ps.data.batch.Batch` per chunk of bytes, so
chunk sizes vary with line lengths. Workers count steps in mini-batches, so
they need a fixed row count per step: every mini-batch has ``batch_size`` rows
except the last one of the stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ftrl_ps.data.batch import Batch
from ftrl_ps.errors import ConfigError

__all__ = ["minibatches", "skip_rows", "slice_rows"]


def slice_rows(batch: Batch, start: int, stop: int) -> Batch:
    """Rows ``[start, stop)`` of ``batch`` as a new Batch (indices/values are views)."""
    a, b = int(batch.indptr[start]), int(batch.indptr[stop])
    return Batch(
        labels=batch.labels[start:stop],
        indptr=batch.indptr[start : stop + 1] - a,
        indices=batch.indices[a:b],
        values=batch.values[a:b],
    )


def skip_rows(batches: Iterable[Batch], rows: int) -> Iterator[Batch]:
    """``batches`` without their first ``rows`` rows (a resumed worker or unit)."""
    for b in batches:
        if rows >= b.rows:
            rows -= b.rows
            continue
        yield slice_rows(b, rows, b.rows) if rows else b
        rows = 0


def minibatches(batches: Iterable[Batch], batch_size: int) -> Iterator[Batch]:
    """Yield mini-batches of ``batch_size`` rows (the last may be shorter)."""
    if batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {batch_size}")
    carry: list[Batch] = []
    carried = 0
    for batch in batches:
        pos = 0
        rows = batch.rows
        if carried:
            need = batch_size - carried
            take = min(need, rows)
            carry.append(slice_rows(batch, 0, take))
            carried += take
            pos = take
            if carried < batch_size:
                continue
            yield Batch.concat(carry)
            carry, carried = [], 0
        while rows - pos >= batch_size:
            yield slice_rows(batch, pos, pos + batch_size)
            pos += batch_size
        if pos < rows:
            carry.append(slice_rows(batch, pos, rows))
            carried = rows - pos
    if carried:
        yield Batch.concat(carry)
