"""The worker loop: train a local FTRL copy, pull fresh state, push deltas, tick the SSP clock.

One *step* is one mini-batch of ``batch_size`` rows. Every ``fetch_step``
steps the worker reads the next ``fetch_step`` mini-batches ahead, pulls the
state of exactly the keys they touch (plus the bias) from the servers, and
trains on them. Every ``push_step`` steps it pushes the ``n``/``z`` deltas it
accumulated since its last push and ticks its SSP clock (which may wait for
slower workers).

Local state keeps the worker's own unpushed updates across a pull: for every
pulled key, ``local = pulled + (local - base)`` where ``base`` is what the
worker last saw on (or sent to) the server. (Goline overwrote them.)

The math lives in :mod:`ftrl_ps.ftrl`; the network in :mod:`ftrl_ps.client`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ftrl_ps._kernels import worker as _k
from ftrl_ps.errors import ConfigError
from ftrl_ps.ftrl import FTRL, FTRLParams
from ftrl_ps.libsvm import Batch, LibsvmReader, split_ranges
from ftrl_ps.minibatch import minibatches
from ftrl_ps.prefetch import prefetch


class ParamClient(Protocol):
    """What the worker needs from a parameter-server client (see ftrl_ps.client.PSClient)."""

    def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def push(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray) -> Any: ...

    def clock(self, stats: dict[str, Any] | None = None) -> Any: ...


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker trains and talks to the servers."""

    batch_size: int = 500
    fetch_step: int = 4
    push_step: int = 4
    epochs: int = 1
    chunk_bytes: int = 4 << 20
    skip_bad_lines: bool = False

    def __post_init__(self) -> None:
        for name in ("batch_size", "fetch_step", "push_step", "epochs", "chunk_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class WorkerReport:
    rows: int = 0
    loss_sum: float = 0.0
    steps: int = 0
    pushes: int = 0
    pulls: int = 0
    keys_pushed: int = 0
    keys_pulled: int = 0
    seconds: float = 0.0
    bad_lines: int = 0
    bad_examples: list[Any] = field(default_factory=list)

    @property
    def progressive_logloss(self) -> float:
        return self.loss_sum / self.rows if self.rows else float("nan")


class Worker:
    """Trains on its share of the data against a parameter server.

    Parameters
    ----------
    client : ParamClient
        A registered client (``pull``, ``push``, ``clock``).
    bits : int
        Feature space size (must match the servers' layout).
    params : FTRLParams
        Hyper-parameters (the same on every worker).
    config : WorkerConfig
        Batching and communication periods.
    """

    def __init__(
        self, client: ParamClient, bits: int, params: FTRLParams, config: WorkerConfig
    ) -> None:
        self.client = client
        self.config = config
        # float64 locally: deltas are differences of accumulated sums
        self.model = FTRL(bits, params, dtype="float64")
        self.base = np.zeros_like(self.model.state)
        self._stamp = np.zeros(self.model.state.shape[0], dtype=np.int32)
        self._token = 0
        self.report = WorkerReport()
        self._dirty: list[np.ndarray] = []  # indices trained on since the last push
        self._since_push = 0
        self._started = time.perf_counter()

    # -- communication -------------------------------------------------
    def _keys_of(self, parts: list[np.ndarray]) -> np.ndarray:
        """Sorted unique keys (uint32) of ``parts`` plus the bias."""
        self._token += 1
        indices = np.concatenate(parts) if len(parts) > 1 else parts[0]
        keys: np.ndarray = _k.unique_keys(indices, self.model.bias_key, self._stamp, self._token)
        return keys

    def _pull(self, keys: np.ndarray) -> None:
        n, z = self.client.pull(keys)
        _k.merge_pulled(self.model.state, self.base, keys, n, z)
        self.report.pulls += 1
        self.report.keys_pulled += int(keys.size)

    def push(self, keys: np.ndarray | None = None) -> None:
        """Push every delta accumulated since the last push, then tick the clock.

        ``keys``, if given, must cover every key trained on since the last push
        (sorted, unique, uint32); by default they are computed from the steps.
        """
        if not self._dirty:
            return
        if keys is None:
            keys = self._keys_of(self._dirty)
        self._dirty = []
        delta_n = np.empty(keys.size, dtype=np.float32)
        delta_z = np.empty(keys.size, dtype=np.float32)
        _k.deltas(self.model.state, self.base, keys, delta_n, delta_z)
        self.client.push(keys, delta_n, delta_z)
        _k.commit(self.model.state, self.base, keys)
        self.report.pushes += 1
        self.report.keys_pushed += int(keys.size)
        self._since_push = 0
        self.client.clock(self.stats())

    def stats(self) -> dict[str, Any]:
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        r = self.report
        return {"rows": r.rows, "loss_sum": r.loss_sum, "rows_per_second": r.rows / elapsed}

    # -- training --------------------------------------------------------
    def _rounds(self, batches: Iterator[Batch]) -> Iterator[list[Batch]]:
        round_: list[Batch] = []
        for mb in batches:
            round_.append(mb)
            if len(round_) == self.config.fetch_step:
                yield round_
                round_ = []
        if round_:
            yield round_

    def train_batches(self, batches: Iterator[Batch]) -> None:
        """Train on a stream of reader batches (one epoch of this worker's share)."""
        cfg = self.config
        model = self.model
        for round_ in self._rounds(minibatches(batches, cfg.batch_size)):
            keys = self._keys_of([mb.indices for mb in round_])
            self._pull(keys)
            # a push due right at the end of a round that began with nothing
            # unpushed covers exactly the keys just pulled: reuse them
            reuse = not self._dirty and len(round_) == cfg.push_step
            for mb in round_:
                self.report.loss_sum += model._fit(mb.labels, mb.indptr, mb.indices, mb.values)
                self.report.rows += mb.rows
                self.report.steps += 1
                self._dirty.append(mb.indices)
                self._since_push += 1
                if self._since_push >= cfg.push_step:
                    self.push(keys if reuse else None)

    def run(
        self, source: str | os.PathLike[str], byte_range: tuple[int, int] | None
    ) -> WorkerReport:
        """Train ``epochs`` passes over ``byte_range`` of ``source``, pushing everything."""
        cfg = self.config
        for _ in range(cfg.epochs):
            reader = LibsvmReader(
                source,
                self.model.bits,
                chunk_bytes=cfg.chunk_bytes,
                skip_bad_lines=cfg.skip_bad_lines,
                byte_range=byte_range,
            )
            self.train_batches(prefetch(reader, depth=2))
            self.report.bad_lines += reader.stats.bad_lines
            self.report.bad_examples.extend(reader.stats.bad_examples)
        self.push()
        self.report.seconds = time.perf_counter() - self._started
        return self.report


def share_of(path: str | os.PathLike[str], worker_index: int, num_workers: int) -> tuple[int, int]:
    """The line-aligned byte range of ``path`` that worker ``worker_index`` reads."""
    if not 0 <= worker_index < num_workers:
        raise ConfigError(f"worker index {worker_index} not in [0, {num_workers})")
    return split_ranges(path, num_workers)[worker_index]
