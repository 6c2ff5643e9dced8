"""HTTP connections to the shards of a cluster: retries, error mapping, fan-out.

:class:`ShardConnections` keeps one keep-alive ``httpx.Client`` per shard and
sends one request at a time per call of :meth:`~ShardConnections.request`:
transport errors (connection refused/reset, timeouts) and 503 (busy) answers
are retried with exponential backoff (0.05 s doubling to 2 s) for at least
``retries`` attempts and ``retry_seconds`` seconds, so a client rides out a
shard restart; a request that may have reached the server is retried only
when it is idempotent. Then a :class:`~ftrl_ps.errors.TransportError` says
which shard could not be reached for how long; error answers become the
matching :mod:`ftrl_ps.errors` class.
:meth:`~ShardConnections.each` runs one call per shard concurrently.

The parameter-server verbs on top of it are in :mod:`ftrl_ps.ps.client`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx

from ftrl_ps.errors import ConfigError, TransportError
from ftrl_ps.ps import wire
from ftrl_ps.ps.http_status import exception_from_response

__all__ = ["ShardConnections"]

log = logging.getLogger("ftrl_ps.ps.shards")

#: seconds of failed attempts after which a retrying request says so, once
SAY_AFTER = 2.0

T = TypeVar("T")


class ShardConnections:
    """Keep-alive HTTP connections to ``urls`` (shard *i* at ``urls[i]``).

    Parameters
    ----------
    urls : list of str
        Base URL of every shard, in shard order.
    token : str, optional
        Sent as ``Authorization: Bearer`` with every request.
    timeout : float
        Seconds per request (a call may ask for more).
    retries : int
        Retries after a transport error at least (backoff 0.05 s, doubling, max 2 s).
    retry_seconds : float
        ... and for at least this long (a shard restart takes seconds).
    http_clients : list of httpx.Client, optional
        Ready clients, one per shard (e.g. Starlette's ``TestClient``).
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        token: str | None,
        timeout: float,
        retries: int,
        retry_seconds: float = 0.0,
        http_clients: Sequence[httpx.Client] | None = None,
    ) -> None:
        self.urls = [str(u).rstrip("/") for u in urls]
        if not self.urls:
            raise ConfigError("a cluster client needs at least one shard URL")
        if retries < 0 or not timeout > 0 or not retry_seconds >= 0:
            raise ConfigError("retries and retry_seconds must be >= 0 and timeout > 0")
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.retry_seconds = float(retry_seconds)
        #: set by :meth:`abort`: no more retries (a failing request fails now)
        self.aborted = threading.Event()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if http_clients is not None:
            if len(http_clients) != len(self.urls):
                raise ConfigError("http_clients needs one client per URL")
            self._http = list(http_clients)
            for c in self._http:
                c.headers.update(headers)
        else:
            limits = httpx.Limits(max_keepalive_connections=8, keepalive_expiry=60)
            self._http = [
                # trust_env=False: cluster traffic never goes through an HTTP(S)_PROXY
                httpx.Client(
                    base_url=u, headers=headers, timeout=self.timeout, limits=limits,
                    trust_env=False,
                    # certificates are only loaded for https (~45 ms per client)
                    verify=u.lower().startswith("https:"),
                )
                for u in self.urls
            ]
        self._pool = (
            ThreadPoolExecutor(len(self.urls), thread_name_prefix="ps-client")
            if len(self.urls) > 1 else None
        )

    def request(self, shard: int, method: str, path: str, *, idempotent: bool = True,
                timeout: float | None = None, retry: bool = True,
                **kwargs: Any) -> httpx.Response:
        """One request to ``shard`` with retries (``retry=False``: one attempt);
        error answers -> ftrl-ps exceptions."""
        client = self._http[shard]
        if timeout is not None:
            kwargs["timeout"] = timeout
        return self._retrying(shard, method, path, idempotent,
                              lambda: client.request(method, path, **kwargs), retry)

    def stream(self, shard: int, method: str, path: str, consume: Callable[[httpx.Response], T],
               **kwargs: Any) -> T:
        """A streamed request: ``consume(response)`` reads the answer as it comes
        (retried from the start on a transport error or 503; idempotent only)."""
        client = self._http[shard]

        def attempt() -> httpx.Response:
            with client.stream(method, path, **kwargs) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    return resp
                result["value"] = consume(resp)
                return resp

        result: dict[str, T] = {}
        self._retrying(shard, method, path, True, attempt)
        return result["value"]

    def _retrying(self, shard: int, method: str, path: str, idempotent: bool,
                  attempt_once: Callable[[], httpx.Response],
                  retry: bool = True) -> httpx.Response:
        started = time.monotonic()
        attempt = 0
        said = False
        while True:
            failure: str | None = None
            cause: BaseException | None = None
            try:
                resp = attempt_once()
            except httpx.TransportError as exc:
                # a request that may have reached the server is retried only if
                # it is idempotent (dedup by seq / target clock / instance)
                if not (idempotent or isinstance(exc, httpx.ConnectError)):
                    raise TransportError(
                        f"{method} {self.urls[shard]}{path} failed: {type(exc).__name__}: {exc}"
                    ) from exc
                failure, cause = f"{type(exc).__name__}: {exc}", exc
            else:
                if resp.status_code == 503 and idempotent:
                    failure = f"HTTP 503 {resp.text[:200]}"
                elif resp.status_code >= 400:
                    try:
                        payload: Any = resp.json()
                    except ValueError:
                        payload = resp.text[:200]
                    raise exception_from_response(resp.status_code, payload)
                else:
                    if said:  # its "does not answer" line has its end
                        log.warning("shard %d (%s) answers again after %.1f s", shard,
                                    self.urls[shard], time.monotonic() - started)
                    return resp
            elapsed = time.monotonic() - started
            if self.aborted.is_set():
                raise TransportError(
                    f"{method} {self.urls[shard]}{path} failed after {attempt + 1} attempt(s) "
                    f"in {elapsed:.1f} s: {failure}; not retried: the process is stopping"
                ) from cause
            if not retry or (attempt >= self.retries and elapsed >= self.retry_seconds):
                raise TransportError(
                    f"{method} {self.urls[shard]}{path} failed after {attempt + 1} attempt(s) "
                    f"in {elapsed:.1f} s: {failure}. Is shard {shard} running? (retried for "
                    f"{self.retry_seconds:g} s) Once it runs again (from its --checkpoint-dir), "
                    "start this process again: a worker with the same --state-dir resumes"
                ) from cause
            if not said and elapsed >= SAY_AFTER:  # not silent for minutes; a blip says nothing
                log.warning("shard %d (%s) does not answer (%s): retrying for up to %g s",
                            shard, self.urls[shard], failure, self.retry_seconds)
                said = True
            self.aborted.wait(max(0.0, min(2.0, 0.05 * 2**attempt,
                                          self.retry_seconds - elapsed + 0.05)))
            attempt += 1

    def post_json(self, shard: int, path: str, obj: Any, *, idempotent: bool = True,
                  timeout: float | None = None, retry: bool = True) -> httpx.Response:
        """POST ``obj`` as JSON, asking for a JSON answer."""
        return self.request(shard, "POST", path, json=obj, idempotent=idempotent,
                            timeout=timeout, retry=retry,
                            headers={"Accept": wire.JSON_MEDIA_TYPE})

    def each(self, fn: Callable[[int], T], shards: Sequence[int] | range) -> list[T]:
        """``[fn(i) for i in shards]``, the calls running concurrently."""
        shards = list(shards)
        if self._pool is None or len(shards) <= 1:
            return [fn(i) for i in shards]
        futures = [self._pool.submit(fn, i) for i in shards]
        return [f.result() for f in futures]

    def abort(self) -> None:
        """Stop retrying: requests that fail from now on (those waiting to retry
        too) raise TransportError after their current attempt (a process that
        stops does not wait for ``retry_seconds``)."""
        self.aborted.set()

    def close(self) -> None:
        """Close every connection (unusable after)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for c in self._http:
            c.close()
