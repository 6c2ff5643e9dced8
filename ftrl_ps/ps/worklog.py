"""Shard 0's log of the hand-out (:mod:`ftrl_ps.ps.workqueue`), written ahead of every answer.

A checkpoint holds the queue as it was when the checkpoint was written; a
shard 0 killed after that would come back with units handed out since then
marked pending (and hand them to a second worker) and units done since then
marked held (and hand them out again): rows trained twice. So every change
of the queue is appended here *before* the request that made it is answered,
and a restarted shard 0 replays the lines written after its checkpoint (every
line when it has none). The workers' push journals bring the pushes back
(docs/durability.md); this brings back who holds and who finished which unit.

On disk (``<checkpoint dir>/shard-0-work.log``), one JSON object per line, each
written with one ``write`` on an append-only descriptor (a process killed
mid-write leaves a torn line, which is skipped: its request was never
answered; every line starts with a newline, so the next one stands alone)::

    {"seq": 1, "plan": "<id>", "units": [{"id": 0, "part": ..., ...}, ...]}
    {"seq": 2, "set": [[unit, "assigned", worker, rows, position, skipped], ...]}
    {"seq": 90, "snapshot": {<the whole queue, as in a checkpoint>}}

(``position, skipped``: where the unit's worker began it, see
:meth:`ftrl_ps.ps.workqueue.WorkQueue.next`; null when not known.) The log stays
bounded: once the lines appended since the last rewrite pass a limit, the
queue rewrites the file as one snapshot line (:meth:`WorkLog.rewrite`: a new
file, fsynced, renamed over the old one, so a kill leaves one or the other).

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "w.log"
>>> log = WorkLog(path)
>>> log.append({"seq": 1, "set": [[0, "assigned", 1, 0]]})
>>> log.close()
>>> _ = path.open("a").write('\\n{"seq": 2, "se')  # torn by a kill
>>> [line["seq"] for line in WorkLog(path).lines()]
[1]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["WORK_LOG", "WorkLog"]

#: the log's file name in shard 0's checkpoint directory
WORK_LOG = "shard-0-work.log"


class WorkLog:
    """Append-only JSON lines of the hand-out's changes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        #: bytes appended since the file was last rewritten (or opened by this object)
        self.appended = 0

    def lines(self) -> Iterator[dict[str, Any]]:
        """The complete lines written so far, in order (torn lines are skipped)."""
        if not self.path.exists():
            return
        for raw in self.path.read_bytes().split(b"\n"):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # torn by a kill (a restarted shard appends after it on a new line)
            if isinstance(line, dict) and isinstance(line.get("seq"), int):
                yield line

    def append(self, line: dict[str, Any]) -> None:
        """Write ``line`` (one ``write``, newline first so a torn line stays alone)."""
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        data = b"\n" + json.dumps(line, separators=(",", ":")).encode()
        os.write(self._fd, data)
        self.appended += len(data)

    def rewrite(self, line: dict[str, Any]) -> int:
        """Replace the whole log by ``line`` (atomically); returns its size in bytes."""
        data = b"\n" + json.dumps(line, separators=(",", ":")).encode()
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self.close()  # appends go to the new file
        self.appended = 0
        return len(data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
