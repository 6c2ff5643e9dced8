"""Push/pull throughput of one shard server over loopback: binary vs JSON bodies.

Starts a real server process (``ftrl-ps server --port 0``) unless ``--url`` is
given, then for each request size and wire format runs rounds of one push plus
one pull of the same sorted random keys through :class:`ftrl_ps.ps.client.PSClient`
and prints a table:

* ``req/s``   — requests per second (a push and a pull count as two);
* ``Mkv/s``   — million key-values per second moved in both directions
  (a pushed key carries delta_n and delta_z, a pulled key returns n and z);
* ``ms/round``— median time of one push + pull round.

Each cell is the median of ``--repeats`` timed runs of about ``--seconds`` each.

Usage::

    python benchmarks/bench_wire.py                     # sizes 1k, 10k, 100k
    python benchmarks/bench_wire.py --sizes 1000 --seconds 0.5 --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ftrl_ps.cluster.spawn import spawn_server
from ftrl_ps.ps.client import PSClient
from ftrl_ps.server.options import ShardOptions


def run_cell(ps: PSClient, keys: np.ndarray, seconds: float, compose: bool = False
             ) -> tuple[float, float]:
    """Rounds per second and median seconds per round for ``seconds`` of work.

    ``compose``: pushes carry the merge sections of the compose rule (versions,
    rows, rho) and pulls ask for versions, as a worker under that rule does.
    """
    dn = np.full(keys.size, 0.25, dtype=np.float32)
    dz = np.full(keys.size, -0.5, dtype=np.float32)
    rows = np.full(keys.size, 3, dtype=np.uint32)
    rho = np.ones(keys.size, dtype=np.float32)
    versions = ps.pull_versioned(keys)[2]
    times: list[float] = []
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
    return len(times) / (time.perf_counter() - start), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="use this running server instead of starting one")
    parser.add_argument("--bits", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compose", action="store_true",
                        help="also time binary rounds as the compose merge rule sends them")
    args = parser.parse_args()

    server = None if args.url else spawn_server(ShardOptions(bits=args.bits))
    url = args.url or server.url  # type: ignore[union-attr]
    rng = np.random.default_rng(args.seed)
    rows = []
    try:
        clients = {fmt: PSClient(url, wire_format=fmt) for fmt in ("binary", "json")}
        num_keys = clients["binary"].layout.num_keys
        for size in args.sizes:
            keys = np.sort(rng.choice(num_keys, size, replace=False))
            for fmt, ps in clients.items():
                run_cell(ps, keys, 0.2)  # warm-up: connection, kernels
                cells = [run_cell(ps, keys, args.seconds) for _ in range(args.repeats)]
                rounds = statistics.median(c[0] for c in cells)
                ms = statistics.median(c[1] for c in cells) * 1e3
                rows.append((size, fmt, 2 * rounds, 2 * rounds * size * 2 / 1e6, ms))
            if args.compose:
                ps = clients["binary"]
                run_cell(ps, keys, 0.2, compose=True)
                cells = [run_cell(ps, keys, args.seconds, True) for _ in range(args.repeats)]
                rounds = statistics.median(c[0] for c in cells)
                ms = statistics.median(c[1] for c in cells) * 1e3
                rows.append((size, "compose", 2 * rounds, 2 * rounds * size * 2 / 1e6, ms))
        for ps in clients.values():
            ps.close()
    finally:
        if server is not None:
            server.stop()

    print(f"server {url}  bits={args.bits}  {args.repeats} x {args.seconds:g} s per cell")
    print(f"{'keys':>8} {'format':>7} {'req/s':>9} {'Mkv/s':>8} {'ms/round':>9}  "
          "(compose: binary with the merge sections)")
    for size, fmt, rps, mkv, ms in rows:
        print(f"{size:>8} {fmt:>7} {rps:>9.1f} {mkv:>8.2f} {ms:>9.2f}")
    by = {(s, f): r for s, f, r, _, _ in rows}
    for size in args.sizes:
        print(f"binary/json speed-up at {size} keys: {by[size, 'binary'] / by[size, 'json']:.1f}x")


if __name__ == "__main__":
    main()
