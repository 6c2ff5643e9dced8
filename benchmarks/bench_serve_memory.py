"""Peak memory of ``ftrl-ps serve`` while large JSON bodies arrive at once.

Usage::

    python benchmarks/bench_serve_memory.py MODEL [--tree DIR] [--kind rows|empty]
                                            [--requests 8] [--mib 16]

Starts ``ftrl-ps serve --model MODEL`` of the checkout ``--tree`` (default: this
one; an older one for a before/after: ``git worktree add /tmp/old REV``) on a free
port of 127.0.0.1, posts ``--requests`` JSON bodies of about ``--mib`` MiB to
``/v1/predict`` at once and samples the server's RSS every 10 ms (psutil).
``--kind rows``: rows of 20 features, within the service's 100,000-row limit;
``--kind empty``: ``{"rows": [{}, {}, ...]}`` (millions of empty rows).
Prints the answers' status codes, the wall time, and RSS before, at peak, after.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil


def _body(kind: str, mib: int) -> bytes:
    if kind == "empty":
        return b'{"rows": [' + b"{}, " * ((mib << 20) // 4 - 8) + b"{}]}"
    row = json.dumps({"features": {f"f{j}": 1 for j in range(20)}}).encode()
    return b'{"rows": [' + b", ".join([row] * ((mib << 20) // (len(row) + 2) - 10)) + b"]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path, help="a model file (ftrl-ps train --model)")
    p.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                   help="the checkout whose serve runs (default: this one)")
    p.add_argument("--kind", choices=("rows", "empty"), default="rows")
    p.add_argument("--requests", type=int, default=8, help="bodies posted at once")
    p.add_argument("--mib", type=int, default=16, help="size of each body (MiB)")
    args = p.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "ftrl_ps", "serve", "--model", str(args.model), "--port",
         str(port), "--max-body-mb", str(args.mib + 1)],
        env=dict(os.environ, PYTHONPATH=str(args.tree)), cwd=args.tree,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/ready", trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        body = _body(args.kind, args.mib)
        proc = psutil.Process(server.pid)
        base = peak = proc.memory_info().rss
        done = threading.Event()

        def watch() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, proc.memory_info().rss)
                time.sleep(0.01)

        codes: list[int] = []

        def post() -> None:
            answer = httpx.post(url + "/v1/predict", content=body, timeout=600,
                                headers={"Content-Type": "application/json"}, trust_env=False)
            codes.append(answer.status_code)

        threading.Thread(target=watch, daemon=True).start()
        started = time.perf_counter()
        posts = [threading.Thread(target=post) for _ in range(args.requests)]
        for t in posts:
            t.start()
        for t in posts:
            t.join()
        done.set()
        mib = 1 << 20
        print(f"{args.kind}: {args.requests} bodies of {len(body) / mib:.1f} MiB at once: "
              f"{time.perf_counter() - started:.1f} s, answers {sorted(codes)}, RSS before "
              f"{base / mib:.0f} MiB, peak {peak / mib:.0f} MiB, after "
              f"{proc.memory_info().rss / mib:.0f} MiB")
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
