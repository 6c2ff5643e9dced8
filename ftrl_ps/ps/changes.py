"""Which parameter groups of a shard changed since a version: what a model puller fetches.

A :class:`ChangeLog` numbers the writes of one shard (pushes and loads)
``1, 2, 3, ...`` and keeps, per parameter group, the number of the last write
that touched it. A reader asks :meth:`ChangeLog.since` for the groups written
after version ``v`` and gets the current version with them; next time it
asks from that version. A prediction service refreshing every second thus
fetches only the groups written in that second, not the whole state.

Correctness: a writer updates the values first and stamps its groups after,
under one lock; a reader takes the version and the changed groups under the
same lock and reads the values after. Every write stamped ``<= version`` has
finished its values before the reader looks at them, and a write still in
progress gets a larger stamp, so the next call returns it (maybe twice: a
reader may see a value before its stamp, which is harmless).

>>> log = ChangeLog(num_groups=4, first_group=10)
>>> log.record([11, 13]); log.record([13])
>>> log.since(0)
(2, [11, 13])
>>> log.since(1)
(2, [13])
>>> log.since(2)
(2, [])
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import numpy as np

__all__ = ["INSTANCE_HEADER", "VERSION_HEADER", "ChangeLog"]

#: headers of a ``GET /v1/changes`` answer: the shard's write version and the
#: instance id of its change log
VERSION_HEADER = "X-Ftrl-Ps-Version"
INSTANCE_HEADER = "X-Ftrl-Ps-Instance"


class ChangeLog:
    """Write stamps of the groups ``[first_group, first_group + num_groups)`` of one shard.

    ``instance`` is a random id of this log (a new one after a restart): a
    reader that sees another instance must read everything again.
    """

    def __init__(self, num_groups: int, first_group: int = 0) -> None:
        self.first_group = int(first_group)
        self._stamps = np.zeros(num_groups, dtype=np.int64)
        self._version = 0
        self._lock = threading.Lock()
        self.instance = uuid.uuid4().hex[:16]

    @property
    def version(self) -> int:
        """Number of writes so far."""
        return self._version

    def record(self, groups: Any) -> None:
        """Stamp the groups (global ids) a finished write touched."""
        local = np.asarray(groups, dtype=np.int64) - self.first_group
        with self._lock:
            self._version += 1
            self._stamps[local] = self._version

    def since(self, version: int) -> tuple[int, list[int]]:
        """``(current version, sorted global ids of the groups written after version)``."""
        with self._lock:
            current = self._version
            changed = np.flatnonzero(self._stamps > version)
        return current, (changed + self.first_group).tolist()
