"""The Prometheus metrics of a prediction service, read from it at every scrape.

:class:`ServeCollector` turns what a
:class:`~ftrl_ps.ps.service.PredictionService` already keeps (the served
model's version and load time, its source's counters, the learner's) into
metric families when ``/metrics`` is scraped, beside the HTTP and process
metrics every app has (:func:`ftrl_ps.server.metrics.instrument`)::

    ftrl_ps_serve_ready                        1 when /ready answers 200
    ftrl_ps_serve_model_version                changes with every reload or applied refresh
    ftrl_ps_serve_model_age_seconds            since the served model last changed
    ftrl_ps_serve_source_healthy               0 after a failed reload / refresh
    ftrl_ps_serve_reloads_total                model file: new versions loaded
    ftrl_ps_serve_reload_failures_total        model file: versions that failed to load
    ftrl_ps_serve_refreshes_total              cluster: refreshes done (the first read too)
    ftrl_ps_serve_refresh_failures_total       cluster: refreshes that failed
    ftrl_ps_serve_learn_rows_accepted_total    --learn: rows /v1/learn accepted
    ftrl_ps_serve_learn_rows_trained_total     --learn: rows the learner trained
    ftrl_ps_serve_learn_rows_dropped_total     --learn: rows dropped (cluster failed, shutdown)
    ftrl_ps_serve_learn_rows_queued            --learn: rows waiting for the learner
    ftrl_ps_serve_learn_pushes_total           --learn: pushes the learner sent
    ftrl_ps_serve_learn_shard_restarts_total   --learn: shard restarts seen (rows learned
                                               since its last checkpoint may be lost)

Alert on ``ftrl_ps_serve_source_healthy == 0`` and on a model age larger
than expected; the model age of a cluster source grows while nothing is
trained, the refresh failures tell an outage from a quiet cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ftrl_ps.ps.service import PredictionService
from ftrl_ps.server.metrics import NAMESPACE

__all__ = ["ServeCollector"]

_PREFIX = f"{NAMESPACE}_serve_"


def _gauge(suffix: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(_PREFIX + suffix, doc, value=value)


def _counter(suffix: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(_PREFIX + suffix, doc, value=value)


class ServeCollector(Collector):
    """Metric families of one prediction service (see the module docstring)."""

    def __init__(self, service: PredictionService) -> None:
        self.service = service

    def describe(self) -> Iterable[Metric]:
        return []  # families vary with the source and --learn: no fixed description

    def collect(self) -> Iterator[Metric]:
        service, served = self.service, self.service.served
        yield _gauge("ready", "1 when the service is ready (/ready answers 200)",
                     float(service.ready()))
        yield _gauge("model_version", "version of the served model (+1 with every reload "
                     "or applied refresh)", float(served.version))
        if served.loaded_at is not None:
            yield _gauge("model_age_seconds", "seconds since the served model last changed",
                         max(0.0, time.time() - served.loaded_at))
        yield _gauge("source_healthy", "0 after a failed reload or refresh (the previous "
                     "model stays served), else 1", float(service.source_healthy()))
        file, cluster = service.file_source, service.cluster_source
        if file is not None:
            yield _counter("reloads", "new versions of the model file loaded", file.reloads)
            yield _counter("reload_failures", "versions of the model file that failed to "
                           "load", file.failed_reloads)
        if cluster is not None:
            yield _counter("refreshes", "refreshes from the cluster (the first read too)",
                           cluster.refreshes)
            yield _counter("refresh_failures", "refreshes from the cluster that failed",
                           cluster.failed_refreshes)
        if service.learner is not None:
            learner = {**service.learner.status(), "shard_restarts": service.shard_restarts}
            for key, doc in (("rows_accepted", "rows /v1/learn accepted"),
                             ("rows_trained", "rows the online learner trained"),
                             ("rows_dropped", "rows the online learner dropped: the "
                              "cluster failed, or it was not reachable at shutdown"),
                             ("pushes", "pushes the online learner sent"),
                             ("shard_restarts", "shard restarts seen while learning: rows "
                              "learned since that shard's last checkpoint may be lost")):
                yield _counter(f"learn_{key}", doc, float(learner[key]))
            yield _gauge("learn_rows_queued", "rows waiting for the online learner",
                         float(learner["rows_queued"]))
