"""Single-process training, evaluation and prediction over libsvm files.

Parsing runs in a prefetch thread while the FTRL kernel trains on the previous
chunk (both release the GIL), so the two overlap on two cores.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

import numpy as np

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.metrics import Evaluation
from ftrl_ps.data.inputs import InputReader
from ftrl_ps.data.libsvm import ReaderStats
from ftrl_ps.data.prefetch import prefetch
from ftrl_ps.errors import ConfigError
from ftrl_ps.learn.progress import Progress

__all__ = ["DEFAULT_CHUNK_BYTES", "PARSE_THREADS", "TrainReport", "evaluate", "predict", "train"]

Source = str | os.PathLike[str] | BinaryIO
DEFAULT_CHUNK_BYTES = 4 << 20
#: parser threads: with the trainer in a third thread, parsing (the slower
#: stage) gets both cores of a 2-core machine whenever the trainer waits
PARSE_THREADS = 2


@dataclass
class TrainReport:
    """What a training run did."""

    rows: int = 0
    seconds: float = 0.0
    loss_sum: float = 0.0
    epochs: int = 0
    bad_lines: int = 0
    bad_examples: list[Any] = field(default_factory=list)

    @property
    def progressive_logloss(self) -> float:
        """Mean log loss of predictions made before each row's update (as VW reports it)."""
        return self.loss_sum / self.rows if self.rows else float("nan")

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("nan")


def _reader(source: Source, bits: int, chunk_bytes: int, skip_bad_lines: bool) -> InputReader:
    """The reader every pass uses: every part of the input (a file, directory, glob or
    fsspec URL; see ftrl_ps.data.sources), parallel parsing, bad lines as asked."""
    return InputReader(
        source,
        bits,
        chunk_bytes=chunk_bytes,
        skip_bad_lines=skip_bad_lines,
        threads=PARSE_THREADS,
    )


def train(
    model: FTRL,
    source: Source,
    *,
    epochs: int = 1,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    skip_bad_lines: bool = False,
    progress: Progress | None = None,
) -> TrainReport:
    """Train ``model`` on ``source`` for ``epochs`` passes; returns a :class:`TrainReport`."""
    if epochs < 1:
        raise ConfigError(f"epochs must be >= 1, got {epochs}")
    if epochs > 1 and (str(source) == "-" or not isinstance(source, str | os.PathLike)):
        raise ConfigError("more than one epoch needs a file that can be read again, not stdin")
    report = TrainReport()
    start = time.perf_counter()
    for epoch in range(epochs):
        reader = _reader(source, model.bits, chunk_bytes, skip_bad_lines)
        for batch in prefetch(reader, depth=2):
            report.loss_sum += model._fit(batch.labels, batch.indptr, batch.indices, batch.values)
            report.rows += batch.rows
            if progress is not None:
                done = reader.fraction()  # (a prefetched chunk ahead: at most one)
                frac = (epoch + done) / epochs if done is not None else None
                progress.update(
                    report.rows, report.loss_sum, frac, extra=f"epoch {epoch + 1}/{epochs}"
                )
        report.epochs += 1
        report.bad_lines += reader.stats.bad_lines
        report.bad_examples.extend(reader.stats.bad_examples)
    report.seconds = time.perf_counter() - start
    if progress is not None:
        progress.update(report.rows, report.loss_sum, 1.0, force=True)
        progress.close()
    return report


def evaluate(
    model: FTRL,
    source: Source,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    skip_bad_lines: bool = False,
) -> dict[str, float]:
    """Log loss, AUC, rows and positive rate of ``model`` on ``source``."""
    ev = Evaluation()
    reader = _reader(source, model.bits, chunk_bytes, skip_bad_lines)
    for batch in prefetch(reader, depth=2):
        ev.update(batch.labels, model._predict(batch.indptr, batch.indices, batch.values))
    result = ev.get()
    result["bad_lines"] = reader.stats.bad_lines
    return result


def predict(
    model: FTRL,
    source: Source,
    out: IO[str],
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    skip_bad_lines: bool = False,
) -> ReaderStats:
    """Write one probability per input row to ``out``; returns the reader's counters
    (``rows``; with ``skip_bad_lines``, the lines skipped, which have no output line)."""
    reader = _reader(source, model.bits, chunk_bytes, skip_bad_lines)
    for batch in prefetch(reader, depth=2):
        probs = model._predict(batch.indptr, batch.indices, batch.values)
        if probs.size:
            out.write("\n".join(np.char.mod("%.6g", probs).tolist()) + "\n")
    return reader.stats
