"""The FastAPI application of one parameter-server shard.

Run exactly ONE process per shard: the parameters live in this process's
memory, so several uvicorn workers would each hold a different copy.

Routes (OpenAPI schema at ``/openapi.json``, docs at ``/docs``)::

    POST /v1/pull                      keys -> n, z
    POST /v1/pull-groups               group ids -> keys, n, z
    POST /v1/push                      keys, delta_n, delta_z (+ worker id, seq)   [auth]
    GET  /v1/state                     every touched key with n, z (binary dump)
    GET  /v1/changes?since=V           touched keys of groups written since V      [auth]
    POST /v1/workers                   register (shard 0)                          [auth]
    POST /v1/workers/{id}/clock        tick + SSP wait (shard 0)                   [auth]
    POST /v1/workers/{id}/wait         SSP wait (shard 0)                          [auth]
    POST /v1/workers/{id}/heartbeat    (shard 0)                                   [auth]
    POST /v1/workers/{id}/finish       (shard 0)                                   [auth]
    POST /v1/work/plan                 load the plan of input units (shard 0)      [auth]
    POST /v1/work/next                 finished units in, next unit out (shard 0)  [auth]
    POST /v1/work/progress             rows of held units applied (shard 0)        [auth]
    GET  /v1/work                      units pending, assigned, done (shard 0)
    GET  /v1/status                    JSON overview
    GET  /health                       liveness
    GET  /metrics                      Prometheus metrics (server/shard_metrics.py) [auth]
    GET  /dashboard                    live dashboard page (its data: /v1/dashboard [auth])

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
    routes_work,
    routes_workers,
)
from ftrl_ps.server.errors import install_error_handlers
from ftrl_ps.server.limits import BodyLimitMiddleware
from ftrl_ps.server.observability import observe

__all__ = ["create_app"]


def create_app(
    settings: ServerSettings, state: ServerState | None = None, *, peers: Sequence[str] = ()
) -> FastAPI:
    """Build the app of one shard (the store is allocated here; an
    ``init_model`` is loaded here, so its errors surface before serving).

    ``peers``: URLs of shards 1..M-1, which shard 0's dashboard asks for their keys and load.
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
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.include_router(routes_params.router)
    app.include_router(routes_workers.router)
    app.include_router(routes_status.router)
    app.include_router(routes_work.router)
    app.include_router(routes_changes.router)
    observer = observe(app, state, peers)  # /metrics, /dashboard and their data
    return app
