"""Prometheus metrics for any ftrl-ps web app: :func:`instrument`.

``instrument(app)`` gives a FastAPI app (a parameter-server shard, the
prediction service, ...) a ``GET /metrics`` route in the Prometheus text
format and, for every request, counts it and times it:

==========================================  =========  ==========================
name                                         type       labels
==========================================  =========  ==========================
``ftrl_ps_http_requests_total``              counter    method, route, status
``ftrl_ps_http_request_duration_seconds``    histogram  method, route
``ftrl_ps_http_requests_in_progress``        gauge      method
``ftrl_ps_process_*``                        (process)  resident/virtual memory
                                                        bytes, CPU seconds, open
                                                        fds, start time
``ftrl_ps_build_info``                       gauge      version, component
==========================================  =========  ==========================

``route`` is the route's path template (``/v1/workers/{worker_id}/clock``),
never the raw path, so the number of series stays bounded, also for requests
answered before the router (a 401 of the token check counts under the route
it asked for); requests that match no route count as ``route="unmatched"``. Every app gets its own
:class:`~prometheus_client.CollectorRegistry` (several apps in one process,
as in the tests, do not mix their numbers); pass ``collectors`` to add the
app's own metrics to it (a shard adds :class:`~ftrl_ps.server.shard_metrics.ShardCollector`).

With ``auth`` (a FastAPI dependency, e.g. the shard's bearer-token check),
``/metrics`` requires it: Prometheus sends the token with
``authorization: {credentials: ...}`` in its scrape config.

>>> from fastapi import FastAPI
>>> from fastapi.testclient import TestClient
>>> app = FastAPI()
>>> @app.get("/hello")
... def hello() -> str:
...     return "hi"
>>> registry = instrument(app, component="example")
>>> client = TestClient(app)
>>> client.get("/hello").status_code, client.get("/nope").status_code
(200, 404)
>>> text = client.get("/metrics").text
>>> 'ftrl_ps_http_requests_total{method="GET",route="/hello",status="200"} 1.0' in text
True
>>> 'route="unmatched",status="404"' in text
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import Depends
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.registry import Collector

__all__ = ["LATENCY_BUCKETS", "NAMESPACE", "instrument"]

NAMESPACE = "ftrl_ps"

#: request latency buckets (seconds): ~0.2 ms pulls to 30 s clock waits
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

Scope = dict[str, Any]
ASGIApp = Callable[..., Any]


class _HTTPMetrics:
    """The request counter, latency histogram and in-progress gauge of one app."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "http_requests", "HTTP requests answered, by route template and status",
            ("method", "route", "status"), namespace=NAMESPACE, registry=registry,
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "time from request start to the end of the answer, by route template",
            ("method", "route"), namespace=NAMESPACE, registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.in_progress = Gauge(
            "http_requests_in_progress", "requests being handled now",
            ("method",), namespace=NAMESPACE, registry=registry,
        )


def _route_of(scope: Scope, templates: Callable[[], list[tuple[Any, str]]]) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    # answered before the router (a 401 of the token check): the template its path
    # matches, from the app's OpenAPI paths (routes hidden from the schema: unmatched)
    asked = scope.get("path", "")
    return next((t for regex, t in templates() if regex.fullmatch(asked)), "unmatched")


class MetricsMiddleware:
    """Pure ASGI middleware: counts and times every HTTP request (streaming-safe)."""

    def __init__(self, app: ASGIApp, metrics: _HTTPMetrics, schema: Callable[[], Any]) -> None:
        self.app = app
        self.metrics = metrics
        self.schema = schema  # the app's OpenAPI document, for requests the router never saw
        self._templates: list[tuple[Any, str]] | None = None

    def templates(self) -> list[tuple[Any, str]]:
        """(regex, template) of the app's OpenAPI paths, built at the first need."""
        if self._templates is None:
            from starlette.routing import compile_path

            self._templates = [(compile_path(t)[0], t) for t in self.schema().get("paths", {})]
        return self._templates

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        method = scope.get("method", "GET")

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        # (the route is known only once the router has matched the request)
        gauge = self.metrics.in_progress.labels(method)
        gauge.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            gauge.dec()
            route = _route_of(scope, self.templates)
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - start)


class _BuildInfo(Collector):
    def __init__(self, component: str) -> None:
        self.component = component

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from ftrl_ps import __version__

        info = GaugeMetricFamily(
            f"{NAMESPACE}_build_info", "ftrl-ps version and the component serving /metrics",
            labels=("version", "component"),
        )
        info.add_metric((__version__, self.component), 1.0)
        yield info


def instrument(
    app: Any,
    *,
    registry: CollectorRegistry | None = None,
    collectors: Iterable[Collector] = (),
    auth: Any = None,
    component: str = "server",
    path: str = "/metrics",
) -> CollectorRegistry:
    """Count and time ``app``'s requests and serve ``GET path`` (default ``/metrics``).

    Parameters
    ----------
    app : fastapi.FastAPI
        The app; call this before it starts serving (it adds a middleware).
    registry : CollectorRegistry, optional
        Where the metrics go; default a new registry for this app.
    collectors : iterable of Collector
        More collectors to register (the app's own metrics).
    auth : FastAPI dependency, optional
        Required on ``GET path`` (e.g. a bearer-token check); None: open.
    component : str
        Shown in ``ftrl_ps_build_info{component=...}`` (``server``, ``serve``).

    Returns the registry (register more collectors on it at any time).
    """
    # no ``*_created`` series (process-wide): they double the families for no use here
    disable_created_metrics()
    registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
    ProcessCollector(namespace=NAMESPACE, registry=registry)
    registry.register(_BuildInfo(component))
    for collector in collectors:
        registry.register(collector)
    app.add_middleware(MetricsMiddleware, metrics=_HTTPMetrics(registry), schema=app.openapi)

    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route(
        path, metrics, methods=["GET"], response_class=Response, tags=["status"],
        summary="Prometheus metrics (text format)",
        dependencies=[Depends(auth)] if auth is not None else None,
        include_in_schema=True,
    )
    app.state.metrics_registry = registry
    return registry
