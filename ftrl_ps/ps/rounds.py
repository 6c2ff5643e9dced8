"""How long a worker's rounds are: ``fetch_step`` steps, longer while it waits for slower ones.

Under SSP (Ho et al., NIPS 2013) a worker more than ``staleness`` clock ticks
ahead of the slowest live worker waits before its next pull. With a worker
that is slow at every tick (a persistent straggler) the others spend most of
the pass waiting, whatever work they are handed. Measured per wait,
:class:`RoundLength` makes the rounds of a worker that twice in a row waited
longer than it had trained since its previous wait longer, so that it ticks at
the slow worker's pace and trains through the time it would have waited. The
bound itself is unchanged: it counts ticks, and a tick still ends every round.
A worker whose own ticks are slow (a slow link) waits for them the same way and
makes longer rounds too: fewer ticks, fewer delays. The sleep that
``--straggle-delay`` injects before a tick is not counted as a wait (the
worker's own ``Worker._sync`` passes the tick's time only): the injected
straggler stays slow at every tick, as the experiments of issue 12 intend.
On by default at a bounded staleness ``s >= 1`` (``--adaptive-rounds`` /
``--no-adaptive-rounds`` choose): docs/algorithm.md section 9 has the
measurements that made it the default.
"""

from __future__ import annotations

import time

__all__ = ["GROW_AFTER", "GROW_WHEN", "MAX_ROUND_SCALE", "RoundLength", "SHRINK_WHEN",
           "adaptive_by_default"]

#: a round (and a push) is at most this many times ``fetch_step`` (``push_step``) steps
MAX_ROUND_SCALE = 16
#: grow the rounds after a wait longer than this share of the time trained before it
GROW_WHEN = 1.0
#: ... after this many such waits in a row (one long wait is noise, not a straggler)
GROW_AFTER = 2
#: shrink them (by a quarter) after a wait shorter than this share
SHRINK_WHEN = 0.05


def adaptive_by_default(staleness: int | None) -> bool:
    """Whether rounds adapt when the flag is not given: under a bounded staleness
    ``s >= 1``. At ``s = 0`` (BSP) every round waits for the slowest by design, and
    asynchronously (None) no round waits.

    >>> [adaptive_by_default(s) for s in (0, 1, 3, None)]
    [False, True, True, False]
    """
    return isinstance(staleness, int) and not isinstance(staleness, bool) and staleness >= 1


class RoundLength:
    """How many times ``fetch_step`` (and ``push_step``) steps the next round has.

    After the :data:`GROW_AFTER`-th wait in a row of ``w`` seconds that followed
    ``t`` seconds of training with ``w > GROW_WHEN * t``, the length is
    multiplied by ``(t + w) / t`` (the round that would have filled the wait);
    after a wait with ``w < SHRINK_WHEN * t`` it is multiplied by 0.75; never
    below 1 or above :data:`MAX_ROUND_SCALE`. The factor is the length rounded down.

    >>> r = RoundLength()
    >>> r._since = 0.0  # times in binary fractions of a second, so the sums are exact
    >>> def wait(trained, waited):
    ...     r.waited(started=r._since + trained, ended=r._since + trained + waited)
    >>> wait(0.25, 0.75); r.factor   # one long wait: maybe noise
    1
    >>> wait(0.25, 0.75); r.factor   # the second in a row: x (0.25 + 0.75) / 0.25
    4
    >>> wait(1.0, 0.0); r.factor   # no wait: shrink by a quarter
    3
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.scale = 1.0
        self._long = 0  # long waits in a row
        self._since = time.perf_counter()  # the end of the last wait

    @property
    def factor(self) -> int:
        """The current multiple of ``fetch_step`` and ``push_step`` (1 when disabled)."""
        return int(self.scale)

    def waited(self, started: float, ended: float, idle: float | None = None) -> None:
        """Record a wait for the last push and clock tick from ``started`` to ``ended``,
        of which ``idle`` seconds (default: all) were spent waiting for other workers."""
        trained = max(started - self._since, 1e-6)
        waited = max(ended - started if idle is None else idle, 0.0)
        self._since = ended
        if not self.enabled:
            return
        if waited > GROW_WHEN * trained:
            self._long += 1
            if self._long >= GROW_AFTER:
                self.scale = min(float(MAX_ROUND_SCALE), self.scale * (trained + waited) / trained)
        else:
            self._long = 0
            if waited < SHRINK_WHEN * trained:
                self.scale = max(1.0, self.scale * 0.75)
