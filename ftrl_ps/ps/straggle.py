"""Fault injection for experiments: workers that sleep before some clock ticks.

Experiment tooling, not a production feature: ``--straggle-prob P
--straggle-delay SECONDS [--straggle-workers I,J,...] [--seed S]`` on
``ftrl-ps train --workers N`` and ``ftrl-ps worker`` make each chosen worker
(default: all) sleep ``SECONDS`` (at most :data:`MAX_DELAY`) before a clock
tick with probability ``P``. ``P = 1`` with one chosen worker is a persistent
straggler; ``P < 1`` gives transient stragglers. ``benchmarks/bench_ssp.py``
uses it to measure what bounded staleness buys.

What is reproducible: the draws come from a generator seeded by ``(S, worker
index)``, so a worker's sequence of sleep decisions, tick after tick, is the
same in every run with the same seed. How many ticks a worker makes is not
fixed: adaptive rounds (``--adaptive-rounds``) lengthen them with the waits,
and which worker trains the warm start alone depends on timing. So the sleeps
of a run are the same every time only with fixed rounds and no warm start
(``--no-adaptive-rounds --warm-fraction 0``).

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

__all__ = ["MAX_DELAY", "StraggleConfig", "Straggler", "parse_worker_list"]

#: the longest sleep a straggler may be given (seconds): beyond it a run of a few
#: ticks lasts for hours, and time.sleep refuses values past the platform's time_t
MAX_DELAY = 3600.0


def parse_worker_list(text: str | None) -> tuple[int, ...] | None:
    """``"I,J,..."`` -> sorted unique worker indices; None -> None (all workers).

    An empty list is an error, not "all": an empty shell variable meant something else.

    >>> parse_worker_list(" 2,0,2 ")
    (0, 2)
    """
    if text is None:
        return None
    if not text.strip():
        raise ConfigError("straggle workers: an empty list; give indices like 0,2 (or leave "
                          "--straggle-workers out for every worker)")
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
        if not (math.isfinite(self.delay) and 0.0 <= self.delay <= MAX_DELAY):
            raise ConfigError(f"straggle delay must be in [0, {MAX_DELAY:g}] seconds, "
                              f"got {self.delay:g}")
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise ConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
        parse_worker_list(self.workers)

    def check_workers(self, num_workers: int) -> None:
        """Raise :class:`ConfigError` if a chosen index is not a worker of ``num_workers``
        (it would never straggle: the injection would silently do nothing)."""
        chosen = parse_worker_list(self.workers) or ()
        outside = [i for i in chosen if i >= num_workers]
        if outside:
            raise ConfigError(
                f"straggle workers {','.join(map(str, outside))}: not a worker index of "
                f"{num_workers} worker(s) (0..{num_workers - 1})")

    def idle_reason(self) -> str | None:
        """Why settings given do nothing (a delay without a probability, or the
        reverse), None when they work or nothing is asked.

        >>> StraggleConfig(delay=0.3).idle_reason()
        'straggle delay 0.3 s with probability 0: no worker straggles (give --straggle-prob)'
        """
        if self.delay > 0 and self.prob == 0:
            return (f"straggle delay {self.delay:g} s with probability 0: no worker "
                    "straggles (give --straggle-prob)")
        if self.prob > 0 and self.delay == 0:
            return (f"straggle probability {self.prob:g} with delay 0: no worker sleeps "
                    "(give --straggle-delay)")
        return None

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
