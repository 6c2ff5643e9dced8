"""The shard server over HTTP: in-process (TestClient) and as a real uvicorn process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from ftrl_ps.cli import main as cli_main
from ftrl_ps.ps import wire
from ftrl_ps.ps.http_status import exception_from_response, status_for
from tests._servers import (
    BINARY,
    JSON,
    TOKEN,
    assert_error,
    in_process,
    in_process_cluster,
    pull_json,
    push_binary,
    real_server,
)

SETTINGS = dict(bits=12, group_size=64, token=TOKEN, max_body_mb=0.5)
FLAGS = ["--bits", "12", "--group-size", "64", "--token", TOKEN, "--max-body-mb", "0.5"]
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROBE = [1, 2, 3, 100, 4096]


@dataclass
class Shard:
    client: httpx.Client  # sends the token
    anon: httpx.Client  # sends no token


@pytest.fixture(scope="module")
def real() -> Iterator[str]:
    with real_server(FLAGS) as server:
        yield server.url


@pytest.fixture(params=["inprocess", "http"])
def shard(request: pytest.FixtureRequest) -> Iterator[Shard]:
    if request.param == "inprocess":
        with in_process(**SETTINGS) as client:
            client.headers.update(AUTH)
            yield Shard(client, TestClient(client.app, base_url="http://shard"))
    else:
        url = request.getfixturevalue("real")
        with httpx.Client(base_url=url, headers=AUTH) as client, httpx.Client(
            base_url=url
        ) as anon:
            yield Shard(client, anon)


# --- happy paths ---------------------------------------------------------------------
def test_push_pull_binary_and_json(shard: Shard):
    c = shard.client
    before = np.array(pull_json(c, [10, 11, 12]))
    resp = push_binary(c, [10, 12], [0.5, 1.0], [-2.0, 4.0])
    assert resp.json() == {"applied": True, "keys": 2, "seq": 0}
    resp = c.post("/v1/push", json={"keys": [11], "delta_n": [0.25], "delta_z": [1.0]})
    assert resp.status_code == 200, resp.text
    after = np.array(pull_json(c, [10, 11, 12]))
    np.testing.assert_array_equal(after - before, [[0.5, 0.25, 1.0], [-2.0, 1.0, 4.0]])
    # binary pull gives the same numbers; Accept picks the answer format
    resp = c.post("/v1/pull", content=wire.encode_keys([10, 11, 12]), headers=BINARY)
    assert resp.headers["content-type"] == wire.BINARY_MEDIA_TYPE
    msg = wire.decode(resp.content, wire.VALUES)
    np.testing.assert_array_equal(np.array(msg.values), after)
    resp = c.post("/v1/pull", content=wire.encode_keys([10]),
                  headers={"Content-Type": wire.BINARY_MEDIA_TYPE, "Accept": "application/json"})
    assert resp.json()["n"] == [after[0][0]]


def test_pull_groups_and_state_dump(shard: Shard):
    c = shard.client
    push_binary(c, [64, 4096], [1.0, 2.0], [0.0, 3.0])
    resp = c.post("/v1/pull-groups", content=wire.encode_groups([1, 64]), headers=BINARY)
    msg = wire.decode(resp.content, wire.ENTRIES)
    assert msg.keys.tolist() == list(range(64, 128)) + [4096]
    js = c.post("/v1/pull-groups", json={"groups": [1, 64]}).json()
    assert js["keys"] == msg.keys.tolist() and js["n"] == msg.values[0].tolist()
    messages = list(wire.iter_messages([c.get("/v1/state").content], wire.ENTRIES))
    assert messages[-1].keys.size == 0  # the end marker
    keys = np.concatenate([m.keys for m in messages])
    assert {64, 4096} <= set(keys.tolist())
    lines = c.get("/v1/state", headers={"Accept": "application/json"}).text.splitlines()
    as_json = [json.loads(line) for line in lines]
    assert sum((o["keys"] for o in as_json), []) == keys.tolist() and as_json[-1]["keys"] == []


def test_state_dump_regroups_touched_entries_into_full_messages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ftrl_ps.server import routes_params

    # the regrouping alone: pieces of exactly `limit`, the last shorter, in order
    parts = [(np.arange(b, e), np.arange(b, e) * 2.0) for b, e in ((0, 3), (3, 4), (4, 11))]
    pieces = list(routes_params._gathered(iter(parts), 4))
    assert [p[0].tolist() for p in pieces] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    assert all(np.array_equal(p[1], p[0] * 2.0) for p in pieces)
    assert list(routes_params._gathered(iter([]), 4)) == []
    # through the route: scans of 256 keys, messages of 5 entries
    monkeypatch.setattr(routes_params, "STATE_CHUNK_KEYS", 5)
    monkeypatch.setattr(routes_params, "STATE_SCAN_KEYS", 256)
    with in_process(bits=12, group_size=64) as c:
        keys = np.arange(7, 4096, 97, dtype=np.uint32)  # 43 keys over 16 scans
        push_binary(c, keys.tolist(), [1.0] * keys.size, (keys * 0.5).tolist())
        messages = list(wire.iter_messages([c.get("/v1/state").content], wire.ENTRIES))
    assert [m.keys.size for m in messages] == [5] * 8 + [3, 0]  # then the end marker
    got = np.concatenate([m.keys for m in messages])
    assert got.tolist() == keys.tolist()
    assert np.concatenate([m.values[1] for m in messages]).tolist() == (keys * 0.5).tolist()


def _origin(epoch: int, seq: int, prev: int | None = None, worker: int = 0,
            position: int = 0) -> wire.PushOrigin:
    return wire.PushOrigin(worker, epoch, seq, seq - 1 if prev is None else prev, position)


def test_retried_push_is_applied_once(shard: Shard):
    c = shard.client
    before = pull_json(c, [7])[0][0]
    # pushes that name a worker need an epoch registered on shard 0 ...
    assert push_binary(c, [7], [1.0], [1.0], origin=_origin(2**31 + 5, 1)).status_code == 404
    # ... so register one (layout must match), claim it, and push twice with the same seq
    layout = {"bits": 12, "group_size": 64, "num_shards": 1}
    resp = c.post("/v1/workers", json={"worker_index": 0, "num_workers": 1, "layout": layout,
                                       "instance": f"dedup-{time.time()}", "supersede": True})
    assert resp.status_code == 200, resp.text
    epoch = resp.json()["epoch"]
    assert resp.json()["worker_id"] == epoch
    record = c.post("/v1/streams/0", json={"epoch": epoch}).json()
    seq = record["last_seq"] + 1  # the http fixture's server may know index 0 already
    first = push_binary(c, [7], [1.0], [1.0], origin=_origin(epoch, seq, record["last_seq"]))
    again = push_binary(c, [7], [1.0], [1.0], origin=_origin(epoch, seq, record["last_seq"]))
    older = c.post("/v1/push", json={"keys": [7], "delta_n": [1.0], "delta_z": [1.0],
                                     "worker": 0, "epoch": epoch, "seq": seq,
                                     "prev_seq": record["last_seq"], "position": 0}).json()
    assert (first.json()["applied"], again.json()["applied"], older["applied"]) == (
        True, False, False)
    assert first.json()["last_seq"] == seq
    assert pull_json(c, [7])[0][0] == before + 1.0
    # the same seq with other content is no duplicate: refused, not dropped
    assert_error(push_binary(c, [7], [2.0], [1.0], origin=_origin(epoch, seq)), 409,
                 "WorkerStateError", "other content")
    # a push that follows a seq the shard never applied: a gap, to be replayed
    assert_error(push_binary(c, [7], [1.0], [1.0], origin=_origin(epoch, seq + 5, seq + 3)),
                 409, "PushGapError", f"applied up to seq {seq}")
    push_binary(c, [7], [1.0], [1.0], origin=_origin(epoch, seq + 1))
    assert pull_json(c, [7])[0][0] == before + 2.0
    counters = c.get("/v1/status").json()["counters"]
    assert counters["duplicate_pushes"] >= 2
    streams = c.get("/v1/streams").json()
    assert streams[0]["pushes"] >= 2 and streams[0]["last_seq"] == seq + 1
    c.post(f"/v1/workers/{epoch}/finish")


def test_superseded_and_unknown_epochs_are_refused():
    with in_process_cluster(2, bits=12, group_size=64) as (s0, s1):
        lay = {**LAYOUT, "num_shards": 2}
        old = s0.post("/v1/workers", json={"worker_index": 0, "num_workers": 1,
                                           "layout": lay}).json()["epoch"]
        for s in (s0, s1):
            s.post("/v1/streams/0", json={"epoch": old})
        assert push_binary(s1, [3000], [1], [1], origin=_origin(old, 1)).json()["applied"]
        assert_error(s0.post("/v1/workers", json={"worker_index": 0, "num_workers": 1,
                                                  "layout": lay}), 409, "WorkerStateError",
                     "alive")
        new = s0.post("/v1/workers", json={"worker_index": 0, "num_workers": 1, "layout": lay,
                                           "supersede": True}).json()["epoch"]
        assert new > old
        # shard 1 has not heard of the new epoch: the new process must claim it first
        assert_error(push_binary(s1, [3000], [1], [1], origin=_origin(new, 2)), 409,
                     "PushGapError", "unknown epoch")
        assert s1.post("/v1/streams/0", json={"epoch": new}).json()["last_seq"] == 1
        assert push_binary(s1, [3000], [1], [1], origin=_origin(new, 2)).json()["applied"]
        # the old process is fenced off everywhere
        assert_error(push_binary(s1, [3000], [1], [1], origin=_origin(old, 3)), 409,
                     "WorkerStateError", "superseded")
        assert_error(s0.post(f"/v1/workers/{old}/heartbeat"), 409, "WorkerStateError",
                     "superseded")
        assert_error(s1.post("/v1/streams/0", json={"epoch": old}), 409, "WorkerStateError",
                     "superseded")
        # shard 0 only lets the live registration claim
        assert_error(s0.post("/v1/streams/0", json={"epoch": old}), 409, "WorkerStateError",
                     "not the live registration")
        assert pull_json(s1, [3000])[0] == [2.0]


def test_health_status_and_openapi(shard: Shard):
    c = shard.client
    assert c.get("/health").json() == {"status": "ok", "shard": 0}
    st = c.get("/v1/status").json()
    assert st["layout"] == {"bits": 12, "group_size": 64, "num_shards": 1}
    pid = st["shard"].pop("pid")
    assert isinstance(pid, int) and pid > 0
    run = st["shard"].pop("run")  # this shard's run id (a new one: started empty)
    assert isinstance(run, str) and len(run) == 16
    assert st["shard"] == {"index": 0, "num_shards": 1, "begin": 0, "end": 4097,
                           "groups": [0, 65]}
    assert st["model"] == {"bits": 12, "dtype": "float32",
                           "params": {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}}
    assert st["clock_authority"] and st["settings"]["auth"] is True
    assert TOKEN not in str(st)
    paths = c.get("/openapi.json").json()["paths"]
    for path in ("/v1/pull", "/v1/pull-groups", "/v1/push", "/v1/workers",
                 "/v1/workers/{worker_id}/clock", "/v1/status", "/v1/state", "/health",
                 "/v1/streams", "/v1/streams/{worker}"):
        assert path in paths


# --- bad requests: right status, JSON error body, state unchanged ------------------------
def _big_body() -> bytes:
    keys = np.arange(100_000)  # 1.2 MB > 0.5 MiB
    return wire.encode_push(keys, np.ones(keys.size), np.ones(keys.size))


def _chunks() -> Iterator[bytes]:
    for _ in range(12):
        yield b"\0" * 65536


LAYOUT = {"bits": 12, "group_size": 64, "num_shards": 1}
Case = tuple[str, Callable[[Shard], httpx.Response], int, str, str]
CASES: list[Case] = [
    ("lengths", lambda s: s.client.post("/v1/push", json={
        "keys": [1, 2], "delta_n": [1.0], "delta_z": [1.0, 1.0]}),
     400, "ProtocolError", "delta_n has 1 values"),
    ("unsorted", lambda s: push_binary(s.client, [3, 1], [1, 1], [1, 1]),
     400, "ProtocolError", "sorted"),
    ("duplicate", lambda s: push_binary(s.client, [2, 2], [1, 1], [1, 1]),
     400, "ProtocolError", "unique"),
    ("out of range", lambda s: push_binary(s.client, [1, 4097], [1, 1], [1, 1]),
     400, "ProtocolError", "outside"),
    ("nan", lambda s: push_binary(s.client, [1, 2], [1, np.nan], [1, 1]),
     400, "ProtocolError", "finite"),
    ("inf json", lambda s: s.client.post("/v1/push", content=b'{"keys": [1], "delta_n": [1],'
                                         b' "delta_z": [Infinity]}', headers=JSON),
     400, "ProtocolError", "finite"),
    ("negative n", lambda s: push_binary(s.client, [1, 2], [1, -1], [1, 1]),
     400, "ProtocolError", "negative"),
    ("truncated", lambda s: s.client.post(
        "/v1/push", content=wire.encode_push([1, 2], [1, 1], [1, 1])[:-3], headers=BINARY),
     400, "ProtocolError", "truncated"),
    ("bad magic", lambda s: s.client.post("/v1/push", content=b"x" * 60, headers=BINARY),
     400, "ProtocolError", "magic"),
    ("wrong kind", lambda s: s.client.post(
        "/v1/push", content=wire.encode_keys([1]), headers=BINARY),
     400, "ProtocolError", "expected a PUSH"),
    ("content type", lambda s: s.client.post(
        "/v1/push", content=b"1,2", headers={"Content-Type": "text/csv"}),
     400, "ProtocolError", "Content-Type"),
    ("bad json", lambda s: s.client.post("/v1/push", content=b"{oops", headers=JSON),
     400, "ProtocolError", "invalid JSON"),
    ("huge", lambda s: s.client.post("/v1/push", content=_big_body(), headers=BINARY),
     413, "PayloadTooLargeError", "limit"),
    ("huge chunked", lambda s: s.client.post("/v1/push", content=_chunks(), headers=BINARY),
     413, "PayloadTooLargeError", "limit"),
    ("huge register", lambda s: s.client.post(
        "/v1/workers", content=b" " * 600_000, headers=JSON),
     413, "PayloadTooLargeError", "limit"),
    ("unknown worker push", lambda s: push_binary(s.client, [1], [1], [1],
                                                  origin=_origin(999, 1)),
     404, "UnknownWorkerError", "999"),
    ("unknown worker route", lambda s: s.client.post("/v1/workers/999/heartbeat"),
     404, "UnknownWorkerError", "999"),
    ("no token", lambda s: push_binary(s.anon, [1], [1], [1]),
     401, "AuthError", "Bearer"),
    ("wrong token", lambda s: s.anon.post(
        "/v1/push", json={"keys": [1], "delta_n": [1], "delta_z": [1]},
        headers={"Authorization": "Bearer nope"}),
     401, "AuthError", "wrong"),
    ("no token register", lambda s: s.anon.post("/v1/workers", json={
        "worker_index": 0, "num_workers": 1, "layout": LAYOUT}),
     401, "AuthError", ""),
    ("layout mismatch", lambda s: s.client.post("/v1/workers", json={
        "worker_index": 0, "num_workers": 1, "layout": {**LAYOUT, "bits": 13}}),
     409, "LayoutMismatchError", "bits: worker has 13, server has 12"),
    ("bad register body", lambda s: s.client.post("/v1/workers", json={"worker_index": 0}),
     400, "ProtocolError", "num_workers"),
    ("bad worker id", lambda s: s.client.post("/v1/workers/abc/heartbeat"),
     400, "ProtocolError", "worker_id"),
    ("pull repeated", lambda s: s.client.post("/v1/pull", json={"keys": [5, 4, 5]}),
     400, "ProtocolError", "unique"),
    ("pull unsorted binary", lambda s: s.client.post("/v1/pull", content=wire.encode_keys(
        [5, 4]), headers=BINARY), 400, "ProtocolError", "sorted"),
    ("pull groups out of range", lambda s: s.client.post("/v1/pull-groups",
                                                         json={"groups": [65]}),
     400, "ProtocolError", "outside"),
    ("no such route", lambda s: s.client.get("/v2/pull"), 404, "NotFound", ""),
]


@pytest.mark.parametrize(("case", "send", "status", "error", "match"), CASES,
                         ids=[c[0] for c in CASES])
def test_bad_requests(shard: Shard, case, send, status, error, match):
    before = pull_json(shard.client, PROBE)
    resp = send(shard)
    assert_error(resp, status, error, match)
    assert pull_json(shard.client, PROBE) == before
    if status == 401:
        assert resp.headers.get("www-authenticate") == "Bearer"


def test_every_route_but_the_probes_needs_the_token(shard: Shard):
    for method, path in (("POST", "/v1/pull"), ("POST", "/v1/pull-groups"),
                         ("GET", "/v1/state"), ("GET", "/v1/status"), ("GET", "/v1/streams"),
                         ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/nowhere")):
        resp = shard.anon.request(method, path, json={"keys": [1]})
        assert_error(resp, 401, "AuthError", "Bearer")
    # a deep body is refused before anything parses it, with or without a token
    deep = b"[" * 5000 + b"]" * 5000
    assert shard.anon.post("/v1/pull", content=deep, headers=JSON).status_code == 401
    assert_error(shard.client.post("/v1/pull", content=deep, headers=JSON), 400,
                 "ProtocolError", "nested 5000 levels")
    limit = 32  # the default max_json_depth: the first body over it, and the last under
    over = b"[" * (limit + 1) + b"]" * (limit + 1)
    assert_error(shard.client.post("/v1/pull", content=over, headers=JSON), 400,
                 "ProtocolError", f"nested {limit + 1} levels")
    under = b"[" * limit + b"]" * limit
    assert "nested" not in shard.client.post("/v1/pull", content=under, headers=JSON).text
    # no Content-Type: FastAPI would parse it as JSON, so it is measured; text is not
    assert_error(shard.client.post("/v1/pull", content=deep), 400, "ProtocolError",
                 "nested 5000 levels")
    assert_error(shard.client.post("/v1/pull", content=deep,
                                   headers={"Content-Type": "Text/Plain; charset=utf-8"}),
                 400, "ProtocolError", "unsupported Content-Type 'text/plain'")
    assert shard.anon.get("/health").status_code == 200
    assert shard.anon.get("/ready").json()["status"] == "ready"


def test_several_authorization_headers_are_refused(shard: Shard):
    """Two Authorization headers answer 401 whichever of them holds the token, on
    the JSON routes and on the binary hot path alike, and change nothing."""
    before = pull_json(shard.client, PROBE)
    good = f"Bearer {TOKEN}"
    binary = ("content-type", wire.BINARY_MEDIA_TYPE)
    for pair in ((good, "Bearer nope"), ("Bearer nope", good), (good, good)):
        auth = [("authorization", value) for value in pair]
        resp = shard.anon.post("/v1/pull", json={"keys": [1]}, headers=auth)
        assert_error(resp, 401, "AuthError", "2 Authorization headers")
        resp = shard.anon.post("/v1/pull", content=wire.encode_keys(np.array([1])),
                               headers=[*auth, binary])
        assert_error(resp, 401, "AuthError", "2 Authorization headers")
    assert pull_json(shard.client, PROBE) == before


# --- workers and the clock (in-process, fresh app per test) --------------------------------
def register(c: httpx.Client, index: int, num: int, **layout: int) -> int:
    lay = {"bits": 12, "group_size": 64, "num_shards": 1, **layout}
    resp = c.post("/v1/workers", json={"worker_index": index, "num_workers": num, "layout": lay})
    assert resp.status_code == 200, resp.text
    return int(resp.json()["worker_id"])


def test_clock_routes_ssp_zero():
    with in_process(bits=12, group_size=64, staleness=0, clock_wait_timeout=0.2) as c:
        a, b = register(c, 0, 2), register(c, 1, 2)
        t0 = time.monotonic()
        first = c.post(f"/v1/workers/{a}/clock", json={"clock": 1, "stats": {"rows": 10}})
        assert first.json()["ready"] is False and time.monotonic() - t0 >= 0.15
        assert first.json()["slowest"] == [1]  # whom worker 0 waits for
        retried = c.post(f"/v1/workers/{a}/clock", json={"clock": 1}).json()  # idempotent
        assert retried["clock"] == 1 and retried["ready"] is False
        assert c.post(f"/v1/workers/{b}/clock", json={"clock": 1}).json()["ready"] is True
        assert c.post(f"/v1/workers/{a}/wait").json() | {"min_clock": 1} == {
            "worker_id": a, "clock": 1, "ready": True, "min_clock": 1, "staleness": 0,
            "alone": False, "slowest": []}
        assert_error(c.post(f"/v1/workers/{a}/clock", json={"clock": 5}), 409,
                     "WorkerStateError", "cannot tick to 5")
        assert_error(c.post(f"/v1/workers/{a}/clock", json={"stats": {"x": "nan"}}), 400,
                     "ProtocolError", "stats")
        st = c.get("/v1/status").json()["clock"]
        assert st["min_clock"] == 1 and st["max_gap_allowed"] == 0
        assert st["workers"][0]["stats"] == {"rows": 10.0}
        c.post(f"/v1/workers/{b}/finish")
        assert c.post(f"/v1/workers/{a}/clock", json={"clock": 2}).json()["ready"] is True
        assert_error(c.post(f"/v1/workers/{b}/heartbeat"), 409, "WorkerStateError", "finished")


def test_the_clock_answer_names_the_worker_training_alone():
    """The warm start's lone worker is told so (its pushes are merged as one
    worker's); the held worker is not, nor the first once the warm start is over."""
    with in_process(bits=12, group_size=64, staleness=0, warm_rounds=1,
                    clock_wait_timeout=0.1) as c:
        a, b = register(c, 0, 2), register(c, 1, 2)
        first = c.post(f"/v1/workers/{a}/wait").json()
        assert first["ready"] is True and first["alone"] is True
        held = c.post(f"/v1/workers/{b}/wait").json()
        assert held["ready"] is False and held["alone"] is False and held["slowest"] == [0]
        after = c.post(f"/v1/workers/{a}/clock", json={"clock": 1}).json()
        assert after["alone"] is False
        assert c.post(f"/v1/workers/{b}/wait").json() | {"worker_id": 0} == {
            "worker_id": 0, "clock": 0, "ready": True, "min_clock": 0, "staleness": 0,
            "alone": False, "slowest": []}


def test_warm_done_from_the_lone_worker_ends_the_warm_start():
    """``POST /v1/workers/{id}/warm-done``: the lone worker's warm pushes are in,
    the held worker goes on before the lone worker ticks; from another worker, or
    once over, nothing changes; unknown (404) and finished (409) workers refused."""
    with in_process(bits=12, group_size=64, staleness=0, warm_rounds=3,
                    clock_wait_timeout=0.1) as c:
        a, b = register(c, 0, 2), register(c, 1, 2)
        assert c.post(f"/v1/workers/{a}/wait").json()["alone"] is True
        assert c.post(f"/v1/workers/{b}/wait").json()["ready"] is False
        assert c.post(f"/v1/workers/{b}/warm-done").json() == {"worker_id": b, "ended": False}
        assert c.post(f"/v1/workers/{b}/wait").json()["ready"] is False
        assert c.post(f"/v1/workers/{a}/warm-done").json() == {"worker_id": a, "ended": True}
        held = c.post(f"/v1/workers/{b}/wait").json()
        assert held["ready"] is True and held["alone"] is False and held["clock"] == 0
        assert c.post(f"/v1/workers/{a}/warm-done").json()["ended"] is False
        warm = c.get("/v1/status").json()["clock"]["warm_start"]
        assert warm == {"rounds": 3, "worker": 0, "over": True}
        assert_error(c.post("/v1/workers/999/warm-done"), 404, "UnknownWorkerError")
        c.post(f"/v1/workers/{b}/finish")
        assert_error(c.post(f"/v1/workers/{b}/warm-done"), 409, "WorkerStateError", "finished")


def test_finish_carries_the_last_stats_and_validates_them():
    """A worker does not tick after its last push: the finish request brings its
    last progress to the status page (an empty body still finishes)."""
    with in_process(bits=12, group_size=64, staleness=0) as c:
        a, b = register(c, 0, 2), register(c, 1, 2)
        c.post(f"/v1/workers/{a}/clock", json={"clock": 1, "stats": {"rows": 10}})
        assert_error(c.post(f"/v1/workers/{a}/finish", json={"stats": {"rows": "x"}}), 400,
                     "ProtocolError", "stats")
        assert_error(c.post(f"/v1/workers/{a}/finish", json={"rows": 1}), 400,
                     "ProtocolError")
        workers = c.get("/v1/status").json()["clock"]["workers"]
        assert workers[0]["state"] == "live" and workers[0]["stats"] == {"rows": 10.0}
        done = c.post(f"/v1/workers/{a}/finish", json={"stats": {"rows": 25, "pushes": 3}})
        assert done.status_code == 200 and done.json()["state"] == "finished", done.text
        assert c.post(f"/v1/workers/{b}/finish").json()["state"] == "finished"
        workers = c.get("/v1/status").json()["clock"]["workers"]
        assert workers[0]["stats"] == {"rows": 25.0, "pushes": 3.0}
        assert workers[1]["state"] == "finished" and workers[1]["stats"] == {}


def test_dead_worker_is_refused_and_can_register_again():
    with in_process(bits=12, group_size=64, staleness=1, worker_timeout=0.3) as c:
        a, b = register(c, 0, 2), register(c, 1, 2)
        deadline = time.monotonic() + 5
        while c.get("/v1/status").json()["clock"]["workers"][1]["state"] != "dead":
            c.post(f"/v1/workers/{a}/heartbeat")
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert_error(c.post(f"/v1/workers/{b}/heartbeat"), 409, "WorkerStateError", "dead")
        assert_error(push_binary(c, [1], [1], [1], origin=_origin(b, 1, worker=1)), 409,
                     "WorkerStateError", "dead")
        assert register(c, 1, 2) != b


def test_other_shards_refuse_clock_routes_but_dedup_pushes():
    with in_process_cluster(2, bits=12, group_size=64) as (s0, s1):
        resp = s1.post("/v1/workers", json={"worker_index": 0, "num_workers": 1,
                                            "layout": {**LAYOUT, "num_shards": 2}})
        assert_error(resp, 400, "ConfigError", "shard 0")
        assert_error(s1.post("/v1/workers/0/clock"), 400, "ConfigError", "clock authority")
        s1.post("/v1/streams/5", json={"epoch": 9})  # shard 1 trusts a claimed epoch
        for _ in range(2):  # and deduplicates
            push_binary(s1, [3000], [1], [1], origin=_origin(9, 1, worker=5))
        assert pull_json(s1, [3000])[0] == [1.0]
        assert_error(s1.post("/v1/pull", json={"keys": [5]}), 400, "ProtocolError", "outside")
        assert s0.get("/v1/status").json()["shard"]["end"] == 2048


def test_float64_server_keeps_float64():
    with in_process(bits=8, dtype="float64") as c:
        value = 0.1  # not exact in float32
        body = wire.encode_push([3], [value], [value], dtype=np.float64)
        c.post("/v1/push", content=body, headers=BINARY)
        msg = wire.decode(c.post("/v1/pull", content=wire.encode_keys([3]),
                                 headers=BINARY).content, wire.VALUES)
        assert msg.values[0].dtype == np.float64 and msg.values[0][0] == value


def test_a_push_with_merge_sections_is_refused_by_a_shard_of_another_rule():
    """A default shard (``contraction``) answers 400 to a ``compose`` push (with
    versions, rows, rho) and keeps its state; a ``compose`` shard applies it."""
    merge = (np.zeros(2, np.uint32), np.ones(2, np.uint32), np.full(2, 0.5))
    body = wire.encode_push([3, 4], [1.0, 1.0], [0.5, 0.5], merge=merge)
    with in_process(bits=8) as c:
        assert_error(c.post("/v1/push", content=body, headers=BINARY), 400, "ProtocolError",
                     "this shard merges pushes by 'contraction'")
        assert pull_json(c, [3, 4]) == ([0.0, 0.0], [0.0, 0.0])
    with in_process(bits=8, merge_rule="compose") as c:
        assert c.post("/v1/push", content=body, headers=BINARY).status_code == 200
        assert pull_json(c, [3, 4]) == ([1.0, 1.0], [0.5, 0.5])


def test_versions_asked_of_a_shard_that_keeps_none_are_refused():
    """Only the versioned rules count pushes per key: a default shard answers a
    pull that asks for versions (binary merge flag or JSON ``versions``) with 400."""
    with in_process(bits=8) as c:
        c.post("/v1/push", content=wire.encode_push([3, 4], [1.0, 1.0], [0.5, 0.5]),
               headers=BINARY)
        asks = [c.post("/v1/pull", content=wire.encode_keys(np.array([3, 4]), merge=()),
                       headers=BINARY),
                c.post("/v1/pull", json={"keys": [3, 4], "versions": True})]
        for answer in asks:
            assert_error(answer, 400, "ProtocolError",
                         "merges pushes by 'contraction' and keeps no versions")
        assert pull_json(c, [3, 4]) == ([1.0, 1.0], [0.5, 0.5])
        assert pull_json(c, [4, 3]) == ([1.0, 1.0], [0.5, 0.5])  # any order, no versions
    with in_process(bits=8, merge_rule="compose") as c:
        c.post("/v1/push", content=wire.encode_push([4], [1.0], [0.5]), headers=BINARY)
        answer = c.post("/v1/pull", json={"keys": [4, 3], "versions": True})
        assert answer.status_code == 200 and answer.json()["versions"] == [1, 0]


def test_error_mapping_round_trip():
    from ftrl_ps import errors as E

    for cls in (E.ConfigError, E.LayoutMismatchError, E.ProtocolError, E.PayloadTooLargeError,
                E.AuthError, E.UnknownWorkerError, E.WorkerStateError, E.ClockTimeoutError,
                E.DataError, E.UnavailableError):
        exc = cls("boom")
        back = exception_from_response(status_for(exc), {"error": cls.__name__,
                                                         "detail": "boom"})
        assert type(back) is cls and str(back) == "boom"
    assert status_for(RuntimeError()) == 500 and status_for(E.ModelFormatError()) == 500
    assert isinstance(exception_from_response(502, "bad gateway"), E.ServerError)
    assert isinstance(exception_from_response(404, {"error": "NotFound", "detail": "x"}),
                      E.ProtocolError)


# --- real processes -------------------------------------------------------------------
PUSHER = textwrap.dedent("""
    import sys
    import numpy as np
    from ftrl_ps.ps.client import PSClient
    url, token, proc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with PSClient(url, token=token) as ps:
        shared = np.arange(2000, 3000)
        own = np.arange(3000 + proc, 4000, 3)
        keys = np.union1d(shared, own)
        dn = np.where(keys < 3000, 0.5, 0.25)
        for _ in range(40):
            ps.push(keys, dn, -dn)
""")


@pytest.mark.timeout(120)
def test_concurrent_pushes_from_processes_give_exact_sums(real: str):
    probe = list(range(2000, 4000))
    with httpx.Client(base_url=real, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        n0, z0 = (np.array(a) for a in pull_json(c, probe))
        procs = [subprocess.Popen([sys.executable, "-c", PUSHER, real, TOKEN, str(p)])
                 for p in range(3)]
        for p in procs:
            assert p.wait(90) == 0
        n1, z1 = (np.array(a) for a in pull_json(c, probe))
    expected = np.where(np.arange(2000, 4000) < 3000, 0.5 * 3 * 40, 0.25 * 40)
    np.testing.assert_array_equal(n1 - n0, expected)
    np.testing.assert_array_equal(z1 - z0, -expected)


def test_server_cli_help_lists_every_flag(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exc:
        cli_main(["server", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--host", "--port", "--bits", "--group-size", "--shard-index", "--num-shards",
                 "--staleness", "--worker-timeout", "--registration-timeout", "--num-workers",
                 "--token", "--max-body-mb", "--dtype", "--init-model", "--clock-wait-timeout",
                 "--log-level", "FTRL_PS_TOKEN", "listening on"):
        assert flag in out, flag


@pytest.mark.parametrize("argv", [
    ["--shard-index", "2", "--num-shards", "2"],
    ["--staleness", "-1"],
    ["--worker-timeout", "0"],
    ["--bits", "40"],
    ["--num-shards", "0"],
    ["--port", "70000"],
])
def test_server_cli_bad_arguments_exit_2(argv, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exc:
        cli_main(["server", *argv])
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_init_model_loads_this_shards_keys(tmp_path):
    modelio = pytest.importorskip("ftrl_ps.core.modelio")
    from ftrl_ps.core.ftrl import FTRLParams

    keys = np.array([5, 3000, 4096], dtype=np.uint32)
    saved = modelio.SavedModel(bits=12, params=FTRLParams(), dtype="float32", keys=keys,
                               n=np.array([1.0, 2.0, 3.0]), z=np.array([-1.0, 0.5, 4.0]))
    path = modelio.save_model(tmp_path / "m.ftrl", saved)
    with in_process_cluster(2, bits=12, group_size=64, init_model=str(path)) as (s0, s1):
        assert pull_json(s0, [5, 6]) == ([1.0, 0.0], [-1.0, 0.0])
        assert pull_json(s1, [3000, 4096]) == ([2.0, 3.0], [0.5, 4.0])
        assert s1.get("/v1/status").json()["initial_keys"] == 2
    from ftrl_ps.errors import ConfigError

    with pytest.raises(ConfigError, match="bits=12"), in_process(bits=13, init_model=str(path)):
        pass


@pytest.mark.timeout(60)
def test_blocked_clock_waits_do_not_starve_pushes_and_pulls():
    """50 SSP waits block on the server (more than the 40 threads of the request
    pool); pushes and pulls must still be answered at once."""
    with in_process(bits=12, group_size=64, staleness=0, clock_wait_timeout=3) as c:
        a, _ = register(c, 0, 2), register(c, 1, 2)
        c.post(f"/v1/workers/{a}/clock", json={"clock": 1, "timeout": 0})
        answers: list[bool] = []
        waiters = [threading.Thread(target=lambda: answers.append(
            c.post(f"/v1/workers/{a}/wait").json()["ready"])) for _ in range(50)]
        for t in waiters:
            t.start()
        time.sleep(0.5)  # let them all block
        t0 = time.monotonic()
        assert push_binary(c, [5], [1.0], [1.0]).status_code == 200
        assert pull_json(c, [5]) == ([1.0], [1.0])
        assert c.get("/health").status_code == 200
        elapsed = time.monotonic() - t0
        for t in waiters:
            t.join(10)
        assert answers == [False] * 50  # all timed out: worker 1 never ticked
        assert elapsed < 1.5, elapsed  # starved, it would be about 2.5 s
