"""Restarts around a worker's end: finished workers' pushes, and restarted workers.

A worker that has finished and exited can no longer replay its push journal.
Before it finishes, every shard therefore writes a checkpoint covering its
pushes and shard 0 one saying "finished". Real processes: two shards with a
checkpoint interval of an hour (so only those checkpoints exist), workers run
to the end, then kill -9 of the shards and a restart on the same ports: the
state, the stream records and the registry must be what they were.
Also: a restarted worker whose journal says its whole share was pushed
re-sends the pushes a restarted shard lost, then makes them durable; and a
worker restarted with the same ``--identity`` (a container's hostname) takes
back its auto-assigned index at once instead of waiting ~30 s for the old one
to be declared dead; and ``finish()`` replays to a shard that restarted
empty after the last push before it asks again (docs/durability.md, sections
1 and 4).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest

from ftrl_ps.cluster.spawn import ServerProcess, spawn_server, spawn_servers
from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.completion import RunProgress
from tests._servers import shard_options
from tests.conftest import REPO, run_cli

ROWS = 12_000
BITS = 16
TOKEN = "durable-token"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "FTRL_PS_TOKEN": TOKEN}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data")
    res = run_cli("gen", str(out), "--rows", str(ROWS), "--test-rows", "100", "--seed", "5",
                  "--bits", str(BITS), "--quiet")
    assert res.returncode == 0, res.stderr
    return out / "train.svm"


@contextlib.contextmanager
def _shards(ckpt: Path, workers: int) -> Iterator[list[ServerProcess]]:
    """Two shards; whatever the list holds at the end (tests put restarted ones in) is stopped."""
    base = shard_options(["--bits", str(BITS), "--num-shards", "2", "--checkpoint-dir",
                          str(ckpt), "--checkpoint-interval", "3600", "--num-workers",
                          str(workers), "--token", TOKEN])
    servers = spawn_servers([replace(base, shard_index=i) for i in range(2)])
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


def _kill_and_restart(server: ServerProcess) -> ServerProcess:
    """kill -9 the shard, then start it again on the same port and checkpoint dir."""
    os.kill(server.pid, signal.SIGKILL)
    server.handle.wait(timeout=30)
    server.stop()
    port = urlparse(server.url).port
    return spawn_server(replace(server.options, port=port))


def _worker(urls: list[str], data: Path, index: int | str, workers: int, state: Path,
            out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ftrl_ps", "worker", "--server", ",".join(urls), "--input",
         str(data), "--worker-index", str(index), "--num-workers", str(workers),
         "--state-dir", str(state), "--metrics-json", str(out), "--batch-size", "250", "-q",
         *extra],
        cwd=REPO, env=ENV, stderr=subprocess.PIPE, text=True)


def _snapshot(urls: list[str]) -> tuple[Any, list[Any], dict[str, Any]]:
    """The whole model (keys, n, z), each shard's stream records, shard 0's clock."""
    with PSClient(urls, token=TOKEN) as client:
        state = client.dump_state()
        records = [client.streams(i) for i in range(len(urls))]
        clock = client.status(0)["clock"]
    return state, records, clock


def _same_state(a: Any, b: Any) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def _rows_applied(records: list[list[dict[str, Any]]]) -> int:
    """Per worker index the furthest position a shard applied, summed."""
    furthest: dict[int, int] = {}
    for shard in records:
        for rec in shard:
            furthest[rec["worker"]] = max(furthest.get(rec["worker"], 0), rec["position"])
    return sum(furthest.values())


@pytest.mark.timeout(300)
def test_finished_workers_pushes_survive_kill_9_of_every_shard(data: Path,
                                                               tmp_path: Path) -> None:
    with _shards(tmp_path / "ckpt", 2) as servers:
        urls = [s.url for s in servers]
        procs = [_worker(urls, data, i, 2, tmp_path / "state", tmp_path / f"w{i}.json")
                 for i in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-3000:]
        reports = [json.loads((tmp_path / f"w{i}.json").read_text()) for i in range(2)]
        before = _snapshot(urls)
        assert _rows_applied(before[1]) == ROWS
        assert RunProgress.from_snapshot(before[2]).complete

        # the workers are gone; now both shards die and restart from their checkpoints
        servers[:] = [_kill_and_restart(s) for s in servers]
        after = _snapshot(urls)
        for s in servers:
            assert "restored checkpoint" in s.stderr_text(), s.stderr_text()
        _same_state(before[0], after[0])  # the same model: nothing lost, nothing doubled
        assert _rows_applied(after[1]) == ROWS
        for shard in range(2):  # per worker: pushes and digest sent == applied
            for rec in after[1][shard]:
                pushes, digest = reports[rec["worker"]]["stream_totals"][shard]
                assert (rec["pushes"], rec["digest"]) == (pushes, digest), (shard, rec)
                assert rec["durable_seq"] == rec["last_seq"]
        progress = RunProgress.from_snapshot(after[2])
        assert progress.complete and progress.finished == (0, 1), progress.describe()


@pytest.mark.timeout(300)
def test_restarted_worker_that_pushed_its_share_replays_to_a_shard_that_lost_it(
        data: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with _shards(tmp_path / "ckpt", 1) as servers:
        urls = [s.url for s in servers]
        # a first incarnation pushes "its whole share" and dies before finishing
        rng = np.random.default_rng(0)
        with PSClient(urls, token=TOKEN, state_dir=state) as first:
            first.register(0, 1)
            half = first.layout.num_keys // 2
            for step in range(1, 4):
                keys = np.unique(np.concatenate([rng.integers(0, half, 50),
                                                 rng.integers(half, 2 * half, 50)]))
                first.push(keys.astype(np.uint32), rng.random(keys.size),
                           rng.standard_normal(keys.size), position=ROWS * step // 3,
                           loss_sum=float(step))
            sent = first.stream_totals()
        before = _snapshot(urls)
        servers[1] = _kill_and_restart(servers[1])  # no checkpoint yet: it lost them all
        with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False) as h:
            assert h.get(urls[1] + "/v1/streams").json() == []

        proc = _worker(urls, data, 0, 1, state, tmp_path / "w.json", "--supersede")
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        report = json.loads((tmp_path / "w.json").read_text())
        assert report["resumed_rows"] == ROWS and report["pushes"] == 0, report
        assert [tuple(t) for t in report["stream_totals"]] == [
            (c, f"{d:016x}") for c, d in sent]

        servers[1] = _kill_and_restart(servers[1])  # and now it is durable
        after = _snapshot(urls)
        _same_state(before[0], after[0])
        rec = after[1][1][0]
        assert (rec["pushes"], rec["digest"]) == (sent[1][0], f"{sent[1][1]:016x}"), rec
        assert RunProgress.from_snapshot(after[2]).complete


@pytest.mark.timeout(300)
def test_restarted_worker_with_its_identity_takes_back_its_index_at_once(
        data: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    slow = ("--straggle-prob", "1", "--straggle-delay", "0.4")  # ~12 ticks of 0.4 s
    with _shards(tmp_path / "ckpt", 2) as servers:
        urls = [s.url for s in servers]
        a = _worker(urls, data, "auto", 2, state, tmp_path / "a.json", "--identity", "slot-a",
                    *slow)
        b = _worker(urls, data, "auto", 2, state, tmp_path / "b.json", "--identity", "slot-b")
        with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False) as h:
            deadline = time.monotonic() + 120
            victim = None
            while victim is None:
                assert time.monotonic() < deadline and a.poll() is None, "a never got going"
                for w in h.get(urls[0] + "/v1/status").json()["clock"]["workers"]:
                    if w["identity"] == "slot-a" and w["state"] == "live" and w["clock"] >= 2:
                        victim = w
                time.sleep(0.05)
            os.kill(a.pid, signal.SIGKILL)
            a.wait(timeout=30)
            restarted = time.monotonic()
            a2 = _worker(urls, data, "auto", 2, state, tmp_path / "a.json", "--identity",
                         "slot-a")
            _, err = a2.communicate(timeout=240)
            took = time.monotonic() - restarted
            assert a2.returncode == 0, err[-3000:]
            assert "no free worker index" not in err
            _, err_b = b.communicate(timeout=240)
            assert b.returncode == 0, err_b[-3000:]
            workers = h.get(urls[0] + "/v1/status").json()["clock"]["workers"]
        report = json.loads((tmp_path / "a.json").read_text())
        assert report["worker_index"] == victim["index"] and report["resumed_rows"] > 0, report
        assert took < 25, took  # not the 30 s worker timeout, nor a wait for it
        old = next(w for w in workers if w["worker_id"] == victim["worker_id"])
        assert old["state"] == "dead"
        assert sorted((w["index"], w["identity"]) for w in workers if w["state"] == "finished") \
            == sorted([(victim["index"], "slot-a"), (1 - victim["index"], "slot-b")])
        _, records, clock = _snapshot(urls)
        assert _rows_applied(records) == ROWS and RunProgress.from_snapshot(clock).complete
        sent = {json.loads((tmp_path / f).read_text())["worker_index"]:
                json.loads((tmp_path / f).read_text())["stream_totals"] for f in ("a.json",
                                                                                   "b.json")}
        for shard in range(2):
            for rec in records[shard]:
                assert [rec["pushes"], rec["digest"]] == sent[rec["worker"]][shard], rec


@pytest.mark.timeout(300)
@pytest.mark.parametrize("shard", [1, 0])
def test_finish_replays_to_a_shard_that_lost_pushes(tmp_path: Path, shard: int) -> None:
    """A shard restarted without some of the worker's pushes before it finishes.

    Shard 1 restarted empty: finish() asks it to make the pushes durable, it
    answers that it lacks them, the client replays its journal there and asks
    again. Shard 0 restored a checkpoint that knows the registration but not
    the last push: its finish answer (which makes the pushes there durable too,
    no separate ``/durable``) first checks that it applied every push up to the
    last seq the worker sent it, answers a gap, the client replays that push
    and asks again. Either way a later kill -9 of that shard loses nothing."""
    with _shards(tmp_path / "ckpt", 1) as servers:
        urls = [s.url for s in servers]
        rng = np.random.default_rng(1)
        with PSClient(urls, token=TOKEN, state_dir=tmp_path / "state") as client:
            client.register(0, 1)
            half = client.layout.num_keys // 2
            for step in range(1, 4):
                keys = np.unique(rng.integers(0, 2 * half, 120)).astype(np.uint32)
                client.push(keys, rng.random(keys.size), rng.standard_normal(keys.size),
                            position=step * 100)
                if shard == 0 and step == 2:
                    client.make_durable()  # a checkpoint with the registration, pushes 1-2
            before = _snapshot(urls)
            servers[shard] = _kill_and_restart(servers[shard])
            lost = [r["last_seq"] for r in client.streams(shard)]
            assert lost == ([2] if shard == 0 else [])  # shard 1 restarted empty
            synced: list[int] = []
            sync = client._sync_shard
            client._sync_shard = lambda i, record=None: (  # type: ignore[method-assign]
                synced.append(i), sync(i, record))[1]
            client.finish()
            assert synced == [shard]  # the replay there, not a new registration
            sent = client.stream_totals()
        servers[shard] = _kill_and_restart(servers[shard])
        after = _snapshot(urls)
        _same_state(before[0], after[0])
        rec = after[1][shard][0]
        assert (rec["pushes"], rec["digest"]) == (sent[shard][0], f"{sent[shard][1]:016x}"), rec
        assert RunProgress.from_snapshot(after[2]).complete
