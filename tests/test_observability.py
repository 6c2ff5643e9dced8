"""/metrics and /dashboard: in-process checks, and a real 2-worker run scraped while it trains."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from ftrl_ps.ps.overview import History, Overview
from ftrl_ps.ps.telemetry import Buckets
from ftrl_ps.server.metrics import instrument
from ftrl_ps.server.routes_dashboard import ASSETS
from tests._servers import TOKEN, in_process, real_server
from tests.conftest import REPO

LAYOUT = {"bits": 12, "group_size": 64, "num_shards": 1}


def families(text: str) -> dict[str, object]:
    """Parsed metric families by name (the parser raises on malformed text)."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams: dict[str, object], name: str, **labels: str) -> float:
    fam = fams[name]
    values = [s.value for s in fam.samples  # type: ignore[attr-defined]
              if s.name in (name, name + "_total") and all(
                  s.labels.get(k) == v for k, v in labels.items())]
    assert values, (name, labels)
    return float(sum(values))


# --- in-process -----------------------------------------------------------------------

def test_instrument_counts_requests_by_route_template_and_status() -> None:
    app = FastAPI()

    @app.get("/items/{item_id}")
    def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    instrument(app, component="test")
    with TestClient(app) as client:
        for i in range(3):
            assert client.get(f"/items/{i}").status_code == 200
        assert client.get("/items/x").status_code == 422
        assert client.get("/nowhere").status_code == 404
        fams = families(client.get("/metrics").text)
    assert sample(fams, "ftrl_ps_http_requests", route="/items/{item_id}", status="200") == 3
    assert sample(fams, "ftrl_ps_http_requests", route="/items/{item_id}", status="422") == 1
    assert sample(fams, "ftrl_ps_http_requests", route="unmatched", status="404") == 1
    hist = fams["ftrl_ps_http_request_duration_seconds"]
    counts = [s.value for s in hist.samples  # type: ignore[attr-defined]
              if s.name.endswith("_count") and s.labels["route"] == "/items/{item_id}"]
    assert counts == [4]
    assert sample(fams, "ftrl_ps_build_info", component="test") == 1
    assert sample(fams, "ftrl_ps_process_resident_memory_bytes") > 1e6


def test_shard_metrics_follow_pushes_pulls_duplicates_and_clock() -> None:
    with in_process(bits=12, group_size=64, num_workers=1, staleness=1) as c:
        wid = c.post("/v1/workers", json={"num_workers": 1, "layout": LAYOUT}).json()["worker_id"]
        c.post("/v1/streams/0", json={"epoch": wid})  # claim the epoch (docs/durability.md)
        body = {"keys": [3, 70], "delta_n": [1.0, 1.0], "delta_z": [0.5, -1.0],
                "worker": 0, "epoch": wid, "seq": 1, "prev_seq": 0, "position": 500}
        assert c.post("/v1/push", json=body).json()["applied"] is True
        assert c.post("/v1/push", json=body).json()["applied"] is False  # a retry
        c.post("/v1/pull", json={"keys": [3, 4, 5]})
        stats = {"rows": 500, "loss_sum": 200.0, "pushes": 1, "wait_seconds": 0.25,
                 "straggle_seconds": 1.5, "straggles": 3}
        assert c.post(f"/v1/workers/{wid}/clock", json={"stats": stats}).json()["ready"]
        fams = families(c.get("/metrics").text)
        assert c.get("/v1/dashboard").json()["workers"][0]["straggle_seconds"] == 1.5
    assert sample(fams, "ftrl_ps_pushes") == 1
    assert sample(fams, "ftrl_ps_duplicate_pushes") == 1
    assert sample(fams, "ftrl_ps_keys_pushed") == 2
    assert sample(fams, "ftrl_ps_keys_pulled") == 3
    assert sample(fams, "ftrl_ps_keys_with_state") == 2
    assert sample(fams, "ftrl_ps_rows_trained") == 500
    assert math.isclose(sample(fams, "ftrl_ps_progressive_logloss"), 0.4)
    assert sample(fams, "ftrl_ps_workers", state="live") == 1
    assert sample(fams, "ftrl_ps_clock_min") == sample(fams, "ftrl_ps_clock_max") == 1
    assert sample(fams, "ftrl_ps_ssp_staleness") == 1
    assert sample(fams, "ftrl_ps_worker_rows", worker="0") == 500
    assert sample(fams, "ftrl_ps_worker_ssp_wait_seconds", worker="0") == 0.25
    assert sample(fams, "ftrl_ps_worker_straggle_seconds", worker="0") == 1.5
    wait = fams["ftrl_ps_ssp_wait_seconds"]
    assert [s.value for s in wait.samples if s.name.endswith("_count")] == [1]  # type: ignore[attr-defined]
    assert len([n for n in fams if n.startswith("ftrl_ps_")]) >= 10


def test_gauge_hook_shows_up_and_a_broken_hook_does_not_break_the_scrape() -> None:
    with in_process(bits=10) as c:
        state = c.app.state.ftrl  # type: ignore[attr-defined]
        assert "ftrl_ps_checkpoint_age_seconds" not in families(c.get("/metrics").text)
        state.telemetry.gauge("checkpoint_age_seconds", "since the last checkpoint", lambda: 12.5)
        state.telemetry.gauge("broken_seconds", "raises", lambda: 1 / 0)
        fams = families(c.get("/metrics").text)
    assert sample(fams, "ftrl_ps_checkpoint_age_seconds") == 12.5
    assert "ftrl_ps_broken_seconds" not in fams


def test_metrics_and_dashboard_feed_need_the_token_the_page_does_not() -> None:
    with in_process(bits=10, token=TOKEN) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/v1/dashboard").status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert c.get("/metrics", headers=auth).status_code == 200
        feed = c.get("/v1/dashboard", headers=auth).json()
        assert feed["shards"][0]["up"] and feed["cluster"]["rows"] == 0
        for name in ASSETS:
            resp = c.get("/dashboard" if name == "index.html" else f"/dashboard/{name}")
            assert resp.status_code == 200, name
            assert "default-src 'none'" in resp.headers["content-security-policy"]
        assert c.get("/dashboard/secret.txt").status_code == 400
        page = c.get("/dashboard").text
    assert "http://" not in page and "https://" not in page  # nothing from elsewhere


def test_refused_requests_count_under_the_route_they_asked_for() -> None:
    """The token check answers 401 before the router: such requests used to count
    as route="unmatched", so an operator could not tell which route was probed."""
    with in_process(bits=10, token=TOKEN) as c:
        assert c.post("/v1/push", content=b"x").status_code == 401
        assert c.get("/v1/status").status_code == 401
        assert c.post("/v1/workers/7/leave").status_code == 401
        assert c.get("/v1/status", params={"a": "1"}).status_code == 401
        assert c.delete("/v1/status").status_code == 401  # the path's route, another method
        assert c.get("/nowhere").status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        fams = families(c.get("/metrics", headers=auth).text)
    for route, count in [("/v1/push", 1), ("/v1/status", 3),
                         ("/v1/workers/{worker_id}/leave", 1), ("unmatched", 1)]:
        assert sample(fams, "ftrl_ps_http_requests", route=route, status="401") == count, route


def test_buckets_and_history() -> None:
    b = Buckets((0.1, 1.0))
    for v in (0.05, 0.5, 0.5, 7.0):
        b.observe(v)
    assert b.snapshot() == ([(0.1, 1), (1.0, 3), (math.inf, 4)], 8.05, 4)
    h = History(maxlen=8)
    for t in range(20):
        h.sample(rows=100 * t, loss_sum=50.0 * t, now=1000.0 + t)
    pts = h.points()
    assert len(pts) <= 9 and pts[-1]["rows"] == 1900 and pts[0]["t"] == 1000.0
    assert math.isclose(h.rate(window=5), 100.0)
    assert all(p["logloss"] == 0.5 for p in pts[1:])


def test_overview_counts_restarts_and_uses_the_latest_registration() -> None:
    snap = {"staleness": None, "workers": [
        {"worker_id": 0, "index": 0, "state": "dead", "clock": 2, "stats": {"rows": 10}},
        {"worker_id": 1, "index": 1, "state": "live", "clock": 5, "stats": {"rows": 30}},
        {"worker_id": 2, "index": 0, "state": "live", "clock": 3, "stats": {"rows": 5}},
    ]}
    o = Overview.from_clock(snap)
    assert o.restarts == 1 and o.rows == 45 and o.states == {"live": 2}
    assert (o.min_clock, o.max_clock, o.gap) == (3, 5, 2)
    assert [w.worker_id for w in o.workers] == [2, 1]
    assert "restarts 1" in o.line(123.0) and "clock 3..5" in o.line()


def test_overview_counts_the_rows_a_worker_killed_9_pushed_but_never_reported() -> None:
    """QA: after kill -9 status, the dashboard and /metrics showed 98,000 of 100,000
    rows: the dead process's last pushes were never reported at a tick."""
    dead = {"worker_id": 0, "index": 0, "state": "dead", "clock": 2,
            "stats": {"rows": 1000, "loss_sum": 400.0}}  # it pushed 1,200 rows
    journal = {"worker_id": 2, "index": 0, "state": "live", "clock": 3,
               "stats": {"rows": 500, "loss_sum": 200.0, "resumed_rows": 1200,
                         "resumed_loss": 480.0}}
    o = Overview.from_clock({"workers": [dead, journal]})
    assert (o.rows, o.loss_sum, o.progressive_logloss) == (1700, 680.0, 0.4)  # was 1500
    no_journal = {**journal, "stats": {"rows": 500, "loss_sum": 250.0, "resumed_rows": 1200}}
    o = Overview.from_clock({"workers": [dead, no_journal]})
    assert (o.rows, o.loss_sum, o.progressive_logloss) == (1700, 650.0, 0.65 / 1.5)
    fresh = {**journal, "stats": {"rows": 500, "loss_sum": 200.0, "resumed_rows": 0}}
    assert Overview.from_clock({"workers": [dead, fresh]}).rows == 1500  # nothing pushed


# --- a real run: 1 server process, 2 worker processes ---------------------------------

@pytest.mark.slow
def test_metrics_move_during_and_after_a_two_worker_run(synth_small: Path) -> None:
    train = synth_small / "train.svm"
    with real_server(["--bits", "18", "--num-workers", "2", "--staleness", "0",
                      "--token", TOKEN]) as server:
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "ftrl_ps", "worker", "--server", server.url,
                 "--input", str(train), "--worker-index", str(i), "--num-workers", "2",
                 "--token", TOKEN, "--batch-size", "20", "--fetch-step", "1",
                 "--push-step", "1", "--bits", "18"],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for i in range(2)
        ]
        auth = {"Authorization": f"Bearer {TOKEN}"}
        during = None
        try:
            with httpx.Client(base_url=server.url, headers=auth, timeout=10) as http:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and any(w.poll() is None for w in workers):
                    fams = families(http.get("/metrics").text)
                    if "ftrl_ps_worker_rows" in fams and sample(fams, "ftrl_ps_rows_trained") > 0:
                        if any(w.poll() is None for w in workers):
                            during = fams
                        break
                    time.sleep(0.05)
                outs = [w.communicate(timeout=120) for w in workers]
                for w, (_out, err) in zip(workers, outs, strict=True):
                    assert w.returncode == 0, err
                after = families(http.get("/metrics").text)
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
    assert during is not None, "the run finished before /metrics showed progress"
    names = [n for n in after if n.startswith("ftrl_ps_")]
    assert len([n for n in during if n.startswith("ftrl_ps_")]) >= 10
    assert len(names) >= 10, names
    assert sample(after, "ftrl_ps_pushes") > sample(during, "ftrl_ps_pushes") > 0
    assert sample(after, "ftrl_ps_rows_trained") == 20000  # every row, once
    assert sample(during, "ftrl_ps_rows_trained") < 20000
    assert sample(after, "ftrl_ps_keys_pushed") > 0
    assert sample(after, "ftrl_ps_workers", state="finished") == 2
    assert sample(after, "ftrl_ps_http_requests", route="/v1/push", status="200") == \
        sample(after, "ftrl_ps_pushes")
    waits = [s.value for s in after["ftrl_ps_ssp_wait_seconds"].samples  # type: ignore[attr-defined]
             if s.name.endswith("_count")]
    assert waits and waits[0] > 0


def test_a_shard_with_checkpoints_exports_their_age(tmp_path: Path) -> None:
    """The gauge the Grafana panel and docs/deployment.md use (it was never registered:
    only tests registered it, by hand)."""
    from fastapi.testclient import TestClient

    from ftrl_ps.ps.shard_settings import ServerSettings
    from ftrl_ps.server.app import create_app

    app = create_app(ServerSettings(bits=10, group_size=64, checkpoint_dir=str(tmp_path),
                                    checkpoint_interval=3600))
    with TestClient(app) as c:
        time.sleep(0.2)
        before = sample(families(c.get("/metrics").text), "ftrl_ps_checkpoint_age_seconds")
        assert before >= 0.2  # no checkpoint yet: since the start
        app.state.ftrl.checkpointer.write()
        after = sample(families(c.get("/metrics").text), "ftrl_ps_checkpoint_age_seconds")
        assert 0 <= after < before
        assert c.get("/v1/status").json()["checkpoint"]["age_seconds"] >= 0


def test_work_units_show_in_metrics_and_status_once_a_plan_is_loaded() -> None:
    """Units handed out were only in ``status --json`` (QA): /metrics and the text
    status now count them by state, with the rows of the units done."""
    from ftrl_ps.cli.status_cmd import summary

    units = [{"id": i, "part": "/d/p.svm", "start": 10 * i, "end": 10 * i + 10,
              "gzip": False} for i in range(3)]
    with in_process(bits=12, group_size=64, num_workers=2) as c:
        assert "ftrl_ps_work_units" not in families(c.get("/metrics").text)  # no plan yet
        wid = c.post("/v1/workers", json={"num_workers": 2, "layout": LAYOUT}).json()["worker_id"]
        assert c.post("/v1/work/plan", json={"plan_id": "p1", "units": units}).status_code == 200
        got = c.post("/v1/work/next", json={"worker_index": 0, "done": [], "holding": []}).json()
        c.post("/v1/work/next", json={"worker_index": 0, "done": [[got["unit"]["id"], 7]],
                                      "holding": []})
        fams = families(c.get("/metrics").text)
        status = c.get("/v1/status").json()
    assert wid is not None
    assert [sample(fams, "ftrl_ps_work_units", state=s) for s in ("pending", "assigned", "done")
            ] == [1, 1, 1]
    assert sample(fams, "ftrl_ps_work_rows_done") == 7
    text = "\n".join(summary(0, status))
    assert "work units: 1 of 3 done (7 rows), 1 handed out (worker 0: 1), 1 pending" in text


def test_a_worker_idle_for_units_shows_it_in_status_dashboard_and_metrics() -> None:
    """QA: a worker waiting for units another one held showed as live with near-zero
    waits everywhere. A real worker (index 1) waits for the unit worker 0 holds: the
    stats of its idle ticks, and of its finish, carry ``idle_seconds`` into
    ``/v1/status`` (what ``status --json`` prints), the text status, the dashboard's
    feed and ``/metrics``; none of it as an SSP wait."""
    import threading

    from ftrl_ps.cli.status_cmd import summary
    from ftrl_ps.core.ftrl import FTRLParams
    from ftrl_ps.ps.client import PSClient
    from ftrl_ps.ps.handout import WorkClient, train_units
    from ftrl_ps.ps.worker import Worker, WorkerConfig

    def stats(status: dict, index: int) -> dict:
        return next(w["stats"] for w in status["clock"]["workers"] if w["index"] == index)

    units = [{"id": 0, "part": "/d/p.svm", "start": 0, "end": 10, "gzip": False}]
    with in_process(bits=12, group_size=64, num_workers=2, staleness=1000) as c:
        c.post("/v1/workers", json={"worker_index": 0, "num_workers": 2, "layout": LAYOUT})
        assert c.post("/v1/work/plan", json={"plan_id": "p1", "units": units}).status_code == 200
        assert c.post("/v1/work/next", json={"worker_index": 0, "done": [], "holding": []}
                      ).json()["unit"]["id"] == 0
        own = TestClient(c.app, base_url="http://shard")  # the worker's thread's
        with PSClient(["http://shard"], http_clients=[own]) as ps:
            ps.register(1, 2)
            worker = Worker(ps, 12, FTRLParams(), WorkerConfig())
            taken: list[int] = []  # units it trained: none (and no error)
            thread = threading.Thread(
                target=lambda: taken.append(train_units(worker, WorkClient(ps), 1)))
            thread.start()
            deadline = time.monotonic() + 10  # (worker 0 is declared dead after 30 s)
            while stats(c.get("/v1/status").json(), 1).get("idle_seconds", 0.0) < 0.3:
                assert time.monotonic() < deadline and thread.is_alive()
                time.sleep(0.02)
            c.post("/v1/work/next", json={"worker_index": 0, "done": [[0, 10]], "holding": []})
            thread.join(30)
            assert taken == [0]
            ps.finish(worker.stats())
        idle = worker.report.idle_seconds
        status = c.get("/v1/status").json()
        fams = families(c.get("/metrics").text)
        feed = {w["index"]: w for w in c.get("/v1/dashboard").json()["workers"]}
    assert idle >= 0.3 and worker.report.wait_seconds == 0.0
    assert stats(status, 1)["idle_seconds"] == idle and stats(status, 1)["wait_seconds"] == 0.0
    assert f"SSP waits 0.0 s, idle {idle:.1f} s for units others hold" in "\n".join(
        summary(0, status))
    assert feed[1]["idle_seconds"] == idle and feed[1]["wait_seconds"] == 0.0
    assert feed[0]["idle_seconds"] == 0.0  # no stats yet: 0, like its waits
    assert sample(fams, "ftrl_ps_worker_idle_seconds", worker="1") == idle
    assert sample(fams, "ftrl_ps_worker_idle_seconds", worker="0") == 0.0
    assert sample(fams, "ftrl_ps_worker_ssp_wait_seconds", worker="1") == 0.0
