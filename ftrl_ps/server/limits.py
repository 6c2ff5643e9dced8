"""Request body limits as a small pure-ASGI middleware: size (413), stalls (408),
JSON nesting depth (400).

* A ``Content-Length`` above the limit is refused at once: the body is never
  handed to the app. The middleware reads and discards (never stores) up to
  :data:`DRAIN_LIMIT` bytes of it first, so the client, still uploading, is not
  cut off by a TCP reset before it can read the 413; beyond that the
  connection is simply closed after the answer.
* A body without a length (chunked) is counted while the app reads it; the
  read that crosses the limit raises
  :class:`~ftrl_ps.errors.PayloadTooLargeError`, and whatever answer the app
  then produces is replaced by the 413.

* Every read of the body must arrive within ``body_timeout`` seconds, else
  the answer is 408 (:class:`~ftrl_ps.errors.RequestTimeoutError`) and the
  connection is closed: a slow or stalled sender cannot hold a connection.
* A body that is not binary is read whole first; unless its Content-Type is
  ``text/...`` (libsvm rows, which no JSON parser sees), its nesting depth is
  measured without parsing it (:func:`json_depth`): deeper than
  ``max_json_depth`` is 400 before any parser sees it. (FastAPI parses a body
  without a Content-Type as JSON, so that one is measured too.)

The answer's status and JSON body come from :mod:`ftrl_ps.ps.http_status`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from ftrl_ps.errors import FTRLPSError, PayloadTooLargeError, ProtocolError, RequestTimeoutError
from ftrl_ps.ps.http_status import error_payload, status_for
from ftrl_ps.ps.wire import BINARY_MEDIA_TYPE
from ftrl_ps.server.deps import content_type, scope_header

__all__ = ["DRAIN_LIMIT", "BodyLimitMiddleware", "json_depth", "replaying"]

#: bytes scanned per step of :func:`json_depth` (its arrays stay this size)
_DEPTH_CHUNK = 1 << 20


def json_depth(body: bytes) -> int:
    """Deepest ``[``/``{`` nesting of a JSON text, without parsing it: brackets
    inside strings do not count. Linear time (numpy), in 1 MiB steps, so memory
    stays small whatever the body. (A regular expression that blanked the strings
    first took quadratic time on an unclosed string full of escaped quotes: 10 s
    for 48 KB.)

    A quote opens or closes a string unless an odd number of backslashes stands
    right before it; the state (inside a string or not, backslashes at the end,
    depth) carries from one step to the next.

    >>> json_depth(b'{"a": [1, [2, "]]]"]]}'), json_depth(b"3")
    (3, 0)
    """
    view = np.frombuffer(body, dtype=np.uint8)
    depth = deepest = 0
    inside = 0  # 1 while in a string
    carry = 0  # backslashes right before this step
    for start in range(0, view.size, _DEPTH_CHUNK):
        b = view[start : start + _DEPTH_CHUNK]
        pos = np.arange(b.size, dtype=np.int32)
        slash = b == 0x5C
        last = np.maximum.accumulate(np.where(slash, -1, pos))  # last non-backslash <= i
        run = np.empty(b.size, np.int32)  # backslashes right before byte i
        run[0] = carry
        run[1:] = np.where(last[:-1] >= 0, pos[:-1] - last[:-1], pos[1:] + carry)
        quotes = (b == 0x22) & (run % 2 == 0)
        outside = (np.cumsum(quotes, dtype=np.int32) + inside) % 2 == 0
        step = ((b == 0x5B) | (b == 0x7B)).astype(np.int32) - ((b == 0x5D) | (b == 0x7D))
        levels = depth + np.cumsum(step * outside, dtype=np.int32)
        deepest = max(deepest, int(levels.max()))
        depth, inside = int(levels[-1]), int(not outside[-1])
        carry = int(b.size - 1 - last[-1]) if last[-1] >= 0 else b.size + carry
    return deepest

#: most bytes of an oversized body read and thrown away before answering 413
DRAIN_LIMIT = 256 << 20

Scope = dict[str, Any]
Message = dict[str, Any]


def _content_length(scope: Scope) -> int | None:
    value = scope_header(scope, b"content-length")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


class BodyLimitMiddleware:
    """Answer 413 to request bodies larger than ``max_bytes``."""

    def __init__(self, app: Any, max_bytes: int, body_timeout: float = 30.0,
                 max_json_depth: int = 32) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.body_timeout = body_timeout
        self.max_json_depth = max_json_depth

    def _error(self, size: int | None) -> PayloadTooLargeError:
        what = f"{size} bytes" if size is not None else "the request body"
        mib = self.max_bytes / (1 << 20)
        return PayloadTooLargeError(
            f"{what} exceed(s) the limit of {self.max_bytes} bytes ({mib:g} MiB)"
        )

    async def _reject(self, send: Any, size: int | None,
                      exc: FTRLPSError | None = None) -> None:
        exc = exc if exc is not None else self._error(size)
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

    async def _receive(self, receive: Any) -> Message:
        """One body message, or RequestTimeoutError after ``body_timeout`` seconds."""
        try:  # (asyncio.timeout: no task per message, as 3.11's wait_for makes)
            async with asyncio.timeout(self.body_timeout):
                message: Message = await receive()
        except TimeoutError:
            raise RequestTimeoutError(
                f"the request body stalled for {self.body_timeout:g} s"
            ) from None
        return message

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self._guarded(scope, receive, send)
        except RequestTimeoutError as exc:
            await self._reject(send, None, exc)

    async def _guarded(self, scope: Scope, receive: Any, send: Any) -> None:
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            # drained so that a client busy sending reads the 413, not a reset; one
            # that asked "Expect: 100-continue" sends nothing until told: answered
            # at once (reading the body would make the server say "100 Continue")
            expects = (scope_header(scope, b"expect") or "").lower() == "100-continue"
            if declared <= DRAIN_LIMIT and not expects:
                await self._drain(receive)
            await self._reject(send, declared)
            return
        ctype = content_type(scope)
        if declared != 0 and ctype != BINARY_MEDIA_TYPE:
            await self._buffered(scope, receive, send, may_be_json=not ctype.startswith("text/"))
            return

        total = 0
        exceeded = False
        started = False
        body_done = False

        async def limited_receive() -> Message:
            nonlocal total, exceeded, body_done
            if body_done:  # e.g. a streaming answer waiting for a disconnect
                message: Message = await receive()
                return message
            message = await self._receive(receive)
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
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
        except (PayloadTooLargeError, RequestTimeoutError) as exc:
            if started:
                raise
            await self._reject(send, None, exc)

    async def _buffered(self, scope: Scope, receive: Any, send: Any, *,
                        may_be_json: bool = True) -> None:
        """Read a non-binary body whole, check its JSON depth (if ``may_be_json``),
        then run the app on it. A 1000-row libsvm request to the prediction
        service is ~400 KB: counting its brackets took 7 % of the service's CPU."""
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await self._receive(receive)
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > self.max_bytes:
                await self._reject(send, None)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        # nesting never exceeds the number of brackets opened: most bodies (clock
        # ticks, heartbeats) have a handful, and need no scan (~0.2 ms each)
        opened = body.count(b"[") + body.count(b"{") if may_be_json else 0
        depth = json_depth(body) if opened > self.max_json_depth else 0
        if depth > self.max_json_depth:
            await self._reject(send, None, ProtocolError(
                f"the JSON body is nested {depth} levels deep; the limit is "
                f"{self.max_json_depth}"))
            return
        await self.app(scope, replaying(body, receive), send)

    async def _drain(self, receive: Any) -> None:
        read = 0
        while read <= DRAIN_LIMIT:
            message = await self._receive(receive)
            if message["type"] != "http.request":
                return
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return


def replaying(body: bytes, receive: Any) -> Callable[[], Awaitable[Message]]:
    """An ASGI ``receive`` that gives ``body`` whole once (a body already read),
    then what ``receive`` gives (e.g. the client's disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: Message = await receive()
        return message

    return replay
