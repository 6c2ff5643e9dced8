"""A shard's CPU per request, two checkouts side by side (before/after a change).

Starts one shard server per checkout (``python -m ftrl_ps server`` with
``PYTHONPATH`` set to it), then times, alternating between the shards in
bursts of ``--seconds`` (so that a host whose speed drifts affects both
alike):

* ``round``: one binary push and one pull of the same ``--keys`` sorted random
  keys (what a worker sends each round), server CPU (user + system, psutil) per round;
* ``tick``: one clock tick with stats of a registered worker (staleness
  unbounded: the answer comes at once), server CPU per tick.

Prints, per checkout, the median and the lowest burst, and for rounds the
key-values per server CPU second (a pushed key carries two deltas, a pulled
one returns n and z). Each checkout should have its bytecode compiled
(``python -m compileall -q TREE/ftrl_ps``) or both none, as imports count.

``--floor`` instead puts one checkout's shard beside a bare uvicorn ASGI app
that serves the same rounds with that checkout's store and wire code and
nothing else (no FastAPI, middleware, metrics, token or exactly-once
bookkeeping): how far the shard is from what the HTTP server itself costs.

Usage::

    python benchmarks/bench_shard_ab.py BEFORE_TREE AFTER_TREE --bursts 10
    python benchmarks/bench_shard_ab.py TREE --floor
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import psutil

BINARY = "application/x-ftrl-ps"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: --floor: the rounds served by uvicorn with the store and wire code alone
BARE_APP = """
import sys, anyio, uvicorn
from ftrl_ps.core.memory import keep_freed_buffers
from ftrl_ps.ps import wire
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.store import ParameterStore

keep_freed_buffers()
store = ParameterStore(Layout(bits=int(sys.argv[2])), merge_rule="contraction")

def answer(path, body):
    if path == "/v1/push":
        msg = wire.decode(body, wire.PUSH)
        store.push(msg.keys, msg.values[0], msg.values[1])
        return b'{"applied":true}'
    if path == "/v1/pull":
        n, z, _ = store.pull_versioned(wire.decode(body, wire.KEYS).keys)
        return wire.encode(wire.VALUES, None, (n, z), dtype=store.dtype)
    return b"{}"

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    out = await anyio.to_thread.run_sync(answer, scope["path"], b"".join(chunks))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _start(tree: Path, bits: int, bare: bool = False) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    command = (["-c", BARE_APP, str(port), str(bits)] if bare else
               ["-m", "ftrl_ps", "server", "--port", str(port), "--bits", str(bits)])
    proc = subprocess.Popen(
        [sys.executable, *command],
        env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree.parent,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return proc, f"http://127.0.0.1:{port}"


def _bursts(procs: list[psutil.Process], requests: list[Callable[[], None]], bursts: int,
            seconds: float) -> list[list[float]]:
    """Server CPU ms per request of each shard, one figure per burst (a first
    burst of each is a warm-up); the order of the shards alternates."""
    out: list[list[float]] = [[] for _ in procs]
    for b in range(bursts + 1):
        for i in (range(len(procs)) if b % 2 else reversed(range(len(procs)))):
            t = procs[i].cpu_times()
            cpu0, start, n = t.user + t.system, time.perf_counter(), 0
            while time.perf_counter() - start < seconds:
                requests[i]()
                n += 1
            t = procs[i].cpu_times()
            if b:
                out[i].append((t.user + t.system - cpu0) / n * 1e3)
    if any(x == 0 for burst in out for x in burst):
        print(f"warning: a server's CPU time did not advance in a {seconds:g} s burst (the "
              "clock counts in ticks of 10 ms); give a longer --seconds", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=Path,
                        help="two checkouts of ftrl-ps (one with --floor)")
    parser.add_argument("--floor", action="store_true",
                        help="the checkout's shard against a bare uvicorn app with its store "
                        "(rounds only)")
    parser.add_argument("--keys", type=int, default=34_000,
                        help="keys per push and pull (default %(default)s)")
    parser.add_argument("--bits", type=int, default=20,
                        help="hash bits of the shards (default %(default)s)")
    parser.add_argument("--bursts", type=int, default=8,
                        help="timed bursts per shard and kind, after one warm-up "
                        "(default %(default)s)")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="length of a burst (default %(default)s)")
    args = parser.parse_args()
    if len(args.trees) != (1 if args.floor else 2):
        parser.error("give two checkouts, or one with --floor")
    trees = [t.resolve() for t in args.trees]
    for tree in trees:
        if not (tree / "ftrl_ps" / "__init__.py").is_file():
            parser.error(f"{tree} is not a checkout of ftrl-ps (no ftrl_ps/__init__.py)")
    names = [str(t)[-40:] for t in trees]
    if args.floor:
        trees, names = trees * 2, [names[0], "bare uvicorn app, same store"]

    started = [_start(t, args.bits, bare=args.floor and i == 1) for i, t in enumerate(trees)]
    try:
        client = httpx.Client(timeout=30, trust_env=False)
        for _, url in started:
            for _ in range(300):
                try:
                    if client.get(url + "/ready").status_code in (200, 404):
                        break  # (404: the bare app, which answers every path)
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            else:
                raise SystemExit(f"the shard at {url} did not get ready")
        procs = [psutil.Process(p.pid) for p, _ in started]
        urls = [u for _, u in started]

        # binary bodies as ftrl_ps.ps.wire encodes them (the first checkout's encoder)
        sys.path.insert(0, str(trees[0]))
        from ftrl_ps.ps import wire

        rng = np.random.default_rng(0)
        keys = np.sort(rng.choice(1 << args.bits, args.keys, replace=False))
        push = wire.encode_push(keys, np.full(keys.size, 0.25, np.float32),
                                np.full(keys.size, -0.5, np.float32))
        pull = wire.encode_keys(keys)

        def round_of(url: str) -> Callable[[], None]:
            def one() -> None:
                r = client.post(url + "/v1/push", content=push,
                                headers={"Content-Type": BINARY})
                r.raise_for_status()
                client.post(url + "/v1/pull", content=pull, headers={
                    "Content-Type": BINARY, "Accept": BINARY}).raise_for_status()
            return one

        def tick_of(url: str) -> Callable[[], None]:
            layout = client.get(url + "/v1/status").json()["layout"]
            worker = client.post(url + "/v1/workers", json={
                "worker_index": 0, "num_workers": 1, "layout": layout}).json()["worker_id"]
            clock = [0]

            def one() -> None:
                clock[0] += 1
                client.post(f"{url}/v1/workers/{worker}/clock", json={
                    "clock": clock[0], "stats": {"rows": 1000.0, "logloss_sum": 400.0},
                }).raise_for_status()
            return one

        rounds = _bursts(procs, [round_of(u) for u in urls], args.bursts, args.seconds)
        ticks = (_bursts(procs, [tick_of(u) for u in urls], args.bursts, args.seconds)
                 if not args.floor else [[math.nan], [math.nan]])
    finally:
        for proc, _ in started:
            proc.terminate()
            proc.wait(10)

    print(f"{args.bursts} bursts of {args.seconds:g} s per shard and kind, alternated; "
          f"{args.keys:,}-key push + pull rounds; server CPU (user + system)")
    print(f"{'checkout':40s} {'ms/round':>9} {'(lowest)':>9} {'Mkv/cpu-s':>10} "
          f"{'ms/tick':>8} {'(lowest)':>9}")
    for name, r, t in zip(names, rounds, ticks, strict=True):
        med = statistics.median(r)
        print(f"{name:40s} {med:9.3f} {min(r):9.3f} "
              f"{args.keys * 4 / med / 1e3 if med else math.nan:10.2f} "
              f"{statistics.median(t):8.3f} {min(t):9.3f}")
    paired = [b - a for a, b in zip(rounds[0], rounds[1], strict=True)]
    print(f"rounds, second minus first: median {statistics.median(paired):+.3f} ms, "
          f"lower in {sum(d < 0 for d in paired)}/{len(paired)} bursts")


if __name__ == "__main__":
    main()
