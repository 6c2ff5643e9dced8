"""The binary push and pull, answered as plain ASGI ahead of FastAPI's routing.

Workers send every push and pull as a binary body (:mod:`ftrl_ps.ps.wire`),
and those two routes are nearly all of a shard's traffic. Through FastAPI
each one pays its router, its dependency solving, a ``Request`` object and
the exception middleware before the store is reached: ~1.5 ms of CPU per
request on the 2-core test machine, more than the store's numpy work on a
34,000-key push (``benchmarks/RESULTS.md``, session 16). So a binary
``POST /v1/push`` or ``POST /v1/pull`` (whose answer is binary, or JSON for a
push, as the routes give) is answered here, by the same functions the routes
call (:func:`answer_push`, :func:`answer_pull`), in the same threadpool;
everything else goes on to FastAPI. The middleware sits inside the metrics,
token and body-limit middlewares, so those apply alike; an error is answered
as the app's handlers answer it (:func:`ftrl_ps.server.errors.error_answer`).
The routes and their OpenAPI schema stay where they are (JSON bodies, and
binary ones when this middleware is not installed, as in tests).
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from ftrl_ps.ps import wire
from ftrl_ps.ps.state import ServerState
from ftrl_ps.server.deps import accepts_json, media_type
from ftrl_ps.server.errors import error_answer

__all__ = ["HOT_PATHS", "HotPathMiddleware", "answer_pull", "answer_push"]


def answer_push(state: ServerState, msg: wire.Message) -> dict[str, object]:
    """The answer to a decoded PUSH (applied exactly once: ServerState.push)."""
    return state.push(msg)


def answer_pull(state: ServerState, msg: wire.Message) -> tuple[Any, Any, Any]:
    """``(n, z, merge)`` at a decoded KEYS message's keys, in their order;
    ``merge`` is ``(versions,)`` if the message asks for versions (only a
    shard of a versioned merge rule keeps them: ProtocolError from others)."""
    if msg.merge is not None:
        state.store.require_versions("a pull asking for versions")
    n, z, versions = state.store.pull_versioned(msg.keys)
    return n, z, None if msg.merge is None else (versions,)


def _push(state: ServerState, body: bytes) -> tuple[bytes, bytes]:
    answer = answer_push(state, wire.decode(body, wire.PUSH))
    return _json(answer), b"application/json"


def _pull(state: ServerState, body: bytes) -> tuple[bytes, bytes]:
    n, z, merge = answer_pull(state, wire.decode(body, wire.KEYS))
    out = wire.encode(wire.VALUES, None, (n, z), dtype=state.store.dtype, merge=merge)
    return out, wire.BINARY_MEDIA_TYPE.encode()


#: path -> (handler, whether its answer follows Accept: a pull's does, a push's is JSON)
HOT_PATHS = {"/v1/push": (_push, False), "/v1/pull": (_pull, True)}


def _json(content: Any) -> bytes:
    """Rendered as starlette's JSONResponse renders it."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                      separators=(",", ":")).encode("utf-8")


class HotPathMiddleware:
    """Pure ASGI: answers binary ``POST /v1/push`` and ``/v1/pull`` itself.

    ``routes``: the routes of those paths (ftrl_ps.server.routes_params), put
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
        hot = HOT_PATHS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if hot is None or scope.get("method") != "POST" or not _binary(scope, hot[1]):
            await self.app(scope, receive, send)
            return
        scope["route"] = self.routes[scope["path"]]
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        handler = hot[0]
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            out, content_type = await anyio.to_thread.run_sync(handler, self.state, body)
            status, headers = 200, [(b"content-type", content_type)]
        except Exception as exc:
            status, payload, extra = error_answer(exc, "POST", scope["path"])
            out = _json(payload)
            headers = [(b"content-type", b"application/json")]
            headers += [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in extra.items()]
        headers.append((b"content-length", str(len(out)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})


def _binary(scope: dict[str, Any], negotiated: bool) -> bool:
    """A binary body whose answer the hot path gives (a pull's Accept must not
    ask for JSON; the route answers that one)."""
    ctype = accept = ""
    for name, value in scope.get("headers", ()):
        if name == b"content-type" and not ctype:  # the first, as starlette's Headers.get
            ctype = value.decode("latin-1")
        elif name == b"accept" and not accept:
            accept = value.decode("latin-1")
    if media_type(ctype) != wire.BINARY_MEDIA_TYPE:
        return False
    return not (negotiated and accepts_json(accept, default_json=False))
