"""The worker loop: train on a compact copy of each round's keys, pull, push, tick the clock.

One *step* is one mini-batch of ``batch_size`` rows; ``fetch_step`` steps make
a *round*. At the start of a round the worker reads the round's mini-batches
ahead, numbers their distinct keys (plus the bias) ``0..k-1``, pulls exactly
those keys' ``n``/``z`` from the servers into a compact ``(k, 2)`` working set
and trains on it: a few hundred KiB that stay in cache (nothing key-space-wide is
allocated: :mod:`ftrl_ps.ps.workingset`). Every ``push_step`` steps it pushes the
``n``/``z`` deltas accumulated since its last push and ticks its SSP clock (which
may wait for slower workers).

The worker's own unpushed updates survive a pull (Goline overwrote them): a
round's deltas not pushed yet (``push_step`` not a multiple of ``fetch_step``)
are kept as sparse *pending* deltas, added onto the next round's freshly pulled
values (``local = pulled + unpushed``) and sent with the next push.

Concurrent pushes are merged by the rule of :mod:`ftrl_ps.ps.merge` (docs/algorithm.md):
``contraction`` (the default) and ``threshold`` scale the deltas here
(:mod:`ftrl_ps.ps.contraction`); ``compose``/``curvature`` send the pulled versions, rows
per key and ``rho`` with them. Math: :mod:`ftrl_ps.core.ftrl`; network: :mod:`.client`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from ftrl_ps.core.ftrl import FTRLParams, fit_compact
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.minibatch import skip_rows, steps
from ftrl_ps.learn.training import TrainReport
from ftrl_ps.ps.contraction import push_contraction
from ftrl_ps.ps.curvature import unpushed_contraction
from ftrl_ps.ps.inflight import InFlight
from ftrl_ps.ps.merge import VERSIONED, push_payload, servers_rule
from ftrl_ps.ps.overview import History
from ftrl_ps.ps.pushsize import fitting, max_push_keys
from ftrl_ps.ps.rounds import RoundLength, adaptive_by_default
from ftrl_ps.ps.shares import Share, read_share
from ftrl_ps.ps.steps import StepTracker
from ftrl_ps.ps.straggle import Straggler
from ftrl_ps.ps.worker_config import WorkerConfig
from ftrl_ps.ps.workingset import KeyNumbering, PendingDeltas, WorkingSet

__all__ = ["ParamClient", "Worker", "WorkerConfig", "WorkerReport"]


class ParamClient(Protocol):
    """What the worker needs from a parameter-server client (see ftrl_ps.ps.client.PSClient)."""

    def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def pull_versioned(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def push(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray,
             merge: Any = None, *, position: int = 0, loss_sum: float = 0.0) -> Any: ...

    def clock(self, stats: dict[str, Any] | None = None) -> Any: ...

    def warm_done(self) -> None: ...


@dataclass
class WorkerReport(TrainReport):
    """A :class:`~ftrl_ps.learn.training.TrainReport` plus the worker's traffic."""

    steps: int = 0
    pushes: int = 0
    pulls: int = 0
    keys_pushed: int = 0
    keys_pulled: int = 0
    #: seconds in clock ticks (the SSP wait for slower workers included; not idle ones)
    wait_seconds: float = 0.0
    #: seconds idle for want of work units other workers hold, ticks included
    #: (``--split units``: :func:`ftrl_ps.ps.handout.train_units`)
    idle_seconds: float = 0.0
    straggle_seconds: float = 0.0  #: slept as an injected straggler (ftrl_ps.ps.straggle)
    straggles: int = 0  #: how often
    #: pushes made while training alone (the warm start), merged as one worker's
    pushes_alone: int = 0


class Worker:
    """Trains on its share of the data against a parameter server.

    Parameters
    ----------
    client : ParamClient
        A registered client (``pull``, ``push``, ``clock``).
    bits : int
        Feature space size (must match the servers' layout).
    params : FTRLParams
        Hyper-parameters (the same on every worker).
    config : WorkerConfig
        Batching and communication periods.
    straggler : Straggler, optional
        Injected sleeps before clock ticks (experiments only).
    """

    def __init__(
        self, client: ParamClient, bits: int, params: FTRLParams, config: WorkerConfig,
        straggler: Straggler | None = None,
    ) -> None:
        self.client, self.straggler = client, straggler
        #: how pushes are merged: the servers' rule (ftrl_ps.ps.merge)
        self.merge_rule = servers_rule(client, config.merge_rule)
        self.config = config = replace(config, merge_rule=self.merge_rule)
        self.params, self.bits = params, bits
        self._numbering = KeyNumbering(bits)
        self.bias_key = self._numbering.bias_key
        self._round: WorkingSet | None = None
        self._steps = StepTracker()  # which parts of the rounds end a step (ps.steps)
        self._pending = PendingDeltas()  # deltas of closed rounds not pushed yet
        self._rows_since_push = 0
        self._since_push = 0
        self._sending: InFlight | None = None
        #: pushes before this many ticks are made alone (the servers' warm start: no
        #: other worker pushes meanwhile), so they are merged as one worker's (N = 1)
        self.alone_until = 0
        #: called once, before the first pull or clock tick (:meth:`pass_gate`): the
        #: servers' warm start is waited for while the first round is read and numbered
        self.first_pull_gate: Callable[[], None] | None = None
        self._ticks = 0  # ticks sent
        settings = getattr(client, "server_settings", None) or {}
        #: the servers run asynchronously (no staleness): nobody waits for this clock
        self._asynchronous = "staleness" in settings and settings["staleness"] is None
        adaptive = config.adaptive_rounds
        if adaptive is None:
            adaptive = adaptive_by_default(settings.get("staleness"))
        self.round_length = RoundLength(adaptive)
        #: the most keys one push may carry (the servers' body limit; None: no limit)
        self.max_push_keys = max_push_keys(client, self.merge_rule)
        #: the parts last numbered to count their keys, and that numbering (for _open)
        self._counted: tuple[list[Batch], Any] | None = None
        self.rows_applied = 0  # the position of the last push the shards acknowledged
        self.report = WorkerReport()
        #: (time, rows, loss_sum) at the start of every round and the end of every
        #: step, bounded (the metrics JSON's ``timeline``: rows trained over time)
        self.timeline = History()
        #: input rows to pass over before training (a restarted worker's position)
        self.skip_rows = 0
        self._resumed_rows, self._resumed_loss = 0, 0.0
        self._uncounted = 0  # rows of the stream before this process, not in the report
        self._started = time.perf_counter()

    def resume(self, position: int, loss_sum: float | None) -> None:
        """Continue after ``position`` rows trained and pushed by an earlier process
        of this index (docs/durability.md); their loss unknown (None: no journal), the
        report counts from here, but pushes' :attr:`position` goes on from ``position``."""
        self.skip_rows = self.rows_applied = int(position)  # all applied (replayed)
        if loss_sum is not None:
            self.report.rows = self._resumed_rows = int(position)
            self.report.loss_sum = self._resumed_loss = float(loss_sum)
        else:
            self._uncounted = int(position) - self.report.rows

    @property
    def position(self) -> int:
        """Rows of this worker index's stream trained so far, by every process of it."""
        return self._uncounted + self.report.rows

    # -- rounds ----------------------------------------------------------
    def _open(self, parts: list[Batch]) -> WorkingSet:
        """Number the keys of ``parts``, pull them, add pending deltas: the next round."""
        if self._round is not None:
            self._close()
        self.timeline.sample(self.report.rows, self.report.loss_sum)
        counted, self._counted = self._counted, None
        numbered = (counted[1] if counted is not None and counted[0] is parts
                    else self._numbering.number(parts))
        cap, held = self.max_push_keys, self._pending.keys.size
        if cap is not None and held and held + numbered[0].size > cap:
            self._push_async()  # with this round's keys they would not fit in one push
        self.pass_gate()
        self._sync()  # pull only after the last push and clock tick went through
        versions = None
        if self.merge_rule in VERSIONED:
            n, z, versions = self.client.pull_versioned(numbered[0])
        else:
            n, z = self.client.pull(numbered[0])
        rnd = WorkingSet.pulled(parts, numbered, n, z, versions)
        self._pending = rnd.adopt(self._pending)
        self.report.pulls += 1
        self.report.keys_pulled += int(rnd.keys.size)
        self._round = rnd
        return rnd

    def _step(self, rnd: WorkingSet) -> bool:
        """Train the round's next part on the working set; whether it ended a step
        (a part given to :meth:`train_round` alone is a step of its own)."""
        mb, local = rnd.rows_of(rnd.done)
        loss = fit_compact(rnd.state, self.params, mb.labels, mb.indptr, local, mb.values)
        rnd.done += 1
        self.report.loss_sum += loss
        self.report.rows += mb.rows
        self._rows_since_push += mb.rows
        if not self._steps.trained(mb.rows):
            return False
        self.timeline.sample(self.report.rows, self.report.loss_sum)
        self.report.steps += 1
        self._since_push += 1
        return True

    def _close(self) -> None:
        """End the round: keep its unpushed deltas as pending ones."""
        rnd, self._round = self._round, None
        if rnd is not None and rnd.dirty:
            self._pending = self._pending.merge(rnd.unpushed(self._contraction(rnd)))

    # -- communication -------------------------------------------------
    def push(self, final: bool = False) -> None:
        """Push every delta accumulated since the last push, tick the clock, and wait.

        ``final``: the worker has nothing more to train (it is about to finish,
        or to ask for more work): the push is not followed by a clock tick. A
        tick only lets the next round wait for the others; the finish request
        carries the last :meth:`stats` instead, and a worker handed more work
        afterwards goes on at the same clock."""
        self._push_async(tick=not final)
        self._sync()

    def _push_async(self, tick: bool = True, on_schedule: bool = True) -> None:
        """Start pushing the unpushed deltas and ticking the clock in the background.

        The tick may wait for slower workers (SSP); meanwhile the worker numbers
        the next round's keys. The next pull or push waits for this one first
        (:meth:`_sync`), so pushes and ticks stay in order. ``on_schedule``
        False (the warm start's extra pushes): the next push of the usual
        schedule still comes ``push_step`` steps after the last one of it.
        """
        rnd = self._round
        todo = self._pending
        part = rnd.unpushed(self._contraction(rnd)) if rnd is not None and rnd.dirty else None
        if part is not None:
            todo = todo.merge(part)
        if not todo.keys.size:
            return
        cfg = self.config  # the deltas as the merge rule wants them (ftrl_ps.ps.merge)
        alone = self._alone  # no concurrent push to share the keys with
        delta_n, delta_z, merge = push_payload(
            self.merge_rule, todo, self.bias_key, self._rows_since_push,
            cfg.batch_size * self._push_every(),
            1 if alone else cfg.num_workers, cfg.dense_fraction,
            np.dtype(getattr(self.client, "dtype", np.float64)))
        self._sync()
        progress = {"position": self.position, "loss_sum": self.report.loss_sum}
        ends_warm = alone and tick and self._ticks + 1 >= self.alone_until
        self._sending = InFlight(self._send, todo.keys, delta_n, delta_z, merge, self.stats(),
                                  progress, tick, ends_warm)
        self._sending.rows = self.position
        if rnd is not None:
            rnd.mark_pushed(None if part is None else part.keys)
        self._pending = PendingDeltas()
        self.report.pushes += 1
        self.report.pushes_alone += alone
        self._ticks += tick
        self.report.keys_pushed += int(todo.keys.size)
        self._rows_since_push = 0
        if on_schedule:
            self._since_push = 0

    def _contraction(self, rnd: WorkingSet) -> np.ndarray | None:
        if self.merge_rule == "contraction":
            return push_contraction(rnd, self.params)
        return unpushed_contraction(rnd, self.params, self.merge_rule)

    def _send(self, keys: np.ndarray, delta_n: np.ndarray, delta_z: np.ndarray, merge: Any,
              stats: dict[str, Any], progress: dict[str, Any], tick: bool = True,
              ends_warm: bool = False) -> float:
        """Push, sleep if straggling, tick; the seconds the tick took (the SSP wait).
        ``ends_warm``: the warm start's last push, the others are told once it is in."""
        self.client.push(keys, delta_n, delta_z, *(() if merge is None else (merge,)), **progress)
        if ends_warm:
            self.client.warm_done()
        if not tick:
            return 0.0
        if self.straggler is not None and self.straggler.before_tick():
            self.report.straggles += 1
            self.report.straggle_seconds += self.straggler.config.delay
        started = time.perf_counter()
        self.client.clock(stats)
        waited = time.perf_counter() - started
        self.report.wait_seconds += waited
        return waited

    def _sync(self) -> None:
        """Wait for the push and tick in flight, if any (re-raising their error)."""
        sending, self._sending = self._sending, None
        if sending is not None:
            started = time.perf_counter()
            sending.wait()
            ended = time.perf_counter()
            # idle for the tick only: an injected straggle before it is not a wait
            self.round_length.waited(started, ended, min(ended - started, sending.result))
            self.rows_applied = sending.rows

    def stats(self) -> dict[str, Any]:
        """Progress sent with every clock tick (shard 0 shows it: status, dashboard, metrics)."""
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        r = self.report
        rows = r.rows - self._resumed_rows  # this process's: an earlier one reported the rest
        # rows pushed before this process (status counts a predecessor killed -9 by them)
        resumed = {"resumed_rows": self.position - rows} | (
            {"resumed_loss": self._resumed_loss} if self._resumed_rows else {})  # journal's
        slept = {"straggle_seconds": r.straggle_seconds, "straggles": r.straggles}  # injected
        return {"rows": rows, "loss_sum": r.loss_sum - self._resumed_loss, **resumed,
                "rows_per_second": rows / elapsed, "pushes": r.pushes, "pulls": r.pulls,
                "keys_pushed": r.keys_pushed, "keys_pulled": r.keys_pulled,
                "wait_seconds": r.wait_seconds, "idle_seconds": r.idle_seconds,
                **(slept if self.straggler else {})}

    # -- training --------------------------------------------------------
    def train_batches(self, batches: Iterator[Batch]) -> None:
        """Train on a stream of reader batches (one epoch of this worker's share).

        The last push may still be in flight on return; :meth:`push` waits for it.
        """
        if self.skip_rows:  # passed over once, in the first epoch
            batches, self.skip_rows = skip_rows(batches, self.skip_rows), 0
        rounds = self._steps.rounds(steps(batches, self.config.batch_size),
                                    lambda: self.config.fetch_step * self.round_length.factor)
        for parts in rounds:
            self.train_round(parts)

    def train_round(self, parts: list[Batch]) -> None:
        """Train one round: pull the keys of the mini-batches ``parts`` (or the parts
        of steps, :meth:`train_batches`), train them in order, push every ``push_step``
        steps (in the background); as several if one push cannot carry its keys."""
        for piece in fitting(parts, self.max_push_keys, self._count_keys):
            self._train_round(piece)

    def _count_keys(self, parts: list[Batch]) -> int:
        """Distinct keys of ``parts`` with the bias; :meth:`_open` reuses the numbering
        when these very parts come next (nothing is numbered in between)."""
        numbered = self._numbering.number(parts)
        self._counted = (parts, numbered)
        return int(numbered[0].size)

    def _train_round(self, parts: list[Batch]) -> None:
        rnd = self._open(parts)
        for _ in parts:
            if not self._step(rnd):
                continue
            if self._since_push >= self._push_every():
                self._push_async()
            elif self._warm_push_due():
                self._push_async(on_schedule=False)
        self._close()

    def _push_every(self) -> int:
        """Steps from one push of the schedule to the next: ``push_step`` times the
        round length; while alone with a longer ``warm_push_step``, that (the warm
        start in one push and one tick: a slow lone worker's ticks hold the others)."""
        k, steps = self.config.warm_push_step, self.config.push_step * self.round_length.factor
        return k if k is not None and k > steps and self._alone else steps

    def _warm_push_due(self) -> bool:
        """While alone with a shorter ``warm_push_step``: every that many steps, beside
        the schedule (so its pushes still end the rounds after the warm start)."""
        k = self.config.warm_push_step
        return k is not None and self._alone and self._since_push % k == 0

    @property
    def _alone(self) -> bool:
        """Whether this worker trains alone now: its ticks so far are fewer than
        :attr:`alone_until` (the servers' warm start)."""
        return self._ticks < self.alone_until

    def idle(self) -> bool:
        """Nothing to train for now (waiting for units other workers hold): tick the
        clock, so that under SSP this worker never holds the others back; the tick
        waits while it is ahead. Asynchronous runs (no staleness) do not tick: nobody
        waits for this clock. Not counted as a training wait (``wait_seconds``): the
        caller counts the whole time idle as ``idle_seconds``. Whether it ticked."""
        self.pass_gate()
        self._sync()
        if self._asynchronous:
            return False
        self.client.clock(self.stats())
        self._ticks += 1
        return True

    def pass_gate(self) -> None:
        """Call :attr:`first_pull_gate` if it was not called yet."""
        gate, self.first_pull_gate = self.first_pull_gate, None
        if gate is not None:
            gate()

    def push_async(self) -> bool:
        """Start pushing (and ticking) in the background; False if nothing to push."""
        before = self.report.pushes
        self._push_async()
        return self.report.pushes > before

    def run(self, source: str | os.PathLike[str], byte_range: tuple[int, int] | None, *,
            started: Share | None = None) -> WorkerReport:
        """Train ``epochs`` passes over ``byte_range`` of ``source``, pushing everything.

        ``started``, if given, is the first epoch's :func:`read_share` of the
        same range, begun earlier (e.g. while connecting to the servers).
        """
        cfg = self.config
        for epoch in range(cfg.epochs):
            share = started if epoch == 0 and started is not None else read_share(
                source, byte_range, self.bits, cfg)
            self.train_batches(share.batches)
            reader = share.reader
            self.report.bad_lines += reader.stats.bad_lines
            self.report.epochs += 1
            self.report.bad_examples.extend(reader.stats.bad_examples)
        self.push(final=True)
        self.report.seconds = time.perf_counter() - self._started
        return self.report
