"""Fault injection for experiments: workers that sleep before some clock ticks.

Experiment tooling, not a production feature: ``--straggle-prob P
--straggle-delay SECONDS [--straggle-workers I,J,...] [--seed S]`` on
``ftrl-ps train --workers N`` and ``ftrl-ps worker`` make each chosen worker
(default: all) sleep ``SECONDS`` before a clock tick with probability ``P``,
drawn from a generator seeded by ``(S, worker index)``, so a run's stragglers
are the same every time. ``P = 1`` with one chosen worker is a persistent
straggler; ``P < 1`` gives transient stragglers. ``benchmarks/bench_ssp.py``
uses it to measure what bounded staleness buys.

>>> config = StraggleConfig(prob=1.0, delay=0.0, workers="0,2")
>>> [Straggler(config, i).active for i in range(3)]
[True, False, True]
>>> Straggler(config, 0).before_tick()
0.0
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ftrl_ps.errors import ConfigError

__all__ = ["StraggleConfig", "Straggler", "parse_worker_list"]


def parse_worker_list(text: str | None) -> tuple[int, ...] | None:
    """``"I,J,..."`` -> sorted unique worker indices; None or ``""`` -> None (all workers).

    >>> parse_worker_list(" 2,0,2 ")
    (0, 2)
    """
    if text is None or not text.strip():
        return None
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ConfigError(f"straggle workers must be indices like 0,2,3; got {text!r}")
        out.add(int(part))
    return tuple(sorted(out))


@dataclass(frozen=True)
class StraggleConfig:
    """Who straggles, how often and how long (see the module docstring)."""

    prob: float = 0.0
    delay: float = 0.0
    workers: str | None = None  # "I,J,...", None: every worker
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.prob) and 0.0 <= self.prob <= 1.0):
            raise ConfigError(f"straggle probability must be in [0, 1], got {self.prob}")
        if not (math.isfinite(self.delay) and self.delay >= 0.0):
            raise ConfigError(f"straggle delay must be >= 0 seconds, got {self.delay}")
        parse_worker_list(self.workers)

    @property
    def enabled(self) -> bool:
        return self.prob > 0 and self.delay > 0


class Straggler:
    """The sleeps of one worker: :meth:`before_tick` is called before each clock tick."""

    def __init__(self, config: StraggleConfig, worker_index: int) -> None:
        chosen = parse_worker_list(config.workers)
        self.config = config
        self.active = config.prob > 0 and (chosen is None or worker_index in chosen)
        self._rng = np.random.default_rng([config.seed, worker_index])
        self.sleeps = 0
        self.seconds = 0.0

    def before_tick(self) -> float:
        """Sleep (or not) as drawn; returns the seconds slept."""
        if not self.active or self._rng.random() >= self.config.prob:
            return 0.0
        time.sleep(self.config.delay)
        self.sleeps += 1
        self.seconds += self.config.delay
        return self.config.delay
