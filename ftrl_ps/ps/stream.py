"""Online learning from an unbounded stream of rows, pushing on a time rule.

:class:`StreamLearner` runs a :class:`~ftrl_ps.ps.worker.Worker` in a thread
and feeds it the row batches handed to :meth:`StreamLearner.submit` (by
``POST /v1/learn`` of ``ftrl-ps serve --learn``, or by the stdin reader of
``ftrl-ps worker --input -``). Each round it takes what is queued (up to
``fetch_step`` mini-batches of ``batch_size`` rows; fewer when fewer wait),
pulls those keys, trains them (four times as many rows per round while more
than four rounds wait), and pushes:

* every ``push_step`` mini-batches (the worker's step rule; a large request
  is trained in several rounds), and
* **at least every** ``push_interval`` **seconds** while something trained is
  unpushed, so a slow stream still publishes.

When the cluster cannot be reached (or fails) during a round, the learner
with ``drop_failed=True`` (``serve --learn``) drops that round's rows and the
rows of a push that failed, counts them in :meth:`status`, logs one warning
per dropped round, waits a second and goes on with the next rows, so an
outage of the servers does not stop the service; with ``drop_failed=False``
(a stream worker: an SSP worker whose rows must all be pushed) it stops with
the error. A full queue (``max_queue_rows``, the request's rows included)
makes :meth:`submit` wait up to ``submit_timeout`` seconds, then raise
:class:`~ftrl_ps.errors.UnavailableError` (HTTP 503): back-pressure instead of
unbounded memory; a request larger than the whole queue is refused at once
(:class:`~ftrl_ps.errors.PayloadTooLargeError`, HTTP 413).

:meth:`stop` trains what is queued and pushes it (graceful shutdown), but
waits at most ``timeout`` seconds for it: then it stops the client's retries
(``abort``), counts every accepted row not pushed as dropped and logs how
many. Every accepted row is in one counter: accepted = trained + dropped +
queued.

Staleness: with ``clocked=True`` (``ftrl-ps worker --input -``, a registered
worker) the learner ticks its SSP clock with every push. One worker never
waits for itself, so any ``--staleness`` works with ``--num-workers 1``;
several stream workers fed at different rates (or idle ones) all run only
with ``--staleness inf``: start an online-learning cluster with
``ftrl-ps server --num-workers 1 --staleness inf``. With ``clocked=False``
(``ftrl-ps serve --learn``) the learner pushes without registering and never
ticks or waits, so it runs against a cluster of any staleness.

Freshness (seconds from :meth:`submit` until a refresh of the served model
includes the rows) is measured when the model source calls
:meth:`refreshed` after each refresh: see :meth:`status`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ftrl_ps.core.params import FTRLParams
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.minibatch import minibatches
from ftrl_ps.errors import (
    ConfigError,
    FTRLPSError,
    PayloadTooLargeError,
    ServerError,
    TransportError,
    UnavailableError,
)
from ftrl_ps.ps.merge import servers_rule
from ftrl_ps.ps.worker import ParamClient, Worker, WorkerConfig

__all__ = ["StreamLearner"]

log = logging.getLogger(__name__)

#: freshness samples kept for the percentiles
FRESHNESS_SAMPLES = 2048
#: seconds the learner waits after a round failed because of the cluster
FAILURE_BACKOFF = 1.0
#: with more than this many rounds queued, a round takes this many times more rows
#: (one pull and one push per round: the learner catches up with less traffic)
BACKLOG_ROUNDS = 4
#: seconds :meth:`StreamLearner.stop` waits for the thread after stopping the retries
ABORT_WAIT = 5.0


class _Notifying:
    """A ParamClient that tells the learner when each push has been applied."""

    def __init__(self, client: ParamClient, learner: StreamLearner, clocked: bool) -> None:
        self._client = client
        self._learner = learner
        self._clocked = clocked

        self.dtype = getattr(client, "dtype", np.float64)
        # rounds too large for one push are split (ftrl_ps.ps.pushsize)
        self.max_body_bytes = getattr(client, "max_body_bytes", None)

    def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._client.pull(keys)

    def pull_versioned(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._client.pull_versioned(keys)

    def push(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray,
             merge: Any = None, **progress: Any) -> Any:
        extra = () if merge is None else (merge,)  # the compose rule's sections
        result = self._client.push(keys, delta_n, delta_z, *extra, **progress)
        self._learner._pushed()
        return result

    def clock(self, stats: dict[str, Any] | None = None) -> Any:
        return self._client.clock(stats) if self._clocked else None

    def warm_done(self) -> None:  # a stream learner is never the warm start's lone worker
        return None


class StreamLearner:
    """Train a registered cluster client on submitted batches in a background thread."""

    def __init__(self, client: ParamClient, bits: int, params: FTRLParams,
                 config: WorkerConfig, *, push_interval: float = 0.5,
                 max_queue_rows: int = 1_000_000, submit_timeout: float = 10.0,
                 clocked: bool = True, drop_failed: bool = True) -> None:
        if not push_interval > 0 or max_queue_rows < 1 or not submit_timeout >= 0:
            raise ConfigError("push_interval must be > 0, max_queue_rows >= 1, "
                              "submit_timeout >= 0")
        self.bits = bits
        self.push_interval = float(push_interval)
        self.max_queue_rows = int(max_queue_rows)
        self.submit_timeout = float(submit_timeout)
        self.drop_failed = drop_failed
        self._client = client
        #: mini-batches between pushes (the worker's own step rule is switched off:
        #: pushes happen between rounds, where it is known which rows they carry)
        self.push_step = config.push_step
        # pushes follow the servers' merge rule (ftrl_ps.ps.merge; the wrapper below
        # does not show the servers' settings to the worker)
        config = dataclasses.replace(config, push_step=1 << 62,
                                     merge_rule=servers_rule(client, config.merge_rule))
        self.worker = Worker(_Notifying(client, self, clocked), bits, params, config)
        self._cond = threading.Condition()
        self._queue: deque[tuple[int, float, Batch]] = deque()
        self._queued_rows = 0  # rows waiting in the queue
        self._round_rows = 0  # rows taken for the round in training
        self._unpushed_rows = 0  # rows trained and in no push yet
        self.rows_pushed = 0  # rows of the pushes the servers applied
        self._aborting = threading.Event()
        self._settled: int | None = None  # rows trained, fixed by stop()
        self._tickets = 0  # requests accepted
        self._trained_ticket = 0  # every ticket up to this one is trained
        self._steps = 0  # mini-batches trained since the last push
        self._rows_accepted = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.error: FTRLPSError | None = None
        self.failures = 0  # rounds lost to an unreachable or failing cluster
        self.rows_dropped = 0
        self.last_failure: str | None = None
        #: called (in the push thread) after each push was applied by the servers
        self.on_pushed: Callable[[], None] | None = None
        # freshness bookkeeping: accepted, pushed (in push order), reflected
        self._accepted: deque[tuple[int, float]] = deque()
        self._push_marks: deque[tuple[int, int]] = deque()  # (ticket, rows) of each push
        self._pushed_at: deque[tuple[int, float]] = deque()  # (ticket, when applied)
        self._fresh: deque[float] = deque(maxlen=FRESHNESS_SAMPLES)
        self._last_push = time.monotonic()

    # --- producer side ------------------------------------------------------------
    def submit(self, batch: Batch) -> int:
        """Queue ``batch`` (labels 0/1) for training; its ticket number.

        Raises UnavailableError if the queue stays full for ``submit_timeout``
        seconds or the learner has stopped or failed. A batch of no rows is not
        queued (a round of nothing has no keys to train): its ticket is the last
        one given, whose rows are all there is to wait for.
        """
        if batch.rows > self.max_queue_rows:
            raise PayloadTooLargeError(
                f"{batch.rows} rows are more than the learner queues (--max-queue-rows "
                f"{self.max_queue_rows}): send them in smaller requests")
        deadline = time.monotonic() + self.submit_timeout
        with self._cond:
            if not batch.rows:
                self._check_running()
                return self._tickets
            while True:
                self._check_running()
                if self._queued_rows + self._round_rows + batch.rows <= self.max_queue_rows:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise UnavailableError(
                        f"the learner is behind: {self._queued_rows + self._round_rows} "
                        "rows queued "
                        f"(limit {self.max_queue_rows}); retry later")
                self._cond.wait(left)
            self._tickets += 1
            now = time.monotonic()
            self._queue.append((self._tickets, now, batch))
            self._accepted.append((self._tickets, now))
            self._queued_rows += batch.rows
            self._rows_accepted += batch.rows
            self._cond.notify_all()
            return self._tickets

    def _check_running(self) -> None:
        if self.error is not None:
            raise UnavailableError(f"the learner stopped after an error: {self.error}")
        if self._stopping:
            raise UnavailableError("the learner is shutting down")

    # --- the training thread ----------------------------------------------------------
    def start(self) -> None:
        """Start the training thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ftrl-ps-learner",
                                            daemon=True)
            self._thread.start()

    def _take(self) -> tuple[list[Batch], int, int] | None:
        """Wait until rows are queued or a push is due; what to train, the ticket
        of its last request and the mini-batches of one round (None: stop)."""
        cfg = self.worker.config
        steps = cfg.fetch_step
        with self._cond:
            if self._queued_rows > BACKLOG_ROUNDS * cfg.batch_size * steps:
                steps *= BACKLOG_ROUNDS  # behind: fewer, larger rounds
            limit = cfg.batch_size * steps
            while not self._queue and not self._stopping:
                due = self._last_push + self.push_interval - time.monotonic()
                if self._unpushed_rows and due <= 0:
                    return [], 0, steps
                self._cond.wait(max(due, 0.001) if self._unpushed_rows else None)
            if not self._queue or self._aborting.is_set():
                return None
            taken: list[Batch] = []
            rows = 0
            ticket = 0
            while self._queue and (not taken or rows + self._queue[0][2].rows <= limit):
                ticket, _, batch = self._queue.popleft()
                taken.append(batch)
                rows += batch.rows
            self._queued_rows -= rows
            self._round_rows = rows
            self._cond.notify_all()
            return taken, ticket, steps

    def _run(self) -> None:
        try:
            while True:
                got = self._take()
                if got is None:
                    break
                batches, ticket, per_round = got
                try:
                    self._train(batches, ticket, per_round)
                    if (self._steps >= self.push_step
                            or time.monotonic() - self._last_push >= self.push_interval):
                        self._push()
                except (TransportError, ServerError) as exc:
                    self._failed(exc)
                    if not self.drop_failed:
                        raise
            if not self._aborting.is_set():
                self._push()
                self.worker.push()  # wait for the last push and tick
        except FTRLPSError as exc:
            self.error = exc
            log.error("the learner stopped: %s", exc)
        except Exception as exc:  # noqa: BLE001 - reported in status, not lost in a thread
            self.error = FTRLPSError(f"{type(exc).__name__}: {exc}")
            log.error("the learner stopped: %s", self.error, exc_info=exc)
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()

    def _train(self, batches: list[Batch], ticket: int, per_round: int) -> None:
        """Train ``batches`` in rounds of ``per_round`` mini-batches, pushing every
        ``push_step`` of them (a large request is not one round and one push)."""
        parts = list(minibatches(batches, self.worker.config.batch_size))
        report = self.worker.report
        for start in range(0, len(parts), per_round):
            if self._aborting.is_set():
                return  # stop() counts the rest as dropped
            if start and self._steps >= self.push_step:
                self._push()
            before = report.rows
            try:
                self.worker.train_round(parts[start:start + per_round])
            finally:
                with self._cond:
                    if self._settled is None:
                        self._round_rows -= report.rows - before
                        self._unpushed_rows += report.rows - before
                        self._cond.notify_all()  # room in the queue
            self._steps += len(parts[start:start + per_round])
        if batches:
            self._trained_ticket = ticket

    def _failed(self, exc: FTRLPSError) -> None:
        """A round or the push before it failed (cluster unreachable): drop the
        round's untrained rows and the rows of the push that failed, count them,
        wait a moment (with ``drop_failed``) and go on."""
        with self._cond:
            if self._settled is not None:
                return
            # the push in flight failed: it will not report
            rows = self._round_rows + sum(r for _, r in self._push_marks)
            self._push_marks.clear()
            self._round_rows = 0
            self._cond.notify_all()
            self.failures += 1
            self.rows_dropped += rows
            self.last_failure = f"{type(exc).__name__}: {exc}"
            dropped = self.rows_dropped
        if self.drop_failed:
            log.warning("the learner dropped %d rows (%d in all): the cluster failed: %s",
                        rows, dropped, self.last_failure)
            self._aborting.wait(FAILURE_BACKOFF)

    def _push(self) -> None:
        """Push what was trained since the last push (in the background)."""
        self._last_push = time.monotonic()
        self._steps = 0
        with self._cond:
            rows, self._unpushed_rows = self._unpushed_rows, 0
            if not rows:
                return
            self._push_marks.append((self._trained_ticket, rows))
        try:
            started = self.worker.push_async()
        except BaseException:  # the push before failed: these deltas are still pending
            with self._cond:
                self._push_marks.pop()
                self._unpushed_rows += rows
            raise
        if not started:  # nothing to send: as good as pushed
            with self._cond:
                self._push_marks.pop()
                self.rows_pushed += rows

    def _pushed(self) -> None:
        """Called in the push thread once a push has been applied by the servers."""
        with self._cond:
            ticket, rows = self._push_marks.popleft() if self._push_marks else (0, 0)
            self.rows_pushed += rows
            self._pushed_at.append((ticket, time.monotonic()))
        if self.on_pushed is not None:
            self.on_pushed()

    # --- freshness ------------------------------------------------------------------
    def refreshed(self, started: float) -> None:
        """The served model now holds every push applied before ``started``
        (``time.monotonic()`` when the refresh began)."""
        now = time.monotonic()
        with self._cond:
            done = 0
            while self._pushed_at and self._pushed_at[0][1] <= started:
                done = max(done, self._pushed_at.popleft()[0])
            while self._accepted and self._accepted[0][0] <= done:
                self._fresh.append(now - self._accepted.popleft()[1])

    # --- shutdown and status ---------------------------------------------------------
    def stop(self, timeout: float | None = 60.0) -> int:
        """Train what is queued, push it and wait for the push (graceful shutdown),
        for at most ``timeout`` seconds; then :meth:`abort`. Every accepted row not
        pushed by then is counted as dropped (and logged); the rows dropped in all."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None:
            try:
                thread.join(timeout)
            finally:
                if thread.is_alive():
                    self.abort()
                    thread.join(ABORT_WAIT)
        self._settle(timeout)
        return self.rows_dropped

    def abort(self) -> None:
        """Stop at once: no more rounds, and the client stops retrying (its ``abort``:
        a request in progress fails after its current attempt)."""
        self._aborting.set()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        abort = getattr(self._client, "abort", None)
        if abort is not None:
            abort()

    def _settle(self, timeout: float | None) -> None:
        """Count every accepted row that is not pushed now as dropped."""
        with self._cond:
            if self._settled is not None:
                return
            untrained = self._queued_rows + self._round_rows
            trained = self._unpushed_rows + sum(r for _, r in self._push_marks)
            self._queue.clear()
            self._push_marks.clear()
            self._queued_rows = self._round_rows = self._unpushed_rows = 0
            self.rows_dropped += untrained + trained
            self._settled = self.rows_pushed
            dropped = self.rows_dropped
        if untrained + trained:
            why = (f"the learner failed: {self.error}" if self.error is not None else
                   f"the cluster did not take them within {timeout:g} s" +
                   (f" (last failure: {self.last_failure})" if self.last_failure else ""))
            log.warning("the learner stops with %d accepted rows not pushed (%d trained, %d "
                        "not trained): dropped, %d dropped in all; %s", untrained + trained,
                        trained, untrained, dropped, why)

    def status(self) -> dict[str, Any]:
        """Counters, queue and freshness percentiles for ``/v1/status``
        (rows_accepted = rows_trained + rows_dropped + rows_queued)."""
        report = self.worker.report
        with self._cond:
            fresh = np.array(self._fresh) if self._fresh else None
            queued = self._queued_rows + self._round_rows
            trained = (self.rows_pushed + self._unpushed_rows
                       + sum(r for _, r in self._push_marks))
            accepted, pushed, dropped = self._rows_accepted, self.rows_pushed, self.rows_dropped
        return {
            "running": self._thread is not None and self._thread.is_alive(),
            "error": str(self.error) if self.error is not None else None,
            "failed_rounds": self.failures,
            "rows_dropped": dropped,
            "last_failure": self.last_failure,
            "requests": self._tickets,
            "rows_accepted": accepted,
            "rows_trained": trained,
            "rows_pushed": pushed,
            "rows_queued": queued,
            "progressive_logloss": report.progressive_logloss if report.rows else None,
            "pushes": report.pushes,
            "keys_pushed": report.keys_pushed,
            "push_interval": self.push_interval,
            "freshness_samples": 0 if fresh is None else int(fresh.size),
            "freshness_p50_s": None if fresh is None else round(float(np.median(fresh)), 4),
            "freshness_p99_s": None if fresh is None else round(
                float(np.percentile(fresh, 99)), 4),
        }
