"""FastAPI dependencies and content negotiation shared by the routers.

* ``StateDep`` — the shard's :class:`~ftrl_ps.ps.state.ServerState`.
* :class:`AuthMiddleware` — with a token, every request but ``/health`` and
  ``/ready`` needs ``Authorization: Bearer <token>`` (reads, ``/docs`` and
  ``/openapi.json`` included); ``AuthDep`` is the same check as a dependency.
* ``BodyDep`` — the raw request body (its size is capped by
  :class:`~ftrl_ps.server.limits.BodyLimitMiddleware`).
* :func:`decode_body` / :func:`encode_response` — binary or JSON by
  ``Content-Type`` and ``Accept``: a request is parsed by its Content-Type
  (``application/x-ftrl-ps`` or ``application/json``); the answer is binary if
  ``Accept`` names ``application/x-ftrl-ps``, JSON if it names
  ``application/json``, else the same format as the request.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse, Response

from ftrl_ps.errors import AuthError, ProtocolError
from ftrl_ps.ps import wire
from ftrl_ps.ps.http_status import error_payload, status_for
from ftrl_ps.ps.state import ServerState

__all__ = [
    "OPEN_PATHS",
    "OPEN_PREFIXES",
    "AuthDep",
    "AuthMiddleware",
    "accepts_json",
    "check_bearer",
    "check_request_token",
    "content_type",
    "BodyDep",
    "StateDep",
    "decode_body",
    "encode_response",
    "get_state",
    "media_type",
    "require_token",
    "scope_header",
]


def get_state(request: Request) -> ServerState:
    """The shard state stored on the app at creation."""
    state: ServerState = request.app.state.ftrl
    return state


StateDep = Annotated[ServerState, Depends(get_state)]


#: the only routes that answer without the token: liveness and readiness probes, and
#: the dashboard's static page (HTML/JS/CSS, no data: its feed needs the token) with
#: the page's question whether it must ask for a token
OPEN_PATHS = frozenset({"/health", "/ready", "/dashboard", "/v1/dashboard/auth"})
OPEN_PREFIXES = ("/dashboard/",)


def check_bearer(headers: list[str], token: str | None) -> None:
    """Raise AuthError unless ``headers`` (a request's Authorization values, in
    order) are one header naming ``token``. Several Authorization headers are
    refused whatever they hold: proxies and frameworks disagree on which one
    counts, so none is picked."""
    if token is None:
        return
    if len(headers) > 1:
        raise AuthError(f"{len(headers)} Authorization headers; send exactly one")
    scheme, _, value = (headers[0] if headers else "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise AuthError("this server requires 'Authorization: Bearer <token>'")
    if not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise AuthError("wrong bearer token")


def check_request_token(request: Request, token: str | None) -> None:
    """:func:`check_bearer` on a request's Authorization headers."""
    check_bearer(request.headers.getlist("authorization"), token)


def require_token(request: Request, state: StateDep) -> None:
    """Raise AuthError unless the request carries the configured bearer token."""
    check_request_token(request, state.settings.token)


class AuthMiddleware:
    """Pure ASGI: 401 for every request but :data:`OPEN_PATHS` without the token,
    before anything reads the body. ``by_path``: paths with a token of their own
    (None: open), e.g. the prediction service's predict and learn tokens."""

    def __init__(self, app: Any, token: str | None,
                 by_path: dict[str, str | None] | None = None) -> None:
        self.app = app
        self.token = token
        self.by_path = by_path or {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        token = self.by_path.get(path, self.token)
        if (scope["type"] != "http" or token is None or path in OPEN_PATHS
                or path.startswith(OPEN_PREFIXES)):
            await self.app(scope, receive, send)
            return
        headers = [value.decode("latin-1") for name, value in scope.get("headers", ())
                   if name == b"authorization"]
        try:
            check_bearer(headers, token)
        except AuthError as exc:
            body = JSONResponse(error_payload(exc), status_code=status_for(exc),
                                headers={"WWW-Authenticate": "Bearer"})
            await body(scope, receive, send)
            return
        await self.app(scope, receive, send)


AuthDep = Depends(require_token)


async def read_body(request: Request) -> bytes:
    """The whole request body (size-capped by the body-limit middleware)."""
    return await request.body()


BodyDep = Annotated[bytes, Depends(read_body)]


def scope_header(scope: Any, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case) of an ASGI scope, as
    starlette's ``Headers.get`` gives it (for middlewares, which have no
    ``Request``); None if absent."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def media_type(value: str) -> str:
    """The media type of a Content-Type or Accept entry, without parameters."""
    return value.split(";", 1)[0].strip().lower()


def content_type(scope: Any) -> str:
    """An ASGI request's Content-Type, without parameters ("" if none)."""
    return media_type(scope_header(scope, b"content-type") or "")


def request_is_json(request: Request) -> bool:
    """True for a JSON body, False for binary; ProtocolError otherwise."""
    ctype = media_type(request.headers.get("content-type", ""))
    if ctype == wire.BINARY_MEDIA_TYPE:
        return False
    if ctype == wire.JSON_MEDIA_TYPE:
        return True
    raise ProtocolError(
        f"unsupported Content-Type {ctype or '(none)'!r}; "
        f"send {wire.BINARY_MEDIA_TYPE} or {wire.JSON_MEDIA_TYPE}"
    )


def response_is_json(request: Request, default_json: bool) -> bool:
    """Pick the answer format from ``Accept`` (see the module docstring)."""
    return accepts_json(request.headers.get("accept", ""), default_json)


def accepts_json(accept_header: str, default_json: bool) -> bool:
    """Whether an ``Accept`` value asks for JSON: binary if it names
    ``application/x-ftrl-ps``, JSON if it names ``application/json``, else
    ``default_json``."""
    accept = [media_type(part) for part in accept_header.split(",")]
    if wire.BINARY_MEDIA_TYPE in accept:
        return False
    if wire.JSON_MEDIA_TYPE in accept:
        return True
    return default_json


def decode_body(request: Request, body: bytes, kind: int) -> wire.Message:
    """Parse a request body of the given wire kind (binary or JSON)."""
    if request_is_json(request):
        return wire.decode_json(body, kind)
    return wire.decode(body, kind)


def encode_response(
    request: Request,
    kind: int,
    keys: Any = None,
    values: tuple[Any, Any] | None = None,
    *,
    default_json: bool,
    dtype: Any = None,
    merge: tuple[Any, ...] | None = None,
) -> Response:
    """Answer a message of the given kind in the negotiated format."""
    if response_is_json(request, default_json):
        return JSONResponse(wire.to_json(kind, keys, values, merge))
    return Response(
        wire.encode(kind, keys, values, dtype=dtype, merge=merge),
        media_type=wire.BINARY_MEDIA_TYPE,
    )
