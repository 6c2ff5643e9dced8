"""What a shard measures about itself, for the metrics endpoint (no Prometheus here).

The parameter-server layer keeps plain numbers; the server layer
(:mod:`ftrl_ps.server.shard_metrics`) turns them into Prometheus metrics when
``/metrics`` is scraped. Two kinds of bookkeeping live here:

* :class:`Buckets` -- a histogram as Prometheus counts it (cumulative ``le``
  buckets, a sum and a count), e.g. the SSP wait time of clock requests;
* *gauge hooks* -- a module that knows a number the operator wants to see
  registers a callable under a name, and every scrape reads it. The shard
  checkpointer publishes the age of the last checkpoint this way::

      state.telemetry.gauge("checkpoint_age_seconds",
                            "seconds since the last complete checkpoint",
                            lambda: time.time() - last_checkpoint_at)

  and ``/metrics`` shows ``ftrl_ps_checkpoint_age_seconds``. A hook that
  returns None (nothing to report yet) or raises is left out of that scrape.

Examples
--------
>>> t = Telemetry()
>>> t.ssp_wait.observe(0.003); t.ssp_wait.observe(2.0)
>>> t.ssp_wait.snapshot()[1:]
(2.003, 2)
>>> t.gauge("answer", "the answer", lambda: 42.0)
>>> [(name, fn()) for name, _, fn in t.gauges()]
[('answer', 42.0)]
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Callable, Sequence

from ftrl_ps.errors import ConfigError

__all__ = ["Buckets", "GaugeHook", "Telemetry", "WAIT_BUCKETS"]

#: upper bounds (seconds) of the SSP wait histogram: sub-millisecond grants to
#: waits that last several server wait timeouts
WAIT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

GaugeHook = Callable[[], "float | None"]
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Buckets:
    """A thread-safe histogram: cumulative counts per upper bound, sum, count."""

    def __init__(self, bounds: Sequence[float] = WAIT_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ConfigError("histogram bounds must be sorted, unique and not empty")
        self.bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Count one observation (negative values count as 0)."""
        value = max(0.0, float(value))
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[tuple[float, int]], float, int]:
        """``([(upper bound, cumulative count), ..., (inf, count)], sum, count)``."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
            running += n
            cumulative.append((bound, running))
        return cumulative, total, running


class Telemetry:
    """The bookkeeping of one shard: SSP wait times and gauge hooks."""

    def __init__(self) -> None:
        #: seconds one clock/wait request waited for the SSP condition (shard 0)
        self.ssp_wait = Buckets(WAIT_BUCKETS)
        self._hooks: dict[str, tuple[str, GaugeHook]] = {}
        self._lock = threading.Lock()

    def gauge(self, name: str, help: str, fn: GaugeHook) -> None:
        """Publish ``fn()`` as the gauge ``ftrl_ps_<name>`` (replaces a hook of that name).

        ``name`` is lower-case letters, digits and ``_`` and should end in its
        unit (``_seconds``, ``_bytes``).
        """
        if not _NAME.match(name):
            raise ConfigError(f"gauge name must match {_NAME.pattern}, got {name!r}")
        with self._lock:
            self._hooks[name] = (help, fn)

    def remove_gauge(self, name: str) -> None:
        """Stop publishing ``name`` (no error if it is not published)."""
        with self._lock:
            self._hooks.pop(name, None)

    def gauges(self) -> list[tuple[str, str, GaugeHook]]:
        """``(name, help, fn)`` of every hook, sorted by name."""
        with self._lock:
            return [(name, h, fn) for name, (h, fn) in sorted(self._hooks.items())]
