"""The prediction service: predict/learn routes, model reload, cluster refresh, limits, auth."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.core.modelio import save_model
from ftrl_ps.core.params import FTRLParams
from ftrl_ps.data.bodies import parse_text
from ftrl_ps.ps import rowwire
from ftrl_ps.ps.service import PredictionService, ServiceConfig
from ftrl_ps.ps.worker import WorkerConfig
from ftrl_ps.server.serve_app import create_serve_app
from tests._servers import assert_error, real_server
from tests.conftest import wait_until

BITS = 10
TEXT = {"Content-Type": "text/plain"}
ROWS = b"1 3:0.5 7:1 user=1\n0 5:2\n1 3:1 9:1\n0 7:1\n" * 50


def _model(seed: int) -> FTRL:
    model = FTRL(BITS, FTRLParams(l1=0.1))
    batch = parse_text(ROWS, BITS, labels=True)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, batch.rows).astype(np.float32)
    model.fit_rows(labels, batch.indptr, batch.indices, batch.values)
    return model


@pytest.fixture()
def model_file(tmp_path: Path) -> Path:
    return save_model(tmp_path / "m.ftrl", _model(1))


@pytest.fixture()
def served(model_file: Path) -> Iterator[TestClient]:
    service = PredictionService(ServiceConfig(model=str(model_file), reload_interval=0.1,
                                              max_rows=500))
    app = create_serve_app(service, predict_token=None, max_body_bytes=1 << 20)
    with TestClient(app) as client:
        yield client


def _expected(model: FTRL, text: bytes) -> list[float]:
    b = parse_text(text, BITS, labels=False)
    return model.predict_rows(b.indptr, b.indices, b.values).tolist()


def test_predict_text_json_and_binary_agree_with_the_model(served: TestClient) -> None:
    model = _model(1)
    text = b"3:0.5 7:1 user=1\n1 5:2\n"
    answer = served.post("/v1/predict", content=text, headers=TEXT).json()
    assert answer["model_version"] == 1
    assert answer["probabilities"] == pytest.approx(_expected(model, text), abs=1e-12)
    rows = {"rows": [{"features": {"3": 0.5, "7": 1, "user=1": 1}}, {"features": {"5": 2}}]}
    assert served.post("/v1/predict", json=rows).json()["probabilities"] == answer[
        "probabilities"]
    body = rowwire.encode_rows([0, 3, 4], [3, 7, parse_text(b"user=1", BITS, labels=False)
                                           .indices[0], 5], [0.5, 1, 1, 2])
    resp = served.post("/v1/predict", content=body,
                       headers={"Content-Type": "application/x-ftrl-ps"})
    probs, version = rowwire.decode_probs(resp.content)
    assert probs == pytest.approx(answer["probabilities"], abs=1e-12) and version == 1


def test_bad_rows_answer_400_naming_line_and_field(served: TestClient) -> None:
    resp = served.post("/v1/predict", content=b"3:1\n5:1\n7:oops\n", headers=TEXT)
    assert_error(resp, 400, "ParseError", "body:3: feature value is not a decimal number: '7:oops'")
    resp = served.post("/v1/predict", json={"rows": [{"features": {"a": 1}},
                                                     {"features": {"b": "x"}}]})
    assert_error(resp, 400, "DataError", "rows[1].features['b']")
    assert_error(served.post("/v1/predict", content=b"1 3:1\n", headers={
        "Content-Type": "text/csv"}), 400, "ProtocolError", "unsupported Content-Type")
    assert_error(served.post("/v1/predict", content=b"3:1\n" * 501, headers=TEXT), 413,
                 "PayloadTooLargeError", "501 rows exceed the limit of 500")
    assert_error(served.post("/v1/predict", content=b"3:1\n" * 300_000, headers=TEXT), 413,
                 "PayloadTooLargeError", "exceed")
    assert served.get("/v1/status").json()["source"]["healthy"] is True


def test_health_ready_and_no_learn_route_without_learning(served: TestClient) -> None:
    assert served.get("/health").json() == {"status": "ok"}
    assert served.get("/ready").json() == {"ready": True, "model_version": 1,
                                           "source_healthy": True}
    assert served.post("/v1/learn", content=b"1 3:1\n", headers=TEXT).status_code == 404


def test_atomic_replace_is_served_and_a_bad_file_keeps_the_old_model(
        served: TestClient, model_file: Path) -> None:
    text = b"3:1 7:1\n5:2\n"
    first = served.post("/v1/predict", content=text, headers=TEXT).json()
    broken = model_file.with_name("broken.tmp")
    broken.write_bytes(model_file.read_bytes()[:40])
    os.replace(broken, model_file)
    wait_until(lambda: served.get("/v1/status").json()["source"]["reload_error"] is not None)
    status = served.get("/v1/status").json()
    assert "still serving version 1" in status["source"]["reload_error"]
    assert status["source"]["healthy"] is False and status["model"]["version"] == 1
    # still ready: the last model is served (docs/deployment.md, "Readiness")
    ready = served.get("/ready")
    assert ready.status_code == 200 and ready.json()["source_healthy"] is False
    assert served.post("/v1/predict", content=text, headers=TEXT).json() == first
    save_model(model_file, _model(2))  # written to a temporary file, then renamed
    wait_until(lambda: served.get("/v1/status").json()["model"]["version"] == 2)
    answer = served.post("/v1/predict", content=text, headers=TEXT).json()
    assert answer["probabilities"] == pytest.approx(_expected(_model(2), text), abs=1e-12)
    assert answer["probabilities"] != first["probabilities"]
    assert served.get("/v1/status").json()["source"]["healthy"] is True


def test_predict_token(model_file: Path) -> None:
    service = PredictionService(ServiceConfig(model=str(model_file)))
    with TestClient(create_serve_app(service, predict_token="p-tok")) as client:
        assert_error(client.post("/v1/predict", content=b"3:1\n", headers=TEXT), 401,
                     "AuthError")
        ok = client.post("/v1/predict", content=b"3:1\n",
                         headers={**TEXT, "Authorization": "Bearer p-tok"})
        assert ok.status_code == 200
        twice = [*TEXT.items(), ("authorization", "Bearer p-tok"),
                 ("authorization", "Bearer p-tok")]
        assert_error(client.post("/v1/predict", content=b"3:1\n", headers=twice), 401,
                     "AuthError", "2 Authorization headers")
        # the body is not looked at before the token: a JSON body that took its depth
        # check seconds (an unclosed string of escaped quotes) is refused at once
        deep = b"[" * 40 + b'"' + b'\\"' * 100_000
        assert_error(client.post("/v1/predict", content=deep,
                                 headers={"Content-Type": "application/json"}), 401, "AuthError")
        assert_error(client.get("/v1/status"), 401, "AuthError")
        assert client.get("/v1/status", headers={"Authorization": "Bearer p-tok"}).json()


def test_learn_from_cluster_reflects_in_predictions_and_shutdown_pushes() -> None:
    with real_server(["--bits", str(BITS), "--num-workers", "1", "--staleness", "inf",
                      "--token", "tok", "--group-size", "64"]) as srv:
        cfg = ServiceConfig(server=[srv.url], token="tok", learn=True, refresh=0.05,
                            push_interval=0.1, worker=WorkerConfig(batch_size=50))
        service = PredictionService(cfg)
        app = create_serve_app(service, token="tok")
        with TestClient(app) as client:
            before = client.post("/v1/predict", content=b"3:1 7:1\n", headers=TEXT).json()
            assert before["probabilities"] == [0.5]
            assert_error(client.post("/v1/learn", content=b"1 3:1\n", headers=TEXT), 401,
                         "AuthError")
            auth = {**TEXT, "Authorization": "Bearer tok"}
            bad = client.post("/v1/learn", content=b"1 3:1 7:1\n1 3:z\n", headers=auth)
            assert_error(bad, 400, "ParseError", "body:2:")
            assert service.learner is not None and service.learner.status()["requests"] == 0
            # no rows: nothing to learn, and the learner goes on (it used to die here)
            for empty in ({"content": b"", "headers": auth},
                          {"json": {"rows": []}, "headers": {"Authorization": "Bearer tok"}}):
                answer = client.post("/v1/learn", **empty)
                assert answer.status_code == 200 and answer.json()["accepted"] == 0
            answer = client.post("/v1/learn", content=b"1 3:1 7:1\n" * 200, headers=auth)
            assert answer.status_code == 200 and answer.json()["accepted"] == 200
            wait_until(lambda: client.post("/v1/predict", content=b"3:1 7:1\n", headers=TEXT)
                       .json()["probabilities"][0] > 0.6)
            # with a token, the status (and docs) need it too: only the probes are open
            assert_error(client.get("/v1/status"), 401, "AuthError")
            assert_error(client.get("/openapi.json"), 401, "AuthError")
            assert client.get("/ready").status_code == 200
            status = client.get("/v1/status", headers={"Authorization": "Bearer tok"}).json()
            assert status["learner"]["rows_trained"] == 200
            assert status["learner"]["freshness_samples"] >= 1
            assert status["source"]["last_refresh_keys"] < 64  # changed groups only
            # rows learned right before shutdown are pushed on the way out
            service.learner.push_interval = 3600.0
            service.learner.push_step = 1 << 30
            assert client.post("/v1/learn", content=b"0 11:1\n" * 10,
                               headers=auth).status_code == 200
            assert _pulled_n(srv.url, 11) == 0.0
        assert _pulled_n(srv.url, 11) > 0.0


def _pulled_n(url: str, key: int) -> float:
    import httpx

    answer = httpx.post(f"{url}/v1/pull", json={"keys": [key]}, trust_env=False,
                        headers={"Authorization": "Bearer tok"})  # reads need the token
    return float(answer.json()["n"][0])


def test_learner_survives_an_unreachable_cluster() -> None:
    from ftrl_ps.errors import TransportError
    from ftrl_ps.ps import stream

    class Flaky:
        def __init__(self) -> None:
            self.fail, self.pushed = 1, 0

        def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            if self.fail:
                self.fail -= 1
                raise TransportError("connection refused")
            return np.zeros(keys.size, np.float32), np.zeros(keys.size, np.float32)

        def push(self, keys: np.ndarray, dn: np.ndarray, dz: np.ndarray, **progress) -> None:
            self.pushed += 1

        def clock(self, stats: object = None) -> None:
            return None

    old, stream.FAILURE_BACKOFF = stream.FAILURE_BACKOFF, 0.01
    try:
        client = Flaky()
        learner = stream.StreamLearner(client, BITS, FTRLParams(), WorkerConfig(batch_size=10),
                                       push_interval=0.05)
        learner.start()
        learner.submit(parse_text(b"1 3:1\n" * 10, BITS, labels=True))
        wait_until(lambda: learner.status()["failed_rounds"] == 1)
        learner.submit(parse_text(b"0 4:1\n" * 10, BITS, labels=True))
        learner.stop()
        status = learner.status()
        assert status["rows_dropped"] == 10 and status["rows_trained"] == 10
        assert "connection refused" in status["last_failure"] and status["error"] is None
        assert client.pushed >= 1
    finally:
        stream.FAILURE_BACKOFF = old


def test_serve_exposes_prometheus_metrics_guarded_by_its_token(model_file: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    service = PredictionService(ServiceConfig(model=str(model_file)))
    with TestClient(create_serve_app(service, predict_token="p-tok")) as client:
        assert client.get("/metrics").status_code == 401
        auth = {"Authorization": "Bearer p-tok"}
        ok = client.post("/v1/predict", content=b"3:1\n", headers={**auth,
                                                                    "Content-Type": "text/plain"})
        assert ok.status_code == 200, ok.text
        text = client.get("/metrics", headers=auth).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert any(n.startswith("ftrl_ps_") for n in families)
    build = [s for s in families["ftrl_ps_build_info"].samples]
    assert build and build[0].labels["component"] == "serve"
    requests = [s for f in families.values() for s in f.samples
                if s.name == "ftrl_ps_http_requests_total"
                and s.labels.get("route") == "/v1/predict"]
    assert requests and requests[0].value >= 1


def test_too_many_json_objects_for_the_row_limit_are_refused_unparsed(model_file: Path) -> None:
    service = PredictionService(ServiceConfig(model=str(model_file), max_rows=10))
    with TestClient(create_serve_app(service)) as client:
        rows = [{"features": {"3": 1}}] * 10
        ok = client.post("/v1/predict", json={"rows": rows})
        assert ok.status_code == 200 and len(ok.json()["probabilities"]) == 10
        # 5.6 million '{}' fit in 16 MiB: json.loads alone took ~600 MB for them
        assert_error(client.post("/v1/predict", json={"rows": [{}] * 30}), 413,
                     "PayloadTooLargeError", "refused before parsing")
        assert_error(client.post("/v1/predict", json={"rows": rows * 2}), 413,
                     "PayloadTooLargeError")


def test_a_cluster_source_serves_and_learns_with_the_servers_hyper_parameters(
        synth_small: Path) -> None:
    """The servers own the model: serve builds the weights from n/z with their
    alpha/beta/l1/l2 (it used its own defaults: probabilities of 1e-13 where the
    exported model said 0.19), its learner trains with them, and a flag that
    differs is a ConfigError, as for a worker."""
    from ftrl_ps.core.modelio import load_model
    from ftrl_ps.errors import ConfigError
    from ftrl_ps.ps.export import ExportOptions, run_export
    from ftrl_ps.ps.worker_main import WorkerOptions, run_worker

    train, test = synth_small / "train.svm", synth_small / "test.svm"
    rows = test.read_bytes().splitlines(keepends=True)[:500]
    with real_server(["--bits", "18", "--num-workers", "1", "--staleness", "inf",
                      "--alpha", "0.005", "--l1", "0"]) as srv:
        run_worker(WorkerOptions(server=srv.url, input=str(train), num_workers=1,
                                 worker_index=0, quiet=True))
        run_export(ExportOptions(server=srv.url, model=str(synth_small / "x.ftrl"),
                                 quiet=True))
        exported = load_model(synth_small / "x.ftrl").to_ftrl()
        batch = parse_text(b"".join(rows), 18, labels=True)
        expected = exported.predict_rows(batch.indptr, batch.indices, batch.values)
        service = PredictionService(ServiceConfig(server=[srv.url], learn=True))
        try:
            assert service.cluster_source is not None and service.learner is not None
            assert service.cluster_source.params == exported.params
            assert service.learner.worker.params == exported.params
            model = service.served.current()
            got = service.served.predict(model, batch)
            assert np.max(np.abs(got - expected)) <= 1e-6
        finally:
            service.close()
        same = PredictionService(ServiceConfig(server=[srv.url], given={"alpha": 0.005}))
        same.close()
        with pytest.raises(ConfigError, match=r"--alpha 0.5 \(the servers have 0.005\)"):
            PredictionService(ServiceConfig(server=[srv.url], given={"alpha": 0.5}))


def test_rows_learned_online_count_in_the_shards_status_metrics_and_export(
        tmp_path: Path) -> None:
    """serve --learn pushes anonymously, outside the SSP clock: the shards said
    '0 rows trained' and INCOMPLETE RUN for a model that held every learned row.
    Now the learner reports its totals to shard 0 after each push."""
    import httpx

    from tests.conftest import run_cli

    with real_server(["--bits", str(BITS), "--num-workers", "1", "--staleness", "inf",
                      "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-interval",
                      "0.2"]) as srv:
        cfg = ServiceConfig(server=[srv.url], learn=True, refresh=0.05, push_interval=0.1,
                            worker=WorkerConfig(batch_size=50))
        service = PredictionService(cfg)
        with TestClient(create_serve_app(service)) as client:
            answer = client.post("/v1/learn", content=b"1 3:1 7:1\n0 5:1\n" * 100,
                                 headers=TEXT)
            assert answer.json()["accepted"] == 200

            def online() -> dict[str, dict[str, float]]:
                clock = httpx.get(f"{srv.url}/v1/status", trust_env=False).json()["clock"]
                return dict(clock["online"])

            wait_until(lambda: sum(o["rows"] for o in online().values()) == 200)
        totals = online()
        assert len(totals) == 1 and next(iter(totals.values()))["loss_sum"] > 0
        status = run_cli("status", "--server", srv.url)
        assert "200 rows learned online" in status.stdout, status.stdout
        from ftrl_ps.ps.overview import Overview

        clock = httpx.get(f"{srv.url}/v1/status", trust_env=False).json()["clock"]
        assert "200 rows" in Overview.from_clock(clock).line()  # status --watch, dashboard
        assert "online 200 rows" in Overview.from_clock(clock).line()
        metrics = httpx.get(f"{srv.url}/metrics", trust_env=False).text
        assert "ftrl_ps_rows_trained_total 200.0" in metrics
        # a late report with lower totals lowers nothing
        learner = next(iter(totals))
        httpx.post(f"{srv.url}/v1/workers/online", trust_env=False,
                   json={"learner": learner, "rows": 50, "loss_sum": 1.0})
        assert online() == totals
        out = run_cli("export", "--server", srv.url, "--model", str(tmp_path / "m.ftrl"),
                      "--metrics-json", str(tmp_path / "m.json"))
        assert out.returncode == 0, out.stderr
        assert "200 rows trained" in out.stdout and "INCOMPLETE" not in out.stderr
        assert "an online-learning cluster" in out.stderr
        assert httpx.post(f"{srv.url}/v1/workers/online", trust_env=False,
                          json={"learner": "x", "rows": -1, "loss_sum": 0}).status_code == 400


def test_a_large_learn_request_is_trained_in_rounds_pushing_every_push_step() -> None:
    """One 400-row request used to be one round with one pull and one push."""
    from ftrl_ps.ps import stream

    class Counting:
        pulls = pushes = 0

        def pull(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            self.pulls += 1
            return np.zeros(keys.size, np.float32), np.zeros(keys.size, np.float32)

        def push(self, keys: np.ndarray, dn: np.ndarray, dz: np.ndarray, **progress) -> None:
            self.pushes += 1

        def clock(self, stats: object = None) -> None:
            return None

    client = Counting()
    learner = stream.StreamLearner(client, BITS, FTRLParams(),
                                   WorkerConfig(batch_size=10, fetch_step=2, push_step=4),
                                   push_interval=60)
    learner.start()
    learner.submit(parse_text(b"1 3:1\n0 4:1\n" * 200, BITS, labels=True))  # 40 mini-batches
    learner.stop()
    assert client.pulls == 20 and client.pushes == 10, (client.pulls, client.pushes)
    status = learner.status()
    assert (status["rows_trained"], status["rows_pushed"], status["rows_dropped"]) == (400, 400, 0)


def test_the_learner_queue_bound_includes_the_request() -> None:
    from ftrl_ps.errors import PayloadTooLargeError, UnavailableError
    from ftrl_ps.ps import stream

    learner = stream.StreamLearner(object(), BITS, FTRLParams(), WorkerConfig(batch_size=10),
                                   max_queue_rows=1000, submit_timeout=0)
    with pytest.raises(PayloadTooLargeError, match="5000 rows are more than the learner queues"):
        learner.submit(parse_text(b"1 3:1\n" * 5000, BITS, labels=True))
    learner.submit(parse_text(b"1 3:1\n" * 900, BITS, labels=True))  # not started: stays
    with pytest.raises(UnavailableError, match="the learner is behind: 900 rows queued"):
        learner.submit(parse_text(b"1 3:1\n" * 900, BITS, labels=True))
