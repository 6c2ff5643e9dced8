"""Binary pushes and pulls answered ahead of FastAPI (ftrl_ps.server.hotpath).

The same requests, to an app with the hot path and to one without it (every
request through the routes), must get the same answers and leave the same
state; the hot path must really answer them (the routes are never reached);
metrics, the token and the body limit apply to it as to any route.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ftrl_ps.ps import wire
from ftrl_ps.ps.shard_settings import ServerSettings
from ftrl_ps.server.app import create_app
from ftrl_ps.server.deps import get_state, read_body
from tests._servers import BINARY

TOKEN = "hot-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PUSH_ONLY = {"Content-Type": wire.BINARY_MEDIA_TYPE}  # a worker's push: no Accept


@contextmanager
def shard(hot: bool, **settings: Any) -> Iterator[TestClient]:
    app = create_app(ServerSettings(bits=12, group_size=64, token=TOKEN, max_body_mb=0.5,
                                    **settings), hot_path=hot)
    with TestClient(app, base_url="http://shard", headers=AUTH) as client:
        yield client


def _register(c: TestClient) -> int:
    layout = {"bits": 12, "group_size": 64, "num_shards": 1}
    resp = c.post("/v1/workers", json={"worker_index": 0, "num_workers": 1, "layout": layout,
                                       "instance": "hot", "supersede": True})
    assert resp.status_code == 200, resp.text
    epoch = int(resp.json()["epoch"])
    assert c.post("/v1/streams/0", json={"epoch": epoch}).status_code == 200
    return epoch


def _push(keys: Any, dn: Any, dz: Any, **kw: Any) -> bytes:
    return wire.encode_push(np.asarray(keys), np.asarray(dn, np.float32),
                            np.asarray(dz, np.float32), **kw)


def _script(epoch: int) -> list[tuple[str, bytes, dict[str, str]]]:
    """Requests of every kind the hot path takes, good and bad, in order."""
    keys = np.array([1, 5, 64, 700, 4095])
    good = _push(keys, [1, 2, 3, 4, 5], [-1, 0.5, 2, 3, -4])
    origin = wire.PushOrigin(0, epoch, 1, 0, 10)
    nan = _push([3], [1.0], [math.nan])
    return [
        ("/v1/push", good, PUSH_ONLY),
        ("/v1/push", good, BINARY),
        ("/v1/push", _push([9, 10], [1, 1], [2, 2], origin=origin), PUSH_ONLY),
        ("/v1/push", _push([9, 10], [1, 1], [2, 2], origin=origin), PUSH_ONLY),  # a retry
        ("/v1/push", _push([9], [2], [2], origin=origin), PUSH_ONLY),  # seq reused: 409
        ("/v1/push", _push([9], [2], [2], origin=wire.PushOrigin(0, 12345, 2, 1, 0)),
         PUSH_ONLY),  # unknown epoch: 404 (the registry) or 409 (the stream)
        ("/v1/push", _push([5, 3], [1, 1], [1, 1]), PUSH_ONLY),  # unsorted: 400
        ("/v1/push", _push([1, 4096], [1, 1], [1, 1]), PUSH_ONLY),  # out of range: 400
        ("/v1/push", _push([3], [-1.0], [1.0]), PUSH_ONLY),  # negative delta_n: 400
        ("/v1/push", nan, PUSH_ONLY),  # NaN: 400
        ("/v1/push", good[:-3], PUSH_ONLY),  # cut short: 400
        ("/v1/push", wire.encode_keys(keys), PUSH_ONLY),  # wrong kind: 400
        ("/v1/push", b"", PUSH_ONLY),
        ("/v1/pull", wire.encode_keys(keys), BINARY),
        ("/v1/pull", wire.encode_keys(keys), PUSH_ONLY),  # no Accept: binary, as the request
        ("/v1/pull", wire.encode_keys(keys, merge=()), BINARY),  # versions: 400 here
        ("/v1/pull", wire.encode_keys(np.array([7, 7])), BINARY),  # duplicates: 400
        ("/v1/pull", wire.encode_keys(np.zeros(0, np.int64)), BINARY),
        ("/v1/pull", good, BINARY),  # a PUSH body to pull: 400
        ("/v1/pull", wire.encode_keys(keys),
         {**PUSH_ONLY, "Accept": wire.JSON_MEDIA_TYPE}),  # JSON answer: the route's
    ]


def _answers(hot: bool, **settings: Any) -> tuple[list[tuple[int, str, bytes]], Any]:
    with shard(hot, **settings) as c:
        epoch = _register(c)
        out = []
        for path, body, headers in _script(epoch):
            resp = c.post(path, content=body, headers=headers)
            out.append((resp.status_code, resp.headers["content-type"], resp.content))
        state = c.get("/v1/state", headers={"Accept": "application/json"}).text
        streams = c.get("/v1/streams").json()  # registered epochs differ by run
        streams = [{k: v for k, v in s.items() if "epoch" not in k} for s in streams]
    return out, (state, streams)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_same_answers_and_state_with_and_without_the_hot_path(dtype: str) -> None:
    hot, hot_state = _answers(True, dtype=dtype)
    routed, routed_state = _answers(False, dtype=dtype)
    for i, (a, b) in enumerate(zip(hot, routed, strict=True)):
        assert a == b, (i, a, b)
    assert hot_state == routed_state
    statuses = [a[0] for a in hot]
    # the script covers answers of every kind: applied, retried, refused
    assert statuses.count(200) >= 7 and {400, 409}.issubset(statuses), statuses


def test_the_routes_are_not_reached_by_binary_pushes_and_pulls() -> None:
    def broken_body() -> bytes:
        raise RuntimeError("the route was reached")

    with shard(True) as c:
        c.app.dependency_overrides[read_body] = broken_body
        keys = np.array([2, 3])
        assert c.post("/v1/push", content=_push(keys, [1, 1], [1, 1]),
                      headers=PUSH_ONLY).json()["applied"] is True
        msg = wire.decode(c.post("/v1/pull", content=wire.encode_keys(keys),
                                 headers=BINARY).content, wire.VALUES)
        assert msg.values is not None and msg.values[0].tolist() == [1.0, 1.0]
        # JSON bodies, and binary pulls that ask for a JSON answer, go to the routes
        with pytest.raises(RuntimeError, match="the route was reached"):
            c.post("/v1/pull", json={"keys": [2]})
        with pytest.raises(RuntimeError, match="the route was reached"):
            c.post("/v1/pull", content=wire.encode_keys(keys),
                   headers={**PUSH_ONLY, "Accept": wire.JSON_MEDIA_TYPE})


def test_metrics_token_and_body_limit_apply_to_the_hot_path() -> None:
    with shard(True) as c:
        for _ in range(3):
            c.post("/v1/push", content=_push([4], [1], [1]), headers=PUSH_ONLY)
            c.post("/v1/pull", content=wire.encode_keys(np.array([4])), headers=BINARY)
        text = c.get("/metrics").text
        pushes = [line for line in text.splitlines()
                  if line.startswith("ftrl_ps_http_requests_total") and 'route="/v1/push"' in line]
        assert pushes and any(line.endswith(" 3.0") for line in pushes), pushes
        assert any('route="/v1/pull"' in line for line in text.splitlines())
        anon = TestClient(c.app, base_url="http://shard")
        resp = anon.post("/v1/push", content=_push([4], [1], [1]), headers=PUSH_ONLY)
        assert resp.status_code == 401
        big = np.arange(60_000)  # 0.72 MB of push, over the 0.5 MB limit
        resp = c.post("/v1/push", content=_push(big, np.zeros(big.size), np.zeros(big.size)),
                      headers=PUSH_ONLY)
        assert resp.status_code == 413, resp.text
        n = wire.decode(c.post("/v1/pull", content=wire.encode_keys(np.array([4])),
                               headers=BINARY).content, wire.VALUES).values
        assert n is not None and n[0].tolist() == [3.0]  # the refused pushes changed nothing


@pytest.mark.parametrize("hot", [True, False])
def test_an_unexpected_error_is_a_500_with_the_json_body(hot: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with shard(hot) as c:
        def boom(keys: Any) -> None:
            raise RuntimeError("boom")

        monkeypatch.setattr(c.app.state.ftrl.store, "pull_versioned", boom)
        quiet = TestClient(c.app, base_url="http://shard", headers=AUTH,
                           raise_server_exceptions=False)
        resp = quiet.post("/v1/pull", content=wire.encode_keys(np.array([4])), headers=BINARY)
        assert resp.status_code == 500
        assert resp.json() == {"error": "ServerError", "detail": "RuntimeError: boom"}


def _ticks(hot: bool) -> list[tuple[int, Any]]:
    """A worker's clock ticks, good and bad, as answered (epochs replaced by "E")."""
    with shard(hot, staleness=2) as c:
        epoch = _register(c)
        url = f"/v1/workers/{epoch}/clock"
        requests: list[tuple[str, dict[str, Any]]] = [
            (url, {}),  # no body: the defaults
            (url, {"json": {"stats": {"rows": 10.0, "logloss_sum": 6.5}}}),
            (url, {"json": {"clock": 3}}),
            (url, {"json": {"clock": 3}}),  # a retry: counted once
            (url, {"json": {"clock": 9}}),  # a jump: 409
            (url, {"json": {"clock": 0}}),  # below 1: 400 (the route's)
            (url, {"json": {"clock": True}}),  # not an integer: 400
            (url, {"json": {"bogus": 1}}),  # unknown field: 400
            (url, {"json": [1, 2]}),  # not an object: 400
            (url, {"content": b"{not json", "headers": {"Content-Type": "application/json"}}),
            (url, {"content": b"  ", "headers": {"Content-Type": "application/json"}}),
            (url, {"content": b"{}", "headers": {}}),  # no Content-Type: the route's
            (url, {"content": b"clock=4", "headers": {"Content-Type": "text/plain"}}),
            (url, {"json": {"timeout": 0.01}}),  # 4 clocks ahead of nobody: ready
            ("/v1/workers/123456789/clock", {}),  # unknown worker: 404
            ("/v1/workers/x1/clock", {}),  # not an id: the route's 400
            ("/v1/workers/-3/clock", {}),
        ]
        out = []
        for path, kw in requests:
            resp = c.post(path, **kw)
            body = resp.text.replace(str(epoch), "E")
            out.append((resp.status_code, body))
        worker = c.get("/v1/status").json()["clock"]["workers"][0]
        out.append((worker["clock"], worker["stats"]))
    return out


def test_clock_ticks_answer_the_same_with_and_without_the_hot_path() -> None:
    hot, routed = _ticks(True), _ticks(False)
    for i, (a, b) in enumerate(zip(hot, routed, strict=True)):
        assert a == b, (i, a, b)
    statuses = [status for status, _ in hot]
    assert statuses[:4] == [200, 200, 200, 200] and {400, 404, 409}.issubset(statuses)


def test_valid_ticks_do_not_reach_the_route() -> None:
    with shard(True) as c:
        epoch = _register(c)

        def no_state() -> None:
            raise RuntimeError("the route was reached")

        c.app.dependency_overrides[get_state] = no_state
        answer = c.post(f"/v1/workers/{epoch}/clock", json={"clock": 1}).json()
        assert answer["clock"] == 1 and answer["ready"] is True
        with pytest.raises(RuntimeError, match="the route was reached"):  # as any route's
            c.post(f"/v1/workers/{epoch}/clock", json={"clock": "soon"})


def test_a_tick_to_a_shard_without_the_clock_answers_the_same() -> None:
    answers = []
    for hot in (True, False):
        with shard(hot, num_shards=2, shard_index=1) as c:
            resp = c.post("/v1/workers/5/clock", json={"clock": 1})
            answers.append((resp.status_code, resp.json()))
    assert answers[0] == answers[1] and answers[0][0] == 400, answers
    assert "shard 0" in answers[0][1]["detail"]
