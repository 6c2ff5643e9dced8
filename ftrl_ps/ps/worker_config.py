"""How a worker trains and talks to the servers: :class:`WorkerConfig`, checked when made.

Batching (``batch_size`` rows a step, ``fetch_step`` steps a round, a push every
``push_step`` steps), the merge rule it expects of the servers, the rounds'
length and the warm start's pushes; :class:`ftrl_ps.ps.worker.Worker` takes
one (and re-exports the class: most callers import it from there).

>>> WorkerConfig(batch_size=50).push_step
4
>>> WorkerConfig(push_step=0)
Traceback (most recent call last):
    ...
ftrl_ps.errors.ConfigError: push_step must be >= 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass

from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.merge import RULES

__all__ = ["WorkerConfig"]


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker trains and talks to the servers."""

    batch_size: int = 500
    fetch_step: int = 4
    push_step: int = 4
    epochs: int = 1
    chunk_bytes: int = 4 << 20
    skip_bad_lines: bool = False
    #: how the servers merge pushes (ftrl_ps.ps.merge.RULES). None: the rule they announce
    #: (:func:`ftrl_ps.ps.merge.servers_rule`); another rule is a ConfigError.
    merge_rule: str | None = None
    #: ``threshold`` and ``contraction`` rules: workers training concurrently
    num_workers: int = 1
    #: a key in this share of a push's rows is dense (``compose``: rho = 0)
    dense_fraction: float = 0.5
    #: lengthen the rounds of a worker that keeps waiting for slower ones (see
    #: :class:`ftrl_ps.ps.rounds.RoundLength`); False: every round is ``fetch_step``
    #: steps; None: as :func:`ftrl_ps.ps.rounds.adaptive_by_default` says for the servers
    adaptive_rounds: bool | None = None
    #: while this worker trains alone (the servers' warm start), push and tick every
    #: this many steps instead of ``push_step`` (None: ``push_step``), fewer or more
    #: (ftrl_ps.cluster.local.local_warm_start: the warm start's rows in one tick)
    warm_push_step: int | None = None

    def __post_init__(self) -> None:
        if self.merge_rule is not None and self.merge_rule not in RULES:
            raise ConfigError(f"merge_rule must be one of {RULES}, got {self.merge_rule!r}")
        if not self.dense_fraction > 0:
            raise ConfigError(f"dense_fraction must be > 0, got {self.dense_fraction}")
        for name in ("batch_size", "fetch_step", "push_step", "epochs", "chunk_bytes",
                     "num_workers", "warm_push_step"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
