"""Has a cluster run finished? Every configured worker index, from shard 0's clock.

A run is *complete* when each worker index ``0 .. num_workers-1`` has a worker
that finished its share, or, with work handed out in units (``--split units``),
when shard 0 records every unit done and no worker is live any more: a dead
worker's units were taken over and trained by the others (docs/durability.md).
The clock's own view is not enough for that: once its registration timeout has
passed it stops listing indices that never registered (they no longer hold back
the others), and a dead worker no longer counts as live. An export that waited
only for "no live worker" would then save a model trained on part of the data
and say nothing; this module names what is missing instead. A run is *stalled*
when only a new worker can change it: none is live, and the indices that never
registered are no longer expected by the clock (its registration timeout has
passed) or some died.

>>> snap = {"num_workers": 3, "workers": [
...     {"index": 0, "state": "finished"}, {"index": 1, "state": "dead"}],
...     "missing_indices": []}
>>> p = RunProgress.from_snapshot(snap)
>>> p.complete, p.stalled, p.finished, p.dead, p.missing
(False, True, (0,), (1,), (2,))
>>> early = {"num_workers": 2, "workers": [{"index": 0, "state": "finished"}],
...          "missing_indices": [1]}          # the clock still expects worker 1
>>> RunProgress.from_snapshot(early).stalled
False
>>> p.describe()
'1 of 3 configured workers finished; never registered: worker 2; died and not replaced: worker 1'
>>> units = {"num_workers": 2, "workers": [
...     {"index": 0, "state": "dead"}, {"index": 1, "state": "finished"}]}
>>> RunProgress.from_snapshot(units, {"plan": "p", "units": 9, "done": 9}).complete
True
>>> RunProgress.from_snapshot(units, {"plan": "p", "units": 9, "done": 8}).complete
False
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ftrl_ps.ps.registry import online_totals

__all__ = ["RunProgress", "workers_text"]


def workers_text(indices: Sequence[int]) -> str:
    """``worker 2`` / ``workers 0, 3``: indices in words (status lines, log lines)."""
    return ("worker " if len(indices) == 1 else "workers ") + ", ".join(map(str, indices))


@dataclass(frozen=True)
class RunProgress:
    """Where each configured worker index stands.

    Attributes
    ----------
    expected : int or None
        The configured number of workers (None: the servers were not told and
        no worker has registered yet).
    finished, live, dead, missing : tuple of int
        Worker indices whose latest worker finished / is live / was declared
        dead; indices that never registered. An index is in exactly one of
        them (a finished worker wins over a dead predecessor).
    expecting : bool
        The clock still expects the missing indices (its registration
        timeout has not passed since the first registration).
    """

    expected: int | None
    finished: tuple[int, ...]
    live: tuple[int, ...]
    dead: tuple[int, ...]
    missing: tuple[int, ...]
    expecting: bool = False
    #: a plan of work units is loaded and every unit is done (``--split units``)
    units_done: bool = False
    #: rows online learners (``serve --learn``, outside the SSP clock) pushed
    online_rows: int = 0
    #: shards that lack pushes of finished workers (ftrl_ps.ps.export.lacking_pushes),
    #: in words; the run is not complete then ("": none)
    lost: str = ""

    @classmethod
    def from_snapshot(cls, snapshot: Mapping[str, Any],
                      work: Mapping[str, Any] | None = None) -> RunProgress:
        """From shard 0's clock snapshot (``/v1/status`` -> ``clock``) and its work
        queue's summary (``/v1/status`` -> ``work``), if any."""
        expected = snapshot.get("num_workers")
        states: dict[int, set[str]] = {}
        for w in snapshot.get("workers") or []:
            states.setdefault(int(w["index"]), set()).add(str(w["state"]))
        finished = {i for i, s in states.items() if "finished" in s}
        live = {i for i, s in states.items() if "live" in s} - finished
        dead = set(states) - finished - live
        missing = set(range(expected or 0)) - set(states)
        return cls(
            expected=None if expected is None else int(expected),
            finished=tuple(sorted(finished)),
            live=tuple(sorted(live)),
            dead=tuple(sorted(dead)),
            missing=tuple(sorted(missing)),
            expecting=bool(snapshot.get("missing_indices")),
            units_done=bool(work and work.get("plan") and work.get("units")
                            and work.get("done") == work.get("units")),
            online_rows=online_totals(snapshot)[0],
        )

    @property
    def online_only(self) -> bool:
        """No SSP worker ever registered, and online learners pushed rows: a cluster
        that learns through ``serve --learn`` only (it has no shares to finish)."""
        return bool(self.online_rows) and not (self.finished or self.live or self.dead)

    @property
    def complete(self) -> bool:
        """Every configured index has a finished worker, or every work unit is done
        and no worker is live (and no shard lost pushes of a finished one)."""
        if self.lost:
            return False
        if self.units_done and not self.live and self.finished:
            return True
        return self.expected is not None and set(range(self.expected)) <= set(self.finished)

    @property
    def stalled(self) -> bool:
        """Only a new worker can change it: not complete, no worker live, and no
        missing index still within the clock's registration timeout (or one died)."""
        if self.complete or self.live or self.expected is None:
            return False
        return bool(self.dead) or not self.expecting

    def describe(self) -> str:
        """One line: how many finished, and which indices are live, missing or dead."""
        online = (f"; {self.online_rows:,} rows learned online (serve --learn, outside the "
                  "SSP workers)") if self.online_rows else ""
        return self._describe() + online

    def _describe(self) -> str:
        if self.expected is None:
            return "no worker has registered yet"
        parts = [f"{len(self.finished)} of {self.expected} configured workers finished"]
        if self.units_done:
            parts.append("every work unit done")
        if self.live:
            parts.append(f"running: {workers_text(self.live)}")
        if self.missing:
            parts.append(f"never registered: {workers_text(self.missing)}")
        if self.dead:
            parts.append(f"died and not replaced: {workers_text(self.dead)}")
        if self.lost:
            parts.append(self.lost)
        return "; ".join(parts)
