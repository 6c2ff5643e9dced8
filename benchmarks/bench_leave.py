"""How long a worker stopped by SIGTERM holds the others back (session 32).

One shard (staleness 0, the default ``--worker-timeout`` of 30 s) and two
``ftrl-ps worker --split units`` processes on generated rows; once 20 % of the
rows are trained and worker 0 holds a unit, worker 0 gets SIGTERM (``docker
stop``, a pod's deletion). Printed: worker 0's exit code, seconds until shard 0
marks it dead, seconds until worker 1 has finished the run, and the rows and
units done (every row must be trained once).

    python benchmarks/bench_leave.py                 # this tree
    python benchmarks/bench_leave.py --repo /tmp/old  # another checkout, to compare
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(REPO), help="the checkout to run (default: this)")
    parser.add_argument("--rows", type=int, default=200_000, help="generated rows (200000)")
    args = parser.parse_args()
    repo = str(Path(args.repo).resolve())
    sys.path.insert(0, repo)
    from ftrl_ps.cluster.spawn import spawn_cluster
    from ftrl_ps.server.options import ShardOptions

    env = {**os.environ, "PYTHONPATH": repo}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "ftrl_ps", "gen", tmp, "--rows", str(args.rows),
                        "--test-rows", "1000", "--bits", "18", "--seed", "5", "-q"],
                       check=True, cwd=repo, env=env)
        servers = spawn_cluster(1, ShardOptions(bits=18, num_workers=2, staleness=0,
                                                worker_timeout=30.0), env=env)
        url = servers[0].url

        def worker(i: int) -> subprocess.Popen[str]:
            return subprocess.Popen(
                [sys.executable, "-m", "ftrl_ps", "worker", "--server", url, "--input",
                 f"{tmp}/train.svm", "--worker-index", str(i), "--num-workers", "2",
                 "--split", "units", "--batch-size", "250", "--straggle-prob", "1",
                 "--straggle-delay", "0.02", "-q"],
                cwd=repo, env=env, stderr=subprocess.PIPE, text=True)

        try:
            procs = [worker(0), worker(1)]
            with httpx.Client(timeout=5, trust_env=False) as http:
                while True:
                    st = http.get(url + "/v1/status").json()
                    rows = sum(w["stats"].get("rows", 0) for w in st["clock"]["workers"])
                    if rows >= args.rows // 5 and st["work"]["held"].get("0"):
                        break
                    time.sleep(0.02)
                procs[0].send_signal(signal.SIGTERM)
                t0 = time.monotonic()
                procs[0].communicate(timeout=60)
                dead_after = None
                while procs[1].poll() is None:
                    st = http.get(url + "/v1/status").json()
                    if dead_after is None and any(w["index"] == 0 and w["state"] == "dead"
                                                  for w in st["clock"]["workers"]):
                        dead_after = round(time.monotonic() - t0, 3)
                    time.sleep(0.05)
                work = http.get(url + "/v1/work").json()
            print(json.dumps({
                "repo": repo, "worker0_exit": procs[0].returncode,
                "dead_after_s": dead_after,
                "worker1_done_after_s": round(time.monotonic() - t0, 2),
                "worker1_exit": procs[1].returncode, "rows_done": work["rows_done"],
                "rows": args.rows, "units_done": [work["done"], work["units"]]}))
        finally:
            for s in servers:
                s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
