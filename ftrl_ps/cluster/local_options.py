"""What ``ftrl-ps train --workers N`` is told: :class:`LocalClusterOptions`,
checked before any process of the local cluster (:mod:`ftrl_ps.cluster.local`)
starts."""

from __future__ import annotations

from dataclasses import dataclass, field

from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.merge import DEFAULT_RULE
from ftrl_ps.ps.option_groups import InputFields, ModelFields, TrainingFields

__all__ = ["LocalClusterOptions"]


@dataclass(frozen=True)
class LocalClusterOptions(TrainingFields, InputFields, ModelFields):
    """What ``ftrl-ps train --workers N`` is told; field names are the flags' names
    (the model, input and training flags it shares with ``ftrl-ps worker``:
    :mod:`ftrl_ps.ps.option_groups`).

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
    resume: str | None = None
    #: the model the hyper-parameters came from (``train --params-from``; recorded
    #: in the saved model's header; the values themselves arrive in the model fields)
    params_from: str | None = None
    servers: int = 1
    staleness: int | None = 3
    group_size: int | None = None
    worker_timeout: float = 30.0
    merge_rule: str = DEFAULT_RULE
    max_restarts: int = 3
    token: str | None = field(default=None, repr=False)
    checkpoint_interval: float = 10.0
    #: share of the input one worker trains alone at the start (local_warm_start)
    warm_fraction: float = 0.05

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
        self.check_training(self.workers)
