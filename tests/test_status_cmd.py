"""``ftrl-ps status`` against a real 2-shard cluster."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from ftrl_ps.ps.client import PSClient
from tests._servers import real_cluster
from tests.conftest import REPO, run_cli


def _one_push_and_tick(client: PSClient) -> None:
    """Worker 0 of 1 pushes one key to each of two shards and ticks with 10 rows."""
    client.register(0, 1)
    keys = np.array([3, 10000], dtype=np.uint32)  # one key on each shard
    client.push(keys, np.ones(2, np.float32), np.ones(2, np.float32))
    client.clock({"rows": 10.0, "loss_sum": 5.0})


def test_status_shows_every_shard_and_the_workers() -> None:
    with real_cluster(2, ["--bits", "14", "--num-workers", "1"]) as shards:
        urls = [s.url for s in shards]
        with PSClient(urls) as client:
            _one_push_and_tick(client)
            res = run_cli("status", "--server", ",".join(urls))
            assert res.returncode == 0, res.stderr
            assert "shard 0:" in res.stdout and "shard 1:" in res.stdout
            assert res.stdout.count("merge rule contraction, float32 state") == 2
            assert "worker 0 (id" in res.stdout and "live, clock 1" in res.stdout
            assert "progressive logloss 0.50000" in res.stdout
            assert ("run not complete: 0 of 1 configured workers finished; running: worker 0"
                    in res.stdout)
            client.finish()
            done = run_cli("status", "--server", ",".join(urls)).stdout
            assert "run complete: 1 of 1 configured workers finished" in done
            assert "None" not in done and "min clock -," in done  # no live worker's clock
            raw = run_cli("status", "--server", ",".join(urls), "--json")
            answers = json.loads(raw.stdout)
            assert [a["shard"]["index"] for a in answers] == [0, 1]
            assert [a["counters"]["keys_pushed"] for a in answers] == [1, 1]
            # shard 1 down: shard 0 and its workers are still shown, and the exit is 1
            shards[1].stop()
            down = run_cli("status", "--server", ",".join(urls))
            assert down.returncode == 1 and "Traceback" not in down.stderr
            assert "shard 0:" in down.stdout and "worker 0 (id" in down.stdout
            assert "shard 1: cannot read its status:" in down.stdout
            raw = run_cli("status", "--server", ",".join(urls), "--json")
            assert json.loads(raw.stdout)[1]["shard"] == 1 and raw.returncode == 1
    res = run_cli("status", "--server", urls[0])  # the servers are gone now
    assert res.returncode == 1 and "Traceback" not in res.stderr


def test_withdrawn_pushes_are_shown_only_when_there_are_some() -> None:
    from ftrl_ps.cli.status_cmd import summary

    def shown(counters: dict[str, int]) -> str:
        return "\n".join(summary(1, {"shard": {"begin": 0, "end": 10}, "counters": counters}))

    assert "1 push(es) of dead workers withdrawn here" in shown({"withdrawals": 1})
    assert "withdrawn" not in shown({"withdrawals": 0}) and "withdrawn" not in shown({})


def test_the_warm_start_is_shown_with_its_lone_worker() -> None:
    from ftrl_ps.cli.status_cmd import summary

    def shown(warm: dict[str, object] | None) -> str:
        clock = {"staleness": 3, "workers": [], "warm_start": warm}
        return "\n".join(summary(0, {"shard": {"begin": 0, "end": 10}, "clock": clock}))

    assert "warm start (2 rounds, worker 1 alone): the others wait" in shown(
        {"rounds": 2, "worker": 1, "over": False})
    assert "warm start (2 rounds, no worker yet alone): the others wait" in shown(
        {"rounds": 2, "worker": None, "over": False})
    assert "warm start (2 rounds, worker 0 alone): over" in shown(
        {"rounds": 2, "worker": 0, "over": True})
    assert "warm start" not in shown(None)


class _Screen(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_watch_redraws_in_place_with_a_cluster_line() -> None:
    from ftrl_ps.cli.status_cmd import watch

    clock = {"staleness": 1, "workers": [
        {"worker_id": 0, "index": 0, "state": "live", "clock": 3, "seconds_since_seen": 0.1,
         "stats": {"rows": 100.0, "loss_sum": 40.0}}]}
    calls = []

    class Client:
        def status(self, shard: int) -> dict[str, object]:
            calls.append(shard)
            if len(calls) > 3:
                raise KeyboardInterrupt
            clock["workers"][0]["stats"]["rows"] += 100.0  # type: ignore[index]
            return {"shard": {"begin": 0, "end": 10}, "counters": {}, "clock": clock}

    screen = _Screen()
    with pytest.raises(KeyboardInterrupt):
        watch(Client(), 1, 0.01, screen)
    text = screen.getvalue()
    assert text.count("\x1b[H\x1b[2J") == 3  # home + clear before every redraw
    assert "cluster: 200 rows" in text and "cluster: 400 rows" in text
    assert "clock 3..3" in text and "restarts 0" in text and "live 1" in text


def test_watch_command_refreshes_until_ctrl_c() -> None:
    with real_cluster(1, ["--bits", "12", "--num-workers", "1"]) as shards:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ftrl_ps", "status", "--server", shards[0].url, "--watch",
             "0.2"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # wait for two redraws (start-up takes seconds on a loaded machine), then Ctrl-C
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")),
                                  daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while sum("cluster: " in line for line in seen) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:  # (a failure here must not leave it running)
                proc.kill()
        reader.join(timeout=20)
        err = proc.stderr.read()
    out = "".join(seen)
    assert proc.returncode == 0, err
    assert out.count("cluster: ") >= 2 and "shard 0:" in out
    assert "Traceback" not in err


def test_watch_json_prints_one_json_object_per_refresh() -> None:
    """``status --watch --json`` through the real command against real shards: JSON
    lines (each refresh flushed at once), a shard going down included, Ctrl-C exits 0."""
    with real_cluster(2, ["--bits", "14", "--num-workers", "1"]) as shards:
        urls = [s.url for s in shards]
        with PSClient(urls) as client:
            _one_push_and_tick(client)
            proc = subprocess.Popen(
                [sys.executable, "-m", "ftrl_ps", "status", "--server", ",".join(urls),
                 "--watch", "0.2", "--json"],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            stdout, stderr = proc.stdout, proc.stderr
            assert stdout is not None and stderr is not None
            seen: list[str] = []
            reader = threading.Thread(target=lambda: seen.extend(iter(stdout.readline, "")),
                                      daemon=True)
            reader.start()

            def wait_for(done: Callable[[], bool]) -> None:  # poll what it printed so far
                deadline = time.monotonic() + 60
                while not done() and time.monotonic() < deadline:
                    if proc.poll() is not None:
                        break
                    time.sleep(0.05)

            try:
                wait_for(lambda: len(seen) >= 2)  # two refreshes (start-up takes seconds)
                shards[1].stop()  # then shard 1 goes down: said in the shard list
                wait_for(lambda: any('"error"' in line for line in seen))
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=20)
            finally:
                if proc.poll() is None:  # (a failure here must not leave it running)
                    proc.kill()
            reader.join(timeout=20)
            err = stderr.read()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    records = [json.loads(line) for line in seen]  # every line is one JSON object
    assert len(records) >= 3 and all(line.endswith("\n") for line in seen)
    first = records[0]
    assert sorted(first) == ["cluster", "shards", "time"]
    assert first["cluster"]["rows"] == 10 and first["cluster"]["logloss"] == 0.5
    assert first["cluster"]["states"] == {"live": 1}
    assert first["cluster"]["min_clock"] == first["cluster"]["max_clock"] == 1
    assert [s["shard"]["index"] for s in first["shards"]] == [0, 1]
    assert [s["counters"]["keys_pushed"] for s in first["shards"]] == [1, 1]
    assert records[1]["time"] > first["time"]
    last = records[-1]
    assert last["shards"][1]["shard"] == 1 and "error" in last["shards"][1]
    assert last["shards"][0]["shard"]["index"] == 0 and last["cluster"]["rows"] == 10
