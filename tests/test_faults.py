"""kill -9 of a shard or a worker in ``ftrl-ps train --workers 2 --servers 2``.

Each faulty run must finish, save the model, apply every push exactly once
(per worker and shard, the count and digest of the pushes the worker sent equal
those the shard applied), train every row exactly once (rows applied = rows)
and land within 0.002 test logloss of the fault-free run. The processes to kill
are found by their pids in ``/v1/status`` (``shard.pid``, ``clock.workers[].pid``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ftrl_ps.core.modelio import load_model
from tests.conftest import REPO, run_cli

ROWS = 120_000
TOKEN = "fault-token"


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    res = run_cli("gen", str(out), "--rows", str(ROWS), "--test-rows", "20000", "--seed", "3",
                  "--bits", "18", "--quiet")
    assert res.returncode == 0, res.stderr
    return out


def train(data: Path, out: Path, kill: str | None, split: str = "shares"
          ) -> tuple[dict[str, Any], str | None]:
    """Run the local cluster; with ``kill`` ("shard0", "shard1", "worker0", ...) kill
    that process with SIGKILL once half the rows are trained. ``split``: how the
    input is split between the workers (``--split``). Returns (metrics, what was
    killed)."""
    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(data / "train.svm"), "--test",
           str(data / "test.svm"), "--workers", "2", "--servers", "2", "--bits", "18",
           "--batch-size", "250", "--checkpoint-interval", "0.5", "--model", str(out / "m.ftrl"),
           "--metrics-json", str(out / "m.json"), "--token", TOKEN, "--split", split, "-q"]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("servers: "), line
    urls = [u.rstrip(",") for u in line.split("(")[0].split()[1:]]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    killed = None
    deadline = time.monotonic() + 240
    with httpx.Client(headers=headers, timeout=5, trust_env=False) as http:
        while proc.poll() is None and kill is not None and killed is None:
            assert time.monotonic() < deadline, "the run did not get to half way"
            try:
                status = http.get(urls[0] + "/v1/status").json()
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            workers = (status.get("clock") or {}).get("workers", [])
            rows = sum(w["stats"].get("rows", 0) for w in workers if w["state"] == "live")
            if rows >= ROWS / 2:
                index = int(kill[-1])
                if kill.startswith("shard"):
                    pid = http.get(urls[index] + "/v1/status").json()["shard"]["pid"]
                else:
                    pid = next(w["pid"] for w in workers
                               if w["index"] == index and w["state"] == "live")
                os.kill(pid, signal.SIGKILL)
                killed = f"{kill} (pid {pid}) at {rows:,.0f} rows"
            time.sleep(0.1)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return {**json.loads((out / "m.json").read_text()), "stderr": err}, killed


@pytest.fixture(scope="module")
def fault_free(synth: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    metrics, _ = train(synth, tmp_path_factory.mktemp("clean"), None)
    assert metrics["restarts"] == 0
    return metrics


def check_exactly_once(metrics: dict[str, Any]) -> None:
    """Per worker and shard: pushes and digest sent == applied; rows applied = rows."""
    sent = [r["stream_totals"] for r in metrics["worker_reports"]]
    compared = 0
    for shard, records in enumerate(metrics["shard_streams"]):
        for rec in records:
            pushes, digest = sent[rec["worker"]][shard]
            assert (rec["pushes"], rec["digest"]) == (pushes, digest), (shard, rec)
            compared += 1
    assert compared == 4
    assert metrics["rows_applied"] == metrics["rows"] == ROWS


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kill, split", [
    ("shard0", "shares"), ("shard1", "shares"), ("worker0", "shares"),
    # units handed out on demand: shard 0 keeps who holds and finished which unit
    # (its work log), a restarted worker resumes its unit after its journal's rows
    ("shard0", "units"), ("worker0", "units"),
])
def test_kill_9_mid_run_loses_and_doubles_nothing(
    synth: Path, fault_free: dict[str, Any], tmp_path: Path, kill: str, split: str
) -> None:
    check_exactly_once(fault_free)
    metrics, killed = train(synth, tmp_path, kill, split)
    assert killed is not None
    assert metrics["restarts"] == 1, metrics["restart_events"]
    assert metrics["restart_events"][0]["exit_code"] == -signal.SIGKILL
    role = kill.replace("shard", "server ").replace("worker", "worker ")
    assert f"ftrl-ps train: {role} was killed by signal 9: restarted" in metrics["stderr"]
    check_exactly_once(metrics)
    assert abs(metrics["test_logloss"] - fault_free["test_logloss"]) <= 0.002, killed
    assert load_model(tmp_path / "m.ftrl").keys.size > 1000


def test_restart_budget_is_a_clear_error(synth: Path, tmp_path: Path) -> None:
    """With --max-restarts 0 a killed shard ends the run with a message naming it."""
    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(synth / "train.svm"), "--workers",
           "2", "--servers", "2", "--bits", "18", "--batch-size", "250", "--max-restarts",
           "0", "--token", TOKEN, "-q"]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)})
    assert proc.stderr is not None
    line = proc.stderr.readline()
    url = line.split()[2].rstrip(",")
    pid = httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=30, trust_env=False).json()["shard"]["pid"]
    os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "server 1 exited with code -9" in err and "--max-restarts 0" in err
    assert "Traceback" not in err


@pytest.mark.timeout(300)
@pytest.mark.parametrize("when", ["early", "last unit"])
def test_a_worker_killed_for_good_is_taken_over_and_its_return_replays_nothing(
    synth: Path, fault_free: dict[str, Any], tmp_path: Path, when: str
) -> None:
    """Two shards, two ``ftrl-ps worker --split units`` processes; worker 0 is
    killed -9 holding a unit and not restarted: a fifth of the way (``early``), or
    at its first unit (``last unit``: worker 1 then takes every other unit, and
    with nothing left to take, waits for worker 0's instead of finishing: checked
    before worker 0 is declared dead). The clock declares worker 0 dead,
    worker 1 takes its unit over after its last push on shard 0 (fencing it: a push
    that reached shard 1 only is withdrawn) and trains the rest. Every row once, no
    push of worker 0 beyond shard 0's on shard 1; ``export --wait`` calls the run
    complete (every unit done) and the model is as good as a fault-free run's. A
    new process of worker 0 with its journal then replays nothing."""
    from ftrl_ps.cluster.spawn import spawn_cluster
    from ftrl_ps.server.options import ShardOptions

    env = {**os.environ, "PYTHONPATH": str(REPO), "FTRL_PS_TOKEN": TOKEN}
    # 3 s: heartbeats of a live worker came over 0.5 s apart on a loaded CI machine;
    # last unit: worker 1 trains every other unit before worker 0 is declared dead
    opts = ShardOptions(bits=18, num_workers=2, worker_timeout=3.0 if when == "early" else 8.0,
                        checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_interval=0.5)
    servers = spawn_cluster(2, opts, env=env)
    urls = ",".join(s.url for s in servers)
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def worker(index: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "ftrl_ps", "worker", "--server", urls, "--input",
             str(synth / "train.svm"), "--worker-index", str(index), "--num-workers", "2",
             "--split", "units", "--batch-size", "250", "--state-dir",
             str(tmp_path / f"w{index}"), "--quiet",
             # early: worker 1 sleeps 0.08 s a tick (~100 ticks), still at work when
             # worker 0 is declared dead; last unit: worker 0 is the slow one
             "--straggle-workers", "1" if when == "early" else "0", "--straggle-prob", "1",
             "--straggle-delay", "0.08"],
            cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)

    def streams(http: httpx.Client, worker: int) -> list[dict[str, Any]]:
        return [next(r for r in http.get(s.url + "/v1/streams").json() if r["worker"] == worker)
                for s in servers]

    try:
        procs = [worker(0), worker(1)]
        with httpx.Client(headers=headers, timeout=5, trust_env=False) as http:
            deadline = time.monotonic() + 120
            while True:
                assert time.monotonic() < deadline and procs[0].poll() is None
                status = http.get(servers[0].url + "/v1/status").json()
                rows = sum(w["stats"].get("rows", 0) for w in status["clock"]["workers"])
                work = status["work"]
                # while units are pending, worker 0 holds one at every moment (it
                # reports a unit done in the request that takes the next): frozen,
                # it holds one for good; it is killed once that is seen
                if (rows >= ROWS / 5 if when == "early" else rows > 0) and (
                        work["plan"] and work["pending"] > 0 and work["held"].get("0")):
                    os.kill(procs[0].pid, signal.SIGSTOP)
                    if http.get(servers[0].url + "/v1/work").json()["held"].get("0"):
                        break
                    os.kill(procs[0].pid, signal.SIGCONT)
                time.sleep(0.02)
            procs[0].kill()  # SIGKILL, for good
            while when == "last unit":  # worker 1 takes every pending unit, then waits
                status = http.get(servers[0].url + "/v1/status").json()
                if status["work"]["pending"] == 0:
                    # still live: worker 1 had nothing to take while worker 0 held a unit
                    assert [w["state"] for w in status["clock"]["workers"]
                            if w["index"] == 0] == ["live"], status["clock"]
                    break
                assert time.monotonic() < deadline
                time.sleep(0.02)
            procs[0].wait()
            _, err = procs[1].communicate(timeout=180)
            assert procs[1].returncode == 0, err[-3000:]
            work = http.get(servers[0].url + "/v1/work").json()
            assert (work["done"], work["rows_done"]) == (work["units"], ROWS)
            on0, on1 = streams(http, 0)
            assert on1["last_seq"] <= on0["last_seq"]  # nothing beyond the commit point
            assert on0["fenced"] > 0
            before = [(r["pushes"], r["digest"]) for r in (on0, on1)]
            # worker 0 stays dead: every unit is done, so the run is complete
            res = run_cli("export", "--server", urls, "--model", str(tmp_path / "m.ftrl"),
                          "--test", str(synth / "test.svm"), "--wait", "--timeout", "60",
                          "--metrics-json", str(tmp_path / "e.json"), "--quiet", env=env)
            assert res.returncode == 0, res.stderr
            exported = json.loads((tmp_path / "e.json").read_text())
            assert exported["complete"] and exported["dead_workers"] == [0], exported
            assert abs(exported["test_logloss"] - fault_free["test_logloss"]) <= 0.002
            again = worker(0)  # worker 0's process comes back: nothing is left to do
            _, err = again.communicate(timeout=120)
            assert again.returncode == 0, err[-3000:]
            assert [(r["pushes"], r["digest"]) for r in streams(http, 0)] == before
    finally:
        for s in servers:
            s.stop()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("when", ["starting", "training"])
def test_sigterm_stops_a_local_cluster_as_ctrl_c_does(synth: Path, tmp_path: Path,
                                                      when: str) -> None:
    """``kill PID`` (a container runtime's stop) of ``train --workers``: its children
    are stopped and it says so, as for Ctrl-C (it exited 143 and left them to
    PR_SET_PDEATHSIG, its log folder unannounced). "starting": right after the
    servers' line, while the workers are forked (the signal's exception was raised
    in an at-fork hook and dropped: the run went on to the end, exit 0)."""
    import psutil

    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(synth / "train.svm"), "--workers",
           "2", "--bits", "18", "--batch-size", "250", "--straggle-prob", "1",
           "--straggle-delay", "0.2", "--token", TOKEN, "-q"]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)})
    assert proc.stderr is not None
    line = proc.stderr.readline()
    children: list[psutil.Process] = []
    if when == "starting":  # at once: the workers are being forked
        proc.send_signal(signal.SIGTERM)
    else:
        with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5,
                          trust_env=False) as http:
            deadline = time.monotonic() + 60
            while True:  # both workers registered, rows pushed
                assert time.monotonic() < deadline and proc.poll() is None
                with contextlib.suppress(httpx.HTTPError):
                    status = http.get(line.split()[1] + "/v1/status").json()
                    workers = status["clock"]["workers"]
                    if len(workers) == 2 and all(w["stats"].get("rows") for w in workers):
                        break
                time.sleep(0.05)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 3  # a server and two workers
        proc.send_signal(signal.SIGTERM)
    assert line.startswith("servers: ")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err, err  # (-q: no 'logs kept in')
    assert not list(tmp_path.glob("ftrl-ps-cluster-*/*.json"))  # no run finished
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["ftrl-ps worker", "services.worker"])
def test_a_worker_stopped_by_sigterm_leaves_and_its_unit_is_taken_over_at_once(
    synth: Path, tmp_path: Path, how: str
) -> None:
    """``kill PID`` (docker stop, a pod's deletion) of a worker holding a unit:
    it exits 130 saying so and leaves the cluster, so shard 0 declares it dead at
    once, not after the servers' 120 s ``--worker-timeout``; worker 1 takes its
    unit over (fencing it) and trains every row once."""
    from ftrl_ps.cluster.spawn import spawn_cluster
    from ftrl_ps.server.options import ShardOptions

    env = {**os.environ, "PYTHONPATH": str(REPO), "FTRL_PS_TOKEN": TOKEN}
    servers = spawn_cluster(2, ShardOptions(bits=18, num_workers=2, worker_timeout=120.0),
                            env=env)
    urls = ",".join(s.url for s in servers)
    flags = {"server": urls, "input": str(synth / "train.svm"), "num_workers": "2",
             "split": "units", "batch_size": "250", "straggle_prob": "1",
             "straggle_delay": "0.05", "quiet": "1"}

    def worker(index: int) -> subprocess.Popen[str]:
        mine = {**flags, "worker_index": str(index), "state_dir": str(tmp_path / f"w{index}")}
        if how == "services.worker":
            cmd, extra = [sys.executable, "-m", "services.worker"], {
                f"FTRL_PS_{k.upper()}": v for k, v in mine.items()}
        else:
            cmd, extra = [sys.executable, "-m", "ftrl_ps", "worker"], {}
            for k, v in mine.items():
                cmd += [f"--{k.replace('_', '-')}"] + ([] if k == "quiet" else [v])
        return subprocess.Popen(cmd, cwd=REPO, env={**env, **extra}, stderr=subprocess.PIPE,
                                text=True)

    try:
        procs = [worker(0), worker(1)]
        with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5,
                          trust_env=False) as http:
            deadline = time.monotonic() + 120
            while True:  # worker 0 at work, holding a unit
                assert time.monotonic() < deadline and procs[0].poll() is None
                status = http.get(servers[0].url + "/v1/status").json()
                rows = sum(w["stats"].get("rows", 0) for w in status["clock"]["workers"])
                if rows >= ROWS / 5 and status["work"]["held"].get("0"):
                    break
                time.sleep(0.02)
            procs[0].send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            _, err0 = procs[0].communicate(timeout=30)
            assert procs[0].returncode == 130 and "interrupted" in err0, err0[-3000:]
            assert ("left the cluster and the other workers take over the units it held"
                    in err0), err0[-3000:]  # (it said only 'interrupted')
            workers = http.get(servers[0].url + "/v1/status").json()["clock"]["workers"]
            assert [w["state"] for w in workers if w["index"] == 0] == ["dead"], workers
            _, err1 = procs[1].communicate(timeout=180)
            assert procs[1].returncode == 0, err1[-3000:]
            assert time.monotonic() - stopped < 100  # not held until the worker timeout
            work = http.get(servers[0].url + "/v1/work").json()
            assert (work["done"], work["rows_done"]) == (work["units"], ROWS)
            on0, on1 = (next(r for r in http.get(s.url + "/v1/streams").json()
                             if r["worker"] == 0) for s in servers)
            assert on1["last_seq"] <= on0["last_seq"] and on0["fenced"] > 0
        assert "(index 0) left: its process is stopping" in servers[0].stderr_text(100_000)
    finally:
        for s in servers:
            s.stop()
