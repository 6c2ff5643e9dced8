"""What a worker must re-send to a shard that lacks some of its pushes.

:func:`replay_plan` is pure logic on the journal (:mod:`ftrl_ps.ps.journal`) and a shard's stream
record (:mod:`ftrl_ps.ps.dedup`), tested with hypothesis: given the last seq a
shard applied for this worker, the journal entries to replay to it, in order,
each one's ``prev_seq`` chaining onto the one before. If the journal no longer
holds the pushes the shard lacks, :class:`~ftrl_ps.errors.UpdatesLostError`
says which, instead of letting the model silently miss them.
:class:`PushStream` is the worker's side of the stream: numbering, journal,
per-shard chains (the client sends what it says).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ftrl_ps.errors import UpdatesLostError
from ftrl_ps.ps.journal import JournalEntry, PushJournal

__all__ = ["PushStream", "replay_plan"]

_MASK = (1 << 64) - 1


def replay_plan(entries: Sequence[JournalEntry], shard: int, last_seq: int,
                sent_last: int) -> list[JournalEntry]:
    """The entries to send to ``shard`` (which applied up to ``last_seq``), in order.

    ``sent_last`` is the last seq this worker sent to the shard. Raises
    UpdatesLostError if the shard lacks pushes the journal does not hold.
    """
    todo = [e for e in entries if e.has_part(shard) and e.seq > last_seq]
    if last_seq >= sent_last:
        return []
    first_needed = todo[0].prev[shard] if todo else sent_last
    if not todo or first_needed != last_seq:
        raise UpdatesLostError(
            f"shard {shard} applied this worker's pushes up to seq {last_seq}, but the "
            f"pushes after it up to seq {first_needed} are no longer in the journal "
            "(did the shard restart without a checkpoint, or fall back to an older one?): "
            "the model would miss them"
        )
    return todo


class PushStream:
    """A worker index's side of its stream of pushes (docs/durability.md).

    Holds the journal, the last seq, and per shard the last seq sent there
    (``prev``) and the last seq it reported durable. Not thread-safe: one push
    at a time, as the client sends them.
    """

    def __init__(self, journal: PushJournal) -> None:
        self.journal = journal
        self.worker = journal.worker
        m = journal.num_shards
        self.prev = [journal.last_part(s) for s in range(m)]
        self.seq = journal.last.seq if journal.last is not None else 0
        self.durable = [0] * m

    def record(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray,
               splits: np.ndarray, position: int, loss_sum: float) -> JournalEntry:
        """Number the next push, journal it (before it is sent) and return it."""
        from ftrl_ps.ps.dedup import push_digest

        m = self.journal.num_shards
        seq = self.seq + 1
        # shard 0 gets a part of every push, empty if no key is its: it is the
        # commit point (PSClient sends it last; docs/durability.md, section 4)
        parts = [s == 0 or bool(splits[s + 1] > splits[s]) for s in range(m)]
        digests = [
            push_digest(seq, keys[splits[s]:splits[s + 1]], delta_n[splits[s]:splits[s + 1]],
                        delta_z[splits[s]:splits[s + 1]], self.journal.dtype) if parts[s] else 0
            for s in range(m)
        ]
        totals = [(c + 1, (d + digests[s]) & _MASK) if parts[s] else (c, d)
                  for s, (c, d) in enumerate(self.journal.totals())]
        entry = JournalEntry(seq, int(position), float(loss_sum), keys, delta_n, delta_z,
                             list(self.prev), parts, digests, totals)
        self.journal.append(entry)
        self.seq = seq
        for s in range(m):
            if parts[s]:
                self.prev[s] = seq
        return entry

    def plan(self, shard: int, last_seq: int) -> list[JournalEntry]:
        """Entries to replay to ``shard`` that applied up to ``last_seq``; afterwards
        the stream continues from the later of the shard's and the journal's seq."""
        todo = replay_plan(self.journal.entries, shard, last_seq, self.prev[shard])
        if last_seq > self.prev[shard]:  # the shard knows more (a journal-less restart)
            self.prev[shard] = last_seq
            self.seq = max(self.seq, last_seq)
        return todo

    def withdraw_after(self, seq: int, position: int) -> None:
        """Drop the journal's pushes after ``seq`` (a fence withdrew them: the
        input they covered was handed to another worker) so they are never sent
        again. One entry without parts stands in for them: it keeps their last seq
        (never reused), the chains and totals from before them, and the position
        of push ``seq`` (``position`` if the journal no longer holds it)."""
        entries = self.journal.entries
        gone = [e for e in entries if e.seq > seq and any(e.parts)]
        if not gone:
            return
        kept = [e for e in entries if e.seq <= seq]
        at = next((e for e in kept if e.seq == seq), None)
        first, m = gone[0], self.journal.num_shards
        totals = [((c - 1, (d - first.digests[s]) & _MASK) if first.parts[s] else (c, d))
                  for s, (c, d) in enumerate(first.totals)]
        pos = at.position if at is not None else int(position)
        # the rows' summed loss is not known without the push: scaled to the position
        loss = at.loss_sum if at is not None else (
            first.loss_sum * pos / first.position if first.position else 0.0)
        empty = np.zeros(0, np.uint32)
        nothing = np.zeros(0, self.journal.dtype)
        marker = JournalEntry(max(e.seq for e in entries), pos, loss, empty, nothing, nothing,
                              list(first.prev), [False] * m, [0] * m, totals)
        self.journal.replace([*kept, marker])
        self.prev = [marker.last_part(s) for s in range(m)]

    def acknowledged(self, shard: int, durable_seq: int) -> None:
        self.durable[shard] = max(self.durable[shard], durable_seq)

    def release(self) -> None:
        """Drop journal entries that every shard holds durably."""
        self.journal.release(self.durable)
