"""``ftrl-ps status`` against a real 2-shard cluster."""

from __future__ import annotations

import json

import numpy as np

from ftrl_ps.ps.client import PSClient
from tests._servers import real_cluster
from tests.conftest import run_cli


def test_status_shows_every_shard_and_the_workers() -> None:
    with real_cluster(2, ["--bits", "14", "--num-workers", "1"]) as shards:
        urls = [s.url for s in shards]
        with PSClient(urls) as client:
            client.register(0, 1)
            keys = np.array([3, 10000], dtype=np.uint32)  # one key on each shard
            client.push(keys, np.ones(2, np.float32), np.ones(2, np.float32))
            client.clock({"rows": 10.0, "loss_sum": 5.0})
            res = run_cli("status", "--server", ",".join(urls))
            assert res.returncode == 0, res.stderr
            assert "shard 0:" in res.stdout and "shard 1:" in res.stdout
            assert "worker 0 (id" in res.stdout and "live, clock 1" in res.stdout
            assert "progressive logloss 0.50000" in res.stdout
            assert ("run not complete: 0 of 1 configured workers finished; running: worker 0"
                    in res.stdout)
            client.finish()
            done = run_cli("status", "--server", ",".join(urls)).stdout
            assert "run complete: 1 of 1 configured workers finished" in done
            raw = run_cli("status", "--server", ",".join(urls), "--json")
            answers = json.loads(raw.stdout)
            assert [a["shard"]["index"] for a in answers] == [0, 1]
            assert [a["counters"]["keys_pushed"] for a in answers] == [1, 1]
    res = run_cli("status", "--server", urls[0])  # the servers are gone now
    assert res.returncode == 1 and "Traceback" not in res.stderr
