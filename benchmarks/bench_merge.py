"""Merge rules compared: a local cluster against one process, on every data set.

Usage::

    python benchmarks/bench_merge.py [--rules contraction,threshold,compose,sum] [--workers 2,4,8]
        [--staleness 0,3,inf] [--repeat 2] [--gen-rows 200000] [--json OUT]
        [--train-args=--adaptive-rounds] [--orders K]

For every train/test pair of ``../shared/data`` that is present (a9a, agaricus,
iPinYou, rcv1 small) and a generated CTR set (``ftrl-ps gen``, seed 0,
``--gen-rows`` rows, cached in ``benchmarks/.data``), it trains one pass in one
process, then ``ftrl-ps train --workers N --staleness S --merge-rule R`` for
every combination, ``--repeat`` times (cluster runs are not deterministic: the
order in which pushes reach the server varies), and prints the test log loss
of each cluster run minus that of the one process: the median and the worst
of the repeats. Defaults of the launcher otherwise (about 20 rounds per
worker, 2**22 slots, alpha 0.1 beta 1 l1 1 l2 1).

``--orders K`` also trains everything (one process and every cluster setting) on
K seeded shuffles of each training file's rows, and compares every cluster run
with the one process *of the same row order*; the table then gives, per setting,
the mean over the K + 1 orders of each order's median difference, its standard
error, the worst run, and in how many orders the median was above +0.001. On a
small test set (iPinYou's has ~50 clicks) the row order alone moves one
process's test log loss by more than 0.001; this says whether a difference is
the merge rule's or the order's.

A second table gives, for the same runs, the cluster's test AUC and mean test
prediction minus one process's (mean over orders and runs): a log loss gap
that comes with a higher mean prediction and the same AUC is the level of the
predictions (calibration), not their order (docs/algorithm.md, section 12).
"""

from __future__ import annotations

import argparse
import json
import random
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

from ftrl_ps.ps.merge import RULES  # noqa: E402

DATA, PAIRS = h.SHARED_DATA, h.REAL_PAIRS
BITS = 22


def train(train_file: Path, test_file: Path, out: Path, extra: list[str]) -> dict[str, float]:
    """Test log loss, AUC and mean prediction of one ``ftrl-ps train`` run."""
    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(train_file), "--test", str(test_file),
           "--bits", str(BITS), "-q", "--metrics-json", str(out), *extra]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr}")
    m = json.loads(out.read_text())
    return {k: float(m[f"test_{k}"]) for k in ("logloss", "auc", "mean_prediction")}


def missing(name: str) -> list[Path]:
    """The files of the real data set ``name`` that are not in ``DATA``."""
    return [DATA / f for f in PAIRS[name] if not (DATA / f).exists()]


def data_sets(gen_rows: int, only: list[str] | None = None) -> dict[str, tuple[Path, Path]]:
    """The data sets to run: ``only`` (every real one is there: see ``main``), else
    every real one present (an absent one skipped, and said so) and the generated one."""
    sets = {}
    for name, (tr, te) in PAIRS.items():
        if only is not None and name not in only:
            continue
        if not missing(name):
            sets[name] = (DATA / tr, DATA / te)
        else:
            print(f"skip {name}: not in {DATA}", file=sys.stderr)
    if gen_rows and (only is None or gen_name(gen_rows) in only):
        folder, _, _ = h.ensure_synth_data(h.DEFAULT_DATA_DIR, gen_rows, gen_rows // 4, BITS)
        sets[gen_name(gen_rows)] = (folder / "train.svm", folder / "test.svm")
    return sets


def gen_name(gen_rows: int) -> str:
    """The generated data set's name: gen200k for 200,000 rows."""
    return f"gen{gen_rows // 1000}k"


def shuffled(train_file: Path, seed: int, folder: Path) -> Path:
    """A copy of ``train_file`` with its lines in a seeded random order."""
    lines = train_file.read_bytes().splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    random.Random(seed).shuffle(lines)
    out = folder / f"{train_file.stem}.order{seed}.svm"
    out.write_bytes(b"".join(lines))
    return out


def order_figures(per_order: list[list[float]]) -> tuple[float, float, float, int, int]:
    """Mean and standard error over orders of each order's median (of its runs'
    differences), the worst run, how many orders' medians are above +0.001, and
    how many orders (also benchmarks/accept_summary.py's item 1)."""
    medians = [statistics.median(d) for d in per_order]
    se = statistics.stdev(medians) / len(medians) ** 0.5 if len(medians) > 1 else 0.0
    above = sum(m > 0.001 for m in medians)
    return (statistics.mean(medians), se, max(max(d) for d in per_order), above,
            len(medians))


def order_summary(per_order: list[list[float]]) -> list[str]:
    """:func:`order_figures` as the table's cells."""
    mean, se, worst, above, orders = order_figures(per_order)
    return [f"{mean:+.4f}", f"{se:.4f}", f"{worst:+.4f}", f"{above}/{orders}"]


#: ``ftrl-ps train`` options every cluster run sets itself (not in ``--train-args``)
RESERVED = ("--workers", "--staleness", "--merge-rule", "--bits", "--test", "--metrics-json")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=h.HelpFormatter)
    p.add_argument("--rules", default="contraction,threshold,compose,sum",
                   type=h.comma_list("merge rules", choices=RULES),
                   help="comma-separated merge rules to compare (ftrl-ps train --merge-rule; "
                   "default %(default)s)")
    p.add_argument("--workers", default="2,4,8",
                   type=h.comma_list("worker counts", check=h.positive),
                   help="comma-separated worker counts (default %(default)s)")
    p.add_argument("--staleness", default="0,3,inf",
                   type=h.comma_list("staleness values", check=h.staleness),
                   help="comma-separated SSP staleness values, inf = asynchronous "
                   "(default %(default)s)")
    p.add_argument("--repeat", type=h.positive_int, default=2,
                   help="cluster runs per setting and row order (default %(default)s)")
    p.add_argument("--gen-rows", type=h.non_negative_int, default=200_000,
                   help="rows of the generated data set, 0 (none) or at least 1000 (named "
                   "gen200k for 200,000; "
                   "cached in benchmarks/.data of this checkout; default %(default)s)")
    p.add_argument("--only", default=None, type=h.comma_list("data set names"),
                   help="comma-separated data set names (a9a, agaricus, ipinyou, rcv1_small, "
                   f"genNk; default: every one present). The real ones are read from {DATA} "
                   "($BENCH_SHARED_DATA, else ../shared/data beside the checkout)")
    p.add_argument("--json", type=Path, help="also write every run's figures to this file")
    p.add_argument("--train-args", default="", metavar="FLAGS",
                   type=h.train_flags(reserved=RESERVED),
                   help="more flags for every cluster run's 'ftrl-ps train', in one argument: "
                   "--train-args=--adaptive-rounds, or --train-args '--batch-size 1000' "
                   "(checked by ftrl-ps train before any run)")
    p.add_argument("--orders", type=h.non_negative_int, default=0, metavar="K",
                   help="also train on K seeded shuffles of each training file and compare "
                   "each cluster run with one process on the same order (default 0)")
    args = p.parse_args(argv)
    if 0 < args.gen_rows < 1000:
        p.error("--gen-rows must be 0 (none) or at least 1000 (the set is named genNk)")
    known = [*PAIRS, *([gen_name(args.gen_rows)] if args.gen_rows else [])]
    unknown = [k for k in args.only or () if k not in known]
    if unknown:
        p.error(f"--only: unknown data set(s) {', '.join(unknown)} (known: "
                f"{', '.join(known)}; genNk needs --gen-rows N000)")
    absent = [f"{k} (no {', '.join(map(str, missing(k)))})" for k in args.only or ()
              if k in PAIRS and missing(k)]
    if absent:  # named: an error, not a skip
        p.error(f"--only: {'; '.join(absent)}: the real data sets are read from {DATA} "
                "($BENCH_SHARED_DATA, else ../shared/data beside the checkout)")
    if not args.only and not args.gen_rows and all(missing(k) for k in PAIRS):
        p.error(f"no data set to run: the real ones are read from {DATA} (see --only, "
                "--gen-rows)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    rules = args.rules
    extra = args.train_args
    workers = [int(w) for w in args.workers]
    stale = args.staleness
    sets = data_sets(args.gen_rows, args.only)
    result: dict[str, Any] = {}
    rows: list[list[str]] = []
    side_rows: list[list[str]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m.json"
        for name, (tr, te) in sets.items():
            result[name] = {"orders": {}}
            per_setting: dict[tuple[int, str, str], list[list[float]]] = {}
            # (AUC, mean prediction) of every cluster run minus one process's, same order
            side: dict[tuple[int, str, str], list[tuple[float, float]]] = {}
            for k in range(args.orders + 1):
                order = "file" if k == 0 else f"shuffle {k}"
                path = tr if k == 0 else shuffled(tr, k, Path(tmp))
                one = train(path, te, out, [])
                single = one["logloss"]
                res = result[name]["orders"][order] = {"single": single, "cluster": {},
                                                       "single_auc": one["auc"],
                                                       "single_mean_prediction":
                                                           one["mean_prediction"],
                                                       "cluster_auc": {},
                                                       "cluster_mean_prediction": {}}
                print(f"{name}, {order}: one process {single:.5f} (AUC {one['auc']:.4f}, "
                      f"mean prediction {one['mean_prediction']:.5f})", file=sys.stderr)
                for n in workers:
                    for s in stale:
                        row = [name, str(n), s]
                        for rule in rules:
                            got = [train(path, te, out, ["--workers", str(n), "--staleness", s,
                                                         "--merge-rule", rule, *extra])
                                   for _ in range(args.repeat)]
                            d = [g["logloss"] - single for g in got]
                            key = f"{rule} N={n} s={s}"
                            res["cluster"][key] = d
                            res["cluster_auc"][key] = [g["auc"] - one["auc"] for g in got]
                            res["cluster_mean_prediction"][key] = [
                                g["mean_prediction"] - one["mean_prediction"] for g in got]
                            side.setdefault((n, s, rule), []).extend(zip(
                                res["cluster_auc"][key], res["cluster_mean_prediction"][key],
                                strict=True))
                            per_setting.setdefault((n, s, rule), []).append(d)
                            row += [f"{statistics.median(d):+.4f}", f"{max(d):+.4f}"]
                        print("  " + "  ".join(row), file=sys.stderr)
                if k > 0:
                    path.unlink()
            # the file order's figures where they always were (earlier JSON readers)
            result[name].update(result[name]["orders"]["file"])
            for n in workers:
                for s in stale:
                    row = [name, str(n), s]
                    for rule in rules:
                        runs = per_setting[(n, s, rule)]
                        if args.orders:
                            row += order_summary(runs)
                        else:
                            row += [f"{statistics.median(runs[0]):+.4f}", f"{max(runs[0]):+.4f}"]
                    rows.append(row)
                    side_rows.append([name, str(n), s] + [
                        f"{statistics.mean(v[i] for v in side[(n, s, rule)]):+{w}}"
                        for rule in rules for i, w in ((0, ".4f"), (1, ".5f"))])
    header = ["data", "N", "s"]
    for rule in rules:
        header += ([f"{rule} mean", "se", "worst", ">+0.001"] if args.orders
                   else [f"{rule} med", "worst"])
    what = (f"on the same row order, over the file's order and {args.orders} shuffles "
            f"({args.repeat} runs each: mean and standard error of the orders' medians, worst "
            f"run, orders whose median is above +0.001)" if args.orders
            else f"({args.repeat} runs each: median and worst)")
    print(f"\ntest logloss of the cluster minus one process {what}; "
          f"{time.perf_counter() - started:.0f} s"
          + (f"; cluster runs also {shlex.join(extra)}" if extra else ""))
    print(h.format_table(header, rows))
    worst = {rule: max(max(v) for r in result.values() for o in r["orders"].values()
                       for k, v in o["cluster"].items() if k.startswith(rule + " "))
             for rule in rules}
    print("worst of all: " + ", ".join(f"{r} {w:+.4f}" for r, w in worst.items()))
    # a log loss gap may be calibration, not fit: iPinYou's test set has a quarter of
    # the training set's click rate, so a model predicting higher everywhere loses log
    # loss at the same ranking (docs/algorithm.md, section 12)
    print("\nthe same runs, mean over orders and runs of the cluster minus one process: "
          "test AUC and mean test prediction")
    print(h.format_table(["data", "N", "s"] + [c for rule in rules
                                                for c in (f"{rule} AUC", "mean p")], side_rows))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
