"""FastAPI error handlers of the server: every error answer as JSON.

Status codes and bodies come from :mod:`ftrl_ps.ps.http_status`, the one
mapping of the error hierarchy to HTTP (the client uses it too, without this
module). FastAPI is imported only inside :func:`install_error_handlers`.
"""

from __future__ import annotations

import logging
from typing import Any

from ftrl_ps import errors as E
from ftrl_ps.ps.http_status import error_payload, status_for

__all__ = ["error_answer", "install_error_handlers"]

_log = logging.getLogger("ftrl_ps.server")


def error_answer(exc: BaseException, method: str, path: str
                 ) -> tuple[int, dict[str, Any], dict[str, str]]:
    """``(status, JSON body, headers)`` of the answer to ``exc`` raised while
    serving ``method path``; a 500 is logged with its traceback."""
    status = status_for(exc)
    if status == 500:
        _log.error("request %s %s failed", method, path, exc_info=exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    return status, error_payload(exc), headers


def install_error_handlers(app: Any) -> None:
    """Register JSON error handlers on a FastAPI app: ftrl-ps errors by the
    table of :mod:`ftrl_ps.ps.http_status`, request validation errors as
    ProtocolError (400), HTTP errors (404 route, 405 method) with their own
    status, anything else as 500."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    async def ftrl_error(request: Any, exc: Exception) -> JSONResponse:
        status, payload, headers = error_answer(exc, request.method, request.url.path)
        return JSONResponse(payload, status_code=status, headers=headers or None)

    async def validation_error(request: Any, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = [
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', '')}"
            for err in exc.errors()[:5]
        ]
        return JSONResponse(
            {"error": "ProtocolError", "detail": "invalid request: " + "; ".join(parts)},
            status_code=400,
        )

    async def http_error(request: Any, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        name = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        return JSONResponse(
            {"error": name, "detail": str(exc.detail)},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    app.add_exception_handler(E.FTRLPSError, ftrl_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, ftrl_error)
