"""A worker's share of the input: which bytes it reads, parsed ahead in a thread.

A fixed share (``--split shares``) is worker ``i``'s line-aligned ``1/N`` of the
file (:func:`share_of`). :func:`read_share` opens it and parses it in a
background thread, up to this worker's part of :data:`START_AHEAD_BYTES` ahead:
before its first round (a local cluster's workers start ~1 s before the server
answers, a core idle) and while it trains (the next round is parsed during
this one).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ftrl_ps.data.batch import Batch
from ftrl_ps.data.libsvm import LibsvmReader, split_ranges
from ftrl_ps.data.prefetch import prefetch
from ftrl_ps.errors import ConfigError

if TYPE_CHECKING:
    from ftrl_ps.ps.worker import WorkerConfig

__all__ = ["START_AHEAD_BYTES", "Share", "read_share", "share_of"]

#: input parsed ahead, shared by the run's workers (64 MiB each of 2): before the first
#: round a local cluster's workers wait ~1 s for the server to start, a core idle; while
#: they train, a round (4 steps of up to 50,000 rows, ~70 MiB of generated text) is
#: parsed during the one before it. Two chunks ahead (8 MiB), as before, left the
#: worker waiting ~0.24 s for its parser at every 0.45 s round at 20M rows.
START_AHEAD_BYTES = 128 << 20


@dataclass
class Share:
    """A worker's byte range being parsed in the background: the reader and its batches."""

    reader: LibsvmReader
    batches: Iterator[Batch]


def read_share(
    source: str | os.PathLike[str],
    byte_range: tuple[int, int] | None,
    bits: int,
    config: WorkerConfig,
) -> Share:
    """Open ``byte_range`` of ``source`` and start parsing it in a background thread,
    up to this worker's share of :data:`START_AHEAD_BYTES` ahead (at least two chunks)."""
    reader = LibsvmReader(
        source,
        bits,
        chunk_bytes=config.chunk_bytes,
        skip_bad_lines=config.skip_bad_lines,
        byte_range=byte_range,
    )
    ahead = max(2, START_AHEAD_BYTES // (config.num_workers * config.chunk_bytes))
    return Share(reader, prefetch(reader, depth=ahead))


def share_of(path: str | os.PathLike[str], worker_index: int, num_workers: int) -> tuple[int, int]:
    """The line-aligned byte range of ``path`` that worker ``worker_index`` reads."""
    if not 0 <= worker_index < num_workers:
        raise ConfigError(f"worker index {worker_index} not in [0, {num_workers})")
    return split_ranges(path, num_workers)[worker_index]
