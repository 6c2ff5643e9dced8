"""A worker's every-round requests, answered as plain ASGI ahead of FastAPI's routing.

Each round a worker pushes and pulls (binary bodies, :mod:`ftrl_ps.ps.wire`)
and ticks its SSP clock on shard 0 (a small JSON body): nearly all of a
shard's traffic. Through FastAPI each request pays its router, its dependency
solving, a ``Request`` object, response validation and the exception
middleware before the store or the clock is reached: ~1.5 ms of CPU per
request on the 2-core test machine, more than the store's numpy work on a
34,000-key push (``benchmarks/RESULTS.md``, session 16). So this middleware
answers

* a binary ``POST /v1/push`` (answer JSON) and ``POST /v1/pull`` (answer
  binary, unless ``Accept`` asks for JSON),
* ``POST /v1/workers/{id}/clock`` with an empty body or a JSON object that
  :class:`~ftrl_ps.server.routes_workers.ClockRequest` accepts,

by the very functions the routes call (:func:`~ftrl_ps.server.routes_params.answer_push`,
:func:`~ftrl_ps.server.routes_params.answer_pull`,
:func:`~ftrl_ps.server.routes_workers.answer_tick`), with the app's error
answers (:func:`ftrl_ps.server.errors.error_answer`). A tick body the model
refuses goes on to the route (the body replayed), which answers the 400 as
for any request; so does every other request. The middleware sits inside the
metrics, token and body-limit middlewares, so those apply alike. The routes
and their OpenAPI schema stay as they are.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from pydantic import ValidationError

from ftrl_ps.ps import wire
from ftrl_ps.ps.state import ServerState
from ftrl_ps.server import routes_params, routes_workers
from ftrl_ps.server.deps import accepts_json, content_type, scope_header
from ftrl_ps.server.errors import error_answer
from ftrl_ps.server.limits import replaying

__all__ = ["HOT_PATHS", "HotPathMiddleware"]

JSON_MEDIA = wire.JSON_MEDIA_TYPE.encode()
#: the route templates answered here
HOT_PATHS = ("/v1/push", "/v1/pull", "/v1/workers/{worker_id}/clock")


def _push(state: ServerState, body: bytes) -> tuple[bytes, bytes]:
    answer = routes_params.answer_push(state, wire.decode(body, wire.PUSH))
    return _json(answer), JSON_MEDIA


def _pull(state: ServerState, body: bytes) -> tuple[bytes, bytes]:
    n, z, merge = routes_params.answer_pull(state, wire.decode(body, wire.KEYS))
    out = wire.encode(wire.VALUES, None, (n, z), dtype=state.store.dtype, merge=merge)
    return out, wire.BINARY_MEDIA_TYPE.encode()


def _json(content: Any) -> bytes:
    """Rendered as starlette's JSONResponse renders it."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                      separators=(",", ":")).encode("utf-8")


def _tick_worker(path: str) -> int | None:
    """The worker id of a ``/v1/workers/{id}/clock`` path (plain digits), else None."""
    head, tail = "/v1/workers/", "/clock"
    if not (path.startswith(head) and path.endswith(tail)):
        return None
    middle = path[len(head):-len(tail)]
    return int(middle) if middle.isascii() and middle.isdigit() and len(middle) < 19 else None


class HotPathMiddleware:
    """Pure ASGI: answers a worker's pushes, pulls and clock ticks itself.

    ``routes``: the app's routes of :data:`HOT_PATHS` (from the routers), put
    in the scope as the router would, so that the metrics label the requests
    by route.
    """

    def __init__(self, app: Any, state: ServerState, routes: Any) -> None:
        self.app = app
        self.state = state
        self.routes = {r.path: r for r in routes if getattr(r, "path", None) in HOT_PATHS}
        missing = set(HOT_PATHS) - set(self.routes)
        if missing:
            raise ValueError(f"no route for {sorted(missing)}")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        if path in ("/v1/push", "/v1/pull"):
            accept = scope_header(scope, b"accept") or ""
            binary = content_type(scope) == wire.BINARY_MEDIA_TYPE
            if binary and not (path == "/v1/pull" and accepts_json(accept, False)):
                handler = _push if path == "/v1/push" else _pull
                await self._answer(scope, receive, send, path, lambda body: (
                    anyio.to_thread.run_sync(handler, self.state, body)))
                return
        else:
            worker_id = _tick_worker(path)
            if worker_id is not None:
                await self._answer(scope, receive, send, "/v1/workers/{worker_id}/clock",
                                   lambda body: self._tick(scope, worker_id, body))
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: dict[str, Any], receive: Any, send: Any, route: str,
                      answer: Callable[[bytes], Awaitable[tuple[bytes, bytes] | None]]) -> None:
        """Read the body and answer it with ``answer`` (None: the app answers,
        the body replayed to it)."""
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            answered = await answer(body)
        except Exception as exc:
            status, payload, extra = error_answer(exc, "POST", scope["path"])
            out = _json(payload)
            headers = [(b"content-type", JSON_MEDIA)]
            headers += [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in extra.items()]
        else:
            if answered is None:  # the route answers (its errors as for any request)
                await self.app(scope, replaying(body, receive), send)
                return
            out, media = answered
            status, headers = 200, [(b"content-type", media)]
        scope["route"] = self.routes[route]  # for the metrics, as the router would
        headers.append((b"content-length", str(len(out)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    async def _tick(self, scope: dict[str, Any], worker_id: int,
                    body: bytes) -> tuple[bytes, bytes] | None:
        if body:  # (whitespace is no empty body: the route's 400)
            if content_type(scope) != wire.JSON_MEDIA_TYPE:
                return None
            try:
                fields = json.loads(body)
                if not isinstance(fields, dict):
                    return None
                req = routes_workers.ClockRequest.model_validate(fields)
            except (ValueError, ValidationError):  # the route's 400 answers it
                return None
        else:
            req = routes_workers.ClockRequest()
        answer = await routes_workers.answer_tick(self.state, worker_id, req)
        return _json(answer), JSON_MEDIA
