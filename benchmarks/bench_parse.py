"""Parse speed of LibsvmReader vs sklearn's load_svmlight_file.

Generates (in a temp dir) a CTR-like libsvm file: ``--rows`` rows of 39
features with 7-digit indices and value 1 (``1 1234567:1 2345678:1 ...``),
then prints rows/s and MB/s by wall time and rows per CPU second (best of
``--repeat`` runs) for

* ``LibsvmReader`` (one core: the numba kernel in the calling thread),
* ``LibsvmReader`` through ``prefetch`` (kernel in a background thread),
* ``sklearn.datasets.load_svmlight_file`` (if installed).

Run::

    python benchmarks/bench_parse.py --rows 300000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ftrl_ps.data.libsvm import LibsvmReader
from ftrl_ps.data.prefetch import prefetch

FEATURES = 39
DIGITS = 7


def make_file(path: Path, rows: int, seed: int = 0) -> None:
    """Write ``rows`` lines ``label idx:1 ... idx:1`` with increasing 7-digit indices."""
    rng = np.random.default_rng(seed)
    lo, hi = 10 ** (DIGITS - 1), 10**DIGITS
    with open(path, "wb") as f:
        for start in range(0, rows, 50_000):
            n = min(50_000, rows - start)
            gaps = rng.integers(1, (hi - lo) // FEATURES, size=(n, FEATURES))
            idx = lo + np.cumsum(gaps, axis=1)  # strictly increasing, 7 digits
            powers = 10 ** np.arange(DIGITS - 1, -1, -1)
            digits = (idx[:, :, None] // powers % 10 + 48).astype(np.uint8)  # (n, F, 7)
            tail = np.frombuffer(b":1 ", dtype=np.uint8)
            tokens = np.concatenate([digits, np.broadcast_to(tail, (n, FEATURES, 3))], axis=2)
            line = tokens.reshape(n, FEATURES * (DIGITS + 3))
            line[:, -1] = ord("\n")
            label = np.where(rng.random(n) < 0.2, ord("1"), ord("0")).astype(np.uint8)
            head = np.stack([label, np.full(n, ord(" "), np.uint8)], axis=1)
            f.write(np.concatenate([head, line], axis=1).tobytes())


def best_of(repeat: int, fn: Callable[[], int]) -> tuple[float, float, int]:
    """Fastest wall time, least process CPU time, and the row count of ``repeat`` runs."""
    wall, cpu, rows = float("inf"), float("inf"), 0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        rows = fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=300_000,
                    help="rows of the generated file (default %(default)s)")
    ap.add_argument("--bits", type=int, default=24, help="24: 7-digit indices map directly")
    ap.add_argument("--chunk-bytes", type=int, default=4 << 20,
                    help="bytes LibsvmReader reads at a time (default %(default)s, 4 MiB)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each LibsvmReader case, the best is shown; sklearn runs "
                    "once (default %(default)s)")
    ap.add_argument("--no-sklearn", action="store_true",
                    help="skip sklearn's load_svmlight_file")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ctr.libsvm"
        make_file(path, args.rows)
        size_mb = path.stat().st_size / 1e6
        print(f"file: {args.rows} rows x {FEATURES} features, {size_mb:.1f} MB")
        reader = LibsvmReader(path, args.bits, chunk_bytes=args.chunk_bytes)
        next(iter(LibsvmReader(path, args.bits, chunk_bytes=1 << 16)))  # load/compile kernels

        def run_reader() -> int:
            return sum(b.rows for b in reader)

        def run_prefetch() -> int:
            return sum(b.rows for b in prefetch(reader))

        cases: list[tuple[str, Callable[[], int], int]] = [
            ("LibsvmReader", run_reader, args.repeat),
            ("LibsvmReader+prefetch", run_prefetch, args.repeat),
        ]
        if not args.no_sklearn:
            try:
                from sklearn.datasets import load_svmlight_file
            except ImportError:
                print("sklearn not installed: skipped")
            else:
                def run_sklearn() -> int:
                    return int(load_svmlight_file(str(path), zero_based=True)[0].shape[0])

                cases.append(("sklearn load_svmlight_file", run_sklearn, 1))
        print(f"{'':28s} {'wall s':>7s}  {'M rows/s':>8s}  {'MB/s':>7s}  {'CPU s':>7s}  "
              f"{'M rows/CPU s':>12s}")
        for name, fn, repeat in cases:
            wall, cpu, rows = best_of(repeat, fn)
            assert rows == args.rows, (name, rows)
            print(f"{name:28s} {wall:7.3f}  {rows / wall / 1e6:8.2f}  {size_mb / wall:7.1f}  "
                  f"{cpu:7.3f}  {rows / cpu / 1e6:12.2f}")
        print("(best of the runs; CPU s is process CPU time, steadier than wall time on a "
              "shared machine; sklearn runs once)")


if __name__ == "__main__":
    main()
