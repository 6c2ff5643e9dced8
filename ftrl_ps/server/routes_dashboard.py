"""``/dashboard``: a live view of the cluster in plain HTML/JS/CSS, and its JSON feed.

* ``GET /dashboard`` -- the page; ``GET /dashboard/{app.js,style.css}`` -- its
  script and style sheet. Package data of ``ftrl_ps/server/dashboard/``: no
  build step, nothing loaded from elsewhere (the Content-Security-Policy
  header forbids it), so it works on an offline cluster.
* ``GET /v1/dashboard`` -- the JSON the page polls every second
  (:meth:`ftrl_ps.server.observability.Observer.feed`). With a token set it
  requires ``Authorization: Bearer``; the page then asks for the token, keeps
  it in the tab's ``sessionStorage`` and sends it in that header, never in a
  URL. ``GET /v1/dashboard/auth`` (open) tells the page whether to ask.

The page and its files carry no data and are open; shard 0 has the workers,
the other shards show their own row only.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ftrl_ps.errors import ProtocolError
from ftrl_ps.server.deps import AuthDep, StateDep

__all__ = ["ASSETS", "CSP", "router"]

router = APIRouter(tags=["dashboard"])

#: the files of the page: name -> media type
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

#: everything from this origin only; no inline script; data: for the empty favicon
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@cache
def _asset(name: str) -> bytes:
    return resources.files("ftrl_ps.server").joinpath("dashboard", name).read_bytes()


def _file(name: str) -> Response:
    if name not in ASSETS:
        raise ProtocolError(f"no dashboard file {name!r}; files: {', '.join(sorted(ASSETS))}")
    return Response(
        _asset(name),
        media_type=ASSETS[name],
        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache",
                 "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"},
    )


@router.get("/dashboard", summary="live dashboard of the cluster (HTML)",
            response_class=Response)
def dashboard() -> Response:
    """The page (``index.html``); it polls ``/v1/dashboard``."""
    return _file("index.html")


@router.get("/dashboard/{name}", summary="a file of the dashboard page", response_class=Response)
def dashboard_file(name: str) -> Response:
    """``app.js`` or ``style.css`` (400 for any other name)."""
    return _file(name)


@router.get("/v1/dashboard/auth", summary="does the dashboard feed need a token?")
def dashboard_auth(state: StateDep) -> dict[str, bool]:
    """``{"token_required": bool}`` (open: the page asks for a token only when needed,
    instead of provoking a 401)."""
    return {"token_required": state.settings.token is not None}


@router.get("/v1/dashboard", summary="the dashboard's data: cluster, workers, shards, history",
            dependencies=[AuthDep])
async def dashboard_feed(request: Request) -> dict[str, Any]:
    """Cluster totals, the workers (shard 0), every known shard's keys and load,
    and the throughput / log-loss history sampled every second."""
    feed: dict[str, Any] = await request.app.state.observer.feed()
    return feed
