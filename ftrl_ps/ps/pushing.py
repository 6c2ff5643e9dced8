"""The exactly-once push stream of a registered worker (part of :class:`PSClient`).

:class:`StreamingPushes` holds the registration (epoch) and push-stream side of
the client: registering and claiming the epoch on every shard, numbering and
journaling pushes, sending each part with its ``(worker, epoch, seq, prev_seq,
position)``, replaying what a restarted shard lacks, and, before the worker
finishes, having every shard checkpoint its pushes (docs/durability.md).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ftrl_ps.errors import FTRLPSError, ProtocolError, PushGapError, UpdatesLostError
from ftrl_ps.ps import wire
from ftrl_ps.ps.journal import JournalEntry, PushJournal
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.replay import PushStream
from ftrl_ps.ps.shards import ShardConnections

__all__ = ["StreamingPushes"]


class StreamingPushes:
    """Mixin of :class:`~ftrl_ps.ps.client.PSClient`: registration and the push stream."""

    _net: ShardConnections
    _lock: threading.Lock
    _instance: str
    _hb_thread: threading.Thread | None
    layout: Layout
    dtype: np.dtype
    wire_format: str
    state_dir: Path | None
    stream: PushStream | None
    worker_id: int | None
    worker_index: int | None
    worker_clock: int
    _num_workers: int
    _layout_sent: Layout | None
    runs: list[str | None]
    _identity: str | None = None
    commit_on_shard0: bool = False
    #: rows an earlier process of this index pushed, from the shards' records, when
    #: this one has no journal of them (:meth:`_journal_less_resume`)
    shards_position: int = 0
    _positional: bool = True
    #: :meth:`PSClient.finish` answered (a client left with an error before: :meth:`leave`)
    finished: bool = False
    #: (worker, epoch) of the fences this client applied on every shard
    _fences_applied: set[tuple[int, int]]

    def stop_heartbeat(self, timeout: float | None = None) -> None:  # pragma: no cover - PSClient's
        raise NotImplementedError

    def start_heartbeat(self, interval: float | None = None) -> None:  # pragma: no cover
        raise NotImplementedError

    def register(
        self, worker_index: int | None, num_workers: int, layout: Layout | None = None,
        *, supersede: bool = False, identity: str | None = None, positional: bool = True,
    ) -> int:
        """Register this worker with shard 0 and return its worker id (its epoch).

        ``worker_index=None`` lets the server assign the index (then in
        :attr:`worker_index`). ``supersede`` replaces a live registration of the
        same index (its process is known to be gone). ``identity`` (a stable name
        of this worker's slot, e.g. its container's hostname) lets an auto-indexed
        worker take back the index its previous process held, at once. Then the
        epoch is claimed on every shard and the journal's pushes a shard lacks are
        replayed.

        ``layout`` (default: the servers' layout) is checked by the server;
        a mismatch raises :class:`~ftrl_ps.errors.LayoutMismatchError`.
        ``positional``: the input can be resumed at a row position (a file's
        share; not stdin): without a journal, :attr:`shards_position` is found.
        """
        lay = layout if layout is not None else self.layout
        if self.stream is None:
            # a journal of another run is refused before registering (it writes nothing);
            # an index the server assigns may be any journal's of the (shared) state dir
            for index in ([worker_index] if worker_index is not None else self._journaled()):
                if (path := self._journal_path(index)) is not None:
                    PushJournal.check_file(path, index, self.layout.num_shards, self.dtype,
                                           self.runs)
        answer = self._net.post_json(0, "/v1/workers", {
            "worker_index": worker_index, "num_workers": num_workers,
            "layout": lay.to_dict(), "instance": self._instance,
            "supersede": supersede, "pid": os.getpid(),
            **({"identity": identity} if identity is not None else {}),
        }, idempotent=True).json()
        with self._lock:
            self.worker_id = int(answer["worker_id"])
            self.worker_index = int(answer.get("worker_index", worker_index))
            self.worker_clock = int(answer["clock"])
            self._num_workers, self._layout_sent = num_workers, lay
            self._identity, self._positional = identity, positional
            if self.stream is None or self.stream.worker != self.worker_index:
                path = self._journal_path(self.worker_index)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                self.stream = PushStream(PushJournal(path, self.worker_index,
                                                     self.layout.num_shards, self.dtype,
                                                     self.runs))
        # in commit mode the fence check claims every shard: their answers serve
        # the sync as they are (nothing else of this client ran in between)
        records = self._withdraw_fenced() if self.commit_on_shard0 else None
        if records is not None and self.stream.journal.last is None:
            records = self._withdraw_past_shard0(records)
        claimed: list[dict[str, Any]] = [{} for _ in range(self.layout.num_shards)]

        def sync(shard: int) -> None:
            claimed[shard] = self._sync_shard(shard, None if records is None else records[shard])

        self._in_commit_order(sync, range(self.layout.num_shards))
        self.shards_position = self._journal_less_resume(claimed) if positional else 0
        return self.worker_id

    def _journal_path(self, index: int) -> Path | None:
        return self.state_dir / f"worker-{index}.journal" if self.state_dir is not None else None

    def _journaled(self) -> list[int]:
        """The worker indices with a journal in the state dir (:meth:`_journal_path`'s names)."""
        found = self.state_dir.glob("worker-*.journal") if self.state_dir is not None else ()
        return sorted(int(m[1]) for f in found
                      if (m := re.fullmatch(r"worker-(\d+)\.journal", f.name)))

    def _journal_less_resume(self, records: list[dict[str, Any]]) -> int:
        """Input rows an earlier process of this index trained and pushed, when this
        one has no journal of its pushes (no ``--state-dir``, or another one): the
        shards' records (``records``, claimed) say, if they agree on its last push.
        0 with a journal (its last entry says) and for a fresh index. With units
        handed out (:attr:`commit_on_shard0`) shard 0's record says: what it holds,
        every shard holds (:meth:`_withdraw_past_shard0`).

        Raises UpdatesLostError when they disagree: pushes go to the shards side by
        side, so a push may have reached some and not others (or had no keys for
        some); without the journal nobody can tell, nor send the missing part.
        """
        assert self.stream is not None
        if self.stream.journal.last is not None:
            return 0
        if self.commit_on_shard0:
            return int(records[0]["position"]) if int(records[0]["last_seq"]) else 0
        seqs = [int(r["last_seq"]) for r in records]
        if not any(seqs):
            return 0
        if len(set(seqs)) > 1:
            raise UpdatesLostError(
                f"worker index {self.stream.worker} pushed before, but the shards' records "
                f"of its last push disagree (last seq per shard: {seqs}) and this process "
                "has no journal of its pushes to complete it: start it with the --state-dir "
                "of the process it replaces (or use --split units)"
            )
        return int(records[0]["position"])

    def apply_fences(self, fences: list[dict[str, Any]]) -> None:
        """Apply shard 0's fences (``{"worker", "epoch", "seq"}``, from a work
        answer) on every shard, each once per client: a dead worker's push that
        reached a shard after its last push on shard 0 is withdrawn there
        before its input, handed on, is trained again (docs/durability.md)."""
        for f in fences:
            key = (int(f["worker"]), int(f["epoch"]))
            if key not in self._fences_applied:
                self._fence_everywhere(key[0], key[1], int(f["seq"]))
                self._fences_applied.add(key)

    def _fence_everywhere(self, worker: int, epoch: int, seq: int,
                          shards: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Fence ``worker``'s epochs up to ``epoch`` at ``seq`` on ``shards`` (default:
        every shard); their records, in the order of ``shards``."""
        body = {"epoch": epoch, "seq": seq}
        return self._net.each(
            lambda s: self._net.post_json(s, f"/v1/streams/{worker}/fence", body,
                                          idempotent=True).json(),
            range(self.layout.num_shards) if shards is None else shards)

    def _withdraw_fenced(self) -> list[dict[str, Any]]:
        """Claim this epoch on every shard; for a process of an index whose earlier
        epoch was fenced off (declared dead, its input handed on), withdraw that
        epoch's pushes after the fence's seq on every shard and from the journal,
        so that they are never replayed. Each shard's record, claimed."""
        assert self.stream is not None and self.worker_id is not None
        worker = self.stream.worker
        records = self._net.each(
            lambda s: self._net.post_json(s, f"/v1/streams/{worker}",
                                          {"epoch": self.worker_id}).json(),
            range(self.layout.num_shards))
        fenced = [r for r in records
                  if r.get("fence_seq") is not None and 0 < int(r["fenced"]) < self.worker_id]
        if not fenced:
            return records
        newest = max(fenced, key=lambda r: int(r["fenced"]))
        seq = int(newest["fence_seq"])
        records = self._fence_everywhere(worker, int(newest["fenced"]), seq)
        self.stream.withdraw_after(seq, int(records[0]["position"]))
        return records

    def _withdraw_past_shard0(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Without a journal, in commit mode: withdraw from the other shards a push of
        an earlier process of this index that never reached shard 0 (it died between
        the two; at most one, which those shards keep to withdraw), so that every shard
        holds what shard 0 holds and this process resumes from there. Each shard's
        record, claimed."""
        assert self.stream is not None and self.worker_id is not None
        seq = int(records[0]["last_seq"])
        ahead = [s for s, r in enumerate(records) if int(r["last_seq"]) > seq]
        if not ahead:
            return records
        # every earlier epoch of the index, at shard 0's last push
        done = dict(zip(ahead, self._fence_everywhere(self.stream.worker, self.worker_id - 1,
                                                      seq, ahead), strict=True))
        return [done.get(s, r) for s, r in enumerate(records)]

    def _in_commit_order(self, fn: Any, shards: Any) -> None:
        """``fn(shard)`` for ``shards`` concurrently; with :attr:`commit_on_shard0`,
        shard 0 only after the others (then what shard 0 holds, every shard holds)."""
        shards = list(shards)
        if not self.commit_on_shard0 or 0 not in shards:
            self._net.each(fn, shards)
            return
        self._net.each(fn, [s for s in shards if s != 0])
        fn(0)

    def _reregister(self) -> None:
        """Register the same index again after shard 0 forgot this epoch."""
        assert self.worker_index is not None
        beating = self._hb_thread is not None
        self.stop_heartbeat()
        self.register(self.worker_index, self._num_workers, self._layout_sent, supersede=True,
                      identity=self._identity, positional=self._positional)
        if beating:
            self.start_heartbeat()

    def _post_push(self, shard: int, keys: np.ndarray, dn: np.ndarray, dz: np.ndarray,
                   origin: wire.PushOrigin | None, merge: Any = None) -> dict[str, Any]:
        if self.wire_format == "json":
            obj: dict[str, Any] = wire.to_json(wire.PUSH, keys, (dn, dz), merge)
            if origin is not None:
                obj.update(worker=origin.worker, epoch=origin.epoch, seq=origin.seq,
                           prev_seq=origin.prev_seq, position=origin.position)
            resp = self._net.post_json(shard, "/v1/push", obj, idempotent=origin is not None)
        else:
            body = wire.encode_push(keys, dn, dz, origin=origin, dtype=self.dtype, merge=merge)
            resp = self._net.request(shard, "POST", "/v1/push", content=body,
                                     headers={"Content-Type": wire.BINARY_MEDIA_TYPE},
                                     idempotent=origin is not None)
        answer: dict[str, Any] = resp.json()
        return answer

    def _send_entry(self, shard: int, entry: JournalEntry) -> None:
        """Send ``entry``'s part for ``shard`` (raises PushGapError on a gap)."""
        assert self.stream is not None and self.worker_id is not None
        keys = entry.keys  # once: a spilled entry reads it from its journal file
        a, b = self.layout.split_keys(keys)[shard:shard + 2]
        origin = wire.PushOrigin(self.stream.worker, self.worker_id, entry.seq,
                                 entry.prev[shard], entry.position)
        merge = None if entry.merge is None else tuple(m[a:b] for m in entry.merge)
        answer = self._post_push(shard, keys[a:b], entry.delta_n[a:b],
                                 entry.delta_z[a:b], origin, merge)
        if "durable_seq" not in answer:
            raise ProtocolError(f"shard {shard} answered a push without its stream record")
        self.stream.acknowledged(shard, int(answer["durable_seq"]))

    def _deliver(self, shard: int, entry: JournalEntry) -> None:
        try:
            self._send_entry(shard, entry)
        except PushGapError:  # the shard restarted: claim again, replay what it lacks
            self._sync_shard(shard)

    def _sync_shard(self, shard: int, record: dict[str, Any] | None = None) -> dict[str, Any]:
        """Claim this epoch on ``shard`` (unless ``record`` is its answer to that
        claim already) and replay the pushes it lacks, in order; the claim's record."""
        assert self.stream is not None
        if record is None:
            record = self._net.post_json(shard, f"/v1/streams/{self.stream.worker}",
                                         {"epoch": self.worker_id}).json()
        self.stream.journal.note_run(shard, record.get("run"))  # (it restarted empty)
        self.stream.acknowledged(shard, int(record["durable_seq"]))
        for entry in self.stream.plan(shard, int(record["last_seq"])):
            self._send_entry(shard, entry)
        return record

    def make_durable(self, shards: range | None = None) -> None:
        """Wait until every shard (or those of ``shards``) holds this worker's
        pushes in a checkpoint.

        Called before :meth:`finish` (for every shard but 0, whose finish
        answer does it): a finished worker exits and can no longer replay its
        journal, so a shard that restarted afterwards from an older checkpoint
        would miss its pushes for good. A shard that lost pushes meanwhile (it
        restarted) gets them replayed first. Without a stream (an unregistered
        client) there is nothing to do.
        """
        if self.stream is not None:
            todo = range(self.layout.num_shards) if shards is None else shards
            self._net.each(self._make_durable_shard, todo)
            self.stream.release()

    def _post_finish(self, stats: dict[str, Any] | None, attempts: int = 4) -> None:
        """``POST /v1/workers/{id}/finish`` to shard 0 with the last seq sent to it:
        one checkpoint there then says finished and holds this worker's pushes
        (docs/durability.md, section 4). A shard 0 that restarted and lost some
        answers a gap: they are replayed and it is asked again."""
        body: dict[str, Any] = {} if stats is None else {"stats": stats}
        for _ in range(attempts):
            if self.stream is not None:  # (every shard holds its part of these: make_durable)
                body["sent"], body["sent_to"] = self.stream.prev[0], list(self.stream.prev)
            try:
                answer = self._net.post_json(0, f"/v1/workers/{self.worker_id}/finish", body,
                                             idempotent=True).json()
            except PushGapError:
                self._sync_shard(0)  # it restarted and lost pushes: replay, ask again
                continue
            record = answer.get("stream")
            if self.stream is not None and record is not None:
                self.stream.acknowledged(0, int(record["durable_seq"]))
                self.stream.release()
            return
        raise UpdatesLostError(
            f"shard 0 did not apply this worker's pushes up to seq {body.get('sent')} "
            f"before its finish after {attempts} attempts"
        )

    def abort(self) -> None:
        """Stop retrying (the process stops): requests in progress or to come fail
        after their current attempt instead of retrying for ``retry_seconds``.
        :meth:`leave` still makes its one attempt."""
        self._net.abort()

    def leave(self, timeout: float = 2.0) -> bool:
        """Tell shard 0 this worker's process is stopping (Ctrl-C, SIGTERM, an
        error), so it stops holding back the others now rather than after the
        servers' ``--worker-timeout``, and its units are handed on (fenced off
        as a dead worker's). One attempt of at most ``timeout`` seconds: a process
        that stops is not kept waiting. True if shard 0 took note."""
        if self.worker_id is None:
            return False
        self.stop_heartbeat(timeout)
        # False: gone, or dead already: the worker timeout applies as before
        return self._tell_shard0(f"/v1/workers/{self.worker_id}/leave", {}, timeout)

    def report_online(self, learner: str, rows: int, loss_sum: float) -> bool:
        """Tell shard 0 an online learner's totals (rows trained and pushed, their
        loss sum), which it counts in its status, metrics and exports. One attempt
        of at most 2 s; False if it failed (the next report carries the totals)."""
        return self._tell_shard0("/v1/workers/online",
                                 {"learner": learner, "rows": rows, "loss_sum": loss_sum})

    def _tell_shard0(self, path: str, body: dict[str, Any], timeout: float = 2.0) -> bool:
        """POST ``body`` to shard 0 once (no retries, at most ``timeout`` seconds):
        whether it answered, for calls a stopping or busy process need not wait for."""
        try:
            self._net.post_json(0, path, body, timeout=timeout, retry=False)
        except FTRLPSError:
            return False
        return True

    def _make_durable_shard(self, shard: int, attempts: int = 4) -> None:
        assert self.stream is not None
        for _ in range(attempts):
            sent = self.stream.prev[shard]  # the last seq sent to the shard
            record = self._net.post_json(shard, f"/v1/streams/{self.stream.worker}/durable",
                                         {"epoch": self.worker_id}, idempotent=True).json()
            self.stream.acknowledged(shard, int(record["durable_seq"]))
            if int(record["last_seq"]) >= sent and int(record["durable_seq"]) >= sent:
                return
            self._sync_shard(shard)  # it restarted and lost pushes: replay, ask again
        raise UpdatesLostError(
            f"shard {shard} did not keep this worker's pushes up to seq "
            f"{self.stream.prev[shard]} in a checkpoint after {attempts} attempts"
        )

    def stream_totals(self) -> list[tuple[int, int]]:
        """Per shard: (pushes, digest) of every push part this worker index sent,
        to compare with the shards' ``/v1/streams`` records."""
        return self.stream.journal.totals() if self.stream is not None else []

    def resume_point(self) -> tuple[int, float]:
        """``(position, loss_sum)`` of the last journaled push (0, 0.0 if none):
        a restarted worker continues after ``position`` input rows."""
        last = self.stream.journal.last if self.stream is not None else None
        return (last.position, last.loss_sum) if last is not None else (0, 0.0)

