"""``ftrl-ps serve`` as an operator runs it, with real processes and real HTTP: any
start order, its metrics, one log line per event, and readiness during an outage."""

from __future__ import annotations

import logging
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.modelio import save_model
from ftrl_ps.core.params import FTRLParams
from ftrl_ps.data.bodies import parse_text
from ftrl_ps.ps.worker import WorkerConfig
from tests._servers import real_server
from tests.conftest import REPO, wait_until
from tests.test_services import clean_env

TEXT = {"Content-Type": "text/plain"}
BITS = 10


class Serve:
    """A running ``python -m MODULE ARGS`` (``ftrl_ps serve`` by default): its
    stdout and stderr are read in threads, so both can be waited for while it runs."""

    def __init__(self, *args: str, module: str = "ftrl_ps", env: dict[str, str] | None = None,
                 command: list[str] | None = None, stdin: bool = False) -> None:
        """``command``: another command line than ``python -m MODULE [serve] ARGS``;
        ``stdin``: a pipe on its standard input."""
        command = command or [sys.executable, "-m", module,
                              *(["serve"] if module == "ftrl_ps" else []), *args]
        self.popen = subprocess.Popen(command, cwd=REPO, env=env or clean_env(), text=True,
                                      stdin=subprocess.PIPE if stdin else None,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.stdout: queue.Queue[str] = queue.Queue()
        self._err: list[str] = []
        self._pumps = [threading.Thread(target=self._pump, args=pair, daemon=True) for pair in (
            (self.popen.stdout, self.stdout.put), (self.popen.stderr, self._err.append))]
        for t in self._pumps:
            t.start()

    @staticmethod
    def _pump(stream: Iterable[str], sink: Callable[[str], object]) -> None:
        for line in stream:
            sink(line)

    def err(self) -> str:
        return "".join(self._err)

    def url(self, timeout: float = 60) -> str:
        """The URL of its ``listening on URL`` line."""
        try:
            line = self.stdout.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"serve is not listening; stderr: {self.err()}") from None
        assert line.startswith("listening on "), (line, self.err())
        return line.removeprefix("listening on ").strip()

    def stop(self) -> int:
        """SIGTERM (SIGKILL after 30 s); the exit code, once all its output is read."""
        if self.popen.poll() is None:
            self.popen.terminate()
        try:
            code = self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait(10)
        for t in self._pumps:
            t.join(10)
        return code


@pytest.fixture
def serves() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for s in started:
        s.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metrics(url: str) -> dict[str, float]:
    """The label-less samples of ``url``/metrics, by name."""
    text = httpx.get(f"{url}/metrics", timeout=10, trust_env=False).text
    return {s.name: s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if not s.labels}


def _model(seed: int) -> FTRL:
    model = FTRL(BITS, FTRLParams(l1=0.1))
    batch = parse_text(b"1 3:1 7:1\n0 5:2\n" * 20, BITS, labels=True)
    labels = np.random.default_rng(seed).integers(0, 2, batch.rows).astype(np.float32)
    model.fit_rows(labels, batch.indptr, batch.indices, batch.values)
    return model


# --- start order ------------------------------------------------------------------------

def test_serve_waits_for_a_shard_started_later(serves: list[Serve]) -> None:
    port = free_port()
    shard = f"http://127.0.0.1:{port}"
    serve = Serve("--server", shard, "--start-timeout", "60", "--port", "0")
    serves.append(serve)
    waiting = f"serve: waiting (up to 60 s) for {shard}/health (not reachable"
    wait_until(lambda: waiting in serve.err(), 30, "the line saying what serve waits for")
    assert serve.popen.poll() is None and serve.stdout.empty()  # waits, does not listen
    with real_server(["--port", str(port), "--bits", str(BITS)]):
        url = serve.url()
        ready = httpx.get(f"{url}/ready", timeout=10, trust_env=False)
        assert ready.status_code == 200, ready.text
        answer = httpx.post(f"{url}/v1/predict", content=b"3:1 7:1\n", headers=TEXT,
                            timeout=10, trust_env=False)
        assert answer.status_code == 200 and answer.json()["probabilities"] == [0.5]
    assert serve.err().count("serve: waiting") == 1  # said once, not once a second


def test_serve_start_timeout_exits_1_with_one_line(serves: list[Serve]) -> None:
    shard = f"http://127.0.0.1:{free_port()}"
    expected = f"serve: still missing after 1 s: {shard}/health (not reachable"
    cli = Serve("--server", shard, "--start-timeout", "1")
    service = Serve(module="services.serve", env=clean_env(
        FTRL_PS_SERVER=shard, FTRL_PS_START_TIMEOUT="1", FTRL_PS_HOST="127.0.0.1",
        FTRL_PS_PORT="0"))
    serves += [cli, service]
    for proc, prefix in ((cli, "error: "), (service, "services.serve: error: ")):
        proc.popen.wait(60)
        assert proc.stop() == 1, proc.err()
        errors = [ln for ln in proc.err().splitlines() if expected in ln]
        assert len(errors) == 1 and f"{prefix}{expected}" in errors[0], proc.err()
        assert "Traceback" not in proc.err()


# --- metrics and logs -------------------------------------------------------------------

def test_model_file_reloads_move_the_metrics_and_are_logged(tmp_path: Path,
                                                            serves: list[Serve]) -> None:
    model = save_model(tmp_path / "m.ftrl", _model(1))
    serve = Serve("--model", str(model), "--reload-interval", "0.1", "--port", "0")
    serves.append(serve)
    url = serve.url()
    first = metrics(url)
    assert first["ftrl_ps_serve_model_version"] == 1 and first["ftrl_ps_serve_ready"] == 1
    assert first["ftrl_ps_serve_reloads_total"] == 0
    assert first["ftrl_ps_serve_reload_failures_total"] == 0
    assert first["ftrl_ps_serve_source_healthy"] == 1
    wait_until(lambda: metrics(url)["ftrl_ps_serve_model_age_seconds"] > 0.5, 30,
               "the model to age")
    save_model(model, _model(2))  # a new file renamed over the old one
    wait_until(lambda: metrics(url)["ftrl_ps_serve_model_version"] == 2, 30, "the reload")
    reloaded = metrics(url)
    assert reloaded["ftrl_ps_serve_reloads_total"] == 1
    assert reloaded["ftrl_ps_serve_model_age_seconds"] < 0.5  # the served model is new
    broken = tmp_path / "broken.tmp"
    broken.write_bytes(model.read_bytes()[:40])
    broken.replace(model)
    wait_until(lambda: metrics(url)["ftrl_ps_serve_reload_failures_total"] == 1, 30,
               "the failed reload")
    failed = metrics(url)
    assert failed["ftrl_ps_serve_source_healthy"] == 0
    assert failed["ftrl_ps_serve_model_version"] == 2 and failed["ftrl_ps_serve_ready"] == 1
    assert serve.stop() in (0, -15)  # stopped by SIGTERM
    err = serve.err()
    assert err.count(f"model reloaded from {model}: serving version 2") == 1, err
    assert err.count(f"model reload of {model} failed: ") == 1, err
    assert "still serving version 2" in err


def test_online_learning_moves_the_metrics(serves: list[Serve]) -> None:
    with real_server(["--bits", str(BITS), "--num-workers", "1", "--staleness", "inf"]) as srv:
        serve = Serve("--server", srv.url, "--learn", "--refresh", "0.1", "--push-interval",
                      "0.1", "--port", "0")
        serves.append(serve)
        url = serve.url()
        before = metrics(url)
        assert before["ftrl_ps_serve_learn_rows_trained_total"] == 0
        assert before["ftrl_ps_serve_refreshes_total"] >= 1
        learned = httpx.post(f"{url}/v1/learn", content=b"1 3:1 7:1\n" * 200, headers=TEXT,
                             timeout=30, trust_env=False)
        assert learned.status_code == 200, learned.text

        def reflected() -> bool:
            m = metrics(url)
            return (m["ftrl_ps_serve_learn_rows_trained_total"] == 200
                    and m["ftrl_ps_serve_learn_pushes_total"] >= 1
                    and m["ftrl_ps_serve_model_version"] > before["ftrl_ps_serve_model_version"])

        wait_until(reflected, 30, "the learned rows in the metrics and the served model")
        after = metrics(url)
        assert after["ftrl_ps_serve_learn_rows_accepted_total"] == 200
        assert after["ftrl_ps_serve_learn_rows_dropped_total"] == 0
        assert after["ftrl_ps_serve_learn_rows_queued"] == 0
        assert after["ftrl_ps_serve_refreshes_total"] > before["ftrl_ps_serve_refreshes_total"]
        assert after["ftrl_ps_serve_refresh_failures_total"] == 0


def test_cluster_outage_is_logged_once_each_way_and_serve_stays_ready(
        serves: list[Serve]) -> None:
    port = free_port()
    with real_server(["--port", str(port), "--bits", str(BITS)]) as srv:
        serve = Serve("--server", srv.url, "--refresh", "0.1", "--port", "0")
        serves.append(serve)
        url = serve.url()
    # the shard is gone: the last model stays served, and the service ready
    wait_until(lambda: metrics(url)["ftrl_ps_serve_refresh_failures_total"] >= 3, 30,
               "failed refreshes")
    assert metrics(url)["ftrl_ps_serve_source_healthy"] == 0
    ready = httpx.get(f"{url}/ready", timeout=10, trust_env=False)
    assert ready.status_code == 200 and ready.json()["source_healthy"] is False
    with real_server(["--port", str(port), "--bits", str(BITS)]):
        wait_until(lambda: metrics(url)["ftrl_ps_serve_source_healthy"] == 1, 30,
                   "the source to recover")
        assert "cluster source healthy again after " in serve.err()
    err = serve.err()
    assert err.count("cluster source unhealthy: refresh failed (TransportError: ") >= 1
    assert err.count("cluster source healthy again") == 1
    # one line when it broke (the second outage, after the shard stopped again, may
    # have begun by now), not one per failed refresh
    assert err.count("cluster source unhealthy") <= 2, err


def test_learner_logs_each_dropped_round(monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    from ftrl_ps.errors import TransportError
    from ftrl_ps.ps import stream

    class Unreachable:
        def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            raise TransportError("connection refused")

        def push(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("nothing was trained")

        def clock(self, stats: object = None) -> None:
            return None

    monkeypatch.setattr(stream, "FAILURE_BACKOFF", 0.01)
    monkeypatch.setattr(logging.getLogger("ftrl_ps"), "propagate", True)  # to caplog
    caplog.set_level(logging.WARNING, logger="ftrl_ps.ps.stream")
    learner = stream.StreamLearner(Unreachable(), BITS, FTRLParams(),
                                   WorkerConfig(batch_size=10), push_interval=0.05)
    learner.start()
    learner.submit(parse_text(b"1 3:1\n" * 10, BITS, labels=True))
    wait_until(lambda: learner.status()["failed_rounds"] == 1)
    learner.submit(parse_text(b"0 4:1\n" * 5, BITS, labels=True))
    wait_until(lambda: learner.status()["failed_rounds"] == 2)
    learner.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "ftrl_ps.ps.stream"]
    assert lines == [
        "the learner dropped 10 rows (10 in all): the cluster failed: TransportError: "
        "connection refused",
        "the learner dropped 5 rows (15 in all): the cluster failed: TransportError: "
        "connection refused",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
