"""Model quality on the real datasets: ftrl-ps (one process and a local cluster) vs Vowpal Wabbit.

Usage::

    python benchmarks/bench_quality.py [--workers 2] [--staleness 3] [--json OUT]

For every train/test pair in ``../shared/data`` that is present (a9a, agaricus,
iPinYou, rcv1 small) it trains one pass with the default hyper-parameters
(alpha 0.1, beta 1, l1 1, l2 1, 2**22 slots) and prints test log loss and AUC
of: ftrl-ps in one process, ftrl-ps as a local cluster, and Vowpal Wabbit
``--ftrl`` with the same hyper-parameters (scored with the same metric code).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import bench_single as single  # noqa: E402

DATA, PAIRS = h.SHARED_DATA, h.REAL_PAIRS
BITS = 22


def _ftrl(train: Path, test: Path, work: Path, tag: str, extra: list[str]) -> dict[str, Any]:
    out = work / f"{tag}.json"
    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(train), "--test", str(test),
           "--bits", str(BITS), "-q", "--metrics-json", str(out), *extra]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr}")
    m = json.loads(out.read_text())
    return {"logloss": m["test_logloss"], "auc": m["test_auc"]}


def _vw(train: Path, test: Path, work: Path) -> dict[str, Any]:
    train_vw = h.libsvm_to_vw(train, work / f"{train.name}.vw")
    test_vw = h.libsvm_to_vw(test, work / f"{test.name}.vw")
    single._train_vw(train_vw, BITS, work, "vw_train")
    _, ll, auc = single._score_vw(test_vw, test, work)
    return {"logloss": ll, "auc": auc}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2,
                   help="workers of the local cluster, with 1 server (default %(default)s)")
    p.add_argument("--staleness", default="3",
                   help="SSP staleness of the cluster, 0..N or inf (default %(default)s)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    h.require_vw()
    rows = []
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, (tr, te) in PAIRS.items():
            train, test = DATA / tr, DATA / te
            if not (train.exists() and test.exists()):
                print(f"skip {name}: not in {DATA}", file=sys.stderr)
                continue
            print(f"{name} ...", file=sys.stderr)
            one = _ftrl(train, test, work, f"{name}_one", [])
            cl = _ftrl(train, test, work, f"{name}_cluster",
                       ["--workers", str(args.workers), "--staleness", args.staleness])
            # rcv1_small is already in VW's text format ('|f'), which the converter
            # would double; VW is left out there
            vw = _vw(train, test, work) if name != "rcv1_small" else None
            result[name] = {"single": one, "cluster": cl, "vw": vw}
            rows.append([name, f"{one['logloss']:.4f}", f"{one['auc']:.4f}",
                         f"{cl['logloss']:.4f}", f"{cl['logloss'] - one['logloss']:+.4f}",
                         f"{cl['auc']:.4f}",
                         f"{vw['logloss']:.4f}" if vw else "-", f"{vw['auc']:.4f}" if vw else "-"])
    header = ["data", "1 proc logloss", "AUC", f"{args.workers} wrk logloss", "d", "AUC",
              "VW logloss", "VW AUC"]
    print(f"\none pass, alpha 0.1 beta 1 l1 1 l2 1, 2^{BITS} slots; cluster: 1 server, "
          f"{args.workers} workers, staleness {args.staleness}, launcher defaults")
    print(h.format_table(header, rows))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
