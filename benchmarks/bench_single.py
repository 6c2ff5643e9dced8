"""Single-process benchmark: ftrl-ps against Vowpal Wabbit on synthetic CTR data.

Usage::

    python benchmarks/bench_single.py [--rows 1000000] [--test-rows 100000] [--bits 22]
                                      [--data-dir DIR] [--repeat N] [--json OUT]
                                      [--before-cmd "env PYTHONPATH=OLD_TREE python -m ftrl_ps"]

Steps (data are cached in ``--data-dir``, default ``benchmarks/.data``):

1. :func:`ftrl_ps.data.synth.generate` (what ``ftrl-ps gen`` runs) writes the
   train/test libsvm files and ``truth.json``; a copy in VW text format
   (``±1 |f idx:val ...``) and a 10,000-row prefix are made (not timed).
2. ftrl-ps: ``python -m ftrl_ps train TRAIN --test TEST --bits B --epochs 1
   --model OUT --metrics-json M.json``, one warm-up on the prefix first (fills
   numba's cache), then the full file ``--repeat`` times (best wall time kept,
   and the median of the per-round ratios to VW), each run followed by a VW
   training run (interleaved, for fair noise). With ``--before-cmd`` an older
   ftrl-ps (e.g. a checkout of the previous commit on ``PYTHONPATH``) runs in
   every round too, right before the current one: a before/after comparison
   under the same machine load.
3. Vowpal Wabbit (pip package, C++ driver): ``--ftrl --ftrl_alpha 0.1
   --ftrl_beta 1 --l1 1 --l2 1 -b B --loss_function logistic``, one pass with
   parsing, ``-f model``; then ``-t -i model -p preds --link logistic`` on the
   test file. Test logloss/AUC come from the predictions via the same metric
   code as ftrl-ps.
4. Memory check: ftrl-ps on the 10,000-row prefix; peak RSS of both sizes.

Wall time is process start to exit; peak RSS is ``ru_maxrss`` from ``os.wait4``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402

PREFIX_ROWS = 10_000
VW_OPTIONS = ["--ftrl", "--ftrl_alpha", "0.1", "--ftrl_beta", "1", "--l1", "1", "--l2", "1",
              "--loss_function", "logistic"]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="training rows (default 1e6)")
    p.add_argument("--test-rows", type=int, default=100_000, help="test rows (default 1e5)")
    p.add_argument("--bits", type=int, default=22, help="hash bits for data and models")
    p.add_argument("--seed", type=int, default=0, help="generator seed")
    p.add_argument("--data-dir", type=Path, default=h.DEFAULT_DATA_DIR,
                   help="cache folder for generated data (default benchmarks/.data)")
    p.add_argument("--repeat", type=int, default=1,
                   help="timed runs of each trainer on the full file; the fastest is kept")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    p.add_argument("--ftrl-ps-cmd", default=f"{shlex.quote(sys.executable)} -m ftrl_ps",
                   help="command prefix that runs ftrl-ps (default: this python -m ftrl_ps)")
    p.add_argument("--before-cmd", default=None,
                   help="command prefix of an older ftrl-ps to compare with, run in every "
                        "round as well (e.g. \"env PYTHONPATH=/tmp/old python -m ftrl_ps\")")
    args = p.parse_args(argv)
    if args.rows < 1 or args.test_rows < 1 or args.repeat < 1:
        p.error("--rows, --test-rows and --repeat must be >= 1")
    return args


def _run_ftrl(prefix: list[str], train: Path, test: Path, bits: int, work: Path, tag: str
              ) -> tuple[h.Measured, dict[str, Any]]:
    """Train (timed, as VW's training run) then score the test file in a second process."""
    metrics_path = work / f"{tag}.metrics.json"
    model = work / f"{tag}.model"
    cmd = [*prefix, "train", str(train), "--bits", str(bits), "--epochs", "1",
           "--model", str(model), "--metrics-json", str(metrics_path), "-q"]
    run = h.run_measured(cmd, work / tag)
    if run.returncode != 0:
        raise RuntimeError(f"ftrl-ps train failed ({run.returncode}): {shlex.join(cmd)}\n"
                           f"{run.tail()}")
    metrics = json.loads(metrics_path.read_text())
    metrics["phase_seconds"] = metrics["train_seconds"] + metrics.get("save_seconds", 0.0)
    ev_path = work / f"{tag}.eval.json"
    ev = subprocess.run([*prefix, "eval", str(model), str(test), "--json", str(ev_path)],
                        capture_output=True, text=True)
    if ev.returncode != 0:
        raise RuntimeError(f"ftrl-ps eval failed: {ev.stderr}")
    scored = json.loads(ev_path.read_text())
    metrics["test_logloss"], metrics["test_auc"] = scored["logloss"], scored["auc"]
    return run, metrics


def _train_vw(train: Path, bits: int, work: Path, tag: str) -> h.Measured:
    run = h.run_measured([sys.executable, "-c", h.VW_DRIVER, "-d", str(train), *VW_OPTIONS,
                          "-b", str(bits), "-f", str(work / "vw.model")], work / tag)
    if run.returncode != 0:
        raise RuntimeError(f"VW training failed ({run.returncode}):\n{run.tail()}")
    return run


def _score_vw(test: Path, test_svm: Path, work: Path) -> tuple[h.Measured, float, float]:
    """Score ``test`` with the saved VW model; return the run, test logloss and AUC."""
    preds = work / "vw.preds"
    run = h.run_measured([sys.executable, "-c", h.VW_DRIVER, "-t", "-i", str(work / "vw.model"),
                          "-d", str(test), "-p", str(preds), "--link", "logistic"],
                         work / "vw_test")
    if run.returncode != 0:
        raise RuntimeError(f"VW scoring failed ({run.returncode}):\n{run.tail()}")
    labels, probs = h.read_labels(test_svm), h.read_predictions(preds)
    if labels.shape != probs.shape:
        raise RuntimeError(f"VW wrote {probs.size} predictions for {labels.size} test rows")
    return run, h.logloss(labels, probs), h.roc_auc(labels, probs)


def _measure(args: argparse.Namespace, folder: Path, work: Path) -> dict[str, Any]:
    """Run the trainers (interleaved, so shared-machine noise hits both alike)."""
    train, test = folder / "train.svm", folder / "test.svm"
    train_vw, test_vw = h.libsvm_to_vw(train, folder / "train.vw"), h.libsvm_to_vw(
        test, folder / "test.vw")
    prefix_file = h.head_lines(train, folder / f"train_head{PREFIX_ROWS}.svm", PREFIX_ROWS)
    systems = {"ftrl_ps": shlex.split(args.ftrl_ps_cmd)}
    if args.before_cmd:
        systems = {"ftrl_ps_before": shlex.split(args.before_cmd), **systems}
    for key, prefix in list(systems.items()):
        if subprocess.run([*prefix, "train", "--help"], capture_output=True).returncode != 0:
            print(f"WARNING: `{shlex.join(prefix)} train` is not available; not measured",
                  file=sys.stderr)
            del systems[key]
            continue
        print(f"{key}: warm-up run on the prefix (fills numba's cache)", file=sys.stderr)
        _run_ftrl(prefix, prefix_file, test, args.bits, work, f"warmup_{key}")
    runs: dict[str, list[tuple[h.Measured, dict[str, Any]]]] = {k: [] for k in systems}
    vw_runs = []
    for i in range(args.repeat):
        print(f"round {i + 1}/{args.repeat}: {', '.join(systems)} and VW on the full file",
              file=sys.stderr)
        for key, prefix in systems.items():
            runs[key].append(_run_ftrl(prefix, train, test, args.bits, work, f"{key}_full{i}"))
        vw_runs.append(_train_vw(train_vw, args.bits, work, f"vw_train{i}"))
    result: dict[str, Any] = {"load_average": os.getloadavg()}
    for key, prefix in systems.items():
        ftrl_runs = runs[key]
        full, fm = min(ftrl_runs, key=lambda r: r[0].wall_seconds)
        small, _ = _run_ftrl(prefix, prefix_file, test, args.bits, work, f"{key}_prefix")
        ratios = [v.wall_seconds / r.wall_seconds
                  for (r, _), v in zip(ftrl_runs, vw_runs, strict=True)]
        result[key] = {
            "command": shlex.join(prefix),
            "wall_seconds": full.wall_seconds, "rows_per_s": args.rows / full.wall_seconds,
            "all_wall_seconds": [r.wall_seconds for r, _ in ftrl_runs],
            "median_wall_seconds": statistics.median(r.wall_seconds for r, _ in ftrl_runs),
            "all_cpu_seconds": [r.cpu_seconds for r, _ in ftrl_runs],
            "median_cpu_seconds": statistics.median(r.cpu_seconds for r, _ in ftrl_runs),
            "vw_ratios": ratios, "median_vw_ratio": statistics.median(ratios),
            "train_seconds": fm["train_seconds"],
            "phase_seconds": min(m["phase_seconds"] for _, m in ftrl_runs),
            "progressive_logloss": fm["progressive_logloss"],
            "test_logloss": fm["test_logloss"], "test_auc": fm["test_auc"],
            "max_rss_mib": full.max_rss_mib, "prefix_rows": min(PREFIX_ROWS, args.rows),
            "prefix_max_rss_mib": small.max_rss_mib,
            "rss_growth_mib": full.max_rss_mib - small.max_rss_mib,
            "all_max_rss_mib": [r.max_rss_mib for r, _ in ftrl_runs],
        }
    best = min(vw_runs, key=lambda r: r.wall_seconds)
    scored, vw_logloss, vw_auc = _score_vw(test_vw, test, work)
    result["vw"] = {
        "wall_seconds": best.wall_seconds, "rows_per_s": args.rows / best.wall_seconds,
        "phase_seconds": min(h.phase_seconds(r.stderr) for r in vw_runs),
        "all_wall_seconds": [r.wall_seconds for r in vw_runs],
        "median_wall_seconds": statistics.median(r.wall_seconds for r in vw_runs),
        "all_cpu_seconds": [r.cpu_seconds for r in vw_runs],
        "median_cpu_seconds": statistics.median(r.cpu_seconds for r in vw_runs),
        "test_wall_seconds": scored.wall_seconds,
        "progressive_logloss": h.vw_progressive_loss(best.stderr),
        "test_logloss": vw_logloss, "test_auc": vw_auc, "max_rss_mib": best.max_rss_mib,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    h.require_vw()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    folder, truth, gen = h.ensure_synth_data(args.data_dir, args.rows, args.test_rows,
                                             args.bits, args.seed)
    total_rows = args.rows + args.test_rows
    if gen is not None:
        print(f"generated {folder} in {gen:.1f} s ({total_rows / gen:,.0f} rows/s)",
              file=sys.stderr)
    result: dict[str, Any] = {
        "rows": args.rows, "test_rows": args.test_rows, "bits": args.bits, "seed": args.seed,
        "bayes_test_logloss": truth["stats"]["bayes_test_logloss"],
        "bayes_test_auc": truth["stats"]["bayes_test_auc"],
        "constant_test_logloss": truth["stats"]["constant_test_logloss"],
        "generator_rows_per_s": total_rows / gen if gen else None,
    }
    with tempfile.TemporaryDirectory(dir=args.data_dir, prefix="run_") as tmp:
        result.update(_measure(args, folder, Path(tmp)))
    _print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


_SYSTEMS = (("ftrl_ps_before", "ftrl-ps before (1 process)"), ("ftrl_ps", "ftrl-ps (1 process)"))


def _print_report(r: dict[str, Any]) -> None:
    vw = r["vw"]
    n = r["rows"]
    header = ["system", "rows/s (parse+train)", "vs VW", "rows/s (wall)", "vs VW",
              "median vs VW", "test logloss", "test AUC", "peak RSS MiB"]
    rows = []
    for key, name in _SYSTEMS:
        if key in r:
            f = r[key]
            rows.append([name, f"{n / f['phase_seconds']:,.0f}",
                         f"{vw['phase_seconds'] / f['phase_seconds']:.2f}x",
                         f"{f['rows_per_s']:,.0f}", f"{f['rows_per_s'] / vw['rows_per_s']:.2f}x",
                         f"{f['median_vw_ratio']:.2f}x",
                         f"{f['test_logloss']:.5f}", f"{f['test_auc']:.5f}",
                         f"{f['max_rss_mib']:.0f}"])
    rows.append(["vowpal wabbit", f"{n / vw['phase_seconds']:,.0f}", "1.00x",
                 f"{vw['rows_per_s']:,.0f}", "1.00x", "1.00x", f"{vw['test_logloss']:.5f}",
                 f"{vw['test_auc']:.5f}", f"{vw['max_rss_mib']:.0f}"])
    rows.append(["true model (Bayes)", "", "", "", "", "", f"{r['bayes_test_logloss']:.5f}",
                 f"{r['bayes_test_auc']:.5f}", ""])
    rows.append(["constant predictor", "", "", "", "", "", f"{r['constant_test_logloss']:.5f}",
                 "0.50000", ""])
    print(f"\n{n:,} train rows, {r['test_rows']:,} test rows, 2^{r['bits']} slots, one pass.")
    print("rows/s (parse+train): timed inside each process, from opening the file to the model "
          "written (interpreter, imports and JIT-cache loading excluded);\n"
          "rows/s (wall): train rows / wall time of the whole training process, start-up "
          "included (fastest round); median vs VW: median over rounds of VW's wall time / "
          "ftrl-ps's in the same round.\nTest scoring is a separate process for both.")
    print(h.format_table(header, rows))
    for key, name in _SYSTEMS:
        if key in r:
            f = r[key]
            print(f"{name}: progressive logloss {f['progressive_logloss']:.5f}; memory: peak "
                  f"RSS {f['prefix_max_rss_mib']:.0f} MiB on {f['prefix_rows']:,} rows, "
                  f"{f['max_rss_mib']:.0f} MiB on {n:,} rows "
                  f"(difference {round(f['rss_growth_mib']):+d} MiB)")
    print(f"vw: progressive logloss {vw['progressive_logloss']:.5f}")
    if len(vw["all_wall_seconds"]) > 1:
        walls = {name: ", ".join(f"{w:.2f}" for w in r[key]["all_wall_seconds"])
                 for key, name in (*_SYSTEMS, ("vw", "VW")) if key in r}
        print("wall seconds of every round: " + "; ".join(f"{k} {v}" for k, v in walls.items()))
    cpus = {name: f"{r[key]['median_cpu_seconds']:.2f}"
            for key, name in (*_SYSTEMS, ("vw", "VW")) if key in r}
    print("median CPU seconds (user + system) of a training run: "
          + "; ".join(f"{k} {v}" for k, v in cpus.items()))
    load = r.get("load_average")
    if load:
        print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if r["generator_rows_per_s"]:
        print(f"generator: {r['generator_rows_per_s']:,.0f} rows/s (train + test)")


if __name__ == "__main__":
    sys.exit(main())
