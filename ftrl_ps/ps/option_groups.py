"""Flag groups shared by the options of the commands that train in a cluster.

``ftrl-ps worker`` (:class:`ftrl_ps.ps.worker_main.WorkerOptions`), ``ftrl-ps
train --workers N`` (:class:`ftrl_ps.cluster.local_options.LocalClusterOptions`)
and ``ftrl-ps export`` (:class:`ftrl_ps.ps.export.ExportOptions`) take some of
the same flags; each group is declared once here and mixed into those options
dataclasses. Field names are the flags' names (``--dense-fraction`` ->
``dense_fraction``), as everywhere in the options. The groups are keyword-only,
so a command's own required fields stay first (``WorkerOptions(server, input,
num_workers)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ftrl_ps.data.sources import check_unit_mb
from ftrl_ps.ps.straggle import StraggleConfig

__all__ = ["InputFields", "ModelFields", "TrainingFields"]


@dataclass(frozen=True, kw_only=True)
class ModelFields:
    """``--bits --alpha --beta --l1 --l2 --dtype``: None takes the servers' value
    (or, with a model to resume, the model's; else the defaults)."""

    bits: int | None = None
    alpha: float | None = None
    beta: float | None = None
    l1: float | None = None
    l2: float | None = None
    dtype: str | None = None


@dataclass(frozen=True, kw_only=True)
class InputFields:
    """``--skip-bad-lines --chunk-mb``: how libsvm input is read."""

    skip_bad_lines: bool = False
    chunk_mb: int = 4


@dataclass(frozen=True, kw_only=True)
class TrainingFields:
    """How a worker trains its rows: rounds, merge inputs, hand-out, and the fault
    injection for experiments (``straggle_*``, ``seed``: :mod:`ftrl_ps.ps.straggle`)."""

    dense_fraction: float = 0.5
    batch_size: int | None = None
    fetch_step: int = 4
    push_step: int = 4
    #: lengthen the rounds of a worker that keeps waiting at the SSP bound (ftrl_ps.ps.rounds)
    adaptive_rounds: bool | None = None
    #: steps per push while training alone (the servers' warm start); None: push_step
    #: (the local cluster: from its warm fraction)
    warm_push_step: int | None = None
    retry_seconds: float = 120.0
    straggle_prob: float = 0.0
    straggle_delay: float = 0.0
    straggle_workers: str | None = None
    seed: int = 0
    #: "shares": worker i reads the i-th of N byte ranges of one file; "units": shard 0
    #: hands out small units of the input as workers ask (ftrl_ps.ps.handout); "auto":
    #: shares for one plain file, units otherwise (ftrl_ps.data.sources.split_for)
    split: str = "auto"
    unit_mb: float | None = None  # None: about 16 units per worker

    def straggle(self) -> StraggleConfig:
        """The injected straggling (validated)."""
        return StraggleConfig(self.straggle_prob, self.straggle_delay, self.straggle_workers,
                              self.seed)

    def check_training(self, workers: int) -> None:
        """Raise :class:`~ftrl_ps.errors.ConfigError` for straggle workers that are
        not among ``workers`` or a unit size out of bounds."""
        self.straggle().check_workers(workers)
        check_unit_mb(self.unit_mb)

    def warnings(self) -> list[str]:
        """Settings that are valid but do (almost) nothing, to be said once."""
        said = [self.straggle().idle_reason(), check_unit_mb(self.unit_mb)]
        return [w for w in said if w]
