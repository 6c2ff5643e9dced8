"""What ``ftrl-ps train --workers N`` is told: :class:`LocalClusterOptions`,
checked before any process of the local cluster (:mod:`ftrl_ps.cluster.local`)
starts."""

from __future__ import annotations

from dataclasses import dataclass, field

from ftrl_ps.data.sources import check_unit_mb
from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.merge import DEFAULT_RULE
from ftrl_ps.ps.straggle import StraggleConfig

__all__ = ["LocalClusterOptions"]


@dataclass(frozen=True)
class LocalClusterOptions:
    """What ``ftrl-ps train --workers N`` is told; field names are the flags' names.

    Model fields left None take the defaults (or, with ``resume``, the saved
    model's values); ``batch_size`` None picks one (:func:`local_batch_size`).
    ``straggle_*`` and ``seed``: fault injection for experiments (ftrl_ps.ps.straggle).
    """

    train: str
    workers: int
    test: str | None = None
    epochs: int = 1
    model: str | None = None
    metrics_json: str | None = None
    quiet: bool = False
    bits: int | None = None
    alpha: float | None = None
    beta: float | None = None
    l1: float | None = None
    l2: float | None = None
    dtype: str | None = None
    resume: str | None = None
    #: the model the hyper-parameters came from (``train --params-from``; recorded
    #: in the saved model's header, the values themselves arrive in the fields above)
    params_from: str | None = None
    skip_bad_lines: bool = False
    chunk_mb: int = 4
    servers: int = 1
    staleness: int | None = 3
    group_size: int | None = None
    worker_timeout: float = 30.0
    dense_fraction: float = 0.5
    merge_rule: str = DEFAULT_RULE
    batch_size: int | None = None
    fetch_step: int = 4
    push_step: int = 4
    adaptive_rounds: bool | None = None
    max_restarts: int = 3
    token: str | None = field(default=None, repr=False)
    checkpoint_interval: float = 10.0
    retry_seconds: float = 120.0
    straggle_prob: float = 0.0
    straggle_delay: float = 0.0
    straggle_workers: str | None = None
    seed: int = 0
    split: str = "auto"  # shares for one plain file, units otherwise (data.sources.split_for)
    unit_mb: float | None = None
    #: share of the input one worker trains alone at the start (local_warm_start)
    warm_fraction: float = 0.05
    #: the lone worker's steps per push in the warm start (None: from warm_fraction)
    warm_push_step: int | None = None

    def straggle(self) -> StraggleConfig:
        """The injected straggling (validated)."""
        return StraggleConfig(self.straggle_prob, self.straggle_delay, self.straggle_workers,
                              self.seed)

    def check(self) -> None:
        """Raise :class:`ConfigError` for options that cannot work or would silently do
        nothing: before any process starts (a worker would fail, be restarted and fail
        again until ``max_restarts``)."""
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1 for a cluster, got {self.workers}")
        if self.servers < 1:
            raise ConfigError("--servers must be >= 1")
        if not 0.0 <= self.warm_fraction < 1.0:
            raise ConfigError(f"--warm-fraction must be in [0, 1), got {self.warm_fraction}")
        if self.max_restarts < 0:
            raise ConfigError("--max-restarts must be >= 0")
        if self.warm_push_step is not None and self.warm_fraction <= 0:
            raise ConfigError("--warm-push-step sets the pushes of the warm start, and "
                              "--warm-fraction 0 has none: drop one of them")
        self.straggle().check_workers(self.workers)
        check_unit_mb(self.unit_mb)

    def warnings(self) -> list[str]:
        """Settings that are valid but do (almost) nothing, to be said once."""
        said = [self.straggle().idle_reason(), check_unit_mb(self.unit_mb)]
        return [w for w in said if w]

