"""Fault benchmark (issue 9): kill -9 in a running cluster, bounded-memory exports, schemathesis.

    python benchmarks/bench_faults.py                       # 1M rows, 2 shards + 2 workers
    python benchmarks/bench_faults.py --rows 200000 --skip-exports --skip-schemathesis

1. ``ftrl-ps train --workers 2 --servers 2`` on generated data, once without faults
   and once each with kill -9 of shard 0, of shard 1 and of worker 0 when half the
   rows are trained (pids from ``/v1/status``). Per run: completed, pushes lost or
   doubled (per worker and shard, pushes sent vs applied and their digests), rows
   applied vs rows, test logloss vs the fault-free run, the supervisor's restart
   time, and the time from the kill until training resumed: the restarted shard
   applies pushes again (the replays come first), or the restarted worker reports
   trained rows at a clock tick.
2. 20 concurrent ``GET /v1/state`` on a ``--bits 26`` shard holding 4M touched keys:
   peak RSS above the idle server (sampled every 10 ms with psutil).
3. schemathesis against a live shard: operations, examples, failures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import DEFAULT_DATA_DIR, ensure_synth_data, format_table  # noqa: E402

TOKEN = "bench-faults"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def train(data: Path, out: Path, bits: int, kill: str | None, rows_total: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(data / "train.svm"), "--test",
           str(data / "test.svm"), "--workers", "2", "--servers", "2", "--bits", str(bits),
           "--model", str(out / "m.ftrl"), "--metrics-json", str(out / "m.json"),
           "--token", TOKEN, "--checkpoint-interval", "5", "-q"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    urls = [u.rstrip(",") for u in proc.stderr.readline().split("(")[0].split()[1:]]
    info: dict[str, Any] = {"fault": kill or "none"}
    killed: dict[str, Any] = {}
    with httpx.Client(headers=AUTH, timeout=2, trust_env=False) as http:
        while proc.poll() is None and kill is not None and "resumed_s" not in info:
            try:
                workers = http.get(urls[0] + "/v1/status").json()["clock"]["workers"]
                index = int(kill[-1])
                if not killed:
                    live = [w for w in workers if w["state"] == "live"]
                    rows = sum(w["stats"].get("rows", 0) for w in live)
                    if rows >= rows_total / 2:
                        if kill.startswith("shard"):
                            pid = http.get(urls[index] + "/v1/status").json()["shard"]["pid"]
                        else:
                            me = next(w for w in live if w["index"] == index)
                            pid, killed["epoch"] = me["pid"], me["worker_id"]
                        os.kill(pid, signal.SIGKILL)
                        killed.update(pid=pid, at=time.monotonic())
                        info["killed_at_rows"] = int(rows)
                elif kill.startswith("shard"):
                    # resumed: the restarted shard applies pushes again (replays first)
                    st = http.get(urls[index] + "/v1/status").json()
                    if st["shard"]["pid"] != killed["pid"] and st["counters"]["pushes"] > 0:
                        info["resumed_s"] = round(time.monotonic() - killed["at"], 2)
                elif any(w["index"] == index and w["worker_id"] != killed["epoch"]
                         and w["stats"].get("rows", 0) > 0 for w in workers):
                    # resumed: the new worker process reported trained rows at a clock tick
                    info["resumed_s"] = round(time.monotonic() - killed["at"], 2)
            except (httpx.HTTPError, ValueError, KeyError, TypeError, StopIteration):
                pass
            time.sleep(0.05)
    _, err = proc.communicate()
    info["seconds"] = round(time.monotonic() - t0, 1)
    info["completed"] = proc.returncode == 0
    if proc.returncode != 0:
        info["error"] = err[-2000:]
        return info
    m = json.loads((out / "m.json").read_text())
    sent = [r["stream_totals"] for r in m["worker_reports"]]
    lost = doubled = 0
    for shard, records in enumerate(m["shard_streams"]):
        for rec in records:
            pushes, digest = sent[rec["worker"]][shard]
            lost += max(0, pushes - rec["pushes"])
            doubled += max(0, rec["pushes"] - pushes)
            if rec["pushes"] == pushes and rec["digest"] != digest:
                doubled += 1  # same count, other content: counted as a fault too
    info.update(rows=m["rows"], rows_applied=m["rows_applied"], lost=lost, doubled=doubled,
                pushes=sum(c for w in sent for c, _ in w), restarts=m["restarts"],
                restart_s=[e["seconds_to_restart"] for e in m["restart_events"]],
                test_logloss=round(m["test_logloss"], 5), model_saved=(out / "m.ftrl").exists())
    return info


def exports(bits: int, keys: int, concurrent: int) -> dict[str, Any]:
    from ftrl_ps.ps.client import PSClient

    cmd = [sys.executable, "-m", "ftrl_ps", "server", "--bits", str(bits), "--token", TOKEN,
           "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().split()[-1]
    ps_proc = psutil.Process(proc.pid)
    try:
        with PSClient(url, token=TOKEN) as ps:
            rng = np.random.default_rng(0)
            chosen = np.unique(rng.integers(0, 2**bits, keys))
            for part in np.array_split(chosen, max(1, chosen.size // 500_000)):
                ps.push(part, np.ones(part.size), np.full(part.size, 0.5))
        time.sleep(1.0)
        idle = ps_proc.memory_info().rss
        peak = idle
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, ps_proc.memory_info().rss)
                time.sleep(0.01)

        sizes: list[int] = []

        def one() -> None:
            with PSClient(url, token=TOKEN) as c:
                sizes.append(int(c.dump_state()[0].size))

        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.monotonic()
        threads = [threading.Thread(target=one) for _ in range(concurrent)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - t0
        stop.set()
        sampler.join()
        return {"bits": bits, "touched_keys": int(chosen.size), "concurrent": concurrent,
                "completed": len(sizes), "all_complete": set(sizes) == {chosen.size},
                "idle_rss_mib": round(idle / 2**20, 1),
                "peak_above_idle_mib": round((peak - idle) / 2**20, 1),
                "seconds": round(seconds, 1)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def schemathesis_run(examples: int) -> dict[str, Any]:
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    cmd = [sys.executable, "-m", "ftrl_ps", "server", "--bits", "12", "--group-size", "64",
           "--token", TOKEN, "--num-workers", "2", "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and exe
    url = proc.stdout.readline().split()[-1]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            res = subprocess.run([exe, "run", f"{url}/openapi.json", "--checks", "all",
                                  "--max-examples", str(examples), "--generation-deterministic",
                                  "--workers", "1", "-H", f"Authorization: Bearer {TOKEN}"],
                                 cwd=tmp, capture_output=True, text=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    out = res.stdout
    counts = re.search(r"(\d+) generated, (\d+) passed", out)
    ops = re.search(r"Tested: (\d+)", out)
    failures = re.search(r"(\d+) failures?", out.split("SUMMARY")[-1])
    return {"operations": int(ops.group(1)) if ops else None,
            "examples_per_operation": examples,
            "generated": int(counts.group(1)) if counts else None,
            "passed": int(counts.group(2)) if counts else None,
            "failures": int(failures.group(1)) if failures else 0, "exit_code": res.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000,
                    help="training rows generated; a fault strikes when half of them are "
                    "trained (default %(default)s)")
    ap.add_argument("--test-rows", type=int, default=100_000,
                    help="test rows generated (default %(default)s)")
    ap.add_argument("--bits", type=int, default=22,
                    help="hash bits of the generated data and the training runs "
                    "(default %(default)s)")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                    help="cache of the generated data (default benchmarks/.data)")
    ap.add_argument("--faults", default="shard0,shard1,worker0",
                    help="comma-separated processes to kill -9 (shard0, shard1, worker0, "
                    "worker1), one training run each after the fault-free one; empty: that "
                    "run only (default %(default)s)")
    ap.add_argument("--export-bits", type=int, default=26,
                    help="hash bits of the shard the 20 concurrent GET /v1/state read "
                    "(default %(default)s)")
    ap.add_argument("--export-keys", type=int, default=4_000_000,
                    help="random keys pushed to that shard first, duplicates dropped "
                    "(default %(default)s)")
    ap.add_argument("--skip-exports", action="store_true",
                    help="skip part 2, the concurrent exports' peak RSS")
    ap.add_argument("--skip-schemathesis", action="store_true",
                    help="skip part 3, schemathesis against a live shard")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = ap.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    unknown = sorted(set(faults) - {"shard0", "shard1", "worker0", "worker1"})
    if unknown:  # the run has 2 shards and 2 workers: anything else would never be killed
        ap.error(f"--faults: unknown process(es) {', '.join(unknown)}; "
                 "choose among shard0, shard1, worker0, worker1")
    data, _, _ = ensure_synth_data(args.data_dir, args.rows, args.test_rows, args.bits)
    results: dict[str, Any] = {"runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for fault in [None, *faults]:
            out = Path(tmp) / (fault or "none")
            out.mkdir()
            run = train(data, out, args.bits, fault, args.rows)
            results["runs"].append(run)
            print(json.dumps(run), file=sys.stderr)
    base = results["runs"][0].get("test_logloss")
    rows = []
    for r in results["runs"]:
        delta = (r["test_logloss"] - base) if base is not None and "test_logloss" in r else None
        rows.append([r["fault"], r["completed"], r.get("killed_at_rows", "-"), r.get("lost"),
                     r.get("doubled"), f"{r.get('rows_applied')}/{r.get('rows')}",
                     r.get("test_logloss"), "-" if delta is None else f"{delta:+.5f}",
                     ",".join(str(s) for s in r.get("restart_s", [])) or "-",
                     r.get("resumed_s", "-"), r["seconds"]])
    print(format_table(["fault", "completed", "killed at rows", "lost", "doubled",
                        "rows applied", "test logloss", "vs no fault", "restart s",
                        "kill->resumed s", "wall s"], rows))
    if not args.skip_exports:
        results["exports"] = exports(args.export_bits, args.export_keys, 20)
        print(json.dumps(results["exports"]))
    if not args.skip_schemathesis:
        results["schemathesis"] = schemathesis_run(25)
        print(json.dumps(results["schemathesis"]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
