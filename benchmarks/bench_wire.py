"""Push/pull throughput of one shard server over loopback: binary vs JSON bodies.

Starts a real server process (``ftrl-ps server --port 0``) unless ``--url`` is
given, then for each request size and wire format runs rounds of one push plus
one pull of the same sorted random keys through :class:`ftrl_ps.ps.client.PSClient`
and prints a table:

* ``req/s``   — requests per second (a push and a pull count as two);
* ``Mkv/s``   — million key-values per second moved in both directions
  (a pushed key carries delta_n and delta_z, a pulled key returns n and z);
* ``ms/round``— median time of one push + pull round;
* ``srv Mkv/cpu-s`` — the same key-values per CPU second (user + system) of
  the server process alone (psutil; only with a server this script started):
  what one shard core answers, whatever the client costs on the same machine.

Each cell is the median of ``--repeats`` timed runs of about ``--seconds`` each.

Usage::

    python benchmarks/bench_wire.py                     # sizes 1k, 10k, 100k
    python benchmarks/bench_wire.py --sizes 1000 --seconds 0.5 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import psutil

from ftrl_ps.cluster.spawn import spawn_server
from ftrl_ps.ps.client import PSClient
from ftrl_ps.server.options import ShardOptions


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return float("nan")
    t = proc.cpu_times()
    return t.user + t.system


def run_cell(ps: PSClient, keys: np.ndarray, seconds: float, compose: bool = False,
             server: psutil.Process | None = None) -> tuple[float, float, float]:
    """Rounds per second, median seconds per round and rounds per server CPU
    second (nan without ``server``) for ``seconds`` of work.

    ``compose``: pushes carry the merge sections of the compose rule (versions,
    rows, rho) and pulls ask for versions, as a worker under that rule does.
    """
    dn = np.full(keys.size, 0.25, dtype=np.float32)
    dz = np.full(keys.size, -0.5, dtype=np.float32)
    rows = np.full(keys.size, 3, dtype=np.uint32)
    rho = np.ones(keys.size, dtype=np.float32)
    versions = ps.pull_versioned(keys)[2] if compose else None
    times: list[float] = []
    cpu0 = _cpu(server)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 3:
        t0 = time.perf_counter()
        if compose:
            ps.push(keys, dn, dz, (versions, rows, rho))
            versions = ps.pull_versioned(keys)[2]
        else:
            ps.push(keys, dn, dz)
            ps.pull(keys)
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    return len(times) / wall, statistics.median(times), len(times) / max(_cpu(server) - cpu0, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="use this running server instead of starting one")
    parser.add_argument("--bits", type=int, default=20,
                        help="hash bits of the servers started, not used with --url "
                        "(default %(default)s)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000],
                        help="keys per request, one table row each (default 1000 10000 "
                        "100000)")
    parser.add_argument("--seconds", type=float, default=1.5,
                        help="seconds of each timed run, 3 rounds at least "
                        "(default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs per cell, the median is shown (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random keys (default %(default)s)")
    parser.add_argument("--compose", action="store_true",
                        help="also time binary rounds as the compose merge rule sends them")
    parser.add_argument("--compose-url",
                        help="with --url and --compose: a running shard of a versioned merge "
                        "rule (e.g. --merge-rule compose) for the compose rounds")
    parser.add_argument("--json", type=Path,
                        help="also write the table's cells to this file (a list of objects)")
    args = parser.parse_args()
    if args.compose and args.url and not args.compose_url:
        parser.error("--compose with --url needs --compose-url: the compose rounds carry "
                     "merge sections, which only a shard of a versioned merge rule takes")
    if args.compose_url and not (args.url and args.compose):
        parser.error("--compose-url goes with --url and --compose")

    # the plain rounds against a shard of the default rule, the compose rounds
    # against a compose shard (the default rule's refuses their merge sections)
    servers = [] if args.url else [spawn_server(ShardOptions(bits=args.bits))]
    if args.compose and not args.url:
        servers.append(spawn_server(ShardOptions(bits=args.bits, merge_rule="compose")))
    # (url, server process or None) of the plain rounds and of the compose rounds
    shards = [(s.url, psutil.Process(s.pid)) for s in servers] or [(args.url, None)]
    if args.compose_url:
        shards.append((args.compose_url, None))
    plain, composing = shards[0], shards[-1]
    rng = np.random.default_rng(args.seed)
    rows = []
    try:
        clients = {fmt: PSClient(plain[0], wire_format=fmt) for fmt in ("binary", "json")}
        if args.compose:
            clients["compose"] = PSClient(composing[0])
        num_keys = clients["binary"].layout.num_keys
        for size in args.sizes:
            keys = np.sort(rng.choice(num_keys, size, replace=False))
            for fmt, ps in clients.items():
                compose = fmt == "compose"
                proc = composing[1] if compose else plain[1]
                run_cell(ps, keys, 0.2, compose)  # warm-up: connection, kernels
                cells = [run_cell(ps, keys, args.seconds, compose, proc)
                         for _ in range(args.repeats)]
                rounds = statistics.median(c[0] for c in cells)
                ms = statistics.median(c[1] for c in cells) * 1e3
                per_cpu = statistics.median(c[2] for c in cells)
                rows.append((size, fmt, 2 * rounds, 2 * rounds * size * 2 / 1e6, ms,
                             per_cpu * size * 4 / 1e6))
        for ps in clients.values():
            ps.close()
    finally:
        for server in servers:
            server.stop()

    print(f"server {plain[0]}  bits={args.bits}  {args.repeats} x {args.seconds:g} s per cell"
          + (f"; compose rounds: {composing[0]}" if composing[0] != plain[0] else ""))
    print(f"{'keys':>8} {'format':>7} {'req/s':>9} {'Mkv/s':>8} {'ms/round':>9} "
          f"{'srv Mkv/cpu-s':>14}  (compose: binary with the merge sections)")
    for size, fmt, rps, mkv, ms, srv in rows:
        print(f"{size:>8} {fmt:>7} {rps:>9.1f} {mkv:>8.2f} {ms:>9.2f} {srv:>14.2f}")
    by = {(s, f): r for s, f, r, _, _, _ in rows}
    for size in args.sizes:
        print(f"binary/json speed-up at {size} keys: {by[size, 'binary'] / by[size, 'json']:.1f}x")
    if args.json:
        args.json.write_text(json.dumps([
            {"keys": size, "format": fmt, "requests_per_s": rps, "mkv_per_s": mkv,
             "ms_per_round": ms, "server_mkv_per_cpu_s": srv}
            for size, fmt, rps, mkv, ms, srv in rows], indent=1) + "\n")


if __name__ == "__main__":
    main()
