"""A call running in a background thread until someone waits for it: a worker's
push and clock tick in flight while it numbers the next round's keys.

>>> call = InFlight(lambda a, b: a + b, 2, 3)
>>> call.wait(); call.result
5
>>> failing = InFlight(lambda: 1 / 0)
>>> failing.wait()
Traceback (most recent call last):
...
ZeroDivisionError: division by zero
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["InFlight"]


class InFlight:
    """``fn(*args)`` running in a daemon thread; :meth:`wait` joins it and re-raises."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self._error: BaseException | None = None
        self.rows = 0  # rows trained when the push was made
        self.result: Any = None  # what fn returned
        self._thread = threading.Thread(
            target=self._run, args=(fn, args), name="ftrl-ps-push", daemon=True
        )
        self._thread.start()

    def _run(self, fn: Any, args: tuple[Any, ...]) -> None:
        try:
            self.result = fn(*args)
        except BaseException as exc:  # handed to the waiting thread
            self._error = exc

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error
