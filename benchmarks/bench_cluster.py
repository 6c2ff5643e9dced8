"""Cluster benchmark: ftrl-ps local clusters against Vowpal Wabbit and ftrl-ps single process.

Usage::

    python benchmarks/bench_cluster.py [--rows 1000000] [--test-rows 100000] [--bits 22]
        [--workers 2] [--servers 1] [--staleness 0,3,inf] [--repeat N] [--data-dir DIR]
        [--json OUT]

On the same generated data as ``bench_single.py`` (cached in ``--data-dir``) it
runs, in one go: Vowpal Wabbit (one pass, parsing included), ftrl-ps in one
process, and ``ftrl-ps train --workers W --servers S --staleness s`` for every
combination asked for. Rows/s is train rows divided by the wall time of the
whole command, from process start to model saved and every process stopped;
the test file is scored afterwards by ``ftrl-ps eval``, as VW's model is.
Bytes per row is the pull/push payload (keys 4 B, n/z 4 B each) divided by the
train rows; HTTP headers are not counted. Shard load is the share of pushed
keys each shard received.

With ``--repeat N`` every system runs N times, interleaved round by round (so
a slow spell of the shared machine hits all of them), and the table shows the
median wall time of each (every run's wall time is printed below it); quality
figures are those of the first round (VW and one process are deterministic).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import bench_single as single  # noqa: E402

#: ``ftrl-ps train`` options every cluster run sets itself (not in ``--extra``)
RESERVED = ("--bits", "--workers", "--servers", "--staleness", "--model", "--metrics-json")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=h.HelpFormatter)
    p.add_argument("--rows", type=h.positive_int, default=1_000_000,
                   help="training rows generated (default %(default)s)")
    p.add_argument("--test-rows", type=h.positive_int, default=100_000,
                   help="test rows generated (default %(default)s)")
    p.add_argument("--bits", type=int, default=22,
                   help="hash bits of the generated data and of every model, VW's too "
                   "(default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default %(default)s)")
    p.add_argument("--workers", default="2", type=h.comma_list("worker counts",
                                                                check=h.positive),
                   help="comma list of worker counts, e.g. 2,4 (default %(default)s)")
    p.add_argument("--servers", default="1", type=h.comma_list("server counts",
                                                                check=h.positive),
                   help="comma list of shard counts, e.g. 1,2 (default %(default)s)")
    p.add_argument("--staleness", default="0,3,inf",
                   type=h.comma_list("staleness values", check=h.staleness),
                   help="comma list of 0..N or inf (default %(default)s)")
    p.add_argument("--extra", default="", type=h.train_flags(reserved=RESERVED),
                   help="more flags for the cluster runs' 'ftrl-ps train', in one argument: "
                   "--extra=--adaptive-rounds, or --extra '--batch-size 1000' (checked by "
                   "ftrl-ps train before any run)")
    p.add_argument("--repeat", type=h.positive_int, default=1,
                   help="runs of every system, interleaved; the median wall time is shown")
    p.add_argument("--data-dir", type=Path, default=h.DEFAULT_DATA_DIR,
                   help="cache of the generated data, also holds the runs' temporary "
                   "files (default benchmarks/.data)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    args.workers = [int(w) for w in args.workers]
    args.servers = [int(s) for s in args.servers]
    return args


def _run_cluster(args: argparse.Namespace, train: Path, test: Path, work: Path,
                 workers: int, servers: int, staleness: str) -> dict[str, Any]:
    tag = f"cluster_w{workers}_s{servers}_st{staleness}"
    metrics = work / f"{tag}.json"
    model = work / f"{tag}.model"
    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(train),
           "--bits", str(args.bits), "--workers", str(workers), "--servers", str(servers),
           "--staleness", staleness, "--model", str(model),
           "--metrics-json", str(metrics), "-q", *args.extra]
    run = h.run_measured(cmd, work / tag)
    if run.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({run.returncode}):\n{run.tail()}")
    m = json.loads(metrics.read_text())
    scored = work / f"{tag}.eval.json"  # scored afterwards, as VW's model is
    ev = subprocess.run(
        [sys.executable, "-m", "ftrl_ps", "eval", str(model), str(test), "--json", str(scored)],
        capture_output=True, text=True,
    )
    if ev.returncode != 0:
        raise RuntimeError(f"ftrl-ps eval failed: {ev.stderr}")
    m.update({f"test_{k}": v for k, v in json.loads(scored.read_text()).items()})
    payload = 12 * (m["keys_pushed"] + m["keys_pulled"])
    return {
        "workers": workers, "servers": servers, "staleness": staleness,
        "wall_seconds": run.wall_seconds, "rows_per_s": args.rows / run.wall_seconds,
        "test_logloss": m["test_logloss"], "test_auc": m["test_auc"],
        "progressive_logloss": m["progressive_logloss"],
        "max_gap_allowed": m.get("max_gap_allowed"),
        "bytes_per_row": payload / max(m["rows"], 1),
        "shard_load": m.get("shard_keys_pushed"),
        "launcher_rss_mib": run.max_rss_mib,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    h.require_vw()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    folder, truth, _ = h.ensure_synth_data(args.data_dir, args.rows, args.test_rows, args.bits,
                                           args.seed)
    train, test = folder / "train.svm", folder / "test.svm"
    train_vw, test_vw = h.libsvm_to_vw(train, folder / "train.vw"), h.libsvm_to_vw(
        test, folder / "test.vw")
    prefix = [sys.executable, "-m", "ftrl_ps"]
    result: dict[str, Any] = {"rows": args.rows, "bits": args.bits, "clusters": []}
    with tempfile.TemporaryDirectory(dir=args.data_dir, prefix="cluster_") as tmp:
        work = Path(tmp)
        print("warm-up (numba cache)", file=sys.stderr)
        single._run_ftrl(prefix, h.head_lines(train, folder / "train_head10000.svm", 10_000),
                         test, args.bits, work, "warmup")
        combos = list(itertools.product(args.servers, args.workers, args.staleness))
        for rnd in range(args.repeat):
            first = rnd == 0
            print(f"round {rnd + 1}/{args.repeat}: vowpal wabbit", file=sys.stderr)
            vw = single._train_vw(train_vw, args.bits, work, "vw")
            if first:
                _, vw_ll, vw_auc = single._score_vw(test_vw, test, work)
                result["vw"] = {"test_logloss": vw_ll, "test_auc": vw_auc, "walls": []}
            result["vw"]["walls"].append(vw.wall_seconds)
            print(f"round {rnd + 1}/{args.repeat}: ftrl-ps single process", file=sys.stderr)
            run, m = single._run_ftrl(prefix, train, test, args.bits, work, "single")
            if first:
                result["single"] = {"test_logloss": m["test_logloss"],
                                    "test_auc": m["test_auc"], "walls": []}
            result["single"]["walls"].append(run.wall_seconds)
            for i, (servers, workers, staleness) in enumerate(combos):
                print(f"round {rnd + 1}/{args.repeat}: cluster: {servers} server(s), "
                      f"{workers} workers, staleness {staleness}", file=sys.stderr)
                c = _run_cluster(args, train, test, work, workers, servers, staleness)
                if first:
                    result["clusters"].append({**c, "walls": []})
                result["clusters"][i]["walls"].append(c["wall_seconds"])
        for entry in [result["vw"], result["single"], *result["clusters"]]:
            entry["wall_seconds"] = statistics.median(entry["walls"])
            entry["rows_per_s"] = args.rows / entry["wall_seconds"]
    _print(result, truth)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _print(r: dict[str, Any], truth: dict[str, Any]) -> None:
    vw, one = r["vw"], r["single"]
    header = ["system", "rows/s", "vs VW", "wall s", "test logloss", "d(single)", "AUC",
              "bytes/row", "max gap"]
    rows = [["vowpal wabbit", f"{vw['rows_per_s']:,.0f}", "1.00x", f"{vw['wall_seconds']:.2f}",
             f"{vw['test_logloss']:.4f}", "", f"{vw['test_auc']:.4f}", "", ""],
            ["ftrl-ps 1 process", f"{one['rows_per_s']:,.0f}",
             f"{one['rows_per_s'] / vw['rows_per_s']:.2f}x", f"{one['wall_seconds']:.2f}",
             f"{one['test_logloss']:.4f}", "", f"{one['test_auc']:.4f}", "", ""]]
    for c in r["clusters"]:
        rows.append([f"{c['servers']} srv + {c['workers']} wrk, s={c['staleness']}",
                     f"{c['rows_per_s']:,.0f}", f"{c['rows_per_s'] / vw['rows_per_s']:.2f}x",
                     f"{c['wall_seconds']:.2f}", f"{c['test_logloss']:.4f}",
                     f"{c['test_logloss'] - one['test_logloss']:+.4f}", f"{c['test_auc']:.4f}",
                     f"{c['bytes_per_row']:.0f}", str(c["max_gap_allowed"])])
    print(f"\n{r['rows']:,} train rows, 2^{r['bits']} slots, one pass; rows/s = train rows / "
          f"wall time from process start to model saved (test scored separately)")
    print(h.format_table(header, rows))
    print(f"true model (Bayes) test logloss {truth['stats']['bayes_test_logloss']:.4f}")
    if len(vw["walls"]) > 1:
        print("wall seconds of every round (median in the table):")
        for name, entry in [("vowpal wabbit", vw), ("ftrl-ps 1 process", one)] + [
                (f"{c['servers']} srv + {c['workers']} wrk, s={c['staleness']}", c)
                for c in r["clusters"]]:
            print(f"  {name:22s} " + ", ".join(f"{w:.2f}" for w in entry["walls"]))
    for c in r["clusters"]:
        if c.get("shard_load"):
            print(f"shard load ({c['servers']} srv, {c['workers']} wrk, s={c['staleness']}): "
                  f"{c['shard_load']}")


if __name__ == "__main__":
    sys.exit(main())
