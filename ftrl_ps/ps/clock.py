"""Stale Synchronous Parallel (SSP) clock (Ho et al., NIPS 2013).

Each worker has a *clock*: the number of ticks (``clock()`` calls) it has done.
A worker at clock ``c`` may proceed iff ``c - min_live <= staleness``, where
``min_live`` is the smallest clock among the *live* workers. ``staleness=0`` is
bulk-synchronous (lockstep); ``staleness=None`` (or ``math.inf``) is fully
asynchronous. Waiting is a :class:`threading.Condition`, never a sleep loop.

Who counts in ``min_live``
--------------------------
* registered workers that are neither finished nor dead;
* **missing** worker indices (the expected ``num_workers`` is known), counted
  at clock 0 until they register, so a late worker cannot be overtaken by more
  than ``staleness`` clocks. ``registration_timeout`` seconds after the FIRST
  registration, still-missing indices stop counting (they are treated as dead);
  if one registers later it joins at the current ``min_live`` clock.

Warm start
----------
With ``warm_rounds`` R > 0 one worker trains the first R rounds alone and the
others wait before their first pull (:mod:`ftrl_ps.ps.warmstart`); the lone
worker's pushes are merged as one worker's (:meth:`SSPClock.alone`).

Life cycle of a worker: ``live`` -> ``finished`` (``finish()``) or ``dead`` (no
heartbeat for ``worker_timeout`` seconds, or at once by ``leave()``; every clock
call from the worker is a heartbeat, and a worker blocked in wait() is alive). Finished and
dead workers leave the minimum and wake the waiters. A dead worker that comes
back gets :class:`~ftrl_ps.errors.WorkerStateError` and must register again;
its index then gets a new worker id that starts at the current ``min_live``.
Registration is idempotent for the same ``(worker_index, instance)``.

A worker id is the registration's *epoch*, never reused, also across restarts
(docs/durability.md; checkpoint data: ``ps/registry.py``).

Dead workers are found by :meth:`SSPClock.sweep`, which every call runs and
which :meth:`SSPClock.start_sweeper` runs periodically in a daemon thread.
Heartbeat ages use ``time_source`` (fake it in tests); wait timeouts use real
time.

Examples
--------
>>> clock = SSPClock(staleness=1, num_workers=2)
>>> a = clock.register(0, 2)
>>> b = clock.register(1, 2)
>>> clock.tick(a), clock.wait(a, timeout=0)
(1, True)
>>> clock.tick(a), clock.wait(a, timeout=0)
(2, False)
>>> clock.tick(b), clock.wait(a, timeout=0)
(1, True)
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ftrl_ps.errors import ConfigError, LayoutMismatchError, UnknownWorkerError, WorkerStateError
from ftrl_ps.ps.registry import DEAD, FINISHED, LIVE, RegistryState, WorkerInfo, refusal
from ftrl_ps.ps.warmstart import WarmStart

log = logging.getLogger(__name__)

__all__ = ["SSPClock", "WorkerInfo"]
def _check_staleness(staleness: int | float | None) -> int | None:
    if staleness is None or (isinstance(staleness, float) and math.isinf(staleness)):
        return None
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        raise ConfigError(f"staleness must be an int >= 0, None or inf, got {staleness!r}")
    return staleness


class SSPClock(RegistryState):
    """SSP clock authority for one cluster.

    Parameters
    ----------
    staleness : int or None
        Maximum clock gap between the fastest and slowest live worker;
        ``0`` = BSP, ``None``/``math.inf`` = asynchronous.
    num_workers : int, optional
        Expected number of workers. If omitted, the first registration sets it.
    worker_timeout : float, default 30
        Seconds without a heartbeat after which a worker is dead.
    registration_timeout : float, default 60
        Seconds after the first registration after which missing workers stop
        holding back the others.
    time_source : callable, default time.monotonic
        Clock for heartbeat ages (fake it in tests).
    warm_rounds : int, default 0
        Rounds one worker trains alone at the start (see *Warm start*); 0: none.
    """

    def __init__(self, staleness: int | float | None, *, num_workers: int | None = None,
                 worker_timeout: float = 30.0, registration_timeout: float = 60.0,
                 time_source: Callable[[], float] = time.monotonic,
                 warm_rounds: int = 0) -> None:
        self.staleness = _check_staleness(staleness)
        self._warm = WarmStart(warm_rounds)  # its rounds, its lone worker
        if num_workers is not None:
            self._check_num_workers(num_workers)
        if not worker_timeout > 0 or not registration_timeout >= 0:
            raise ConfigError("worker_timeout must be > 0 and registration_timeout >= 0")
        self.num_workers = num_workers
        self.worker_timeout = float(worker_timeout)
        self.registration_timeout = float(registration_timeout)
        self._now = time_source
        self._cond = threading.Condition(threading.Lock())
        self._workers: dict[int, WorkerInfo] = {}
        self._by_index: dict[int, WorkerInfo] = {}
        self._first_registration: float | None = None
        self._missing_expired = False
        self._last_epoch = 0
        self._online = {}
        self.max_gap_allowed = 0
        self._sweeper: threading.Thread | None = None
        self._stop_sweeper = threading.Event()
        self._closed = False

    # --- registration -----------------------------------------------------------
    def register(
        self, worker_index: int | None, num_workers: int, instance: str | None = None,
        *, supersede: bool = False, pid: int | None = None, identity: str | None = None,
    ) -> int:
        """Register worker ``worker_index`` of ``num_workers``; returns its worker id
        (= its epoch).

        ``worker_index=None`` asks the clock to assign one: the lowest index
        that never registered or whose worker was marked dead, or the one the
        same ``identity`` held (superseding it: the identity's process was
        restarted). ``supersede`` takes over a live registration (its process
        is known to be gone).

        Raises
        ------
        LayoutMismatchError
            ``num_workers`` differs from the expected number.
        WorkerStateError
            The index is already registered and live (under another
            ``instance``, unless ``supersede``) or has finished.
        """
        self._check_num_workers(num_workers)
        if worker_index is not None and (
            isinstance(worker_index, bool) or not isinstance(worker_index, int)
        ):
            raise ConfigError(f"worker_index must be an int, got {worker_index!r}")
        with self._cond:
            if self.num_workers is None:
                self.num_workers = num_workers
            elif num_workers != self.num_workers:
                raise LayoutMismatchError(
                    f"the cluster expects {self.num_workers} workers, "
                    f"this worker says {num_workers}"
                )
            if worker_index is None:
                worker_index, same = self._free_index_locked(num_workers, instance, identity)
                supersede = supersede or same
            if not 0 <= worker_index < num_workers:
                raise LayoutMismatchError(
                    f"worker_index {worker_index} outside [0, {num_workers})")
            now = self._now()
            self._sweep_locked(now)
            old = self._by_index.get(worker_index)
            if old is not None and old.state == LIVE:
                if instance is not None and old.instance == instance:
                    old.last_seen = now
                    return old.worker_id  # a retried registration
                if supersede:
                    old.state, old.superseded_by = DEAD, -1
                    self._cond.notify_all()
            if old is not None and old.state == LIVE:
                seen = now - old.last_seen
                raise WorkerStateError(f"worker index {worker_index} is already registered as "
                                       f"worker id {old.worker_id}, alive (seen {seen:.0f} s ago): "
                                       "if its process is gone, start this one with --supersede,"
                                       " or wait for the servers' --worker-timeout")
            if old is not None and old.state == FINISHED:
                raise WorkerStateError(f"worker index {worker_index} has already finished")
            if old is None and not self._missing_expired:
                start = 0  # a missing worker counted at 0 until now
            else:  # a dead worker rejoining, or a latecomer after the deadline
                live_min = self._min_live_locked()
                start = live_min if live_min is not None else (old.clock if old else 0)
            if self._first_registration is None:
                self._first_registration = now
            self._last_epoch = max(self._last_epoch + 1, time.time_ns() // 1000)  # unix us
            info = WorkerInfo(self._last_epoch, worker_index, instance, start, now, pid=pid,
                              identity=identity)
            self._workers[info.worker_id] = info
            if old is not None and old.superseded_by == -1:
                old.superseded_by = info.worker_id
            self._by_index[worker_index] = info
            self._cond.notify_all()
            return info.worker_id

    # --- per-worker calls -------------------------------------------------------
    def tick(
        self, worker_id: int, stats: dict[str, float] | None = None, expected: int | None = None
    ) -> int:
        """Advance the worker's clock by one and return the new clock.

        ``expected`` (the clock the caller wants to reach) makes retries
        idempotent: if the clock already equals ``expected`` nothing happens;
        if it is neither ``expected`` nor ``expected - 1`` -> WorkerStateError
        (a worker restored from an older checkpoint jumps forward instead).
        ``stats`` (small dict of numbers) is stored for the status page.
        """
        with self._cond:
            w = self._live_worker(worker_id)
            if stats is not None:
                w.stats = dict(stats)
            if expected is not None and expected == w.clock:
                return w.clock
            if expected is not None and w.restored and expected > w.clock:
                w.clock = expected - 1
            w.restored = False
            if expected is not None and expected != w.clock + 1:
                raise WorkerStateError(
                    f"worker {worker_id} is at clock {w.clock}; cannot tick to {expected}"
                )
            w.clock += 1
            self._cond.notify_all()
            return w.clock

    def wait(self, worker_id: int, timeout: float | None = None) -> bool:
        """Block until the worker may proceed (``clock - min_live <= staleness``).

        Returns ``True`` when allowed, ``False`` if ``timeout`` seconds (real
        time) passed first; ``None`` waits without limit.
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        held: float | None = None
        with self._cond:
            w = self._live_worker(worker_id)
            w.active_waits += 1
            try:
                while True:
                    self._sweep_locked(self._now())
                    if self._closed:
                        return False
                    if w.state != LIVE:
                        raise WorkerStateError(f"worker {worker_id} is {w.state}")
                    live_min = self._min_live_locked()
                    gap = w.clock - (live_min if live_min is not None else w.clock)
                    turn = self._warm.turn(w, self._workers)
                    if turn is True:  # training alone: the others are held, not slow
                        return True
                    if turn is None and (self.staleness is None or gap <= self.staleness):
                        self.max_gap_allowed = max(self.max_gap_allowed, gap)
                        return True
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    if w.held_since is None:
                        w.held_since = held = time.monotonic()
                    self._cond.wait(remaining)
            finally:
                w.active_waits -= 1
                w.last_seen = self._now()
                if held is not None:  # this call started the worker's hold
                    w.held_seconds += time.monotonic() - held
                    w.held_since = None

    def state(self) -> dict[str, Any]:
        """The registry's restorable state and the warm start's (who trains alone)."""
        saved = super().state()
        with self._cond:
            saved["warm_start"] = self._warm.state()
        return saved

    def restore(self, state: dict[str, Any]) -> None:
        """Load :meth:`state` (a checkpoint without the warm start's: as new)."""
        super().restore(state)
        with self._cond:
            self._warm.restore(state.get("warm_start"))

    def alone(self, worker_id: int) -> bool:
        """Whether ``worker_id`` trains alone in the warm start now: nobody else
        pushes while it does."""
        with self._cond:
            return self._warm.alone(worker_id, self._workers)

    def warm_done(self, worker_id: int) -> bool:
        """The warm start's lone worker has all its warm pushes on the servers: the
        warm start is over (the waiters wake) without waiting for its tick. False
        if it was over already or ``worker_id`` is another worker (ignored)."""
        with self._cond:
            self._live_worker(worker_id)
            if not self._warm.end(worker_id, self._workers):
                return False
            self._cond.notify_all()
            return True

    @property
    def warming(self) -> bool:
        """True while the warm start holds all workers but one."""
        with self._cond:
            return not self._warm.over(self._workers)

    def heartbeat(self, worker_id: int) -> None:
        """Record a sign of life; raises if the worker is unknown, finished or dead."""
        with self._cond:
            self._live_worker(worker_id)

    def finish(self, worker_id: int, stats: dict[str, float] | None = None) -> bool:
        """Mark the worker finished: it leaves the minimum (idempotent: False when it
        had finished already). ``stats``: its last progress for the status page (a
        worker need not tick after its last push)."""
        with self._cond:
            w = self._get(worker_id)
            if w.state == FINISHED:
                return False
            self._live_worker(worker_id)
            if stats is not None:
                w.stats = dict(stats)
            w.state = FINISHED
            self._cond.notify_all()
            return True

    # --- cluster-wide ---------------------------------------------------------------
    def sweep(self) -> list[int]:
        """Mark workers without a recent heartbeat dead; returns their ids."""
        with self._cond:
            return self._sweep_locked(self._now())

    def min_clock(self) -> int | None:
        """Smallest clock among live (and still-expected missing) workers."""
        with self._cond:
            return self._min_live_locked()

    def worker(self, worker_id: int) -> WorkerInfo:
        """The worker's record (raises UnknownWorkerError)."""
        with self._cond:
            return self._get(worker_id)

    def held(self) -> dict[int, float]:
        """Per worker index, the seconds its workers were held by the SSP bound so
        far (the warm start's hold included), a wait in progress up to now."""
        now, out = time.monotonic(), dict[int, float]()
        with self._cond:
            for w in self._workers.values():
                extra = 0.0 if w.held_since is None else now - w.held_since
                out[w.index] = out.get(w.index, 0.0) + w.held_seconds + extra
        return out

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready status: staleness, expected workers, per-worker state, minimum."""
        with self._cond:
            now = self._now()
            self._sweep_locked(now)
            workers = [w.as_dict(now) for w in sorted(self._workers.values(),
                                                       key=lambda w: w.worker_id)]
            missing = [] if self._missing_expired else sorted(
                set(range(self.num_workers or 0)) - set(self._by_index)
            )
            return {
                "staleness": self.staleness,
                "num_workers": self.num_workers,
                "worker_timeout": self.worker_timeout,
                "workers": workers,
                "missing_indices": missing,
                "min_clock": self._min_live_locked(),
                "max_gap_allowed": self.max_gap_allowed,
                "warm_start": self._warm.snapshot(self._workers),
                "online": {k: {"rows": r, "loss_sum": s} for k, (r, s) in self._online.items()},
            }

    def start_sweeper(self, interval: float | None = None) -> None:
        """Run :meth:`sweep` every ``interval`` seconds (default
        ``min(1, worker_timeout / 4)``) in a daemon thread."""
        if self._sweeper is not None:
            return
        period = interval if interval is not None else min(1.0, self.worker_timeout / 4)
        self._stop_sweeper.clear()

        def loop() -> None:
            while not self._stop_sweeper.wait(period):
                self.sweep()

        self._sweeper = threading.Thread(target=loop, name="ssp-sweeper", daemon=True)
        self._sweeper.start()

    def stop_sweeper(self) -> None:
        """Stop the background sweeper (if running)."""
        if self._sweeper is not None:
            self._stop_sweeper.set()
            self._sweeper.join()
            self._sweeper = None

    def close(self) -> None:
        """Shut down: stop the sweeper and release every waiter (their
        :meth:`wait` returns False)."""
        self.stop_sweeper()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- internals (call with self._cond held) ------------------------------------------
    @staticmethod
    def _check_num_workers(num_workers: Any) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ConfigError(f"num_workers must be an int >= 1, got {num_workers!r}")

    def _get(self, worker_id: int) -> WorkerInfo:
        w = self._workers.get(worker_id)
        if w is None:
            raise UnknownWorkerError(f"unknown worker id {worker_id}; register first")
        return w

    def _live_worker(self, worker_id: int) -> WorkerInfo:
        now = self._now()
        self._sweep_locked(now)
        w = self._get(worker_id)
        why = refusal(w, self.worker_timeout)
        if why is not None:
            raise WorkerStateError(why)
        w.last_seen = now
        return w

    def _sweep_locked(self, now: float) -> list[int]:
        dead = []
        for w in self._workers.values():
            if w.state == LIVE and w.active_waits == 0 and now - w.last_seen > self.worker_timeout:
                w.state = DEAD
                dead.append(w.worker_id)
                log.warning("worker %d (index %d) sent nothing for %g s: dead now, it no "
                            "longer holds back the others", w.worker_id, w.index,
                            self.worker_timeout)
        expired = (
            not self._missing_expired
            and self._first_registration is not None
            and now - self._first_registration > self.registration_timeout
        )
        if expired:
            self._missing_expired = True
        if dead or expired:
            self._cond.notify_all()
        return dead

    def _min_live_locked(self) -> int | None:
        clocks = [w.clock for w in self._by_index.values() if w.state == LIVE]
        if not self._missing_expired and self.num_workers is not None:
            if len(self._by_index) < self.num_workers:
                clocks.append(0)  # missing workers count at clock 0
        return min(clocks) if clocks else None
