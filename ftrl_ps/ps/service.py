"""The parts of a prediction service put together, without the web framework.

:class:`PredictionService` owns the :class:`~ftrl_ps.learn.serving.ServingModel`,
its source (a model file, :class:`~ftrl_ps.learn.reload.ModelFileSource`, or
the live cluster, :class:`~ftrl_ps.ps.puller.ClusterModelSource`) and, for
online learning, a registered :class:`~ftrl_ps.ps.client.PSClient` with a
:class:`~ftrl_ps.ps.stream.StreamLearner`. It turns request bodies into rows
(:func:`PredictionService.rows`), scores them, queues labelled rows for the
learner, and starts and stops everything in order. The FastAPI routes of
``ftrl-ps serve`` (:mod:`ftrl_ps.server.serve_routes`) only translate HTTP
to these calls.

The learner does not register as an SSP worker: it pushes asynchronously
(anonymous pushes, which the client retries only when the connection could
not be made, so none is applied twice) and never ticks or waits on the SSP
clock. It therefore runs against a cluster of any staleness, next to batch
workers, as several replicas, and restarts at once. The price: its pushes are
not journaled, so a shard that restarts from a checkpoint has lost what the
learner pushed to it after that checkpoint. The cluster source sees the
restart; the service logs a warning and counts it
(``learner.shard_restarts`` in ``/v1/status``).

:meth:`PredictionService.close` gives the learner :data:`SHUTDOWN_GRACE`
seconds to train and push what it accepted, then stops its retries and logs
the rows it drops (``learner.rows_dropped``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ftrl_ps.core.params import FTRLParams
from ftrl_ps.data.batch import Batch
from ftrl_ps.data.bodies import parse_json_rows, parse_text
from ftrl_ps.errors import ConfigError, PayloadTooLargeError, ProtocolError
from ftrl_ps.learn.reload import ModelFileSource
from ftrl_ps.learn.serving import ServingModel
from ftrl_ps.ps import rowwire, wire
from ftrl_ps.ps.puller import ClusterModelSource
from ftrl_ps.ps.stream import StreamLearner
from ftrl_ps.ps.worker import WorkerConfig

__all__ = ["TEXT_TYPES", "PredictionService", "ServiceConfig"]

log = logging.getLogger(__name__)

#: seconds a stopping service gives its learner to push what it accepted (then: one
#: attempt of the request in progress; Kubernetes' grace period is 60 s)
SHUTDOWN_GRACE = 10.0

#: media types read as libsvm text
TEXT_TYPES = ("text/plain", "text/x-libsvm", "application/x-libsvm")

#: JSON bodies this large are parsed at most :data:`JSON_PARSES` at a time
#: (a 16 MiB one took ~600 MB while parsed; 8 at once took 2.1 GB)
BIG_JSON = 1 << 20
JSON_PARSES = 2
_BIG_JSON_PARSES = threading.BoundedSemaphore(JSON_PARSES)


@dataclass(frozen=True)
class ServiceConfig:
    """What a :class:`PredictionService` is built from (see ``ftrl-ps serve --help``)."""

    model: str | None = None
    reload_interval: float = 1.0
    server: list[str] | None = None
    refresh: float = 0.5
    token: str | None = None
    #: for a model file, and for servers that do not report theirs (they own the model)
    params: FTRLParams = FTRLParams()
    #: hyper-parameter flags given explicitly: each must equal the servers' (ConfigError)
    given: dict[str, float] = field(default_factory=dict)
    learn: bool = False
    push_interval: float = 0.5
    worker: WorkerConfig = WorkerConfig()
    max_queue_rows: int = 1_000_000
    max_rows: int = 100_000

    def check(self) -> None:
        """ConfigError for a combination that cannot work."""
        if (self.model is None) == (self.server is None):
            raise ConfigError("give exactly one model source: --model FILE or --server URL")
        if self.learn and self.server is None:
            raise ConfigError("--learn needs --server (the cluster it learns into)")
        for name in ("reload_interval", "refresh", "push_interval"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_rows < 1 or self.max_queue_rows < 1:
            raise ConfigError("max_rows and max_queue_rows must be >= 1")


class PredictionService:
    """Model source, served model and optional learner of one ``ftrl-ps serve`` process."""

    def __init__(self, config: ServiceConfig) -> None:
        config.check()
        self.config = config
        self.served = ServingModel()
        self.learner: StreamLearner | None = None
        self._client: Any = None
        self.file_source: ModelFileSource | None = None
        self.cluster_source: ClusterModelSource | None = None
        self.started_at = time.time()
        self.shard_restarts = 0  # shard restarts seen while learning (rows may be lost)
        if config.model is not None:
            self.file_source = ModelFileSource(self.served, config.model, config.reload_interval)
        else:
            assert config.server is not None
            self.cluster_source = ClusterModelSource(
                self.served, config.server, params=config.params, token=config.token,
                interval=config.refresh, given=config.given)
            if config.learn:
                self._start_learner()
        self._warm_up()

    # --- set-up and shutdown ------------------------------------------------------------
    def _start_learner(self) -> None:
        from ftrl_ps.ps.client import PSClient

        cfg, source = self.config, self.cluster_source
        assert cfg.server is not None and source is not None
        # not registered: the learner pushes asynchronously, outside the SSP clock
        self._client = PSClient(cfg.server, token=cfg.token)
        self.learner = StreamLearner(
            self._client, source.layout.bits, source.params, cfg.worker,
            push_interval=cfg.push_interval, max_queue_rows=cfg.max_queue_rows, clocked=False)
        source.on_refreshed = self.learner.refreshed
        source.on_restart = self._shard_restarted
        learner, name = self.learner, f"serve-{uuid.uuid4().hex[:12]}"

        def pushed() -> None:  # refresh now; shard 0 counts the rows in its totals
            source.refresh_soon()
            rows, report = learner.rows_pushed, learner.worker.report  # applied rows only
            loss = report.loss_sum * rows / report.rows if report.rows else 0.0
            self._client.report_online(name, int(rows), float(loss))

        self.learner.on_pushed = pushed
        self.learner.start()

    def _shard_restarted(self, shard: int) -> None:
        self.shard_restarts += 1
        url = self.cluster_source.urls[shard] if self.cluster_source is not None else "?"
        log.warning("shard %d (%s) restarted: rows this service learned since that shard's "
                    "last checkpoint may be lost (the learner's pushes are not journaled); "
                    "%d such restart(s) seen", shard, url, self.shard_restarts)

    def _warm_up(self) -> None:
        """Load the kernels of a request now, not at the first request."""
        model = self.served.current()
        self.served.predict(model, parse_text(b"1 1:1\n", model.bits, labels=False))
        parse_json_rows(b'{"rows": [{"features": {"a": 1}, "label": 1}]}', model.bits,
                        labels=True)
        if self.learner is not None:
            from ftrl_ps.ps.kernels import warm_up

            warm_up()

    def start(self) -> None:
        """Start watching the file or refreshing from the cluster."""
        if self.file_source is not None:
            self.file_source.start()
        if self.cluster_source is not None:
            self.cluster_source.start()

    def close(self) -> None:
        """Graceful shutdown: train and push what was learned, stop every thread."""
        if self.learner is not None:
            self.learner.stop(timeout=SHUTDOWN_GRACE)
        if self._client is not None:
            self._client.close()
        if self.file_source is not None:
            self.file_source.stop()
        if self.cluster_source is not None:
            self.cluster_source.stop()

    # --- requests -----------------------------------------------------------------------
    def rows(self, body: bytes, media_type: str, bits: int, *, labels: bool) -> Batch:
        """The rows of a request body (by its media type); limits checked."""
        if media_type in TEXT_TYPES:
            batch = parse_text(body, bits, labels=labels)
        elif media_type == wire.JSON_MEDIA_TYPE:
            # json.loads holds 15-30x a body's size: too many objects for the row limit
            # are refused unparsed (a row is an object with a features object), and
            # large bodies are parsed a few at a time, whatever the concurrency
            objects = body.count(b"{")
            if objects > 2 * self.config.max_rows + 1:
                raise PayloadTooLargeError(
                    f"the JSON body holds {objects} objects, more than {self.config.max_rows} "
                    "rows (the limit per request) can; refused before parsing")
            if len(body) < BIG_JSON:
                batch = parse_json_rows(body, bits, labels=labels)
            else:
                with _BIG_JSON_PARSES:
                    batch = parse_json_rows(body, bits, labels=labels)
        elif media_type == wire.BINARY_MEDIA_TYPE:
            batch = rowwire.decode_rows(body, bits, labels=labels)
        else:
            raise ProtocolError(
                f"unsupported Content-Type {media_type or '(none)'!r}; send text/plain "
                f"(libsvm lines), {wire.JSON_MEDIA_TYPE} or {wire.BINARY_MEDIA_TYPE}")
        if batch.rows > self.config.max_rows:
            raise PayloadTooLargeError(f"{batch.rows} rows exceed the limit of "
                                       f"{self.config.max_rows} rows per request")
        return batch

    def predict(self, body: bytes, media_type: str) -> tuple[np.ndarray, int]:
        """Probabilities of the rows of ``body`` and the model version that scored them."""
        model = self.served.current()
        version = self.served.version
        rows = self.rows(body, media_type, model.bits, labels=False)
        return self.served.predict(model, rows), version

    def learn(self, body: bytes, media_type: str) -> dict[str, Any]:
        """Queue the labelled rows of ``body`` for the learner."""
        assert self.learner is not None and self.cluster_source is not None
        rows = self.rows(body, media_type, self.cluster_source.layout.bits, labels=True)
        ticket = self.learner.submit(rows)
        return {"accepted": rows.rows, "ticket": ticket, "model_version": self.served.version}

    def ready(self) -> bool:
        """Readiness: a model is served (and the learner, if any, runs).

        A failing source (a model file that does not load, a cluster that does
        not answer) does not make the service unready: it goes on serving its
        last model, and every replica shares the source, so taking them all out
        of the load balancer would turn a stale model into no answers at all.
        :meth:`source_healthy` (``/v1/status``, ``/ready``'s body, the metrics)
        tells the operator."""
        if not self.served.ready:
            return False
        return self.learner is None or self.learner.error is None

    def source_healthy(self) -> bool:
        """Whether the last reload or refresh of the model source worked (when not,
        the previous model is still served: see :meth:`ready`)."""
        source = self.file_source or self.cluster_source
        return source is not None and bool(source.status()["healthy"])

    def status(self) -> dict[str, Any]:
        """The JSON of ``/v1/status``."""
        source = self.file_source or self.cluster_source
        assert source is not None
        return {
            "ready": self.ready(),
            "model": self.served.status(),
            "source": source.status(),
            "learner": None if self.learner is None else {
                **self.learner.status(), "shard_restarts": self.shard_restarts},
            "limits": {"max_rows": self.config.max_rows,
                       "max_queue_rows": self.config.max_queue_rows},
            "uptime_s": round(time.time() - self.started_at, 3),
        }
