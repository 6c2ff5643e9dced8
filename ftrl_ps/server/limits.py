"""Request body size limit (413) as a small pure-ASGI middleware.

* A ``Content-Length`` above the limit is refused at once: the body is never
  handed to the app. The middleware reads and discards (never stores) up to
  :data:`DRAIN_LIMIT` bytes of it first, so the client, still uploading, is not
  cut off by a TCP reset before it can read the 413; beyond that the
  connection is simply closed after the answer.
* A body without a length (chunked) is counted while the app reads it; the
  read that crosses the limit raises
  :class:`~ftrl_ps.errors.PayloadTooLargeError`, and whatever answer the app
  then produces is replaced by the 413.

The answer's status and JSON body come from :mod:`ftrl_ps.ps.http_status`.
"""

from __future__ import annotations

import json
from typing import Any

from ftrl_ps.errors import PayloadTooLargeError
from ftrl_ps.ps.http_status import error_payload, status_for

__all__ = ["DRAIN_LIMIT", "BodyLimitMiddleware"]

#: most bytes of an oversized body read and thrown away before answering 413
DRAIN_LIMIT = 256 << 20

Scope = dict[str, Any]
Message = dict[str, Any]


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimitMiddleware:
    """Answer 413 to request bodies larger than ``max_bytes``."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _error(self, size: int | None) -> PayloadTooLargeError:
        what = f"{size} bytes" if size is not None else "the request body"
        mib = self.max_bytes / (1 << 20)
        return PayloadTooLargeError(
            f"{what} exceed(s) the limit of {self.max_bytes} bytes ({mib:g} MiB)"
        )

    async def _reject(self, send: Any, size: int | None) -> None:
        exc = self._error(size)
        body = json.dumps(error_payload(exc)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status_for(exc),
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            if declared <= DRAIN_LIMIT:
                await self._drain(receive)
            await self._reject(send, declared)
            return

        total = 0
        exceeded = False
        started = False

        async def limited_receive() -> Message:
            nonlocal total, exceeded
            message: Message = await receive()
            if message["type"] == "http.request":
                total += len(message.get("body", b""))
                if total > self.max_bytes:
                    exceeded = True
                    raise self._error(None)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:  # replace whatever the app answers with the 413
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await self._reject(send, None)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except PayloadTooLargeError:
            if started:
                raise
            await self._reject(send, None)

    @staticmethod
    async def _drain(receive: Any) -> None:
        read = 0
        while read <= DRAIN_LIMIT:
            message = await receive()
            if message["type"] != "http.request":
                return
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return
