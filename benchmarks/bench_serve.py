"""The prediction service (``ftrl-ps serve``): latency, batch scoring, learn ingest, freshness.

One command measures the four goals of issue 10 side by side on one machine:

1. **latency** — single-row ``POST /v1/predict`` (libsvm text) against an empty
   ``GET /health`` on the same ``serve --model`` process, alternating on one
   keep-alive connection: p50 and p99 of each and their ratio
   (goal p50 <= 2x, p99 <= 3x);
2. **batch scoring** — 1000-row text requests to the same process, on
   ``--clients`` keep-alive connections, rows/s against ``ftrl-ps predict``'s
   work done in this process (read + parse + score + format the test file,
   :func:`ftrl_ps.learn.training.predict`; goal >= 50 %);
3. **learn ingest** — a ``server --num-workers 1 --staleness inf`` plus
   ``serve --server URL --learn`` with default settings; the training file is
   POSTed to ``/v1/learn`` in 1000-row requests: rows/s accepted (goal >= 100k)
   and rows/s trained (until the learner caught up);
4. **freshness** — with default settings and no other traffic: a request that
   learns a new feature, then ``/v1/predict`` polled every 5 ms until the
   probability changes (goal p50/p99 <= 2 s); also the service's own
   freshness percentiles (``/v1/status``) over the ingest phase, under load.

Data: ``ftrl-ps gen`` (seed 0, ~39 features a row) cached in ``--data-dir``,
or with ``--a9a`` the real a9a set of ``../shared/data`` (14 features a row).

Usage::

    python benchmarks/bench_serve.py                           # 200k train / 100k test rows
    python benchmarks/bench_serve.py --rows 50000 --latency-requests 500   # quick
    python benchmarks/bench_serve.py --a9a             # real data: a9a / a9a.t
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import DEFAULT_DATA_DIR, ensure_synth_data, format_table  # noqa: E402

from ftrl_ps.cluster.spawn import spawn_server  # noqa: E402
from ftrl_ps.core.ftrl import FTRL  # noqa: E402
from ftrl_ps.core.modelio import load_model, save_model  # noqa: E402
from ftrl_ps.learn.training import predict, train  # noqa: E402
from ftrl_ps.server.options import ShardOptions  # noqa: E402

TEXT = {"Content-Type": "text/plain"}


@contextmanager
def serve(*args: str) -> Iterator[str]:
    """``ftrl-ps serve ARGS --port 0`` as a child process; yields its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "ftrl_ps", "serve", *args, "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"serve did not start: {line!r}")
        yield line.removeprefix("listening on ")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def chunks(path: Path, rows: int) -> list[bytes]:
    lines = path.read_bytes().splitlines(keepends=True)
    return [b"".join(lines[i:i + rows]) for i in range(0, len(lines), rows)]


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def bench_latency(url: str, row: bytes, n: int) -> dict[str, float]:
    health: list[float] = []
    pred: list[float] = []
    with httpx.Client(base_url=url, trust_env=False, timeout=30) as c:
        for _ in range(200):  # warm the connection and both handlers
            c.get("/health")
            c.post("/v1/predict", content=row, headers=TEXT)
        for _ in range(n):
            t = time.perf_counter()
            c.get("/health")
            health.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = c.post("/v1/predict", content=row, headers=TEXT)
            pred.append(time.perf_counter() - t)
            assert r.status_code == 200
    out = {"health_p50_ms": pct(health, 50) * 1e3, "health_p99_ms": pct(health, 99) * 1e3,
           "predict_p50_ms": pct(pred, 50) * 1e3, "predict_p99_ms": pct(pred, 99) * 1e3}
    out["p50_ratio"] = out["predict_p50_ms"] / out["health_p50_ms"]
    out["p99_ratio"] = out["predict_p99_ms"] / out["health_p99_ms"]
    return out


def bench_batch(url: str, bodies: list[bytes], clients: int, rounds: int) -> float:
    """Rows/s scoring ``bodies`` ``rounds`` times over ``clients`` connections."""
    rows = sum(b.count(b"\n") for b in bodies) * rounds
    work = [b for _ in range(rounds) for b in bodies]
    parts = [work[i::clients] for i in range(clients)]

    def run(part: list[bytes]) -> None:
        # the standard library's client: less client CPU per request than httpx on
        # a 2-core machine where client and server share the cores
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        try:
            for body in part:
                conn.request("POST", "/v1/predict", body=body, headers=TEXT)
                resp = conn.getresponse()
                resp.read()
                assert resp.status == 200
        finally:
            conn.close()

    run(bodies[:5])  # warm up
    threads = [threading.Thread(target=run, args=(p,)) for p in parts]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return rows / (time.perf_counter() - t)


def bench_predict_in_process(model: FTRL, test: Path, repeats: int) -> float:
    rows = predict(model, test, io.StringIO()).rows
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        predict(model, test, io.StringIO())
        times.append(time.perf_counter() - t)
    return rows / statistics.median(times)


def bench_learn(url: str, bodies: list[bytes]) -> dict[str, float]:
    rows = sum(b.count(b"\n") for b in bodies)
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    with httpx.Client(base_url=url, trust_env=False, timeout=60) as c:
        t = time.perf_counter()
        for body in bodies:
            conn.request("POST", "/v1/learn", body=body, headers=TEXT)
            resp = conn.getresponse()
            assert resp.status == 200, resp.read()
            resp.read()
        accepted = time.perf_counter() - t
        conn.close()
        while c.get("/v1/status").json()["learner"]["rows_trained"] < rows:
            time.sleep(0.01)
        trained = time.perf_counter() - t
        time.sleep(1.5)  # let the last refreshes land for the freshness percentiles
        learner = c.get("/v1/status").json()["learner"]
    return {"ingest_rows_per_s": rows / accepted, "trained_rows_per_s": rows / trained,
            "status_freshness_p50_s": learner["freshness_p50_s"],
            "status_freshness_p99_s": learner["freshness_p99_s"],
            "status_freshness_samples": learner["freshness_samples"]}


def bench_freshness(url: str, probes: int) -> dict[str, float]:
    waits = []
    with httpx.Client(base_url=url, trust_env=False, timeout=30) as c:
        for i in range(probes):
            row = f"fresh_{i}:1\n".encode()
            before = c.post("/v1/predict", content=row, headers=TEXT).json()["probabilities"]
            t = time.perf_counter()
            c.post("/v1/learn", content=f"1 fresh_{i}:1\n".encode() * 20, headers=TEXT)
            while c.post("/v1/predict", content=row, headers=TEXT).json()[
                    "probabilities"] == before:
                time.sleep(0.005)
                if time.perf_counter() - t > 30:
                    raise RuntimeError("learned rows never reached the predictions")
            waits.append(time.perf_counter() - t)
            time.sleep(0.05)
    return {"freshness_p50_s": pct(waits, 50), "freshness_p99_s": pct(waits, 99),
            "freshness_max_s": max(waits)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path,
                    help="cache of the generated data (default benchmarks/.data; not with "
                    "--a9a)")
    ap.add_argument("--rows", type=int,
                    help="training rows generated (default 200k; not with --a9a)")
    ap.add_argument("--test-rows", type=int,
                    help="test rows generated, scored in phases 1 and 2 (default 100000; "
                    "not with --a9a)")
    ap.add_argument("--bits", type=int,
                    help="hash bits of the models (and of the generated data): default 20, "
                    "18 with --a9a")
    ap.add_argument("--latency-requests", type=int, default=3000,
                    help="timed GET /health + 1-row predict pairs of phase 1, after 200 "
                    "warm-up pairs (default %(default)s)")
    ap.add_argument("--clients", type=int, default=2, help="connections for batch scoring")
    ap.add_argument("--freshness-probes", type=int, default=40,
                    help="new features learned then polled for in phase 4 "
                    "(default %(default)s)")
    ap.add_argument("--a9a", action="store_true",
                    help="use ../shared/data/libsvm/a9a and a9a.t (real data, 14 features a "
                    "row) instead of generated data; the training file is posted 3 times")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    generated = {"--data-dir": args.data_dir, "--rows": args.rows, "--test-rows": args.test_rows}
    if args.a9a and any(v is not None for v in generated.values()):
        ap.error(f"{', '.join(k for k, v in generated.items() if v is not None)}: for "
                 "generated data, not with --a9a")
    args.data_dir = DEFAULT_DATA_DIR if args.data_dir is None else args.data_dir
    args.rows = 200_000 if args.rows is None else args.rows
    args.test_rows = 100_000 if args.test_rows is None else args.test_rows
    args.bits = args.bits if args.bits is not None else 18 if args.a9a else 20

    passes = 1
    if args.a9a:
        shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "libsvm"
        train_path, test_path, passes = shared / "a9a", shared / "a9a.t", 3
        if not train_path.exists():
            print(f"a9a not found in {shared}", file=sys.stderr)
            return 2
    else:
        folder, _truth, _secs = ensure_synth_data(args.data_dir, args.rows, args.test_rows,
                                                  args.bits)
        train_path, test_path = folder / "train.svm", folder / "test.svm"
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "model.ftrl"
        model = FTRL(args.bits)
        train(model, train_path)
        save_model(model_path, model)
        model = load_model(model_path).to_ftrl()
        results["predict_in_process_rows_per_s"] = bench_predict_in_process(model, test_path, 3)
        test_bodies = chunks(test_path, 1000)
        row = test_bodies[0].split(b"\n", 1)[0] + b"\n"
        with serve("--model", str(model_path)) as url:
            results.update(bench_latency(url, row, args.latency_requests))
            results["batch_rows_per_s"] = bench_batch(url, test_bodies, args.clients, 2)
        results["batch_vs_predict"] = (results["batch_rows_per_s"]
                                       / results["predict_in_process_rows_per_s"])
        opts = ShardOptions(bits=args.bits, num_workers=1, staleness=None)
        with spawn_server(opts) as srv, serve("--server", srv.url, "--learn") as url:
            results.update(bench_learn(url, chunks(train_path, 1000) * passes))
            results.update(bench_freshness(url, args.freshness_probes))

    r = results
    print(format_table(["measure", "figure", "goal"], [
        ["GET /health p50 / p99 (ms)", f"{r['health_p50_ms']:.3f} / {r['health_p99_ms']:.3f}",
         ""],
        ["1-row predict p50 / p99 (ms)",
         f"{r['predict_p50_ms']:.3f} / {r['predict_p99_ms']:.3f}", ""],
        ["predict / health, p50", f"{r['p50_ratio']:.2f}x", "<= 2x"],
        ["predict / health, p99", f"{r['p99_ratio']:.2f}x", "<= 3x"],
        ["ftrl-ps predict in process (rows/s)", f"{r['predict_in_process_rows_per_s']:,.0f}",
         ""],
        [f"1000-row predict requests, {args.clients} clients (rows/s)",
         f"{r['batch_rows_per_s']:,.0f}", ""],
        ["batch scoring / predict in process", f"{r['batch_vs_predict']:.0%}", ">= 50%"],
        ["/v1/learn ingest, 1000-row requests (rows/s)", f"{r['ingest_rows_per_s']:,.0f}",
         ">= 100,000"],
        ["/v1/learn trained (rows/s, until caught up)", f"{r['trained_rows_per_s']:,.0f}", ""],
        ["freshness p50 / p99 / max (s), idle",
         f"{r['freshness_p50_s']:.3f} / {r['freshness_p99_s']:.3f} / "
         f"{r['freshness_max_s']:.3f}", "<= 2 s"],
        ["freshness p50 / p99 (s), during ingest (/v1/status)",
         f"{r['status_freshness_p50_s']} / {r['status_freshness_p99_s']} "
         f"({r['status_freshness_samples']} requests)", "<= 2 s"],
    ]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
