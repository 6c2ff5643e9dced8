"""Everything one shard server holds: settings, parameter store, SSP clock, stream
records (dedup), and the push barrier that checkpoints use for a consistent cut."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ftrl_ps.errors import (
    ConfigError,
    ModelFormatError,
    ProtocolError,
    PushGapError,
    WorkerStateError,
)
from ftrl_ps.learn.logs import say
from ftrl_ps.ps import wire
from ftrl_ps.ps.checkpoint import Checkpointer, restore_latest
from ftrl_ps.ps.clock import SSPClock
from ftrl_ps.ps.dedup import PushDeduper, push_digest
from ftrl_ps.ps.shard_settings import ServerSettings
from ftrl_ps.ps.store import ParameterStore
from ftrl_ps.ps.telemetry import Telemetry
from ftrl_ps.ps.worklog import WORK_LOG, WorkLog
from ftrl_ps.ps.workqueue import WorkQueue

__all__ = ["PushBarrier", "ServerState", "load_initial_model"]

log = logging.getLogger(__name__)

#: threads that block in SSP waits (kept apart from the request threadpool so
#: that waiting workers never starve pushes and pulls)
WAIT_THREADS = 64


class PushBarrier:
    """Shared/exclusive lock: pushes share it, a checkpoint's copy excludes them."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._shared:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class ServerState:
    """The state of one shard, shared by all request handlers.

    Shard 0 is the *clock authority*: it owns the worker registry and the SSP
    clock (:attr:`clock`). On other shards :attr:`clock` is None and worker
    routes answer 400 (ConfigError) naming shard 0.
    """

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.layout = settings.layout
        self.store = ParameterStore(
            self.layout, settings.shard_index, settings.dtype, settings.merge_rule,
            (settings.alpha, settings.beta, settings.l1, settings.l2))
        self.clock: SSPClock | None = None
        if settings.is_clock_authority:
            self.clock = SSPClock(
                settings.staleness,
                num_workers=settings.num_workers,
                worker_timeout=settings.worker_timeout,
                registration_timeout=settings.registration_timeout,
                warm_rounds=settings.warm_rounds,
            )
        # shard 0 is the commit point: only the others may hold a push to withdraw
        self.dedup = PushDeduper(durable_on_apply=settings.checkpoint_dir is None,
                                 keep_undo=not settings.is_clock_authority)
        self.barrier = PushBarrier()
        self.exports = threading.BoundedSemaphore(settings.max_exports)
        self.work = WorkQueue()  # hand-out of input units (used on shard 0)
        #: measurements and gauge hooks exported by /metrics (see ps.telemetry)
        self.telemetry = Telemetry()
        self.started_at = time.time()
        #: this shard's cluster run: new when it starts empty, restored from its
        #: checkpoints (a worker's journal of another run is refused: ps.journal)
        self.run_id = uuid.uuid4().hex[:16]
        self.wait_executor = ThreadPoolExecutor(WAIT_THREADS, thread_name_prefix="ssp-wait")
        self.initial_keys = 0
        #: the checkpoint file this shard was restored from (None: started empty)
        self.restored_from: str | None = None
        self.checkpointer: Checkpointer | None = None
        #: when (time.monotonic()) each worker id was marked finished here
        self._finished_at: dict[int, float] = {}
        self._closed = False
        if settings.checkpoint_dir is not None:
            self.checkpointer = Checkpointer(self, settings.checkpoint_dir,
                                             settings.checkpoint_interval)
            path = restore_latest(self, self.checkpointer.directory)
            self.restored_from = str(path) if path is not None else None
            if self.clock is not None:  # the hand-out's changes since that checkpoint
                worklog = WorkLog(self.checkpointer.directory / WORK_LOG)
                if replayed := self.work.attach(worklog):
                    say(log, f"shard 0 replayed {replayed} change(s) of the work hand-out "
                        f"from {worklog.path}", prefix="ftrl-ps server: ")
        if settings.init_model and self.restored_from is None:
            self.initial_keys = load_initial_model(self.store, settings.init_model)

    def start(self) -> None:
        """Start the dead-worker sweeper and the checkpoint thread."""
        if self.clock is not None:
            self.clock.start_sweeper()
        if self.checkpointer is not None:
            self.checkpointer.start()

    def close(self) -> None:
        """Release waiters, stop background threads, write a last checkpoint (once)."""
        if self._closed:
            return
        self._closed = True
        if self.clock is not None:
            self.clock.close()
        self.wait_executor.shutdown(wait=False, cancel_futures=True)
        if self.checkpointer is not None:
            self.checkpointer.stop(final=True)

    def require_clock(self) -> SSPClock:
        """The SSP clock, or ConfigError on shards other than 0."""
        if self.clock is None:
            raise ConfigError(
                f"shard {self.settings.shard_index} is not the clock authority; "
                "send worker registration and clock requests to shard 0"
            )
        return self.clock

    def push(self, msg: wire.Message) -> dict[str, Any]:
        """Apply a decoded PUSH exactly once (see :mod:`ftrl_ps.ps.dedup`); the answer.

        On shard 0 a push from a registered worker is also its heartbeat (an
        unknown, dead or finished epoch is refused there).
        """
        assert msg.keys is not None
        origin, store = msg.origin, self.store
        digest, deltas = 0, None
        if origin is not None:
            if self.clock is not None:
                self.clock.heartbeat(origin.epoch)
            dn = np.asarray(msg.delta_n, store.dtype)
            dz = np.asarray(msg.delta_z, store.dtype)
            digest = push_digest(origin.seq, msg.keys, dn, dz, store.dtype)
            if msg.merge is None:  # summed as it is: it can be withdrawn (a fence)
                deltas = (np.asarray(msg.keys), dn, dz)
        with self.barrier.shared():
            merge = None if msg.merge is None else (msg.merge[0], msg.merge[1], msg.merge[2])
            applied, record = self.dedup.apply(  # merged by the compose rule (ps.merge)
                origin, digest, lambda: store.push(msg.keys, msg.delta_n, msg.delta_z, merge),
                deltas,
            )
        answer: dict[str, Any] = {"applied": applied, "keys": int(msg.keys.size),
                                  "seq": origin.seq if origin is not None else 0}
        if record is not None:
            answer.update(last_seq=record["last_seq"], durable_seq=record["durable_seq"])
        return answer

    def claim(self, worker: int, epoch: int) -> dict[str, Any]:
        """Make ``epoch`` the current incarnation of worker index ``worker`` here.

        Shard 0 checks with its registry that the epoch is the index's live
        registration; every shard refuses an epoch older than one it knows.
        """
        if self.clock is not None and self.clock.current_epoch(worker) != epoch:
            raise WorkerStateError(
                f"epoch {epoch} is not the live registration of worker index {worker}; "
                "register first"
            )
        return self.dedup.claim(worker, epoch)


    def fence(self, worker: int, epoch: int, seq: int) -> dict[str, Any]:
        """Fence off worker index ``worker``'s epochs up to ``epoch`` here and
        withdraw its push applied after ``seq``, if any (docs/durability.md,
        section 4); the record, once a checkpoint holds it (with a checkpoint dir):
        a shard restored from an older one would bring the push back."""
        requested = time.monotonic()
        with self.barrier.shared():
            record = self.dedup.fence(worker, epoch, seq, self.store.withdraw)
        if self.checkpointer is not None:
            self.checkpointer.ensure(requested)
        return record

    def make_durable(self, worker: int, epoch: int) -> dict[str, Any]:
        """Persist every push of worker index ``worker`` applied so far; its record.

        With a checkpoint dir: a checkpoint whose cut is later than the record's
        last change (:meth:`Checkpointer.ensure`), so the record's
        ``durable_seq`` covers each push answered before this call. A finishing
        worker asks every shard (docs/durability.md, section 4); when several
        finish together, a checkpoint written for one already holds the others'
        pushes, and none is written for them. The epoch must be the index's
        current one (as for :meth:`claim`).
        """
        record = self.claim(worker, epoch)
        if self.checkpointer is not None:
            self.checkpointer.ensure(self.dedup.changed_at(worker))
            record = self.claim(worker, epoch)  # durable_seq as that checkpoint left it
        return record

    def finish_worker(self, worker_id: int, stats: dict[str, float] | None = None,
                      sent: int | None = None) -> dict[str, Any] | None:
        """Mark the worker finished (shard 0) with its last ``stats`` (if given) and,
        with a checkpoint dir, persist that before answering: a restarted shard 0
        still knows the worker finished.

        ``sent``: the last seq the worker sent to this shard. Its pushes up to
        there must all be applied (else :class:`PushGapError`: this shard
        restarted and lost some, the worker replays them first); the same
        checkpoint then holds them, so the worker need not ask for
        :meth:`make_durable` here, and its stream record is returned.
        """
        clock = self.require_clock()
        index = None
        if sent is not None:
            index = clock.worker(worker_id).index
            applied = self.dedup.last_seq(index)
            if applied < sent:
                raise PushGapError(
                    f"worker {index} finishes after push {sent}, but this shard applied up "
                    f"to seq {applied}: replay the missing pushes first"
                )
        if clock.finish(worker_id, stats):
            self._finished_at[worker_id] = time.monotonic()
        if self.checkpointer is not None:
            # a checkpoint begun after the mark (a repeated finish: the one written
            # for the first, unless the stream changed since); not marked here (a
            # shard restored finished, or the first call not done yet): a new one
            changed = self._finished_at.get(worker_id, time.monotonic())
            if index is not None:
                changed = max(changed, self.dedup.changed_at(index))
            self.checkpointer.ensure(changed)
        return None if index is None else self.dedup.record(index)


def load_initial_model(store: ParameterStore, path: str | Path) -> int:
    """Load the keys of ``store``'s shard range from a model file; returns how many.

    Uses :func:`ftrl_ps.core.modelio.load_model` (``.bits``, ``.keys``, ``.n``, ``.z``).
    """
    try:
        from ftrl_ps.core.modelio import load_model
    except ImportError as exc:  # pragma: no cover - modelio is part of the package
        raise ConfigError("--init-model needs ftrl_ps.core.modelio (not available)") from exc
    model = load_model(path)
    if int(model.bits) != store.layout.bits:
        raise ConfigError(
            f"--init-model {path} has bits={model.bits}, the server has bits={store.layout.bits}"
        )
    keys = np.asarray(model.keys)
    lo, hi = np.searchsorted(keys, [store.begin, store.end])
    try:
        store.load(keys[lo:hi], np.asarray(model.n)[lo:hi], np.asarray(model.z)[lo:hi])
    except ProtocolError as exc:
        raise ModelFormatError(f"model file {path}: {exc}") from exc
    return int(hi - lo)
