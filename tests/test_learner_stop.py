"""The online learner when the cluster goes away, with real processes: a stream worker
(``ftrl-ps worker --input -``) and ``ftrl-ps serve --learn`` stop in bounded time on
SIGTERM and say which rows they did not push; a stream worker that cannot push fails;
serve's counters account for every accepted row and it reports shard restarts."""

from __future__ import annotations

import re
import signal
import sys
import time

import httpx
import pytest

from tests._servers import real_server
from tests.conftest import wait_until
from tests.test_serve_ops import BITS, TEXT, Serve, free_port, metrics
from tests.test_serve_ops import serves as serves  # noqa: F401 - the fixture

ROWS = b"1 3:1 5:1\n0 7:1\n" * 50  # 100 rows


class StreamWorker(Serve):
    """``ftrl-ps worker --input - ARGS`` with a pipe on its stdin."""

    def __init__(self, *args: str) -> None:
        super().__init__(command=[sys.executable, "-m", "ftrl_ps", "worker", "--input", "-",
                                  *args], stdin=True)

    def feed(self, data: bytes) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(data.decode())
        self.popen.stdin.flush()


def _worker_rows(url: str) -> float:
    status = httpx.get(f"{url}/v1/status", timeout=10, trust_env=False).json()
    workers = (status.get("clock") or {}).get("workers") or []
    return sum(float((w.get("stats") or {}).get("rows", 0)) for w in workers)


def _stream_worker_after_an_outage(*args: str) -> StreamWorker:
    """A stream worker that pushed 100 rows, then 300 more rows read while its only
    shard is gone (stopped: nothing answers on its port)."""
    with real_server(["--bits", str(BITS), "--num-workers", "1", "--staleness", "inf"]) as srv:
        worker = StreamWorker("--server", srv.url, "--worker-index", "0", "--num-workers",
                              "1", "--push-interval", "0.1", *args)
        try:
            worker.feed(ROWS)
            wait_until(lambda: _worker_rows(srv.url) >= 100, 60, "the first 100 rows pushed")
        except BaseException:
            worker.stop()
            raise
    worker.feed(ROWS * 3)
    return worker


def test_a_stream_worker_stops_within_seconds_of_sigterm_while_its_shard_is_down() -> None:
    worker = _stream_worker_after_an_outage()  # --retry-seconds 120
    try:
        wait_until(lambda: "does not answer" in worker.err(), 30, "the learner retrying")
        worker.popen.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = worker.popen.wait(30)  # was: alive 200 s after SIGTERM
        took = time.monotonic() - sent
    finally:
        worker.stop()
    err = worker.err()
    assert code == 130 and took < 15, (code, took, err)
    assert "worker 0: 300 rows read from stdin were not pushed" in err, err
    assert "interrupted" in err


def test_a_stream_worker_that_cannot_push_fails_saying_how_many_rows() -> None:
    worker = _stream_worker_after_an_outage("--retry-seconds", "1")
    try:
        assert worker.popen.stdin is not None
        worker.popen.stdin.close()  # the stream ends: what was read must be pushed
        code = worker.popen.wait(60)
    finally:
        worker.stop()
    err = worker.err()
    # was: "the learner dropped 300 rows" (a warning), then the finish failed
    assert code == 1, err
    assert re.search(r"error: 300 rows read from stdin were not pushed \(the servers do not "
                     r"have them\): POST \S+/v1/pull failed after", err), err
    assert "the learner dropped" not in err


def test_serve_learn_stops_in_bounded_time_and_accounts_for_every_row(
        serves: list[Serve]) -> None:  # noqa: F811 - the fixture
    with real_server(["--bits", str(BITS), "--num-workers", "1", "--staleness", "inf"]) as srv:
        serve = Serve("--server", srv.url, "--learn", "--refresh", "0.1", "--push-interval",
                      "0.1", "--port", "0")
        serves.append(serve)
        url = serve.url()
    learned = httpx.post(f"{url}/v1/learn", content=ROWS * 3, headers=TEXT, timeout=30,
                         trust_env=False)
    assert learned.status_code == 200 and learned.json()["accepted"] == 300, learned.text
    wait_until(lambda: "does not answer" in serve.err(), 30, "the learner retrying")
    learner = httpx.get(f"{url}/v1/status", timeout=10, trust_env=False).json()["learner"]
    # was: accepted 300, trained 0, dropped 0, queued 0 (the round in training nowhere)
    assert (learner["rows_accepted"], learner["rows_trained"], learner["rows_dropped"],
            learner["rows_queued"]) == (300, 0, 0, 300), learner
    serve.popen.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    code = serve.popen.wait(45)  # was: 60 s, then killed
    took = time.monotonic() - sent
    err = serve.err()
    assert code in (0, -15) and took < 25, (code, took, err)  # -15: uvicorn re-raises it
    # the round in training fails at once (retries stopped), or stop() counts the rows
    assert re.search(r"the learner dropped 300 rows \(300 in all\): the cluster failed: .*"
                     r"not retried: the process is stopping|the learner stops with 300 "
                     r"accepted rows not pushed \(0 trained, 300 not trained\)", err), err


def test_serve_learn_reports_a_shard_restart_that_may_have_lost_learned_rows(
        serves: list[Serve]) -> None:  # noqa: F811 - the fixture
    port = free_port()
    args = ["--port", str(port), "--bits", str(BITS), "--num-workers", "1", "--staleness", "inf"]
    with real_server(args) as srv:
        serve = Serve("--server", srv.url, "--learn", "--refresh", "0.1", "--push-interval",
                      "0.1", "--port", "0")
        serves.append(serve)
        url = serve.url()
        httpx.post(f"{url}/v1/learn", content=ROWS, headers=TEXT, timeout=30, trust_env=False)
        wait_until(lambda: metrics(url)["ftrl_ps_serve_learn_pushes_total"] >= 1, 30,
                   "a push")
    assert metrics(url)["ftrl_ps_serve_learn_shard_restarts_total"] == 0
    with real_server(args):  # the same shard, restarted (with nothing: all is lost)
        wait_until(lambda: metrics(url)["ftrl_ps_serve_learn_shard_restarts_total"] == 1, 30,
                   "the restart seen")
        status = httpx.get(f"{url}/v1/status", timeout=10, trust_env=False).json()
    assert status["learner"]["shard_restarts"] == 1
    assert status["source"]["shard_restarts"] == 1
    err = serve.err()
    assert err.count(f"shard 0 (http://127.0.0.1:{port}) restarted: rows this service learned "
                     "since that shard's last checkpoint may be lost") == 1, err


@pytest.mark.parametrize("rows", [1001, 5000])
def test_serve_learn_refuses_a_request_larger_than_its_queue(serves: list[Serve],  # noqa: F811
                                                             rows: int) -> None:
    with real_server(["--bits", str(BITS), "--num-workers", "1", "--staleness", "inf"]) as srv:
        serve = Serve("--server", srv.url, "--learn", "--max-queue-rows", "1000", "--port", "0")
        serves.append(serve)
        url = serve.url()
        answer = httpx.post(f"{url}/v1/learn", content=b"1 3:1\n" * rows, headers=TEXT,
                            timeout=30, trust_env=False)
        assert answer.status_code == 413, answer.text
        assert answer.json()["detail"] == (
            f"{rows} rows are more than the learner queues (--max-queue-rows 1000): send "
            "them in smaller requests")
        ok = httpx.post(f"{url}/v1/learn", content=b"1 3:1\n" * 1000, headers=TEXT,
                        timeout=30, trust_env=False)
        assert ok.status_code == 200, ok.text
