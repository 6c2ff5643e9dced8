"""Helpers for the server and client tests: in-process apps and real server processes.

Real servers are child processes (``python -m ftrl_ps server --port 0 ...``)
bound to 127.0.0.1; :func:`ftrl_ps.cluster.spawn.spawn_server` reads their
``listening on`` line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import numpy as np
from fastapi.testclient import TestClient

from ftrl_ps.cluster.spawn import ServerProcess, spawn_cluster, spawn_server, spawn_servers
from ftrl_ps.ps import wire
from ftrl_ps.ps.shard_settings import ServerSettings
from ftrl_ps.server.app import create_app
from ftrl_ps.server.options import ShardOptions

__all__ = [
    "BINARY",
    "JSON",
    "Switchable",
    "TOKEN",
    "assert_error",
    "in_process",
    "in_process_cluster",
    "real_cluster",
    "real_server",
    "real_servers",
    "shard_options",
]

TOKEN = "s3cret-token"
BINARY = {"Content-Type": wire.BINARY_MEDIA_TYPE, "Accept": wire.BINARY_MEDIA_TYPE}
JSON = {"Content-Type": wire.JSON_MEDIA_TYPE, "Accept": wire.JSON_MEDIA_TYPE}


@contextlib.contextmanager
def in_process(**settings: Any) -> Iterator[TestClient]:
    """A TestClient on a fresh app (lifespan run: kernels warmed, sweeper on)."""
    app = create_app(ServerSettings(**settings))
    with TestClient(app, base_url="http://shard") as client:
        yield client


@contextlib.contextmanager
def in_process_cluster(num_shards: int, **settings: Any) -> Iterator[list[TestClient]]:
    """``num_shards`` in-process shards, as TestClients in shard order."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(in_process(shard_index=i, num_shards=num_shards, **settings))
            for i in range(num_shards)
        ]


class Switchable:
    """A shard connection (e.g. a TestClient) that fails to connect while ``down``
    (only for requests to the path ``only``, if given): the shard is away for this
    one client only."""

    def __init__(self, inner: Any, only: str | None = None) -> None:
        self.inner, self.down, self.only = inner, False, only
        self.headers = inner.headers

    def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if self.down and self.only in (None, path):
            raise httpx.ConnectError("shard away")
        return self.inner.request(method, path, *args, **kwargs)

    def close(self) -> None:
        pass


def shard_options(args: Sequence[str] = ()) -> ShardOptions:
    """The :class:`ShardOptions` that ``ftrl-ps server ARGS`` would run."""
    from ftrl_ps.cli import build_parser
    from ftrl_ps.cli._common import options_from

    return options_from(ShardOptions, build_parser().parse_args(["server", *args]))


@contextlib.contextmanager
def real_server(args: Sequence[str] = ()) -> Iterator[ServerProcess]:
    """One real server process on 127.0.0.1 (stopped on exit); ``args`` are
    ``ftrl-ps server`` flags."""
    server = spawn_server(shard_options(args))
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def real_cluster(num_shards: int, args: Sequence[str] = ()) -> Iterator[list[ServerProcess]]:
    """``num_shards`` real server processes, started in parallel."""
    servers = spawn_cluster(num_shards, shard_options(args))
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


@contextlib.contextmanager
def real_servers(arg_lists: Sequence[Sequence[str]]) -> Iterator[list[ServerProcess]]:
    """Several independent real server processes, started in parallel."""
    servers = spawn_servers([shard_options(a) for a in arg_lists])
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


def assert_error(resp: httpx.Response, status: int, error: str, match: str = "") -> None:
    """The answer has ``status`` and the JSON error body naming ``error``."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error", "detail"} and body["error"] == error, body
    assert isinstance(body["detail"], str) and match in body["detail"], body


def pull_json(client: httpx.Client, keys: Sequence[int]) -> tuple[list[float], list[float]]:
    """``(n, z)`` at keys via a JSON pull."""
    resp = client.post("/v1/pull", json={"keys": list(keys)})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    return body["n"], body["z"]


def push_binary(client: httpx.Client, keys: Any, dn: Any, dz: Any, **kw: Any) -> httpx.Response:
    """POST a binary push (float32 unless ``dtype`` is given)."""
    body = wire.encode_push(np.asarray(keys), np.asarray(dn), np.asarray(dz), **kw)
    return client.post("/v1/push", content=body, headers=BINARY)
