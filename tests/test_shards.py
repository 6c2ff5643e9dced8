"""ShardConnections: validation, fan-out order, retries and error mapping (mock transports).

The same behaviour seen through the parameter-server verbs is in test_client.py.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from ftrl_ps.errors import ConfigError, TransportError, UnknownWorkerError
from ftrl_ps.ps.shards import ShardConnections


def _mock(handler) -> httpx.Client:  # type: ignore[no-untyped-def]
    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://shard")


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        ShardConnections([], token=None, timeout=1, retries=0)
    with pytest.raises(ConfigError):
        ShardConnections(["http://a"], token=None, timeout=0, retries=0)
    with pytest.raises(ConfigError):
        ShardConnections(["http://a", "http://b"], token=None, timeout=1, retries=0,
                         http_clients=[_mock(lambda r: httpx.Response(200))])


def test_each_runs_shards_concurrently_and_keeps_their_order() -> None:
    seen: list[str] = []
    barrier = threading.Barrier(3, timeout=5)  # passes only if all three run at once

    def handler(request: httpx.Request) -> httpx.Response:
        barrier.wait()
        seen.append(request.headers["authorization"])
        return httpx.Response(200, json={"path": request.url.path})

    net = ShardConnections(["http://a", "http://b", "http://c"], token="t", timeout=1,
                           retries=0, http_clients=[_mock(handler) for _ in range(3)])
    try:
        out = net.each(lambda i: net.post_json(i, f"/x{i}", {}).json()["path"], range(3))
    finally:
        net.close()
    assert out == ["/x0", "/x1", "/x2"]
    assert seen == ["Bearer t"] * 3


def test_retries_only_what_is_safe_and_maps_error_answers() -> None:
    calls = {"n": 0}

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] < 3:
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(404, json={"error": "UnknownWorkerError", "detail": "no worker 9"})

    net = ShardConnections(["http://a"], token=None, timeout=1, retries=3,
                           http_clients=[_mock(flaky)])
    with pytest.raises(UnknownWorkerError):
        net.request(0, "GET", "/v1/x")  # retried twice, then the answer's error
    assert calls["n"] == 3
    calls["n"] = 0
    with pytest.raises(TransportError, match="ReadTimeout"):
        net.request(0, "POST", "/v1/push", idempotent=False)  # may have arrived: no retry
    assert calls["n"] == 1


def test_a_shard_that_does_not_answer_is_said_once_while_retrying(monkeypatch, caplog) -> None:
    from ftrl_ps.ps import shards

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    monkeypatch.setattr(shards, "SAY_AFTER", 0.1)
    net = ShardConnections(["http://a"], token=None, timeout=1, retries=2, retry_seconds=0.6,
                           http_clients=[_mock(refused)])
    with caplog.at_level("WARNING", logger="ftrl_ps.ps.shards"), \
            pytest.raises(TransportError, match=r"Is shard 0 running\? \(retried for 0.6 s\) Once "
                          r"it runs again .*same --state-dir resumes"):
        net.request(0, "GET", "/v1/status")
    said = [r.getMessage() for r in caplog.records if r.name == "ftrl_ps.ps.shards"]
    assert said == ["shard 0 (http://a) does not answer (ConnectError: connection refused): "
                    "retrying for up to 0.6 s"]


def test_a_shard_that_answers_again_is_said_so_once(monkeypatch, caplog) -> None:
    from ftrl_ps.ps import shards

    calls = {"n": 0}

    def back_later(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] <= 4:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={})

    monkeypatch.setattr(shards, "SAY_AFTER", 0.1)
    net = ShardConnections(["http://a"], token=None, timeout=1, retries=2, retry_seconds=30,
                           http_clients=[_mock(back_later)])
    with caplog.at_level("WARNING", logger="ftrl_ps.ps.shards"):
        net.request(0, "GET", "/v1/status")
        net.request(0, "GET", "/v1/status")  # a request that never failed says nothing
    said = [r.getMessage() for r in caplog.records if r.name == "ftrl_ps.ps.shards"]
    assert len(said) == 2 and said[0].startswith("shard 0 (http://a) does not answer")
    assert said[1].startswith("shard 0 (http://a) answers again after ")


def test_one_attempt_only_when_asked(monkeypatch) -> None:
    calls = {"n": 0}

    def refused(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        raise httpx.ConnectError("connection refused", request=request)

    net = ShardConnections(["http://a"], token=None, timeout=1, retries=5, retry_seconds=30,
                           http_clients=[_mock(refused)])
    with pytest.raises(TransportError, match="after 1 attempt"):
        net.request(0, "POST", "/v1/workers/1/leave", retry=False)
    assert calls["n"] == 1
