"""The client through shard restarts, in process: a shard restored from its checkpoint
gets the pushes it lacks replayed; one that lost them beyond the journal is a clear
error; a registry that forgot the worker's epoch gets a new registration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ftrl_ps.errors import TransportError, UpdatesLostError
from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.clock import SSPClock
from ftrl_ps.ps.shard_settings import ServerSettings
from ftrl_ps.server.app import create_app
from tests._servers import Switchable

KEYS = np.array([5, 70, 3000, 4096])  # shard 0: < 2048, shard 1: the rest


def shard(index: int, ckpt: Path | None) -> TestClient:
    settings = ServerSettings(bits=12, group_size=64, num_shards=2, shard_index=index,
                              checkpoint_dir=str(ckpt) if ckpt else None,
                              checkpoint_interval=3600)
    return TestClient(create_app(settings), base_url=f"http://s{index}").__enter__()


def restart(ps: PSClient, index: int, old: TestClient, ckpt: Path | None) -> TestClient:
    """kill the shard (no final checkpoint) and start a fresh one on the same dir."""
    old.app.state.ftrl.checkpointer = None  # type: ignore[attr-defined]
    old.__exit__(None, None, None)
    new = shard(index, ckpt)
    ps._net._http[index] = new  # the same URL, a new process
    return new


def pulled(clients: list[TestClient]) -> list[float]:
    return [clients[0].post("/v1/pull", json={"keys": [5, 70]}).json()["n"],
            clients[1].post("/v1/pull", json={"keys": [3000, 4096]}).json()["n"]]


@pytest.mark.parametrize("journal_file", [False, True])
def test_restored_shard_gets_the_missing_pushes_replayed(tmp_path: Path,
                                                        journal_file: bool) -> None:
    """With a journal file (--state-dir) the pushes replayed are read back from it."""
    clients = [shard(0, tmp_path), shard(1, tmp_path)]
    ps = PSClient(["http://s0", "http://s1"], http_clients=clients,
                  state_dir=str(tmp_path / "worker") if journal_file else None)
    ps.register(0, 1)
    for _ in range(3):
        ps.push(KEYS, np.ones(4), np.ones(4))
    for c in clients:
        c.app.state.ftrl.checkpointer.write()  # type: ignore[attr-defined]
    for _ in range(4):
        ps.push(KEYS, np.ones(4), np.ones(4))
    assert len(ps.stream.journal.entries) == 4  # seqs 4..7 are not durable on shard 1
    assert all((e.spilled_to is not None) == journal_file for e in ps.stream.journal.entries)
    clients[1] = restart(ps, 1, clients[1], tmp_path)
    assert clients[1].get("/v1/streams").json()[0]["last_seq"] == 3
    ps.push(KEYS, np.ones(4), np.ones(4))  # a gap: 4..7 replayed first, then 8
    assert pulled(clients) == [[8.0, 8.0], [8.0, 8.0]]
    rec = clients[1].get("/v1/streams").json()[0]
    assert (rec["pushes"], rec["digest"]) == (8, f"{ps.stream_totals()[1][1]:016x}")


def test_a_shard_that_lost_pushes_beyond_the_journal_is_an_error(tmp_path: Path) -> None:
    clients = [shard(0, None), shard(1, None)]  # no checkpoints: applied = durable
    ps = PSClient(["http://s0", "http://s1"], http_clients=clients)
    ps.register(0, 1)
    for _ in range(3):
        ps.push(KEYS, np.ones(4), np.ones(4))
    clients[1] = restart(ps, 1, clients[1], None)  # comes back empty
    with pytest.raises(UpdatesLostError, match="shard 1 applied this worker's pushes up to "
                                               "seq 0"):
        ps.push(KEYS, np.ones(4), np.ones(4))


def test_a_registry_that_forgot_the_epoch_gets_a_new_registration(tmp_path: Path) -> None:
    clients = [shard(0, tmp_path), shard(1, tmp_path)]
    ps = PSClient(["http://s0", "http://s1"], http_clients=clients)
    first = ps.register(0, 1)
    ps.push(KEYS, np.ones(4), np.ones(4))
    clients[0].app.state.ftrl.checkpointer.write()  # type: ignore[attr-defined]
    # a checkpoint from before the registration: shard 0 restarts without it
    for f in tmp_path.glob("shard-0-*.ckpt"):
        f.unlink()
    clients[0] = restart(ps, 0, clients[0], tmp_path)
    ps.push(KEYS, np.ones(4), np.ones(4))  # 404 from shard 0 -> register again, replay
    assert ps.worker_id is not None and ps.worker_id > first
    assert ps.clock() == 1
    # shard 0 came back empty: both pushes were replayed from the journal (neither was
    # durable there yet) under the new epoch
    assert pulled(clients) == [[2.0, 2.0], [2.0, 2.0]]


def test_epochs_grow_across_registry_restarts() -> None:
    old = SSPClock(None)
    a = old.register(0, 1)
    new = SSPClock(None)  # restarted without its state
    assert new.register(0, 1) > a


def test_shard_0_applies_a_push_only_after_every_other_shard() -> None:
    """Shard 0 is the commit point: a push it holds is held by every shard it touches
    (shard 0 hands a dead worker's input on after its last push there), so a push
    that cannot reach another shard is not applied on shard 0 either; it is sent
    again with the next one. A push without keys of shard 0 still reaches it."""
    clients = [shard(0, None), shard(1, None)]
    one = Switchable(clients[1])
    ps = PSClient(["http://s0", "http://s1"], http_clients=[clients[0], one],
                  retry_seconds=0, commit_on_shard0=True)
    ps.register(0, 1)
    ps.push(KEYS, np.ones(4), np.ones(4), position=10)
    one.down = True
    with pytest.raises(TransportError):
        ps.push(KEYS, np.ones(4), np.ones(4), position=20)
    rec0 = clients[0].get("/v1/streams").json()[0]
    assert (rec0["last_seq"], rec0["position"]) == (1, 10)
    assert pulled(clients) == [[1.0, 1.0], [1.0, 1.0]]
    one.down = False
    ps.push(np.array([3000]), np.ones(1), np.ones(1), position=30)  # shard 1's key only
    rec0 = clients[0].get("/v1/streams").json()[0]
    assert (rec0["last_seq"], rec0["position"]) == (3, 30)  # seq 2 replayed, 3 (empty) sent
    assert pulled(clients) == [[2.0, 2.0], [3.0, 2.0]]
    totals = ps.stream_totals()
    for i, c in enumerate(clients):
        rec = c.get("/v1/streams").json()[0]
        assert (rec["pushes"], rec["digest"]) == (totals[i][0], f"{totals[i][1]:016x}")


def test_a_worker_restarted_without_its_journal_resumes_where_the_shards_say() -> None:
    """A process of an index that pushed before, without the journal of those pushes
    (no --state-dir): it continues after the rows the shards' records say, when
    they agree on the last push; else it refuses (a part might be missing)."""
    clients = [shard(0, None), shard(1, None)]
    first = PSClient(["http://s0", "http://s1"], http_clients=clients)
    first.register(0, 1)
    for i in range(3):
        first.push(KEYS, np.ones(4), np.ones(4), position=100 * (i + 1))
    again = PSClient(["http://s0", "http://s1"], http_clients=clients)  # kill -9, restart
    again.register(0, 1, supersede=True)
    assert again.resume_point() == (0, 0.0)  # no journal here
    assert again.shards_position == 300  # it used to start again from row 0
    again.push(KEYS, np.ones(4), np.ones(4), position=400)  # numbered after the shards' seq
    assert pulled(clients) == [[4.0, 4.0], [4.0, 4.0]]
    again.push(KEYS[:2], np.ones(2), np.ones(2), position=500)  # shard 0's keys only
    third = PSClient(["http://s0", "http://s1"], http_clients=clients)
    with pytest.raises(UpdatesLostError, match=r"last seq per shard: \[5, 4\].*--state-dir"):
        third.register(0, 1, supersede=True)


def test_a_units_worker_restarted_without_its_journal_resumes_at_shard_0s_record() -> None:
    """With units handed out, shard 0 is the commit point: a process of an index
    without the journal of the earlier pushes resumes after the rows shard 0's
    record says (it resumed at row 0, and the work queue handed its units back from
    the progress last reported: rows trained twice, QA). A push the earlier
    process got to shard 1 but not to shard 0 is withdrawn there first."""
    clients = [shard(0, None), shard(1, None)]
    zero = Switchable(clients[0])
    first = PSClient(["http://s0", "http://s1"], http_clients=[zero, clients[1]],
                     retry_seconds=0, commit_on_shard0=True)
    first.register(0, 1)
    for i in range(3):
        first.push(KEYS, np.ones(4), np.ones(4), position=100 * (i + 1))
    zero.down = True
    with pytest.raises(TransportError):  # shard 1 applied it, shard 0 never did: killed
        first.push(KEYS, np.ones(4), np.ones(4), position=400)
    assert pulled(clients) == [[3.0, 3.0], [4.0, 4.0]]
    zero.down = False
    again = PSClient(["http://s0", "http://s1"], http_clients=clients, commit_on_shard0=True)
    again.register(0, 1, supersede=True)
    assert again.resume_point() == (0, 0.0)  # no journal here
    assert again.shards_position == 300  # shard 0's record: it said 0
    assert pulled(clients) == [[3.0, 3.0], [3.0, 3.0]]  # shard 1's fourth push withdrawn
    again.push(KEYS, np.ones(4), np.ones(4), position=400)  # the same rows, trained again
    assert pulled(clients) == [[4.0, 4.0], [4.0, 4.0]]
    records = [c.get("/v1/streams").json()[0] for c in clients]
    assert [(r["last_seq"], r["position"]) for r in records] == [(4, 400), (4, 400)]


def test_a_resumed_worker_reports_the_rows_it_trained_itself(synth_small: Path,
                                                             tmp_path: Path) -> None:
    """kill -9 mid-run, restarted with its --state-dir: the last line says the rows
    this process trained and, apart, those its predecessor pushed (it said
    '99,996 rows in 0.25 s' for 33,996 trained: 400k rows/s that never were)."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from tests._servers import real_server
    from tests.conftest import REPO

    with real_server(["--bits", "18", "--num-workers", "1"]) as srv:
        cmd = [sys.executable, "-m", "ftrl_ps", "worker", "--server", srv.url, "--input",
               str(synth_small / "train.svm"), "--worker-index", "0", "--num-workers", "1",
               "--batch-size", "250", "--state-dir", str(tmp_path / "st"), "--supersede",
               "--straggle-prob", "1", "--straggle-delay", "0.1"]
        first = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline and first.poll() is None
            workers = httpx.get(srv.url + "/v1/status", trust_env=False).json()["clock"]
            if sum(w["stats"].get("rows", 0) for w in workers["workers"]) >= 5000:
                break
            time.sleep(0.02)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        again = subprocess.run(cmd[:-4], cwd=REPO, capture_output=True, text=True,
                               timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert again.returncode == 0, again.stderr
    line = re.search(r"worker 0/1: ([\d,]+) rows in [\d.]+ s \(after ([\d,]+) rows an "
                     r"earlier process pushed\), progressive logloss [\d.]+ \(over the "
                     r"index's ([\d,]+) rows\)", again.stderr)  # (the loss is the index's)
    assert line, again.stderr
    here, before, over = (int(g.replace(",", "")) for g in line.groups())
    assert before >= 5000 and here + before == over == 20_000


@pytest.mark.parametrize("split", ["shares", "units"])
def test_a_worker_restarted_twice_without_a_journal_trains_every_row_once(
        synth_small: Path, split: str) -> None:
    """kill -9 of a worker without --state-dir, twice: each process resumes after the
    shards' record of the index, so every row is applied once. (Its pushes recorded
    the rows *this* process trained as the position: the second restart resumed too
    early and trained rows again, 62 pushes for 51 in the QA run. With units it
    resumed at row 0 and its units from the progress last reported: rows trained
    twice and the stream's position short of the rows, 176,000 of 200,000 in a QA
    run.)"""
    import os
    import re
    import signal
    import subprocess
    import sys

    import httpx

    from ftrl_ps.ps.overview import Overview
    from tests._servers import real_server
    from tests.conftest import REPO, wait_until

    with real_server(["--bits", "18", "--num-workers", "1"]) as srv:
        cmd = [sys.executable, "-m", "ftrl_ps", "worker", "--server", srv.url, "--input",
               str(synth_small / "train.svm"), "--worker-index", "0", "--num-workers", "1",
               "--batch-size", "250", "--supersede", "--straggle-prob", "1",
               "--straggle-delay", "0.1", "--split", split]  # no --state-dir; 1,000 rows a push

        def record() -> dict:
            recs = httpx.get(srv.url + "/v1/streams", trust_env=False).json()
            return recs[0] if recs else {"pushes": 0, "position": 0}

        def kill_after(pushes: int) -> None:
            proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.DEVNULL)
            try:
                wait_until(lambda: record()["pushes"] >= pushes or proc.poll() is not None,
                           timeout=60, what=f"{pushes} pushes")
                assert proc.poll() is None, "the worker ended before it was killed"
            finally:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()

        kill_after(5)
        kill_after(record()["pushes"] + 3)
        last = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
        final = record()
        shown = Overview.from_clock(httpx.get(srv.url + "/v1/status", trust_env=False)
                                    .json()["clock"]).rows  # status, dashboard, /metrics
    assert last.returncode == 0, last.stderr
    resumed = re.search(r"resuming after ([\d,]+) rows", last.stderr)
    assert resumed and int(resumed.group(1).replace(",", "")) >= 8000, last.stderr
    assert final["position"] == 20_000, final  # every row applied, none twice
    if split == "shares":  # as in a clean run: 20 pushes of 1,000 rows
        assert final["pushes"] == 20, final
    assert shown == 20_000  # was fewer: the killed processes' last pushes unreported
