"""Where a worker's steps end, when a step is given as the parts it spans.

A worker counts its work in steps of ``batch_size`` rows: it pushes (and ticks
the clock) every ``push_step`` steps and pulls for rounds of ``fetch_step``
steps. :func:`ftrl_ps.data.minibatch.steps` hands a step over as the row
slices of the reader's chunks it spans, without copying them, so a round is a
list of *parts* that are not steps. :class:`StepTracker` groups the steps into
rounds of parts and then, as the worker trains the parts in order, says which
part ends a step. A part that came in some other way (``Worker.train_round``
called with mini-batches, as the stream learner does) is a step of its own.

>>> import numpy as np
>>> from ftrl_ps.data.batch import Batch
>>> b = Batch(np.zeros(3, np.float32), np.arange(4, dtype=np.int64),
...           np.zeros(3, np.int32), np.ones(3, np.float32))  # 3 rows
>>> t = StepTracker()
>>> rounds = list(t.rounds(iter([[b], [b, b]]), lambda: 2))  # steps of 3 and 6 rows
>>> [len(r) for r in rounds], [t.trained(p.rows) for p in rounds[0]]
([3], [True, False, True])
>>> t.trained(5)  # nothing left to track: a part on its own is a step
True
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator

from ftrl_ps.data.batch import Batch

__all__ = ["StepTracker"]


class StepTracker:
    """The rows of the steps read into rounds whose end has not been trained yet."""

    def __init__(self) -> None:
        self._rows: deque[int] = deque()

    def rounds(self, steps: Iterable[list[Batch]],
               steps_per_round: Callable[[], int]) -> Iterator[list[Batch]]:
        """The parts of ``steps`` in rounds of ``steps_per_round()`` steps (asked
        anew for every round: the rounds' length adapts while the worker trains).
        What an earlier call left untrained (a stream given up on) is forgotten."""
        self._rows.clear()
        round_: list[Batch] = []
        count = 0
        for parts in steps:
            round_.extend(parts)
            self._rows.append(sum(p.rows for p in parts))
            count += 1
            if count >= steps_per_round():
                yield round_
                round_, count = [], 0
        if round_:
            yield round_

    def trained(self, rows: int) -> bool:
        """The next part, of ``rows`` rows, was trained: whether it ended a step."""
        if not self._rows:
            return True
        self._rows[0] -= rows
        if self._rows[0] > 0:
            return False
        self._rows.popleft()
        return True
