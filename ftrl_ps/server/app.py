"""The FastAPI application of one parameter-server shard.

Run exactly ONE process per shard: the parameters live in this process's
memory, so several uvicorn workers would each hold a different copy.

Routes (OpenAPI schema at ``/openapi.json``, docs at ``/docs``). With a token,
every route but ``/health`` and ``/ready`` requires it (reads and docs too)::

    POST /v1/pull                      keys -> n, z
    POST /v1/pull-groups               group ids -> keys, n, z
    POST /v1/push                      keys, delta_n, delta_z (+ worker, epoch, seq...)
    GET  /v1/state                     every touched key with n, z (streamed)
    GET  /v1/changes?since=V           touched keys of groups written since V
    POST /v1/workers                   register (shard 0)
    POST /v1/workers/{id}/clock        tick + SSP wait (shard 0)
    POST /v1/workers/{id}/wait         SSP wait (shard 0)
    POST /v1/workers/{id}/heartbeat    (shard 0)
    POST /v1/workers/{id}/finish       (shard 0)
    POST /v1/streams/{index}           claim an epoch: the index's push record
    GET  /v1/streams                   every push record
    POST /v1/work/plan                 load the plan of input units (shard 0)
    POST /v1/work/next                 finished units in, next unit out (shard 0)
    POST /v1/work/progress             rows of held units applied (shard 0)
    GET  /v1/work                      units pending, assigned, done (shard 0)
    GET  /v1/status                    JSON overview
    GET  /health                       liveness (no token)
    GET  /ready                        readiness: state restored, serving (no token)
    GET  /metrics                      Prometheus metrics (server/shard_metrics.py)
    GET  /dashboard                    live dashboard page (its data: /v1/dashboard)

Example (in-process, no network):

>>> from fastapi.testclient import TestClient
>>> from ftrl_ps.ps.shard_settings import ServerSettings
>>> c = TestClient(create_app(ServerSettings(bits=10)))
>>> c.post("/v1/push", json={"keys": [3], "delta_n": [1.0], "delta_z": [0.5]}).json()
{'applied': True, 'keys': 1, 'seq': 0}
>>> c.post("/v1/pull", json={"keys": [3, 4]}).json()
{'n': [1.0, 0.0], 'z': [0.5, 0.0]}
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI

from ftrl_ps import __version__
from ftrl_ps.ps.shard_settings import ServerSettings
from ftrl_ps.ps.state import ServerState
from ftrl_ps.server import (
    routes_changes,
    routes_params,
    routes_status,
    routes_streams,
    routes_work,
    routes_workers,
)
from ftrl_ps.server.deps import AuthMiddleware
from ftrl_ps.server.errors import install_error_handlers
from ftrl_ps.server.hotpath import HotPathMiddleware
from ftrl_ps.server.limits import BodyLimitMiddleware
from ftrl_ps.server.observability import observe
from ftrl_ps.server.openapi import install_openapi

__all__ = ["create_app"]


def create_app(
    settings: ServerSettings, state: ServerState | None = None, *, peers: Sequence[str] = (),
    hot_path: bool = True,
) -> FastAPI:
    """Build the app of one shard (the store is allocated here; an
    ``init_model`` is loaded here, so its errors surface before serving).

    ``peers``: URLs of shards 1..M-1, which shard 0's dashboard asks for their keys and load.
    ``hot_path``: binary pushes and pulls and clock ticks answered ahead of
    FastAPI's routing (:mod:`ftrl_ps.server.hotpath`; False: by the routes, as
    every other request).
    """
    state = state if state is not None else ServerState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        observer.start()
        try:
            yield
        finally:
            observer.close()
            state.close()

    app = FastAPI(
        title="ftrl-ps parameter server",
        version=__version__,
        summary=f"shard {settings.shard_index} of {settings.num_shards}",
        lifespan=lifespan,
    )
    app.state.ftrl = state
    install_error_handlers(app)
    if hot_path:  # innermost: inside the metrics, token and body limit
        app.add_middleware(HotPathMiddleware, state=state,
                           routes=routes_params.router.routes + routes_workers.router.routes)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes,
                       body_timeout=settings.body_timeout,
                       max_json_depth=settings.max_json_depth)
    app.add_middleware(AuthMiddleware, token=settings.token)  # outermost: before any body
    app.include_router(routes_params.router)
    # other shards answer the worker routes with 400 naming shard 0; not in their schema
    app.include_router(routes_workers.router, include_in_schema=settings.is_clock_authority)
    app.include_router(routes_streams.router)
    app.include_router(routes_status.router)
    app.include_router(routes_work.router, include_in_schema=settings.is_clock_authority)
    app.include_router(routes_changes.router)
    install_openapi(app)
    observer = observe(app, state, peers)  # /metrics, /dashboard and their data
    return app
