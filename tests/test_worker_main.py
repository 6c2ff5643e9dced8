"""``ftrl-ps worker``'s run against a real server: how it ends (ps/worker_main.py)."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ftrl_ps.ps.client import PSClient
from ftrl_ps.ps.worker_main import WorkerOptions, run_worker
from tests._servers import TOKEN, real_cluster, real_server


@pytest.mark.parametrize("split", ["shares", "units"])
def test_the_last_push_has_no_tick_and_the_finish_carries_the_last_stats(
        tmp_path: Path, split: str) -> None:
    """A worker with nothing left does not tick after its last push (a tick only
    makes the next round wait for the others): shard 0 learns its last progress
    from the finish request, and the clock counts one tick less than the pushes."""
    rng = np.random.default_rng(4)
    data = tmp_path / "t.svm"
    # 150 rows in steps of 10, a push every 4 steps: the last 3 steps go with the last push
    data.write_text("".join(
        f"{int(rng.random() < 0.3)} {a}:1 {a + 1 + int(rng.integers(50))}:1\n"
        for a in rng.integers(0, 100, 150)))
    with real_server(["--bits", "12", "--group-size", "64", "--token", TOKEN,
                      "--num-workers", "1", "--staleness", "0"]) as server:
        result = run_worker(WorkerOptions(
            server=server.url, input=str(data), num_workers=1, worker_index=0, token=TOKEN,
            quiet=True, batch_size=10, fetch_step=4, push_step=4, split=split))
        with PSClient(server.url, token=TOKEN) as ps:
            (worker,) = ps.status()["clock"]["workers"]
    assert result["rows"] == 150
    assert worker["state"] == "finished"
    assert worker["stats"]["rows"] == 150 and worker["stats"]["pushes"] == result["pushes"]
    assert worker["clock"] == result["pushes"] - 1


def test_auto_split_is_decided_on_the_input(tmp_path: Path) -> None:
    """``split="auto"`` (the default): shares of one plain file, units of a
    directory; '--split shares' of a directory is refused with what to do."""
    from ftrl_ps.errors import ConfigError

    (tmp_path / "a.svm").write_text("1 1:1\n")
    one = WorkerOptions(server="http://127.0.0.1:1", input=str(tmp_path / "a.svm"), num_workers=2)
    assert one.split == "auto" and one.resolved().split == "shares"
    folder = WorkerOptions(server="http://127.0.0.1:1", input=str(tmp_path), num_workers=2)
    assert folder.resolved().split == "units"
    folder.check()  # a directory is fine when its units are handed out
    shares = WorkerOptions(server="http://127.0.0.1:1", input=str(tmp_path), num_workers=2,
                           split="shares")
    with pytest.raises(ConfigError, match="'--split shares' reads byte ranges of one plain"):
        shares.check()
    # a gzip file has no byte ranges either: refused before the worker starts
    (tmp_path / "b.svm.gz").write_bytes(gzip.compress(b"1 1:1\n"))
    gz = WorkerOptions(server="http://127.0.0.1:1", input=str(tmp_path / "b.svm.gz"),
                       num_workers=2, split="shares")
    with pytest.raises(ConfigError, match="gzip-compressed; '--split shares' reads byte ranges"):
        gz.check()
    replace(gz, split="auto").check()  # auto hands it out whole
    # a stream on stdin is read as it comes: '--split units' is refused, not ignored
    stream = WorkerOptions(server="http://127.0.0.1:1", input="-", num_workers=2)
    stream.check()
    with pytest.raises(ConfigError, match=r"--input - \(a stream\) .* drop --split units"):
        replace(stream, split="units").check()


@pytest.mark.parametrize("index", ["0", "auto"])
def test_a_state_dir_of_an_earlier_run_is_refused_by_new_servers(tmp_path: Path,
                                                                 index: str) -> None:
    """A --state-dir left from an earlier run (a compose volume kept): new servers
    have other run ids, so the worker refuses it with exit 2 before registering,
    instead of replaying the old run's pushes into them and training nothing. With
    ``--worker-index auto`` (compose's) it registered first, and the new servers
    showed that index dead, not replaced (QA)."""
    from tests.conftest import run_cli

    rng = np.random.default_rng(5)
    data = tmp_path / "t.svm"
    data.write_text("".join(f"{int(rng.random() < 0.3)} {a}:1 {a + 7}:1\n"
                            for a in rng.integers(0, 4000, 200)))
    server = ["--bits", "12", "--group-size", "64", "--num-shards", "2", "--num-workers", "1"]
    worker = ["worker", "--input", str(data), "--worker-index", index, "--num-workers", "1",
              "--batch-size", "10", "--state-dir", str(tmp_path / "state"), "-q"]
    for run in ("first", "second"):
        with real_cluster(2, server) as shards:
            urls = ",".join(s.url for s in shards)
            done = run_cli(*worker, "--server", urls)
            with PSClient([s.url for s in shards]) as ps:
                workers, streams = ps.status()["clock"]["workers"], ps.streams(0)
        if run == "first":
            assert done.returncode == 0, done.stderr
            assert streams and streams[0]["position"] == 200
    assert done.returncode == 2, done.stderr
    assert "push journal of another cluster run" in done.stderr
    assert "another --state-dir" in done.stderr and len(done.stderr.splitlines()) <= 2
    assert workers == [] and streams == []  # the new servers are untouched



def test_the_final_line_gives_the_seconds_idle_for_units_when_there_were_any() -> None:
    """QA: a worker idle for want of units said so nowhere; its last line now does (as
    its report, status, the dashboard and /metrics), and only when it was idle."""
    from ftrl_ps.ps.worker import WorkerReport
    from ftrl_ps.ps.worker_main import final_line

    busy = WorkerReport(rows=5000, seconds=1.5, loss_sum=2000.0, pushes=4, pulls=4,
                        keys_pushed=1200, keys_pulled=1300, idle_seconds=0.01)
    line = final_line(0, 3, busy, 0, 0)
    assert line == ("worker 0/3: 5,000 rows in 1.50 s, progressive logloss 0.40000, "
                    "4 pushes (1,200 keys), 4 pulls (1,300 keys)")
    idle = WorkerReport(rows=5000, seconds=9.0, loss_sum=2000.0, pushes=4, pulls=4,
                        keys_pushed=1200, keys_pulled=1300, idle_seconds=6.04)
    # resumed after 1,000 rows an earlier process pushed, 800 of them counted in rows
    line = final_line(2, 3, idle, 800, 1000)
    assert line == ("worker 2/3: 4,200 rows in 9.00 s (after 1,000 rows an earlier process "
                    "pushed), progressive logloss 0.40000 (over the index's 5,000 rows), "
                    "4 pushes (1,200 keys), 4 pulls (1,300 keys), idle 6.0 s for units "
                    "others held")
