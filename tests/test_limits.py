"""Strangers at the door of a real shard: stalled and lying senders get an answer
within the body timeout, deep JSON never reaches a parser, exports are streamed
in bounded memory and capped, heartbeats only come from worker calls."""

from __future__ import annotations

import socket
import time

import httpx
import numpy as np
import pytest

from ftrl_ps.errors import WorkerStateError
from ftrl_ps.ps.client import PSClient
from tests._servers import TOKEN, in_process, real_server

AUTH = f"Authorization: Bearer {TOKEN}\r\n"


def raw_request(url: str, head: str, body: bytes) -> tuple[float, bytes]:
    """Send ``head`` + ``body`` and never the rest; (seconds to the answer, answer)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        t0 = time.monotonic()
        sock.sendall(head.encode() + b"\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection
            answer += chunk
        return time.monotonic() - t0, answer


@pytest.mark.timeout(120)
def test_stalled_and_lying_senders_are_answered_and_cut_off() -> None:
    with real_server(["--bits", "12", "--group-size", "64", "--token", TOKEN,
                      "--body-timeout", "1"]) as server:
        # declares 100 MiB (over the 64 MiB limit), sends 10 bytes, then stalls
        seconds, answer = raw_request(
            server.url, "POST /v1/push HTTP/1.1\r\nHost: x\r\n" + AUTH
            + "Content-Type: application/x-ftrl-ps\r\nContent-Length: 104857600\r\n",
            b"0123456789")
        assert answer.startswith(b"HTTP/1.1 408") and b"RequestTimeoutError" in answer
        assert 0.9 <= seconds < 10
        # a small JSON body that never arrives whole
        seconds, answer = raw_request(
            server.url, "POST /v1/pull HTTP/1.1\r\nHost: x\r\n" + AUTH
            + "Content-Type: application/json\r\nContent-Length: 100\r\n", b'{"keys": [')
        assert answer.startswith(b"HTTP/1.1 408") and seconds < 10
        # over the limit with "Expect: 100-continue": 413 at once, no "100 Continue"
        # (the client would upload it all first, 38 s for 200 MB at 5 MB/s)
        seconds, answer = raw_request(
            server.url, "POST /v1/push HTTP/1.1\r\nHost: x\r\n" + AUTH
            + "Content-Type: application/x-ftrl-ps\r\nContent-Length: 104857600\r\n"
            + "Expect: 100-continue\r\n", b"")
        assert answer.startswith(b"HTTP/1.1 413") and b"100 Continue" not in answer
        # the server is still fine
        r = httpx.get(server.url + "/v1/status", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200


def test_exports_are_capped_and_released() -> None:
    with in_process(bits=12, group_size=64, max_exports=1) as c:
        c.post("/v1/push", json={"entries": [[k, 1.0, 0.5] for k in range(0, 4000, 7)]})
        with c.stream("GET", "/v1/state") as first:
            second = c.get("/v1/state")
            assert second.status_code == 503 and second.json()["error"] == "UnavailableError"
            first.read()
        assert c.get("/v1/state").status_code == 200  # the slot came back
        with PSClient("http://shard", http_clients=[c]) as ps:
            keys, n, _ = ps.dump_state()
        assert keys.tolist() == list(range(0, 4000, 7)) and (n == 1.0).all()


def test_only_worker_calls_are_heartbeats() -> None:
    with in_process(bits=12, group_size=64, worker_timeout=0.3, num_workers=2,
                    staleness=0) as c:
        with PSClient("http://shard", http_clients=[c]) as ps:
            ps.register(1, 2)
            deadline = time.monotonic() + 5
            while c.get("/v1/status").json()["clock"]["workers"][0]["state"] != "dead":
                ps.pull([1, 2])  # pulls do not keep the worker alive any more
                assert time.monotonic() < deadline
                time.sleep(0.05)


def test_float64_export_and_state_stream_keep_float64() -> None:
    with in_process(bits=12, group_size=64, dtype="float64") as c:
        c.post("/v1/push", json={"entries": [[5, 0.1, 1 / 3]]})
        with PSClient("http://shard", http_clients=[c]) as ps:
            keys, n, z = ps.dump_state()
    assert n.dtype == np.float64 and n.tolist() == [0.1] and z.tolist() == [1 / 3]


def test_export_saves_what_the_servers_hold(tmp_path) -> None:
    from ftrl_ps.core.modelio import load_model
    from ftrl_ps.errors import ConfigError
    from ftrl_ps.ps.export import ExportOptions, run_export

    flags = ["--bits", "12", "--group-size", "64", "--token", TOKEN, "--alpha", "0.5",
             "--l1", "5", "--l2", "0.1", "--dtype", "float64"]
    with real_server(flags) as server:
        with PSClient(server.url, token=TOKEN) as ps:
            assert ps.server_model == {"bits": 12, "dtype": "float64", "params": {
                "alpha": 0.5, "beta": 1.0, "l1": 5.0, "l2": 0.1}}
            ps.push([3, 9], [0.1, 0.2], [1 / 3, -1 / 7])
        out = tmp_path / "m.ftrl"
        run_export(ExportOptions(server=server.url, model=str(out), token=TOKEN, quiet=True))
        model = load_model(out)
        assert model.params.as_dict() == {"alpha": 0.5, "beta": 1.0, "l1": 5.0, "l2": 0.1}
        assert model.dtype == "float64" and model.z.tolist() == [1 / 3, -1 / 7]
        with pytest.raises(ConfigError, match="--l1 1.0 .the servers have 5.0"):
            run_export(ExportOptions(server=server.url, model=str(out), token=TOKEN, l1=1.0))


def test_a_worker_whose_share_is_already_trained_has_nothing_to_do(tmp_path) -> None:
    """E.g. a run restored from its checkpoints after it had finished: the worker
    says so and exits cleanly instead of failing (and being restarted) forever."""
    from ftrl_ps.ps.worker_main import WorkerOptions, run_worker

    data = tmp_path / "t.svm"
    data.write_text("1 3:1\n0 5:1\n" * 50)
    with real_server(["--bits", "12", "--group-size", "64", "--token", TOKEN,
                      "--num-workers", "1"]) as server:
        with PSClient(server.url, token=TOKEN) as ps:
            ps.register(0, 1)
            ps.finish()
        for index in (0, None):
            result = run_worker(WorkerOptions(server=server.url, input=str(data), num_workers=1,
                                              worker_index=index, token=TOKEN, quiet=True))
            assert result["already_finished"] is True and result["rows"] == 0


def test_a_restarted_worker_whose_index_finished_exits_while_others_train(tmp_path) -> None:
    """A container killed right after its worker finished comes back (restart on
    failure) with the same identity while the other workers still train: nothing to
    do, exit 0, not 'no free worker index' (and a restart loop) until they finish."""
    from ftrl_ps.ps.worker_main import WorkerOptions, run_worker

    data = tmp_path / "t.svm"
    data.write_text("1 3:1\n0 5:1\n" * 50)
    with real_server(["--bits", "12", "--group-size", "64", "--token", TOKEN,
                      "--num-workers", "2"]) as server:
        with PSClient(server.url, token=TOKEN) as done, PSClient(server.url, token=TOKEN) as busy:
            done.register(None, 2, identity="box-a")
            busy.register(None, 2, identity="box-b")  # still training
            done.finish()
            result = run_worker(WorkerOptions(server=server.url, input=str(data), num_workers=2,
                                              token=TOKEN, quiet=True, identity="box-a"))
            assert result == {"worker_index": None, "rows": 0, "already_finished": True}
            with pytest.raises(WorkerStateError, match="no free worker index"):
                run_worker(WorkerOptions(server=server.url, input=str(data), num_workers=2,
                                         token=TOKEN, quiet=True, identity="box-c"))


def _nested(depth: int, text: str) -> object:
    value: object = text
    for level in range(depth):
        value = [value, text] if level % 2 else {text: value}
    return value


@pytest.mark.parametrize("chunk", [3, 7, 1 << 20])
def test_json_depth_counts_brackets_outside_strings_only(monkeypatch, chunk: int) -> None:
    import json

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ftrl_ps.server import limits

    monkeypatch.setattr(limits, "_DEPTH_CHUNK", chunk)  # state carried across steps

    @settings(max_examples=150, deadline=None)
    @given(st.integers(0, 12), st.text(alphabet='[]{}"\\ab', max_size=12))
    def check(depth: int, text: str) -> None:
        body = json.dumps(_nested(depth, text)).encode()
        assert limits.json_depth(body) == depth, body

    check()


def test_json_depth_of_an_unclosed_string_of_escaped_quotes() -> None:
    from ftrl_ps.server.limits import json_depth

    # 2 MB: the regular expression used before took quadratic time (10 s at 48 KB)
    body = b"[" * 40 + b'"' + b'\\"' * 1_000_000
    assert json_depth(body) == 40
