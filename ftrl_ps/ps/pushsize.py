"""Rounds small enough that their push fits in one request body.

A shard refuses a body larger than its ``--max-body-mb`` (413). A worker's
push carries every key its round touched, and a round is ``fetch_step``
mini-batches of ``batch_size`` rows: wide rows (hundreds of distinct
features) with a large batch can touch more keys than one body may hold,
and the run would stop there. :func:`max_push_keys` turns the servers'
limit (their status shows it) into a number of keys, counting what one key
costs on the wire; :func:`fitting` splits a round, in order, into pieces of
at most that many distinct keys (whole mini-batches when it can, halves of
one otherwise). The rows, their order and the model are the same; there
are only more, smaller rounds (and clock ticks) where a round was too big.

>>> from ftrl_ps.data.batch import Batch
>>> def batch(*rows):
...     indptr = np.cumsum([0] + [len(r) for r in rows])
...     return Batch(labels=np.zeros(len(rows), np.float32), indptr=indptr,
...                  indices=np.concatenate(rows).astype(np.int32),
...                  values=np.ones(int(indptr[-1]), np.float32))
>>> count = lambda parts: len({int(k) for p in parts for k in p.indices}) + 1  # + bias
>>> parts = [batch([1, 2], [3, 4]), batch([5, 6], [1, 7])]
>>> [[p.rows for p in piece] for piece in fitting(parts, 9, count)]  # 7 keys + bias: fits
[[2, 2]]
>>> [[p.rows for p in piece] for piece in fitting(parts, 5, count)]  # one batch each
[[2], [2]]
>>> [[p.rows for p in piece] for piece in fitting(parts, 3, count)]  # a row each
[[1], [1], [1], [1]]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ftrl_ps.data.batch import Batch
from ftrl_ps.data.minibatch import slice_rows
from ftrl_ps.errors import DataError
from ftrl_ps.ps.merge import VERSIONED

__all__ = ["BODY_SHARE", "JSON_BYTES_PER_VALUE", "fitting", "max_push_keys"]

#: a push's keys may fill this share of the body limit (the rest: headers, framing)
BODY_SHARE = 0.9
#: a value in a JSON body (digits, separators): an upper bound for float32/float64
JSON_BYTES_PER_VALUE = 26


def max_push_keys(client: Any, merge_rule: str) -> int | None:
    """The most keys one push to ``client``'s servers may carry (None: no limit).

    ``client.max_body_bytes`` is the smallest body limit of its servers; a
    key costs its uint32 index and two deltas in the servers' float type,
    plus versions, rows and one more float under the versioned merge rules
    (``ps.merge``); in a JSON body every value is counted at its longest.
    Keys are counted as if all went to one shard.
    """
    limit = getattr(client, "max_body_bytes", None)
    if not limit:
        return None
    itemsize = np.dtype(getattr(client, "dtype", np.float64)).itemsize
    per_key = 4 + 2 * itemsize
    values = 3
    if merge_rule in VERSIONED:
        per_key += 4 + 4 + itemsize
        values += 3
    if getattr(client, "wire_format", "binary") == "json":
        per_key = values * JSON_BYTES_PER_VALUE
    return max(1, int(limit * BODY_SHARE) // per_key)


def fitting(parts: list[Batch], cap: int | None,
            count_keys: Callable[[list[Batch]], int]) -> Iterator[list[Batch]]:
    """``parts`` in order, as pieces of at most ``cap`` distinct keys each.

    ``count_keys(parts)`` gives the distinct keys of some parts (the bias
    included); it is only asked when the parts' stored features plus the
    bias exceed ``cap``. Raises :class:`~ftrl_ps.errors.DataError` for a
    single row with more keys than ``cap``.
    """
    if cap is None or sum(p.indices.size for p in parts) + 1 <= cap:
        yield parts
        return
    keys = count_keys(parts)
    if keys <= cap:
        yield parts
        return
    if len(parts) > 1:
        half = len(parts) // 2
        yield from fitting(parts[:half], cap, count_keys)
        yield from fitting(parts[half:], cap, count_keys)
        return
    (batch,) = parts
    if batch.rows <= 1:
        raise DataError(
            f"a row has {keys - 1:,} distinct features: one push may carry at most {cap:,} "
            "keys (the servers' --max-body-mb); raise it")
    half = batch.rows // 2
    yield from fitting([slice_rows(batch, 0, half)], cap, count_keys)
    yield from fitting([slice_rows(batch, half, batch.rows)], cap, count_keys)
