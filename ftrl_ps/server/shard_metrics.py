"""The Prometheus metrics of one shard, read from its state at every scrape.

:class:`ShardCollector` turns what the shard already keeps (store counters,
dedup, the SSP clock with the workers' last reported progress,
:class:`~ftrl_ps.ps.telemetry.Telemetry`) into metric families when
``/metrics`` is scraped; nothing on the request path changes for it.

Every shard::

    ftrl_ps_shard_info{shard, num_shards, bits, group_size, dtype}   1
    ftrl_ps_pushes_total, ftrl_ps_pulls_total, ftrl_ps_group_pulls_total
    ftrl_ps_keys_pushed_total, ftrl_ps_keys_pulled_total
    ftrl_ps_duplicate_pushes_total     pushes acknowledged but not applied again
    ftrl_ps_shard_keys                 size of the shard's key range
    ftrl_ps_keys_with_state            keys with non-zero n or z (cached count)
    ftrl_ps_store_bytes                n and z arrays (faulted in at start when >= 8 MiB)
    ftrl_ps_<hook>                     gauge hooks, e.g. ftrl_ps_checkpoint_age_seconds

Shard 0, the clock authority, adds the cluster's training progress (workers
report it with every clock tick)::

    ftrl_ps_workers{state}             live / finished / dead / missing
    ftrl_ps_worker_restarts_total      extra registrations of a worker index
    ftrl_ps_clock_min, ftrl_ps_clock_max, ftrl_ps_clock_gap   over live workers
    ftrl_ps_ssp_staleness              the SSP bound (absent when asynchronous)
    ftrl_ps_ssp_max_gap_allowed        largest gap at which a wait was granted
    ftrl_ps_ssp_wait_seconds           histogram: one observation per clock/wait request
    ftrl_ps_rows_trained_total         rows trained by all workers
    ftrl_ps_rows_per_second            over the last ~5 s
    ftrl_ps_progressive_logloss        mean log loss before each row's update
    ftrl_ps_worker_{clock, rows_total, rows_per_second, progressive_logloss,
                    pushes_total, pulls_total, keys_pushed_total, keys_pulled_total,
                    ssp_wait_seconds_total, idle_seconds_total,
                    straggle_seconds_total}{worker}
    ftrl_ps_worker_state{worker, state}  1 for the worker's current state
    ftrl_ps_work_units{state}          pending / assigned / done (--split units)
    ftrl_ps_work_rows_done             rows of the units done
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ftrl_ps.ps.overview import History, Overview
from ftrl_ps.ps.state import ServerState
from ftrl_ps.server.metrics import NAMESPACE

__all__ = ["ShardCollector"]

_COUNTERS = (
    ("pushes", "pushes applied or acknowledged by this shard"),
    ("pulls", "pull requests of keys answered by this shard"),
    ("group_pulls", "pull requests of whole parameter groups"),
    ("keys_pushed", "keys in the pushes this shard applied"),
    ("keys_pulled", "keys this shard sent in pull answers"),
    ("withdrawals", "pushes of dead workers withdrawn here (their input was handed on)"),
)

#: per-worker families: (suffix, stat name, type, help)
_WORKER = (
    ("rows", "rows", "counter", "rows this worker trained"),
    ("pushes", "pushes", "counter", "pushes this worker sent"),
    ("pulls", "pulls", "counter", "pulls this worker made"),
    ("keys_pushed", "keys_pushed", "counter", "keys in this worker's pushes"),
    ("keys_pulled", "keys_pulled", "counter", "keys this worker pulled"),
    ("ssp_wait_seconds", "wait_seconds", "counter",
     "seconds this worker spent in clock ticks and SSP waits while training (its ticks "
     "while idle are in idle_seconds)"),
    ("idle_seconds", "idle_seconds", "counter",
     "seconds this worker waited idle for work units other workers held (--split units; "
     "its clock ticks meanwhile included)"),
    ("rows_per_second", "rows_per_second", "gauge", "this worker's rows/s since it started"),
    ("straggle_seconds", "straggle_seconds", "counter",
     "seconds this worker slept before clock ticks as an injected straggler (--straggle-*: "
     "fault injection for experiments; 0 without it)"),
)


def _name(suffix: str) -> str:
    return f"{NAMESPACE}_{suffix}"


def _gauge(suffix: str, doc: str, value: float, **labels: str) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(_name(suffix), doc, labels=list(labels))
    fam.add_metric(list(labels.values()), value)
    return fam


def _counter(suffix: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(_name(suffix), doc, value=value)


class ShardCollector(Collector):
    """Metric families of one shard's :class:`ServerState` (see the module docstring).

    ``history`` (shard 0) gives the current rows/s; without it the sum of the
    live workers' own averages is used.
    """

    def __init__(self, state: ServerState, history: History | None = None) -> None:
        self.state = state
        self.history = history

    def describe(self) -> Iterable[Metric]:
        return []  # families vary (hooks, shard 0 only): no fixed description

    def collect(self) -> Iterator[Metric]:
        yield from self._shard()
        yield from self._hooks()
        if self.state.clock is not None:
            yield from self._cluster(Overview.from_clock(self.state.clock.snapshot()))

    # --- every shard -------------------------------------------------------------
    def _shard(self) -> Iterator[Metric]:
        s, store = self.state.settings, self.state.store
        yield _gauge("shard_info", "layout of this shard (value 1)", 1.0,
                     shard=str(s.shard_index), num_shards=str(s.num_shards), bits=str(s.bits),
                     group_size=str(s.group_size), dtype=s.dtype)
        counters = store.counters()
        for key, doc in _COUNTERS:
            yield _counter(key, doc, counters.get(key, 0))
        yield _counter("duplicate_pushes",
                       "pushes acknowledged but not applied again (a retry of an applied push)",
                       self.state.dedup.duplicates)
        yield _gauge("shard_keys", "keys in this shard's range", float(store.size))
        yield _gauge("keys_with_state", "keys with non-zero n or z (recounted every >= 2 s)",
                     float(store.keys_with_state()))
        yield _gauge("store_bytes", "bytes of the n and z arrays (faulted in at start when "
                     "8 MiB or more)", float(2 * store.size * store.dtype.itemsize))

    def _hooks(self) -> Iterator[Metric]:
        for name, doc, fn in self.state.telemetry.gauges():
            try:
                value = fn()
            except Exception:  # noqa: BLE001 - a broken hook must not break /metrics
                continue
            if value is not None and math.isfinite(value):
                yield _gauge(name, doc, float(value))

    # --- shard 0 -------------------------------------------------------------------
    def _cluster(self, o: Overview) -> Iterator[Metric]:
        workers = GaugeMetricFamily(_name("workers"), "workers by state (latest registration "
                                    "of each index; missing: expected, never registered)",
                                    labels=["state"])
        for state in ("live", "finished", "dead"):
            workers.add_metric([state], float(o.states.get(state, 0)))
        workers.add_metric(["missing"], float(len(o.missing)))
        yield workers
        yield _counter("worker_restarts", "registrations of a worker index after its first",
                       o.restarts)
        if o.min_clock is not None and o.max_clock is not None:
            yield _gauge("clock_min", "smallest clock of a live worker", o.min_clock)
            yield _gauge("clock_max", "largest clock of a live worker", o.max_clock)
            yield _gauge("clock_gap", "largest minus smallest clock of live workers (a worker "
                         "that ticked and waits counts: up to staleness + 1)", o.gap)
        if o.staleness is not None:
            yield _gauge("ssp_staleness", "SSP bound: most clocks a worker may run ahead",
                         o.staleness)
        yield _gauge("ssp_max_gap_allowed", "largest clock gap at which a wait was granted",
                     o.max_gap_allowed)
        buckets, total, _count = self.state.telemetry.ssp_wait.snapshot()
        yield HistogramMetricFamily(
            _name("ssp_wait_seconds"), "seconds a clock/wait request waited for the SSP "
            "condition (one observation per request)",
            buckets=[("+Inf" if math.isinf(b) else repr(b), n) for b, n in buckets],
            sum_value=total,
        )
        yield _counter("rows_trained", "rows trained by all workers (every registration)",
                       o.rows)
        rate = self.history.rate() if self.history is not None else sum(
            w.rows_per_second for w in o.workers if w.state == "live")
        yield _gauge("rows_per_second", "rows trained per second by the cluster, last ~5 s",
                     rate)
        if o.rows:
            yield _gauge("progressive_logloss", "mean log loss of each row before its update",
                         o.progressive_logloss)
        yield from self._work()
        yield from self._per_worker(o)

    def _work(self) -> Iterator[Metric]:
        """The work units handed out (``--split units``), once a plan is loaded."""
        work = self.state.work.summary()
        if not work.get("plan"):
            return
        units = GaugeMetricFamily(_name("work_units"), "work units of the plan by state "
                                  "(--split units)", labels=["state"])
        for st in ("pending", "assigned", "done"):
            units.add_metric([st], float(work[st]))
        yield units
        yield _gauge("work_rows_done", "rows of the work units done (every pass)",
                     float(work["rows_done"]))

    def _per_worker(self, o: Overview) -> Iterator[Metric]:
        clock = GaugeMetricFamily(_name("worker_clock"), "clock of the worker", labels=["worker"])
        loss = GaugeMetricFamily(_name("worker_progressive_logloss"),
                                 "the worker's progressive log loss", labels=["worker"])
        state = GaugeMetricFamily(_name("worker_state"), "1 for the worker's current state",
                                  labels=["worker", "state"])
        fams: list[Any] = []
        for suffix, _stat, kind, doc in _WORKER:
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            fams.append(cls(_name(f"worker_{suffix}"), doc, labels=["worker"]))
        for w in o.workers:
            label = [str(w.index)]
            clock.add_metric(label, w.clock)
            if w.rows:
                loss.add_metric(label, w.progressive_logloss)
            for st in ("live", "finished", "dead"):
                state.add_metric([*label, st], 1.0 if w.state == st else 0.0)
            for fam, (_suffix, stat, _kind, _doc) in zip(fams, _WORKER, strict=True):
                fam.add_metric(label, w.stat(stat))
        yield clock
        yield loss
        yield state
        yield from fams
