"""Work handed out on demand against a persistent straggler.

Usage::

    python benchmarks/bench_handout.py [--rows 200000] [--staleness inf,3] [--repeat 2]

A local cluster of 1 server and 4 workers trains one pass over a generated CTR
set (``ftrl-ps gen``, seed 0, cached in ``benchmarks/.data``), with the input
split into fixed shares (``--split shares``, worker i reads the i-th quarter)
or handed out in units by shard 0 (``--split units``, the default), without
stragglers and with worker 0 sleeping 0.2 s before every clock tick
(``--straggle-workers 0 --straggle-prob 1 --straggle-delay 0.2``). Per run: the
pass time (first worker step to last worker step), the whole command's wall
time, each worker's rows, and the test logloss; the ratio of the straggled
pass to the pass without stragglers is the figure of merit (goal <= 1.3 with
units).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402

BITS = 20
STRAGGLER = ["--straggle-workers", "0", "--straggle-prob", "1", "--straggle-delay", "0.2"]


#: ``ftrl-ps train`` options every run sets itself (not in ``--train-args``)
RESERVED = ("--workers", "--staleness", "--split", "--bits", "--test", "--metrics-json",
            "--straggle-workers", "--straggle-prob", "--straggle-delay")


def run(train: Path, test: Path, split: str, staleness: str, extra: list[str],
        work: Path, train_args: list[str]) -> dict[str, Any]:
    out = work / "m.json"
    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(train), "--test", str(test),
           "--bits", str(BITS), "--workers", "4", "--staleness", staleness, "--split", split,
           "-q", "--metrics-json", str(out), *extra, *train_args]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    m = json.loads(out.read_text())
    reports = sorted(m["worker_reports"], key=lambda r: r["worker_index"])
    return {
        "pass": max(r["finished_at"] for r in reports) - min(r["started_at"] for r in reports),
        "wall": wall, "logloss": m["test_logloss"], "rows": [r["rows"] for r in reports],
    }


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=h.HelpFormatter)
    p.add_argument("--rows", type=h.int_at_least(4), default=200_000,
                   help="training rows generated, test rows a quarter of that "
                   "(default %(default)s)")
    p.add_argument("--staleness", default="inf,3",
                   type=h.comma_list("staleness values", check=h.staleness),
                   help="comma-separated SSP staleness values, inf = asynchronous "
                   "(default %(default)s)")
    p.add_argument("--repeat", type=h.positive_int, default=2,
                   help="runs with and without the straggler per setting, interleaved; "
                   "medians are shown (default %(default)s)")
    p.add_argument("--splits", default="shares,units",
                   type=h.comma_list("splits", choices=("shares", "units")),
                   help="comma-separated ftrl-ps train --split values, shares = fixed "
                   "quarters, units = handed out by shard 0 (default %(default)s)")
    p.add_argument("--json", type=Path, help="also write every run's figures to this file")
    p.add_argument("--train-args", default="", metavar="FLAGS",
                   type=h.train_flags(reserved=RESERVED),
                   help="more flags for every run's 'ftrl-ps train', in one argument: "
                   "--train-args=--adaptive-rounds, or --train-args '--batch-size 1000' "
                   "(checked by ftrl-ps train before any run)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    folder, _, _ = h.ensure_synth_data(h.DEFAULT_DATA_DIR, args.rows, args.rows // 4, BITS)
    train, test = folder / "train.svm", folder / "test.svm"
    rows, result = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for s in args.staleness:
            for split in args.splits:
                runs: dict[str, list[dict[str, Any]]] = {"clean": [], "straggler": []}
                for _ in range(args.repeat):  # interleaved: the machine's load hits both
                    for name, extra in (("clean", []), ("straggler", STRAGGLER)):
                        runs[name].append(run(train, test, split, s, extra, Path(tmp),
                                             args.train_args))
                med = {k: statistics.median(r["pass"] for r in v) for k, v in runs.items()}
                wall = {k: statistics.median(r["wall"] for r in v) for k, v in runs.items()}
                row = [s, split, f"{med['clean']:.2f}", f"{med['straggler']:.2f}",
                       f"{med['straggler'] / med['clean']:.2f}x",
                       f"{wall['clean']:.2f}", f"{wall['straggler']:.2f}",
                       f"{wall['straggler'] / wall['clean']:.2f}x",
                       f"{runs['straggler'][0]['logloss']:.5f}",
                       " ".join(str(x) for x in runs["straggler"][0]["rows"])]
                rows.append(row)
                result.append({"staleness": s, "split": split, "runs": runs})
                print("  " + "  ".join(row), file=sys.stderr)
    header = ["s", "split", "pass clean s", "pass straggler s", "ratio", "wall clean s",
              "wall straggler s", "wall ratio", "logloss (straggler)",
              "rows per worker (straggler)"]
    print(f"\n4 workers, 1 server, {args.rows:,} generated rows, 2^{BITS} slots; worker 0 "
          f"sleeps 0.2 s before every tick; median of {args.repeat}"
          + (f"; also {shlex.join(args.train_args)}" if args.train_args else ""))
    print(h.format_table(header, rows))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
