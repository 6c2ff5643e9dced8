"""Exactly-once pushes: per-worker sequence numbers.

Each worker numbers its pushes 1, 2, 3, ... and sends the same number again
when it retries a push whose answer it did not get. Every shard remembers the
last sequence number it applied per worker id; a push with a number at or
below it is acknowledged and NOT applied again. A worker sends its pushes one
at a time (the client waits for every shard's answer), so the numbers a shard
sees from one worker only grow. Pushes of one worker are applied under that
worker's lock, so a retry racing with its still-running original cannot be
applied twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["PushDeduper"]


class _Entry:
    __slots__ = ("lock", "last_seq")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_seq = 0


class PushDeduper:
    """Last applied push sequence number of every worker id seen.

    Examples
    --------
    >>> dedup = PushDeduper()
    >>> total = []
    >>> dedup.apply(7, 1, lambda: total.append(1)), dedup.apply(7, 1, lambda: total.append(1))
    (True, False)
    >>> total
    [1]
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}
        self.duplicates = 0

    def apply(self, worker_id: int | None, seq: int, action: Callable[[], None]) -> bool:
        """Run ``action`` unless ``(worker_id, seq)`` was already applied.

        ``worker_id=None`` or ``seq=0`` means "no deduplication": always run.
        Returns True if the action ran. If ``action`` raises, the sequence
        number is not recorded (a corrected retry may be applied).
        """
        if worker_id is None or seq == 0:
            action()
            return True
        with self._lock:
            entry = self._entries.get(worker_id)
            if entry is None:
                entry = self._entries[worker_id] = _Entry()
        with entry.lock:
            if seq <= entry.last_seq:
                with self._lock:
                    self.duplicates += 1
                return False
            action()
            entry.last_seq = seq
            return True

    def last_seq(self, worker_id: int) -> int:
        """Last applied sequence number of ``worker_id`` (0 if none)."""
        with self._lock:
            entry = self._entries.get(worker_id)
        return 0 if entry is None else entry.last_seq
