"""The ONE place that maps the ftrl-ps error hierarchy to HTTP status codes, both ways.

Every error answer has the JSON body ``{"error": <class name>, "detail": <message>}``.

=========================  ======
error class                status
=========================  ======
LayoutMismatchError        409
ConfigError                400
PayloadTooLargeError       413
ProtocolError              400
AuthError                  401
UnknownWorkerError         404
WorkerStateError           409
PushGapError               409
ClockTimeoutError          408
RequestTimeoutError        408
DataError                  400
UnavailableError           503
anything else              500
=========================  ======

The server answers with :func:`status_for` and :func:`error_payload` (its
FastAPI handlers are in :mod:`ftrl_ps.server.errors`); the client turns an
answer back into the matching class with :func:`exception_from_response`.
Pure Python: no FastAPI, no HTTP library.
"""

from __future__ import annotations

from typing import Any

from ftrl_ps import errors as E

__all__ = ["STATUS_CODES", "error_payload", "exception_from_response", "status_for"]

#: most specific classes first: the first ``isinstance`` match wins
STATUS_CODES: tuple[tuple[type[E.FTRLPSError], int], ...] = (
    (E.LayoutMismatchError, 409),
    (E.ConfigError, 400),
    (E.PayloadTooLargeError, 413),
    (E.ProtocolError, 400),
    (E.AuthError, 401),
    (E.UnknownWorkerError, 404),
    (E.WorkerStateError, 409),
    (E.ClockTimeoutError, 408),
    (E.RequestTimeoutError, 408),
    (E.DataError, 400),
    (E.UnavailableError, 503),
)

#: class name in an answer -> class raised by the client
_BY_NAME: dict[str, type[E.FTRLPSError]] = {
    cls.__name__: cls
    for cls in (
        E.ConfigError, E.LayoutMismatchError, E.DataError, E.ModelFormatError, E.ProtocolError,
        E.PayloadTooLargeError, E.AuthError, E.UnknownWorkerError, E.WorkerStateError,
        E.ClockTimeoutError, E.ServerError, E.UnavailableError, E.PushGapError,
        E.RequestTimeoutError,
    )
}
#: a bad request line comes back as a DataError (ParseError needs file, line and token)
_BY_NAME["ParseError"] = E.DataError

#: status code -> class used when an answer does not name a known class (e.g. a
#: proxy's answer, or 404 for a route this server does not have); other 4xx
#: become ProtocolError, everything else ServerError
_BY_STATUS: dict[int, type[E.FTRLPSError]] = {
    401: E.AuthError,
    408: E.ClockTimeoutError,
    413: E.PayloadTooLargeError,
    503: E.UnavailableError,
}


def status_for(exc: BaseException) -> int:
    """HTTP status code of an exception (500 unless it is a mapped ftrl-ps error).

    >>> status_for(E.LayoutMismatchError("bits differ")), status_for(KeyError("x"))
    (409, 500)
    """
    for cls, status in STATUS_CODES:
        if isinstance(exc, cls):
            return status
    return 500


def error_payload(exc: BaseException) -> dict[str, str]:
    """``{"error": class name, "detail": message}``; unexpected errors become
    ``ServerError`` (their text is kept, the traceback stays in the server log)."""
    if isinstance(exc, E.FTRLPSError) and status_for(exc) != 500:
        return {"error": type(exc).__name__, "detail": str(exc)}
    return {"error": "ServerError", "detail": f"{type(exc).__name__}: {exc}"}


def exception_from_response(status: int, payload: Any) -> E.FTRLPSError:
    """The ftrl-ps exception matching an error answer (the reverse mapping).

    >>> exception_from_response(404, {"error": "UnknownWorkerError", "detail": "w9"})
    UnknownWorkerError('w9')
    """
    name = payload.get("error") if isinstance(payload, dict) else None
    detail = payload.get("detail") if isinstance(payload, dict) else None
    if not isinstance(detail, str):
        detail = f"HTTP {status}" + (f": {payload}" if payload else "")
    cls = _BY_NAME.get(name) if isinstance(name, str) else None
    if cls is None:
        default = E.ProtocolError if 400 <= status < 500 else E.ServerError
        cls = _BY_STATUS.get(status, default)
        if isinstance(name, str):
            detail = f"{name}: {detail}"
    return cls(detail)
