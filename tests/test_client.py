"""PSClient: mocked transports, in-process shards, and real server processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from ftrl_ps.errors import (
    AuthError,
    ClockTimeoutError,
    ConfigError,
    LayoutMismatchError,
    PayloadTooLargeError,
    ProtocolError,
    ServerError,
    TransportError,
    UnknownWorkerError,
    WorkerStateError,
)
from ftrl_ps.ps import wire
from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.layout import Layout
from tests._servers import TOKEN, in_process, in_process_cluster, real_servers

# --- mocked transports --------------------------------------------------------------------
Handler = Callable[[httpx.Request], httpx.Response]


def status_json(index: int = 0, num_shards: int = 1, bits: int = 8, dtype: str = "float32"):
    lay = Layout(bits, 16, num_shards)
    begin, end = lay.shard_range(index)
    return {"layout": lay.to_dict(), "dtype": dtype,
            "shard": {"index": index, "num_shards": num_shards, "begin": begin, "end": end},
            "settings": {"worker_timeout": 3.0, "clock_wait_timeout": 0.1}}


def mocked(handlers: list[Handler], **kw) -> PSClient:
    urls = [f"http://shard{i}" for i in range(len(handlers))]
    clients = [httpx.Client(transport=httpx.MockTransport(h), base_url=u)
               for h, u in zip(handlers, urls, strict=True)]
    kw.setdefault("retries", 2)
    kw.setdefault("retry_seconds", 0)
    return PSClient(urls, http_clients=clients, **kw)


def with_status(route: Handler, **status) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/status":
            return httpx.Response(200, json=status_json(**status))
        return route(request)
    return handler


def test_learns_layout_and_checks_the_shards_agree():
    ps = mocked([with_status(lambda r: httpx.Response(500), index=i, num_shards=2)
                 for i in range(2)])
    assert ps.layout == Layout(8, 16, 2) and ps.dtype == np.float32
    ps.close()
    with pytest.raises(ConfigError, match="shard order"):
        mocked([with_status(lambda r: httpx.Response(500), index=1 - i, num_shards=2)
                for i in range(2)])
    with pytest.raises(LayoutMismatchError, match="2 shard"):
        mocked([with_status(lambda r: httpx.Response(500), index=0, num_shards=2)])
    with pytest.raises(LayoutMismatchError, match="float64"):
        mocked([with_status(lambda r: httpx.Response(500), index=i, num_shards=2,
                            dtype=["float32", "float64"][i]) for i in range(2)])


def test_shards_started_with_other_settings_or_bits_are_named_with_their_own_values():
    """QA: shards that merged or derived weights differently were taken without a
    word, and a shard's bits were swapped with shard 0's in the message."""
    with in_process_cluster(2, bits=8, group_size=16) as pair:
        ps = PSClient(["http://a", "http://b"], http_clients=pair)  # same settings: taken
        ps.close()
    with in_process(bits=8, group_size=16, num_shards=2, shard_index=0) as s0, \
            in_process(bits=8, group_size=16, num_shards=2, shard_index=1, l1=0.5,
                       merge_rule="sum") as s1, \
            pytest.raises(ConfigError, match=r"different settings \(shard 1 has merge_rule "
                          r"sum, shard 0 contraction; shard 1 has l1 0.5, shard 0 1.0\)"):
        PSClient(["http://a", "http://b"], http_clients=[s0, s1])
    with in_process(bits=8, group_size=16, num_shards=2, shard_index=0) as s0, \
            in_process(bits=9, group_size=16, num_shards=2, shard_index=1) as s1, \
            pytest.raises(LayoutMismatchError, match="bits: shard 1 has 9, shard 0 has 8"):
        PSClient(["http://a", "http://b"], http_clients=[s0, s1])


@pytest.mark.parametrize(("status", "payload", "cls"), [
    (400, {"error": "ProtocolError", "detail": "bad keys"}, ProtocolError),
    (400, {"error": "ConfigError", "detail": "x"}, ConfigError),
    (401, {"error": "AuthError", "detail": "token"}, AuthError),
    (404, {"error": "UnknownWorkerError", "detail": "who"}, UnknownWorkerError),
    (409, {"error": "WorkerStateError", "detail": "dead"}, WorkerStateError),
    (409, {"error": "LayoutMismatchError", "detail": "bits"}, LayoutMismatchError),
    (408, {"error": "ClockTimeoutError", "detail": "slow"}, ClockTimeoutError),
    (413, "Content Too Large", PayloadTooLargeError),
    (500, {"error": "ServerError", "detail": "boom"}, ServerError),
    (502, "<html>bad gateway</html>", ServerError),
])
def test_error_answers_become_ftrl_ps_errors(status, payload, cls):
    def route(request: httpx.Request) -> httpx.Response:
        if isinstance(payload, dict):
            return httpx.Response(status, json=payload)
        return httpx.Response(status, text=payload)

    with mocked([with_status(route)]) as ps, pytest.raises(cls) as exc:
        ps.pull([1, 2])
    assert type(exc.value) is cls
    if isinstance(payload, dict):
        assert str(exc.value) == payload["detail"]


def test_transport_errors_are_retried_then_raised():
    calls = []

    def route(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        raise httpx.ReadTimeout("too slow", request=request)

    with mocked([with_status(route)], retries=2) as ps:
        with pytest.raises(TransportError, match="ReadTimeout") as exc:
            ps.pull([1])
        assert isinstance(exc.value.__cause__, httpx.ReadTimeout)
        assert calls == ["/v1/pull"] * 3


def test_unreachable_server_is_a_transport_error():
    with pytest.raises(TransportError, match="ConnectError"):
        PSClient("http://127.0.0.1:1", retries=1, retry_seconds=0, timeout=2)


def _push_recorder(fail_first: type[Exception] | None):
    bodies: list[bytes] = []

    def route(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/workers":
            return httpx.Response(200, json={"worker_id": 4, "clock": 0})
        if request.url.path.startswith("/v1/streams/"):
            return httpx.Response(200, json=STREAM)
        bodies.append(request.content)
        if fail_first is not None and len(bodies) == 1:
            raise fail_first("lost", request=request)
        return httpx.Response(200, json={"applied": True, "durable_seq": 0})

    return bodies, route


#: a stream record with nothing applied
STREAM = {"worker": 0, "epoch": 4, "last_seq": 0, "position": 0, "pushes": 0,
          "digest": "0" * 16, "durable_seq": 0}


def test_push_retry_keeps_the_sequence_number():
    bodies, route = _push_recorder(httpx.ReadError)
    with mocked([with_status(route)]) as ps:
        ps.register(0, 1)
        assert ps.push([1, 3], [1.0, 1.0], [0.5, 0.5]) == 1
        assert ps.push([1], [1.0], [0.5]) == 2
    first, retry, second = (wire.decode(b, wire.PUSH) for b in bodies)
    assert bodies[0] == bodies[1]
    assert (first.origin.epoch, first.origin.seq, retry.origin.seq) == (4, 1, 1)
    assert (second.origin.seq, second.origin.prev_seq) == (2, 1)


def test_anonymous_push_is_not_retried_after_it_may_have_arrived():
    bodies, route = _push_recorder(httpx.ReadError)
    with mocked([with_status(route)]) as ps, pytest.raises(TransportError):
        ps.push([1], [1.0], [1.0])
    assert len(bodies) == 1
    bodies, route = _push_recorder(httpx.ConnectError)  # never arrived: safe to retry
    with mocked([with_status(route)]) as ps:
        assert ps.push([1], [1.0], [1.0]) == 0
    assert len(bodies) == 2


@pytest.mark.parametrize(("keys", "dn", "dz", "message"), [
    ([3, 1], [1, 1], [1, 1], "sorted"),
    ([1, 1], [1, 1], [1, 1], "unique"),
    ([1, 257], [1, 1], [1, 1], "outside the valid range"),
    ([1, 2], [1], [1, 1], "delta_n has 1"),
    ([1, 2], [1, np.nan], [1, 1], "finite"),
    ([1, 2], [1, -1], [1, 1], "negative"),
])
def test_bad_pushes_are_refused_before_sending(keys, dn, dz, message):
    sent = []
    with mocked([with_status(lambda r: sent.append(r) or httpx.Response(200, json={}))]) as ps:
        with pytest.raises(ProtocolError, match=message):
            ps.push(keys, dn, dz)
        if message in ("sorted", "unique", "outside the valid range"):
            with pytest.raises(ProtocolError, match=message):
                ps.pull(keys)
    assert sent == []


def test_clock_retries_until_ready_and_times_out():
    answers = iter([False, False, True])
    seen: list[tuple[str, dict]] = []

    def route(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/workers":
            return httpx.Response(200, json={"worker_id": 0, "clock": 0})
        if request.url.path.startswith("/v1/streams/"):
            return httpx.Response(200, json=STREAM)
        seen.append((request.url.path, json.loads(request.content or b"{}")))
        return httpx.Response(200, json={"ready": next(answers, False), "min_clock": 0,
                                         "staleness": 0})

    with mocked([with_status(route)]) as ps:
        with pytest.raises(WorkerStateError, match="register"):
            ps.clock()
        ps.register(0, 1)
        assert ps.clock({"rows": 3, "loss": float("nan")}) == 1  # non-finite left out
        assert [p for p, _ in seen] == ["/v1/workers/0/clock"] + ["/v1/workers/0/wait"] * 2
        assert seen[0][1] == {"clock": 1, "stats": {"rows": 3.0}}
        t0 = time.monotonic()
        with pytest.raises(ClockTimeoutError, match="clock 2"):
            ps.clock(timeout=0.2)
        assert time.monotonic() - t0 < 2


def test_heartbeat_thread_stops_when_the_worker_is_dead():
    beats = []

    def route(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/workers":
            return httpx.Response(200, json={"worker_id": 0, "clock": 0})
        if request.url.path.startswith("/v1/streams/"):
            return httpx.Response(200, json=STREAM)
        beats.append(time.monotonic())
        if len(beats) < 3:
            return httpx.Response(200, json={"state": "live"})
        return httpx.Response(409, json={"error": "WorkerStateError", "detail": "dead"})

    with mocked([with_status(route)]) as ps:
        ps.register(0, 1)
        ps.start_heartbeat(0.02)
        deadline = time.monotonic() + 5
        while ps.heartbeat_error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(ps.heartbeat_error, WorkerStateError)
        time.sleep(0.1)
        assert len(beats) == 3


# --- in-process shards ------------------------------------------------------------------
def random_pushes(layout: Layout, seed: int, count: int = 25):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        keys = np.unique(rng.integers(0, layout.num_keys, 300))
        keys = np.union1d(keys, [layout.bias_key])
        yield keys, rng.integers(0, 8, keys.size) / 8, rng.integers(-8, 8, keys.size) / 8


@pytest.mark.parametrize("wire_format", ["binary", "json"])
def test_two_in_process_shards_match_one(wire_format):
    settings = dict(bits=10, group_size=32)
    with in_process(**settings) as one, in_process_cluster(2, **settings) as two:
        a = PSClient("http://one", http_clients=[one], wire_format=wire_format)
        b = PSClient(["http://s0", "http://s1"], http_clients=two, wire_format=wire_format)
        for keys, dn, dz in random_pushes(a.layout, 1):
            a.push(keys, dn, dz)
            b.push(keys, dn, dz)
        probe = np.arange(a.layout.num_keys)
        for x, y in zip(a.pull(probe), b.pull(probe), strict=True):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(a.dump_state(), b.dump_state(), strict=True):
            np.testing.assert_array_equal(x, y)
        groups = np.array([0, 15, 16, 32])  # both sides of the shard boundary and the bias
        for x, y in zip(a.pull_groups(groups), b.pull_groups(groups), strict=True):
            np.testing.assert_array_equal(x, y)
        n, _ = b.pull(np.array([], dtype=np.int64))
        assert n.size == 0 and n.flags.writeable is True


def test_client_token_and_worker_errors_in_process():
    with in_process(bits=8, group_size=16, token=TOKEN) as c:
        ps = PSClient("http://x", http_clients=[c], token=TOKEN)
        with pytest.raises(LayoutMismatchError, match="bits"):
            ps.register(0, 1, Layout(9, 16, 1))
        ps.register(0, 1)
        ps.worker_id = 77
        with pytest.raises(UnknownWorkerError):
            ps.heartbeat()
        c.headers.pop("Authorization", None)
        with pytest.raises(AuthError):  # reads need the token too
            PSClient("http://x", http_clients=[c])


def test_a_client_stopped_by_an_error_leaves_the_cluster_at_once():
    """A worker's client closed by an exception (Ctrl-C, SIGTERM, an error) tells
    shard 0 so: it is dead at once, not after the 60 s worker timeout, and the
    worker it held back goes on. Shard 0 that is gone costs it one attempt."""
    from tests._servers import Switchable

    with in_process(bits=8, group_size=16, num_workers=2, staleness=0,
                    worker_timeout=60) as shard:
        other = PSClient("http://x", http_clients=[Switchable(shard)])
        oid = other.register(1, 2)

        def ready() -> bool:
            answer = shard.post(f"/v1/workers/{oid}/wait", json={"timeout": 0}).json()
            return bool(answer["ready"])

        with pytest.raises(ClockTimeoutError):
            other.clock(timeout=0)  # at clock 1: held back by worker 0 (at 0)
        assert not ready()
        with pytest.raises(KeyboardInterrupt), \
                PSClient("http://x", http_clients=[Switchable(shard)]) as ps:
            wid = ps.register(0, 2)
            raise KeyboardInterrupt
        workers = {w["index"]: w for w in other.status()["clock"]["workers"]}
        assert workers[0]["state"] == "dead" and workers[0]["seconds_since_seen"] < 30
        assert ready()  # nobody holds it back now
        again = shard.post(f"/v1/workers/{wid}/leave").json()
        assert again == {"worker_id": wid, "left": False, "state": "dead"}
        assert shard.post("/v1/workers/999/leave").status_code == 404
        with PSClient("http://x", http_clients=[Switchable(shard)]) as ps:
            ps.register(0, 2)
            ps.finish()  # a finished worker's client does not leave
        assert [w["state"] for w in other.status()["clock"]["workers"]
                if w["index"] == 0] == ["dead", "finished"]
        away = Switchable(shard)
        with pytest.raises(RuntimeError), \
                PSClient("http://x", http_clients=[away], retry_seconds=60) as ps:
            ps.register(1, 2, supersede=True)
            away.down = True
            started = time.monotonic()
            raise RuntimeError("the input is gone")
        assert time.monotonic() - started < 5  # one attempt, not 60 s of retries


def test_a_heartbeat_retrying_while_shard_0_is_away_does_not_hold_back_the_exit():
    """QA: SIGTERM of a worker whose shard 0 was down took ~112 s: leaving joined
    the heartbeat thread, which was in a request retrying for ``retry_seconds``."""
    from tests._servers import Switchable

    with in_process(bits=8, group_size=16, num_workers=1, staleness=0) as shard:
        away = Switchable(shard)
        with pytest.raises(KeyboardInterrupt), \
                PSClient("http://x", http_clients=[away], retry_seconds=60) as ps:
            ps.register(0, 1)
            away.down = True
            ps.start_heartbeat(interval=0.05)
            time.sleep(0.5)  # the heartbeat is retrying now
            started = time.monotonic()
            raise KeyboardInterrupt
        assert time.monotonic() - started < 5  # was: until the 60 s of retries ended


def test_a_worker_held_at_the_bound_says_so_once_in_a_while(caplog) -> None:
    """A worker held by a silent peer (killed -9: no leave) used to print nothing
    for the whole worker timeout."""
    from tests._servers import Switchable

    with in_process(bits=8, group_size=16, num_workers=2, staleness=0, worker_timeout=60,
                    clock_wait_timeout=0.1) as shard:
        ps = PSClient("http://x", http_clients=[Switchable(shard)])
        ps.register(0, 2)
        PSClient("http://x", http_clients=[Switchable(shard)]).register(1, 2)  # stays at 0
        with caplog.at_level("INFO", logger="ftrl_ps.ps.client"), \
                pytest.raises(ClockTimeoutError):
            ps.clock(timeout=1.0)  # about ten server waits of 0.1 s
    said = [r.getMessage() for r in caplog.records if r.name == "ftrl_ps.ps.client"]
    assert said == ["worker 0 at clock 1 waits for worker 1 (min clock 0, staleness 0; a "
                    "worker silent for --worker-timeout is declared dead)"]


# --- real server processes ----------------------------------------------------------------
FLAGS = ["--bits", "12", "--group-size", "64"]


@pytest.fixture(scope="module")
def processes() -> Iterator[list[str]]:
    """All real servers of this module, started in one parallel batch: the two
    shards of a cluster, then three SSP servers (s=2; s=0; s=1 with a 1 s
    worker timeout), each expecting 3 workers, then two shards with a warm start
    of 2 rounds for 2 workers."""
    ssp = [*FLAGS, "--num-workers", "3"]
    with real_servers([
        [*FLAGS, "--shard-index", "0", "--num-shards", "2"],
        [*FLAGS, "--shard-index", "1", "--num-shards", "2"],
        [*ssp, "--staleness", "2"],
        [*ssp, "--staleness", "0"],
        [*ssp, "--staleness", "1", "--worker-timeout", "1"],
        *([*FLAGS, "--shard-index", str(i), "--num-shards", "2", "--num-workers", "2",
           "--staleness", "0", "--warm-rounds", "2"] for i in range(2)),
    ]) as servers:
        yield [s.url for s in servers]


@pytest.fixture(scope="module")
def pair(processes: list[str]) -> list[str]:
    return processes[:2]


@pytest.fixture(scope="module")
def ssp_servers(processes: list[str]) -> list[str]:
    return processes[2:5]


@pytest.fixture(scope="module")
def warm_pair(processes: list[str]) -> list[str]:
    return processes[5:7]


def test_round_trip_and_two_shards_equal_one_over_http(pair: list[str]):
    """Two real shard processes end in the same state as one (in-process) shard."""
    with in_process(bits=12, group_size=64) as one, PSClient(
        "http://one", http_clients=[one]
    ) as a, PSClient(pair) as b:
        assert b.layout == Layout(12, 64, 2)
        for keys, dn, dz in random_pushes(a.layout, 7, count=15):
            a.push(keys, dn, dz)
            b.push(keys, dn, dz)
        probe = np.arange(a.layout.num_keys)
        for x, y in zip(a.pull(probe), b.pull(probe), strict=True):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(a.dump_state(), b.dump_state(), strict=True):
            np.testing.assert_array_equal(x, y)
        groups = np.array([1, 31, 32, 64])
        ka, na, za = a.pull_groups(groups)
        assert ka.tolist() == list(range(64, 128)) + list(range(1984, 2112)) + [4096]
        np.testing.assert_array_equal(na, a.pull(ka)[0])
        for x, y in zip((ka, na, za), b.pull_groups(groups), strict=True):
            np.testing.assert_array_equal(x, y)


class DropFirstPushAnswer(httpx.HTTPTransport):
    """Delivers the first push, then pretends its answer was lost."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path == "/v1/push" and not self.dropped:
            response.read()
            self.dropped += 1
            raise httpx.ReadTimeout("answer lost", request=request)
        return response


def test_retried_push_is_applied_once_over_http(pair: list[str]):
    transports = [DropFirstPushAnswer(), DropFirstPushAnswer()]
    clients = [httpx.Client(base_url=u, transport=t) for u, t in zip(pair, transports,
                                                                     strict=True)]
    keys = np.array([3500, 3501])  # shard 1
    with PSClient(pair, http_clients=clients, retries=2) as ps, PSClient(pair) as check:
        before = check.pull(keys)[0]
        ps.register(0, 1)
        ps.push(keys, [1.0, 2.0], [0.0, 0.0])
        assert transports[1].dropped == 1
        np.testing.assert_array_equal(check.pull(keys)[0] - before, [1.0, 2.0])
        assert check.status(1)["counters"]["duplicate_pushes"] == 1
        ps.finish()


def test_clear_errors_over_http(pair: list[str]):
    with PSClient(pair) as ps:
        with pytest.raises(ProtocolError, match="outside"):
            ps.pull([4097])
        ps.worker_id = 12345
        with pytest.raises(UnknownWorkerError, match="12345"):
            ps.heartbeat()
    with pytest.raises(ConfigError, match="shard order"), PSClient(pair[::-1]):
        pass
    with pytest.raises(LayoutMismatchError, match="2 shard"), PSClient(pair[:1]):
        pass


# --- SSP over HTTP ----------------------------------------------------------------------
def run_http_workers(url: str, staleness: int, ticks: int, slow: dict[int, float],
                     num_workers: int = 3) -> list[tuple[int, int, int]]:
    """Worker threads with their own clients; returns invariant violations seen
    from outside the server: after ``clock()`` returns c, every worker must have
    started at least c - staleness ticks."""
    started = [0] * num_workers
    lock = threading.Lock()
    violations: list[tuple[int, int, int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(num_workers)

    def work(i: int) -> None:
        try:
            with PSClient(url) as ps:
                ps.register(i, num_workers)
                barrier.wait()
                keys = np.arange(100 * i, 100 * i + 50)
                for t in range(ticks):
                    time.sleep(slow.get(i, 0.0))
                    ps.pull(keys)
                    ps.push(keys, np.full(50, 0.25), np.full(50, -0.25))
                    with lock:
                        started[i] += 1
                    c = ps.clock({"rows": float(t)})
                    with lock:
                        if c - min(started) > staleness:
                            violations.append((i, c, min(started)))
                ps.finish()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(num_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert errors == []
    return violations


KILLED_WORKER = textwrap.dedent("""
    import sys, time
    from ftrl_ps.ps.client import PSClient
    ps = PSClient(sys.argv[1])
    ps.register(2, 3)
    ps.clock()
    print("ticked", flush=True)
    time.sleep(120)
""")


@pytest.mark.timeout(120)
def test_ssp_over_http_slow_worker_bounds_the_gap(ssp_servers: list[str]):
    url = ssp_servers[0]
    assert run_http_workers(url, 2, ticks=10, slow={2: 0.12}) == []
    with PSClient(url) as ps:
        st = ps.status()["clock"]
    assert st["max_gap_allowed"] == 2
    assert [w["state"] for w in st["workers"]] == ["finished"] * 3
    assert all(w["clock"] == 10 for w in st["workers"])


@pytest.mark.timeout(120)
def test_ssp_over_http_bsp_lockstep(ssp_servers: list[str]):
    url = ssp_servers[1]
    assert run_http_workers(url, 0, ticks=8, slow={0: 0.03}) == []
    with PSClient(url) as ps:
        assert ps.status()["clock"]["max_gap_allowed"] == 0


@pytest.mark.timeout(120)
def test_killed_worker_is_marked_dead_and_does_not_block(ssp_servers: list[str]):
    url = ssp_servers[2]
    victim = subprocess.Popen([sys.executable, "-c", KILLED_WORKER, url],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == "ticked"
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    results: dict[int, float] = {}

    def work(i: int) -> None:
        with PSClient(url) as ps:
            ps.register(i, 3)
            ps.start_heartbeat(0.2)
            for _ in range(5):
                ps.clock(timeout=30)
            results[i] = time.monotonic()
            ps.finish()

    t0 = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert sorted(results) == [0, 1], "the survivors were blocked"
    assert max(results.values()) - t0 < 20
    with PSClient(url) as ps:
        workers = {w["index"]: w for w in ps.status()["clock"]["workers"]}
        assert workers[2]["state"] == "dead" and workers[2]["clock"] == 1
        assert ps.status()["clock"]["max_gap_allowed"] <= 1
        ps.worker_id = workers[2]["worker_id"]
        with pytest.raises(WorkerStateError, match="declared dead"):
            ps.heartbeat()


def test_the_lone_worker_lets_the_others_go_once_its_warm_push_is_in(warm_pair: list[str]):
    """Two real shards with a warm start of 2 rounds: the held worker's turn comes
    when the lone worker says its last warm push is in (:meth:`PSClient.warm_done`,
    after the push reached both shards), not at its tick; it pulls that push."""
    with PSClient(warm_pair) as a, PSClient(warm_pair) as b:
        a.register(0, 2)
        b.register(1, 2)
        assert a.wait_turn() is True
        turn: list[bool] = []
        waiting = threading.Thread(target=lambda: turn.append(b.wait_turn()))
        waiting.start()
        keys, dn, dz = next(random_pushes(a.layout, 3, count=1))
        assert a.layout.split_keys(keys)[1] not in (0, keys.size)  # on both shards
        a.push(keys, dn, dz, position=300)
        a.clock()  # the first of its two warm rounds
        time.sleep(0.3)
        assert not turn  # still held: the warm start is the lone worker's
        a.push(keys, dn, dz, position=600)
        a.warm_done()
        waiting.join(timeout=10)
        assert turn == [False]  # b goes on, and does not train alone
        workers = {w["index"]: w for w in a.status()["clock"]["workers"]}
        assert workers[0]["clock"] == 1  # before the lone worker's second tick
        n, _ = b.pull(keys)
        np.testing.assert_allclose(n, 2 * dn)
        a.warm_done()  # again, or from the other worker: nothing changes
        b.warm_done()
        assert a.status()["clock"]["warm_start"] == {"rounds": 2, "worker": 0, "over": True}
