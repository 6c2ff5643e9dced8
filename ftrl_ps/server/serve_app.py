"""The FastAPI application of the prediction service (``ftrl-ps serve``).

One function builds it, :func:`create_serve_app`, so that other parts (a
metrics endpoint, middleware) can extend the app it returns. The routes are
in :mod:`ftrl_ps.server.serve_routes`; everything they call is a
:class:`~ftrl_ps.ps.service.PredictionService`. The app's lifespan starts the
model source's thread and, on shutdown, stops the service gracefully: the
learner trains what is queued and pushes it before the process exits.

Example (in-process, no network)::

    service = PredictionService(ServiceConfig(model="model.ftrl"))
    with TestClient(create_serve_app(service)) as c:
        c.post("/v1/predict", content=b"3:1 17:0.5\\n",
               headers={"Content-Type": "text/plain"}).json()
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

from ftrl_ps import __version__
from ftrl_ps.ps.service import PredictionService
from ftrl_ps.server import serve_routes
from ftrl_ps.server.deps import AuthMiddleware, check_request_token
from ftrl_ps.server.errors import install_error_handlers
from ftrl_ps.server.limits import BodyLimitMiddleware
from ftrl_ps.server.metrics import instrument
from ftrl_ps.server.serve_metrics import ServeCollector

__all__ = ["create_serve_app"]


def create_serve_app(
    service: PredictionService,
    *,
    token: str | None = None,
    predict_token: str | None = None,
    max_body_bytes: int = 16 << 20,
) -> FastAPI:
    """The app of one prediction service. ``token`` guards ``/v1/learn`` (present
    only when the service learns), ``predict_token`` guards ``/v1/predict``; the
    status, the docs and the metrics need ``token``, else ``predict_token`` (when
    either is set); ``/health`` and ``/ready`` are open (probes)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            service.close()

    app = FastAPI(
        title="ftrl-ps prediction service",
        version=__version__,
        summary="predictions from a model file or the live cluster; online learning",
        lifespan=lifespan,
    )
    app.state.serving = service
    app.state.token = token
    app.state.predict_token = predict_token
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)
    # outermost, before any body is read: predict and learn have their own tokens;
    # everything else but the probes (status, docs, metrics) needs one of them
    app.add_middleware(AuthMiddleware, token=token or predict_token,
                       by_path={"/v1/predict": predict_token, "/v1/learn": token})
    app.include_router(serve_routes.router)
    if service.learner is not None:
        app.include_router(serve_routes.learn_router)

    def metrics_auth(request: Request) -> None:  # the token guards metrics when one is set
        check_request_token(request, token or predict_token)

    instrument(app, component="serve", auth=metrics_auth,
               collectors=[ServeCollector(service)])
    return app
